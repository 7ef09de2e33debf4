"""Durability: SIGKILL the broker repeatedly while a confluent-kafka producer (acks=all) writes
numbered messages, restart it on the same data dir each time, and check that everything the
producer saw acknowledged is on disk, once, at the offset it was acknowledged at. Plus a
graceful-shutdown test (SIGTERM with clients connected: exit 0, quickly, nothing lost).

The broker runs with its default ``flush=always`` (acks=all answered after fdatasync). One
idempotent loop uses 1 MiB segments and ~4 KiB messages, so segments roll (and producer-state
snapshots are written) between the crashes, and each restart loads a snapshot and replays after it.
A transactional loop commits transactions through the crashes: read_committed must then show every
committed transaction whole and once, and never part of one.
"""

from __future__ import annotations

import random
import threading
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Producer, TopicPartition

import kafka_wire as kw
from confluent_util import consume_partitions, consumer

KILLS = 5
#: librdkafka keeps retrying for this long; restarts take well under a second.
MESSAGE_TIMEOUT_MS = 90_000


class NumberedProducer:
    """Produces m0000000, m0000001, ... to partition 0 from a thread; records the outcome of each."""

    live: list[NumberedProducer] = []

    def __init__(self, bootstrap: str, topic: str, idempotent: bool, rate_sleep: float = 0.001,
                 pad: int = 0):
        NumberedProducer.live.append(self)
        self.topic = topic
        self.pad = b"." * pad
        self.rate_sleep = rate_sleep
        self.acked: dict[int, int] = {}  # message number -> offset
        self.failed: dict[int, str] = {}
        self.errors: list[str] = []  # client-level errors (error_cb); fatal ones fail the test
        self.fatal: list[str] = []
        self.produced = 0
        self._stop = threading.Event()
        conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": idempotent,
                "message.timeout.ms": MESSAGE_TIMEOUT_MS, "linger.ms": 2, "retry.backoff.ms": 50,
                "retry.backoff.max.ms": 300, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300,
                "socket.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 1000,
                "error_cb": self._on_error, "log_level": 2}
        if not idempotent:
            conf["max.in.flight.requests.per.connection"] = 1  # keep order across retries
        self.p = Producer(conf)
        self.thread = threading.Thread(target=self._run, name="numbered-producer", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        self.errors.append(str(err))
        if err.fatal():
            self.fatal.append(str(err))

    def _on_delivery(self, err, msg) -> None:
        n = number(msg.value())
        if err is None:
            assert n not in self.acked, f"m{n} acknowledged twice"
            self.acked[n] = msg.offset()
        else:
            self.failed[n] = str(err)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and not self.fatal:
            try:
                self.p.produce(self.topic, value=b"m%07d" % self.produced + self.pad, partition=0, on_delivery=self._on_delivery)
                self.produced += 1
            except BufferError:
                self.p.poll(0.05)
                continue
            self.p.poll(0)
            time.sleep(self.rate_sleep)

    def stop_and_flush(self, timeout: float) -> int:
        self._stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        return self.p.flush(timeout)


@pytest.fixture(autouse=True)
def _stop_producer_threads():
    """A failing test must not leave a producer thread running into the next test."""
    yield
    while NumberedProducer.live:
        np_ = NumberedProducer.live.pop()
        np_._stop.set()
        if np_.thread.is_alive():
            np_.thread.join(timeout=5)


def number(value: bytes) -> int:
    """The message number of a value: ``m0000042`` followed by optional padding."""
    return int(value[1:8])


def read_log(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    c = consumer(bootstrap)
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()
    assert lo == 0
    got = consume_partitions(bootstrap, topic, {0: hi}, timeout=40)[0]
    return [(g.offset, g.value) for g in got]


def crash_loop(make_broker, idempotent: bool, seed: int, *broker_args: str,
               pad: int = 0) -> tuple[NumberedProducer, list[tuple[int, bytes]]]:
    rnd = random.Random(seed)
    b = make_broker(*broker_args)  # flush=always is the default
    if idempotent:
        kw.require_api(b.bootstrap, kw.INIT_PRODUCER_ID)
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    np_ = NumberedProducer(b.bootstrap, topic, idempotent, pad=pad)
    np_.start()
    # Let the topic get created and the first acks come back before the first crash.
    deadline = time.monotonic() + 15
    while not np_.acked and time.monotonic() < deadline:
        time.sleep(0.05)
    assert np_.acked, f"nothing acknowledged before the first crash; client errors: {np_.errors[-5:]}"
    acked_at_kill = []
    for _ in range(KILLS):
        time.sleep(rnd.uniform(0.3, 1.2))
        acked_at_kill.append(len(np_.acked))
        b.kill()
        time.sleep(rnd.uniform(0.0, 0.4))
        b.start()
    time.sleep(0.5)
    left = np_.stop_and_flush(timeout=60)
    assert not np_.fatal, f"fatal producer error: {np_.fatal}"
    assert left == 0, f"{left} messages neither acknowledged nor failed after 60s; client errors: {np_.errors[-5:]}"
    assert not np_.failed, f"{len(np_.failed)} deliveries failed, e.g. {list(np_.failed.items())[:5]}"
    # Progress was made between crashes (the producer did reconnect each time).
    assert len(np_.acked) > acked_at_kill[-1], (acked_at_kill, len(np_.acked))
    return np_, read_log(b.bootstrap, topic)


def check_acked_present(np_: NumberedProducer, log: list[tuple[int, bytes]]) -> None:
    assert [o for o, _ in log] == list(range(len(log))), "offsets are not contiguous from 0"
    missing = [n for n, off in sorted(np_.acked.items()) if off >= len(log) or number(log[off][1]) != n]
    assert not missing, (f"{len(missing)} acknowledged messages are missing or not at their acknowledged offset, "
                         f"e.g. {[(n, np_.acked[n]) for n in missing[:5]]}; log has {len(log)} records")


def check_exactly_once(np_: NumberedProducer, log: list[tuple[int, bytes]]) -> None:
    check_acked_present(np_, log)
    numbers = [number(v) for _, v in log]
    dups = sorted({n for n in numbers if numbers.count(n) > 1}) if len(set(numbers)) != len(numbers) else []
    if dups:
        where = {n: [o for o, v in log if number(v) == n] for n in dups[:10]}
        detail = ", ".join(f"m{n} at offsets {offs} (acked at {np_.acked.get(n)})" for n, offs in where.items())
        pytest.fail(f"idempotent producer, yet {len(dups)} messages are in the log twice after SIGKILL + restart "
                    f"(the retry of a batch persisted before the crash was appended again): {detail}")
    assert numbers == sorted(numbers), "idempotent producer, yet the log is out of order"
    # Everything the producer sent was acknowledged (nothing failed), so the log is exactly that.
    assert numbers == list(range(np_.produced)), (len(numbers), np_.produced)


@pytest.mark.timeout(150)
def test_sigkill_loop_idempotent_acks_all(make_broker):
    np_, log = crash_loop(make_broker, idempotent=True, seed=11)
    check_exactly_once(np_, log)


@pytest.mark.timeout(150)
def test_sigkill_loop_idempotent_with_segment_rolls(make_broker):
    """The same with 1 MiB segments and ~4 KiB messages: several rolls, each writing a
    producer-state snapshot, happen between crashes, so restarts load a snapshot and replay the
    log after it; a retry of a batch stored before a crash must still be recognised."""
    np_, log = crash_loop(make_broker, True, 31, "--set", "log.segment.bytes=1048576", pad=4000)
    check_exactly_once(np_, log)
    total = sum(len(v) for _, v in log)
    assert total > 3 * 1048576, f"only {total} bytes written: too few for several segment rolls"


@pytest.mark.timeout(150)
def test_sigkill_loop_plain_acks_all(make_broker):
    """Without idempotence, a batch written just before a crash whose ack was lost is retried and
    may be stored twice; acknowledged messages must still all be at their acknowledged offsets."""
    np_, log = crash_loop(make_broker, idempotent=False, seed=23)
    check_acked_present(np_, log)
    numbers = [number(v) for _, v in log]
    assert set(numbers) == set(range(np_.produced))
    # max.in.flight=1: duplicates can only be re-sends of the batch in flight at a crash, which
    # come right after their first copy.
    assert len(numbers) - len(set(numbers)) <= KILLS * 1000, "far more duplicates than crashes can explain"


def _run_until_acked(b, topic: str, n: int) -> NumberedProducer:
    np_ = NumberedProducer(b.bootstrap, topic, idempotent=False, rate_sleep=0.002)
    np_.start()
    deadline = time.monotonic() + 15
    while len(np_.acked) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(np_.acked) >= n, f"producer made no progress; client errors: {np_.errors[-5:]}"
    return np_


def _restart_and_check(b, topic: str, np_: NumberedProducer) -> None:
    acked_before_restart = dict(np_.acked)
    b.start()
    left = np_.stop_and_flush(timeout=40)
    assert left == 0 and not np_.failed, (left, list(np_.failed.items())[:5])
    log = read_log(b.bootstrap, topic)
    check_acked_present(np_, log)
    for n, off in acked_before_restart.items():
        assert number(log[off][1]) == n


@pytest.mark.timeout(90)
def test_sigterm_with_producer_connected_exits_cleanly_and_keeps_data(make_broker):
    b = make_broker()
    topic = f"graceful-{uuid.uuid4().hex[:8]}"
    np_ = _run_until_acked(b, topic, 200)  # still producing (acks=all) when SIGTERM arrives
    t0 = time.monotonic()
    rc = b.stop(timeout_s=10)
    elapsed = time.monotonic() - t0
    assert rc == 0, f"broker exited with {rc} on SIGTERM"
    assert elapsed < 3, f"SIGTERM took {elapsed:.1f}s with a producer connected"
    _restart_and_check(b, topic, np_)


@pytest.mark.timeout(90)
def test_sigterm_does_not_wait_for_fetch_long_polls(make_broker):
    """A consumer parked in a Fetch long-poll (fetch.wait.max.ms=10000) must not hold up shutdown:
    Kafka drops delayed fetches when it stops; a client must not be able to delay a SIGTERM
    by up to the 30 s max_wait clamp."""
    b = make_broker()
    topic = f"graceful-fetch-{uuid.uuid4().hex[:8]}"
    np_ = _run_until_acked(b, topic, 100)
    c = consumer(b.bootstrap, **{"fetch.wait.max.ms": 10000})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        c.consume(num_messages=100000, timeout=1.0)  # now at the end of the log, waiting
        np_._stop.set()  # no new appends that would end the long-poll early
        time.sleep(0.3)
        t0 = time.monotonic()
        rc = b.stop(timeout_s=15)
        elapsed = time.monotonic() - t0
    finally:
        c.close()
    assert rc == 0, f"broker exited with {rc} on SIGTERM"
    assert elapsed < 3, f"SIGTERM took {elapsed:.1f}s: shutdown waited for a Fetch long-poll to expire"
    _restart_and_check(b, topic, np_)


class TransactionalLoop:
    """Commits transactions of TXN_SIZE numbered messages (t00042-007: transaction 42, message 7)
    to partition 0 from a thread, as a careful application does: a retriable commit error retries
    the commit, an abortable one aborts. Records which transactions committed and which aborted."""

    TXN_SIZE = 20

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.committed: list[int] = []
        self.aborted: list[int] = []
        self.fatal: list[str] = []
        self._stop = threading.Event()
        self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"crash-{uuid.uuid4().hex[:8]}",
                           "linger.ms": 2, "retry.backoff.ms": 50, "retry.backoff.max.ms": 300,
                           "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300,
                           "socket.timeout.ms": 5000, "log_level": 2})
        self.thread = threading.Thread(target=self._run, name="transactional-loop", daemon=True)

    def _call(self, what, *args) -> None:
        """Runs a transactional call, retrying it while librdkafka says the error is retriable."""
        deadline = time.monotonic() + 60
        while True:
            try:
                what(*args)
                return
            except KafkaException as exc:
                err = exc.args[0]
                if err.retriable() and time.monotonic() < deadline:
                    continue
                raise

    def _run(self) -> None:
        try:
            self._call(self.p.init_transactions, 30)
            txn = 0
            while not self._stop.is_set():
                self.p.begin_transaction()
                for i in range(self.TXN_SIZE):
                    while True:
                        try:
                            self.p.produce(self.topic, value=b"t%05d-%03d" % (txn, i), partition=0)
                            break
                        except BufferError:
                            self.p.poll(0.05)
                try:
                    self._call(self.p.commit_transaction, 30)
                    self.committed.append(txn)
                except KafkaException as exc:
                    if not exc.args[0].txn_requires_abort():
                        raise
                    self._call(self.p.abort_transaction, 30)
                    self.aborted.append(txn)
                txn += 1
        except KafkaException as exc:
            self.fatal.append(str(exc))

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=90)
        assert not self.thread.is_alive(), "the transactional loop did not stop"


@pytest.mark.timeout(150)
def test_sigkill_loop_transactions_stay_atomic(make_broker):
    """SIGKILL the broker while a librdkafka transactional producer commits transactions in a loop.
    A read_committed consumer afterwards sees every committed transaction whole and exactly once,
    in order, nothing of an aborted one, and never part of a transaction: a crash between the
    commit decision and the markers is finished at restart, markers and producer state survive.
    """
    rnd = random.Random(47)
    b = make_broker()
    topic = f"txcrash-{uuid.uuid4().hex[:8]}"
    loop = TransactionalLoop(b.bootstrap, topic)
    loop.thread.start()
    deadline = time.monotonic() + 20
    while not loop.committed and time.monotonic() < deadline and not loop.fatal:
        time.sleep(0.05)
    assert loop.committed, f"no transaction committed before the first crash: {loop.fatal}"
    committed_at_kill = []
    for _ in range(4):
        time.sleep(rnd.uniform(0.3, 1.0))
        committed_at_kill.append(len(loop.committed))
        b.kill()
        time.sleep(rnd.uniform(0.0, 0.3))
        b.start()
    deadline = time.monotonic() + 30
    while len(loop.committed) <= committed_at_kill[-1] and time.monotonic() < deadline and not loop.fatal:
        time.sleep(0.05)
    loop.stop()
    assert not loop.fatal, f"fatal transactional error: {loop.fatal}"
    assert len(loop.committed) > committed_at_kill[-1], "no progress after the last restart"

    # Read everything read_committed up to the end of the partition (its last stable offset).
    c = consumer(b.bootstrap, **{"isolation.level": "read_committed", "enable.partition.eof": True})
    values: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 40
        at_end = False
        while not at_end:
            assert time.monotonic() < deadline, f"no end of partition after {len(values)} records"
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is None:
                    values.append(m.value())
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    at_end = True
                else:
                    raise KafkaException(m.error())
    finally:
        c.close()
    seen: dict[int, list[int]] = {}
    for v in values:
        txn, i = (int(x) for x in v[1:].split(b"-"))
        seen.setdefault(txn, []).append(i)
    full = list(range(TransactionalLoop.TXN_SIZE))
    partial = {t: v for t, v in seen.items() if v != full}
    assert not partial, f"transactions seen partly or twice: {dict(list(partial.items())[:3])}"
    assert sorted(seen) == sorted(loop.committed), (
        f"committed {loop.committed[:5]}..., aborted {loop.aborted}, seen {sorted(seen)[:5]}...")
