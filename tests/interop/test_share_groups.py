"""confluent-kafka 2.16.1 (librdkafka 2.16) KIP-932 share consumers against Skiff.

Several ``ShareConsumer``s in one share group on a one-partition topic: every record is accepted
exactly once across the members; records one member releases, or holds past its acquisition lock,
come back to another member with a higher delivery count; the records of a member whose process
dies come back; a record rejected, or released until the delivery-count limit, is archived and
never delivered again; a broker restart in the middle loses no acknowledgement; the Skiff CLI
(``skiff consume --share-group``) consumes in the same group.

The broker runs with ``group.share.enable = true`` and a 2 s acquisition lock. A new share
partition starts at the end of the log (``share.auto.offset.reset = latest``), so each test first
produces markers until a member receives one: from then on the partition's state exists and every
record produced is for the group. Every wait is bounded.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import KafkaException, ShareConsumer
from confluent_kafka import AcknowledgeType

from confluent_util import producer
from groups_util import name, wait_until
from skiff_harness import skiff_bin

pytestmark = pytest.mark.timeout(120)

LOCK_MS = 2000
SHARE_ARGS = (
    "--set", "group.share.enable=true",
    "--set", "group.share.heartbeat.interval.ms=500",
    "--set", "group.share.min.heartbeat.interval.ms=500",
    "--set", "group.share.session.timeout.ms=6000",
    "--set", "group.share.min.session.timeout.ms=6000",
    "--set", f"group.share.record.lock.duration.ms={LOCK_MS}",
    "--set", "group.share.min.record.lock.duration.ms=1000",
)


def share_broker(make_broker):
    return make_broker(*SHARE_ARGS)


def share_consumer(bootstrap: str, group: str, topic: str, client_id: str, explicit: bool = False) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit",
                       "socket.timeout.ms": 10000, "log_level": 4})
    c.subscribe([topic])
    return c


def records(c: ShareConsumer, timeout: float = 0.2) -> list:
    """One poll's records (errors raised)."""
    got = []
    for m in c.poll(timeout):
        if m.error() is not None:
            raise KafkaException(m.error())
        got.append(m)
    return got


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = producer(bootstrap)
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(30) == 0


def prime(bootstrap: str, topic: str, consumers: list[ShareConsumer]) -> None:
    """Produces markers until one of `consumers` receives one (the share partition is then
    initialized and assigned); the markers received are acknowledged by the next poll."""
    p = producer(bootstrap)
    seen = []

    def step():
        p.produce(topic, b"marker", partition=0)
        p.flush(10)
        for c in consumers:
            seen.extend(m for m in records(c, 0.2) if m.value() == b"marker")

    wait_until(lambda: seen, 60, "a share consumer receives a marker", step=step)


def drain(consumers: list[ShareConsumer], want: int, timeout: float, tag: bytes) -> dict[str, list]:
    """Polls every consumer in turn until `want` records whose value starts with `tag` arrived
    (markers skipped); returns them per client."""
    got: dict[str, list] = collections.defaultdict(list)

    def step():
        for i, c in enumerate(consumers):
            for m in records(c, 0.1):
                if m.value().startswith(tag):
                    got[str(i)].append(m)

    wait_until(lambda: sum(len(v) for v in got.values()) >= want, timeout, f"{want} records", step=step)
    return got


def close_all(*consumers: ShareConsumer) -> None:
    for c in consumers:
        try:
            c.close()
        except KafkaException:
            pass


def test_members_share_one_partition_and_accept_each_record_once(make_broker):
    b = share_broker(make_broker)
    topic, group = name("share"), name("g")
    members = [share_consumer(b.bootstrap, group, topic, f"m{i}") for i in range(3)]
    try:
        prime(b.bootstrap, topic, members)
        # In waves: one fetch may take a whole wave, and which member's fetch that is varies.
        values = [b"v-%04d" % i for i in range(600)]
        got: dict[str, list] = collections.defaultdict(list)
        for wave in range(10):
            produce(b.bootstrap, topic, values[wave * 60:(wave + 1) * 60])
            for k, ms in drain(members, 60, 30, b"v-").items():
                got[k].extend(ms)
        # A few more polls so that the last records' implicit acknowledgements go out, and
        # nothing is delivered twice.
        extra = drain_for(members, 1.5, b"v-")
        all_values = [m.value() for ms in got.values() for m in ms] + extra
        counts = collections.Counter(all_values)
        assert sorted(counts) == sorted(values), "every record delivered"
        assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1][:5]
        assert all(m.delivery_count() == 1 for ms in got.values() for m in ms)
        assert len([k for k, ms in got.items() if ms]) >= 2, "the partition is shared by the members"
    finally:
        close_all(*members)


def drain_for(consumers: list[ShareConsumer], seconds: float, tag: bytes) -> list[bytes]:
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for c in consumers:
            out.extend(m.value() for m in records(c, 0.1) if m.value().startswith(tag))
    return out


def test_released_and_expired_records_are_redelivered_with_a_higher_count(make_broker):
    b = share_broker(make_broker)
    topic, group = name("share"), name("g")
    a = share_consumer(b.bootstrap, group, topic, "a", explicit=True)
    other = share_consumer(b.bootstrap, group, topic, "other")
    try:
        # Only `a` first: it takes the records, then releases them.
        prime_explicit(b.bootstrap, topic, a)
        produce(b.bootstrap, topic, [b"r-%d" % i for i in range(20)])
        taken = drain_explicit(a, 20, b"r-")
        for m in taken:
            a.acknowledge(m, AcknowledgeType.RELEASE)
        a.commit_sync(30)
        again = drain([other], 20, 30, b"r-")["0"]
        assert sorted(m.value() for m in again) == sorted(m.value() for m in taken)
        assert {m.delivery_count() for m in again} == {2}

        # `a` takes new records and hangs past the lock: they go to `other`, counted again.
        produce(b.bootstrap, topic, [b"h-%d" % i for i in range(10)])
        held = drain_explicit(a, 10, b"h-", [other])
        redelivered = drain([other], len(held), 30, b"h-")["0"]
        assert sorted(m.value() for m in redelivered) == sorted(m.value() for m in held)
        assert {m.delivery_count() for m in redelivered} == {2}
    finally:
        close_all(a, other)


def prime_explicit(bootstrap: str, topic: str, c: ShareConsumer) -> None:
    p = producer(bootstrap)
    seen = []

    def step():
        p.produce(topic, b"marker", partition=0)
        p.flush(10)
        for m in records(c, 0.2):
            c.acknowledge(m, AcknowledgeType.ACCEPT)
            seen.append(m)

    wait_until(lambda: seen, 60, "the explicit consumer receives a marker", step=step)
    c.commit_sync(30)


def drain_explicit(c: ShareConsumer, want: int, tag: bytes, idle: list[ShareConsumer] = ()) -> list:
    """Polls `c` (explicit mode) until `want` records with `tag` arrived; markers are accepted,
    the tagged records left unacknowledged for the caller. `idle` consumers are polled too, to
    keep them in the group, and must receive nothing with `tag`."""
    got = []

    def step():
        for m in records(c, 0.2):
            if m.value().startswith(tag):
                got.append(m)
            else:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        for o in idle:
            assert not [m for m in records(o, 0.05) if m.value().startswith(tag)]

    wait_until(lambda: len(got) >= want, 30, f"{want} records for the explicit consumer", step=step)
    return got


def test_rejected_and_poison_records_are_archived(make_broker):
    b = share_broker(make_broker)
    topic, group = name("share"), name("g")
    c = share_consumer(b.bootstrap, group, topic, "c", explicit=True)
    try:
        prime_explicit(b.bootstrap, topic, c)
        produce(b.bootstrap, topic, [b"reject-me", b"poison"])
        counts = collections.Counter()
        deadline = time.monotonic() + 60
        # `reject-me` is rejected once; `poison` released every time (a consumer that fails on
        # it): after 5 deliveries (the default limit) it is archived.
        while time.monotonic() < deadline and counts[b"poison"] < 5:
            for m in records(c, 0.2):
                counts[m.value()] += 1
                if m.value() == b"reject-me":
                    c.acknowledge(m, AcknowledgeType.REJECT)
                elif m.value() == b"poison":
                    assert m.delivery_count() == counts[b"poison"]
                    c.acknowledge(m, AcknowledgeType.RELEASE)
                else:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
            c.commit_sync(30)
        assert counts[b"poison"] == 5
        # Neither comes back, while a new record still does.
        produce(b.bootstrap, topic, [b"after"])
        later = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and b"after" not in later:
            for m in records(c, 0.2):
                later.append(m.value())
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        assert b"after" in later
        assert b"poison" not in later and b"reject-me" not in later
        assert counts[b"reject-me"] == 1
    finally:
        close_all(c)


_HOLDER = r"""
import sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "client.id": "doomed",
                   "share.acknowledgement.mode": "explicit", "log_level": 4})
c.subscribe([sys.argv[3]])
deadline = time.monotonic() + 60
n = 0
while time.monotonic() < deadline:
    for m in c.poll(0.2):
        if m.error() is None and m.value().startswith(b"d-"):
            n += 1
        elif m.error() is None:
            c.acknowledge(m)
    if n:
        print("HOLDING", n, flush=True)
        time.sleep(600)
"""


def test_records_of_a_member_whose_process_dies_come_back(make_broker):
    b = share_broker(make_broker)
    topic, group = name("share"), name("g")
    other = share_consumer(b.bootstrap, group, topic, "other")
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, b.bootstrap, group, topic], stdout=subprocess.PIPE,
                            text=True)
    try:
        prime(b.bootstrap, topic, [other])
        # `other` stays out of the way (it is not polled) while the doomed member takes the records.
        produce(b.bootstrap, topic, [b"d-%d" % i for i in range(10)])
        line = proc.stdout.readline()
        assert line.startswith("HOLDING"), line
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        back = drain([other], 10, 40, b"d-")["0"]
        assert len({m.value() for m in back}) == 10
    finally:
        if proc.poll() is None:
            proc.kill()
        close_all(other)


def test_a_restart_loses_no_acknowledgement(make_broker):
    b = share_broker(make_broker)
    topic, group = name("share"), name("g")
    c = share_consumer(b.bootstrap, group, topic, "c", explicit=True)
    try:
        prime_explicit(b.bootstrap, topic, c)
        produce(b.bootstrap, topic, [b"x-%d" % i for i in range(10)])
        first = drain_explicit(c, 10, b"x-")
        for m in first[:6]:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        for m in first[6:]:
            c.acknowledge(m, AcknowledgeType.RELEASE)
        c.commit_sync(30)
    finally:
        close_all(c)
    b.restart()
    c2 = share_consumer(b.bootstrap, group, topic, "c2")
    try:
        again = drain([c2], 4, 60, b"x-")["0"]
        assert sorted(m.value() for m in again) == sorted(m.value() for m in first[6:])
        assert not [v for v in drain_for([c2], 2, b"x-")], "nothing accepted comes back"
    finally:
        close_all(c2)


def test_the_skiff_cli_consumes_in_the_same_share_group(make_broker):
    b = share_broker(make_broker)
    topic, group = name("share"), name("g")
    c = share_consumer(b.bootstrap, group, topic, "c")
    try:
        prime(b.bootstrap, topic, [c])
        produce(b.bootstrap, topic, [b"s-%d" % i for i in range(50)])
        out = subprocess.run([str(skiff_bin()), "consume", topic, "--bootstrap", b.bootstrap, "--share-group", group,
                              "--max", "50", "--idle-exit-ms", "5000"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "RUST_LOG": "warn"})
        assert out.returncode == 0, out.stderr
        cli_values = [line for line in out.stdout.splitlines() if line.startswith("s-")]
        # The CLI took records the Python member had not; the rest go to the Python member.
        rest = drain([c], 50 - len(cli_values), 30, b"s-")["0"] if len(cli_values) < 50 else []
        assert sorted(cli_values + [m.value().decode() for m in rest]) == sorted(f"s-{i}" for i in range(50))
    finally:
        close_all(c)
