"""Cluster mode share groups (issue #18) with confluent-kafka 2.16.1 (librdkafka 2.16) KIP-932
``ShareConsumer``s. Three Skiff brokers share one PostgreSQL database and one object store
(``file://``); each partition's leader is its share partitions' leader and keeps their state in
PostgreSQL, while the group's membership lives with its coordinator (maybe another broker).

- ``test_share_consumers_span_a_cluster_and_survive_a_broker_kill``: three share consumers, each
  bootstrapped through a different broker, share a 6-partition topic whose leaders are spread over
  the brokers: every record is accepted exactly once between them. Then a broker is SIGKILLed; its
  partitions move to the survivors, which take the share partitions' state over from PostgreSQL:
  new records are consumed, and nothing acknowledged before the kill is delivered again.

Brokers run with ``cluster.lease.ms=3000`` and a 2 s acquisition lock. Without PostgreSQL this
test skips (fails under CI / ``SKIFF_REQUIRE_TOOLS=1``).
"""

from __future__ import annotations

import collections
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ResourceType)

import cluster_util as cu
from groups_util import name, wait_until
from test_cluster import cluster, create_topic, pg_db, postgres  # noqa: F401 (fixtures)
from test_share_groups import close_all, drain_for, records, share_consumer

pytestmark = [
    pytest.mark.timeout(150),
    pytest.mark.skipif(cu.find_postgres_bin() is None and not cu.services_required(),
                       reason="PostgreSQL is not installed (apt-get install postgresql): cluster mode needs it"),
]

PARTITIONS = 6
PER_PHASE = 300
WAIT_S = 60
SHARE_KEYS = {
    "group.share.heartbeat.interval.ms": 500,
    "group.share.min.heartbeat.interval.ms": 500,
    "group.share.session.timeout.ms": 6000,
    "group.share.min.session.timeout.ms": 6000,
    "group.share.record.lock.duration.ms": 2000,
    "group.share.min.record.lock.duration.ms": 1000,
}


def produce(bootstrap: str, topic: str, tag: str, start: int, count: int) -> list[bytes]:
    """Values ``<tag>-0000``.. round the partitions, acks=all, all delivered or the test fails."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "log_level": 4,
                  "message.timeout.ms": 60_000})
    failed: list[str] = []
    values = [f"{tag}-{n:04d}".encode() for n in range(start, start + count)]
    for n, v in enumerate(values, start):
        p.produce(topic, value=v, partition=n % PARTITIONS,
                  on_delivery=lambda err, _m: err and failed.append(str(err)))
        p.poll(0)
    assert p.flush(WAIT_S) == 0, "messages left undelivered"
    assert not failed, failed[:3]
    return values


def from_earliest(c: cu.Cluster, group: str) -> None:
    """``share.auto.offset.reset = earliest`` for ``group``, seen by every broker before anyone
    joins (the group's coordinator initializes its share partitions from it)."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap(), "log_level": 4})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(timeout=20)

    def everywhere() -> bool:
        for b in c.brokers:
            one = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 4})
            described = one.describe_configs([ConfigResource(ResourceType.GROUP, group)])
            configs = next(iter(described.values())).result(timeout=20)
            entry = configs.get("share.auto.offset.reset")
            if entry is None or entry.value != "earliest":
                return False
        return True

    wait_until(everywhere, 20, "the group config on every broker")


def drain(consumers, want: set[bytes], tag: str, seen: collections.Counter) -> None:
    """Polls every consumer until every value of ``want`` arrived; counts everything received
    whose value starts with ``tag`` in ``seen``."""
    prefix = tag.encode()

    def step():
        for c in consumers:
            for m in records(c, 0.1):
                if m.value().startswith(prefix):
                    seen[m.value()] += 1

    wait_until(lambda: want <= set(seen), WAIT_S, f"{len(want)} '{tag}' records", step=step)


def test_share_consumers_span_a_cluster_and_survive_a_broker_kill(cluster):  # noqa: F811
    c = cluster(3, extra=SHARE_KEYS)
    topic, group = name("cshare"), name("g")
    # Leaders are hashed from the topic ID: take a topic every broker leads a partition of.
    for _ in range(10):
        leaders = create_topic(c, 1, topic, PARTITIONS)
        if set(leaders.values()) == {1, 2, 3}:
            break
        topic = name("cshare")
    else:
        pytest.fail(f"no topic spread over three brokers: {leaders}")
    from_earliest(c, group)
    before = produce(c.bootstrap(), topic, "a", 0, PER_PHASE)
    members = [share_consumer(c.broker(n).bootstrap, group, topic, f"m{n}") for n in (1, 2, 3)]
    try:
        first: collections.Counter = collections.Counter()
        drain(members, set(before), "a", first)
        # More polls send the last implicit acknowledgements (and would show a duplicate).
        for v in drain_for(members, 2.0, b"a-"):
            first[v] += 1
        assert set(first) == set(before)
        assert max(first.values()) == 1, [v for v, n in first.items() if n > 1][:5]

        # A broker dies: the survivors take its partitions and their share state over.
        killed = 2
        c.kill(killed)
        survivors = [1, 3]
        c.wait_view(set(survivors), timeout=WAIT_S, topic=topic, partitions=PARTITIONS)
        after = produce(c.bootstrap(*survivors), topic, "b", 0, PER_PHASE)
        second: collections.Counter = collections.Counter()
        old_again: collections.Counter = collections.Counter()

        def step():
            for m in members:
                for r in records(m, 0.1):
                    if r.value().startswith(b"b-"):
                        second[r.value()] += 1
                    elif r.value().startswith(b"a-"):
                        old_again[r.value()] += 1

        wait_until(lambda: set(after) <= set(second), WAIT_S, "the records produced after the kill",
                   step=step)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            step()
        assert not old_again, f"acknowledged records delivered again: {sorted(old_again)[:5]}"
        assert set(second) == set(after)
    finally:
        close_all(*members)
