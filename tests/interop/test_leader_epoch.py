"""KIP-320 position validation (OffsetForLeaderEpoch) with confluent-kafka 2.16.1 (librdkafka 2.16).

Skiff's leader epoch grows at every broker start and each batch carries it, so a consumer that
keeps running across a broker restart sees the partition's new epoch in Metadata and validates its
position with OffsetForLeaderEpoch before it fetches again:

- ``test_a_consumer_validates_its_position_after_a_restart``: nothing was lost, so the position
  stands and the consumer goes on exactly where it was (no record twice, none skipped).
- ``test_a_consumer_learns_of_a_lost_tail``: the broker's stop loses the log's last three batches
  (cut from the segment file while it is down, as a crash of an unsynced log would): the consumer
  had read them, and validation tells it where the log ends now, so it resumes there and reads the
  records produced after the restart (without validation it would fetch past the end, reset, and
  read the log again or skip the new records).

Every wait is bounded.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from confluent_util import producer
from groups_util import name

pytestmark = pytest.mark.timeout(120)

WAIT_S = 40


def requests_of(b, api: str) -> int:
    text = urllib.request.urlopen(b.admin_url + "/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("skiff_requests_total{") and f'api="{api}"' in line:
            return int(line.split()[-1])
    return 0


def produce(b, topic: str, values: list[bytes]) -> None:
    """One batch per value, in order."""
    p = producer(b.bootstrap, **{"linger.ms": 0})
    for v in values:
        p.produce(topic, v, partition=0)
        assert p.flush(20) == 0
    assert p.flush(20) == 0


def assigned_consumer(b, topic: str) -> Consumer:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": name("g"), "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 500,
                  "socket.timeout.ms": 10000, "log_level": 4})
    c.assign([TopicPartition(topic, 0, 0)])
    return c


def read(c: Consumer, want: int, seen: list[tuple[int, bytes]], errors: list) -> None:
    deadline = time.monotonic() + WAIT_S
    got = 0
    while got < want:
        assert time.monotonic() < deadline, f"{got} of {want} records: {seen[-5:]}, errors {errors}"
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error() is not None:
            errors.append(m.error())
            continue
        seen.append((m.offset(), m.value()))
        got += 1


def cut_last_batches(data_dir: Path, topic: str, n: int) -> None:
    """Cuts the last ``n`` batches off the partition's last segment file."""
    segment = max((data_dir / f"{topic}-0").glob("*.log"))
    data = segment.read_bytes()
    ends = []
    at = 0
    while at + 12 <= len(data):
        length = int.from_bytes(data[at + 8:at + 12], "big") + 12
        if at + length > len(data):
            break
        at += length
        ends.append(at)
    assert len(ends) > n, f"{segment} holds {len(ends)} batches"
    with open(segment, "r+b") as f:
        f.truncate(ends[-n - 1])


def test_a_consumer_validates_its_position_after_a_restart(make_broker):
    b = make_broker()
    topic = name("epochs")
    produce(b, topic, [b"a-%d" % i for i in range(5)])
    c = assigned_consumer(b, topic)
    seen: list[tuple[int, bytes]] = []
    errors: list = []
    try:
        read(c, 5, seen, errors)
        b.restart()
        produce(b, topic, [b"b-%d" % i for i in range(5)])
        read(c, 5, seen, errors)
        assert [o for o, _ in seen] == list(range(10)), seen
        assert requests_of(b, "OffsetForLeaderEpoch") > 0, "the position was never validated"
    finally:
        c.close()


def test_a_consumer_learns_of_a_lost_tail(make_broker):
    b = make_broker()
    topic = name("epochs")
    produce(b, topic, [b"a-%d" % i for i in range(10)])
    c = assigned_consumer(b, topic)
    seen: list[tuple[int, bytes]] = []
    errors: list = []
    try:
        read(c, 10, seen, errors)
        b.stop()
        cut_last_batches(b.data_dir, topic, 3)
        b.start()
        # Offsets 7-9 are gone; new records take them.
        produce(b, topic, [b"b-%d" % i for i in range(3)])
        read(c, 3, seen, errors)
        after = seen[10:]
        assert after == [(7, b"b-0"), (8, b"b-1"), (9, b"b-2")], \
            f"resumed at the new end: {after}, errors {errors}"
        assert requests_of(b, "OffsetForLeaderEpoch") > 0
        assert any(e.code() == KafkaError._LOG_TRUNCATION for e in errors) or not errors, errors
    finally:
        c.close()
