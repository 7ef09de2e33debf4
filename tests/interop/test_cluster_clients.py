"""Cluster mode: the client-instance view (``/clients``, ``/clients/{id}``, ``/ui/clients``) is
cluster-wide. Each broker publishes a summary of its own client instances to PostgreSQL every
second it changes, and every broker's view merges the other live brokers' summaries into its own:
any broker shows every client's connections (each with the node it is on), group memberships and
KIP-714 telemetry, wherever the client is connected.

- ``test_telemetry_and_connections_of_a_producer_on_another_broker``: three brokers; a
  CLIENT_METRICS subscription is created through broker 1 (IncrementalAlterConfigs on the wire);
  a confluent-kafka producer bootstrapped through broker 2 only produces and pushes telemetry;
  broker 3's ``/clients`` and ``/clients/{id}`` (and its page) show that instance's telemetry and
  the producer's connections on the other brokers (each labelled with its node ID). librdkafka
  sends no KIP-1313 ID, so its connections are listed apart from its telemetry instance (one
  entry per connection, matched here by client ID).
- ``test_kip848_membership_on_every_broker``: a confluent-kafka KIP-848 consumer
  (``group.protocol=consumer``) bootstrapped through broker 3; every broker's view shows its
  membership under its client instance ID (member ID == instance ID, KIP-1082; librdkafka's
  member IDs are standard base64, read as the same UUID).

Without PostgreSQL these tests skip (fail under CI / ``SKIFF_REQUIRE_TOOLS=1``).
"""

from __future__ import annotations

import json
import struct
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer

import cluster_util as cu
import kafka_wire as kw
from test_cluster import cluster, create_topic, pg_db, postgres  # noqa: F401 (fixtures)
from test_telemetry import _string, alter_client_metrics

pytestmark = [
    pytest.mark.timeout(150),
    pytest.mark.skipif(cu.find_postgres_bin() is None and not cu.services_required(),
                       reason="PostgreSQL is not installed (apt-get install postgresql): cluster mode needs it"),
]

#: A bound on every wait here: a publication every second, telemetry pushed every 500 ms.
WAIT_S = 45
CLIENT_ID = "cluster-clients-producer"
PARTITIONS = 24


def http_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def http_json_or_none(url: str):
    """``http_json``, or None for a 404 (not known there, yet)."""
    try:
        return http_json(url)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def wait_for(predicate, what: str, timeout_s: float = WAIT_S, poll=None, context=None):
    """``predicate()`` until it is truthy (calling ``poll()`` between tries); returns it. On a
    timeout the error shows ``context()`` (what the brokers show)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        if poll is not None:
            poll()
        time.sleep(0.2)
    shown = f"\n{context()}" if context is not None else ""
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; last value: {last!r}{shown}")


#: What a failure message shows of each instance's telemetry.
TELEMETRY_SHOWN = ("client_id", "subscription_id", "requested_metrics", "push_interval_ms", "last_get_ms",
                   "last_push_ms", "last_error_code")


def views_of(c: cu.Cluster):
    """A ``context`` for ``wait_for``: every broker's /clients, trimmed to what matters."""
    def show() -> str:
        lines = []
        for node in range(1, len(c.brokers) + 1):
            try:
                views = http_json(f"{c.broker(node).admin_url}/clients")
            except OSError as exc:
                lines.append(f"broker {node}: {exc!r}")
                continue
            for v in views:
                t = v.get("telemetry")
                telemetry = {k: t.get(k) for k in TELEMETRY_SHOWN} if t else None
                lines.append(f"broker {node}: {v['client_instance_id']} connections="
                             f"{[(x['node_id'], x.get('client_id')) for x in v['connections']]} "
                             f"groups={[m['group'] for m in v['memberships']]} telemetry={telemetry}")
        return "\n".join(lines)
    return show


def client_metrics(bootstrap: str, name: str) -> dict[str, str | None] | None:
    """The CLIENT_METRICS resource ``name`` as one broker describes it (DescribeConfigs v1 on the
    wire): {config: value}, or None when it refuses (it does not know the resource)."""
    body = struct.pack(">ib", 1, 16) + _string(name) + struct.pack(">i?", -1, False)
    with kw.connect(bootstrap) as sock:
        sock.sendall(kw.request(kw.DESCRIBE_CONFIGS, 1, 9, body))
        correlation_id, payload = kw.read_response(sock)
    assert correlation_id == 9
    r = kw.Reader(payload)
    r.take(">i")  # throttle
    assert r.take(">i") == 1
    error = r.take(">h")
    r.string()
    r.take(">b")
    r.string()

    def config(r: kw.Reader) -> tuple[str, str | None]:
        name, value = r.string(), r.string()
        r.take(">?b?")
        r.array(lambda r: (r.string(), r.string(), r.take(">b")))
        return name, value

    configs = dict(r.array(config))
    return None if error else configs


def connections_of(views: list[dict], client_id: str) -> list[dict]:
    """Every connection in ``views`` whose client ID is ``client_id`` (under any entry: a client
    without a KIP-1313 ID has its connections listed one per entry)."""
    return [c for v in views for c in v["connections"] if c.get("client_id") == client_id]


def pushed_instance(views: list[dict]) -> dict | None:
    """The entry of our producer with telemetry it pushed successfully."""
    for view in views:
        telemetry = view.get("telemetry")
        if (telemetry and telemetry.get("client_id") == CLIENT_ID
                and telemetry.get("last_successful_push_ms") and telemetry.get("metrics")):
            return view
    return None


def test_telemetry_and_connections_of_a_producer_on_another_broker(cluster):
    c = cluster(3)
    # The producer connects to every partition leader (librdkafka drops its bootstrap connection
    # once it knows the brokers by node ID); with this many partitions, almost surely all three.
    leaders = set(create_topic(c, 1, "cluster-clients", PARTITIONS).values())
    assert leaders - {3}, "some partitions are led by brokers other than broker 3"
    error, message = alter_client_metrics(c.broker(1).bootstrap, "cluster-metrics",
                                          {"metrics": "org.apache.kafka.", "interval.ms": "500"})
    assert error == 0, message
    # Every broker mirrors the subscription (from PostgreSQL) within moments; the producer may ask
    # any of them for it.
    for node in (1, 2, 3):
        wait_for(lambda node=node: (client_metrics(c.broker(node).bootstrap, "cluster-metrics") or {})
                 .get("metrics") == "org.apache.kafka.", f"the subscription on broker {node}")
    admin3 = c.broker(3).admin_url

    producer = Producer({"bootstrap.servers": c.broker(2).bootstrap, "client.id": CLIENT_ID, "log_level": 4})
    try:
        for i in range(50):
            producer.produce("cluster-clients", f"m{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(30) == 0

        # Broker 3 is not the producer's bootstrap: what it shows of it, it learned from the others.
        view = wait_for(lambda: pushed_instance(http_json(f"{admin3}/clients")),
                        "the producer's telemetry in broker 3's /clients", poll=lambda: producer.poll(0.1),
                        context=views_of(c))
        instance_id = view["client_instance_id"]
        assert len(instance_id) == 22
        telemetry = view["telemetry"]
        assert telemetry["requested_metrics"] == ["org.apache.kafka."]
        assert all(m["name"].startswith("org.apache.kafka.") for m in telemetry["metrics"])

        # Its connections, each labelled with the node it is on: one to every partition leader, so
        # broker 3 shows the ones held by the other brokers too.
        wait_for(lambda: {conn["node_id"] for conn in connections_of(http_json(f"{admin3}/clients"), CLIENT_ID)}
                 == leaders, f"the producer's connections on nodes {sorted(leaders)} in broker 3's /clients",
                 context=views_of(c))

        # /clients/{id} on broker 3 is the same merged entry; an unknown ID is a 404 everywhere.
        single = http_json(f"{admin3}/clients/{instance_id}")
        assert single["client_instance_id"] == instance_id
        assert single["telemetry"]["subscription_id"] == telemetry["subscription_id"]
        for conn in single["connections"]:
            assert conn["node_id"] in (1, 2, 3)
        with pytest.raises(urllib.error.HTTPError) as missing:
            http_json(f"{admin3}/clients/AAAAAAAAAAAAAAAAAAAAAQ")
        assert missing.value.code == 404

        # The page is served there too (it reads the cluster-wide /clients above; test_ui.py
        # runs it in a browser).
        page = http_text(f"{admin3}/ui/clients")
        assert '<main id="app">' in page
        assert http_text(f"{admin3}/ui/clients/{instance_id}") == page

        # Every broker agrees on the instance and its telemetry.
        for node in (1, 2):
            wait_for(lambda node=node: (http_json_or_none(f"{c.broker(node).admin_url}/clients/{instance_id}")
                                        or {}).get("telemetry"),
                     f"the producer's telemetry on broker {node}", context=views_of(c))
    finally:
        producer.flush(5)
        del producer


def test_kip848_membership_on_every_broker(cluster):
    c = cluster(3)
    create_topic(c, 1, "cluster-members", 2)
    group = "cluster-clients-group"
    consumer = Consumer({"bootstrap.servers": c.broker(3).bootstrap, "group.id": group,
                         "group.protocol": "consumer", "client.id": "cluster-clients-consumer",
                         "auto.offset.reset": "earliest", "log_level": 4})
    try:
        consumer.subscribe(["cluster-members"])
        member_id = wait_for(lambda: consumer.assignment() and consumer.memberid(),
                             "the consumer's assignment", poll=lambda: consumer.poll(0.2))
        # librdkafka writes the UUID in standard base64; the view names the instance in Kafka's
        # URL-safe form.
        instance_id = member_id.replace("+", "-").replace("/", "_")

        def membership(node: int):
            for view in http_json(f"{c.broker(node).admin_url}/clients"):
                for m in view["memberships"]:
                    if m["group"] == group and view["client_instance_id"] == instance_id:
                        return view, m
            return None

        for node in (1, 2, 3):
            view, m = wait_for(lambda node=node: membership(node), f"the membership in broker {node}'s view",
                               poll=lambda: consumer.poll(0.1), context=views_of(c))
            assert m["member_id"] == member_id
            assert m["protocol"] == "consumer"
            assert not m["member_id_differs"]
            assert sum(len(p) for p in m["assigned"].values()) > 0, m
            single = http_json(f"{c.broker(node).admin_url}/clients/{instance_id}")
            assert [g["group"] for g in single["memberships"]] == [group]
        # Its connections are somewhere in the view, each on a live node, and one is on node 3.
        nodes = wait_for(lambda: {conn["node_id"] for conn in connections_of(
            http_json(f"{c.broker(1).admin_url}/clients"), "cluster-clients-consumer")} or None,
            "the consumer's connections in broker 1's view", poll=lambda: consumer.poll(0.1),
            context=views_of(c))
        assert 3 in nodes and nodes <= {1, 2, 3}, nodes
    finally:
        consumer.close()
