"""Smoke tests of the interop harness itself against librdkafka's mock cluster.

These need no Skiff binary: they prove that the pinned client libraries are
installed and can exchange data over loopback, so a failure in the Skiff
tests points at Skiff, not at the tooling.

Known limitation (found while writing this): the mock cluster answers an
ApiVersions request newer than it supports (v3/v4) with an UNSUPPORTED_VERSION
response that kafka-python 3.0.12 cannot decode, so kafka-python never
bootstraps against it. Pinning ``api_version=(2, 0)`` makes kafka-python send
ApiVersions v2, which works. librdkafka and aiokafka need no workaround.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition


N = 100
DEADLINE_S = 20


@pytest.fixture
def topic() -> str:
    return f"smoke-{uuid.uuid4().hex[:10]}"


def produce_n(bootstrap: str, topic: str, n: int = N) -> list[tuple[bytes, bytes]]:
    """Produce n keyed records to partition 0 with confluent-kafka; return them in order."""
    sent = [(f"k{i}".encode(), f"value-{i}".encode() * 4) for i in range(n)]
    errors: list = []
    offsets: list[int] = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": DEADLINE_S * 1000})
    for k, v in sent:
        p.produce(topic, key=k, value=v, partition=0, on_delivery=on_delivery)
    left = p.flush(DEADLINE_S)
    assert left == 0, f"{left} records not delivered"
    assert not errors, errors
    assert sorted(offsets) == list(range(n))
    return sent


def test_mock_cluster_metadata(mock_cluster):
    p = Producer({"bootstrap.servers": mock_cluster})
    md = p.list_topics(timeout=10)
    assert len(md.brokers) == 1
    host, _, port = mock_cluster.partition(":")
    b = next(iter(md.brokers.values()))
    assert (b.host, b.port) == (host, int(port))


def test_confluent_roundtrip(mock_cluster, topic):
    sent = produce_n(mock_cluster, topic)
    c = Consumer({"bootstrap.servers": mock_cluster, "group.id": "unused-with-assign",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < N and time.monotonic() < deadline:
            for m in c.consume(num_messages=500, timeout=1.0):
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF
                        continue
                    raise KafkaException(m.error())
                got.append((m.key(), m.value()))
                assert m.offset() == len(got) - 1
    finally:
        c.close()
    assert got == sent


def test_kafka_python_reads_confluent_records(mock_cluster, topic):
    import kafka

    sent = produce_n(mock_cluster, topic)
    # api_version pinned: see module docstring.
    c = kafka.KafkaConsumer(bootstrap_servers=mock_cluster, api_version=(2, 0),
                            enable_auto_commit=False, consumer_timeout_ms=5000,
                            request_timeout_ms=10000)
    try:
        tp = kafka.TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < N and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=1000, max_records=500).values():
                got.extend((r.key, r.value) for r in recs)
    finally:
        c.close()
    assert got == sent


def test_kafka_python_produces_for_confluent(mock_cluster, topic):
    import kafka

    kp = kafka.KafkaProducer(bootstrap_servers=mock_cluster, api_version=(2, 0), acks="all",
                             request_timeout_ms=10000)
    try:
        futs = [kp.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0) for i in range(N)]
        kp.flush(timeout=DEADLINE_S)
        assert [f.get(timeout=5).offset for f in futs] == list(range(N))
    finally:
        kp.close(timeout=5)
    c = Consumer({"bootstrap.servers": mock_cluster, "group.id": "unused-with-assign",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < N and time.monotonic() < deadline:
            got.extend(m.value() for m in c.consume(500, 1.0) if not m.error())
    finally:
        c.close()
    assert got == [b"v%d" % i for i in range(N)]


def test_aiokafka_reads_confluent_records(mock_cluster, topic):
    import aiokafka

    sent = produce_n(mock_cluster, topic)

    async def consume():
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=mock_cluster, enable_auto_commit=False,
                                      request_timeout_ms=10000)
        await c.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            got = []
            while len(got) < N:
                batch = await c.getmany(tp, timeout_ms=1000)
                got.extend((r.key, r.value) for r in batch.get(tp, []))
            return got
        finally:
            await c.stop()

    assert asyncio.run(asyncio.wait_for(consume(), DEADLINE_S)) == sent


def test_kcat_interop(mock_cluster, topic):
    """kcat (Debian's build, librdkafka 2.0.2) round trip through the mock cluster."""
    import subprocess

    from skiff_harness import require_tool

    kcat = require_tool("kcat", package="kcat")
    lines = "".join(f"line-{i}\n" for i in range(N))
    subprocess.run([kcat, "-b", mock_cluster, "-P", "-t", topic, "-p", "0"], input=lines, text=True,
                   check=True, timeout=DEADLINE_S)
    out = subprocess.run([kcat, "-b", mock_cluster, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q"],
                         capture_output=True, text=True, check=True, timeout=DEADLINE_S).stdout
    assert out.splitlines() == [f"line-{i}" for i in range(N)]
