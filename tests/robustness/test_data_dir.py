"""What an unlucky operator does to a stopped broker's data directory (issue #13, findings 7, 8).

Each test stops the real broker, changes its files as an operator might (a lowered or lost
producer-ID file, a lost metadata file, directories of their own beside Skiff's), starts it
again and checks that no acknowledged record is lost and nothing Skiff did not create is gone.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from confluent_util import consume_partitions, producer

START_TIMEOUT_S = 20


def produce(bootstrap: str, topic: str, values: list[bytes], **conf) -> None:
    p = producer(bootstrap, acks="all", **conf)
    errors = []
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, msg: err and errors.append(err))
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors


def values_of(bootstrap: str, topic: str, n: int) -> list[bytes]:
    got = consume_partitions(bootstrap, topic, {0: n}, timeout=15)
    return [g.value for g in got[0]]


@pytest.mark.parametrize("damage", ["deleted", "lowered"])
def test_producer_ids_are_not_reused_when_the_id_file_is_lowered_or_lost(broker, damage):
    """Finding 7: a new idempotent producer got ID 0 again and its first batch was acknowledged
    as a duplicate of the old producer's, never written."""
    topic = f"pids-{uuid.uuid4().hex[:8]}"
    before = [f"before-{i}".encode() for i in range(5)]
    produce(broker.bootstrap, topic, before, **{"enable.idempotence": True})
    broker.stop()
    ids = broker.data_dir / "producer-ids"
    assert ids.exists()
    if damage == "deleted":
        ids.unlink()
    else:
        ids.write_text("0\n")
    broker.start()
    produce(broker.bootstrap, topic, [b"after"], **{"enable.idempotence": True})
    assert values_of(broker.bootstrap, topic, 6) == before + [b"after"]


def test_a_lost_metadata_file_refuses_to_start_and_can_be_rebuilt(broker):
    """Finding 8: without skiff-meta.dat the broker started with no topics and deleted every
    partition directory."""
    topic = f"kept-{uuid.uuid4().hex[:8]}"
    values = [f"v{i}".encode() for i in range(20)]
    produce(broker.bootstrap, topic, values)
    broker.stop()
    (broker.data_dir / "skiff-meta.dat").unlink()
    partition_dir = broker.data_dir / f"{topic}-0"
    files_before = sorted(p.name for p in partition_dir.iterdir())

    refused = subprocess.run(broker.argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=START_TIMEOUT_S)
    assert refused.returncode != 0, "the broker started over partitions it had no metadata for"
    assert "skiff-meta.dat" in refused.stderr and "--rebuild-metadata" in refused.stderr, refused.stderr
    assert sorted(p.name for p in partition_dir.iterdir()) == files_before, "partition files changed"

    broker.extra_args.append("--rebuild-metadata")
    broker.start()
    assert values_of(broker.bootstrap, topic, len(values)) == values
    # Rebuilt once: an ordinary start works again.
    broker.extra_args.remove("--rebuild-metadata")
    broker.restart()
    assert values_of(broker.bootstrap, topic, len(values)) == values


def test_directories_skiff_did_not_create_are_never_deleted(broker):
    """Finding 8: an unrelated directory in the data dir was deleted recursively at start."""
    from confluent_kafka.admin import AdminClient

    broker.stop()
    backup = broker.data_dir / "backup-2026"
    backup.mkdir()
    (backup / "notes.txt").write_text("mine")
    # Named like a partition, with a segment in it, of a topic Skiff never had.
    foreign = broker.data_dir / "other-0"
    foreign.mkdir()
    (foreign / "00000000000000000000.log").write_bytes(b"not Skiff's")
    broker.start()

    # A topic created and deleted: its directory goes, the others stay.
    topic = f"doomed-{uuid.uuid4().hex[:8]}"
    produce(broker.bootstrap, topic, [b"x"])
    assert (broker.data_dir / f"{topic}-0").is_dir()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.delete_topics([topic], operation_timeout=10).values():
        f.result(timeout=15)
    assert not (broker.data_dir / f"{topic}-0").exists()

    broker.restart()
    assert (backup / "notes.txt").read_text() == "mine"
    assert (foreign / "00000000000000000000.log").read_bytes() == b"not Skiff's"
    assert "left alone" in broker.stderr_text()
