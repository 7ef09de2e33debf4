#!/usr/bin/env python3
"""What TLS + SASL cost on one Skiff broker: confluent-kafka produce and consume throughput
through a PLAINTEXT listener and a SASL_SSL (SCRAM-SHA-512) listener of the same release broker.
Prints figures; asserts nothing (the issue's target is SASL_SSL >= 0.7x PLAINTEXT). With the
client on the same 2 cores, the client's own TLS work counts against the broker's throughput, so
each run also prints the CPU milliseconds per MB of the broker and of the client.

One run:
  * makes a CA and a broker certificate (SAN IP:127.0.0.1) with `openssl` in a temp dir;
  * starts target/release/skiff with PLAINTEXT and SASL_SSL listeners on loopback, a temp data
    dir and `flush = "interval"` (so the disk does not dominate), and creates a SCRAM user with
    AdminClient over PLAINTEXT;
  * PLAINTEXT, SASL_SSL, PLAINTEXT, SASL_SSL: each produces 1 KiB values to a fresh
    one-partition topic as fast as it can (linger.ms=5, batch.size=1000000, acks=1, no
    compression) for --seconds (default 10) or --mib MiB, then consumes that topic from the
    beginning; MB/s (10^6 bytes of values, acknowledged or received) per run, the best of each
    listener and the SASL_SSL/PLAINTEXT ratios. Each client connects and logs in before its
    clock starts (the producer with one untimed warm-up record, counted in "records");
  * then, on the same broker, runs target/release/examples/raw_load (Skiff's raw-protocol load
    generator: prebuilt 1 MiB batches, 4 connections x 8 in flight, no client library to speak
    of) against one listener per run, PLAINTEXT, SASL_SSL, SASL_SSL, PLAINTEXT: each produces for
    --raw-seconds (default 5, acks=1) and then consumes what it produced. It prints each run, the
    SASL_SSL/PLAINTEXT ratios of the mean rates, and the ratio of the broker's CPU per MB moved
    (with a client this cheap, the broker's own TLS + SASL cost: the throughput a broker with its
    cores to itself keeps); skipped with a note when raw_load is not built
    (`cargo build --release -p skiff-interop --example raw_load`);
  * with --authorizer, then runs `cargo bench -p skiff-auth --bench authorizer` (about 2 min to
    compile) and prints its per-check times.
The broker is stopped (SIGTERM, SIGKILL after 10 s) and the temp dirs removed, whatever happens.

    cargo build --release -p skiff --bin skiff
    cargo build --release -p skiff-interop --example raw_load   # optional: the raw-protocol runs
    .venv/bin/python bench/security.py [--seconds N] [--mib M] [--authorizer]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib
from benchlib import BINARY, RAW_LOAD, ROOT, free_port, stop_broker
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

USER, PASSWORD = "bench", "bench-secret"
VALUE = os.urandom(1024)
MB = 1e6


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user + system) of the broker process, or of this process (the client: Python
    and librdkafka's threads) when `pid` is None."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(pid: int, work):
    """Runs `work()` -> (rate, count); returns it with the broker's and the client's CPU
    milliseconds per MB moved."""
    broker0, client0 = cpu_seconds(pid), cpu_seconds()
    rate, count = work()
    megabytes = max(count, 1) * len(VALUE) / MB
    return rate, count, ((cpu_seconds(pid) - broker0) * 1000 / megabytes,
                         (cpu_seconds() - client0) * 1000 / megabytes)


def make_certs(d: Path) -> tuple[Path, Path]:
    """The CA certificate, and one PEM file with the broker's key and certificate."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem",
            "-days", "2", "-subj", "/CN=Skiff bench CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/broker.key", "-out", f"{d}/broker.csr",
            "-subj", "/CN=localhost")
    (d / "broker.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", f"{d}/broker.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
            "-CAcreateserial", "-out", f"{d}/broker.crt", "-days", "2", "-extfile", f"{d}/broker.ext")
    (d / "broker.pem").write_bytes((d / "broker.key").read_bytes() + (d / "broker.crt").read_bytes())
    return d / "ca.pem", d / "broker.pem"


def start_broker(d: Path, ports: dict[str, int], keystore: Path) -> subprocess.Popen:
    return benchlib.start_broker(d, f"""
listeners = "PLAINTEXT://127.0.0.1:{ports['PLAINTEXT']},SASL_SSL://127.0.0.1:{ports['SASL_SSL']}"
"admin.listen" = "none"
"flush" = "interval"
"ssl.keystore.type" = "PEM"
"ssl.keystore.location" = "{keystore}"
"sasl.enabled.mechanisms" = "SCRAM-SHA-512"
""", list(ports.values()))


def produce(conf: dict, topic: str, seconds: float, mib: float | None) -> tuple[float, int]:
    """(MB/s of acknowledged values, records acknowledged, the warm-up one included)."""
    acked, failed = [0], [0]

    def on_delivery(err, _msg):
        if err is None:
            acked[0] += 1
        else:
            failed[0] += 1

    p = Producer({**conf, "linger.ms": 5, "batch.size": 1000000, "acks": 1, "compression.type": "none",
                  "queue.buffering.max.kbytes": 32768, "on_delivery": on_delivery})
    p.produce(topic, VALUE)  # connects (and authenticates) outside the clock
    if p.flush(30) != 0:
        raise RuntimeError(f"{topic}: the warm-up record was not acknowledged in 30 s")
    limit = int(mib * 1024) if mib else None
    started = time.monotonic()
    deadline = started + (seconds if limit is None else 600)  # --mib: at most 10 min
    sent = 0
    while time.monotonic() < deadline and (limit is None or sent < limit):
        try:
            p.produce(topic, VALUE)
            sent += 1
            if sent % 1000 == 0:
                p.poll(0)
        except BufferError:  # the 32 MiB queue is full
            p.poll(0.005)
    left = p.flush(60)
    elapsed = time.monotonic() - started
    if left or failed[0]:
        print(f"    ({failed[0]} records failed, {left} not acknowledged after a 60 s flush)")
    return (acked[0] - 1) * len(VALUE) / MB / elapsed, acked[0]


def consume(conf: dict, topic: str, expected: int) -> tuple[float, int]:
    """(MB/s of values received, records received), reading from the beginning with assign()."""
    # librdkafka stops fetching while its local queue holds queued.max.messages.kbytes (64 MiB)
    # and then waits fetch.queue.backoff.ms (1 s by default) before fetching again: a broker
    # that fills the queue faster than Python drains it sat idle most of each second
    # (PLAINTEXT consume measured ~200 MB/s that way, slower than SASL_SSL, which fills it
    # less often). 10 ms lets the broker's own speed show.
    c = Consumer({**conf, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                  "fetch.queue.backoff.ms": 10})
    try:
        c.list_topics(topic, timeout=30)  # connects (and authenticates) outside the clock
        got = size = 0
        started = time.monotonic()
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = started + 120
        while got < expected and time.monotonic() < deadline:
            for m in c.consume(10000, 0.5):
                if m.error() is None:
                    got += 1
                    size += len(m.value())
        elapsed = time.monotonic() - started
        if got < expected:
            print(f"    (only {got} of {expected} records in 120 s)")
        return size / MB / elapsed, got
    finally:
        c.close()


def raw_load_bench(ports: dict[str, int], ca: Path, admin: AdminClient, pid: int, seconds: int) -> None:
    """raw_load against one listener at a time, in the order PLAINTEXT, SASL_SSL, SASL_SSL,
    PLAINTEXT (so that neither gains from going first or from the broker's drift over the run);
    each run produces for `seconds` and then consumes what it produced. Prints each run, the
    SASL_SSL/PLAINTEXT ratio of the mean rates, and of the broker's CPU per MB: with a client
    that costs little, that last one is the broker's own TLS + SASL cost, what a broker with
    its cores to itself would lose. Each run's topic is deleted after it (on a tmpfs data dir,
    gigabytes of them would otherwise squeeze the page cache)."""
    if not RAW_LOAD.exists():
        print(f"\nraw_load: skipped ({RAW_LOAD} is missing: run "
              "`cargo build --release -p skiff-interop --example raw_load`)")
        return
    targets = {"PLAINTEXT": f"plaintext=127.0.0.1:{ports['PLAINTEXT']}",
               "SASL_SSL": f"sasl_ssl=sasl_ssl://127.0.0.1:{ports['SASL_SSL']}"}
    print(f"\n== raw_load (raw Kafka protocol, prebuilt batches: little client work), acks=1, {seconds} s "
          "of produce per run, then its records consumed; one listener per run", flush=True)
    # listener -> [(produce MB/s, consume MB/s, broker CPU ms per MB moved)]
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in targets}
    for run, name in enumerate(["PLAINTEXT", "SASL_SSL", "SASL_SSL", "PLAINTEXT"], start=1):
        cmd = [str(RAW_LOAD), "--target", targets[name], "--ca", str(ca), "--user", USER, "--password", PASSWORD,
               "--seconds", str(seconds), "--acks", "1"]
        cpu0 = cpu_seconds(pid)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            print(f"  run {run} {name}: raw_load timed out after 600 s")
            continue
        cpu = cpu_seconds(pid) - cpu0
        rates: dict[str, float] = {}
        records = 0
        for line in r.stdout.splitlines():
            m = re.match(r"\S+\s+(produce|consume)\b.*?([\d.]+) MB/s", line)
            if m:
                rates[m.group(1)] = float(m.group(2))
            m = re.search(r"\((\d+) records\)", line)
            if m:
                records = int(m.group(1))
        if r.returncode != 0 or r.stderr.strip() or "produce" not in rates or "consume" not in rates or not records:
            print(f"  run {run} {name}: (exit {r.returncode}) {r.stdout.strip()[-500:]} {r.stderr.strip()[-1500:]}")
        else:
            # Every record went in once and out once.
            megabytes = 2 * records * 1024 / MB
            per_mb = cpu * 1000 / megabytes
            results[name].append((rates["produce"], rates["consume"], per_mb))
            print(f"  run {run} {name:10} produce {rates['produce']:7.1f} MB/s   consume {rates['consume']:7.1f} MB/s"
                  f"   broker CPU {per_mb:.2f} ms per MB moved ({records} records)", flush=True)
        done = [t for t in admin.list_topics(timeout=20).topics if t.startswith("raw-load-")]
        for topic, f in (admin.delete_topics(done).items() if done else []):
            try:
                f.result(timeout=20)
            except KafkaException as e:
                print(f"    (could not delete {topic}: {e})")
    if not (results["PLAINTEXT"] and results["SASL_SSL"]):
        print("raw_load SASL_SSL / PLAINTEXT: n/a")
        return

    def mean(name: str, index: int) -> float:
        values = [r[index] for r in results[name]]
        return sum(values) / len(values)

    for index, what in ((0, "produce"), (1, "consume")):
        plain, secure = mean("PLAINTEXT", index), mean("SASL_SSL", index)
        print(f"raw_load SASL_SSL / PLAINTEXT {what}, mean of 2 runs each: {secure:.1f} / {plain:.1f} MB/s = "
              f"{secure / plain:.2f}x (target >= 0.7x)")
    plain, secure = mean("PLAINTEXT", 2), mean("SASL_SSL", 2)
    print(f"raw_load broker CPU per MB moved, PLAINTEXT / SASL_SSL: {plain:.2f} / {secure:.2f} ms = {plain / secure:.2f}x "
          "(the throughput a CPU-bound broker keeps over SASL_SSL; target >= 0.7x)")


def authorizer_bench() -> None:
    print("\n== cargo bench -p skiff-auth --bench authorizer (compiles first): time per check over 1,000 ACLs, "
          "criterion's estimate", flush=True)
    r = subprocess.run(["cargo", "bench", "-p", "skiff-auth", "--bench", "authorizer"], cwd=ROOT,
                       capture_output=True, text=True, timeout=1800)
    name = None
    for line in r.stdout.splitlines():
        if line.startswith("authorize"):
            name = line.split()[0]
        m = re.search(r"time:\s+\[\S+ \S+ (\S+ \S+) \S+ \S+\]", line)
        if m and name:
            print(f"  {name:32} {m.group(1)}")
    if r.returncode != 0:
        print(f"  cargo bench failed ({r.returncode}):\n{r.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10, help="produce for this long per run (default 10)")
    ap.add_argument("--mib", type=float, help="produce this many MiB per run instead")
    ap.add_argument("--authorizer", action="store_true", help="also run the authorizer micro-benchmark")
    ap.add_argument("--raw-seconds", type=int, default=5, help="raw_load's seconds of produce per run (default 5)")
    ap.add_argument("--tmpdir", help="where the broker's temp data dir goes (e.g. /dev/shm, so that page-cache "
                    "writeback does not cap raw_load; default: the system's temp dir)")
    args = ap.parse_args()
    if not BINARY.exists():
        sys.exit(f"{BINARY} is missing: run `cargo build --release -p skiff --bin skiff` first")

    tmp = Path(tempfile.mkdtemp(prefix="skiff-security-bench-", dir=args.tmpdir))
    proc = None
    try:
        ca, keystore = make_certs(tmp)
        ports = {"PLAINTEXT": free_port(), "SASL_SSL": free_port()}
        proc = start_broker(tmp, ports, keystore)
        quiet = {"log_level": 4}  # librdkafka's warnings and errors, not its info lines
        plain = {**quiet, "bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"}
        admin = AdminClient(plain)
        cred = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        for f in admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(USER, cred, PASSWORD.encode())]).values():
            f.result(timeout=20)
        sasl_ssl = {**quiet, "bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}", "security.protocol": "SASL_SSL",
                    "ssl.ca.location": str(ca), "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": USER,
                    "sasl.password": PASSWORD}
        confs = {"PLAINTEXT": plain, "SASL_SSL": sasl_ssl}
        amount = f"{args.mib:g} MiB" if args.mib else f"{args.seconds:g} s"
        print(f"broker: {BINARY} (flush = \"interval\", fdatasync every 1 s: the disk is not what is measured)")
        print(f"load: confluent-kafka, 1 KiB values, {amount} per produce run, 1 partition, acks=1; "
              f"MB = 10^6 bytes of values; loopback; load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs (client, broker and anything else share them: figures are noisy)")
        best: dict[str, dict[str, float]] = {name: {"produce": 0.0, "consume": 0.0} for name in confs}
        # listener -> lowest (broker, client) CPU ms per MB produced seen
        produce_cpu: dict[str, tuple[float, float]] = {}
        for i, name in enumerate(["PLAINTEXT", "SASL_SSL"] * 2):
            topic = f"security-bench-{i}-{name.lower()}"
            for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
                f.result(timeout=20)
            p_rate, n, p_cpu = measured(proc.pid, lambda: produce(confs[name], topic, args.seconds, args.mib))
            c_rate, got, c_cpu = measured(proc.pid, lambda: consume(confs[name], topic, n))
            print(f"  run {i + 1} {name:10} produce {p_rate:7.1f} MB/s ({n} records)   "
                  f"consume {c_rate:7.1f} MB/s ({got} records)")
            print(f"        CPU ms per MB, broker / client: produce {p_cpu[0]:.2f} / {p_cpu[1]:.2f}   "
                  f"consume {c_cpu[0]:.2f} / {c_cpu[1]:.2f}")
            best[name]["produce"] = max(best[name]["produce"], p_rate)
            old = produce_cpu.get(name, (float("inf"), float("inf")))
            produce_cpu[name] = (min(old[0], p_cpu[0]), min(old[1], p_cpu[1]))
            best[name]["consume"] = max(best[name]["consume"], c_rate)
            for f in admin.delete_topics([topic]).values():  # keep the temp dir small
                try:
                    f.result(timeout=20)
                except KafkaException as e:
                    print(f"    (could not delete {topic}: {e})")
        print("best of 2:")
        for name, b in best.items():
            print(f"  {name:10} produce {b['produce']:7.1f} MB/s   consume {b['consume']:7.1f} MB/s")
        for what in ("produce", "consume"):
            ratio = best["SASL_SSL"][what] / best["PLAINTEXT"][what] if best["PLAINTEXT"][what] else float("nan")
            print(f"SASL_SSL / PLAINTEXT {what}: {ratio:.2f}x (target >= 0.7x)")
        if len(produce_cpu) == 2:
            (bp, cp), (_, cs) = produce_cpu["PLAINTEXT"], produce_cpu["SASL_SSL"]
            # Client and broker share the cores: with a broker whose TLS cost nothing, a MB over
            # SASL_SSL would still cost the client's TLS CPU on top of PLAINTEXT's total.
            print(f"  the client's own TLS CPU alone bounds the produce ratio here: with a broker that spent "
                  f"nothing on TLS, ({bp:.2f} + {cp:.2f}) / ({bp:.2f} + {cs:.2f}) = {(bp + cp) / (bp + cs):.2f}x")
        raw_load_bench(ports, ca, admin, proc.pid, args.raw_seconds)
        del admin  # before the broker stops, so that it does not log the lost connection
    finally:
        if proc is not None:
            stop_broker(proc)
        shutil.rmtree(tmp, ignore_errors=True)
    if args.authorizer:
        authorizer_bench()


if __name__ == "__main__":
    main()
