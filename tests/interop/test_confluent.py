"""confluent-kafka 2.16.1 (librdkafka 2.16) against a real Skiff broker.

Producer: acks 0/1/all, idempotence, every compression codec; keys, headers (repeated and
null-valued) and CreateTime timestamps must come back byte-for-byte. Consumer: assign() only
(no group, nothing committed). The admin APIs a test needs are checked first
(``kafka_wire.require_api``: a broker that does not advertise one fails the test plainly).
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_END, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   NewTopic, ResourceType)

import kafka_wire as kw
from confluent_util import (DEADLINE_S, assert_partition_matches, consume_partitions, make_records, produce_all,
                            producer)

PARTS = 3
N_PER_PART = 120
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def b3(make_broker):
    """Broker whose auto-created topics have 3 partitions."""
    return make_broker("--set", f"num.partitions={PARTS}")


def topic_name(prefix: str = "ck") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def roundtrip(bootstrap: str, topic: str, big: bool = False, **producer_conf) -> None:
    ts_base = int(time.time() * 1000) - 3_600_000
    sent = {p: make_records(N_PER_PART, f"p{p}", ts_base=ts_base + p * 100_000 if p != 1 else None, big=big)
            for p in range(PARTS)}
    p = producer(bootstrap, **producer_conf)
    log = produce_all(p, topic, sent)
    assert not log.errors, log.errors[:5]
    assert len(log.ok) == PARTS * N_PER_PART
    if producer_conf.get("acks") not in (0, "0"):
        # The offsets in the delivery reports are the offsets the records are read back at.
        for part in range(PARTS):
            offs = [o for (pp, o, _v) in log.ok if pp == part]
            assert sorted(offs) == list(range(N_PER_PART)), f"partition {part} delivery offsets {offs[:10]}..."
    got = consume_partitions(bootstrap, topic, {part: N_PER_PART for part in range(PARTS)})
    for part in range(PARTS):
        assert_partition_matches(got[part], sent[part])
        if part != 1:
            assert all(g.timestamp_type == 1 for g in got[part]), "CreateTime expected"


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_consume_acks(b3, acks):
    roundtrip(b3.bootstrap, topic_name(f"acks{acks}"), acks=acks, **{"enable.idempotence": False})


@pytest.mark.parametrize("codec", ["lz4", "zstd", "gzip", "snappy"])
def test_compression_roundtrip(b3, codec):
    # big=True: compressible values, several per batch (linger.ms=5 in produce_all's producer).
    roundtrip(b3.bootstrap, topic_name(codec), big=True, acks="all", **{"compression.type": codec,
                                                                        "enable.idempotence": False})


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_idempotent_producer(b3, codec):
    kw.require_api(b3.bootstrap, kw.INIT_PRODUCER_ID)
    roundtrip(b3.bootstrap, topic_name(f"idem-{codec}"), acks="all",
              **{"enable.idempotence": True, "compression.type": codec})


def test_consumer_starts_at_assigned_offset(b3):
    topic = topic_name("seek")
    sent = {0: make_records(50, "s")}
    produce_all(producer(b3.bootstrap, acks="all"), topic, sent)
    got = consume_partitions(b3.bootstrap, topic, {0: 30}, start=20)
    assert_partition_matches(got[0], sent[0][20:], first_offset=20)


def test_watermarks_and_offsets_for_times(b3):
    from confluent_util import consumer

    topic = topic_name("times")
    base = int(time.time() * 1000) - 600_000
    # 40 records, timestamps base, base+10, ... so record i has ts base + 10*i.
    recs = make_records(40, "t")
    for i, r in enumerate(recs):
        r.timestamp = base + 10 * i
    produce_all(producer(b3.bootstrap, acks="all"), topic, {0: recs})
    c = consumer(b3.bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 40)
        assert c.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (0, 0)
        q = [TopicPartition(topic, 0, base - 5),       # before everything -> 0
             TopicPartition(topic, 1, base)]           # empty partition -> -1 (end)
        res = c.offsets_for_times(q, timeout=10)
        assert [(r.partition, r.offset, r.error) for r in res] == [(0, 0, None), (1, OFFSET_END, None)]
        for ts, want in [(base, 0), (base + 1, 1), (base + 10 * 17, 17), (base + 10 * 17 - 3, 17),
                         (base + 10 * 39, 39), (base + 10 * 39 + 1, OFFSET_END)]:
            (r,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert r.error is None and r.offset == want, f"ts {ts - base:+d}: got {r.offset}, want {want}"
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# AdminClient


@pytest.fixture
def admin(b3):
    return AdminClient({"bootstrap.servers": b3.bootstrap, "socket.timeout.ms": 10000, "log_level": 4})


def _result(fut, timeout: float = DEADLINE_S):
    return fut.result(timeout=timeout)


def _topics(admin) -> dict[str, int]:
    md = admin.list_topics(timeout=10)
    return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}


def test_admin_list_topics(b3, admin):
    # Metadata is served today: auto-created topics and brokers show up.
    topic = topic_name("list")
    produce_all(producer(b3.bootstrap, acks="all"), topic, {0: make_records(3, "l")})
    md = admin.list_topics(timeout=10)
    assert len(md.brokers) == 1
    (b,) = md.brokers.values()
    assert (b.host, b.port) == ("127.0.0.1", b3.port)
    assert md.topics[topic].error is None
    assert sorted(md.topics[topic].partitions) == list(range(PARTS))
    assert md.cluster_id
    one = admin.list_topics(topic=topic, timeout=10)
    assert list(one.topics) == [topic]


def test_admin_create_and_delete_topics(b3, admin):
    kw.require_api(b3.bootstrap, kw.CREATE_TOPICS)
    t1, t2 = topic_name("create"), topic_name("create")
    futs = admin.create_topics([NewTopic(t1, num_partitions=2, replication_factor=1),
                                NewTopic(t2, num_partitions=5, replication_factor=1,
                                         config={"retention.ms": "3600000"})],
                               operation_timeout=10, request_timeout=15)
    for f in futs.values():
        assert _result(f) is None
    topics = _topics(admin)
    assert topics.get(t1) == 2 and topics.get(t2) == 5, topics

    # Creating an existing topic fails with TOPIC_ALREADY_EXISTS.
    (f,) = admin.create_topics([NewTopic(t1, num_partitions=1, replication_factor=1)], request_timeout=15).values()
    with pytest.raises(KafkaException) as ei:
        _result(f)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    # validate_only does not create anything.
    t3 = topic_name("validate")
    (f,) = admin.create_topics([NewTopic(t3, num_partitions=1, replication_factor=1)], validate_only=True,
                               request_timeout=15).values()
    assert _result(f) is None
    assert t3 not in _topics(admin)

    # The created topic works for produce/consume, at every partition.
    sent = {p: make_records(10, f"c{p}") for p in range(5)}
    produce_all(producer(b3.bootstrap, acks="all"), t2, sent)
    got = consume_partitions(b3.bootstrap, t2, {p: 10 for p in range(5)})
    for p in range(5):
        assert_partition_matches(got[p], sent[p])

    kw.require_api(b3.bootstrap, kw.DELETE_TOPICS)
    futs = admin.delete_topics([t1, t2], operation_timeout=10, request_timeout=15)
    for f in futs.values():
        assert _result(f) is None
    deadline = time.monotonic() + 10
    while {t1, t2} & set(_topics(admin)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not {t1, t2} & set(_topics(admin))

    (f,) = admin.delete_topics([topic_name("missing")], request_timeout=15).values()
    with pytest.raises(KafkaException) as ei:
        _result(f)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_delete_topic_then_recreate_starts_empty(b3, admin):
    kw.require_api(b3.bootstrap, kw.DELETE_TOPICS)
    topic = topic_name("recreate")
    produce_all(producer(b3.bootstrap, acks="all"), topic, {0: make_records(20, "old")})
    (f,) = admin.delete_topics([topic], operation_timeout=10, request_timeout=15).values()
    assert _result(f) is None
    new = {0: make_records(5, "new")}
    produce_all(producer(b3.bootstrap, acks="all"), topic, new)  # auto-creates it again
    got = consume_partitions(b3.bootstrap, topic, {0: 5})
    assert_partition_matches(got[0], new[0])


def test_admin_create_partitions(b3, admin):
    kw.require_api(b3.bootstrap, kw.CREATE_PARTITIONS)
    topic = topic_name("grow")
    produce_all(producer(b3.bootstrap, acks="all"), topic, {0: make_records(5, "g")})
    (f,) = admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=10, request_timeout=15).values()
    assert _result(f) is None
    assert _topics(admin)[topic] == 5
    sent = {4: make_records(7, "g4")}
    produce_all(producer(b3.bootstrap, acks="all", **{"topic.metadata.refresh.interval.ms": 1000}), topic, sent)
    got = consume_partitions(b3.bootstrap, topic, {4: 7})
    assert_partition_matches(got[4], sent[4])
    # Shrinking is refused.
    (f,) = admin.create_partitions([NewPartitions(topic, 2)], request_timeout=15).values()
    with pytest.raises(KafkaException) as ei:
        _result(f)
    assert ei.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_admin_describe_and_incremental_alter_configs(b3, admin):
    kw.require_api(b3.bootstrap, kw.DESCRIBE_CONFIGS)
    topic = topic_name("cfg")
    produce_all(producer(b3.bootstrap, acks="all"), topic, {0: make_records(1, "c")})

    def describe() -> dict[str, ConfigEntry]:
        (f,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=15).values()
        return _result(f)

    cfg = describe()
    assert "retention.ms" in cfg and "cleanup.policy" in cfg, sorted(cfg)
    assert cfg["cleanup.policy"].value == "delete"
    default_retention = cfg["retention.ms"].value

    (f,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")], request_timeout=15).values()
    broker_cfg = _result(f)
    assert broker_cfg["num.partitions"].value == str(PARTS)

    kw.require_api(b3.bootstrap, kw.INCREMENTAL_ALTER_CONFIGS)
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    (f,) = admin.incremental_alter_configs([res], request_timeout=15).values()
    _result(f)
    cfg = describe()
    assert cfg["retention.ms"].value == "7200000"
    assert not cfg["retention.ms"].is_default

    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    (f,) = admin.incremental_alter_configs([res], request_timeout=15).values()
    _result(f)
    assert describe()["retention.ms"].value == default_retention

    bad = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)])
    (f,) = admin.incremental_alter_configs([bad], request_timeout=15).values()
    with pytest.raises(KafkaException):
        _result(f)


def test_admin_legacy_alter_configs_replaces_the_set(b3, admin):
    """confluent-kafka's ``alter_configs`` is the legacy AlterConfigs API: the resource's whole
    set of overrides becomes what is given."""
    topic = topic_name("legacycfg")
    produce_all(producer(b3.bootstrap, acks="all"), topic, {0: make_records(1, "l")})

    def describe() -> dict[str, ConfigEntry]:
        (f,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=15).values()
        return _result(f)

    default_retention = describe()["retention.ms"].value
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "7200000"})
    (f,) = admin.alter_configs([res], request_timeout=15).values()
    _result(f)
    assert describe()["retention.ms"].value == "7200000"
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"cleanup.policy": "compact"})
    (f,) = admin.alter_configs([res], request_timeout=15).values()
    _result(f)
    cfg = describe()
    assert cfg["cleanup.policy"].value == "compact" and not cfg["cleanup.policy"].is_default
    assert cfg["retention.ms"].value == default_retention, "an override not given is removed"
    bad = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "soon"})
    (f,) = admin.alter_configs([bad], request_timeout=15).values()
    with pytest.raises(KafkaException) as ei:
        _result(f)
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert describe()["cleanup.policy"].value == "compact"


def test_admin_describe_topics(b3, admin):
    from confluent_kafka import TopicCollection

    topic = topic_name("desc")
    produce_all(producer(b3.bootstrap, acks="all"), topic, {0: make_records(1, "d")})
    futures = admin.describe_topics(TopicCollection([topic]), request_timeout=15,
                                    include_authorized_operations=True)
    described = _result(futures[topic])
    assert described.name == topic and not described.is_internal
    assert [p.id for p in described.partitions] == list(range(PARTS))
    for p in described.partitions:
        assert p.leader.id == 1 and [r.id for r in p.replicas] == [1] and [r.id for r in p.isr] == [1]
    assert described.authorized_operations


def test_admin_delete_records(b3, admin):
    from confluent_util import consumer

    kw.require_api(b3.bootstrap, kw.DELETE_RECORDS)
    topic = topic_name("delrec")
    sent = {0: make_records(30, "d")}
    produce_all(producer(b3.bootstrap, acks="all"), topic, sent)
    (f,) = admin.delete_records([TopicPartition(topic, 0, 12)], request_timeout=15).values()
    assert _result(f).low_watermark == 12
    c = consumer(b3.bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (12, 30)
    finally:
        c.close()
    got = consume_partitions(b3.bootstrap, topic, {0: 18})
    assert_partition_matches(got[0], sent[0][12:], first_offset=12)


def test_admin_describe_cluster(b3, admin):
    kw.require_api(b3.bootstrap, kw.DESCRIBE_CLUSTER)
    d = _result(admin.describe_cluster(request_timeout=15))
    assert d.cluster_id
    assert [(n.id, n.host, n.port) for n in d.nodes] == [(1, "127.0.0.1", b3.port)]
    assert d.controller is not None and d.controller.id == 1
    assert d.cluster_id == admin.list_topics(timeout=10).cluster_id
