"""What connections can make the broker hold (issue #13, findings 1, 2, 3 and 11).

Each test drives the real broker binary over loopback and measures the broker process itself:
its resident set from /proc/PID/status, its exit after SIGTERM, the size of the responses it
sends. Figures are printed (run with -s to see them); the bounds asserted are the issue's.
"""

from __future__ import annotations

import resource
import signal
import socket
import struct
import time
import uuid

import pytest

import kafka_wire as kw
from confluent_util import producer
from skiff_harness import settled_rss_kb

#: Issue #13: memory per idle connection.
IDLE_CONNECTION_BUDGET_KB = 16


def open_files_allowed(n: int) -> None:
    """Raise this process's descriptor limit to hold ``n`` sockets (within the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 256
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"the hard descriptor limit ({hard}) is below {want}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def idle_connections(bootstrap: str, n: int) -> list[socket.socket]:
    """``n`` connections, each after one ApiVersions round trip (so the broker has served it)."""
    socks = []
    for i in range(n):
        s = kw.connect(bootstrap)
        err, _ = kw.api_versions(s, correlation_id=i + 1)
        assert err == 0
        socks.append(s)
    return socks


@pytest.mark.parametrize("n", [2000])
def test_an_idle_connection_costs_at_most_16_kib(broker, n):
    """Finding 1: 5,000 idle connections took the broker from 17 MiB to 626 MiB (127 KiB each)."""
    open_files_allowed(n)
    pid = broker.proc.pid
    # Warm-up: the runtime's and allocator's own first-use costs are not per connection.
    for s in idle_connections(broker.bootstrap, 200):
        s.close()
    before = settled_rss_kb(pid)
    socks = idle_connections(broker.bootstrap, n)
    try:
        after = settled_rss_kb(pid)
        per_connection = (after - before) / n
        print(f"\nRSS {before} KiB -> {after} KiB with {n} idle connections: "
              f"{per_connection:.1f} KiB per connection")
        assert per_connection <= IDLE_CONNECTION_BUDGET_KB, \
            f"{per_connection:.1f} KiB per idle connection (budget {IDLE_CONNECTION_BUDGET_KB} KiB)"
    finally:
        for s in socks:
            s.close()


def test_a_declared_frame_size_reserves_nothing_until_its_bytes_arrive(broker):
    """Finding 2: 400 connections declaring 100 MiB frames and sending one byte took 1 GiB."""
    n = 400
    open_files_allowed(n)
    pid = broker.proc.pid
    for s in idle_connections(broker.bootstrap, 100):
        s.close()
    before = settled_rss_kb(pid)
    socks = []
    try:
        for _ in range(n):
            s = kw.connect(broker.bootstrap)
            # Just under socket.request.max.bytes (100 MiB), then one byte of the body.
            s.sendall(struct.pack(">i", 100 * 1024 * 1024 - 1) + b"\x00")
            socks.append(s)
        # The broker has read the 5 bytes of every connection once a later request is answered.
        probe = kw.connect(broker.bootstrap)
        assert kw.api_versions(probe, correlation_id=1)[0] == 0
        after = settled_rss_kb(pid)
        per_connection = (after - before) / n
        print(f"\nRSS {before} KiB -> {after} KiB with {n} connections each declaring 100 MiB: "
              f"{per_connection:.1f} KiB per connection")
        assert per_connection <= 2 * IDLE_CONNECTION_BUDGET_KB, \
            f"{per_connection:.1f} KiB per connection that sent 5 bytes"
        # The broker still serves everyone else.
        assert kw.metadata_v1(probe, 2, [])["brokers"]
        probe.close()
    finally:
        for s in socks:
            s.close()


def test_sigterm_completes_while_a_client_pipelines_requests_and_never_reads(make_broker):
    """Finding 3: a client that pipelines and does not read kept SIGTERM from completing."""
    b = make_broker("--set", "shutdown.timeout.ms=2000")
    topic = f"unread-{uuid.uuid4().hex[:8]}"
    p = producer(b.bootstrap, acks="all")
    value = b"x" * 100_000
    for _ in range(100):
        p.produce(topic, value=value, partition=0)
        p.poll(0)
    assert p.flush(30) == 0
    s = kw.connect(b.bootstrap)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    # 32 pipelined fetches of up to 10 MB each; none of the responses is read.
    body = kw.fetch_v4_body(topic, 0, 0, max_bytes=10_000_000, partition_max_bytes=10_000_000)
    s.sendall(b"".join(kw.request(kw.FETCH, 4, i, body) for i in range(32)))
    time.sleep(0.5)  # let the broker read them and block on its writes
    started = time.monotonic()
    b.proc.send_signal(signal.SIGTERM)
    try:
        code = b.proc.wait(timeout=15)
    except Exception:
        pytest.fail(f"the broker was still running 15 s after SIGTERM\n{b.stderr_text()}")
    elapsed = time.monotonic() - started
    print(f"\nexited {code} after {elapsed:.1f} s (shutdown.timeout.ms = 2000)")
    assert code == 0
    assert "shutdown.timeout.ms passed" in b.stderr_text()
    s.close()


def test_a_fetch_response_is_capped_by_the_brokers_fetch_max_bytes(make_broker):
    """Finding 11: a Fetch asking for 2^31-1 bytes got 1,010 MiB; Kafka caps it at fetch.max.bytes."""
    cap = 1024 * 1024
    b = make_broker("--set", f"fetch.max.bytes={cap}")
    topic = f"capped-{uuid.uuid4().hex[:8]}"
    p = producer(b.bootstrap, acks="all", **{"batch.size": 64 * 1024})
    value = b"y" * 10_000
    for _ in range(400):  # 4 MB
        p.produce(topic, value=value, partition=0)
        p.poll(0)
    assert p.flush(30) == 0
    s = kw.connect(b.bootstrap, timeout=10)
    body = kw.fetch_v4_body(topic, 0, 0, max_bytes=2**31 - 1, partition_max_bytes=2**31 - 1)
    s.sendall(kw.request(kw.FETCH, 4, 7, body))
    cid, response = kw.read_response(s)
    assert cid == 7
    size = kw.fetch_v4_records_size(response)
    print(f"\nrecords in the response: {size} bytes (fetch.max.bytes = {cap})")
    # At most the cap, plus the rest of the batch it ends in (batches are 64 KiB here).
    assert 0 < size <= cap + 64 * 1024, size
    s.close()


def test_running_out_of_descriptors_fails_requests_not_the_partition(tmp_path):
    """Finding 4: after a transient EMFILE every acks=all produce answered KAFKA_STORAGE_ERROR
    ("clone segment handle") until a restart."""
    import urllib.request

    from skiff_harness import SkiffBroker, free_port, skiff_bin

    b = SkiffBroker(skiff_bin(), data_dir=tmp_path / "data", log_dir=tmp_path / "logs", port=free_port())
    b.start()
    try:
        # The broker raises its own soft limit at start; lower both limits under it from here.
        resource.prlimit(b.proc.pid, resource.RLIMIT_NOFILE, (96, 96))
        topic = f"fds-{uuid.uuid4().hex[:8]}"
        p = producer(b.bootstrap, acks="all")
        sent = []

        def produce_one(value: bytes) -> None:
            errors = []
            p.produce(topic, value=value, partition=0, on_delivery=lambda err, _m: err and errors.append(err))
            assert p.flush(20) == 0
            assert not errors, errors
            sent.append(value)

        produce_one(b"before")
        # Exhaust the broker's descriptors: connections it cannot accept wait in the backlog.
        socks = []
        for _ in range(150):
            try:
                socks.append(socket.create_connection((b.host, b.port), timeout=2))
            except OSError:
                break
        deadline = time.monotonic() + 10
        while "accept failed" not in b.stderr_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "accept failed" in b.stderr_text(), "the broker never ran out of descriptors"
        # While out of descriptors, appends and their syncs need none.
        produce_one(b"during")
        for s in socks:
            s.close()
        time.sleep(0.5)  # the broker accepts and closes what waited
        produce_one(b"after")
        metrics = urllib.request.urlopen(f"{b.admin_url}/metrics", timeout=5).read().decode()
        assert "skiff_partitions_offline 0" in metrics, metrics
        from confluent_util import consume_partitions
        got = consume_partitions(b.bootstrap, topic, {0: len(sent)}, timeout=15)
        assert [g.value for g in got[0]] == sent
    finally:
        b.stop()
