#!/usr/bin/env python3
"""Cluster mode against the embedded log, on one broker, in one run. Prints figures; asserts
nothing.

For each mode -- the embedded log (`flush = always`), then cluster mode with
`produce.commit.interval.ms` = 10, 50 and 250 (a throwaway PostgreSQL 15 and a `file://` object
store in a temp dir on the same disk; `--s3` adds a 250 ms run on moto's S3 server) -- a fresh
release broker:

  * raw_load (Skiff's raw-protocol load generator: prebuilt 1 MiB batches of 1 KiB records,
    4 connections x 8 in flight, one partition, acks=all) produces for --seconds, then consumes
    it all back: MB/s each way, and raw_load's p50/p99 produce latency of those big batches;
  * a confluent-kafka producer sends 1 KiB records at --rate records/s for --seconds
    (linger.ms=5, acks=all) while a confluent-kafka consumer tails the same topic: p50/p99 of
    each record's latency from produce() to its delivery report, and how many records the
    tailing consumer got;
  * in cluster mode, from the broker's /metrics: objects uploaded (PUTs) per second and per GB
    written, and the fetch cache's hit ratio for the tailing consumer (hits / (hits + misses)
    of batches fetched during the tail phase).

    cargo build --release -p skiff --bin skiff
    cargo build --release -p skiff-interop --example raw_load
    .venv/bin/python bench/cluster.py [--seconds 5] [--rate 2000] [--s3]

PostgreSQL comes from tests/interop/cluster_util.py (Debian's postgresql 15, run as the postgres
user when root; moto_server from the test venv for --s3). Everything started is stopped and the
temp dirs removed, whatever happens.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import benchlib
from benchlib import BINARY, RAW_LOAD, ROOT, free_port, stop_broker
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(ROOT / "tests/interop"))
import cluster_util  # noqa: E402

VALUE = b"x" * 1024


def metrics(admin_port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(skiff_cluster_[a-z_]+) ([0-9.e+]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def raw_load(port: int, seconds: int) -> dict[str, float]:
    r = subprocess.run([str(RAW_LOAD), "--target", f"b=127.0.0.1:{port}", "--seconds", str(seconds), "--acks", "-1"],
                       capture_output=True, text=True, timeout=600)
    out: dict[str, float] = {}
    for line in r.stdout.splitlines():
        m = re.match(r"b\s+produce.*?([\d.]+) MB/s\s+p50\s+([\d.]+) ms\s+p99\s+([\d.]+) ms", line)
        if m:
            out["produce"], out["p50"], out["p99"] = map(float, m.groups())
        m = re.match(r"b\s+consume.*?([\d.]+) MB/s", line)
        if m:
            out["consume"] = float(m.group(1))
    if r.returncode != 0 or "produce" not in out:
        print(f"    raw_load failed (exit {r.returncode}): {r.stdout[-500:]} {r.stderr[-1500:]}")
    return out


def tail(port: int, seconds: float, rate: int) -> dict[str, float]:
    """A producer at `rate` records/s and a consumer tailing the topic, for `seconds`."""
    bootstrap = f"127.0.0.1:{port}"
    topic = "tail"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(timeout=30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tail-bench", "log_level": 3,
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "log_level": 3})
    # Both connected before the clock starts.
    producer.produce(topic, VALUE)
    producer.flush(30)
    stop = threading.Event()
    received = [0]

    def consume() -> None:
        while not stop.is_set():
            for m in consumer.consume(1000, timeout=0.2):
                if m.error() is None:
                    received[0] += 1

    reader = threading.Thread(target=consume)
    reader.start()
    latencies: list[float] = []
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        due = started + sent / rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        t0 = time.monotonic()
        producer.produce(topic, VALUE, on_delivery=lambda err, _m, t0=t0: err is None and latencies.append(time.monotonic() - t0))
        sent += 1
        producer.poll(0)
    producer.flush(60)
    deadline = time.monotonic() + 10
    while received[0] < sent + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    reader.join()
    consumer.close()
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else float("nan")  # noqa: E731
    return {"sent": sent, "acked": len(latencies), "received": received[0], "p50": pick(0.5), "p99": pick(0.99)}


def run_mode(tmp: Path, name: str, cluster: dict | None, args) -> None:
    d = tmp / name
    d.mkdir()
    port, admin_port = free_port(), free_port()
    config = f'listen = "127.0.0.1:{port}"\n"admin.listen" = "127.0.0.1:{admin_port}"\n'
    env = {}
    if cluster:
        config += f'"cluster.metadata" = "{cluster["metadata"]}"\n"cluster.objects" = "{cluster["objects"]}"\n'
        config += f'"produce.commit.interval.ms" = {cluster["interval"]}\n'
        if cluster.get("endpoint"):
            config += f'"s3.endpoint" = "{cluster["endpoint"]}"\n"s3.region" = "us-east-1"\n'
            env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    proc = benchlib.start_broker(d, config, [port, admin_port], env=env, name=name)
    try:
        before = metrics(admin_port) if cluster else {}
        t0 = time.monotonic()
        raw = raw_load(port, args.seconds)
        raw_elapsed = time.monotonic() - t0
        after_raw = metrics(admin_port) if cluster else {}
        t = tail(port, args.seconds, args.rate)
        after_tail = metrics(admin_port) if cluster else {}
    finally:
        stop_broker(proc)
    line = (f"  {name:22} raw_load produce {raw.get('produce', float('nan')):7.1f} MB/s "
            f"(p50 {raw.get('p50', float('nan')):6.1f} / p99 {raw.get('p99', float('nan')):6.1f} ms per 1 MiB batch)   "
            f"consume {raw.get('consume', float('nan')):7.1f} MB/s")
    print(line)
    print(f"  {'':22} 1 KiB records at {args.rate}/s: delivery p50 {t['p50']:6.1f} ms  p99 {t['p99']:6.1f} ms  "
          f"({t['acked']}/{t['sent']} acknowledged, tailing consumer got {t['received']})")
    if cluster:
        puts = after_raw.get("skiff_cluster_objects_put_total", 0) - before.get("skiff_cluster_objects_put_total", 0)
        put_bytes = (after_raw.get("skiff_cluster_object_bytes_put_total", 0)
                     - before.get("skiff_cluster_object_bytes_put_total", 0))
        # raw_load's produce phase is --seconds of the raw phase; PUTs happen only then.
        per_s = puts / args.seconds if args.seconds else float("nan")
        per_gb = puts / (put_bytes / 1e9) if put_bytes else float("nan")
        hits = after_tail.get("skiff_cluster_fetch_cache_hits_total", 0) - after_raw.get("skiff_cluster_fetch_cache_hits_total", 0)
        misses = (after_tail.get("skiff_cluster_fetch_cache_misses_total", 0)
                  - after_raw.get("skiff_cluster_fetch_cache_misses_total", 0))
        ratio = hits / (hits + misses) if hits + misses else float("nan")
        tail_puts = (after_tail.get("skiff_cluster_objects_put_total", 0) - after_raw.get("skiff_cluster_objects_put_total", 0))
        local = after_tail.get("skiff_cluster_reads_local_total", 0) - after_raw.get("skiff_cluster_reads_local_total", 0)
        asked = (after_tail.get("skiff_cluster_reads_postgres_total", 0)
                 - after_raw.get("skiff_cluster_reads_postgres_total", 0))
        print(f"  {'':22} objects: {puts:.0f} PUTs in the raw_load produce phase = {per_s:.1f}/s, "
              f"{per_gb:.0f} per GB written (mean object {put_bytes / max(puts, 1) / 1e6:.2f} MB); "
              f"{tail_puts / args.seconds:.1f} PUTs/s at {args.rate} records/s; "
              f"tailing fetch cache hit ratio {ratio:.3f} ({hits:.0f} hits, {misses:.0f} misses); "
              f"tailing partition reads without PostgreSQL {local:.0f} of {local + asked:.0f}; "
              f"raw phase {raw_elapsed:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=5, help="produce phase of each run (default 5)")
    ap.add_argument("--rate", type=int, default=2000, help="records/s of the latency and tail phase (default 2000)")
    ap.add_argument("--s3", action="store_true", help="also a 250 ms run on moto's S3 server")
    args = ap.parse_args()
    for needed, how in ((BINARY, "cargo build --release -p skiff --bin skiff"),
                        (RAW_LOAD, "cargo build --release -p skiff-interop --example raw_load")):
        if not needed.exists():
            sys.exit(f"{needed} is missing: run `{how}` first")
    tmp = Path(tempfile.mkdtemp(prefix="skiff-cluster-bench-"))
    pg = moto = None
    try:
        pg = cluster_util.start_postgres()
        print(f"one broker, loopback, 2 cores shared with the clients and PostgreSQL; raw_load acks=all for "
              f"{args.seconds} s then consume; objects in a directory on the same disk")
        run_mode(tmp, "embedded log", None, args)
        for interval in (10, 50, 250):
            objects = tmp / f"objects-{interval}"
            objects.mkdir()
            run_mode(tmp, f"cluster {interval} ms", {
                "metadata": pg.create_database(f"bench_{interval}"),
                "objects": f"file://{objects}",
                "interval": interval,
            }, args)
        if args.s3:
            moto = cluster_util.start_moto(tmp)
            moto.create_bucket("bench")
            run_mode(tmp, "cluster 250 ms, moto S3", {
                "metadata": pg.create_database("bench_s3"),
                "objects": "s3://bench/skiff",
                "interval": 250,
                "endpoint": moto.endpoint,
            }, args)
    finally:
        if moto is not None:
            moto.close()
        if pg is not None:
            pg.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
