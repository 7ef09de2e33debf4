"""Cluster mode, part 3: transactions (KIP-98) across brokers, with confluent-kafka 2.16.1
(librdkafka 2.16.0). Three Skiff brokers share one PostgreSQL database and one object store
(``file://``); a transactional ID hashes onto a coordinator shard like a group ID does, and the
broker that owns the shard is its transaction coordinator.

- ``test_consume_transform_produce_survives_sigkill_of_the_transaction_coordinator``: 300 input
  records with unique values on 3 partitions (produced without a transaction); a
  consume-transform-produce loop (a read_committed consumer in a group, a transactional producer
  bootstrapped through all three brokers) commits one transaction per batch with the consumer's
  positions (``send_offsets_to_transaction``); the group is one that another broker coordinates.
  After some transactions have committed, the transaction coordinator's broker is SIGKILLed
  inside a transaction (after the offsets were sent, before the commit). The loop handles errors
  as a careful application does (retriable: the call again; abortable: abort and rewind the
  consumer to the group's committed offsets; fatal: a new producer, whose ``init_transactions``
  ends the old one's transaction, and the same rewind) and finishes within ``LOOP_S``. Then,
  through a surviving broker: read_committed sees every input value transformed exactly once, in
  input order per partition; it reaches the end of every partition (end-of-partition at the high
  watermark: nothing left open holds the last stable offset back, and the read_committed
  ListOffsets end is the high watermark); the group's committed offsets are the input's ends; a
  survivor now coordinates the transactional ID.
- ``test_aborted_transactions_are_invisible_to_read_committed_across_brokers``: a producer
  bootstrapped through broker 1 commits, aborts and commits a transaction on 3 partitions;
  read_committed consumers bootstrapped through broker 2 and broker 3 see exactly the committed
  records (at their acknowledged offsets), read_uncommitted ones all of them; one control record
  per partition per transaction end.
- ``test_stale_transaction_coordinator_changes_nothing``: a producer commits a transaction and
  leaves a second one open; its coordinator's broker is SIGSTOPped past its lease; a producer
  with the same ``transactional.id`` through the survivors initializes (which must abort the open
  transaction) and commits; after SIGCONT the old producer writes once more and commits, which
  must fail (fenced, or at least abortable), and its late record never reaches the log. Once the
  brokers agree again, every broker names one coordinator for the ID and a third producer commits
  through it; read_committed sees exactly the committed transactions.

How the coordinator's broker is found: FindCoordinator v1 with key_type 1 (transaction) on a raw
socket (``find_coordinator``), asked of every live broker until all of them name the same live
broker twice in a row (``txn_coordinator``); the group's the same way with key_type 0.

Why the group of the first test is coordinated elsewhere: librdkafka 2.16's
``send_offsets_to_transaction`` can block for good, past its timeout, when the group coordinator it
has cached is a broker it has decommissioned (confluentinc/librdkafka#5456, #5511; seen here with a
single broker restarted under the loop). The group coordinator's failover is test_cluster_groups.py's.

What these tests assume of the brokers (besides Kafka's transaction semantics):

- every broker advertises InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
  TxnOffsetCommit and FindCoordinator v1+ in cluster mode (checked first: ``require_transactions``
  fails the test with the missing APIs' names);
- FindCoordinator key_type=1 answers, through any broker, the broker that owns (or is about to
  own) the transactional ID's coordinator shard, with error 0; COORDINATOR_NOT_AVAILABLE,
  COORDINATOR_LOAD_IN_PROGRESS and NOT_COORDINATOR are waited out, any other error fails the test;
  a shard stays with its broker while that broker lives (rendezvous placement: the group of the
  first test keeps its coordinator through the kill);
- the transaction state (producer ID and epoch, the ongoing transaction and its partitions) is
  durable in PostgreSQL before the coordinator answers, so a successor continues it: librdkafka's
  retried EndTxn after the SIGKILL either completes the transaction or fails it with an error
  librdkafka classifies (retriable, abortable or fatal); an EndTxn retry for a transaction that has
  already completed the same way is answered with success (as Kafka does);
- OffsetFetch with ``require_stable`` (librdkafka asks so for read_committed consumers) never
  answers offsets older than a transaction that has ended (UNSTABLE_OFFSET_COMMIT while its
  offsets are pending), so the loop's rewind starts exactly after the last committed batch;
- a fenced producer's EndTxn or Produce is refused by the stale and the new coordinator (or
  partition leader) alike: PRODUCER_FENCED or INVALID_PRODUCER_EPOCH, which librdkafka makes
  fatal; NOT_COORDINATOR / NOT_LEADER_OR_FOLLOWER from the stale broker, after which librdkafka
  asks again. InitProducerId of the new producer answers only once the old producer's open
  transaction is aborted (its markers written), as Kafka's CONCURRENT_TRANSACTIONS retries do;
- librdkafka's end-of-partition for a read_committed consumer comes at the last stable offset, and
  its fetch position moves past trailing control records, so the EOF offset equals the high
  watermark once no transaction is open.

Brokers run with ``cluster.lease.ms=3000``. Without PostgreSQL these tests skip (fail under CI /
``SKIFF_REQUIRE_TOOLS=1``).
"""

from __future__ import annotations

import collections
import struct
import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

import cluster_util as cu
import kafka_wire as kw
from cluster_fixtures import wait_shards
from confluent_util import consumer, merge, produce_in_order, tagged_values
from test_cluster import create_topic, watermarks

pytestmark = [
    pytest.mark.timeout(150),
    pytest.mark.skipif(cu.find_postgres_bin() is None and not cu.services_required(),
                       reason="PostgreSQL is not installed (apt-get install postgresql): cluster mode needs it"),
]

PARTS = 3
#: A bound on every wait here: a lease (3 s) plus detection and a shard takeover fit well inside.
WAIT_S = 60
#: Bound on one transactional call (init/begin/send_offsets/commit/abort) of librdkafka.
TXN_CALL_S = 20.0
#: Bound on reading a topic to its end.
READ_S = 30
#: Bound on the whole consume-transform-produce loop, kill and failover included.
LOOP_S = 90

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN = 10, 22, 24
ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 25, 26, 28
for _key, _name in ((FIND_COORDINATOR, "FindCoordinator"), (INIT_PRODUCER_ID, "InitProducerId"),
                    (ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn"), (ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn"),
                    (END_TXN, "EndTxn"), (TXN_OFFSET_COMMIT, "TxnOffsetCommit")):
    kw.API_NAMES.setdefault(_key, _name)

KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 14, 15, 16
#: FindCoordinator errors that mean "ask again": the shard is moving or loading.
COORDINATOR_MOVING = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}


# ---------------------------------------------------------------------------------------------
# the transaction coordinator, on the wire

def require_transactions(c: cu.Cluster, nodes=None) -> None:
    """Fail (with the missing APIs' names) unless every broker in ``nodes`` (default: all)
    advertises what a librdkafka transactional producer and a read_committed consumer need."""
    for node in nodes or range(1, len(c.brokers) + 1):
        apis = kw.advertised_apis(c.broker(node).bootstrap)
        missing = [kw.API_NAMES[k] for k in (INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN,
                                             END_TXN, TXN_OFFSET_COMMIT) if k not in apis]
        if FIND_COORDINATOR not in apis or apis[FIND_COORDINATOR][1] < 1:
            missing.append("FindCoordinator v1+")
        if missing:
            pytest.fail(f"broker {node} (cluster mode) does not advertise {', '.join(missing)}: "
                        "transactions are not served in cluster mode", pytrace=False)


def find_coordinator(bootstrap: str, key: str, key_type: int = KEY_TYPE_TRANSACTION,
                     timeout: float = 5.0) -> tuple[int, int, str | None]:
    """FindCoordinator v1 (non-flexible: key, key_type) on its own connection:
    (error code, node ID, error message)."""
    k = key.encode()
    body = struct.pack(">h", len(k)) + k + struct.pack(">b", key_type)
    with kw.connect(bootstrap, timeout=timeout) as s:
        s.sendall(kw.request(FIND_COORDINATOR, 1, 31, body))
        cid, data = kw.read_response(s)
    assert cid == 31, cid
    r = kw.Reader(data)
    r.take(">i")  # throttle_time_ms
    code = r.take(">h")
    message = r.string()
    node = r.take(">i")
    r.string()  # host
    r.take(">i")  # port
    return code, node, message


def txn_coordinator(c: cu.Cluster, tid: str, live, timeout: float = WAIT_S) -> int:
    """The broker that every broker in ``live`` names as the coordinator of transactional ID
    ``tid``, itself one of ``live``, the same twice in a row 0.2 s apart."""
    return coordinator(c, tid, KEY_TYPE_TRANSACTION, live, timeout)


def coordinator(c: cu.Cluster, key: str, key_type: int, live, timeout: float = WAIT_S) -> int:
    """The broker that every broker in ``live`` names (FindCoordinator v1) as the coordinator of
    ``key`` (key_type 0: a group, 1: a transactional ID), itself one of ``live``, the same twice in
    a row 0.2 s apart."""
    what = "transactional ID" if key_type == KEY_TYPE_TRANSACTION else "group"
    live = sorted(live)
    deadline = time.monotonic() + timeout
    previous = None
    while True:
        answers: dict[int, object] = {}
        for node in live:
            try:
                code, named, message = find_coordinator(c.broker(node).bootstrap, key, key_type)
            except (OSError, EOFError, AssertionError, struct.error) as exc:
                answers[node] = repr(exc)
                continue
            if code != 0 and code not in COORDINATOR_MOVING:
                pytest.fail(f"FindCoordinator(key_type={key_type}, {key!r}) through broker {node}: error {code} "
                            f"({message})", pytrace=False)
            answers[node] = named if code == 0 else f"error {code} ({message})"
        names = set(answers.values())
        agreed = next(iter(names)) if len(names) == 1 else None
        if isinstance(agreed, int) and agreed in live:
            if agreed == previous:
                return agreed
            previous = agreed
        else:
            previous = None
        if time.monotonic() > deadline:
            raise AssertionError(f"brokers {live} never agreed on one live coordinator of {what} {key!r} "
                                 f"within {timeout:.0f}s; last answers: {answers}")
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------------
# clients

class ErrorLog:
    """error_cb: librdkafka's non-fatal errors (a broker gone, a transport failure), kept for
    failure messages instead of logged. Fatal ones come back as KafkaException from the calls."""

    def __init__(self):
        self.seen: collections.deque[str] = collections.deque(maxlen=50)

    def __call__(self, err: KafkaError) -> None:
        self.seen.append(str(err))


def txn_producer(bootstrap: str, tid: str, **conf) -> Producer:
    """A transactional producer (acks=all and idempotence implied) that gives up on a message
    after 30 s and reconnects fast (a killed broker's partitions move after the 3 s lease)."""
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5,
                     "message.timeout.ms": 30_000, "socket.timeout.ms": 10_000,
                     "retry.backoff.ms": 50, "retry.backoff.max.ms": 500,
                     "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
                     "error_cb": ErrorLog(), "log_level": 4, **conf})


def retrying(call, deadline: float, producer: Producer | None = None):
    """``call()``, again while librdkafka says its error is retriable (a transactional call timed
    out, the coordinator is moving) and ``deadline`` has not passed. Between tries the producer is
    polled (its delivery reports served) for 0.1 s."""
    while True:
        try:
            return call()
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
        if producer is not None:
            producer.poll(0.1)


def produce(p: Producer, topic: str, values: dict[int, list[bytes]]) -> dict[int, list[tuple[int, bytes]]]:
    return produce_in_order(p, topic, values, READ_S)


def vals(tag: str, n: int, parts=range(PARTS)) -> dict[int, list[bytes]]:
    return tagged_values(tag, n, parts)


class EndReader:
    """A consumer on ``assign()``ed partitions from the beginning, with an isolation level, that
    reads until librdkafka reports the end of every partition at a given offset.

    ``got[p]`` is [(offset, value)] in arrival order; ``eof[p]`` the offset of the partition's
    latest end-of-partition event (librdkafka's fetch position: for read_committed the last
    stable offset, past any control records). Every wait is bounded."""

    def __init__(self, bootstrap: str, topic: str, isolation: str, parts=range(PARTS)):
        self.topic = topic
        self.parts = list(parts)
        self.errors = ErrorLog()
        self.c = consumer(bootstrap, **{"isolation.level": isolation, "enable.partition.eof": True,
                                        "fetch.wait.max.ms": 100, "error_cb": self.errors})
        self.c.assign([TopicPartition(topic, part, OFFSET_BEGINNING) for part in self.parts])
        self.got: dict[int, list[tuple[int, bytes]]] = {part: [] for part in self.parts}
        self.eof: dict[int, int] = {}

    def pump(self, timeout: float = 0.2) -> None:
        for m in self.c.consume(num_messages=1000, timeout=timeout):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self.eof[m.partition()] = m.offset()
                    continue
                if err.fatal():
                    raise KafkaException(err)
                self.errors(err)
                continue
            self.got[m.partition()].append((m.offset(), m.value()))
            self.eof.pop(m.partition(), None)

    def to(self, ends: dict[int, int], timeout: float = READ_S) -> dict[int, list[tuple[int, bytes]]]:
        """Until the end of every partition is reported at ``ends[p]``."""
        deadline = time.monotonic() + timeout
        while any(self.eof.get(part) != ends[part] for part in self.parts):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.topic}: end of partition reported at {self.eof}, want {ends}, within {timeout:.0f}s "
                    f"(records read: { {p: len(r) for p, r in self.got.items()} }; "
                    f"client errors: {list(self.errors.seen)[-5:]})")
            self.pump()
        return self.got

    def end_offset(self, part: int) -> int:
        """The end offset ListOffsets gives this consumer's isolation level (read_committed: the
        last stable offset)."""
        wm = self.c.get_watermark_offsets(TopicPartition(self.topic, part), timeout=10, cached=False)
        assert wm is not None, "ListOffsets timed out"
        return wm[1]

    def close(self) -> None:
        self.c.close()


def read_to(bootstrap: str, topic: str, isolation: str,
            ends: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    """Everything of ``topic`` with ``isolation`` through ``bootstrap``, up to the end of every
    partition at ``ends[p]``; also checks that ListOffsets for that isolation level ends there."""
    r = EndReader(bootstrap, topic, isolation, parts=sorted(ends))
    try:
        got = r.to(ends)
        for part, end in ends.items():
            assert r.end_offset(part) == end, f"{topic} [{part}]: {isolation} end offset, want {end}"
        return got
    finally:
        r.close()


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    return {part: hi for part, (_, hi) in watermarks(bootstrap, topic, PARTS).items()}


def group_offsets(bootstrap: str, group: str, topic: str, timeout: float = WAIT_S) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch with require_stable, as a read_committed
    consumer asks), again while the group's coordinator moves."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "socket.timeout.ms": 10_000, "log_level": 4})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                tps = c.committed([TopicPartition(topic, part) for part in range(PARTS)], timeout=10)
                if all(tp.error is None for tp in tps):
                    return {tp.partition: tp.offset for tp in tps}
                failure = [str(tp.error) for tp in tps if tp.error is not None]
            except KafkaException as exc:
                failure = [str(exc)]
            if time.monotonic() > deadline:
                raise AssertionError(f"group {group}: committed offsets not readable: {failure}")
            time.sleep(0.2)
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# consume-transform-produce

def transform(value: bytes) -> bytes:
    """``in-00042`` -> ``out-00042``."""
    assert value.startswith(b"in-"), value
    return b"out-" + value[3:]


class TransformLoop:
    """Consume-transform-produce as a careful exactly-once application does it, in a thread.

    A read_committed consumer (``group``, auto-commit off, subscribed to ``inp``) and a producer
    (``tid``) bootstrapped through ``bootstrap``. Per batch of at most ``BATCH`` records:
    begin_transaction; each record transformed to ``out`` (same partition); the consumer's
    positions of the batch's partitions and its group metadata to send_offsets_to_transaction;
    commit_transaction. Errors, the confluent-kafka way:

    - retriable (``retriable()``): the same call again (the calls themselves wait);
    - abortable (``txn_requires_abort()``, or any other non-fatal error in a transaction):
      abort_transaction, then the consumer rewinds to the group's committed offsets;
    - fatal: a new producer with the same ``transactional.id`` (``init_transactions`` fences the
      old one and ends its transaction), then the same rewind.

    A rebalance (assigned, revoked or lost partitions) between transactions also rewinds; so does a
    record that is not the next one expected on its partition. The group's committed offsets are
    the only truth the loop restarts from, so exactly-once output depends on the broker committing
    the offsets and the output records in the same transaction.

    After ``kill_after`` commits, inside the next transaction (offsets sent, not yet committed),
    the loop sets ``at_kill_point`` and waits for the test to set ``killed``. It ends once the
    group's offsets, as committed by it, reach ``ends``; or fails (``failure``) after ``LOOP_S``.
    """

    BATCH = 20

    def __init__(self, bootstrap: str, tid: str, group: str, inp: str, out: str, ends: dict[int, int],
                 kill_after: int | None = None):
        self.bootstrap, self.tid, self.group, self.inp, self.out = bootstrap, tid, group, inp, out
        self.ends = dict(ends)
        self.kill_after = kill_after
        self.errors = ErrorLog()
        #: What happened besides plain commits (errors and how they were handled), for failure messages.
        self.events: collections.deque[str] = collections.deque(maxlen=60)
        self.commits = 0
        self.commits_after_kill = 0
        self.aborts = 0
        self.producers = 0
        self.rewinds = 0
        #: Per input partition: the offset committed with the group (as this loop last knew it).
        self.committed_to = {part: 0 for part in self.ends}
        #: Per assigned input partition: the offset of the next record to transform.
        self.next: dict[int, int] = {}
        self.rebalanced = False
        self.needs_rewind = False
        self.at_kill_point = threading.Event()
        self.killed = threading.Event()
        self.failure: str | None = None
        #: The transactional call under way and when it began (a hang shows in ``report()``).
        self.calling: tuple[str, float] | None = None
        self.consumer: Consumer | None = None
        self.producer: Producer | None = None
        self.thread = threading.Thread(target=self._run, name="consume-transform-produce", daemon=True)

    # -- reporting

    def report(self) -> str:
        calling = self.calling
        stuck = ""
        if calling is not None and self.thread.is_alive():
            stuck = f"in {calling[0]} for {time.monotonic() - calling[1]:.0f}s"
            if calling[0] == "send_offsets_to_transaction":
                stuck += (" (librdkafka can block there past its timeout while the group coordinator it has "
                          "cached is gone: confluentinc/librdkafka#5456, #5511)")
            stuck += "; "
        return (f"{stuck}commits {self.commits} ({self.commits_after_kill} after the kill), aborts {self.aborts}, "
                f"producers {self.producers}, rewinds {self.rewinds}, committed {self.committed_to} of "
                f"{self.ends}; failure: {self.failure}; events: {list(self.events)}; "
                f"client errors: {list(self.errors.seen)[-10:]}")

    def finished(self) -> bool:
        return all(self.committed_to[part] >= end for part, end in self.ends.items())

    def wait_kill_point(self, timeout: float) -> None:
        """Until the loop is inside the transaction after ``kill_after`` commits."""
        deadline = time.monotonic() + timeout
        while not self.at_kill_point.wait(0.2):
            if not self.thread.is_alive():
                raise AssertionError(f"the loop ended before the kill point: {self.report()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the loop did not reach the kill point within {timeout:.0f}s: "
                                     f"{self.report()}")

    # -- the loop

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            if self.consumer is not None:
                self.consumer.close()

    def _new_consumer(self) -> Consumer:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "isolation.level": "read_committed", "enable.auto.commit": False,
                      "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
                      "fetch.wait.max.ms": 100, "socket.timeout.ms": 10_000,
                      "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
                      "error_cb": self.errors, "log_level": 4})

        def rebalanced(_consumer, _partitions):
            self.rebalanced = True

        c.subscribe([self.inp], on_assign=rebalanced, on_revoke=rebalanced, on_lost=rebalanced)
        return c

    def _new_producer(self, deadline: float) -> Producer:
        p = txn_producer(self.bootstrap, self.tid, error_cb=self.errors)
        self._call("init_transactions", lambda: p.init_transactions(TXN_CALL_S), deadline, p)
        self.producers += 1
        return p

    def _call(self, name: str, call, deadline: float, p: Producer):
        """A transactional call through ``retrying``, noted in ``calling`` while under way."""
        self.calling = (name, time.monotonic())
        try:
            return retrying(call, deadline, p)
        finally:
            self.calling = None

    def _loop(self) -> None:
        deadline = time.monotonic() + LOOP_S
        self.consumer = self._new_consumer()
        self.producer = self._new_producer(deadline)
        while not self.finished():
            if time.monotonic() > deadline:
                raise AssertionError(f"the loop did not finish within {LOOP_S}s")
            batch = self._next_batch(deadline)
            if not batch:
                continue
            try:
                self._transaction(batch, deadline)
            except KafkaException as exc:
                self._recover(exc.args[0], deadline)

    def _next_batch(self, deadline: float) -> list:
        """Up to BATCH records that continue each partition where the last transaction ended; [] on
        a rebalance or a record out of line (then the consumer has been rewound)."""
        self.rebalanced = False
        msgs = self.consumer.consume(num_messages=self.BATCH, timeout=0.5)
        if self.rebalanced or self.needs_rewind:
            self.events.append(f"rebalance: assignment {[tp.partition for tp in self.consumer.assignment()]}"
                               if self.rebalanced else "rewind again")
            self._rewind(deadline)
            return []
        batch = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.fatal():
                    raise AssertionError(f"the consumer failed fatally: {err}")
                self.events.append(f"consumer: {err}")
                continue
            part = m.partition()
            if self.next.get(part) != m.offset():
                self.events.append(f"input [{part}]: record at {m.offset()}, next expected {self.next.get(part)}")
                self._rewind(deadline)
                return []
            self.next[part] = m.offset() + 1
            batch.append(m)
        return batch

    def _transaction(self, batch: list, deadline: float) -> None:
        p = self.producer
        p.begin_transaction()
        for m in batch:
            p.produce(self.out, value=transform(m.value()), partition=m.partition())
        parts = sorted({m.partition() for m in batch})
        positions = self.consumer.position([TopicPartition(self.inp, part) for part in parts])
        offsets = {tp.partition: tp.offset for tp in positions}
        # The consumer's position of a partition it just returned records of is the offset after
        # the last one; anything else would make the sent offsets meaningless.
        assert offsets == {part: self.next[part] for part in parts}, (
            f"consumer positions {offsets} after records up to {self.next}")
        self._call("send_offsets_to_transaction",
                   lambda: p.send_offsets_to_transaction(positions, self.consumer.consumer_group_metadata(),
                                                         TXN_CALL_S), deadline, p)
        if self.kill_after is not None and self.commits >= self.kill_after and not self.killed.is_set():
            self.at_kill_point.set()
            if not self.killed.wait(WAIT_S):
                raise AssertionError("the test never killed the transaction coordinator")
            self.events.append(f"coordinator killed in transaction {self.commits + 1} (offsets {offsets} sent)")
        self._call("commit_transaction", lambda: p.commit_transaction(TXN_CALL_S), deadline, p)
        self.commits += 1
        if self.killed.is_set():
            self.commits_after_kill += 1
        self.committed_to.update(offsets)

    def _recover(self, err: KafkaError, deadline: float) -> None:
        self.events.append(f"{err.name()}: {err.str()} (fatal={err.fatal()}, "
                           f"abortable={err.txn_requires_abort()}, retriable={err.retriable()})")
        if time.monotonic() > deadline:
            raise AssertionError(f"the loop did not finish within {LOOP_S}s (last error: {err})")
        if err.fatal():
            self.producer = self._new_producer(deadline)
        else:
            try:
                self._call("abort_transaction", lambda: self.producer.abort_transaction(TXN_CALL_S), deadline,
                           self.producer)
                self.aborts += 1
            except KafkaException as exc:
                e2 = exc.args[0]
                self.events.append(f"abort: {e2.name()}: {e2.str()} (fatal={e2.fatal()})")
                if e2.fatal():
                    self.producer = self._new_producer(deadline)
                elif e2.code() != KafkaError._STATE:  # _STATE: no transaction to abort
                    raise
        self._rewind(deadline)

    def _rewind(self, deadline: float) -> None:
        """Seek every assigned partition to the group's committed offset (the log start without
        one): what the last committed transaction left, and nothing else."""
        self.rewinds += 1
        self.next = {}
        self.needs_rewind = False
        assignment = self.consumer.assignment()
        if not assignment:
            return
        while True:
            try:
                tps = self.consumer.committed(assignment, timeout=10)
                failed = [str(tp.error) for tp in tps if tp.error is not None]
                if not failed:
                    break
            except KafkaException as exc:
                failed = [str(exc)]
            if time.monotonic() > deadline:
                raise AssertionError(f"the group's committed offsets stayed unreadable: {failed}")
            self.events.append(f"committed offsets: {failed}")
            time.sleep(0.2)
        for tp in tps:
            offset = tp.offset if tp.offset >= 0 else 0  # nothing committed yet: the log start (0)
            if offset != self.committed_to.get(tp.partition):
                self.events.append(f"input [{tp.partition}]: the group has {offset} committed, "
                                   f"the loop's last commit left {self.committed_to.get(tp.partition)}")
            self.committed_to[tp.partition] = offset
            try:
                self.consumer.seek(TopicPartition(self.inp, tp.partition, offset))
            except KafkaException as exc:
                self.events.append(f"seek [{tp.partition}] to {offset}: {exc}")
                self.needs_rewind = True
                continue
            self.next[tp.partition] = offset


def produce_input(bootstrap: str, topic: str, count: int) -> dict[int, list[bytes]]:
    """``in-00000``.. to partition n % PARTS, idempotent, acks=all, without a transaction;
    returns {partition: values in offset order}."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 30_000, "log_level": 4})
    values = {part: [b"in-%05d" % n for n in range(part, count, PARTS)] for part in range(PARTS)}
    acked = produce(p, topic, values)
    for part, recs in acked.items():
        assert [o for o, _ in recs] == list(range(len(values[part]))), f"input [{part}] not at offsets 0.."
    return values


def diff(want: dict[int, list[bytes]], got: dict[int, list[bytes]]) -> str:
    """What is wrong with ``got`` (per partition: duplicates, missing, foreign, order)."""
    out = []
    for part in sorted(set(want) | set(got)):
        w, g = want.get(part, []), got.get(part, [])
        if w == g:
            continue
        counts = collections.Counter(g)
        dup = sorted(v for v, n in counts.items() if n > 1)
        missing = sorted(set(w) - set(g))
        foreign = sorted(set(g) - set(w))
        out.append(f"[{part}] {len(g)} records, want {len(w)}: {len(dup)} duplicated {dup[:5]}, "
                   f"{len(missing)} missing {missing[:5]}, {len(foreign)} unexpected {foreign[:5]}"
                   + ("" if dup or missing or foreign else ", out of input order"))
    return "; ".join(out)


# ---------------------------------------------------------------------------------------------
# tests

@pytest.mark.timeout(240)
def test_consume_transform_produce_survives_sigkill_of_the_transaction_coordinator(cluster):
    records, kill_after = 300, 4
    inp, out = "ctp-in", "ctp-out"
    tid = "ctp-transactional-id"
    c = cluster(3)
    require_transactions(c)
    create_topic(c, 1, inp, PARTS)
    create_topic(c, 1, out, PARTS)
    values = produce_input(c.bootstrap(), inp, records)
    ends = high_watermarks(c.bootstrap(), inp)
    assert ends == {part: len(values[part]) for part in range(PARTS)}, ends
    # The group is coordinated by another broker than the transactional ID (the one to be killed):
    # this test is about the transaction coordinator's failover (the group coordinator's is
    # test_cluster_groups.py's), and librdkafka 2.16's send_offsets_to_transaction can hang for
    # good, past its timeout, when the group coordinator it has cached is decommissioned
    # (confluentinc/librdkafka#5456, #5511). Rendezvous placement keeps the group's shard where it
    # is when another broker dies.
    doomed = txn_coordinator(c, tid, [1, 2, 3])
    group = next(g for g in (f"ctp-group-{i}" for i in range(100))
                 if coordinator(c, g, KEY_TYPE_GROUP, [1, 2, 3]) != doomed)

    loop = TransformLoop(c.bootstrap(), tid, group, inp, out, ends, kill_after=kill_after)
    started = time.monotonic()
    loop.thread.start()
    try:
        loop.wait_kill_point(WAIT_S)
        # The loop waits inside a transaction; ask again now (the answer is what librdkafka used).
        victim = txn_coordinator(c, tid, [1, 2, 3])
        assert victim == doomed, f"the transactional ID moved from broker {doomed} to {victim} without cause"
        c.kill(victim)
    finally:
        loop.killed.set()
    survivors = [n for n in (1, 2, 3) if n != victim]
    # The loop fails by itself after LOOP_S, unless a librdkafka call blocks past its timeout.
    loop.thread.join(max(1.0, started + LOOP_S + TXN_CALL_S + 10 - time.monotonic()))
    assert not loop.thread.is_alive(), f"the loop did not stop: {loop.report()}"
    assert loop.failure is None, loop.report()
    assert loop.commits > kill_after and loop.commits_after_kill >= 1, loop.report()

    c.wait_view(set(survivors), via=survivors, timeout=WAIT_S)
    via = c.broker(survivors[0]).bootstrap
    # A survivor coordinates the transactional ID now.
    assert txn_coordinator(c, tid, survivors) in survivors
    # The group's offsets went with the committed transactions, to the end of the input.
    assert group_offsets(via, group, inp) == ends, loop.report()

    # Every input value, transformed, exactly once, in input order per partition; and nothing
    # left open: end of partition at the high watermark.
    marks = high_watermarks(via, out)
    got = read_to(via, out, "read_committed", marks)
    got_values = {part: [v for _, v in recs] for part, recs in got.items()}
    want = {part: [transform(v) for v in vs] for part, vs in values.items()}
    assert got_values == want, f"read_committed output: {diff(want, got_values)}; loop: {loop.report()}"


def test_aborted_transactions_are_invisible_to_read_committed_across_brokers(cluster):
    n, m, k = 7, 5, 4
    topic, tid = "txn-visibility", "visibility-transactional-id"
    c = cluster(3)
    require_transactions(c)
    create_topic(c, 1, topic, PARTS)
    deadline = time.monotonic() + WAIT_S
    p = txn_producer(c.broker(1).bootstrap, tid)
    retrying(lambda: p.init_transactions(TXN_CALL_S), deadline, p)

    def txn(tag: str, count: int, commit: bool):
        p.begin_transaction()
        acked = produce(p, topic, vals(tag, count))
        retrying(lambda: (p.commit_transaction if commit else p.abort_transaction)(TXN_CALL_S), deadline, p)
        return acked

    a, b, z = txn("a", n, True), txn("b", m, False), txn("c", k, True)
    # One control record per partition at each transaction end.
    for part in range(PARTS):
        offsets = [[o for o, _ in run[part]] for run in (a, b, z)]
        assert offsets == [list(range(n)), list(range(n + 1, n + 1 + m)), list(range(n + m + 2, n + m + 2 + k))], \
            f"partition {part}: data offsets {offsets}, want one marker offset after each transaction"
    ends = {part: n + m + k + 3 for part in range(PARTS)}
    assert high_watermarks(c.broker(2).bootstrap, topic) == ends

    for node in (2, 3):
        via = c.broker(node).bootstrap
        assert read_to(via, topic, "read_committed", ends) == merge(a, z), \
            f"read_committed through broker {node}: exactly the committed records"
        assert read_to(via, topic, "read_uncommitted", ends) == merge(a, b, z), \
            f"read_uncommitted through broker {node}: every data record, no marker"


def test_stale_transaction_coordinator_changes_nothing(cluster, postgres, pg_db):
    topic, tid = "txn-stale", "stale-transactional-id"
    c = cluster(3)
    require_transactions(c)
    create_topic(c, 1, topic, PARTS)
    deadline = time.monotonic() + WAIT_S
    owner = txn_coordinator(c, tid, [1, 2, 3])
    survivors = [n for n in (1, 2, 3) if n != owner]

    # The old producer: one committed transaction, one left open (acknowledged, not ended).
    p1 = txn_producer(c.bootstrap(), tid)
    retrying(lambda: p1.init_transactions(TXN_CALL_S), deadline, p1)
    p1.begin_transaction()
    c1 = produce(p1, topic, vals("c1", 3))
    retrying(lambda: p1.commit_transaction(TXN_CALL_S), deadline, p1)
    p1.begin_transaction()
    open1 = produce(p1, topic, vals("open1", 2))

    c.pause(owner)
    try:
        c.wait_view(set(survivors), via=survivors, timeout=WAIT_S, topic=topic, partitions=PARTS)
        assert txn_coordinator(c, tid, survivors) in survivors
        # The new producer, through the survivors: its init fences p1 and aborts its open
        # transaction; its own transaction commits.
        p2 = txn_producer(c.bootstrap(*survivors), tid)
        deadline = time.monotonic() + WAIT_S
        retrying(lambda: p2.init_transactions(TXN_CALL_S), deadline, p2)
        p2.begin_transaction()
        new = produce(p2, topic, vals("p2", 3))
        retrying(lambda: p2.commit_transaction(TXN_CALL_S), deadline, p2)
        marks = high_watermarks(c.bootstrap(*survivors), topic)
        assert read_to(c.bootstrap(*survivors), topic, "read_committed", marks) == merge(c1, new), \
            "read_committed while the old coordinator is stopped: p1's open transaction must be aborted"
    finally:
        c.resume(owner)

    # At once after SIGCONT (before the stale broker hears it lost the shard): the old producer
    # writes once more in its (aborted) transaction and commits. That must fail.
    err: KafkaError | None = None
    try:
        p1.produce(topic, value=b"p1-late", partition=0)
    except KafkaException as exc:  # it has already learnt that it is fenced (_FATAL)
        err = exc.args[0]
    late_deadline = time.monotonic() + WAIT_S
    while err is None:
        try:
            p1.commit_transaction(TXN_CALL_S)
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > late_deadline:
                err = exc.args[0]
                break
        else:
            pytest.fail("the fenced producer's commit succeeded after its coordinator was taken over",
                        pytrace=False)
        try:
            p1.poll(0.1)
        except KafkaException as exc:
            err = exc.args[0]
    assert not err.retriable(), f"the fenced producer's commit got no answer within {WAIT_S}s: {err!r}"
    assert err.fatal() or err.txn_requires_abort() or err.code() == KafkaError._FATAL, \
        f"expected a fatal (fenced) or abortable error, got {err!r}"

    # The brokers agree again: one coordinator for the ID, and it serves a third producer.
    c.wait_view({1, 2, 3}, timeout=WAIT_S, topic=topic, partitions=PARTS)
    wait_shards(postgres, pg_db, 3)
    txn_coordinator(c, tid, [1, 2, 3])
    p3 = txn_producer(c.bootstrap(), tid)
    deadline = time.monotonic() + WAIT_S
    retrying(lambda: p3.init_transactions(TXN_CALL_S), deadline, p3)
    p3.begin_transaction()
    final = produce(p3, topic, vals("p3", 2))
    retrying(lambda: p3.commit_transaction(TXN_CALL_S), deadline, p3)

    marks = high_watermarks(c.bootstrap(), topic)
    # Data: 3 + 2 + 3 + 2 records per partition; control records: one per transaction end (c1
    # committed, open1 aborted by p2's init, p2 and p3 committed), none from the stale broker.
    assert marks == {part: 14 for part in range(PARTS)}, f"high watermarks {marks}, want 10 records + 4 markers"
    # Through the broker that was stopped, and through another one.
    assert read_to(c.broker(owner).bootstrap, topic, "read_committed", marks) == merge(c1, new, final), \
        "read_committed: exactly the committed transactions"
    uncommitted = read_to(c.broker(survivors[0]).bootstrap, topic, "read_uncommitted", marks)
    assert b"p1-late" not in [v for recs in uncommitted.values() for _, v in recs], \
        "a write of the fenced producer reached the log"
    assert uncommitted == merge(c1, open1, new, final), "read_uncommitted: every acknowledged record"
