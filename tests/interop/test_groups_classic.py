"""Classic consumer groups (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, OffsetCommit/OffsetFetch)
against Skiff, with confluent-kafka's default protocol, kafka-python 3.0.12, aiokafka 0.14.0 and kcat.

For each client: two members split a 6-partition topic 3/3 (range assignor), the AdminClient
describes the group as CLASSIC/STABLE with both members, one member leaves and the other takes over
all 6, and every record is consumed exactly once by the group. confluent-kafka and aiokafka members
commit synchronously after every batch and when partitions are revoked; kafka-python members use
auto-commit, which commits the consumed positions before every rebalance and on close. Commits survive a broker restart (confluent-kafka and
kcat). kafka-python members run in their own threads (their rejoin happens inside poll(), so two
members on one thread would block each other's JoinGroup); aiokafka members are asyncio tasks.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time

import aiokafka
import kafka
import pytest
from confluent_kafka import Consumer

from groups_util import (PARTS, ConsumerGroupState, ConsumerGroupType, committed, group_broker, listed,
                         members_summary, name, produce_values, wait_group, wait_until)
from test_groups_confluent import Member, assert_exactly_once, consumed, poll_all
from skiff_harness import require_tool

pytestmark = pytest.mark.timeout(90)


def check_classic_description(bootstrap: str, group: str, members: dict[str, list[int]], step=None) -> None:
    """describe_consumer_groups: CLASSIC, STABLE, the given {client_id: partitions}; list agrees."""
    d = wait_group(bootstrap, group, len(members), step=step)
    assert d.type == ConsumerGroupType.CLASSIC, d.type
    assert not d.is_simple_consumer_group
    have = {m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in d.members}
    assert have == members, (have, members, members_summary(d))
    g = listed(bootstrap)[group]
    assert g.state == ConsumerGroupState.STABLE and g.type == ConsumerGroupType.CLASSIC, (g.state, g.type)


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 4})
    try:
        return committed(c, topic)
    finally:
        c.close()


def split_takeover_scenario(bootstrap: str, group: str, topic: str, start, step=None):
    """Drive two members m1, m2 built by ``start(name)``; returns (produced, m1, m2).

    Members expose ``parts()``, ``got``/values via ``consumed``, ``name`` and ``close()``.
    """
    produced = produce_values(bootstrap, topic, "a", 10)
    m1, m2 = start("m1"), start("m2")
    step = step or (lambda: time.sleep(0.05))
    try:
        wait_until(lambda: len(m1.parts()) == 3 and len(m2.parts()) == 3
                   and sorted(m1.parts() + m2.parts()) == list(range(PARTS)),
                   40, "a 3/3 split of the 6 partitions", step=step)
    except AssertionError as e:
        raise AssertionError(f"{e}: m1 has {m1.parts()}, m2 has {m2.parts()}") from None
    produced += produce_values(bootstrap, topic, "b", 10)
    wait_until(lambda: set(consumed(m1, m2)) >= set(produced), 30, "every record of batches a+b", step=step)
    check_classic_description(bootstrap, group, {"m1": m1.parts(), "m2": m2.parts()}, step=step)
    m2.close()
    wait_until(lambda: m1.parts() == list(range(PARTS)), 40, "m1 taking over all 6 partitions", step=step)
    produced += produce_values(bootstrap, topic, "c", 10)
    wait_until(lambda: set(consumed(m1, m2)) >= set(produced), 30, "every record of batches a+b+c", step=step)
    return produced, m1, m2


# ---------------------------------------------------------------- confluent-kafka, classic protocol


def test_confluent_classic_split_takeover_exactly_once(group_target):
    b = group_target
    topic, group = name("gcl-t"), name("gcl")
    members: list[Member] = []

    def start(n):
        members.append(Member(b.bootstrap, group, topic, n, protocol="classic"))
        return members[-1]

    try:
        produced, m1, m2 = split_takeover_scenario(b.bootstrap, group, topic, start,
                                                   step=lambda: poll_all(*members)())
        for _ in range(10):
            m1.poll(0.1)
        assert_exactly_once(produced, m1, m2)
        check_classic_description(b.bootstrap, group, {"m1": list(range(PARTS))}, step=poll_all(m1))
        m1.close()
    finally:
        for m in members:
            m.close()
    d = wait_group(b.bootstrap, group, 0, state=ConsumerGroupState.EMPTY)
    assert d.type == ConsumerGroupType.CLASSIC
    assert committed_offsets(b.bootstrap, group, topic) == {p: 30 for p in range(PARTS)}


def test_confluent_classic_commits_survive_broker_restart(make_broker):
    b = group_broker(make_broker)
    topic, group = name("gclr-t"), name("gclr")
    first = produce_values(b.bootstrap, topic, "a", 10)
    m1 = Member(b.bootstrap, group, topic, "m1", protocol="classic")
    try:
        wait_until(lambda: set(m1.values()) >= set(first), 30, "m1 consuming batch a", step=poll_all(m1))
    finally:
        m1.close()
    b.restart()
    assert committed_offsets(b.bootstrap, group, topic) == {p: 10 for p in range(PARTS)}, "commits lost"
    second = produce_values(b.bootstrap, topic, "b", 10)
    m2 = Member(b.bootstrap, group, topic, "m2", protocol="classic")
    try:
        wait_until(lambda: set(m2.values()) >= set(second), 30, "m2 consuming batch b", step=poll_all(m2))
        for _ in range(10):
            m2.poll(0.1)
        assert sorted(m2.values()) == sorted(second), "committed records delivered again"
    finally:
        m2.close()


# ---------------------------------------------------------------- kafka-python


class KPMember:
    """A kafka-python group member polling in its own thread."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str):
        self.name = client_id
        self.got: list[tuple[int, int, bytes]] = []
        self.assigned: list[int] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self.c = kafka.KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, client_id=client_id, enable_auto_commit=True,
            auto_commit_interval_ms=200, auto_offset_reset="earliest", session_timeout_ms=6000,
            heartbeat_interval_ms=500, max_poll_interval_ms=20000, request_timeout_ms=10000, retry_backoff_ms=100)
        # kafka-python 3 runs rebalances on its IO thread, where a blocking commit() is refused; its
        # auto-commit commits the consumed positions before every rebalance (and on close) instead.
        # No rebalance listener: the member's own thread reads assignment() after every poll.
        self.c.subscribe([topic])
        # Refresh metadata after subscribing and before the first poll joins the group. kafka-python
        # 3.0.12 loses a rebalance when a leader assigned from a stale metadata snapshot: the next
        # metadata update triggers a rejoin that need_rejoin() forgets as soon as the leader has
        # reassigned, so if poll() times out while that JoinGroup/SyncGroup is in flight the result
        # is never applied, the member stops heartbeating and never rejoins after its session expires.
        assert topic in self.c.topics(), "topic metadata"
        self.t = threading.Thread(target=self._run, daemon=True, name=f"kp-{client_id}")
        self.t.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                recs = self.c.poll(timeout_ms=100, max_records=500)
                self.assigned = sorted(tp.partition for tp in self.c.assignment())
                for tp, rs in recs.items():
                    self.got.extend((tp.partition, r.offset, r.value) for r in rs)
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            self.c.close(autocommit=True)  # commits, then sends LeaveGroup

    def parts(self) -> list[int]:
        assert self.error is None, f"{self.name}: {self.error!r}"
        return list(self.assigned)

    def values(self) -> list[bytes]:
        return [v for _p, _o, v in self.got]

    def close(self) -> None:
        self._stop.set()
        self.t.join(15)
        assert not self.t.is_alive(), f"{self.name} did not stop"
        assert self.error is None, f"{self.name}: {self.error!r}"


def test_kafka_python_split_takeover_exactly_once(group_target):
    b = group_target
    topic, group = name("gkp-t"), name("gkp")
    members: list[KPMember] = []

    def start(n):
        members.append(KPMember(b.bootstrap, group, topic, n))
        return members[-1]

    try:
        produced, m1, m2 = split_takeover_scenario(b.bootstrap, group, topic, start)
        time.sleep(1)  # give a duplicate the chance to show up
        m1.close()
        assert_exactly_once(produced, m1, m2)
    finally:
        for m in members:
            m._stop.set()
            m.t.join(15)
    assert committed_offsets(b.bootstrap, group, topic) == {p: 30 for p in range(PARTS)}
    assert wait_group(b.bootstrap, group, 0, state=ConsumerGroupState.EMPTY).type == ConsumerGroupType.CLASSIC


# ---------------------------------------------------------------- aiokafka


class AIOMember:
    """An aiokafka group member: an asyncio task polling with getmany()."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str):
        self.name = client_id
        self.topic = topic
        self.got: list[tuple[int, int, bytes]] = []
        self.assigned: list[int] = []
        self.c = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, client_id=client_id, enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500,
            max_poll_interval_ms=20000, rebalance_timeout_ms=20000, request_timeout_ms=10000,
            retry_backoff_ms=100)
        self.task: asyncio.Task | None = None
        self._stop = asyncio.Event()

    async def start(self) -> AIOMember:
        me = self

        class Listener(aiokafka.ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                if revoked:
                    await me.c.commit()
                me.assigned = []

            async def on_partitions_assigned(self, assigned):
                me.assigned = sorted(tp.partition for tp in assigned)

        await self.c.start()
        self.c.subscribe([self.topic], listener=Listener())
        self.task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batch = await self.c.getmany(timeout_ms=100, max_records=500)
                for tp, rs in batch.items():
                    self.got.extend((tp.partition, r.offset, r.value) for r in rs)
                if batch:
                    await self.c.commit()
            await self.c.commit()
        finally:
            await self.c.stop()  # sends LeaveGroup

    def parts(self) -> list[int]:
        if self.task is not None and self.task.done():
            self.task.result()  # raise the member's error
        return list(self.assigned)

    def values(self) -> list[bytes]:
        return [v for _p, _o, v in self.got]

    async def aclose(self) -> None:
        self._stop.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, 15)


async def await_until(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


def test_aiokafka_split_takeover_exactly_once(make_broker):
    b = group_broker(make_broker)
    topic, group = name("gaio-t"), name("gaio")
    produced: list[bytes] = []

    async def in_thread(fn, *a):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *a)

    async def main():
        produced.extend(await in_thread(produce_values, b.bootstrap, topic, "a", 10))
        m1 = await AIOMember(b.bootstrap, group, topic, "m1").start()
        m2 = await AIOMember(b.bootstrap, group, topic, "m2").start()
        try:
            await await_until(lambda: len(m1.parts()) == 3 and len(m2.parts()) == 3
                              and sorted(m1.parts() + m2.parts()) == list(range(PARTS)), 40, "a 3/3 split")
            produced.extend(await in_thread(produce_values, b.bootstrap, topic, "b", 10))
            await await_until(lambda: set(consumed(m1, m2)) >= set(produced), 30, "every record of a+b")
            await in_thread(check_classic_description, b.bootstrap, group, {"m1": m1.parts(), "m2": m2.parts()})
            await m2.aclose()
            await await_until(lambda: m1.parts() == list(range(PARTS)), 40, "m1 taking over all 6 partitions")
            produced.extend(await in_thread(produce_values, b.bootstrap, topic, "c", 10))
            await await_until(lambda: set(consumed(m1, m2)) >= set(produced), 30, "every record of a+b+c")
            await asyncio.sleep(1)
            assert_exactly_once(produced, m1, m2)
        finally:
            for m in (m1, m2):
                await m.aclose()

    asyncio.run(asyncio.wait_for(main(), 80))
    assert committed_offsets(b.bootstrap, group, topic) == {p: 30 for p in range(PARTS)}


# ---------------------------------------------------------------- kcat -G


@pytest.fixture(scope="module")
def kcat() -> str:
    return require_tool("kcat", package="kcat")


def kcat_group(kcat: str, bootstrap: str, group: str, topic: str) -> list[bytes]:
    """``kcat -G group topic -e``: consume up to the end of every assigned partition, commit on exit."""
    p = subprocess.run([kcat, "-b", bootstrap, "-X", "socket.timeout.ms=10000", "-X", "auto.offset.reset=earliest",
                        "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500", "-X", "log_level=4",
                        "-G", group, topic, "-e", "-q", "-f", "%s\n"],
                       capture_output=True, timeout=30)
    assert p.returncode == 0, f"kcat -G exited {p.returncode}\nstderr:\n{p.stderr.decode(errors='replace')}"
    return p.stdout.splitlines()


def test_kcat_group_commits_and_restart(kcat, make_broker):
    b = group_broker(make_broker)
    topic, group = name("gkcat-t"), name("gkcat")
    first = produce_values(b.bootstrap, topic, "a", 10)
    assert sorted(kcat_group(kcat, b.bootstrap, group, topic)) == sorted(first)
    assert committed_offsets(b.bootstrap, group, topic) == {p: 10 for p in range(PARTS)}
    second = produce_values(b.bootstrap, topic, "b", 5)
    assert sorted(kcat_group(kcat, b.bootstrap, group, topic)) == sorted(second), "resumed at the commits"
    b.restart()
    third = produce_values(b.bootstrap, topic, "c", 5)
    assert sorted(kcat_group(kcat, b.bootstrap, group, topic)) == sorted(third), "commits lost in the restart"
    assert committed_offsets(b.bootstrap, group, topic) == {p: 20 for p in range(PARTS)}
