#!/usr/bin/env python3
"""Why share groups exist: parallelism beyond the partition count. Records/s consumed from ONE
partition, with a per-record processing delay, by 1, 4 and 8 confluent-kafka ShareConsumers in
one share group, against one classic-group Consumer, in the same run on the same broker. Prints
figures; asserts nothing.

One run:
  * starts target/release/skiff (`group.share.enable = true`, `flush = "interval"`) on loopback
    with a temp data dir;
  * for each case, a fresh one-partition topic and group: the consumers start (each in its own
    thread, each its own client), markers are produced until one of them receives one (a new
    share partition starts at the end of the log), then --records records are produced; the
    clock runs from the first record received to the last one processed;
  * the records are produced in batches of --batch (default 10), and each ShareConsumer takes
    at most --max-poll-records records per fetch (default 100): a fetch acquires whole batches
    (Kafka's default `batch_optimized` acquire mode, the one librdkafka uses), so one batch of
    2,000 records would go to one member whole and leave the others idle;
  * each consumer "processes" a record by sleeping --delay-ms (the GIL is released while it
    sleeps, so the threads overlap as processes would); ShareConsumers acknowledge implicitly (on
    the next poll), the classic consumer commits nothing;
  * records/s per case, and each case's speed-up over the classic consumer.

    cargo build --release -p skiff --bin skiff
    .venv/bin/python bench/share.py [--records 2000] [--delay-ms 2] [--members 1,4,8] [--batch 10] [--max-poll-records 100]

The broker is stopped (SIGTERM, SIGKILL after 10 s) and the temp dir removed, whatever happens.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import benchlib
from benchlib import BINARY, free_port, stop_broker
from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic


def produce(bootstrap: str, topic: str, values: list[bytes], batch: int = 10000) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": batch, "log_level": 4})
    for v in values:
        p.produce(topic, v, partition=0)
    if p.flush(60):
        raise RuntimeError("records not acknowledged in 60 s")


class Case:
    """Consumers of one case and what they received (values tagged with this case's run ID)."""

    def __init__(self, records: int, delay_s: float, max_poll_records: int):
        self.records = records
        self.max_poll_records = max_poll_records
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.done = 0
        self.first: float | None = None
        self.last: float | None = None
        self.primed = threading.Event()
        self.finished = threading.Event()
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.per_member: dict[int, int] = {}

    def process(self, values: list[bytes], member: int) -> None:
        real = [v for v in values if v != b"marker"]
        if real:
            with self.lock:
                self.per_member[member] = self.per_member.get(member, 0) + len(real)
        for v in values:
            if v == b"marker":
                self.primed.set()
                continue
            if self.first is None:
                self.first = time.monotonic()
            time.sleep(self.delay_s)
            with self.lock:
                self.done += 1
                if self.done >= self.records:
                    self.last = time.monotonic()
                    self.finished.set()


def share_member(bootstrap: str, group: str, topic: str, case: Case, i: int) -> None:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"share-{i}",
                       "max.poll.records": case.max_poll_records, "log_level": 3})
    try:
        c.subscribe([topic])
        while not case.stop.is_set():
            batch = []
            for m in c.poll(0.1):
                if m.error() is not None:
                    case.errors.append(str(m.error()))
                    continue
                batch.append(m.value())
            case.process(batch, i)
    finally:
        c.close()


def classic_member(bootstrap: str, group: str, topic: str, case: Case) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest",
                  "enable.auto.commit": False, "log_level": 3})
    try:
        c.subscribe([topic])
        while not case.stop.is_set():
            m = c.poll(0.1)
            if m is None:
                continue
            if m.error() is not None:
                case.errors.append(str(m.error()))
                continue
            case.process([m.value()], 0)
    finally:
        c.close()


def run_case(bootstrap: str, admin: AdminClient, kind: str, members: int, args) -> float:
    topic, group = f"share-bench-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(timeout=20)
    case = Case(args.records, args.delay_ms / 1000, args.max_poll_records)
    if kind == "share":
        threads = [threading.Thread(target=share_member, args=(bootstrap, group, topic, case, i), daemon=True)
                   for i in range(members)]
    else:
        threads = [threading.Thread(target=classic_member, args=(bootstrap, group, topic, case), daemon=True)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60
        while not case.primed.wait(0.5):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{kind}: no marker received in 60 s ({case.errors[:3]})")
            produce(bootstrap, topic, [b"marker"])
        # Every member is assigned the partition by its next heartbeats (1 s apart).
        time.sleep(3)
        produce(bootstrap, topic, [b"r-%06d" % i for i in range(args.records)], args.batch)
        budget = 30 + args.records * args.delay_ms / 1000 * 2
        if not case.finished.wait(budget):
            raise TimeoutError(f"{kind} x{members}: {case.done}/{args.records} records in {budget:.0f} s "
                               f"({case.errors[:3]})")
    finally:
        case.stop.set()
        for t in threads:
            t.join(30)
    print(f"    records per member: {sorted(case.per_member.values(), reverse=True)}")
    return case.records / (case.last - case.first)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2000, help="records per case (default 2000)")
    ap.add_argument("--delay-ms", type=float, default=2.0, help="processing time per record (default 2 ms)")
    ap.add_argument("--members", default="1,4,8", help="share consumers per case (default 1,4,8)")
    ap.add_argument("--batch", type=int, default=10,
                    help="records per produced batch (default 10: a share fetch acquires whole batches)")
    ap.add_argument("--max-poll-records", type=int, default=100,
                    help="ShareConsumer max.poll.records: the records one fetch acquires (default 100)")
    args = ap.parse_args()
    if not BINARY.exists():
        sys.exit(f"{BINARY} is missing: run `cargo build --release -p skiff --bin skiff` first")
    tmp = Path(tempfile.mkdtemp(prefix="skiff-share-bench-"))
    proc = None
    try:
        port = free_port()
        proc = benchlib.start_broker(tmp, f"""
listen = "127.0.0.1:{port}"
"admin.listen" = "none"
"flush" = "interval"
"group.share.enable" = true
"group.share.heartbeat.interval.ms" = 1000
"group.share.min.heartbeat.interval.ms" = 1000
""", [port])
        bootstrap = f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
        print(f"broker: {BINARY}; one partition, {args.records} records per case, {args.delay_ms:g} ms of "
              f"processing per record, loopback, 2 CPUs shared by everything")
        classic = run_case(bootstrap, admin, "classic", 1, args)
        print(f"  classic consumer group, 1 consumer   {classic:8.0f} records/s   1.0x")
        for n in [int(x) for x in args.members.split(",") if x.strip()]:
            rate = run_case(bootstrap, admin, "share", n, args)
            print(f"  share group, {n} consumer(s){'':11}{rate:8.0f} records/s   {rate / classic:.1f}x")
        del admin
    finally:
        if proc is not None:
            stop_broker(proc)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
