"""Client quotas with confluent-kafka 2.16.1 (librdkafka 2.16) producers, and Skiff's
``client-instance-id`` quota entity.

Two producers share the client ID ``app``. librdkafka sends no KIP-1313 header; its client
instance ID is the one the broker gives its telemetry (KIP-714), and Skiff counts a connection's
requests under it. The first producer's instance ID is read from the admin HTTP view and given a
``producer_byte_rate`` of 1 MB/s with ``skiff quota set``; then both produce as fast as they can
for ten seconds: the throttled one delivers 0.9-1.1 MB/s and its statistics show broker throttle
times, while its sibling with the same client ID is not throttled at all.

Every wait is bounded.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.request

import pytest
from confluent_kafka import Producer

from groups_util import name, wait_until
from skiff_harness import skiff_bin

pytestmark = pytest.mark.timeout(120)

QUOTA = 1024 * 1024
VALUE = b"q" * 10_000
MEASURE_S = 10.0


def http_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


class Flood:
    """A producer sending 10 KB records as fast as it may; delivered bytes and the broker
    throttle times its statistics report are recorded."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.delivered: list[tuple[float, int]] = []
        self.throttle_max = 0
        self.stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": "app", "linger.ms": 5,
                                  "acks": 1, "statistics.interval.ms": 500, "log_level": 0,
                                  "stats_cb": self._stats, "message.timeout.ms": 60_000})
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _stats(self, text: str) -> None:
        stats = json.loads(text)
        for broker in stats.get("brokers", {}).values():
            self.throttle_max = max(self.throttle_max, broker.get("throttle", {}).get("max", 0))

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.delivered.append((time.monotonic(), len(msg.value())))

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.producer.produce(self.topic, VALUE, partition=0, on_delivery=self._delivered)
                self.producer.poll(0)
            except BufferError:
                self.producer.poll(0.05)
        self.producer.flush(30)

    def rate(self, start: float, end: float) -> float:
        return sum(n for t, n in self.delivered if start <= t < end) / (end - start)


def instances(admin_url: str) -> set[str]:
    return {v["client_instance_id"] for v in http_json(f"{admin_url}/clients")
            if v.get("client_instance_id") and v.get("telemetry")}


def test_an_instance_quota_throttles_one_producer_and_not_its_sibling(make_broker):
    b = make_broker()
    topic = name("quota")
    # The first producer, alone: its telemetry instance ID appears in the view.
    slow = Flood(b.bootstrap, topic)
    slow.producer.produce(topic, b"hello", partition=0)
    assert slow.producer.flush(20) == 0
    wait_until(lambda: instances(b.admin_url), 20, "the producer's telemetry instance in the view")
    (slow_id,) = instances(b.admin_url)
    quota = subprocess.run([str(skiff_bin()), "quota", "set", "--bootstrap", b.bootstrap,
                            "--client-instance-id", slow_id, "--set", f"producer_byte_rate={QUOTA}"],
                           capture_output=True, text=True, timeout=30)
    assert quota.returncode == 0, quota.stderr
    fast = Flood(b.bootstrap, topic)
    slow.thread.start()
    fast.thread.start()
    try:
        # Kafka measures over ten seconds; the first seconds of a burst are allowed through.
        time.sleep(2.0)
        start = time.monotonic()
        time.sleep(MEASURE_S)
        end = time.monotonic()
    finally:
        slow.stop.set()
        fast.stop.set()
        slow.thread.join(60)
        fast.thread.join(60)
    slow_rate = slow.rate(start, end)
    fast_rate = fast.rate(start, end)
    assert 0.9 * QUOTA <= slow_rate <= 1.1 * QUOTA, f"throttled producer: {slow_rate / QUOTA:.2f} MB/s"
    assert slow.throttle_max > 0, "no throttle time reported to the throttled producer"
    assert fast.throttle_max == 0, f"the sibling was throttled ({fast.throttle_max} ms)"
    assert fast_rate > 1.5 * QUOTA, f"the sibling ran at {fast_rate / QUOTA:.2f} MB/s"
