"""confluent-kafka helpers shared by the Skiff interop tests. Every wait here is bounded."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

#: Bound for any single produce/flush/consume loop in these helpers.
DEADLINE_S = 20.0


@dataclass
class Rec:
    """A record as produced and as it must come back."""
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None = None
    timestamp: int = 0  # CreateTime in ms; 0 = let the client choose

    def ident(self):
        return (self.key, self.value, _norm_headers(self.headers), self.timestamp or None)


@dataclass
class Got:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None
    timestamp_type: int
    timestamp: int

    def ident(self, with_ts: bool = True):
        return (self.key, self.value, _norm_headers(self.headers), self.timestamp if with_ts else None)


def _norm_headers(h):
    return list(h) if h else []


@dataclass
class DeliveryLog:
    ok: list[tuple[int, int, bytes | None]] = field(default_factory=list)  # (partition, offset, value)
    errors: list[tuple[KafkaError, bytes | None]] = field(default_factory=list)

    def __call__(self, err, msg):
        if err is not None:
            self.errors.append((err, msg.value()))
        else:
            self.ok.append((msg.partition(), msg.offset(), msg.value()))


def producer(bootstrap: str, **conf) -> Producer:
    base = {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": int(DEADLINE_S * 1000),
            "socket.timeout.ms": 10000, "log_level": 4}
    base.update(conf)
    return Producer(base)


def consumer(bootstrap: str, **conf) -> Consumer:
    # librdkafka insists on a group.id even with assign(); nothing is ever committed.
    base = {"bootstrap.servers": bootstrap, "group.id": "skiff-interop-unused", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "auto.offset.reset": "earliest", "socket.timeout.ms": 10000,
            "log_level": 4}
    base.update(conf)
    return Consumer(base)


def produce_all(p: Producer, topic: str, per_partition: dict[int, list[Rec]], log: DeliveryLog | None = None,
                timeout: float = DEADLINE_S) -> DeliveryLog:
    """Produce records round-robin over the given partitions (per-partition order kept); flush; bounded."""
    log = log or DeliveryLog()
    queues = {p_: list(recs) for p_, recs in per_partition.items()}
    while any(queues.values()):
        for part, q in queues.items():
            if q:
                r = q.pop(0)
                kw = {}
                if r.headers is not None:
                    kw["headers"] = r.headers
                if r.timestamp:
                    kw["timestamp"] = r.timestamp
                p.produce(topic, key=r.key, value=r.value, partition=part, on_delivery=log, **kw)
                p.poll(0)
    left = p.flush(timeout)
    assert left == 0, f"{left} records still undelivered after {timeout}s (errors so far: {log.errors[:5]})"
    return log


def consume_partitions(bootstrap: str, topic: str, expected: dict[int, int], start: int = OFFSET_BEGINNING,
                       timeout: float = DEADLINE_S, **conf) -> dict[int, list[Got]]:
    """Read ``expected[p]`` records from each partition with assign() (no group); fail after ``timeout``."""
    c = consumer(bootstrap, **conf)
    got: dict[int, list[Got]] = {p: [] for p in expected}
    try:
        c.assign([TopicPartition(topic, p, start) for p in expected])
        deadline = time.monotonic() + timeout
        while any(len(got[p]) < n for p, n in expected.items()):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out: got {({p: len(v) for p, v in got.items()})}, want {expected}")
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                ts_type, ts = m.timestamp()
                got[m.partition()].append(Got(m.partition(), m.offset(), m.key(), m.value(), m.headers(), ts_type, ts))
    finally:
        c.close()
    for p, n in expected.items():
        assert len(got[p]) == n, f"partition {p}: got {len(got[p])} records, want {n}"
    return got


def make_records(n: int, tag: str, ts_base: int | None = None, big: bool = False) -> list[Rec]:
    """n records with varied keys/values/headers: some null keys, a null value, null header values."""
    recs = []
    for i in range(n):
        key = None if i % 7 == 3 else f"{tag}-k{i}".encode()
        value = None if i % 50 == 11 else (f"{tag}-v{i}-".encode() * (40 if big else 1) + bytes([i % 256]))
        headers = None if i % 5 == 0 else [("seq", str(i).encode()), ("dup", b"a"), ("dup", b"b"), ("nul", None)]
        ts = ts_base + i if ts_base is not None else 0
        recs.append(Rec(key, value, headers, ts))
    return recs


def assert_partition_matches(got: list[Got], sent: list[Rec], first_offset: int = 0) -> None:
    assert [g.offset for g in got] == list(range(first_offset, first_offset + len(sent))), "offsets not contiguous"
    for i, (g, s) in enumerate(zip(got, sent)):
        want = s.ident()
        have = g.ident(with_ts=s.timestamp != 0)
        assert have == want, f"record {i} (offset {g.offset}) differs:\n  got  {have}\n  sent {want}"


def produce_in_order(p: Producer, topic: str, values: dict[int, list[bytes]], timeout_s: float,
                     keyed: bool = False) -> dict[int, list[tuple[int, bytes]]]:
    """Produce ``values[partition]`` in order (keys ``k<i>`` when ``keyed``), flush, and return
    {partition: [(offset, value)]} as acknowledged (sorted by offset; per-partition order is the
    produce order)."""
    acked: dict[int, list[tuple[int, bytes]]] = {part: [] for part in values}
    errors: list = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append((err, msg.value()))
        else:
            acked[msg.partition()].append((msg.offset(), msg.value()))

    width = max((len(v) for v in values.values()), default=0)
    for i in range(width):  # interleave partitions, keep per-partition order
        for part, vals in values.items():
            if i < len(vals):
                key = b"k%d" % i if keyed else None
                p.produce(topic, value=vals[i], key=key, partition=part, on_delivery=on_delivery)
        p.poll(0)
    left = p.flush(timeout_s)
    assert left == 0 and not errors, f"{left} records undelivered, errors {errors[:3]}"
    for part, vals in values.items():
        acked[part].sort()
        assert [v for _, v in acked[part]] == vals, f"partition {part}: acknowledged out of order"
    return acked


def tagged_values(tag: str, n: int, parts) -> dict[int, list[bytes]]:
    """``n`` distinct values per partition: ``<tag>-p<partition>-<i>``."""
    return {part: [f"{tag}-p{part}-{i}".encode() for i in range(n)] for part in parts}


def merge(*runs: dict[int, list[tuple[int, bytes]]]) -> dict[int, list[tuple[int, bytes]]]:
    """The (offset, value) lists of several runs together, per partition, by offset."""
    out: dict[int, list[tuple[int, bytes]]] = {}
    for run in runs:
        for part, recs in run.items():
            out.setdefault(part, []).extend(recs)
    return {part: sorted(recs) for part, recs in out.items()}
