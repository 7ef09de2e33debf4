"""confluent-kafka 2.16.1 (librdkafka 2.16) consumer groups against Skiff.

KIP-848 (``group.protocol=consumer``: ConsumerGroupHeartbeat v1, client-chosen member IDs):
two members split a 6-partition topic 3/3, one closes and the other takes over all 6, every
record is consumed exactly once by the group; committed offsets survive a broker restart; the
AdminClient describes (ConsumerGroupDescribe) and lists (ListGroups) the group with its type,
state and members. The classic protocol (librdkafka's default) is in ``test_groups_classic.py``.

Members commit synchronously after every batch and in their revoke callback, so a clean hand-over
must neither lose nor repeat a record.
"""

from __future__ import annotations

import collections
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException

from groups_util import (PARTS, ConsumerGroupState, ConsumerGroupType, committed, describe, group_broker, listed,
                         members_summary, name, produce_values, wait_group, wait_until)

pytestmark = pytest.mark.timeout(90)


class Member:
    """One group member: a subscribed Consumer plus everything it consumed, in order."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str, protocol: str = "consumer",
                 **conf):
        base = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                "client.id": client_id, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "socket.timeout.ms": 10000, "log_level": 4}
        if protocol == "classic":
            base.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        base.update(conf)
        self.name = client_id
        self.c = Consumer(base)
        self.closed = False
        self.got: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.events: list[tuple[str, list[int], float]] = []
        self.c.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)

    def _on_assign(self, _c, parts):
        self.events.append(("assign", sorted(p.partition for p in parts), round(time.time(), 3)))

    def _on_revoke(self, _c, parts):
        self.events.append(("revoke", sorted(p.partition for p in parts), round(time.time(), 3)))
        self.commit()

    def _on_lost(self, _c, parts):
        self.events.append(("lost", sorted(p.partition for p in parts), round(time.time(), 3)))

    def commit(self) -> None:
        try:
            self.c.commit(asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NO_OFFSET:
                raise

    def poll(self, timeout: float = 0.1) -> int:
        if self.closed:
            return 0
        msgs = self.c.consume(num_messages=500, timeout=timeout)
        n = 0
        for m in msgs:
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            self.got.append((m.partition(), m.offset(), m.value()))
            n += 1
        if n:
            self.commit()
        return n

    def parts(self) -> list[int]:
        return sorted(tp.partition for tp in self.c.assignment())

    def values(self) -> list[bytes]:
        return [v for _p, _o, v in self.got]

    def close(self) -> None:
        if not self.closed:
            self.commit()
            self.c.close()
            self.closed = True


def poll_all(*members: Member):
    def step():
        for m in members:
            m.poll(0.05)
    return step


def consumed(*members: Member) -> list[bytes]:
    return [v for m in members for v in m.values()]


def assert_exactly_once(produced: list[bytes], *members: Member) -> None:
    counts = collections.Counter(consumed(*members))
    dups = {v: n for v, n in counts.items() if n > 1}
    missing = set(produced) - set(counts)
    extra = set(counts) - set(produced)
    assert not dups and not missing and not extra, (
        f"duplicates {sorted(dups)[:10]} ({len(dups)}), missing {sorted(missing)[:10]} ({len(missing)}), "
        f"unexpected {sorted(extra)[:10]}; events: " + "; ".join(f"{m.name}: {m.events}" for m in members))


def test_kip848_two_members_split_then_takeover_exactly_once(group_target):
    b = group_target
    topic, group = name("g848-t"), name("g848")
    produced = produce_values(b.bootstrap, topic, "a", 20)
    m1 = Member(b.bootstrap, group, topic, "m1")
    m2 = Member(b.bootstrap, group, topic, "m2")
    try:
        step = poll_all(m1, m2)
        wait_until(lambda: len(m1.parts()) == 3 and len(m2.parts()) == 3
                   and sorted(m1.parts() + m2.parts()) == list(range(PARTS)),
                   30, "a 3/3 split of the 6 partitions", step=step)
        # The split is stable: a second batch goes to each member's own partitions only.
        before = {m.name: len(m.got) for m in (m1, m2)}
        produced += produce_values(b.bootstrap, topic, "b", 20)
        wait_until(lambda: set(consumed(m1, m2)) >= set(produced), 30, "every record of batches a+b", step=step)
        for m in (m1, m2):
            assert {p for p, _o, _v in m.got[before[m.name]:]} <= set(m.parts()), (m.name, m.parts(), m.events)
        assert m1.parts() and m2.parts() and not set(m1.parts()) & set(m2.parts())

        d = wait_group(b.bootstrap, group, 2, step=step)
        assert d.group_id == group
        assert d.type == ConsumerGroupType.CONSUMER, d.type
        assert d.state == ConsumerGroupState.STABLE
        assert not d.is_simple_consumer_group
        ms = {m.member_id: m for m in d.members}
        assert set(ms) == {m1.c.memberid(), m2.c.memberid()}, (set(ms), m1.c.memberid(), m2.c.memberid())
        assert ms[m1.c.memberid()].client_id == "m1" and ms[m2.c.memberid()].client_id == "m2"
        assert members_summary(d) == {m1.c.memberid(): m1.parts(), m2.c.memberid(): m2.parts()}
        assert all(tp.topic == topic for m in d.members for tp in m.assignment.topic_partitions)
        g = listed(b.bootstrap)[group]
        assert g.type == ConsumerGroupType.CONSUMER and g.state == ConsumerGroupState.STABLE, (g.type, g.state)

        m1.close()
        wait_until(lambda: m2.parts() == list(range(PARTS)), 30, "m2 taking over all 6 partitions",
                   step=poll_all(m2))
        produced += produce_values(b.bootstrap, topic, "c", 20)
        wait_until(lambda: set(consumed(m1, m2)) >= set(produced), 30, "every record of batches a+b+c",
                   step=poll_all(m2))
        for _ in range(10):  # give a duplicate the chance to show up
            m2.poll(0.1)
        assert_exactly_once(produced, m1, m2)
        d = wait_group(b.bootstrap, group, 1, step=poll_all(m2))
        assert members_summary(d) == {m2.c.memberid(): list(range(PARTS))}
        assert committed(m2.c, topic) == {p: 60 for p in range(PARTS)}
    finally:
        for m in (m1, m2):
            m.close()
    d = wait_group(b.bootstrap, group, 0, state=ConsumerGroupState.EMPTY)
    assert d.type == ConsumerGroupType.CONSUMER
    assert listed(b.bootstrap)[group].state == ConsumerGroupState.EMPTY


def test_kip848_commits_survive_broker_restart(make_broker):
    b = group_broker(make_broker)
    topic, group = name("g848r-t"), name("g848r")
    first = produce_values(b.bootstrap, topic, "a", 10)
    m1 = Member(b.bootstrap, group, topic, "m1")
    try:
        wait_until(lambda: set(m1.values()) >= set(first), 30, "m1 consuming batch a", step=poll_all(m1))
        assert committed(m1.c, topic) == {p: 10 for p in range(PARTS)}
    finally:
        m1.close()
    b.restart()
    second = produce_values(b.bootstrap, topic, "b", 10)
    m2 = Member(b.bootstrap, group, topic, "m2")
    try:
        assert committed(m2.c, topic) == {p: 10 for p in range(PARTS)}, "commits lost in the restart"
        wait_until(lambda: set(m2.values()) >= set(second), 30, "m2 consuming batch b", step=poll_all(m2))
        for _ in range(10):
            m2.poll(0.1)
        redelivered = [v for v in m2.values() if v not in second]
        assert not redelivered, f"{len(redelivered)} committed records delivered again: {redelivered[:5]}"
        assert sorted(m2.values()) == sorted(second)
        assert min(o for _p, o, _v in m2.got) == 10
    finally:
        m2.close()


def test_kip848_member_survives_broker_restart(make_broker):
    """A member that stays up while the broker restarts keeps consuming from its committed offsets."""
    b = group_broker(make_broker)
    topic, group = name("g848s-t"), name("g848s")
    first = produce_values(b.bootstrap, topic, "a", 10)
    m1 = Member(b.bootstrap, group, topic, "m1")
    try:
        wait_until(lambda: set(m1.values()) >= set(first), 30, "m1 consuming batch a", step=poll_all(m1))
        b.restart()
        second = produce_values(b.bootstrap, topic, "b", 10)
        wait_until(lambda: set(m1.values()) >= set(first + second), 40, "m1 consuming batch b after the restart",
                   step=poll_all(m1))
        for _ in range(10):
            m1.poll(0.1)
        assert_exactly_once(first + second, m1)
        wait_group(b.bootstrap, group, 1, step=poll_all(m1))
    finally:
        m1.close()
