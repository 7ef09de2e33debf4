"""Damaged segment files of a stopped broker (issue #13, findings 5 and 6).

5. A byte flipped in a batch's base offset (outside the CRC) in a sealed segment was served
   silently wrong: 50 records disappeared. Offsets are now checked for continuity when segments
   are opened and read: a read never returns a broken sequence, it reports the damage.
6. A corrupt batch in the middle of the final segment truncated everything after it. A torn
   tail is still cut; damage followed by valid batches refuses to start (naming the file and
   position) unless the operator sets ``log.recovery.mode = "truncate"``.
"""

from __future__ import annotations

import struct
import subprocess
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

import kafka_wire as kw
from confluent_util import producer

KAFKA_STORAGE_ERROR = 56


def batches_in(path: Path) -> list[tuple[int, int, int]]:
    """(position, size, base offset) of each batch in a segment file."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        out.append((pos, 12 + length, base))
        pos += 12 + length
    return out


def make_topic(bootstrap: str, **configs: str) -> str:
    topic = f"dmg-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(timeout=15)
    return topic


def produce_batches(bootstrap: str, topic: str, count: int, value_size: int) -> None:
    """``count`` batches of 10 records each (one flush per batch, so batches stay apart)."""
    p = producer(bootstrap, acks="all", **{"linger.ms": 0})
    for b in range(count):
        for i in range(10):
            p.produce(topic, value=bytes([b % 251]) * value_size, partition=0)
        assert p.flush(20) == 0


def fetch(bootstrap: str, topic: str, offset: int) -> tuple[int, list[tuple[int, int]]]:
    s = kw.connect(bootstrap, timeout=10)
    try:
        body = kw.fetch_v4_body(topic, 0, offset, max_bytes=50_000_000, partition_max_bytes=50_000_000)
        s.sendall(kw.request(kw.FETCH, 4, 1, body))
        _, response = kw.read_response(s)
        error, records = kw.fetch_v4_partition(response)
        return error, kw.batch_offsets(records)
    finally:
        s.close()


def test_a_broken_offset_sequence_in_a_sealed_segment_is_reported_never_served(broker):
    topic = make_topic(broker.bootstrap, **{"segment.bytes": "1048576"})
    produce_batches(broker.bootstrap, topic, 60, 5_000)  # ~3 MB: three segments or more
    broker.stop()
    segments = sorted((broker.data_dir / f"{topic}-0").glob("*.log"))
    assert len(segments) >= 3, segments
    batches = batches_in(segments[0])
    pos, _, base = batches[len(batches) // 2]
    data = bytearray(segments[0].read_bytes())
    data[pos:pos + 8] = struct.pack(">q", base + 50)  # outside the CRC
    segments[0].write_bytes(bytes(data))
    broker.start()

    # From the start: contiguous batches up to the damage, never past it.
    error, got = fetch(broker.bootstrap, topic, 0)
    assert error == 0 and got, (error, got)
    assert got[0][0] == 0
    for (_, last), (next_base, _) in zip(got, got[1:]):
        assert next_base == last + 1, got
    assert got[-1][1] < base, f"served past the damaged batch at offset {base}: {got[-1]}"
    # At the damage: an error, with the damage in the broker's log.
    error, got = fetch(broker.bootstrap, topic, base)
    assert error == KAFKA_STORAGE_ERROR and not got, (error, got)
    assert "offsets must be contiguous" in broker.stderr_text()


def test_damage_followed_by_valid_batches_refuses_to_start_unless_truncate_is_chosen(broker):
    topic = make_topic(broker.bootstrap)
    produce_batches(broker.bootstrap, topic, 20, 500)
    broker.stop()
    (segment,) = sorted((broker.data_dir / f"{topic}-0").glob("*.log"))
    batches = batches_in(segment)
    assert len(batches) >= 10, len(batches)
    pos, size, base = batches[len(batches) // 2]
    data = bytearray(segment.read_bytes())
    data[pos + size - 20] ^= 0xFF  # inside the records: the CRC fails
    segment.write_bytes(bytes(data))

    refused = subprocess.run(broker.argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20)
    assert refused.returncode != 0, "started over a damaged segment, dropping the batches after it"
    assert str(segment) in refused.stderr and f"at byte {pos}" in refused.stderr, refused.stderr
    assert "log.recovery.mode" in refused.stderr, refused.stderr
    assert segment.read_bytes() == bytes(data), "the segment was changed"

    broker.extra_args += ["--set", "log.recovery.mode=truncate"]
    broker.start()
    error, got = fetch(broker.bootstrap, topic, 0)
    assert error == 0 and got[-1][1] == base - 1, got
    assert "log.recovery.mode = truncate" in broker.stderr_text()
