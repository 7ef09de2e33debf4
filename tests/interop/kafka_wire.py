"""A few hand-encoded Kafka requests over raw sockets, for tests that must control every byte.

Only the non-flexible (pre-KIP-482) layouts are used: request header v1 (api_key, api_version,
correlation_id, client_id) and response header v0 (correlation_id). That covers ApiVersions v0
and Metadata v0-v8, which is all the bad-input tests and the API probe need.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

# Request keys used by the suite (names as in the Kafka protocol guide).
API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 18: "ApiVersions",
    19: "CreateTopics", 20: "DeleteTopics", 21: "DeleteRecords", 22: "InitProducerId",
    32: "DescribeConfigs", 37: "CreatePartitions", 44: "IncrementalAlterConfigs",
    60: "DescribeCluster",
}
PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID = 19, 20, 21, 22
DESCRIBE_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 32, 37, 44, 60

UNSUPPORTED_VERSION = 35


def request_header(api_key: int, version: int, correlation_id: int, client_id: str | None = "skiff-interop") -> bytes:
    """Request header v1 (non-flexible)."""
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id)) + client_id.encode()
    return struct.pack(">hhi", api_key, version, correlation_id) + cid


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def request(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    return frame(request_header(api_key, version, correlation_id) + body)


def connect(bootstrap: str, timeout: float = 5.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=timeout)
    s.settimeout(timeout)
    return s


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Read exactly n bytes; raises EOFError if the peer closes first (socket timeout applies)."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """One response frame: (correlation_id, body after the v0 response header)."""
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    assert 4 <= size <= 64 * 1024 * 1024, f"implausible response size {size}"
    data = recv_exact(sock, size)
    return struct.unpack(">i", data[:4])[0], data[4:]


def wait_closed(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Read until EOF (or a reset); returns whatever arrived. Fails if still open after ``timeout``."""
    sock.settimeout(timeout)
    got = bytearray()
    deadline = time.monotonic() + timeout
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return bytes(got)
        except socket.timeout:
            raise AssertionError(f"connection still open {timeout:.0f}s later (got {len(got)} bytes)")
        if not chunk:
            return bytes(got)
        got += chunk
        if time.monotonic() > deadline:
            raise AssertionError("connection kept sending and never closed")


class Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        vals = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals[0] if len(vals) == 1 else vals

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def array(self, item):
        n = self.take(">i")
        return [] if n < 0 else [item(self) for _ in range(n)]


def parse_api_versions_v0(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    """ApiVersions v0 response body -> (error_code, {api_key: (min, max)})."""
    r = Reader(body)
    err = r.take(">h")
    apis = r.array(lambda r: r.take(">hhh"))
    return err, {k: (lo, hi) for k, lo, hi in apis}


def api_versions(sock: socket.socket, correlation_id: int = 1, version: int = 0) -> tuple[int, dict[int, tuple[int, int]]]:
    """Send ApiVersions (v0 body, which is empty; any version number) and parse the v0-layout answer."""
    sock.sendall(request(API_VERSIONS, version, correlation_id))
    cid, body = read_response(sock)
    assert cid == correlation_id
    return parse_api_versions_v0(body)


def metadata_v1(sock: socket.socket, correlation_id: int, topics: list[str] | None = None) -> dict:
    """Metadata v1 (topics=None: all topics). Returns {"brokers": [(id, host, port)], "topics": {name: [partition ids]}}."""
    if topics is None:
        body = struct.pack(">i", -1)
    else:
        body = struct.pack(">i", len(topics)) + b"".join(struct.pack(">h", len(t)) + t.encode() for t in topics)
    sock.sendall(request(METADATA, 1, correlation_id, body))
    cid, data = read_response(sock)
    assert cid == correlation_id, (cid, correlation_id)
    r = Reader(data)
    brokers = r.array(lambda r: (r.take(">i"), r.string(), r.take(">i"), r.string())[:3])
    r.take(">i")  # controller id

    def partition(r):
        _err, pid, _leader = r.take(">hii")
        r.array(lambda r: r.take(">i"))
        r.array(lambda r: r.take(">i"))
        return pid

    def topic(r):
        err = r.take(">h")
        name = r.string()
        r.take(">?")
        return name, err, r.array(partition)

    topics_ = r.array(topic)
    return {"brokers": brokers, "topics": {n: sorted(ps) for n, err, ps in topics_ if err == 0},
            "errors": {n: err for n, err, _ in topics_ if err != 0}}


def advertised_apis(bootstrap: str) -> dict[int, tuple[int, int]]:
    with connect(bootstrap) as s:
        err, apis = api_versions(s)
    assert err == 0, f"ApiVersions v0 failed with error {err}"
    return apis


def require_api(bootstrap: str, api_key: int, min_version: int = 0) -> None:
    """Fail the running test, with a message naming the API, if the broker does not advertise it.

    Every API guarded this way is served by Skiff; a broker that stops advertising one (a
    regression in ApiVersions) fails here with a clear reason instead of deep inside a client.
    """
    apis = advertised_apis(bootstrap)
    name = API_NAMES.get(api_key, str(api_key))
    if api_key not in apis or apis[api_key][1] < min_version:
        pytest.fail(f"broker does not advertise {name} (key {api_key}) v{min_version}+ "
                    f"(advertised: {apis.get(api_key)})", pytrace=False)


def fetch_v4_body(topic: str, partition: int, offset: int, max_bytes: int, partition_max_bytes: int) -> bytes:
    """A Fetch v4 request body (non-flexible): one partition, read_uncommitted, no wait."""
    name = topic.encode()
    return (struct.pack(">iiiib", -1, 0, 1, max_bytes, 0)
            + struct.pack(">i", 1) + struct.pack(">h", len(name)) + name
            + struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, partition_max_bytes))


def fetch_v4_partition(body: bytes) -> tuple[int, bytes]:
    """(error code, record set) of the one partition in a Fetch v4 response body."""
    r = Reader(body)
    r.take(">i")  # throttle
    assert r.take(">i") == 1
    r.string()
    assert r.take(">i") == 1
    _, error = r.take(">ih")
    r.take(">qq")  # high watermark, last stable offset
    r.array(lambda r: r.take(">qq"))  # aborted transactions
    size = r.take(">i")
    records = r.data[r.pos:r.pos + max(size, 0)]
    return error, records


def fetch_v4_records_size(body: bytes) -> int:
    """The size of the one partition's record set in a Fetch v4 response body (no error)."""
    error, records = fetch_v4_partition(body)
    assert error == 0, f"fetch error {error}"
    return len(records)


def batch_offsets(records: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of each whole v2 batch in a record set."""
    out, pos = [], 0
    while pos + 61 <= len(records):
        base, length = struct.unpack_from(">qi", records, pos)
        if pos + 12 + length > len(records):
            break
        (last_delta,) = struct.unpack_from(">i", records, pos + 23)
        out.append((base, base + last_delta))
        pos += 12 + length
    return out


def create_topics_v2_body(topics: list[tuple[str, int]], timeout_ms: int = 600_000) -> bytes:
    """CreateTopics v2 (non-flexible): names and partition counts, replication factor 1."""
    body = struct.pack(">i", len(topics))
    for name, partitions in topics:
        n = name.encode()
        body += struct.pack(">h", len(n)) + n + struct.pack(">ihii", partitions, 1, 0, 0)
    return body + struct.pack(">i?", timeout_ms, False)


def create_topics_v2(sock: socket.socket, correlation_id: int, topics: list[tuple[str, int]]) -> list[tuple[str, int, str | None]]:
    """CreateTopics v2: (name, error code, error message) per topic."""
    sock.sendall(request(CREATE_TOPICS, 2, correlation_id, create_topics_v2_body(topics)))
    cid, body = read_response(sock)
    assert cid == correlation_id
    r = Reader(body)
    r.take(">i")  # throttle
    return r.array(lambda r: (r.string(), r.take(">h"), r.string()))
