"""Hostile bytes on raw sockets. For every attack:

- the offending connection gets an error response or is closed, promptly (5 s bound);
- a second connection, opened and used *before* the attack, still gets Metadata answers;
- the broker process is still alive and its memory did not balloon (no allocation driven by
  an attacker-chosen length or count);
- records produced before the attack are all still there.
"""

from __future__ import annotations

import random
import socket
import struct
import uuid

import pytest

import kafka_wire as kw
from skiff_harness import rss_kb
from confluent_util import assert_partition_matches, consume_partitions, make_records, produce_all, producer

pytestmark = pytest.mark.timeout(60)
N_PRECIOUS = 20
#: The broker's resident set may grow by at most this much during one attack.
RSS_SLACK_KB = 256 * 1024


class Target:
    def __init__(self, broker):
        self.broker = broker
        self.topic = f"precious-{uuid.uuid4().hex[:8]}"
        self.sent = {0: make_records(N_PRECIOUS, "precious")}
        log = produce_all(producer(broker.bootstrap, acks="all"), self.topic, self.sent)
        assert not log.errors
        # The bystander connects and talks before the attack starts.
        self.bystander = kw.connect(broker.bootstrap)
        err, apis = kw.api_versions(self.bystander, correlation_id=1)
        assert err == 0 and kw.METADATA in apis
        self.cid = 1
        self._metadata()
        self.rss_before = rss_kb(broker.proc.pid)
        assert self.rss_before > 0, "cannot read the broker's VmRSS from /proc"

    def _metadata(self) -> None:
        self.cid += 1
        md = kw.metadata_v1(self.bystander, self.cid, [self.topic])
        assert md["topics"] == {self.topic: [0]}, md
        assert [b[2] for b in md["brokers"]] == [self.broker.port]

    def attacker(self) -> socket.socket:
        return kw.connect(self.broker.bootstrap)

    def assert_healthy(self) -> None:
        assert self.broker.running, f"broker died (exit {self.broker.proc.returncode})"
        grown = rss_kb(self.broker.proc.pid) - self.rss_before
        assert grown < RSS_SLACK_KB, f"broker RSS grew by {grown} kB during the attack"
        self._metadata()  # the connection opened before the attack still works
        fresh = kw.connect(self.broker.bootstrap)  # and new connections are served
        try:
            assert kw.api_versions(fresh, correlation_id=7)[0] == 0
        finally:
            fresh.close()
        got = consume_partitions(self.broker.bootstrap, self.topic, {0: N_PRECIOUS})
        assert_partition_matches(got[0], self.sent[0])

    def close(self) -> None:
        self.bystander.close()


@pytest.fixture
def target(broker):
    t = Target(broker)
    try:
        yield t
    finally:
        t.close()


def expect_error_or_close(sock: socket.socket, correlation_id: int | None = None, timeout: float = 5.0) -> bytes:
    """The broker must either answer (a response frame, whose correlation ID we check) or close."""
    data = kw.wait_closed(sock, timeout) if correlation_id is None else _answer_or_close(sock, correlation_id, timeout)
    return data


def _answer_or_close(sock: socket.socket, correlation_id: int, timeout: float) -> bytes:
    sock.settimeout(timeout)
    try:
        cid, body = kw.read_response(sock)
    except (EOFError, ConnectionResetError):
        return b""
    except socket.timeout:
        raise AssertionError(f"no answer and no close within {timeout:.0f}s")
    assert cid == correlation_id, f"response to someone else: correlation id {cid}"
    return body


def send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed on us early: also acceptable


# ----------------------------------------------------------------------------------------------
# Framing


def test_truncated_frame_then_eof(target):
    s = target.attacker()
    send(s, struct.pack(">i", 100) + kw.request_header(kw.METADATA, 1, 5)[:8])
    s.shutdown(socket.SHUT_WR)
    kw.wait_closed(s)
    s.close()
    target.assert_healthy()


def test_frame_shorter_than_a_header(target):
    s = target.attacker()
    send(s, kw.frame(b"\x00\x03\x00"))  # 3-byte "request": not even api_key + api_version + correlation_id
    kw.wait_closed(s)
    s.close()
    target.assert_healthy()


def test_truncated_request_body(target):
    s = target.attacker()
    send(s, kw.request(kw.METADATA, 1, 9, b"\x00\x00"))  # topics array count cut in half
    expect_error_or_close(s, 9)
    s.close()
    target.assert_healthy()


@pytest.mark.parametrize("prefix", [b"\xff\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\x00"],
                         ids=["minus1", "int_min", "negative"])
def test_negative_length_prefix(target, prefix):
    s = target.attacker()
    send(s, prefix + kw.request_header(kw.API_VERSIONS, 0, 1))
    kw.wait_closed(s)
    s.close()
    target.assert_healthy()


@pytest.mark.parametrize("size", [0x7FFFFFFF, 200 * 1024 * 1024 + 1], ids=["int_max", "200MiB"])
def test_huge_length_prefix(target, size):
    s = target.attacker()
    send(s, struct.pack(">i", size) + kw.request_header(kw.API_VERSIONS, 0, 1))
    kw.wait_closed(s)  # refused at once: the broker must not wait for (or allocate) the body
    s.close()
    target.assert_healthy()


def test_zero_length_frame(target):
    s = target.attacker()
    send(s, b"\x00\x00\x00\x00")
    kw.wait_closed(s)
    s.close()
    target.assert_healthy()


# ----------------------------------------------------------------------------------------------
# Hostile counts


def test_metadata_v1_hostile_array_count(target):
    s = target.attacker()
    send(s, kw.request(kw.METADATA, 1, 11, b"\x7f\xff\xff\xff"))
    expect_error_or_close(s, 11)
    s.close()
    target.assert_healthy()


def test_metadata_v1_hostile_string_length(target):
    s = target.attacker()
    send(s, kw.request(kw.METADATA, 1, 12, b"\x00\x00\x00\x01" + b"\x7f\xff" + b"abc"))
    expect_error_or_close(s, 12)
    s.close()
    target.assert_healthy()


def test_metadata_v9_hostile_compact_array(target):
    # Flexible version: request header v2 (header v1 + empty tagged fields), topics as a compact
    # array whose unsigned-varint length claims 2^31 - 1 elements.
    header = kw.request_header(kw.METADATA, 9, 13) + b"\x00"
    s = target.attacker()
    send(s, kw.frame(header + b"\x80\x80\x80\x80\x08"))
    expect_error_or_close(s, 13)
    s.close()
    target.assert_healthy()


def test_produce_v3_hostile_topic_count(target):
    # transactional_id=null, acks=1, timeout=1000, topics count 0x7fffffff and nothing after it.
    s = target.attacker()
    send(s, kw.request(kw.PRODUCE, 3, 14, b"\xff\xff" + struct.pack(">hi", 1, 1000) + b"\x7f\xff\xff\xff"))
    expect_error_or_close(s, 14)
    s.close()
    target.assert_healthy()


def test_produce_v3_hostile_record_set_size(target):
    # One topic, one partition, records (BYTES) claiming 2 GiB - 1 with 10 bytes present.
    topic = target.topic.encode()
    body = (b"\xff\xff" + struct.pack(">hi", 1, 1000) + struct.pack(">i", 1) + struct.pack(">h", len(topic)) + topic
            + struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 10)
    s = target.attacker()
    send(s, kw.request(kw.PRODUCE, 3, 15, body))
    expect_error_or_close(s, 15)
    s.close()
    target.assert_healthy()


# ----------------------------------------------------------------------------------------------
# Unknown keys and versions


def test_unknown_api_key(target):
    s = target.attacker()
    send(s, kw.request(999, 0, 21))
    expect_error_or_close(s, 21)
    s.close()
    target.assert_healthy()


def test_api_versions_v99_gets_v0_error_with_version_list(target):
    # A client sends its newest ApiVersions; v3+ is flexible, so the header is v2 (tagged fields).
    s = target.attacker()
    s.sendall(kw.frame(kw.request_header(kw.API_VERSIONS, 99, 22) + b"\x00" + b"\x00garbage-body"))
    cid, body = kw.read_response(s)
    assert cid == 22
    err, apis = kw.parse_api_versions_v0(body)
    assert err == kw.UNSUPPORTED_VERSION
    assert apis.get(kw.API_VERSIONS, (None, None))[0] == 0 and apis[kw.API_VERSIONS][1] >= 3, apis
    assert kw.METADATA in apis and kw.PRODUCE in apis and kw.FETCH in apis
    # KIP-511: the client then retries on the same connection with a version it now knows.
    err, apis2 = kw.api_versions(s, correlation_id=23)
    assert err == 0 and apis2 == apis
    s.close()
    target.assert_healthy()


def test_produce_v99_closes_connection(target):
    s = target.attacker()
    send(s, kw.request(kw.PRODUCE, 99, 24, b"\xff\xff" + struct.pack(">hi", 1, 1000) + struct.pack(">i", 0)))
    got = kw.wait_closed(s)
    assert got == b"", f"expected the connection to be closed without an answer, got {got[:64]!r}"
    s.close()
    target.assert_healthy()


def test_request_after_bad_request_on_same_connection_is_not_served(target):
    """Pipelined: a good request right behind an unknown API key must not be answered as if nothing
    happened with a shifted correlation ID; either both are answered in order or the connection closes."""
    s = target.attacker()
    send(s, kw.request(999, 0, 31) + kw.request(kw.API_VERSIONS, 0, 32))
    s.settimeout(5)
    try:
        cid, _ = kw.read_response(s)
        assert cid == 31, f"first response has correlation id {cid}, expected 31"
    except (EOFError, ConnectionResetError):
        pass
    s.close()
    target.assert_healthy()


# ----------------------------------------------------------------------------------------------
# Garbage


@pytest.mark.parametrize("seed", range(4))
def test_raw_garbage_then_eof(target, seed):
    rnd = random.Random(seed)
    s = target.attacker()
    send(s, bytes(rnd.getrandbits(8) for _ in range(4096)))
    s.shutdown(socket.SHUT_WR)
    kw.wait_closed(s)
    s.close()
    target.assert_healthy()


@pytest.mark.parametrize("seed", range(4))
def test_framed_garbage(target, seed):
    """Correct length prefixes around random payloads, 20 frames on one connection."""
    rnd = random.Random(1000 + seed)
    s = target.attacker()
    payload = b"".join(kw.frame(bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 300)))) for _ in range(20))
    send(s, payload)
    s.shutdown(socket.SHUT_WR)  # whatever the broker makes of it, it must then close
    kw.wait_closed(s)
    s.close()
    target.assert_healthy()


def test_valid_header_garbage_bodies(target):
    """Each served API/version with a random body: answered or closed, never a crash or hang."""
    rnd = random.Random(7)
    apis = kw.advertised_apis(target.broker.bootstrap)
    n = 0
    for key, (lo, hi) in sorted(apis.items()):
        for version in {lo, hi}:
            for _ in range(3):
                n += 1
                body = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 64)))
                flexible_hdr = b"\x00" if rnd.random() < 0.5 else b""
                s = target.attacker()
                send(s, kw.frame(kw.request_header(key, version, n) + flexible_hdr + body))
                s.shutdown(socket.SHUT_WR)
                kw.wait_closed(s, timeout=5 if key != kw.FETCH else 40)
                s.close()
    assert target.broker.running
    target.assert_healthy()


def test_many_concurrent_half_open_connections(target):
    """Connections that send a partial frame and then sit there do not block others."""
    socks = []
    try:
        for i in range(50):
            s = target.attacker()
            send(s, struct.pack(">i", 64) + b"\x00\x03")
            socks.append(s)
        target.assert_healthy()
    finally:
        for s in socks:
            s.close()
