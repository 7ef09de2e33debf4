"""A full disk (issue #13, finding 12): CreateTopics and OffsetCommit answered -1
(UNKNOWN_SERVER_ERROR) with no message; Kafka's answer is KAFKA_STORAGE_ERROR, saying what failed.

The data directory lives on a small tmpfs mounted for the test (root only, as in CI); a file
fills it, and removing the file must bring the broker back without a restart.
"""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from confluent_util import producer
from skiff_harness import SkiffBroker, free_port, skiff_bin

KAFKA_STORAGE_ERROR = 56


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path) -> None:
    """Writes zeros to ``path`` until the file system is full (large writes, then small ones)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for size in (256 * 1024, 4096, 512, 1):
            try:
                while os.write(fd, b"\0" * size) > 0:
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


def create_topic_error(admin: AdminClient, name: str) -> KafkaError | None:
    future = admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=10)[name]
    try:
        future.result(timeout=20)
        return None
    except KafkaException as e:
        return e.args[0]


def commit_error(bootstrap: str, group: str, topic: str, attempts: int = 1) -> KafkaError | None:
    """The error of the first of ``attempts`` commits (2 KB of metadata each) that fails."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "log_level": 3})
    try:
        for i in range(attempts):
            c.commit(offsets=[TopicPartition(topic, 0, i + 1, metadata="m" * 2000)], asynchronous=False)
        return None
    except KafkaException as e:
        return e.args[0]
    finally:
        c.close()


def test_a_full_disk_answers_kafka_storage_error_with_a_message_and_recovers(small_disk, tmp_path):
    b = SkiffBroker(skiff_bin(), data_dir=small_disk / "data", log_dir=tmp_path / "logs", port=free_port(),
                    extra_args=["--set", "log.segment.bytes=1048576"])
    b.start()
    try:
        topic = f"before-{uuid.uuid4().hex[:8]}"
        p = producer(b.bootstrap, acks="all")
        p.produce(topic, value=b"kept", partition=0)
        assert p.flush(20) == 0
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        assert commit_error(b.bootstrap, "g-before", topic) is None

        filler = small_disk / "filler"
        fill(filler)

        err = create_topic_error(admin, f"full-{uuid.uuid4().hex[:8]}")
        assert err is not None, "CreateTopics succeeded on a full disk"
        print(f"\nCreateTopics on a full disk: {err.code()} {err.str()}")
        assert err.code() == KAFKA_STORAGE_ERROR, err
        assert "storage error" in err.str() and "No space left" in err.str(), err.str()

        # The group log's last page may still hold a commit or two: commit until it is full.
        err = commit_error(b.bootstrap, "g-full", topic, attempts=50)
        assert err is not None, "OffsetCommit succeeded on a full disk"
        print(f"OffsetCommit on a full disk: {err.code()} {err.str()}")
        assert err.code() == KAFKA_STORAGE_ERROR, err

        # Space again: both work without a restart.
        filler.unlink()
        assert create_topic_error(admin, f"after-{uuid.uuid4().hex[:8]}") is None
        assert commit_error(b.bootstrap, "g-after", topic) is None
        assert b.running
    finally:
        b.stop()
