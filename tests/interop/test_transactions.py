"""Kafka transactions (KIP-98) against Skiff: confluent-kafka 2.16.1 (librdkafka 2.16.0) and
kafka-python 3.0.12.

What is covered: commit / abort / commit on a 3-partition topic (read_committed sees exactly the
committed records, read_uncommitted all of them, and every transaction end takes one offset per
partition for its control batch); the last stable offset of an open transaction (read_committed
stops there, also for non-transactional records behind it, and the read_committed ListOffsets end
is the LSO); consume-transform-produce with ``send_offsets_to_transaction`` (the group's offsets
move with a committed transaction, not with an aborted one); fencing by a second producer with the
same ``transactional.id`` (its open transaction is aborted, its late writes are refused); the
broker aborting a transaction that outlives ``transaction.timeout.ms``; kafka-python's
transactional producer and read_committed consumer; an open transaction across a broker restart.

Requests the clients send (read from their sources; the broker must offer these versions):

- librdkafka 2.16: FindCoordinator v0-2 (key_type=1 needs v1+, so a broker offering only v3+
  leaves librdkafka without a transaction coordinator), InitProducerId v0-4 (v3-4 when it bumps its
  own epoch after an abortable error, KIP-360), AddPartitionsToTxn v0 only, AddOffsetsToTxn v0
  only, TxnOffsetCommit v0-3, EndTxn v0-1. Fetch v4+ with isolation_level; ListOffsets carries the
  consumer's isolation.level (so ``get_watermark_offsets`` of a read_committed consumer is the LSO).
- kafka-python 3.0.12: FindCoordinator up to v6 (v4+ with coordinator_keys), InitProducerId up to
  v4, AddPartitionsToTxn / AddOffsetsToTxn / TxnOffsetCommit / EndTxn up to v3 (each the highest
  version the broker offers, capped there).

The tests check first that the broker advertises AddPartitionsToTxn (24), AddOffsetsToTxn (25),
EndTxn (26), TxnOffsetCommit (28) and FindCoordinator v1+ (``kafka_wire.require_api``).

``SKIFF_TXN_MOCK=1`` runs the tests against librdkafka's in-process mock cluster instead of a Skiff
broker, to check the tests themselves. The mock of librdkafka 2.16.0 writes control batches but
reports LSO = high watermark and no aborted transactions in Fetch, allocates a new producer id on
every InitProducerId (so nothing is fenced), never commits TxnOffsetCommit offsets, never times
transactions out and cannot restart; the checks that need those skip there (see ``MOCK_GAPS``),
and kafka-python is pinned to ``api_version=(2, 0)`` there (see README, librdkafka's mock cluster).
"""

from __future__ import annotations

import gc
import os
import threading
import time
import uuid
from dataclasses import dataclass, field

import kafka
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kafka_wire as kw
from confluent_util import DEADLINE_S, consumer, merge, produce_in_order, producer, tagged_values
from skiff_harness import SkiffBroker

pytestmark = pytest.mark.timeout(60)

PARTS = 3
#: Bound for every transactional call (init/commit/abort/send_offsets) of either client.
TXN_CALL_S = 20.0

FIND_COORDINATOR, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 10, 24, 25, 26, 28
for _key, _name in ((ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn"), (ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn"),
                    (END_TXN, "EndTxn"), (TXN_OFFSET_COMMIT, "TxnOffsetCommit"),
                    (FIND_COORDINATOR, "FindCoordinator")):
    kw.API_NAMES.setdefault(_key, _name)

MOCK = os.environ.get("SKIFF_TXN_MOCK", "").strip().lower() in {"1", "true", "yes"}

#: What librdkafka 2.16.0's mock cluster does not do (checked against it; see the module docstring).
MOCK_GAPS = {
    "read_committed": "Fetch reports LSO = high watermark and no aborted transactions, so read_committed "
                      "consumers see open and aborted records",
    "fencing": "InitProducerId without a current producer id allocates a new id: nothing is fenced or aborted",
    "txn_offsets": "TxnOffsetCommit is acknowledged but the offsets never reach the group",
    "txn_timeout": "transactions never time out",
    "restart": "it cannot be restarted",
}


@dataclass
class Cluster:
    """Where the tests run: a Skiff broker (default) or librdkafka's mock cluster (SKIFF_TXN_MOCK=1)."""
    bootstrap: str
    kind: str  # "skiff" | "mock"
    broker: SkiffBroker | None = None
    gaps: list[str] = field(default_factory=list)

    def has(self, feature: str) -> bool:
        """False (and remembered) when the mock lacks ``feature``; the caller skips those checks."""
        if self.kind == "mock" and feature in MOCK_GAPS:
            if feature not in self.gaps:
                self.gaps.append(feature)
            return False
        return True

    def need(self, feature: str) -> None:
        """Skip the rest of the test where ``feature`` is missing."""
        if not self.has(feature):
            self.done()

    def done(self) -> None:
        """End of a test: on the mock, report what could not be checked there as a skip."""
        if self.gaps:
            pytest.skip("checked what librdkafka's mock cluster supports; not checked: "
                        + "; ".join(f"{g} ({MOCK_GAPS[g]})" for g in self.gaps))

    def require(self, *api_keys: int) -> None:
        """Fail unless Skiff advertises these APIs (FindCoordinator: v1+ for key_type 1)."""
        if self.kind != "skiff":
            return
        kw.require_api(self.bootstrap, FIND_COORDINATOR, 1)
        for k in api_keys:
            kw.require_api(self.bootstrap, k)


@pytest.fixture
def cluster(request):
    if MOCK:
        yield Cluster(request.getfixturevalue("mock_cluster"), "mock")
    else:
        b = request.getfixturevalue("broker")
        yield Cluster(b.bootstrap, "skiff", broker=b)
    # Clients kept alive by reference cycles (pytest.raises' traceback -> frame) would otherwise
    # outlive the broker, which is stopped right after this, and log reconnect failures.
    gc.collect()


# ------------------------------------------------------------------------------------------ helpers


def uniq(prefix: str) -> str:
    return f"txn-{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(cluster: Cluster, prefix: str, parts: int = PARTS) -> str:
    """A new topic with at least ``parts`` partitions (the mock auto-creates topics with 4)."""
    topic = uniq(prefix)
    if cluster.kind == "skiff":
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 10000, "log_level": 4})
        (fut,) = admin.create_topics([NewTopic(topic, num_partitions=parts, replication_factor=1)],
                                     operation_timeout=10, request_timeout=15).values()
        fut.result(timeout=DEADLINE_S)
        return topic
    # The mock has no CreateTopics: a producer's metadata request auto-creates the topic.
    p = producer(cluster.bootstrap)
    deadline = time.monotonic() + DEADLINE_S
    while True:
        t = p.list_topics(topic, timeout=5).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) >= parts:
            return topic
        assert time.monotonic() < deadline, f"topic {topic} not auto-created: {t and t.error}"
        time.sleep(0.1)


class ErrorLog:
    """error_cb collector for non-fatal client errors (e.g. transport errors during a restart), which
    librdkafka would otherwise log. Fatal ones (fencing) never get here: confluent-kafka raises them
    as KafkaException from the next call that serves the client's queue (poll, flush, commit, ...)."""

    def __init__(self):
        self.seen: list[KafkaError] = []

    def __call__(self, err: KafkaError) -> None:
        self.seen.append(err)


def txn_producer(cluster: Cluster, tid: str, **conf) -> Producer:
    """A confluent-kafka transactional producer (acks=all and idempotence are implied)."""
    return producer(cluster.bootstrap, **{"transactional.id": tid, "error_cb": ErrorLog(), **conf})


def plain_producer(cluster: Cluster) -> Producer:
    return producer(cluster.bootstrap, acks="all", **{"enable.idempotence": False})


def produce(p: Producer, topic: str, values: dict[int, list[bytes]]) -> dict[int, list[tuple[int, bytes]]]:
    return produce_in_order(p, topic, values, DEADLINE_S, keyed=True)


def vals(tag: str, n: int, parts=range(PARTS)) -> dict[int, list[bytes]]:
    return tagged_values(tag, n, parts)


class Reader:
    """One confluent consumer on ``assign()``ed partitions from the beginning, with an isolation level.

    ``got[p]`` is [(offset, value)] in arrival order. ``at_end`` holds the partitions whose last event
    was _PARTITION_EOF: for read_committed, librdkafka reports EOF at the last stable offset.
    Every wait is bounded.
    """

    def __init__(self, cluster: Cluster, topic: str, isolation: str, parts=range(PARTS)):
        self.topic = topic
        self.parts = list(parts)
        self.c = consumer(cluster.bootstrap, **{"isolation.level": isolation, "enable.partition.eof": True,
                                                "fetch.wait.max.ms": 100})
        self.c.assign([TopicPartition(topic, part, OFFSET_BEGINNING) for part in self.parts])
        self.got: dict[int, list[tuple[int, bytes]]] = {part: [] for part in self.parts}
        self.at_end: set[int] = set()

    def pump(self, timeout: float = 0.2) -> None:
        for m in self.c.consume(num_messages=1000, timeout=timeout):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self.at_end.add(m.partition())
                    continue
                raise KafkaException(err)
            self.got[m.partition()].append((m.offset(), m.value()))
            self.at_end.discard(m.partition())

    def until(self, pred, what: str, timeout: float = DEADLINE_S) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; "
                                     f"got {self.summary()}, at end: {sorted(self.at_end)}")
            self.pump()

    def to_end(self, timeout: float = DEADLINE_S) -> dict[int, list[tuple[int, bytes]]]:
        self.until(lambda: self.at_end >= set(self.parts), "EOF on every partition", timeout)
        return self.got

    def high(self, part: int) -> int:
        """End offset by ListOffsets with this consumer's isolation level (read_committed: the LSO)."""
        wm = self.c.get_watermark_offsets(TopicPartition(self.topic, part), timeout=10, cached=False)
        assert wm is not None, "ListOffsets timed out"
        return wm[1]

    def summary(self) -> dict[int, list[bytes]]:
        return {part: [v for _, v in recs] for part, recs in self.got.items()}

    def close(self) -> None:
        self.c.close()


def read_to_end(cluster: Cluster, topic: str, isolation: str, parts=range(PARTS)) -> dict[int, list]:
    r = Reader(cluster, topic, isolation, parts)
    try:
        return r.to_end()
    finally:
        r.close()


def fatal_or_abortable(exc: KafkaException) -> KafkaError:
    err = exc.args[0]
    assert isinstance(err, KafkaError), exc
    assert err.fatal() or err.txn_requires_abort(), f"expected a fatal or abortable error, got {err!r}"
    return err


FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


# ------------------------------------------------------------------------------------------- tests


def test_commit_abort_commit(cluster):
    """Three transactions on 3 partitions: commit N, abort M, commit K per partition.

    Breaks if: the abort marker is missing or not a control batch (read_uncommitted would see an
    extra record, or the offsets would not leave one gap per transaction end); the Fetch response
    lacks the aborted transaction (read_committed would see the M aborted records); the commit of
    the third transaction is not visible (LSO stuck); offsets are not the acknowledged ones.
    """
    cluster.require(ADD_PARTITIONS_TO_TXN, END_TXN)
    N, M, K = 7, 5, 4
    topic = create_topic(cluster, "cac")
    p = txn_producer(cluster, uniq("tid"))
    p.init_transactions(TXN_CALL_S)

    def txn(tag: str, n: int, commit: bool):
        p.begin_transaction()
        acked = produce(p, topic, vals(tag, n))
        (p.commit_transaction if commit else p.abort_transaction)(TXN_CALL_S)
        return acked

    a, b, c = txn("a", N, True), txn("b", M, False), txn("c", K, True)

    # One control batch (one offset) per partition at the end of each transaction.
    for part in range(PARTS):
        offsets = [[o for o, _ in run[part]] for run in (a, b, c)]
        assert offsets == [list(range(N)), list(range(N + 1, N + 1 + M)), list(range(N + M + 2, N + M + 2 + K))], \
            f"partition {part}: data offsets {offsets}, want one marker offset after each transaction"

    ru = Reader(cluster, topic, "read_uncommitted")
    try:
        assert ru.to_end() == merge(a, b, c), "read_uncommitted sees every data record and no marker"
        for part in range(PARTS):
            assert ru.high(part) == N + M + K + 3, f"partition {part}: high watermark counts the 3 markers"
    finally:
        ru.close()

    if cluster.has("read_committed"):
        rc = Reader(cluster, topic, "read_committed")
        try:
            assert rc.to_end() == merge(a, c), "read_committed: exactly the committed records, in order"
            for part in range(PARTS):
                assert rc.high(part) == N + M + K + 3, f"partition {part}: no open transaction, LSO = HWM"
        finally:
            rc.close()
    cluster.done()


def test_last_stable_offset_of_open_transaction(cluster):
    """An open transaction holds back read_committed consumers at its first offset (the LSO).

    Committed transaction A on partitions 0-2; open transaction B on partitions 0 and 1 (produced and
    flushed, not committed); then non-transactional records on partition 0 (behind B) and on
    partition 2 (no open transaction there). read_committed must end at the LSO: A only on 0 and 1
    (the plain records behind B are hidden too), A + the plain records on 2, and the read_committed
    ListOffsets end equals that LSO. read_uncommitted sees everything at once. After B commits, the
    same read_committed consumer gets B and the records behind it.

    Breaks if: the broker serves read_committed fetches up to the high watermark; the LSO is per
    topic rather than per partition; ListOffsets ignores isolation_level; the LSO does not advance
    on commit (a long-polling read_committed fetch must return once it does).
    """
    cluster.require(ADD_PARTITIONS_TO_TXN, END_TXN)
    topic = create_topic(cluster, "lso")
    p = txn_producer(cluster, uniq("tid"))
    p.init_transactions(TXN_CALL_S)
    p.begin_transaction()
    a = produce(p, topic, vals("a", 3))
    p.commit_transaction(TXN_CALL_S)

    p.begin_transaction()
    b = produce(p, topic, vals("b", 4, parts=[0, 1]))
    after = produce(plain_producer(cluster), topic, {0: [b"after-0", b"after-1"], 2: [b"free-0", b"free-1"]})
    assert [o for o, _ in b[0]] == [4, 5, 6, 7] and [o for o, _ in after[0]] == [8, 9], (b, after)

    ru = Reader(cluster, topic, "read_uncommitted")
    try:
        assert ru.to_end() == merge(a, b, after)
        assert [ru.high(part) for part in range(PARTS)] == [10, 8, 6]
    finally:
        ru.close()

    if cluster.has("read_committed"):
        rc = Reader(cluster, topic, "read_committed")
        try:
            assert rc.to_end() == merge(a, {2: after[2]}), "read_committed must stop at the open transaction"
            assert [rc.high(part) for part in range(PARTS)] == [4, 4, 6], "read_committed end offsets = LSO"

            p.commit_transaction(TXN_CALL_S)
            want = merge(a, b, after)
            rc.until(lambda: rc.got == want, "transaction B and the records behind it after the commit")
            rc.to_end()
            assert rc.got == want
            assert [rc.high(part) for part in range(PARTS)] == [11, 9, 6], "LSO = HWM once B has its markers"
        finally:
            rc.close()
    else:
        p.commit_transaction(TXN_CALL_S)
    cluster.done()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consume_transform_produce(cluster, protocol):
    """send_offsets_to_transaction: the group's offsets commit with the transaction, not before.

    Round 1: a read_committed consumer in a classic or a KIP-848 group (TxnOffsetCommit then
    carries the member ID and generation or member epoch, which the broker checks) reads the whole
    input; a transactional
    producer writes transformed records to the output topic, sends the consumer's positions with
    its group metadata (AddOffsetsToTxn + TxnOffsetCommit) and commits: the group's committed
    offsets are the input's end offsets and read_committed sees the output. Round 2: more input,
    same steps, but abort: the committed offsets stay, read_committed output gains nothing.

    Breaks if: TxnOffsetCommit offsets are applied immediately (round 2 would move them) or never
    (round 1 would not); OffsetFetch reports pending transactional offsets; EndTxn does not
    complete the offsets for the group named in AddOffsetsToTxn.
    """
    cluster.require(ADD_PARTITIONS_TO_TXN, END_TXN, ADD_OFFSETS_TO_TXN, TXN_OFFSET_COMMIT)
    inp, out = create_topic(cluster, "in"), create_topic(cluster, "out")
    group = uniq("group")
    pp = plain_producer(cluster)
    produce(pp, inp, vals("in1", 10))

    if protocol == "consumer" and cluster.kind == "mock":
        pytest.skip("KIP-848 groups are checked against Skiff only")
    timeouts = ({"session.timeout.ms": 10000, "heartbeat.interval.ms": 500} if protocol == "classic" else {})
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "group.protocol": protocol,
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest", "socket.timeout.ms": 10000, "log_level": 4, **timeouts})
    c.subscribe([inp])
    p = txn_producer(cluster, uniq("tid"))
    tps = [TopicPartition(inp, part) for part in range(PARTS)]

    def consume(n: int) -> list:
        msgs = []
        deadline = time.monotonic() + 30  # includes the group join
        while len(msgs) < n:
            assert time.monotonic() < deadline, f"consumed {len(msgs)} of {n} input records"
            for m in c.consume(num_messages=n - len(msgs), timeout=0.5):
                if m.error() is not None:
                    raise KafkaException(m.error())
                msgs.append(m)
        return msgs

    def transform_round(tag: str, msgs: list, commit: bool):
        p.begin_transaction()
        outv = {part: [] for part in range(PARTS)}
        for m in msgs:
            outv[m.partition()].append(tag.encode() + b":" + m.value())
        acked = produce(p, out, outv)
        positions = c.position(c.assignment())
        p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), TXN_CALL_S)
        (p.commit_transaction if commit else p.abort_transaction)(TXN_CALL_S)
        # (The mock auto-creates 4 partitions; only 0-2 carry records.)
        return acked, {tp.partition: tp.offset for tp in positions if tp.topic == inp and tp.partition < PARTS}

    def committed() -> dict[int, int]:
        return {tp.partition: tp.offset for tp in c.committed(tps, timeout=10)}

    try:
        p.init_transactions(TXN_CALL_S)
        r1, pos1 = transform_round("r1", consume(PARTS * 10), commit=True)
        assert pos1 == {part: 10 for part in range(PARTS)}, pos1
        if cluster.has("txn_offsets"):
            assert committed() == pos1, "committed transaction must commit the group's offsets"

        produce(pp, inp, vals("in2", 5))
        r2, pos2 = transform_round("r2", consume(PARTS * 5), commit=False)
        assert pos2 == {part: 15 for part in range(PARTS)}, pos2
        if cluster.has("txn_offsets"):
            assert committed() == pos1, "aborted transaction must not move the group's offsets"
    finally:
        c.close()

    assert read_to_end(cluster, out, "read_uncommitted") == merge(r1, r2)
    if cluster.has("read_committed"):
        assert read_to_end(cluster, out, "read_committed") == merge(r1), "aborted round must stay invisible"
    cluster.done()


def test_second_producer_fences_first(cluster):
    """init_transactions of a second producer with the same transactional.id fences the first.

    The first producer has an open transaction (3 records produced and flushed). The second's
    init_transactions must abort it and bump the epoch; the first producer's next write is refused
    (never in the log) and its commit fails with a fatal fencing error. The second producer's
    transaction commits and is the only one read_committed sees.

    Breaks if: the coordinator hands out a new producer id without aborting the open transaction,
    or accepts writes or EndTxn from the old epoch, or answers the old producer with an error that
    librdkafka treats as retriable/abortable instead of fatal (PRODUCER_FENCED or
    INVALID_PRODUCER_EPOCH are both fatal for it).
    """
    cluster.require(ADD_PARTITIONS_TO_TXN, END_TXN)
    topic = create_topic(cluster, "fence")
    tid = uniq("tid")
    p1 = txn_producer(cluster, tid)
    p1.init_transactions(TXN_CALL_S)
    p1.begin_transaction()
    open1 = produce(p1, topic, {0: [b"p1-open-0", b"p1-open-1", b"p1-open-2"]})

    p2 = txn_producer(cluster, tid)
    p2.init_transactions(TXN_CALL_S)  # aborts p1's transaction (may take CONCURRENT_TRANSACTIONS retries)

    fenced = cluster.has("fencing")
    if fenced:
        # The write is refused (INVALID_PRODUCER_EPOCH). librdkafka then raises the fatal error from
        # whichever call serves its queue next (confluent-kafka turns a fatal error into an exception,
        # not an error_cb call), so no delivery callback and no flush() here: commit_transaction()
        # flushes and must fail fatally.
        p1.produce(topic, value=b"p1-late", partition=0)
        with pytest.raises(KafkaException) as ei:
            p1.commit_transaction(TXN_CALL_S)
        err = ei.value.args[0]
        assert err.fatal(), f"fenced producer's commit must fail fatally, got {err!r}"
        assert err.code() in FENCED_CODES, f"unexpected error for a fenced producer: {err!r}"

    p2.begin_transaction()
    c2 = produce(p2, topic, {0: [b"p2-0", b"p2-1", b"p2-2"]})
    p2.commit_transaction(TXN_CALL_S)

    ru = read_to_end(cluster, topic, "read_uncommitted", parts=[0])
    if fenced:
        assert b"p1-late" not in [v for _, v in ru[0]], "a write with the fenced epoch reached the log"
        assert ru == merge(open1, c2)
        if cluster.has("read_committed"):
            assert read_to_end(cluster, topic, "read_committed", parts=[0]) == c2, \
                "the fenced producer's open transaction must be aborted"
    cluster.done()


@pytest.mark.timeout(75)
def test_transaction_timeout_aborts(cluster):
    """A transaction left open past transaction.timeout.ms is aborted by the broker.

    The producer (transaction.timeout.ms=3000) writes 3 records to partition 0 and then nothing;
    a plain producer writes 2 records behind them. read_committed sees nothing of partition 0
    before the timeout, and within 30 s after it sees the 2 plain records (the LSO moved past the
    aborted transaction) but never the transactional ones. The producer's commit then fails with a
    fatal or abortable error (the epoch was bumped or the transaction is gone).

    Breaks if: the broker rejects a 3 s transaction.timeout.ms in InitProducerId; never expires
    transactions (read_committed stalls on partition 0 for good); commits instead of aborting;
    aborts before the timeout; accepts the late commit.
    """
    cluster.require(ADD_PARTITIONS_TO_TXN, END_TXN)
    timeout_ms = 3000
    topic = create_topic(cluster, "timeout", parts=1)
    # librdkafka refuses message.timeout.ms or socket.timeout.ms above transaction.timeout.ms.
    p = txn_producer(cluster, uniq("tid"), **{"transaction.timeout.ms": timeout_ms,
                                              "message.timeout.ms": timeout_ms, "socket.timeout.ms": timeout_ms})
    p.init_transactions(TXN_CALL_S)
    began = time.monotonic()
    p.begin_transaction()
    txn = produce(p, topic, {0: [b"txn-0", b"txn-1", b"txn-2"]})
    after = produce(plain_producer(cluster), topic, {0: [b"after-0", b"after-1"]})
    assert [o for o, _ in txn[0]] == [0, 1, 2] and [o for o, _ in after[0]] == [3, 4], (txn, after)
    if not cluster.has("txn_timeout"):
        p.abort_transaction(TXN_CALL_S)
        cluster.done()

    rc = Reader(cluster, topic, "read_committed", parts=[0])
    try:
        # Nothing may show up while the transaction cannot have timed out yet.
        while time.monotonic() < began + timeout_ms / 1000 * 0.8:
            rc.pump()
            assert rc.got[0] == [], "read_committed saw records of/behind a transaction that is still open"
        rc.until(lambda: len(rc.got[0]) >= 2, "the broker to abort the timed-out transaction", timeout=30)
        rc.to_end()
        assert rc.got[0] == after[0], "only the non-transactional records, at their offsets"
        assert rc.high(0) == 6, "read_committed end offset: the abort marker at 5, nothing open"
    finally:
        rc.close()

    with pytest.raises(KafkaException) as ei:
        p.commit_transaction(TXN_CALL_S)
    fatal_or_abortable(ei.value)
    assert read_to_end(cluster, topic, "read_uncommitted", parts=[0]) == merge(txn, after)


# ------------------------------------------------------------------------------------- kafka-python

KP_COMMON = {"request_timeout_ms": 10000, "retry_backoff_ms": 100}


def kp_conf(cluster: Cluster) -> dict:
    # The mock answers ApiVersions v3+ in a layout kafka-python cannot decode (README).
    return {**KP_COMMON, **({"api_version": (2, 0)} if cluster.kind == "mock" else {})}


def kp_consumer_conf(cluster: Cluster) -> dict:
    # The mock writes its control batches with a wrong CRC; kafka-python checks CRCs by default
    # (librdkafka does not), so a broker's markers must carry a valid CRC-32C.
    return {**kp_conf(cluster), **({"check_crcs": False} if cluster.kind == "mock" else {})}


def bounded(fn, what: str, timeout: float = TXN_CALL_S):
    """Run ``fn`` in a daemon thread; kafka-python's commit/abort/send_offsets wait without a timeout."""
    box: dict = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            box["exc"] = exc

    t = threading.Thread(target=run, name=f"kafka-python {what}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise AssertionError(f"kafka-python {what} did not return within {timeout:.0f}s")
    if "exc" in box:
        raise box["exc"]
    return box.get("result")


def kp_read_to_end(cluster: Cluster, topic: str, isolation: str, parts=range(PARTS)):
    """kafka-python consumer (assign, from the beginning) up to end_offsets, which kafka-python asks
    with its isolation level (read_committed: the LSO). Returns {partition: [(offset, value)]}."""
    c = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=None, enable_auto_commit=False,
                            auto_offset_reset="earliest", isolation_level=isolation, **kp_consumer_conf(cluster))
    got = {part: [] for part in parts}
    try:
        tps = [kafka.TopicPartition(topic, part) for part in parts]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)
        deadline = time.monotonic() + DEADLINE_S
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"stuck below end offsets {ends}: got {got}"
            for tp, recs in c.poll(timeout_ms=300, max_records=1000).items():
                got[tp.partition].extend((r.offset, r.value) for r in recs)
    finally:
        c.close(autocommit=False)
    return got


def test_kafka_python_transactions(cluster):
    """kafka-python 3.0.12's transactional producer: init, commit N, abort M, commit K per partition.

    kafka-python does implement KIP-98 (kafka/producer/transaction_manager.py: FindCoordinator
    key_type=1, InitProducerId, AddPartitionsToTxn, EndTxn, AddOffsetsToTxn + TxnOffsetCommit) and
    read_committed fetching (aborted_transactions, control batches skipped). A read_uncommitted
    kafka-python consumer sees all data records and no markers; a read_committed one exactly the
    committed ones, and stops at the same end.

    Breaks if: any of those requests is missing at the versions kafka-python negotiates (it picks
    the highest both sides offer, capped at v3 for the txn APIs and v4 for InitProducerId);
    markers are not control batches (kafka-python would return them as records); Fetch lacks the
    aborted transactions.
    """
    cluster.require(ADD_PARTITIONS_TO_TXN, END_TXN)
    N, M, K = 6, 4, 3
    topic = create_topic(cluster, "kp")
    p = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=uniq("tid"),
                            max_block_ms=int(TXN_CALL_S * 1000), linger_ms=5, **kp_conf(cluster))
    try:
        bounded(p.init_transactions, "init_transactions")

        def txn(tag: str, n: int, commit: bool):
            bounded(p.begin_transaction, "begin_transaction")
            futs = {part: [p.send(topic, value=v, key=b"k", partition=part) for v in vs]
                    for part, vs in vals(tag, n).items()}
            p.flush(timeout=DEADLINE_S)
            acked = {part: [(f.get(timeout=5).offset, v) for f, v in zip(fs, vals(tag, n)[part])]
                     for part, fs in futs.items()}
            bounded(p.commit_transaction if commit else p.abort_transaction, "commit" if commit else "abort")
            return acked

        a, b, c = txn("a", N, True), txn("b", M, False), txn("c", K, True)
    finally:
        p.close(timeout=5)
    for part in range(PARTS):
        assert [o for o, _ in b[part]] == list(range(N + 1, N + 1 + M)), f"partition {part}: one marker per end"
        assert [o for o, _ in c[part]] == list(range(N + M + 2, N + M + 2 + K)), f"partition {part}"

    assert kp_read_to_end(cluster, topic, "read_uncommitted") == merge(a, b, c)
    if cluster.has("read_committed"):
        assert kp_read_to_end(cluster, topic, "read_committed") == merge(a, c)
    cluster.done()


# ----------------------------------------------------------------------------------------- restart


@pytest.mark.timeout(90)
def test_open_transaction_across_restart(cluster):
    """Committed and open transactions survive a graceful broker restart correctly.

    Before the restart: transaction C1 committed, transaction U produced + flushed but open, a plain
    record S behind U. After ``broker.restart()``: read_uncommitted still has C1, U and S (U was
    acknowledged with acks=all); read_committed has C1 and never U (S only if the broker aborted U on
    its own). A new producer with the same transactional.id then inits (aborting U if it is still
    open), commits C2; read_committed sees C1, S, C2 and still not U; the old producer is fenced.

    Breaks if: transaction state (producer epoch, ongoing transaction, its first offset) or the
    aborted-transaction index is lost on restart, so U becomes visible, or the LSO never moves past
    U (read_committed stalls), or the old producer can still commit.
    """
    cluster.require(ADD_PARTITIONS_TO_TXN, END_TXN)
    cluster.need("restart")
    topic = create_topic(cluster, "restart", parts=1)
    tid = uniq("tid")
    p1 = txn_producer(cluster, tid, **{"transaction.timeout.ms": 60000})
    p1.init_transactions(TXN_CALL_S)
    p1.begin_transaction()
    c1 = produce(p1, topic, {0: [b"c1-0", b"c1-1", b"c1-2", b"c1-3"]})
    p1.commit_transaction(TXN_CALL_S)
    p1.begin_transaction()
    u = produce(p1, topic, {0: [b"u-0", b"u-1", b"u-2"]})
    s = produce(plain_producer(cluster), topic, {0: [b"s-0"]})
    assert [o for o, _ in u[0]] == [5, 6, 7] and [o for o, _ in s[0]] == [8], (u, s)
    assert read_to_end(cluster, topic, "read_committed", parts=[0]) == c1

    cluster.broker.restart()

    assert read_to_end(cluster, topic, "read_uncommitted", parts=[0]) == merge(c1, u, s)
    seen = read_to_end(cluster, topic, "read_committed", parts=[0])
    assert seen in (c1, merge(c1, s)), f"after restart read_committed must show C1 (and maybe S), not U: {seen}"

    p2 = txn_producer(cluster, tid)
    p2.init_transactions(TXN_CALL_S)
    p2.begin_transaction()
    c2 = produce(p2, topic, {0: [b"c2-0", b"c2-1"]})
    p2.commit_transaction(TXN_CALL_S)

    rc = read_to_end(cluster, topic, "read_committed", parts=[0])
    assert rc == merge(c1, s, c2), f"read_committed after re-init: {rc}"
    with pytest.raises(KafkaException) as ei:
        p1.commit_transaction(TXN_CALL_S)
    assert ei.value.args[0].fatal(), f"the old producer must be fenced, got {ei.value.args[0]!r}"
