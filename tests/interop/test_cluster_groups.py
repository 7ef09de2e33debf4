"""Cluster mode, part 2 (issue #17): consumer groups coordinated across brokers with real clients.
Three Skiff brokers share one PostgreSQL database and one object store (``file://``); groups hash
onto coordinator shards that one live broker owns at a time, with the groups' state and offsets in
PostgreSQL.

- ``test_kip848_group_survives_sigkill_of_its_coordinator``: three confluent-kafka consumers
  (``group.protocol=consumer``), each bootstrapped through a different broker, split a 6-partition
  topic; the coordinator's broker is SIGKILLed mid-way; another broker takes the group over; the
  consumers keep their member IDs, the group ends with exactly those three members (no ghosts),
  every record produced before and after the kill is consumed at least once, and the committed
  offsets reach the end of every partition.
- ``test_mixed_group_survives_sigkill_of_its_coordinator``: the same with two classic and one
  KIP-848 confluent-kafka consumer in one consumer group (online migration: classic members inside
  a consumer group), taken over from PostgreSQL classic members and all.
- ``test_classic_group_survives_sigkill_of_its_coordinator``: the same with three kafka-python
  consumers in a classic group.
- ``test_stale_coordinator_changes_nothing``: the coordinator is SIGSTOPped past its lease; another
  broker takes the group over (with the committed offset) and takes a new commit; after SIGCONT an
  OffsetCommit sent straight to the stale broker is refused (or, if it already took the shard back
  under a new epoch, really stored): an acknowledged commit is always what every broker reads.

Brokers run with ``cluster.lease.ms=3000``. Without PostgreSQL these tests skip (fail under CI /
``SKIFF_REQUIRE_TOOLS=1``).
"""

from __future__ import annotations

import struct
import threading
import time

import kafka
import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import cluster_util as cu
import kafka_wire as kw
from test_cluster import cluster, create_topic, pg_db, postgres, watermarks  # noqa: F401 (fixtures)

pytestmark = [
    pytest.mark.timeout(150),
    pytest.mark.skipif(cu.find_postgres_bin() is None and not cu.services_required(),
                       reason="PostgreSQL is not installed (apt-get install postgresql): cluster mode needs it"),
]

TOPIC = "work"
PARTITIONS = 6
PER_PHASE = 600
#: A bound on every wait here: a lease (3 s) plus detection and a rebalance fit well inside.
WAIT_S = 60


def produce(bootstrap: str, start: int, count: int) -> None:
    """Values ``m0000000``.. keyed round the partitions, acks=all, all delivered or the test fails."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "log_level": 4,
                  "message.timeout.ms": 60_000, "enable.idempotence": True})
    failed: list[str] = []
    for n in range(start, start + count):
        p.produce(TOPIC, value=f"m{n:07d}".encode(), partition=n % PARTITIONS,
                  on_delivery=lambda err, _m: err and failed.append(str(err)))
        p.poll(0)
    assert p.flush(WAIT_S) == 0, "messages left undelivered"
    assert not failed, failed[:3]


def coordinator_of(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            described = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
            return described.coordinator.id
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def describe(bootstrap: str, group: str):
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)


def retrying(what):
    """``what()``, again while the group's shard is moving (librdkafka gives up on these)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return what()
        except KafkaException as exc:
            moving = exc.args[0].code() in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                            KafkaError.COORDINATOR_NOT_AVAILABLE)
            if not moving or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def committed(bootstrap: str, group: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 4})
    try:
        tps = retrying(lambda: c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=15))
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def commit(bootstrap: str, group: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 4})
    try:
        retrying(lambda: c.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False))
    finally:
        c.close()


class Member:
    """One consumer in a thread: polls, records every value it sees, commits as it goes."""

    def __init__(self, make, name: str):
        self.make = make
        self.name = name
        self.seen: set[int] = set()
        self.member_ids: list[str] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self.run, name=name, daemon=True)

    def run(self) -> None:
        try:
            self.loop()
        except Exception as exc:  # noqa: BLE001 (reported by the test)
            self.errors.append(repr(exc))


class ConfluentMember(Member):
    def loop(self) -> None:
        c: Consumer = self.make()
        try:
            c.subscribe([TOPIC])
            while not self.stop.is_set():
                msg = c.poll(0.2)
                member = c.memberid()
                if member and (not self.member_ids or self.member_ids[-1] != member):
                    self.member_ids.append(member)
                if msg is None:
                    if c.assignment():
                        self.ready.set()
                    continue
                if msg.error():
                    continue
                self.ready.set()
                self.seen.add(int(msg.value()[1:8]))
            c.commit(asynchronous=False)
        finally:
            c.close()


class KafkaPythonMember(Member):
    def loop(self) -> None:
        c: kafka.KafkaConsumer = self.make()
        try:
            c.subscribe([TOPIC])
            while not self.stop.is_set():
                records = c.poll(timeout_ms=200)
                generation = c._coordinator._generation  # noqa: SLF001 (the member ID it uses)
                member = generation.member_id if generation else ""
                if member and (not self.member_ids or self.member_ids[-1] != member):
                    self.member_ids.append(member)
                if c.assignment() and member:
                    self.ready.set()
                for batch in records.values():
                    for r in batch:
                        self.seen.add(int(r.value[1:8]))
            c.commit()
        finally:
            c.close()


def run_group_through_a_kill(c: cu.Cluster, members: list[Member], group: str,
                             check=None) -> tuple[int, list[Member]]:
    """Starts ``members``, kills the coordinator once all consume, produces more through the
    survivors, and waits until everything was seen; ``check(description)``, if given, looks at the
    group as the new coordinator describes it. Returns the killed node."""
    produce(c.bootstrap(), 0, PER_PHASE)
    for m in members:
        m.thread.start()
    deadline = time.monotonic() + WAIT_S
    for m in members:
        assert m.ready.wait(max(0.1, deadline - time.monotonic())), f"{m.name} never got partitions: {m.errors}"
    # Before the kill the rebalance has settled: three members, each with partitions (one member
    # may have read the first records before the others joined).
    while True:
        described = describe(c.bootstrap(), group)
        if len(described.members) == 3 and all(m.assignment.topic_partitions for m in described.members):
            break
        assert time.monotonic() < deadline, f"the group never split: {described.members}"
        time.sleep(0.2)
    killed = coordinator_of(c.bootstrap(), group)
    ids_before = {m.name: m.member_ids[-1] for m in members}
    c.kill(killed)
    survivors = [n for n in (1, 2, 3) if n != killed]
    c.wait_view(set(survivors), timeout=WAIT_S)
    produce(c.bootstrap(*survivors), PER_PHASE, PER_PHASE)
    want = set(range(2 * PER_PHASE))
    deadline = time.monotonic() + WAIT_S
    while True:
        seen = set().union(*(m.seen for m in members))
        if seen >= want:
            break
        assert time.monotonic() < deadline, (
            f"{len(want - seen)} records never consumed (e.g. {sorted(want - seen)[:5]}); "
            f"errors: {[m.errors for m in members]}")
        time.sleep(0.2)
    # The group goes on under another coordinator, with the same members and nobody else.
    new_coordinator = coordinator_of(c.bootstrap(*survivors), group)
    assert new_coordinator in survivors
    described = describe(c.bootstrap(*survivors), group)
    assert sorted(m.member_id for m in described.members) == sorted(ids_before.values()), (
        f"members after the kill: {[m.member_id for m in described.members]}, before: {ids_before}")
    if check is not None:
        check(described)
    for m in members:
        assert m.member_ids[-1] == ids_before[m.name], f"{m.name} changed its member ID: {m.member_ids}"
    for m in members:
        m.stop.set()
    for m in members:
        m.thread.join(timeout=30)
        assert not m.thread.is_alive(), f"{m.name} did not stop"
    # Offsets committed through the new coordinator reach the end of every partition.
    marks = watermarks(c.bootstrap(*survivors), TOPIC, PARTITIONS)
    deadline = time.monotonic() + WAIT_S
    while True:
        offsets = committed(c.bootstrap(*survivors), group)
        if all(offsets[p] == marks[p][1] for p in range(PARTITIONS)):
            break
        assert time.monotonic() < deadline, f"committed {offsets}, ends {marks}"
        time.sleep(0.2)
    return killed, members


def test_kip848_group_survives_sigkill_of_its_coordinator(cluster):
    c = cluster(3)
    create_topic(c, 1, TOPIC, PARTITIONS)
    group = "kip848-failover"

    def make(node: int):
        def build() -> Consumer:
            return Consumer({
                "bootstrap.servers": c.broker(node).bootstrap, "group.id": group,
                "group.protocol": "consumer", "auto.offset.reset": "earliest",
                "enable.auto.commit": True, "auto.commit.interval.ms": 200, "log_level": 4,
                "socket.timeout.ms": 10_000,
            })
        return build

    members = [ConfluentMember(make(n), f"confluent-{n}") for n in (1, 2, 3)]
    run_group_through_a_kill(c, members, group)


def test_mixed_group_survives_sigkill_of_its_coordinator(cluster):
    """Online migration in cluster mode: two classic confluent-kafka consumers and one KIP-848
    consumer make one consumer group (classic members inside it), which a surviving broker takes
    over from PostgreSQL, classic members and all."""
    c = cluster(3)
    create_topic(c, 1, TOPIC, PARTITIONS)
    group = "mixed-failover"

    def make(node: int, protocol: str):
        def build() -> Consumer:
            conf = {
                "bootstrap.servers": c.broker(node).bootstrap, "group.id": group,
                "group.protocol": protocol, "auto.offset.reset": "earliest",
                "enable.auto.commit": True, "auto.commit.interval.ms": 200, "log_level": 4,
                "socket.timeout.ms": 10_000,
            }
            if protocol == "classic":
                conf.update({"session.timeout.ms": 30_000, "heartbeat.interval.ms": 500})
            return Consumer(conf)
        return build

    members = [ConfluentMember(make(n, p), f"{p}-{n}")
               for n, p in ((1, "classic"), (2, "classic"), (3, "consumer"))]
    run_group_through_a_kill(c, members, group,
                             check=lambda d: d.type == ConsumerGroupType.CONSUMER or pytest.fail(f"{d.type}"))


def test_classic_group_survives_sigkill_of_its_coordinator(cluster):
    c = cluster(3)
    create_topic(c, 1, TOPIC, PARTITIONS)
    group = "classic-failover"

    def make(node: int):
        def build() -> kafka.KafkaConsumer:
            return kafka.KafkaConsumer(
                bootstrap_servers=c.broker(node).bootstrap, group_id=group, auto_offset_reset="earliest",
                enable_auto_commit=True, auto_commit_interval_ms=200, session_timeout_ms=30_000,
                heartbeat_interval_ms=500, request_timeout_ms=40_000)
        return build

    members = [KafkaPythonMember(make(n), f"kafka-python-{n}") for n in (1, 2, 3)]
    run_group_through_a_kill(c, members, group)


def test_stale_coordinator_changes_nothing(cluster):
    c = cluster(3)
    create_topic(c, 1, TOPIC, PARTITIONS)
    produce(c.bootstrap(), 0, 60)
    group = "stale-owner"
    # A committed position, through the group's coordinator.
    commit(c.bootstrap(), group, 5)
    owner = coordinator_of(c.bootstrap(), group)
    c.pause(owner)
    try:
        survivors = [n for n in (1, 2, 3) if n != owner]
        c.wait_view(set(survivors), via=survivors, timeout=WAIT_S)
        # The successor serves the group with the committed offset, and takes a new one.
        assert committed(c.bootstrap(*survivors), group)[0] == 5
        commit(c.bootstrap(*survivors), group, 7)
    finally:
        c.resume(owner)
    # Straight to the stale broker, at once after SIGCONT (before it hears it lost the shard):
    # an OffsetCommit on the wire. It is refused; or, if the broker already registered again and
    # took the shard back (a new epoch, the state reloaded from PostgreSQL), it lands for real.
    code = raw_offset_commit(c.broker(owner).bootstrap, group, 0, 99)
    survivors = [n for n in (1, 2, 3) if n != owner]
    c.wait_view({1, 2, 3}, timeout=WAIT_S)
    final = committed(c.bootstrap(*survivors), group)[0]
    if code == 0:
        assert final == 99, f"the stale broker acknowledged a commit that is not stored ({final})"
    else:
        assert code in (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), code
        assert final == 7, f"a refused commit changed the group: {final}"
    assert committed(c.bootstrap(), group)[0] == final


NOT_COORDINATOR = 16
COORDINATOR_LOAD_IN_PROGRESS = 14


def raw_offset_commit(bootstrap: str, group: str, partition: int, offset: int) -> int:
    """OffsetCommit v2 (a simple commit: generation -1, no member) on its own connection; the
    partition's error code."""
    def string(s: str) -> bytes:
        b = s.encode()
        return struct.pack(">h", len(b)) + b

    body = (string(group) + struct.pack(">i", -1) + string("") + struct.pack(">q", -1)
            + struct.pack(">i", 1) + string(TOPIC) + struct.pack(">i", 1)
            + struct.pack(">iq", partition, offset) + string(""))
    sock = kw.connect(bootstrap, timeout=10)
    try:
        sock.sendall(kw.request(8, 2, 7, body))
        _, response = kw.read_response(sock)
    finally:
        sock.close()
    # topics: [name, partitions: [index, error_code]] (v2 has no throttle time).
    pos = 4
    (name_len,) = struct.unpack_from(">h", response, pos)
    pos += 2 + name_len + 4
    _, error = struct.unpack_from(">ih", response, pos)
    return error


def test_group_admin_through_any_broker(cluster):
    """Listing, describing, offsets and deleting a group through brokers that do not coordinate
    it: AdminClient finds the coordinator (ListGroups asks every broker)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    c = cluster(3)
    create_topic(c, 1, TOPIC, PARTITIONS)
    produce(c.bootstrap(), 0, 60)
    groups = [f"admin-{i}" for i in range(6)]
    for i, g in enumerate(groups):
        commit(c.broker(1 + i % 3).bootstrap, g, 10 + i)
    for via in (1, 2, 3):
        admin = AdminClient({"bootstrap.servers": c.broker(via).bootstrap, "log_level": 4})
        listed = admin.list_consumer_groups(request_timeout=15).result(timeout=20)
        assert set(groups) <= {g.group_id for g in listed.valid}, (via, listed.valid, listed.errors)
        for i, g in enumerate(groups):
            (f,) = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g, [TopicPartition(TOPIC, 0)])], request_timeout=15).values()
            assert f.result(timeout=20).topic_partitions[0].offset == 10 + i, (via, g)
    admin = AdminClient({"bootstrap.servers": c.broker(3).bootstrap, "log_level": 4})
    deleted = admin.delete_consumer_groups(groups[:3], request_timeout=15)
    for g, f in deleted.items():
        f.result(timeout=20)
    lister = AdminClient({"bootstrap.servers": c.broker(1).bootstrap, "log_level": 4})
    after = lister.list_consumer_groups(request_timeout=15).result(timeout=20)
    left = {g.group_id for g in after.valid}
    assert not set(groups[:3]) & left and set(groups[3:]) <= left, (left, after.errors)
    # A deleted group's offsets are gone for good: the next coordinator reads them from PostgreSQL.
    assert committed(c.bootstrap(), groups[0])[0] < 0
