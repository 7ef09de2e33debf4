#!/usr/bin/env python3
"""Scale figures of the Skiff broker (issue #13): memory per idle connection, partition
creation, start-up with many partitions. Prints figures; asserts nothing.

  * RSS per idle connection at 1,000 and 10,000 connections (each after one ApiVersions);
  * time to create 10,000 partitions (CreateTopics: 10 topics of 1,000), and, with
    --partitions, any other totals;
  * start-up time (until ApiVersions is answered) and RSS after start with those partitions;
  * one Metadata request auto-creating 10,000 topics.

Uses the release broker (`cargo build --release -p skiff`, or $SKIFF_BIN) on loopback, a fresh
data directory per size, and stops every process it starts. Run:

    .venv/bin/python bench/scale.py [--partitions 1000 10000 100000] [--connections 1000 10000]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "interop"))

import kafka_wire as kw  # noqa: E402
from skiff_harness import free_port, settled_rss_kb as settle, wait_for_tcp  # noqa: E402


class Broker:
    def __init__(self, binary: str, data: Path, *extra: str):
        self.port = free_port()
        self.argv = [binary, "broker", "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(data),
                     "--set", "admin.listen=none", *extra]
        self.proc: subprocess.Popen | None = None

    def start(self) -> float:
        started = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env={**os.environ, "RUST_LOG": "warn"})
        # The port accepts as soon as it is bound (before the data directory is open): up means
        # an ApiVersions answer.
        wait_for_tcp("127.0.0.1", self.port, 600, self.proc)
        s = kw.connect(f"127.0.0.1:{self.port}", timeout=600)
        kw.api_versions(s)
        s.close()
        return time.monotonic() - started

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def create(bootstrap: str, topics: list[tuple[str, int]]) -> float:
    s = kw.connect(bootstrap, timeout=900)
    started = time.monotonic()
    errors = kw.create_topics_v2(s, 1, topics)
    elapsed = time.monotonic() - started
    bad = [e for e in errors if e[1] != 0]
    if bad:
        print(f"    CreateTopics errors: {bad[:3]}{' ...' if len(bad) > 3 else ''}")
    s.close()
    return elapsed


def partitions_figures(binary: str, total: int) -> None:
    per_topic = min(total, 1000)
    topics = [(f"scale-{i}", per_topic) for i in range(total // per_topic)]
    with tempfile.TemporaryDirectory(prefix="skiff-scale-") as tmp:
        b = Broker(binary, Path(tmp) / "data")
        b.start()
        try:
            took = create(f"127.0.0.1:{b.port}", topics)
            rss = settle(b.proc.pid)
            print(f"  {total:>7} partitions: created in {took:6.2f} s; RSS {rss / 1024:7.1f} MiB")
        finally:
            b.stop()
        up = b.start()
        try:
            rss = settle(b.proc.pid)
            print(f"  {total:>7} partitions: start-up {up:6.2f} s; RSS after start {rss / 1024:7.1f} MiB")
        finally:
            b.stop()


def auto_create_figures(binary: str, n: int) -> None:
    """One Metadata request naming ``n`` topics that do not exist (auto-created, 1 partition)."""
    with tempfile.TemporaryDirectory(prefix="skiff-scale-") as tmp:
        b = Broker(binary, Path(tmp) / "data")
        b.start()
        try:
            s = kw.connect(f"127.0.0.1:{b.port}", timeout=900)
            started = time.monotonic()
            md = kw.metadata_v1(s, 1, [f"auto-{i}" for i in range(n)])
            took = time.monotonic() - started
            s.close()
            print(f"  {n:>7} topics auto-created by one Metadata request in {took:6.2f} s "
                  f"({len(md['topics'])} answered, {len(md['errors'])} errors)")
        finally:
            b.stop()


def connection_figures(binary: str, n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 512:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 512), hard))
    with tempfile.TemporaryDirectory(prefix="skiff-scale-") as tmp:
        b = Broker(binary, Path(tmp) / "data")
        b.start()
        socks: list[socket.socket] = []
        try:
            bootstrap = f"127.0.0.1:{b.port}"
            for _ in range(100):  # warm-up
                s = kw.connect(bootstrap)
                kw.api_versions(s)
                s.close()
            before = settle(b.proc.pid)
            for i in range(n):
                s = kw.connect(bootstrap)
                kw.api_versions(s, correlation_id=i + 1)
                socks.append(s)
            after = settle(b.proc.pid)
            print(f"  {n:>7} idle connections: RSS {before / 1024:.1f} -> {after / 1024:.1f} MiB, "
                  f"{(after - before) / n:.1f} KiB per connection")
        except OSError as e:
            print(f"  {n:>7} idle connections: stopped after {len(socks)}: {e}")
        finally:
            for s in socks:
                s.close()
            b.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.environ.get("SKIFF_BIN", str(ROOT / "target/release/skiff")))
    ap.add_argument("--partitions", type=int, nargs="*", default=[1000, 10000])
    ap.add_argument("--connections", type=int, nargs="*", default=[1000, 10000])
    ap.add_argument("--auto-create", type=int, nargs="*", default=[10000])
    args = ap.parse_args()
    print(f"broker: {args.binary}")
    print("connections")
    for n in args.connections:
        connection_figures(args.binary, n)
    print("partitions")
    for total in args.partitions:
        partitions_figures(args.binary, total)
    for n in args.auto_create:
        auto_create_figures(args.binary, n)


if __name__ == "__main__":
    main()
