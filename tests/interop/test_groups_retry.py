"""A KIP-848 join whose first ConsumerGroupHeartbeat response is lost must not leave a ghost member.

A small TCP proxy sits between confluent-kafka (librdkafka 2.16) and Skiff; the broker advertises
the proxy's address (``--advertise``), so every client connection goes through it. The proxy parses
request frames going up (api key, version, correlation id) and response frames coming down
(correlation id), and swallows the broker's response to the first ConsumerGroupHeartbeat (key 68).
The broker has already registered the member by then; the client never hears about it, times the
request out and heartbeats again. librdkafka chooses its member ID itself (KIP-1082) and keeps it,
so the retry carries the same ID and the broker must treat it as the same member: afterwards the
group has exactly one member and consumption works.

Two variants: the connection is kept open (the client times the request out) or closed right after
the dropped response (the client sees a disconnect).
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from groups_util import GROUP_ARGS, PARTS, describe, members_summary, name, produce_values, wait_group, wait_until
from skiff_harness import free_port
from test_groups_confluent import Member, assert_exactly_once, poll_all

pytestmark = pytest.mark.timeout(90)

CONSUMER_GROUP_HEARTBEAT = 68


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def _read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    return struct.pack(">i", size) + _recv_exact(sock, size)


class _R:
    """Reader for the flexible (compact) encodings used by ConsumerGroupHeartbeat."""

    def __init__(self, data: bytes, pos: int = 0):
        self.d, self.p = data, pos

    def take(self, fmt: str):
        v = struct.unpack_from(fmt, self.d, self.p)
        self.p += struct.calcsize(fmt)
        return v[0]

    def uvarint(self) -> int:
        shift = out = 0
        while True:
            b = self.d[self.p]
            self.p += 1
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def compact_str(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.d[self.p:self.p + n].decode()
        self.p += n
        return s

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.p += self.uvarint()


def parse_cgh_request(frame: bytes) -> dict:
    """ConsumerGroupHeartbeat request (header v2): group, member ID, epoch."""
    r = _R(frame, 4)
    api, ver, corr = r.take(">h"), r.take(">h"), r.take(">i")
    n = r.take(">h")
    r.p += max(n, 0)  # client_id: a classic nullable string even in header v2
    r.tags()
    group, member, epoch = r.compact_str(), r.compact_str(), r.take(">i")
    return {"version": ver, "corr": corr, "group": group, "member_id": member, "epoch": epoch}


def parse_cgh_response(frame: bytes) -> dict:
    """ConsumerGroupHeartbeat response (header v1): error, member ID, epoch, heartbeat interval."""
    r = _R(frame, 4)
    corr = r.take(">i")
    r.tags()
    r.take(">i")  # throttle
    err = r.take(">h")
    msg = r.compact_str()
    member, epoch, interval = r.compact_str(), r.take(">i"), r.take(">i")
    return {"corr": corr, "error": err, "message": msg, "member_id": member, "epoch": epoch, "interval": interval}


class DropFirstHeartbeatResponseProxy:
    """Forwards 127.0.0.1:port to the broker; drops the first ConsumerGroupHeartbeat response.

    ``close_after_drop``: also close that connection right after swallowing the response.
    ``log`` records every heartbeat request and response as (time, "req"/"resp"/"DROPPED", dict).
    """

    def __init__(self, upstream_port: int, close_after_drop: bool):
        self.port = free_port()
        self.upstream_port = upstream_port
        self.close_after_drop = close_after_drop
        self.dropped = threading.Event()
        self.log: list[tuple[float, str, dict]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._socks: list[socket.socket] = []
        self._ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._ls.bind(("127.0.0.1", self.port))
        self._ls.listen(16)
        self._ls.settimeout(0.2)
        self._t0 = time.monotonic()
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def _record(self, kind: str, info: dict) -> None:
        with self._lock:
            self.log.append((round(time.monotonic() - self._t0, 2), kind, info))

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._socks += [client, upstream]
            pending: dict[int, int] = {}  # correlation id -> api key, per connection
            threading.Thread(target=self._up, args=(client, upstream, pending), daemon=True).start()
            threading.Thread(target=self._down, args=(client, upstream, pending), daemon=True).start()

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _up(self, client, upstream, pending) -> None:
        try:
            while True:
                f = _read_frame(client)
                api, corr = struct.unpack_from(">h", f, 4)[0], struct.unpack_from(">i", f, 8)[0]
                with self._lock:
                    pending[corr] = api
                if api == CONSUMER_GROUP_HEARTBEAT:
                    self._record("req", parse_cgh_request(f))
                upstream.sendall(f)
        except (EOFError, OSError):
            self._close(client, upstream)

    def _down(self, client, upstream, pending) -> None:
        try:
            while True:
                f = _read_frame(upstream)
                corr = struct.unpack_from(">i", f, 4)[0]
                with self._lock:
                    api = pending.pop(corr, None)
                if api == CONSUMER_GROUP_HEARTBEAT:
                    info = parse_cgh_response(f)
                    if not self.dropped.is_set():
                        self.dropped.set()
                        self._record("DROPPED", info)
                        if self.close_after_drop:
                            break
                        continue
                    self._record("resp", info)
                client.sendall(f)
        except (EOFError, OSError):
            pass
        self._close(client, upstream)

    def requests(self) -> list[dict]:
        with self._lock:
            return [i for _t, k, i in self.log if k == "req"]

    def describe_log(self) -> str:
        with self._lock:
            return "\n".join(f"  {t:6.2f}s {k:7} {i}" for t, k, i in self.log)

    def close(self) -> None:
        self._stop.set()
        self._ls.close()
        with self._lock:
            socks = list(self._socks)
        self._close(*socks)


@pytest.mark.parametrize("after_drop", ["keep-connection", "close-connection"])
def test_lost_first_heartbeat_response_leaves_no_ghost(make_broker, after_drop):
    b = make_broker(*GROUP_ARGS, start=False)
    proxy = DropFirstHeartbeatResponseProxy(b.port, close_after_drop=after_drop == "close-connection")
    b.extra_args += ["--advertise", f"127.0.0.1:{proxy.port}"]
    b.start()
    via_proxy = f"127.0.0.1:{proxy.port}"
    topic, group = name("gretry-t"), name("gretry")
    m = None
    try:
        produced = produce_values(via_proxy, topic, "a", 10)
        # socket.timeout.ms bounds how long librdkafka waits for the swallowed response.
        m = Member(via_proxy, group, topic, "m1", **{"socket.timeout.ms": 4000})
        wait_until(proxy.dropped.is_set, 20, "the first ConsumerGroupHeartbeat response", step=poll_all(m))
        wait_until(lambda: m.parts() == list(range(PARTS)), 40,
                   "the member to get all 6 partitions after the lost response", step=poll_all(m))
        wait_until(lambda: set(m.values()) >= set(produced), 30, "every record", step=poll_all(m))
        reqs = proxy.requests()
        first, mid = reqs[0], m.c.memberid()
        ids = [r["member_id"] for r in reqs]
        report = f"member id now {mid!r}; heartbeats through the proxy:\n{proxy.describe_log()}"
        assert first["epoch"] == 0, report
        assert set(ids) == {mid}, f"librdkafka changed its member ID on retry; {report}"
        d = wait_group(b.bootstrap, group, 1, step=poll_all(m))
        assert members_summary(d) == {mid: list(range(PARTS))}, f"{members_summary(d)}; {report}"
        if after_drop == "keep-connection":
            # Still the one member after a session timeout (6 s): no stale timer from the first join evicts it.
            deadline = time.monotonic() + 7
            while time.monotonic() < deadline:
                m.poll(0.1)
            d = describe(b.bootstrap, group)
            assert members_summary(d) == {mid: list(range(PARTS))}, f"{members_summary(d)}; {report}"
        produced += produce_values(via_proxy, topic, "b", 5)
        wait_until(lambda: set(m.values()) >= set(produced), 30, "every record of batch b", step=poll_all(m))
        assert_exactly_once(produced, m)
        print(report)  # shown with -rP
    finally:
        if m is not None:
            m.close()
        proxy.close()
