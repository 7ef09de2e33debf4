"""aiokafka 0.14.0 against a real Skiff broker: produce (acks 1/all), consume with manual
assignment across 3 partitions, metadata and offset queries. No consumer groups: assign() +
seek only, auto-commit off. Each test runs its coroutine under asyncio.wait_for.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import aiokafka
import aiokafka.admin
import pytest

import kafka_wire as kw

PARTS = 3
N_PER_PART = 60
DEADLINE_S = 25
pytestmark = pytest.mark.timeout(60)
COMMON = {"request_timeout_ms": 10000, "retry_backoff_ms": 100}


@pytest.fixture
def b3(make_broker):
    return make_broker("--set", f"num.partitions={PARTS}")


def topic_name(prefix: str) -> str:
    return f"aio-{prefix}-{uuid.uuid4().hex[:10]}"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, DEADLINE_S))


def sent_records(ts_base: int):
    return {p: [(None if i % 9 == 4 else f"k{p}-{i}".encode(), f"v{p}-{i}".encode() * (1 + i % 4),
                 [("i", str(i).encode())] if i % 3 else [], ts_base + p * 1000 + i) for i in range(N_PER_PART)]
            for p in range(PARTS)}


async def produce(bootstrap: str, topic: str, sent, **conf) -> None:
    p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **COMMON, **conf)
    await p.start()
    try:
        futs = {part: [] for part in sent}
        for i in range(N_PER_PART):
            for part, recs in sent.items():
                k, v, h, ts = recs[i]
                futs[part].append(await p.send(topic, key=k, value=v, headers=h, partition=part, timestamp_ms=ts))
        for part, fs in futs.items():
            mds = await asyncio.gather(*fs)
            assert [m.partition for m in mds] == [part] * N_PER_PART
            assert [m.offset for m in mds] == list(range(N_PER_PART)), f"partition {part} offsets"
    finally:
        await p.stop()


async def consume(bootstrap: str, topic: str, counts: dict[int, int]):
    c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                                  auto_offset_reset="earliest", **COMMON)
    await c.start()
    got = {p: [] for p in counts}
    try:
        tps = [aiokafka.TopicPartition(topic, p) for p in counts]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        while any(len(got[p]) < n for p, n in counts.items()):
            for tp, recs in (await c.getmany(timeout_ms=500, max_records=1000)).items():
                got[tp.partition].extend(recs)
    finally:
        await c.stop()
    for p, n in counts.items():
        assert len(got[p]) == n, f"partition {p}: got {len(got[p])} records, want {n}"
    return got


def check(got, sent) -> None:
    for p, recs in sent.items():
        assert [r.offset for r in got[p]] == list(range(len(recs)))
        have = [(r.key, r.value, list(r.headers), r.timestamp) for r in got[p]]
        assert have == [(k, v, list(h), ts) for k, v, h, ts in recs], f"partition {p} differs"
        assert all(r.timestamp_type == 0 for r in got[p]), "CreateTime expected"


def roundtrip(bootstrap: str, prefix: str, **conf) -> None:
    topic = topic_name(prefix)
    sent = sent_records(int(time.time() * 1000) - 60_000)

    async def go():
        await produce(bootstrap, topic, sent, **conf)
        return await consume(bootstrap, topic, {p: N_PER_PART for p in range(PARTS)})

    check(run(go()), sent)


@pytest.mark.parametrize("acks", [1, "all"])
def test_produce_consume_manual_assignment(b3, acks):
    roundtrip(b3.bootstrap, f"acks{acks}", acks=acks)


def test_gzip_roundtrip(b3):
    # aiokafka ships gzip only; lz4/snappy/zstd need optional packages not in requirements.txt.
    roundtrip(b3.bootstrap, "gzip", acks="all", compression_type="gzip")


def test_idempotent_producer(b3):
    kw.require_api(b3.bootstrap, kw.INIT_PRODUCER_ID)
    roundtrip(b3.bootstrap, "idem", enable_idempotence=True)


def test_metadata_and_offsets(b3):
    topic = topic_name("md")
    base = int(time.time() * 1000) - 60_000
    sent = sent_records(base)

    async def go():
        await produce(b3.bootstrap, topic, sent, acks=1)
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=b3.bootstrap, enable_auto_commit=False, group_id=None,
                                      **COMMON)
        await c.start()
        try:
            assert topic in await c.topics()
            tps = [aiokafka.TopicPartition(topic, p) for p in range(PARTS)]
            assert await c.beginning_offsets(tps) == {tp: 0 for tp in tps}
            assert await c.end_offsets(tps) == {tp: N_PER_PART for tp in tps}
            res = await c.offsets_for_times({tps[0]: base + 10, tps[1]: base + 10_000_000})
            assert res[tps[0]].offset == 10 and res[tps[0]].timestamp == base + 10
            assert res[tps[1]] is None
        finally:
            await c.stop()

        admin = aiokafka.admin.AIOKafkaAdminClient(bootstrap_servers=b3.bootstrap, request_timeout_ms=10000)
        await admin.start()
        try:
            assert topic in await admin.list_topics()
            return await admin.describe_topics([topic])
        finally:
            await admin.close()

    (desc,) = run(go())
    assert desc["error_code"] == 0
    assert sorted(p["partition"] for p in desc["partitions"]) == list(range(PARTS))


def test_transactions_and_read_committed(b3):
    """aiokafka's transactional producer: a committed, an aborted and a committed transaction on
    every partition, with a consumer's offsets sent in the last one. A read_committed consumer
    returns exactly the committed records (aiokafka drops aborted ones from the Fetch's aborted
    transactions and skips the markers), read_uncommitted all of them, and the group's offset is
    the one the committed transaction carried.

    Breaks if: FindCoordinator for transactions, InitProducerId with a transactional ID,
    AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit or EndTxn fail at the versions aiokafka
    sends; markers are not control batches; read_committed Fetch lacks aborted transactions or
    passes the last stable offset; transactional offsets are applied on abort or not on commit.
    """
    for key in (24, 25, 26, 28):
        kw.require_api(b3.bootstrap, key)
    topic = topic_name("txn")
    group = f"aio-txn-{uuid.uuid4().hex[:8]}"
    per_txn = {"a": 4, "b": 3, "c": 2}

    async def transactional_writes():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=b3.bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:8]}",
                                      **COMMON)
        await p.start()
        try:
            for tag, n in per_txn.items():
                await p.begin_transaction()
                sent = [await p.send(topic, value=f"{tag}{part}-{i}".encode(), partition=part)
                        for part in range(PARTS) for i in range(n)]
                await asyncio.gather(*sent)
                if tag == "c":
                    await p.send_offsets_to_transaction({aiokafka.TopicPartition(topic, 0): 7}, group)
                if tag == "b":
                    await p.abort_transaction()
                else:
                    await p.commit_transaction()
        finally:
            await p.stop()

    async def read_all(isolation: str):
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=b3.bootstrap, enable_auto_commit=False, group_id=None,
                                      auto_offset_reset="earliest", isolation_level=isolation, **COMMON)
        await c.start()
        got = {part: [] for part in range(PARTS)}
        try:
            tps = [aiokafka.TopicPartition(topic, part) for part in range(PARTS)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            ends = await c.end_offsets(tps)
            async def behind():
                return any([await c.position(tp) < ends[tp] for tp in tps])

            while await behind():
                for tp, recs in (await c.getmany(timeout_ms=300, max_records=1000)).items():
                    got[tp.partition].extend(r.value.decode() for r in recs)
        finally:
            await c.stop()
        return got

    async def committed_offset():
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=b3.bootstrap, group_id=group, enable_auto_commit=False,
                                      **COMMON)
        await c.start()
        try:
            return await c.committed(aiokafka.TopicPartition(topic, 0))
        finally:
            await c.stop()

    async def go():
        await transactional_writes()
        return await read_all("read_committed"), await read_all("read_uncommitted"), await committed_offset()

    committed, everything, offset = run(go())
    for part in range(PARTS):
        want = [f"{tag}{part}-{i}" for tag in ("a", "c") for i in range(per_txn[tag])]
        assert committed[part] == want, f"partition {part}: read_committed"
        assert len(everything[part]) == sum(per_txn.values()), f"partition {part}: read_uncommitted"
    assert offset == 7
