"""Helpers shared by the consumer-group tests (``test_groups_*.py``). Every wait is bounded."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import ConsumerGroupState, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient

from confluent_util import producer

PARTS = 6

#: Broker settings that make group tests fast: 500 ms heartbeats, 6 s sessions, no initial
#: rebalance delay for classic groups, 6 partitions for auto-created topics.
GROUP_ARGS = (
    "--set", "group.consumer.heartbeat.interval.ms=500",
    "--set", "group.consumer.session.timeout.ms=6000",
    "--set", "group.initial.rebalance.delay.ms=0",
    "--set", f"num.partitions={PARTS}",
)


def group_broker(make_broker, env: dict[str, str] | None = None):
    return make_broker(*GROUP_ARGS, env=env)


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_until(pred, timeout: float, what: str, step=None, interval: float = 0.1):
    """Call ``step()`` (if any) and ``pred()`` until ``pred()`` is truthy; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        if step is not None:
            step()
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        if step is None:
            time.sleep(interval)


def produce_values(bootstrap: str, topic: str, tag: str, per_partition: int, parts: int = PARTS) -> list[bytes]:
    """Produce ``per_partition`` records to each partition, values ``tag-p<P>-<i>``; returns the values."""
    p = producer(bootstrap, acks="all")
    errors: list = []
    values = []
    for i in range(per_partition):
        for part in range(parts):
            v = f"{tag}-p{part}-{i}".encode()
            values.append(v)
            p.produce(topic, value=v, partition=part,
                      on_delivery=lambda err, _m: errors.append(err) if err is not None else None)
        p.poll(0)
    left = p.flush(20)
    assert left == 0 and not errors, f"produce failed: {left} undelivered, errors {errors[:3]}"
    return values


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000, "log_level": 4})


def describe(bootstrap: str, group: str, timeout: float = 10):
    a = admin(bootstrap)
    return a.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout=timeout + 5)


def listed(bootstrap: str, timeout: float = 10) -> dict:
    """{group_id: ConsumerGroupListing} from list_consumer_groups (asserting no errors)."""
    a = admin(bootstrap)  # keep a reference: a destroyed client fails its pending futures with _DESTROY
    res = a.list_consumer_groups(request_timeout=timeout).result(timeout=timeout + 5)
    assert not res.errors, res.errors
    return {g.group_id: g for g in res.valid}


def members_summary(desc) -> dict[str, list[int]]:
    """{member_id: sorted assigned partitions} of a ConsumerGroupDescription."""
    return {m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in desc.members}


def wait_group(bootstrap: str, group: str, n_members: int, timeout: float = 20,
               state=ConsumerGroupState.STABLE, step=None):
    """Poll describe_consumer_groups until the group has ``n_members`` members and ``state``."""
    last = []

    def ok():
        d = describe(bootstrap, group)
        last[:] = [d]
        return d if len(d.members) == n_members and d.state == state else None

    try:
        return wait_until(ok, timeout, f"group {group} with {n_members} members in {state}", step=step,
                          interval=0.3)
    except AssertionError as e:
        d = last[0] if last else None
        raise AssertionError(f"{e}; last description: "
                             f"{d and (d.state, getattr(d, 'type', None), members_summary(d))}") from None


def committed(consumer, topic: str, parts: int = PARTS) -> dict[int, int]:
    return {tp.partition: tp.offset
            for tp in consumer.committed([TopicPartition(topic, p) for p in range(parts)], timeout=10)}


__all__ = ["PARTS", "GROUP_ARGS", "group_broker", "name", "wait_until", "produce_values", "admin", "describe",
           "listed", "members_summary", "wait_group", "committed", "ConsumerGroupState", "ConsumerGroupType"]
