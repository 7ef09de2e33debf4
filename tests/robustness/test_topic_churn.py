"""kill -9 while topics are created, deleted and re-created under the same names and produced to
(issue #13, finding 9: a record acknowledged with acks=all was gone after the restart while its
topic existed).

The invariant, exact whatever the interleaving: a record acknowledged to topic name N must be
readable after the restart unless a deletion of N was still unanswered (in flight, or sent after)
when the record was acknowledged. Every record's value is unique, so incarnations of a name need
no offsets to tell apart. Bounded: KILLS cycles of CYCLE_S seconds of churn each.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from confluent_util import consumer

KILLS = 4
CYCLE_S = 2.0
NAMES = [f"churn-{i}" for i in range(4)]

pytestmark = pytest.mark.timeout(240)


class Churn:
    def __init__(self, bootstrap: str, seed: int):
        self.rng = random.Random(seed)
        self.bootstrap = bootstrap
        self.lock = threading.Lock()
        self.acked: dict[bytes, tuple[str, float]] = {}  # value -> (name, when acknowledged)
        # name -> [(sent, answered or None)] for every deletion
        self.deletes: dict[str, list[list[float | None]]] = {n: [] for n in NAMES}
        self.stop = threading.Event()
        self.counter = 0

    def produce_loop(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 1,
                      "message.timeout.ms": 3000, "socket.timeout.ms": 2000,
                      "topic.metadata.refresh.interval.ms": 200, "log_level": 0})

        def delivered(err, msg) -> None:
            if err is None:
                with self.lock:
                    self.acked[msg.value()] = (msg.topic(), time.monotonic())

        while not self.stop.is_set():
            self.counter += 1
            name = self.rng.choice(NAMES)
            try:
                p.produce(name, value=f"{name}/{self.counter}".encode(), partition=0, on_delivery=delivered)
            except BufferError:
                pass
            p.poll(0.002)
        p.flush(5)

    def delete_loop(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
        while not self.stop.is_set():
            name = self.rng.choice(NAMES)
            entry: list[float | None] = [time.monotonic(), None]
            with self.lock:
                self.deletes[name].append(entry)
            try:
                admin.delete_topics([name], operation_timeout=2)[name].result(timeout=3)
            except Exception:
                pass  # unknown topic, broker down: the deletion may or may not have happened
            else:
                entry[1] = time.monotonic()
            if entry[1] is None:
                entry[1] = float("inf")  # unanswered: it may have taken effect at any time
            self.stop.wait(0.15)

    def must_survive(self, value: bytes) -> bool:
        name, acked_at = self.acked[value]
        return all(answered is not None and answered < acked_at for _, answered in self.deletes[name])


def read_values(bootstrap: str, name: str) -> set[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    values: set[bytes] = set()
    # A name whose last deletion went through has no topic now: nothing to read.
    if name not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics:
        return values
    c = consumer(bootstrap)
    try:
        low, high = c.get_watermark_offsets(TopicPartition(name, 0), timeout=10)
        if high <= low:
            return values
        c.assign([TopicPartition(name, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 20
        position = low
        while position < high and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(str(m.error()))
                values.add(m.value())
                position = m.offset() + 1
    finally:
        c.close()
    return values


def test_kill_9_during_topic_churn_loses_no_acknowledged_record(make_broker):
    b = make_broker("--set", "auto.create.topics.enable=true")
    churn = Churn(b.bootstrap, seed=13)
    threads = [threading.Thread(target=churn.produce_loop, daemon=True),
               threading.Thread(target=churn.delete_loop, daemon=True)]
    for t in threads:
        t.start()
    try:
        for _ in range(KILLS):
            time.sleep(CYCLE_S)
            b.kill()
            b.start()
        time.sleep(CYCLE_S)
    finally:
        churn.stop.set()
        for t in threads:
            t.join(timeout=15)
    b.kill()
    b.start()
    with churn.lock:
        survivors = [v for v in churn.acked if churn.must_survive(v)]
    assert len(churn.acked) > 50, f"only {len(churn.acked)} records acknowledged"
    missing = []
    on_disk = {name: read_values(b.bootstrap, name) for name in NAMES}
    for value in survivors:
        name = churn.acked[value][0]
        if value not in on_disk[name]:
            missing.append(value)
    print(f"\n{len(churn.acked)} acknowledged, {len(survivors)} must survive, {len(missing)} missing")
    assert not missing, f"acknowledged and lost: {missing[:10]}"
