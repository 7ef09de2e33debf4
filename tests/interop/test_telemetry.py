"""KIP-714 client telemetry with librdkafka (confluent-kafka 2.16.1).

A CLIENT_METRICS subscription for ``org.apache.kafka.`` is created over the wire (the Python admin
client has no CLIENT_METRICS resource type); librdkafka then fetches its subscription, pushes
metrics, and sends a terminating push when closed. The pushed metrics must appear on the broker's
Prometheus endpoint and in the client-instance view, under the ID librdkafka received.
"""

from __future__ import annotations

import json
import struct
import time
import urllib.request

import pytest
from confluent_kafka import Producer

import kafka_wire as kw

pytestmark = pytest.mark.timeout(90)


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def alter_client_metrics(bootstrap: str, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v0 on a CLIENT_METRICS (16) resource; returns (error, message)."""
    body = struct.pack(">i", 1) + struct.pack(">b", 16) + _string(name)
    body += struct.pack(">i", len(configs))
    for key, value in configs.items():
        body += _string(key) + struct.pack(">b", 0) + _string(value)
    body += struct.pack(">?", False)
    with kw.connect(bootstrap) as sock:
        sock.sendall(kw.request(44, 0, 7, body))
        correlation_id, payload = kw.read_response(sock)
    assert correlation_id == 7
    r = kw.Reader(payload)
    r.take(">i")  # throttle
    assert r.take(">i") == 1
    error = r.take(">h")
    message = r.string()
    return error, message


def http_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


def test_librdkafka_pushes_metrics_that_show_up_under_its_instance_id(broker):
    error, message = alter_client_metrics(
        broker.bootstrap, "rdkafka-metrics", {"metrics": "org.apache.kafka.", "interval.ms": "500"}
    )
    assert error == 0, message
    # An invalid subscription is refused with Kafka's error.
    error, _ = alter_client_metrics(broker.bootstrap, "bad", {"interval.ms": "5"})
    assert error != 0

    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "telemetry-test"})
    try:
        for i in range(100):
            producer.produce("telemetry-topic", f"m{i}".encode())
        assert producer.flush(20) == 0

        def pushed_instance():
            for view in http_json(f"{broker.admin_url}/clients"):
                telemetry = view.get("telemetry")
                if telemetry and telemetry.get("last_successful_push_ms") and telemetry["metrics"]:
                    return view
            producer.poll(0.1)
            return None

        view = wait_for(pushed_instance, 30, "a successful telemetry push")
        instance_id = view["client_instance_id"]
        telemetry = view["telemetry"]
        assert telemetry["client_id"] == "telemetry-test"
        assert telemetry["requested_metrics"] == ["org.apache.kafka."]
        assert all(m["name"].startswith("org.apache.kafka.") for m in telemetry["metrics"])
        assert len(instance_id) == 22

        # The same instance is on /clients/{id} and its series on /metrics, labelled by its ID.
        single = http_json(f"{broker.admin_url}/clients/{instance_id}")
        assert single["telemetry"]["subscription_id"] == telemetry["subscription_id"]
        metrics = http_text(f"{broker.admin_url}/metrics")
        assert f'client_instance_id="{instance_id}"' in metrics
        assert "org_apache_kafka_" in metrics
    finally:
        producer.flush(5)
        del producer

    # Closing the producer sends a terminating push.
    wait_for(
        lambda: http_json(f"{broker.admin_url}/clients/{instance_id}")["telemetry"]["terminating"],
        20,
        "the terminating push",
    )
