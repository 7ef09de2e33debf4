"""Online migration between group protocols (Kafka 4.x ``group.consumer.migration.policy``) with
confluent-kafka 2.16.1 (librdkafka 2.16) consumers.

A live group of three classic consumers (librdkafka's default ``range,roundrobin``, eager) is
restarted one member at a time with ``group.protocol=consumer``: the first KIP-848 member's
ConsumerGroupHeartbeat turns the classic group into a consumer group, the classic members keep
consuming through JoinGroup/SyncGroup/Heartbeat while the coordinator assigns for everyone, and
the group ends as a KIP-848 consumer group. The reverse rolls a KIP-848 group back to classic:
when its last KIP-848 member leaves, the group becomes a classic group again and its members
assign client side. Records are produced between restarts; every member commits after every batch
and when partitions are revoked, so no record may be lost or read twice.

With ``group.consumer.migration.policy=disabled`` the first KIP-848 member is refused (the group
stays classic and keeps consuming).
"""

from __future__ import annotations

import collections

import pytest
from confluent_kafka import KafkaError, KafkaException

from groups_util import (PARTS, ConsumerGroupType, group_broker, listed, name, produce_values, wait_until)
from test_groups_confluent import Member as _Member
from test_groups_confluent import consumed, poll_all

pytestmark = pytest.mark.timeout(180)

PER_PARTITION = 10

#: Errors librdkafka reports while it recovers from a rebalance by itself (an application logs them).
TRANSIENT = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
             KafkaError._ASSIGNMENT_LOST}


class Member(_Member):
    """A group member that commits after every batch and on revocation, and remembers what it read
    but could not commit (a commit refused mid-rebalance): only those may be read again."""

    def __init__(self, *args, **kwargs):
        self.pending: list[bytes] = []
        self.uncommitted: set[bytes] = set()
        self.transient: list = []
        super().__init__(*args, **kwargs)

    def commit(self) -> None:
        try:
            super().commit()
            self.pending.clear()
        except KafkaException as e:
            if e.args[0].code() not in TRANSIENT:
                raise
            self.transient.append(e.args[0])
            self.uncommitted.update(self.pending)
            self.pending.clear()

    def poll(self, timeout: float = 0.1) -> int:
        if self.closed:
            return 0
        n = 0
        for m in self.c.consume(num_messages=500, timeout=timeout):
            if m.error():
                if m.error().code() in TRANSIENT:
                    self.transient.append(m.error())
                    continue
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            self.got.append((m.partition(), m.offset(), m.value()))
            self.pending.append(m.value())
            n += 1
        if n:
            self.commit()
        return n


def assert_at_least_once(produced: list[bytes], members: list[Member]) -> None:
    """Nothing lost; a record read twice only if a member read it and could not commit it."""
    counts = collections.Counter(consumed(*members))
    missing = set(produced) - set(counts)
    extra = set(counts) - set(produced)
    uncommitted = set().union(*(m.uncommitted for m in members))
    twice = {v for v, n in counts.items() if n > 1}
    assert not missing and not extra and twice <= uncommitted, (
        f"missing {sorted(missing)[:10]} ({len(missing)}), unexpected {sorted(extra)[:10]}, read twice though "
        f"committed {sorted(twice - uncommitted)[:10]}; events: " + "; ".join(f"{m.name}: {m.events}" for m in members))


def group_type(bootstrap: str, group: str):
    g = listed(bootstrap).get(group)
    return g.type if g is not None else None


def covered(members: list[Member]) -> bool:
    """Every partition assigned to exactly one live member."""
    parts = [p for m in members if not m.closed for p in m.parts()]
    return sorted(parts) == list(range(PARTS))


def roll(bootstrap: str, group: str, topic: str, start: str, to: str, expect_during, expect_end):
    produced = produce_values(bootstrap, topic, "before", PER_PARTITION)
    old = [Member(bootstrap, group, topic, f"{start}{i}", protocol=start) for i in range(3)]
    everyone = list(old)
    try:
        live = list(old)
        wait_until(lambda: covered(live) and set(consumed(*everyone)) >= set(produced), 60,
                   f"three {start} members sharing and consuming the topic", step=poll_all(*live))
        for i in range(3):
            # Restart one member with the other protocol.
            old[i].close()
            live.remove(old[i])
            new = Member(bootstrap, group, topic, f"{to}{i}", protocol=to)
            everyone.append(new)
            live.append(new)
            produced += produce_values(bootstrap, topic, f"step{i}", PER_PARTITION)
            wait_until(lambda: covered(live) and set(consumed(*everyone)) >= set(produced), 60,
                       f"step {i}: every record consumed with {i + 1} {to} member(s); events: "
                       + "; ".join(f"{m.name}: {m.events}" for m in everyone), step=poll_all(*live))
            if i < 2:
                assert group_type(bootstrap, group) == expect_during, (i, group_type(bootstrap, group))
        for _ in range(10):  # give a duplicate the chance to show up
            poll_all(*live)()
        assert_at_least_once(produced, everyone)
        assert group_type(bootstrap, group) == expect_end
    finally:
        for m in everyone:
            m.close()


def test_classic_group_upgrades_to_consumer_group_one_restart_at_a_time(make_broker):
    b = group_broker(make_broker)
    roll(b.bootstrap, name("up"), name("up-t"), "classic", "consumer",
         expect_during=ConsumerGroupType.CONSUMER, expect_end=ConsumerGroupType.CONSUMER)


def test_consumer_group_downgrades_to_classic_group_one_restart_at_a_time(make_broker):
    b = group_broker(make_broker)
    roll(b.bootstrap, name("down"), name("down-t"), "consumer", "classic",
         expect_during=ConsumerGroupType.CONSUMER, expect_end=ConsumerGroupType.CLASSIC)


def test_disabled_policy_refuses_the_upgrade(make_broker):
    b = make_broker("--set", "group.consumer.migration.policy=disabled", "--set", "group.initial.rebalance.delay.ms=0",
                    "--set", f"num.partitions={PARTS}")
    group, topic = name("off"), name("off-t")
    produced = produce_values(b.bootstrap, topic, "a", PER_PARTITION)
    classic = Member(b.bootstrap, group, topic, "classic0", protocol="classic")
    modern = None
    try:
        wait_until(lambda: classic.parts() == list(range(PARTS)) and set(consumed(classic)) >= set(produced), 60,
                   "the classic member consuming", step=poll_all(classic))
        errors: list = []
        modern = Member(b.bootstrap, group, topic, "consumer0", protocol="consumer",
                        error_cb=lambda e: errors.append(e))
        produced += produce_values(b.bootstrap, topic, "b", PER_PARTITION)
        # librdkafka treats GROUP_ID_NOT_FOUND as fatal, as it does against Kafka.
        def step():
            classic.poll(0.05)
            try:
                modern.poll(0.05)
            except KafkaException as e:
                errors.append(e.args[0])

        def refused():
            return any(e.fatal() or e.code() == KafkaError._FATAL for e in errors)

        wait_until(lambda: set(consumed(classic)) >= set(produced) and refused(), 60,
                   "the classic member consuming on and the KIP-848 member refused", step=step)
        assert any("group id does not exist" in e.str().lower() for e in errors), errors
        assert modern.parts() == [] and not modern.got, modern.events
        assert classic.parts() == list(range(PARTS))
        assert group_type(b.bootstrap, group) == ConsumerGroupType.CLASSIC
        assert_at_least_once(produced, [classic])
    finally:
        classic.close()
        if modern is not None:
            modern.closed = True
            modern.c.close()
