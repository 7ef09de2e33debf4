"""Cluster mode (issue #16) with real clients: several stateless Skiff brokers on one PostgreSQL
database (metadata, batch order) and one object store (``file://`` directory or moto's S3).

- ``test_file_objects_three_brokers_mixed_clients``: 3 brokers; confluent-kafka creates a
  6-partition topic and produces 3000 keyed messages (acks=all) through broker 1 only;
  kafka-python reads all of them back through broker 2 only, kcat through broker 3 only: every
  message once, at its acknowledged offset, in order per partition. Then kafka-python produces
  through broker 3 and confluent-kafka reads through broker 1.
- ``test_s3_objects_two_brokers``: the same round trip through moto's S3 server (objects land in
  the bucket), produced through one broker and read through the other.
- ``test_sigkill_during_idempotent_produce``: SIGKILL the broker leading the most partitions
  while an idempotent acks=all producer writes a numbered sequence: the survivors take its
  partitions after the lease, the producer delivers everything, nothing acknowledged is lost,
  nothing is written twice, order per partition holds; the killed broker rejoins and serves it.
- ``test_postgres_restart_during_produce[fast|immediate]``: PostgreSQL stopped (cleanly, or as in
  a crash) for 3 s under the same producer: no acknowledgement while it is down, service comes
  back by itself, nothing lost or doubled.
- ``test_sigstop_longer_than_lease``: SIGSTOP a broker (between two commits) for twice its lease:
  the others take its partitions and acknowledge new messages on every partition while it is
  stopped; after SIGCONT it is fenced and registers again (a new epoch), the others keep their
  registrations, and nothing stale is committed (no duplicates, no holes, contiguous offsets).
- ``test_sigstop_inside_a_commit``: the same with the broker stopped inside a commit's
  PostgreSQL transaction (holding its partitions' row locks): PostgreSQL ends the paused session
  (``idle_in_transaction_session_timeout``, a third of the lease), the others carry on, and
  nothing stale is committed.

Brokers run with ``produce.commit.interval.ms=20`` and ``cluster.lease.ms=3000``. Reads use
assign() from offset 0 (group offsets are local to the coordinator broker in this first part).
Transactions are not available in cluster mode and are not tested. Without PostgreSQL these
tests skip (fail under CI / ``SKIFF_REQUIRE_TOOLS=1``); see tests/interop/README.md.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import random
import shutil
import subprocess
import threading
import time

import kafka
import pytest
from confluent_kafka import KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import cluster_util as cu
from cluster_fixtures import cluster, pg_db, postgres  # noqa: F401 (fixtures, also imported by other modules)
import kafka_wire as kw
from confluent_util import consume_partitions, consumer

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(cu.find_postgres_bin() is None and not cu.services_required(),
                       reason="PostgreSQL is not installed (apt-get install postgresql): cluster mode needs it"),
]

#: librdkafka keeps retrying a message this long: failover takes a lease (3 s) plus a refresh.
MESSAGE_TIMEOUT_MS = 60_000


# ---------------------------------------------------------------------------------------------
# fixtures

@pytest.fixture(autouse=True)
def _stop_producer_threads():
    """A failing test must not leave a producer thread running into the next test."""
    yield
    while NumberedProducer.live:
        np_ = NumberedProducer.live.pop()
        np_._stop.set()
        if np_.thread.is_alive():
            np_.thread.join(timeout=5)


# ---------------------------------------------------------------------------------------------
# helpers

def create_topic(c: cu.Cluster, via: int, topic: str, partitions: int) -> dict[int, int]:
    """CreateTopics through broker ``via`` (AdminClient); waits until every live broker shows the
    topic with the same leaders. Returns {partition: leader}."""
    kw.require_api(c.broker(via).bootstrap, kw.CREATE_TOPICS)
    admin = AdminClient({"bootstrap.servers": c.broker(via).bootstrap, "log_level": 4})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=15, operation_timeout=15)
    futures[topic].result(timeout=20)
    nodes = {n for n, b in enumerate(c.brokers, 1) if b.running}
    views = c.wait_view(nodes, topic=topic, partitions=partitions)
    return next(iter(views.values()))["topics"][topic]


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    c = consumer(bootstrap)
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15) for p in range(partitions)}
    finally:
        c.close()


def read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes | None, bytes]]]:
    """Every record of every partition with confluent-kafka (assign from 0): {p: [(offset, key, value)]}."""
    marks = watermarks(bootstrap, topic, partitions)
    for p, (lo, _) in marks.items():
        assert lo == 0, f"partition {p}: log start {lo}, want 0"
    got = consume_partitions(bootstrap, topic, {p: hi for p, (_, hi) in marks.items()}, timeout=40)
    return {p: [(g.offset, g.key, g.value) for g in recs] for p, recs in got.items()}


def _debug_conf() -> dict:
    """``SKIFF_CLUSTER_RDKAFKA_DEBUG=FILE``: librdkafka's eos/broker/metadata debug log into FILE."""
    path = os.environ.get("SKIFF_CLUSTER_RDKAFKA_DEBUG")
    if not path:
        return {}
    logger = logging.getLogger(f"rdkafka-{path}")
    if not logger.handlers:
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(relativeCreated)9.0f %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    return {"debug": os.environ.get("SKIFF_CLUSTER_RDKAFKA_DEBUG_CTX", "eos,broker,metadata"), "logger": logger}


def number(value: bytes) -> int:
    """``m0000042`` -> 42."""
    return int(value[1:8])


class NumberedProducer:
    """confluent-kafka, acks=all, idempotent: produces m0000000, m0000001, ... from a thread,
    message n to partition n % partitions, and notes when each acknowledgement came back."""

    live: list[NumberedProducer] = []

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate_sleep: float = 0.002):
        NumberedProducer.live.append(self)
        self.topic, self.partitions, self.rate_sleep = topic, partitions, rate_sleep
        # number -> (offset, monotonic time of the ack); written by the producer thread's poll(),
        # read by the test's thread: under ``lock`` (``snapshot()``) while the producer runs.
        self.acked: dict[int, tuple[int, float]] = {}
        self.lock = threading.Lock()
        self.failed: dict[int, str] = {}
        self.errors: list[str] = []
        self.fatal: list[str] = []
        self.twice: list[int] = []
        self.produced = 0
        self._stop = threading.Event()
        self.p = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "message.timeout.ms": MESSAGE_TIMEOUT_MS, "linger.ms": 5, "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 500, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
            "socket.timeout.ms": 3000, "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": self._on_error, "log_level": 2, **_debug_conf()})
        self.thread = threading.Thread(target=self._run, name="numbered-producer", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        self.errors.append(str(err))
        if err.fatal():
            self.fatal.append(str(err))

    def _on_delivery(self, err, msg) -> None:
        n = number(msg.value())
        if err is not None:
            self.failed[n] = str(err)
        else:
            with self.lock:
                if n in self.acked:
                    self.twice.append(n)
                else:
                    self.acked[n] = (msg.offset(), time.monotonic())

    def start(self) -> NumberedProducer:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set() and not self.fatal:
            n = self.produced
            try:
                self.p.produce(self.topic, value=b"m%07d" % n, partition=n % self.partitions,
                               on_delivery=self._on_delivery)
                self.produced += 1
            except BufferError:
                self.p.poll(0.05)
                continue
            self.p.poll(0)
            time.sleep(self.rate_sleep)

    def snapshot(self) -> dict[int, tuple[int, float]]:
        with self.lock:
            return dict(self.acked)

    def acked_partitions(self) -> set[int]:
        return {n % self.partitions for n in self.snapshot()}

    def acked_since(self, t: float, partitions: set[int] | None = None, first: int = 0) -> list[int]:
        """Numbers (>= ``first``) acknowledged after monotonic time ``t`` (on ``partitions``)."""
        return [n for n, (_, at) in self.snapshot().items()
                if at > t and n >= first and (partitions is None or n % self.partitions in partitions)]

    def wait_acked(self, what: str, cond, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if self.fatal:
                pytest.fail(f"fatal producer error while waiting for {what}: {self.fatal}")
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not within {timeout:.0f}s; {len(self.acked)} of {self.produced} acknowledged, "
                            f"client errors: {self.errors[-5:]}")
            time.sleep(0.05)

    def stop_and_flush(self, timeout: float) -> None:
        self._stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        left = self.p.flush(timeout)
        assert not self.fatal, f"fatal producer error: {self.fatal}"
        assert left == 0, (f"{left} messages neither acknowledged nor failed {timeout:.0f}s after the last produce; "
                           f"client errors: {self.errors[-5:]}")
        assert not self.twice, f"delivery reported twice for {self.twice[:10]}"
        assert not self.failed, f"{len(self.failed)} deliveries failed, e.g. {list(self.failed.items())[:5]}"
        assert len(self.acked) == self.produced, (len(self.acked), self.produced)


def check_exactly_once(np_: NumberedProducer, log: dict[int, list[tuple[int, bytes | None, bytes]]]) -> None:
    """Every partition: offsets 0..n-1, each acknowledged message at its acknowledged offset, the
    numbers increasing (order kept), none twice; over all partitions, everything produced."""
    seen: dict[int, tuple[int, int]] = {}
    for p, recs in sorted(log.items()):
        assert [o for o, _, _ in recs] == list(range(len(recs))), f"partition {p}: offsets not contiguous from 0"
        numbers = [number(v) for _, _, v in recs]
        dups = sorted(n for n, k in collections.Counter(numbers).items() if k > 1)
        if dups:
            where = {n: [o for o, _, v in recs if number(v) == n] for n in dups[:10]}
            pytest.fail(f"partition {p}: {len(dups)} messages written twice, e.g. "
                        + ", ".join(f"m{n} at offsets {offs} (acknowledged at {np_.acked.get(n, (None,))[0]})"
                                    for n, offs in where.items()))
        assert all(n % np_.partitions == p for n in numbers), f"partition {p} holds another partition's messages"
        if numbers != sorted(numbers):
            bad = next(i for i in range(1, len(numbers)) if numbers[i] < numbers[i - 1])
            pytest.fail(f"partition {p}: out of order at offset {bad}: {numbers[max(0, bad - 3):bad + 3]}")
        for o, n in enumerate(numbers):
            seen[n] = (p, o)
    wrong = [(n, off, seen.get(n)) for n, (off, _) in sorted(np_.acked.items())
             if seen.get(n) != (n % np_.partitions, off)]
    assert not wrong, (f"{len(wrong)} acknowledged messages missing or not at their acknowledged offset, "
                       f"e.g. (number, acked offset, found at) {wrong[:5]}")
    assert sorted(seen) == list(range(np_.produced)), f"{len(seen)} messages in the log, {np_.produced} produced"


def victim_of(leaders: dict[int, int], nodes: list[int]) -> int:
    """The node leading the most partitions (so its loss moves some)."""
    return max(nodes, key=lambda n: (sum(1 for l in leaders.values() if l == n), -n))


# ---------------------------------------------------------------------------------------------
# a. file:// objects, 3 brokers, three clients

def test_file_objects_three_brokers_mixed_clients(cluster):
    c = cluster(3)
    topic, parts, n_msgs = "keyed", 6, 3000
    leaders = create_topic(c, 1, topic, parts)

    # confluent-kafka through broker 1 only: 3000 keyed messages, acks=all (idempotent: order kept
    # even across a retry).
    delivered: list[tuple[int, int, bytes, bytes]] = []
    errors: list[str] = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    p = Producer({"bootstrap.servers": c.bootstrap(1), "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 30000, "socket.timeout.ms": 10000, "log_level": 4})
    for i in range(n_msgs):
        while True:
            try:
                p.produce(topic, key=b"key-%03d" % (i % 97), value=b"v%05d" % i, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    left = p.flush(30)
    assert left == 0 and not errors, f"{left} undelivered; errors: {errors[:5]}"
    assert len(delivered) == n_msgs

    expected: dict[int, list[tuple[int, bytes, bytes]]] = {q: [] for q in range(parts)}
    key_part: dict[bytes, int] = {}
    for q, off, k, v in delivered:
        assert key_part.setdefault(k, q) == q, f"key {k!r} went to partitions {key_part[k]} and {q}"
        expected[q].append((off, k, v))
    for q in expected:
        expected[q].sort()
        assert [o for o, _, _ in expected[q]] == list(range(len(expected[q]))), f"partition {q}: acked offsets"
        values = [v for _, _, v in expected[q]]
        assert values == sorted(values), f"partition {q}: acknowledged out of produce order"
    used = {leaders[q] for q in range(parts) if expected[q]}
    print(f"leaders {leaders}; partitions with data led by brokers {sorted(used)}")

    # Each partition is served by its leader only: the others answer NOT_LEADER_OR_FOLLOWER to
    # Produce and Fetch (raw requests: no client's redirection in the way), and nothing a refused
    # request carried is stored.
    for q, leader in leaders.items():
        for node in (1, 2, 3):
            err, records = cu.fetch_v4(c.broker(node).bootstrap, topic, q)
            if node == leader:
                assert err == 0, f"partition {q}: its leader {leader} answered Fetch with error {err}"
                batches = kw.batch_offsets(records)
                if expected[q]:
                    assert batches and batches[0][0] == 0, f"partition {q}: its leader {leader} served no batch at 0"
            else:
                assert err == cu.NOT_LEADER_OR_FOLLOWER, \
                    f"partition {q} (leader {leader}): Fetch from broker {node} answered error {err}"
                err, _ = cu.produce_v3(c.broker(node).bootstrap, topic, q, [b"misrouted"])
                assert err == cu.NOT_LEADER_OR_FOLLOWER, \
                    f"partition {q} (leader {leader}): Produce to broker {node} answered error {err}"

    # kafka-python through broker 2 only: assign() all partitions, from the beginning.
    kc = kafka.KafkaConsumer(bootstrap_servers=c.bootstrap(2), group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=10000, retry_backoff_ms=100)
    got: dict[int, list[tuple[int, bytes, bytes]]] = {q: [] for q in range(parts)}
    try:
        tps = [kafka.TopicPartition(topic, q) for q in range(parts)]
        kc.assign(tps)
        kc.seek_to_beginning(*tps)
        deadline = time.monotonic() + 30
        while any(len(got[q]) < len(expected[q]) for q in got) and time.monotonic() < deadline:
            for tp, recs in kc.poll(timeout_ms=500, max_records=2000).items():
                got[tp.partition] += [(r.offset, r.key, r.value) for r in recs]
        time.sleep(0.3)  # anything beyond what was produced would show up now
        for tp, recs in kc.poll(timeout_ms=300).items():
            got[tp.partition] += [(r.offset, r.key, r.value) for r in recs]
    finally:
        kc.close(autocommit=False)
    for q in range(parts):
        assert got[q] == expected[q], (f"kafka-python via broker 2, partition {q}: {len(got[q])} records, "
                                       f"want {len(expected[q])}; first difference at "
                                       f"{next((i for i, (a, b) in enumerate(zip(got[q], expected[q])) if a != b), None)}")

    # kcat through broker 3 only, one partition at a time.
    kcat = shutil.which("kcat")
    if kcat is None:
        if cu.services_required():
            pytest.fail("kcat is not installed (Debian package kcat; ./scripts/test installs it)")
        print("kcat not installed: its part skipped")
    else:
        for q in range(parts):
            out = subprocess.run([kcat, "-b", c.bootstrap(3), "-X", "socket.timeout.ms=10000", "-C", "-t", topic,
                                  "-p", str(q), "-o", "beginning", "-e", "-q", "-f", "%o|%k|%s\n"],
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, f"kcat -p {q} exited {out.returncode}: {out.stderr}"
            lines = [line.split("|") for line in out.stdout.splitlines() if line]
            have = [(int(o), k.encode(), v.encode()) for o, k, v in lines]
            assert have == expected[q], f"kcat via broker 3, partition {q}: {len(have)} records, want {len(expected[q])}"

    # The raw Produce the non-leaders refused is well formed: the leader takes it, right after what
    # the clients wrote (so none of the refused ones was stored).
    for q, leader in leaders.items():
        err, base = cu.produce_v3(c.broker(leader).bootstrap, topic, q, [b"raw-%d" % q])
        assert (err, base) == (0, len(expected[q])), f"partition {q}: raw Produce to its leader {leader}"
        err, records = cu.fetch_v4(c.broker(leader).bootstrap, topic, q, base)
        assert err == 0 and kw.batch_offsets(records) == [(base, base)] and b"raw-%d" % q in records

    # kafka-python produces through broker 3 (idempotent, its default); confluent-kafka reads via broker 1.
    topic2 = "from-kafka-python"
    create_topic(c, 3, topic2, 3)
    kw.require_api(c.bootstrap(3), kw.INIT_PRODUCER_ID)
    kp = kafka.KafkaProducer(bootstrap_servers=c.bootstrap(3), acks="all", linger_ms=5,
                             request_timeout_ms=10000, retry_backoff_ms=100)
    try:
        futs = [kp.send(topic2, key=b"k%d" % (i % 13), value=b"kp-%04d" % i) for i in range(600)]
        kp.flush(timeout=30)
        mds = [f.get(timeout=10) for f in futs]
    finally:
        kp.close(timeout=5)
    want2: dict[int, list[tuple[int, bytes, bytes]]] = {q: [] for q in range(3)}
    for i, md in enumerate(mds):
        want2[md.partition].append((md.offset, b"k%d" % (i % 13), b"kp-%04d" % i))
    for q in want2:
        assert [o for o, _, _ in want2[q]] == list(range(len(want2[q]))), f"{topic2} partition {q}: acked offsets"
    assert read_all(c.bootstrap(1), topic2, 3) == want2


# ---------------------------------------------------------------------------------------------
# b. s3:// objects (moto), 2 brokers

def test_s3_objects_two_brokers(cluster, tmp_path):
    moto = cu.start_moto(tmp_path)
    try:
        bucket, prefix = "skiff-cluster", "objs"
        moto.create_bucket(bucket)
        env = {"AWS_ACCESS_KEY_ID": cu.S3_ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": cu.S3_SECRET_ACCESS_KEY,
               "AWS_EC2_METADATA_DISABLED": "true"}
        c = cluster(2, objects=f"s3://{bucket}/{prefix}",
                    extra={"s3.endpoint": moto.endpoint, "s3.region": cu.S3_REGION}, env=env)
        topic, parts = "s3-topic", 4
        create_topic(c, 2, topic, parts)
        for src, dst in ((1, 2), (2, 1)):
            delivered, errors = [], []
            p = Producer({"bootstrap.servers": c.bootstrap(src), "acks": "all", "linger.ms": 5,
                          "enable.idempotence": True, "message.timeout.ms": 30000, "log_level": 4})
            for i in range(800):
                p.produce(topic, key=b"k%d" % i, value=b"via%d-%04d-" % (src, i) + b"x" * (i % 300),
                          on_delivery=lambda e, m: errors.append(str(e)) if e else
                          delivered.append((m.partition(), m.offset(), m.key(), m.value())))
                p.poll(0)
            assert p.flush(30) == 0 and not errors, errors[:5]
            log = read_all(c.bootstrap(dst), topic, parts)
            for q, off, k, v in delivered:
                assert log[q][off] == (off, k, v), f"via broker {src}, read via {dst}: partition {q} offset {off}"
        assert sum(len(v) for v in log.values()) == 1600
        keys = moto.keys(bucket)
        assert keys, "no object in the S3 bucket: the brokers did not write to S3"
        assert all(k.startswith(prefix + "/") for k in keys), f"objects outside the prefix: {keys[:5]}"
        assert not any((tmp_path / "objects").iterdir()), "s3:// cluster wrote into the file:// directory"
    finally:
        moto.close()


# ---------------------------------------------------------------------------------------------
# c + f. SIGKILL a broker under an idempotent acks=all producer

@pytest.mark.timeout(150)
def test_sigkill_during_idempotent_produce(cluster):
    c = cluster(3)
    topic, parts = "killed", 6
    leaders = create_topic(c, 1, topic, parts)
    victim = victim_of(leaders, [1, 2, 3])
    survivors = [n for n in (1, 2, 3) if n != victim]
    moved = {q for q, l in leaders.items() if l == victim}

    np_ = NumberedProducer(c.bootstrap(), topic, parts).start()
    np_.wait_acked("acknowledgements on every partition before the kill",
                   lambda: np_.acked_partitions() == set(range(parts)) and len(np_.acked) > 300, 30)
    produced_at_kill = np_.produced
    c.kill(victim)
    t_kill = time.monotonic()
    # The survivors drop the victim after its lease and lead its partitions; the producer follows.
    views = c.wait_view(set(survivors), topic=topic, partitions=parts, timeout=20)
    assert not set(next(iter(views.values()))["topics"][topic].values()) & {victim}
    np_.wait_acked(f"acknowledgements of new messages on partitions {sorted(moved)} (led by the killed broker "
                   f"{victim}) from the survivors",
                   lambda: {n % parts for n in np_.acked_since(t_kill, moved, produced_at_kill)} == moved, 40)
    time.sleep(1.0)
    np_.stop_and_flush(60)
    assert np_.produced > produced_at_kill + 100
    check_exactly_once(np_, read_all(c.bootstrap(survivors[0]), topic, parts))

    # The killed broker starts again with the same node ID, takes its partitions back and
    # serves what the others committed meanwhile.
    c.start(victim)
    c.wait_view({1, 2, 3}, topic=topic, partitions=parts, timeout=20)
    check_exactly_once(np_, read_all(c.bootstrap(victim), topic, parts))


# ---------------------------------------------------------------------------------------------
# d. PostgreSQL restarted under the producer

@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restart_during_produce(cluster, postgres, mode):
    """``fast``: PostgreSQL ends its sessions and shuts down cleanly; ``immediate``: it dies as in
    a crash and recovers from its WAL at the next start."""
    c = cluster(2)
    topic, parts = "pg-restart", 4
    create_topic(c, 1, topic, parts)
    np_ = NumberedProducer(c.bootstrap(), topic, parts).start()
    try:
        np_.wait_acked("first acknowledgements", lambda: len(np_.acked) > 300, 30)
        postgres.stop(mode)
        t_down = time.monotonic()
        time.sleep(3.0)
        t_up = time.monotonic()
        postgres.start()
    finally:
        postgres.start()  # whatever happened, the brokers' teardown needs it
    produced_at_up = np_.produced
    during = np_.acked_since(t_down + 0.5)
    acked = np_.snapshot()
    during = [n for n in during if acked[n][1] < t_up]
    assert not during, (f"{len(during)} messages acknowledged while PostgreSQL was down "
                        f"(acks=all must wait for the commit), e.g. {during[:5]}")
    # Service resumes by itself: new messages on every partition are acknowledged.
    np_.wait_acked("acknowledgements of new messages after PostgreSQL came back",
                   lambda: {n % parts for n in np_.acked_since(t_up, None, produced_at_up)} == set(range(parts)),
                   45)
    time.sleep(1.0)
    np_.stop_and_flush(60)
    check_exactly_once(np_, read_all(c.bootstrap(2), topic, parts))
    c.wait_view({1, 2}, topic=topic, partitions=parts, timeout=20)


# ---------------------------------------------------------------------------------------------
# e. SIGSTOP a broker for longer than its lease

def epoch_of(postgres: cu.Postgres, db: str, node: int) -> int:
    return int(postgres.psql(f"SELECT epoch FROM brokers WHERE node_id = {node}", db=db))


def pause_at(c: cu.Cluster, postgres: cu.Postgres, db: str, node: int, inside_commit: bool,
             timeout: float = 30.0) -> int:
    """SIGSTOP ``node`` at a moment when it has no PostgreSQL transaction open
    (``inside_commit=False``), or when it is inside a commit holding its partitions' row locks
    (``True``): stop it, look at its sessions, and if the moment is wrong let it go on (SIGCONT
    after a few milliseconds, far below the lease) and try again. Returns the number of tries."""
    deadline = time.monotonic() + timeout
    tries = 0
    while True:
        tries += 1
        c.pause(node)
        txs = postgres.open_transactions(db, c.app_name(node))
        if inside_commit and any(locked and state in ("idle in transaction", "active") for _, state, locked in txs):
            return tries
        if not inside_commit and not txs:
            return tries
        c.resume(node)
        if time.monotonic() > deadline:
            pytest.fail(f"broker {node} was never {'inside' if inside_commit else 'outside'} a commit "
                        f"in {tries} tries ({timeout:.0f}s)")
        time.sleep(random.uniform(0.005, 0.05))


@contextlib.contextmanager
def lock_waits_on_failure(postgres: cu.Postgres, db: str):
    """A failure inside gets PostgreSQL's lock waits appended (who blocks whom)."""
    try:
        yield
    except pytest.fail.Exception as exc:
        failure = str(exc)
    else:
        return
    raise pytest.fail.Exception(f"{failure}\nPostgreSQL sessions waiting for a lock, and those in a "
                                f"transaction:\n{postgres.lock_waits(db)}", pytrace=False) from None


def paused_past_lease(c: cu.Cluster, postgres: cu.Postgres, db: str, inside_commit: bool) -> None:
    """3 brokers, an idempotent producer on 6 partitions; one broker SIGSTOPped for two leases.
    While it is stopped the others drop it, lead its partitions and acknowledge new messages on
    every partition; after SIGCONT it is fenced and registers again (a new epoch), the others keep
    their registrations, and the log holds every message once, in order, at contiguous offsets."""
    topic, parts = "paused", 6
    leaders = create_topic(c, 1, topic, parts)
    victim = victim_of(leaders, [1, 2, 3])
    others = [n for n in (1, 2, 3) if n != victim]
    moved = {q for q, l in leaders.items() if l == victim}
    epochs = {n: epoch_of(postgres, db, n) for n in (1, 2, 3)}

    np_ = NumberedProducer(c.bootstrap(), topic, parts).start()
    np_.wait_acked("acknowledgements on every partition before the pause",
                   lambda: np_.acked_partitions() == set(range(parts)) and len(np_.acked) > 300, 30)
    tries = pause_at(c, postgres, db, victim, inside_commit)
    t_stop = time.monotonic()
    produced_at_stop = np_.produced
    print(f"broker {victim} (leading partitions {sorted(moved)}) stopped after {tries} tries")
    try:
        # While it is stopped, the others drop it after the lease and take its partitions ...
        views = c.wait_view(set(others), topic=topic, partitions=parts, timeout=2 * c.lease_s + 3)
        assert victim not in set(next(iter(views.values()))["topics"][topic].values())
        # ... and, once they lead them, acknowledge new messages on every partition: the moved
        # ones and their own.
        t_moved = time.monotonic()
        with lock_waits_on_failure(postgres, db):
            np_.wait_acked(f"acknowledgements on every partition (the moved ones: {sorted(moved)}) after the "
                           f"survivors {others} took over, while broker {victim} is stopped",
                           lambda: {n % parts for n in np_.acked_since(t_moved, None, produced_at_stop)}
                           == set(range(parts)),
                           max(1.0, t_stop + 2 * c.lease_s + 3 - time.monotonic()))
        time.sleep(max(0.0, t_stop + 2 * c.lease_s - time.monotonic()))  # stopped for 2 leases in all
        assert all(epoch_of(postgres, db, n) == epochs[n] for n in others), \
            f"a broker that was never stopped lost its registration: epochs {epochs} -> " \
            f"{ {n: epoch_of(postgres, db, n) for n in (1, 2, 3)} }"
    finally:
        c.resume(victim)
    t_cont = time.monotonic()
    # It was fenced: it registers again and every broker lists it.
    c.wait_view({1, 2, 3}, topic=topic, partitions=parts, timeout=20)
    produced_at_cont = np_.produced
    np_.wait_acked("acknowledgements on every partition after SIGCONT",
                   lambda: {n % parts for n in np_.acked_since(t_cont, None, produced_at_cont)} == set(range(parts)),
                   30)
    time.sleep(1.0)
    np_.stop_and_flush(60)
    check_exactly_once(np_, read_all(c.bootstrap(victim), topic, parts))
    # It registered again (a new epoch) rather than carrying on under the lapsed lease; the
    # others kept theirs.
    now = {n: epoch_of(postgres, db, n) for n in (1, 2, 3)}
    assert now[victim] > epochs[victim], (epochs, now)
    assert all(now[n] == epochs[n] for n in others), f"a broker never stopped was fenced: {epochs} -> {now}"


@pytest.mark.timeout(150)
def test_sigstop_longer_than_lease(cluster, postgres, pg_db):
    """Stopped between commits (no PostgreSQL transaction open): see ``paused_past_lease``."""
    paused_past_lease(cluster(3), postgres, pg_db.rsplit("/", 1)[1], inside_commit=False)


@pytest.mark.timeout(150)
def test_sigstop_inside_a_commit(cluster, postgres, pg_db):
    """The same, stopped while it holds a commit's row locks (the moment a GC pause or a frozen VM
    may pick)."""
    paused_past_lease(cluster(3), postgres, pg_db.rsplit("/", 1)[1], inside_commit=True)
