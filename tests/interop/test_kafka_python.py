"""kafka-python 3.0.12 against a real Skiff broker: produce (acks 1/all), consume with manual
assignment across 3 partitions (through KIP-227 incremental fetch sessions, which kafka-python
uses when the broker offers them), metadata and offset queries. Consumer groups are in
test_groups_classic.py; here assign() + seek only, auto-commit off.

kafka-python 3.x enables idempotence by default (like the Java client), which needs
InitProducerId (key 22); one test uses the default config, the others pass enable_idempotence=False.
"""

from __future__ import annotations

import re
import time
import urllib.request
import uuid

import kafka
import pytest

import kafka_wire as kw

PARTS = 3
N_PER_PART = 60
DEADLINE_S = 20
pytestmark = pytest.mark.timeout(60)

COMMON = {"request_timeout_ms": 10000, "retry_backoff_ms": 100}


@pytest.fixture
def b3(make_broker):
    return make_broker("--set", f"num.partitions={PARTS}")


def topic_name(prefix: str) -> str:
    return f"kp-{prefix}-{uuid.uuid4().hex[:10]}"


def sent_records(ts_base: int):
    """{partition: [(key, value, headers, timestamp_ms)]}"""
    out = {}
    for p in range(PARTS):
        out[p] = [(None if i % 9 == 4 else f"k{p}-{i}".encode(), f"v{p}-{i}".encode() * (1 + i % 4),
                   [("i", str(i).encode()), ("p", str(p).encode())] if i % 3 else [],
                   ts_base + p * 1000 + i) for i in range(N_PER_PART)]
    return out


def produce(bootstrap: str, topic: str, sent, **conf) -> None:
    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **COMMON, **conf)
    try:
        futs = {part: [] for part in sent}
        for i in range(N_PER_PART):  # interleave partitions, keep per-partition order
            for part, recs in sent.items():
                k, v, h, ts = recs[i]
                futs[part].append(p.send(topic, key=k, value=v, headers=h, partition=part, timestamp_ms=ts))
        p.flush(timeout=DEADLINE_S)
        for part, fs in futs.items():
            mds = [f.get(timeout=5) for f in fs]
            assert [m.partition for m in mds] == [part] * N_PER_PART
            assert [m.offset for m in mds] == list(range(N_PER_PART)), f"partition {part} offsets"
    finally:
        p.close(timeout=5)


def consume(bootstrap: str, topic: str, counts: dict[int, int]):
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                            auto_offset_reset="earliest", **COMMON)
    got = {p: [] for p in counts}
    try:
        tps = [kafka.TopicPartition(topic, p) for p in counts]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + DEADLINE_S
        while any(len(got[p]) < n for p, n in counts.items()) and time.monotonic() < deadline:
            for tp, recs in c.poll(timeout_ms=500, max_records=1000).items():
                got[tp.partition].extend(recs)
    finally:
        c.close(autocommit=False)
    for p, n in counts.items():
        assert len(got[p]) == n, f"partition {p}: got {len(got[p])} records, want {n}"
    return got


def check(got, sent) -> None:
    for p, recs in sent.items():
        assert [r.offset for r in got[p]] == list(range(len(recs)))
        have = [(r.key, r.value, list(r.headers), r.timestamp) for r in got[p]]
        assert have == [(k, v, list(h), ts) for k, v, h, ts in recs], f"partition {p} differs"
        assert all(r.timestamp_type == 0 for r in got[p]), "CreateTime expected"


@pytest.mark.parametrize("acks", [1, "all"])
def test_produce_consume_manual_assignment(b3, acks):
    topic = topic_name(f"acks{acks}")
    sent = sent_records(int(time.time() * 1000) - 60_000)
    produce(b3.bootstrap, topic, sent, acks=acks, enable_idempotence=False)
    check(consume(b3.bootstrap, topic, {p: N_PER_PART for p in range(PARTS)}), sent)


def session_gauges(b) -> tuple[int, int]:
    """(fetch sessions, partitions they hold) from the broker's /metrics."""
    with urllib.request.urlopen(f"{b.admin_url}/metrics", timeout=5) as r:
        text = r.read().decode()
    sessions = re.search(r"^skiff_fetch_sessions (\d+)$", text, re.M)
    partitions = re.search(r"^skiff_fetch_session_partitions (\d+)$", text, re.M)
    assert sessions and partitions, text
    return int(sessions.group(1)), int(partitions.group(1))


def test_incremental_fetch_session_follows_assignment_changes(b3):
    """kafka-python keeps one fetch session and changes it incrementally: dropping partitions
    (forgotten_topics_data) and adding one back. Every record arrives exactly once, and the
    broker's session holds exactly the assigned partitions each time."""
    topic = topic_name("session")
    sent = sent_records(int(time.time() * 1000) - 60_000)
    produce(b3.bootstrap, topic, sent, acks=1, enable_idempotence=False)
    tps = [kafka.TopicPartition(topic, p) for p in range(PARTS)]
    c = kafka.KafkaConsumer(bootstrap_servers=b3.bootstrap, enable_auto_commit=False, group_id=None,
                            auto_offset_reset="earliest", **COMMON)

    def drain(want: dict[int, int]) -> dict[int, list[int]]:
        got: dict[int, list[int]] = {}
        deadline = time.monotonic() + DEADLINE_S
        while any(len(got.get(p, [])) < n for p, n in want.items()) and time.monotonic() < deadline:
            for tp, recs in c.poll(timeout_ms=300, max_records=1000).items():
                got.setdefault(tp.partition, []).extend(r.offset for r in recs)
        # One more short poll: nothing beyond what was asked for may arrive.
        for tp, recs in c.poll(timeout_ms=300).items():
            got.setdefault(tp.partition, []).extend(r.offset for r in recs)
        return got

    def wait_for_session(partitions: int) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while session_gauges(b3) != (1, partitions) and time.monotonic() < deadline:
            c.poll(timeout_ms=100)
        assert session_gauges(b3) == (1, partitions)

    try:
        c.assign(tps)
        got = drain({p: N_PER_PART for p in range(PARTS)})
        assert got == {p: list(range(N_PER_PART)) for p in range(PARTS)}
        wait_for_session(PARTS)

        # Down to one partition: the others are forgotten in the session.
        c.assign(tps[:1])
        c.seek(tps[0], N_PER_PART)
        wait_for_session(1)
        more = {p: [(None, b"more-%d" % i, [], int(time.time() * 1000)) for i in range(10)]
                for p in range(PARTS)}
        p = kafka.KafkaProducer(bootstrap_servers=b3.bootstrap, enable_idempotence=False, **COMMON)
        try:
            for part, recs in more.items():
                for k, v, h, ts in recs:
                    p.send(topic, key=k, value=v, partition=part, timestamp_ms=ts)
            p.flush(timeout=DEADLINE_S)
        finally:
            p.close(timeout=5)
        assert drain({0: 10}) == {0: list(range(N_PER_PART, N_PER_PART + 10))}

        # A partition added back to the session, from where this consumer left it.
        c.assign([tps[0], tps[2]])
        c.seek(tps[0], N_PER_PART + 10)
        c.seek(tps[2], N_PER_PART)
        assert drain({2: 10}) == {2: list(range(N_PER_PART, N_PER_PART + 10))}
        wait_for_session(2)
    finally:
        c.close(autocommit=False)


def test_gzip_roundtrip(b3):
    # kafka-python ships gzip only; lz4/snappy/zstd need optional packages not in requirements.txt.
    topic = topic_name("gzip")
    sent = sent_records(int(time.time() * 1000) - 60_000)
    produce(b3.bootstrap, topic, sent, acks="all", enable_idempotence=False, compression_type="gzip")
    check(consume(b3.bootstrap, topic, {p: N_PER_PART for p in range(PARTS)}), sent)


def test_default_producer_is_idempotent(b3):
    kw.require_api(b3.bootstrap, kw.INIT_PRODUCER_ID)
    topic = topic_name("idem")
    sent = sent_records(int(time.time() * 1000) - 60_000)
    produce(b3.bootstrap, topic, sent)  # defaults: acks=all, enable_idempotence=True
    check(consume(b3.bootstrap, topic, {p: N_PER_PART for p in range(PARTS)}), sent)


def test_metadata_and_offsets(b3):
    topic = topic_name("md")
    base = int(time.time() * 1000) - 60_000
    sent = sent_records(base)
    produce(b3.bootstrap, topic, sent, acks=1, enable_idempotence=False)
    c = kafka.KafkaConsumer(bootstrap_servers=b3.bootstrap, enable_auto_commit=False, group_id=None, **COMMON)
    try:
        assert topic in c.topics()
        assert c.partitions_for_topic(topic) == set(range(PARTS))
        tps = [kafka.TopicPartition(topic, p) for p in range(PARTS)]
        assert c.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert c.end_offsets(tps) == {tp: N_PER_PART for tp in tps}
        tp0 = tps[0]
        res = c.offsets_for_times({tp0: base + 10, tps[1]: base + 10_000_000})
        assert res[tp0].offset == 10 and res[tp0].timestamp == base + 10
        assert res[tps[1]] is None
    finally:
        c.close(autocommit=False)
    admin = kafka.KafkaAdminClient(bootstrap_servers=b3.bootstrap, **COMMON)
    try:
        assert topic in admin.list_topics()
        desc = {t["name"]: t for t in admin.describe_topics([topic])}
        assert sorted(p["partition_index"] for p in desc[topic]["partitions"]) == list(range(PARTS))
    finally:
        admin.close()


def test_admin_create_topics(b3):
    kw.require_api(b3.bootstrap, kw.CREATE_TOPICS)
    topic = topic_name("new")
    admin = kafka.KafkaAdminClient(bootstrap_servers=b3.bootstrap, **COMMON)
    try:
        admin.create_topics([kafka.admin.NewTopic(topic, num_partitions=4, replication_factor=1)],
                            timeout_ms=10000)
        assert topic in admin.list_topics()
        (d,) = admin.describe_topics([topic])
        assert len(d["partitions"]) == 4
    finally:
        admin.close()


def test_admin_describe_log_dirs(b3):
    """kafka-python's describe_log_dirs: the data directory and each partition's size on disk."""
    topic = topic_name("dirs")
    sent = sent_records(1_700_000_000_000)
    produce(b3.bootstrap, topic, sent, acks="all", enable_idempotence=False)
    admin = kafka.KafkaAdminClient(bootstrap_servers=b3.bootstrap, **COMMON)
    try:
        (broker,) = admin.describe_log_dirs()
        (log_dir,) = broker["log_dirs"]
        assert log_dir["error_code"] == 0
        assert log_dir["log_dir"] == str(b3.data_dir.resolve())
        (t,) = [t for t in log_dir["topics"] if t["name"] == topic]
        sizes = {p["partition_index"]: p["partition_size"] for p in t["partitions"]}
        assert sorted(sizes) == list(range(PARTS))
        for part, size in sizes.items():
            on_disk = sum(f.stat().st_size for f in (b3.data_dir / f"{topic}-{part}").glob("*.log"))
            assert size == on_disk > 0, (part, size, on_disk)
        # Filtered to one partition of the topic.
        (broker,) = admin.describe_log_dirs({topic: [1]})
        (log_dir,) = broker["log_dirs"]
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in log_dir["topics"]] == [(topic, [1])]
    finally:
        admin.close()
