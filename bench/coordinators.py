#!/usr/bin/env python3
"""The price of group coordination through PostgreSQL, and the time a coordinator's groups are
unserved when its broker dies. Prints figures; asserts nothing.

  * heartbeat_load (Skiff's raw-protocol ConsumerGroupHeartbeat generator, 8 connections, one
    request in flight each) against one broker on the embedded default, then against one broker
    in cluster mode (a throwaway PostgreSQL 15, `file://` objects): requests/s and p50/p99 of
    joins and leaves (each a change of the group's state, stored before it is answered: in the
    group log, or in PostgreSQL under the shard's epoch) and of steady heartbeats (nothing to
    store);
  * failover: three brokers in cluster mode; one member joins a group; its coordinator's broker
    is SIGKILLed; heartbeat_load asks the others until the group answers again with the same
    member ID and epoch: the time from the kill, for `cluster.lease.ms` 3000 and 10000 (the
    default). The lease bounds it: the others take the shard only once the dead broker's lease
    has lapsed.

    cargo build --release -p skiff --bin skiff
    cargo build --release -p skiff-interop --example heartbeat_load
    .venv/bin/python bench/coordinators.py [--seconds 5] [--rounds 2]

Everything started is stopped and the temp dirs removed, whatever happens.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib
from benchlib import BINARY, ROOT, free_port, stop_broker

sys.path.insert(0, str(ROOT / "tests/interop"))
import cluster_util  # noqa: E402

HEARTBEAT_LOAD = ROOT / "target/release/examples/heartbeat_load"


def broker_config(port: int, cluster: dict | None, node: int = 1) -> str:
    config = (f'listen = "127.0.0.1:{port}"\n"admin.listen" = "127.0.0.1:{free_port()}"\n"node.id" = {node}\n'
              '"auto.create.topics.enable" = false\n')
    if cluster:
        config += (f'"cluster.metadata" = "{cluster["metadata"]}"\n"cluster.objects" = "{cluster["objects"]}"\n'
                   f'"cluster.lease.ms" = {cluster.get("lease", 10000)}\n')
    return config


def load(tmp: Path, name: str, cluster: dict | None, seconds: int) -> None:
    d = tmp / name.replace(" ", "-")
    d.mkdir()
    port = free_port()
    proc = benchlib.start_broker(d, broker_config(port, cluster), [port], name="broker")
    try:
        out = subprocess.run([str(HEARTBEAT_LOAD), "load", f"127.0.0.1:{port}", "--seconds", str(seconds)],
                             capture_output=True, text=True, timeout=4 * seconds + 60)
    finally:
        stop_broker(proc)
    if out.returncode != 0:
        print(f"  {name:26} failed: {out.stderr.strip()}")
        return
    f = dict(kv.split("=") for kv in out.stdout.split())
    print(f"  {name:26} joins+leaves {float(f['churn_per_s']):7.0f}/s  p50 {float(f['churn_p50_ms']):6.2f} ms  "
          f"p99 {float(f['churn_p99_ms']):6.2f} ms   steady heartbeats {float(f['steady_per_s']):7.0f}/s  "
          f"p50 {float(f['steady_p50_ms']):6.2f} ms  p99 {float(f['steady_p99_ms']):6.2f} ms")


def failover(tmp: Path, pg, lease_ms: int, round_: int) -> str:
    d = tmp / f"failover-{lease_ms}-{round_}"
    d.mkdir()
    objects = d / "objects"
    objects.mkdir()
    cluster = {"metadata": pg.create_database(f"failover_{lease_ms}_{round_}"), "objects": f"file://{objects}",
               "lease": lease_ms}
    ports = {n: free_port() for n in (1, 2, 3)}
    procs = {}
    try:
        for n, port in ports.items():
            procs[n] = benchlib.start_broker(d, broker_config(port, cluster, node=n), [port], name=f"node-{n}")
        addrs = ",".join(f"127.0.0.1:{p}" for p in ports.values())
        tool = subprocess.Popen([str(HEARTBEAT_LOAD), "failover", addrs], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = tool.stdout.readline().strip()
            if not line.startswith("coordinator="):
                return f"no coordinator ({line!r}; {tool.stderr.read()[:300]})"
            victim = int(line.split("=")[1])
            os.killpg(procs[victim].pid, signal.SIGKILL)
            procs[victim].wait(10)
            tool.stdin.write("killed\n")
            tool.stdin.flush()
            out, err = tool.communicate(timeout=120)
        finally:
            if tool.poll() is None:
                tool.kill()
        if tool.returncode != 0:
            return f"failed: {err.strip()[:300]}"
        f = dict(kv.split("=") for kv in out.split())
        return f"{int(f['recovered_ms']):6d} ms (node {victim} killed, node {f['new_coordinator']} took over)"
    finally:
        for proc in procs.values():
            stop_broker(proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=5, help="each load phase (default 5)")
    ap.add_argument("--rounds", type=int, default=2, help="failovers per lease (default 2)")
    args = ap.parse_args()
    for needed, how in ((BINARY, "cargo build --release -p skiff --bin skiff"),
                        (HEARTBEAT_LOAD, "cargo build --release -p skiff-interop --example heartbeat_load")):
        if not needed.exists():
            sys.exit(f"{needed} is missing: run `{how}` first")
    tmp = Path(tempfile.mkdtemp(prefix="skiff-coordinator-bench-"))
    pg = None
    try:
        pg = cluster_util.start_postgres()
        print("one broker, loopback, 2 cores shared with the load generator and PostgreSQL; "
              f"8 connections x 1 in flight, {args.seconds} s per phase")
        load(tmp, "embedded (group log)", None, args.seconds)
        objects = tmp / "objects"
        objects.mkdir()
        load(tmp, "cluster mode (PostgreSQL)", {"metadata": pg.create_database("heartbeats"),
                                                 "objects": f"file://{objects}"}, args.seconds)
        print("failover: three brokers, SIGKILL of a group's coordinator until the group answers again")
        for lease in (3000, 10000):
            for r in range(args.rounds):
                print(f"  cluster.lease.ms={lease:<6} round {r + 1}: {failover(tmp, pg, lease, r)}")
    finally:
        if pg is not None:
            pg.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
