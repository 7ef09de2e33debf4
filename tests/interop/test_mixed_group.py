"""A mixed KIP-848 group: a skiff-client consumer (the real ``skiff consume --group`` binary) and a
confluent-kafka 2.16.1 consumer (``group.protocol=consumer``) in one group on a 6-partition topic.

They split the partitions (3/3, disjoint, covering all six; the skiff member's ID is its 22-character
client instance ID) and together consume every record exactly once. Every wait is bounded.
"""

from __future__ import annotations

import collections
import json
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException

from groups_util import PARTS, describe, group_broker, name, produce_values, wait_until
from skiff_harness import skiff_bin

pytestmark = pytest.mark.timeout(120)

PER_PARTITION = 50


def _skiff(*args: str, bootstrap: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([str(skiff_bin()), *args, "--bootstrap", bootstrap], capture_output=True, text=True,
                          timeout=timeout, env={"RUST_LOG": "warn", "PATH": "/usr/bin:/bin"})


class SkiffMember:
    """``skiff consume TOPIC --group G --from-beginning --json`` with its stdout read in a thread."""

    def __init__(self, bootstrap: str, group: str, topic: str):
        self.proc = subprocess.Popen(
            [str(skiff_bin()), "consume", topic, "--group", group, "--from-beginning", "--json",
             "--bootstrap", bootstrap],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={"RUST_LOG": "warn", "PATH": "/usr/bin:/bin"})
        self.got: list[tuple[int, int, bytes]] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            with self.lock:
                self.got.append((r["partition"], r["offset"], r["value"].encode()))

    def records(self) -> list[tuple[int, int, bytes]]:
        with self.lock:
            return list(self.got)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.reader.join(5)
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


class RdkafkaMember:
    def __init__(self, bootstrap: str, group: str, topic: str):
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                           "client.id": "rdkafka-mixed", "auto.offset.reset": "earliest",
                           "enable.auto.commit": False, "socket.timeout.ms": 10000, "log_level": 4})
        self.got: list[tuple[int, int, bytes]] = []
        self.c.subscribe([topic], on_revoke=lambda c, _parts: self.commit())

    def commit(self) -> None:
        try:
            self.c.commit(asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NO_OFFSET:
                raise

    def poll(self, timeout: float = 0.1) -> None:
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

    def parts(self) -> list[int]:
        return sorted(tp.partition for tp in self.c.assignment())


def test_skiff_client_and_librdkafka_split_a_group_and_consume_everything_once(group_target):
    broker = group_target
    bootstrap = broker.bootstrap
    topic, group = name("mixed"), name("mixed-g")
    r = _skiff("topic", "create", topic, "--partitions", str(PARTS), bootstrap=bootstrap)
    assert r.returncode == 0, r.stderr

    skiff = SkiffMember(bootstrap, group, topic)
    rd = None
    try:
        # The skiff member joins first (and owns everything), then librdkafka joins.
        wait_until(lambda: skiff.proc.poll() is None and len(describe(bootstrap, group).members) == 1, 20,
                   "the skiff member in the group", interval=0.3)
        rd = RdkafkaMember(bootstrap, group, topic)
        last: list = []

        def split():
            d = describe(bootstrap, group)
            by_client = {m.client_id: (m.member_id, sorted(tp.partition for tp in m.assignment.topic_partitions))
                         for m in d.members}
            last[:] = [by_client]
            if set(by_client) != {"skiff-cli", "rdkafka-mixed"}:
                return None
            s, r_ = by_client["skiff-cli"][1], by_client["rdkafka-mixed"][1]
            if not s or not r_ or set(s) & set(r_) or sorted(s + r_) != list(range(PARTS)):
                return None
            return by_client if rd.parts() == r_ else None

        try:
            members = wait_until(split, 40, "a 2-member split of all partitions", step=rd.poll)
        except AssertionError as e:
            raise AssertionError(f"{e}; last: {last}; skiff stderr: {skiff.stop()}") from None
        skiff_id, skiff_parts = members["skiff-cli"]
        rd_parts = members["rdkafka-mixed"][1]
        assert len(skiff_id) == 22, members  # the skiff-client instance ID (Kafka UUID text form)
        assert len(skiff_parts) == len(rd_parts) == PARTS // 2, members

        values = produce_values(bootstrap, topic, "mixed", PER_PARTITION)
        total = len(values)
        wait_until(lambda: len(skiff.records()) + len(rd.got) >= total, 40,
                   f"{total} records consumed by the group", step=rd.poll)
        # A little longer: nothing more (no duplicates) arrives.
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            rd.poll()

        s_got = skiff.records()
        assert {p for p, _, _ in s_got} <= set(skiff_parts), (skiff_parts, collections.Counter(p for p, _, _ in s_got))
        assert {p for p, _, _ in rd.got} <= set(rd_parts), (rd_parts, collections.Counter(p for p, _, _ in rd.got))
        assert s_got and rd.got, (len(s_got), len(rd.got))
        consumed = collections.Counter(v for _, _, v in s_got + rd.got)
        dupes = [v for v, n in consumed.items() if n > 1]
        assert not dupes, f"consumed twice: {dupes[:5]}"
        assert set(consumed) == set(values), f"missing: {sorted(set(values) - set(consumed))[:5]}"
        assert len(s_got) + len(rd.got) == total
    finally:
        if rd is not None:
            rd.c.close()
        skiff.stop()
