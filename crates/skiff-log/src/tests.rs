//! Behaviour tests of the partition log on real files.

use std::fs::{self, OpenOptions};
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use skiff_records::{RecordBatch, RecordBatchBuilder, RecordBatches, TimestampType};

use crate::*;

fn batch(records: usize, timestamp: i64, value_len: usize) -> Bytes {
    let mut builder = RecordBatchBuilder::new().producer(7, 0, 0);
    for i in 0..records {
        let value = vec![b'x'; value_len];
        builder
            .append(
                timestamp + i as i64,
                Some(format!("k{i}").as_bytes()),
                Some(&value),
                &[],
            )
            .unwrap();
    }
    builder.build().unwrap().into_bytes()
}

fn config() -> LogConfig {
    LogConfig {
        flush: FlushPolicy::Never,
        retention_ms: None,
        segment_ms: None,
        ..LogConfig::default()
    }
}

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        ..config()
    }
}

fn batches_of(bytes: Bytes) -> Vec<RecordBatch> {
    RecordBatches::new(bytes)
        .collect::<skiff_records::Result<_>>()
        .unwrap()
}

fn segment_file(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == suffix))
        .collect();
    files.sort();
    files
}

#[test]
fn append_then_read_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), config()).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));

    let first = log.append(batch(3, 1_000, 10), 5_000).unwrap();
    assert_eq!((first.base_offset, first.last_offset), (0, 2));
    assert_eq!(first.log_append_time, -1);
    assert_eq!(first.max_timestamp, 1_002);
    let second = log.append(batch(2, 2_000, 10), 5_001).unwrap();
    assert_eq!((second.base_offset, second.last_offset), (3, 4));
    assert_eq!(log.log_end_offset(), 5);

    let all = batches_of(log.read(0, 1 << 20).unwrap().records);
    assert_eq!(
        all.iter().map(RecordBatch::base_offset).collect::<Vec<_>>(),
        [0, 3]
    );
    let offsets: Vec<i64> = all
        .iter()
        .flat_map(|b| b.records().unwrap().map(|r| r.unwrap().offset))
        .collect();
    assert_eq!(offsets, [0, 1, 2, 3, 4]);

    // Mid-batch: the containing batch is returned whole.
    let mid = batches_of(log.read(1, 1 << 20).unwrap().records);
    assert_eq!(mid[0].base_offset(), 0);
    // max_bytes below one batch still yields exactly one whole batch (KIP-74).
    let one = batches_of(log.read(0, 1).unwrap().records);
    assert_eq!(one.len(), 1);
    // At the end: empty; past either end: out of range.
    assert!(log.read(5, 100).unwrap().records.is_empty());
    assert!(matches!(
        log.read(6, 100),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(matches!(
        log.read(-1, 100),
        Err(LogError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn multi_batch_append_and_rejections_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(
        dir.path(),
        LogConfig {
            max_message_bytes: 500,
            ..config()
        },
    )
    .unwrap();
    let mut set = BytesMut::new();
    set.extend_from_slice(&batch(2, 10, 5));
    set.extend_from_slice(&batch(3, 20, 5));
    let info = log.append(set.freeze(), 0).unwrap();
    assert_eq!(
        (info.base_offset, info.last_offset, info.batch_count),
        (0, 4, 2)
    );

    let mut corrupt = batch(1, 30, 5).to_vec();
    *corrupt.last_mut().unwrap() ^= 0xff;
    let mut set = BytesMut::new();
    set.extend_from_slice(&batch(1, 30, 5));
    set.extend_from_slice(&corrupt);
    assert!(matches!(
        log.append(set.freeze(), 0),
        Err(LogError::InvalidRecords(
            skiff_records::RecordsError::CrcMismatch { .. }
        ))
    ));
    let mut partial = batch(1, 30, 5);
    partial.truncate(partial.len() - 1);
    assert!(matches!(
        log.append(partial, 0),
        Err(LogError::InvalidRecords(
            skiff_records::RecordsError::PartialBatch { .. }
        ))
    ));
    assert!(matches!(
        log.append(batch(1, 30, 600), 0),
        Err(LogError::MessageTooLarge { .. })
    ));
    assert!(log.append(Bytes::new(), 0).is_err());
    assert_eq!(log.log_end_offset(), 5);
    assert_eq!(batches_of(log.read(0, 1 << 20).unwrap().records).len(), 2);
}

#[test]
fn a_set_of_more_batches_than_one_pwritev_takes_is_stored_exactly_with_rewritten_prefixes() {
    // 1,500 batches are 3,000 slices (prefix + body each): more than Linux's 1,024 per call.
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), config()).unwrap();
    log.append(batch(3, 1, 4), 0).unwrap();
    log.set_leader_epoch(Some(9));
    let mut set = BytesMut::new();
    for i in 0..1_500 {
        set.extend_from_slice(&batch(1 + i % 3, i as i64, i % 17));
    }
    let sent = set.freeze();
    let info = log.append(sent.clone(), 0).unwrap();
    assert_eq!((info.base_offset, info.batch_count), (3, 1_500));
    assert_eq!(info.size_in_bytes, sent.len());

    let read = log.read(3, usize::MAX).unwrap();
    assert_eq!(
        read.records.len(),
        sent.len(),
        "every byte stored, none extra"
    );
    let stored = batches_of(read.records.clone());
    let produced = batches_of(sent);
    assert_eq!(stored.len(), produced.len());
    let mut next = 3;
    for (stored, produced) in stored.iter().zip(&produced) {
        assert_eq!(stored.base_offset(), next);
        assert_eq!(stored.partition_leader_epoch(), 9);
        assert_eq!(stored.crc(), produced.crc(), "CRC-covered bytes untouched");
        assert_eq!(stored.as_bytes()[16..], produced.as_bytes()[16..]);
        next = stored.next_offset();
    }
    assert_eq!(next, info.last_offset + 1);
}

#[test]
fn log_append_time_rewrites_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(
        dir.path(),
        LogConfig {
            timestamp_policy: TimestampPolicy::LogAppendTime,
            ..config()
        },
    )
    .unwrap();
    log.set_leader_epoch(Some(4));
    let info = log.append(batch(2, 1, 5), 777).unwrap();
    assert_eq!((info.log_append_time, info.max_timestamp), (777, 777));
    let stored = batches_of(log.read(0, 1 << 20).unwrap().records);
    assert_eq!(stored[0].timestamp_type(), TimestampType::LogAppendTime);
    assert_eq!(stored[0].partition_leader_epoch(), 4);
    assert!(
        stored[0]
            .records()
            .unwrap()
            .all(|r| r.unwrap().timestamp == 777)
    );
}

/// Appends `count` single-record batches with timestamps 1000, 1010, ...
fn fill(log: &mut PartitionLog, count: usize) {
    for i in 0..count {
        log.append(batch(1, 1_000 + 10 * i as i64, 100), 0).unwrap();
    }
}

#[test]
fn rolls_segments_and_finds_every_offset_through_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), small_segments()).unwrap();
    fill(&mut log, 60);
    assert!(log.segment_count() > 3, "{} segments", log.segment_count());
    assert!(
        segment_file(dir.path(), "index")
            .iter()
            .any(|p| fs::metadata(p).unwrap().len() > 0)
    );
    for offset in 0..60 {
        let read = batches_of(log.read(offset, 1).unwrap().records);
        assert_eq!(read[0].base_offset(), offset);
    }
    // A large read stays within one segment and ends on a batch boundary.
    let read = log.read(0, 1 << 20).unwrap().records;
    assert!(read.len() as u64 <= small_segments().segment_bytes);
    assert!(!batches_of(read).is_empty());
    // Rolled segments were synced on roll.
    assert!(log.durable_offset() > 0);

    // The header walk visits every batch from the one holding the offset, across segments.
    for from in [-5, 0, 17, 59, 60] {
        let mut seen = Vec::new();
        log.for_each_batch_header(from, |h| seen.push((h.base_offset, h.max_timestamp)))
            .unwrap();
        let expected: Vec<(i64, i64)> = (from.max(0)..60).map(|o| (o, 1_000 + 10 * o)).collect();
        assert_eq!(seen, expected, "from {from}");
    }
}

#[test]
fn the_header_of_the_batch_holding_an_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), small_segments()).unwrap();
    fill(&mut log, 30);
    // A batch of three records at offsets 30-32: every one of them finds its header.
    log.append(batch(3, 5_000, 10), 0).unwrap();
    for offset in [0, 17, 29] {
        let header = log.batch_header_at(offset).unwrap().expect("a header");
        assert_eq!(
            (header.base_offset, header.base_timestamp),
            (offset, 1_000 + 10 * offset)
        );
    }
    for offset in 30..33 {
        let header = log.batch_header_at(offset).unwrap().expect("a header");
        assert_eq!((header.base_offset, header.base_timestamp), (30, 5_000));
    }
    // Nothing at the end, past it, or before the start.
    assert_eq!(log.batch_header_at(33).unwrap(), None);
    assert_eq!(log.batch_header_at(99).unwrap(), None);
    log.delete_records_before(10).unwrap();
    assert_eq!(log.batch_header_at(9).unwrap(), None);
    assert!(log.batch_header_at(10).unwrap().is_some());
}

#[test]
fn reopen_keeps_data_and_rebuilds_missing_or_bad_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let mut log = PartitionLog::open(dir.path(), small_segments()).unwrap();
        fill(&mut log, 40);
        (0..40)
            .map(|o| log.read(o, 1).unwrap().records)
            .collect::<Vec<_>>()
    };
    let indexes = segment_file(dir.path(), "index");
    fs::remove_file(&indexes[0]).unwrap();
    fs::write(&indexes[1], [0xff; 13]).unwrap();
    fs::remove_file(&segment_file(dir.path(), "timeindex")[0]).unwrap();

    let mut log = PartitionLog::open(dir.path(), small_segments()).unwrap();
    assert_eq!(log.log_end_offset(), 40);
    assert_eq!(log.durable_offset(), 40);
    for (offset, expected) in before.iter().enumerate() {
        assert_eq!(&log.read(offset as i64, 1).unwrap().records, expected);
    }
    assert!(fs::metadata(&indexes[0]).unwrap().len() > 0);
    assert_eq!(fs::metadata(&indexes[1]).unwrap().len() % 8, 0);
    assert_eq!(log.append(batch(1, 5, 5), 0).unwrap().base_offset, 40);
    assert_eq!(
        log.offset_for_timestamp(1_005).unwrap(),
        Some(TimestampOffset {
            offset: 1,
            timestamp: 1_010
        })
    );
}

fn last_segment(dir: &Path) -> std::path::PathBuf {
    segment_file(dir, "log").pop().unwrap()
}

/// `n` batches of 2 records into a new log in `dir`; their sizes.
fn write_batches(dir: &Path, n: i64) -> Vec<usize> {
    let mut log = PartitionLog::open(dir, config()).unwrap();
    (0..n)
        .map(|i| log.append(batch(2, i, 50), 0).unwrap().size_in_bytes)
        .collect()
}

/// 60 one-record batches over small segments in `dir`: the batch size and the first segment.
fn fill_small_segments(dir: &Path) -> (usize, std::path::PathBuf) {
    let mut log = PartitionLog::open(dir, small_segments()).unwrap();
    fill(&mut log, 60);
    let size = log.read(0, 1).unwrap().records.len();
    (size, segment_file(dir, "log").remove(0))
}

#[test]
fn torn_tail_is_truncated_and_appends_continue() {
    for damage in ["cut", "garbage", "flip"] {
        let dir = tempfile::tempdir().unwrap();
        let sizes = write_batches(dir.path(), 5);
        let path = last_segment(dir.path());
        let intact: u64 = sizes[..4].iter().sum::<usize>() as u64;
        match damage {
            "cut" => OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(intact + 30)
                .unwrap(),
            "garbage" => {
                let mut bytes = fs::read(&path).unwrap();
                bytes.truncate(intact as usize);
                bytes.extend_from_slice(&[0x5a; 100]);
                fs::write(&path, bytes).unwrap();
            }
            _ => {
                let mut bytes = fs::read(&path).unwrap();
                bytes[intact as usize + 70] ^= 0x01;
                fs::write(&path, bytes).unwrap();
            }
        }
        let strict = PartitionLog::open(
            dir.path(),
            LogConfig {
                recovery: RecoveryMode::Strict,
                ..config()
            },
        );
        assert!(matches!(strict, Err(LogError::Corrupt { .. })), "{damage}");

        let mut log = PartitionLog::open(dir.path(), config()).unwrap();
        assert_eq!(log.log_end_offset(), 8, "{damage}");
        assert_eq!(fs::metadata(&path).unwrap().len(), intact);
        assert_eq!(batches_of(log.read(0, 1 << 20).unwrap().records).len(), 4);
        assert_eq!(log.append(batch(1, 0, 5), 0).unwrap().base_offset, 8);
        drop(log);
        let log = PartitionLog::open(dir.path(), config()).unwrap();
        assert_eq!(log.log_end_offset(), 9);
    }
}

#[test]
fn damage_followed_by_valid_batches_is_refused_unless_truncate_is_chosen() {
    let dir = tempfile::tempdir().unwrap();
    let sizes = write_batches(dir.path(), 8);
    let path = last_segment(dir.path());
    // A flipped byte inside the fourth batch's records: its CRC fails, four valid batches follow.
    let damaged_at: u64 = sizes[..3].iter().sum::<usize>() as u64;
    let mut bytes = fs::read(&path).unwrap();
    bytes[damaged_at as usize + 70] ^= 0x01;
    fs::write(&path, &bytes).unwrap();

    let refused = PartitionLog::open(dir.path(), config());
    match refused {
        Err(LogError::Corrupt {
            path: named,
            position,
            reason,
        }) => {
            assert_eq!(named, path);
            assert_eq!(position, damaged_at);
            assert!(reason.contains("not a torn tail"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(fs::read(&path).unwrap(), bytes, "the files were changed");

    // The operator's choice: cut at the damage, losing the four batches after it.
    let log = PartitionLog::open(
        dir.path(),
        LogConfig {
            recovery: RecoveryMode::Truncate,
            ..config()
        },
    )
    .unwrap();
    assert_eq!(log.log_end_offset(), 6);
    assert_eq!(fs::metadata(&path).unwrap().len(), damaged_at);
}

#[test]
fn a_broken_offset_sequence_in_a_sealed_segment_is_reported_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let (batch_size, first) = fill_small_segments(dir.path());
    let per_segment = fs::metadata(&first).unwrap().len() as usize / batch_size;
    assert!(
        per_segment >= 5,
        "{per_segment} batches in the first segment"
    );
    // A byte flipped in the base offset (outside the CRC) of the third batch: 2 becomes 50.
    let mut bytes = fs::read(&first).unwrap();
    let at = 2 * batch_size;
    bytes[at..at + 8].copy_from_slice(&50i64.to_be_bytes());
    fs::write(&first, bytes).unwrap();

    let log = PartitionLog::open(dir.path(), small_segments()).unwrap();
    // Every read either fails as corrupt or returns contiguous batches that hold the offset.
    let mut refused = 0;
    for offset in 0..60 {
        match log.read(offset, 1 << 20) {
            Ok(read) => {
                let batches = batches_of(read.records);
                let first = batches.first().map(|b| b.base_offset());
                assert!(
                    first.is_some_and(|f| f <= offset),
                    "offset {offset}: {first:?}"
                );
                for pair in batches.windows(2) {
                    assert_eq!(pair[1].base_offset(), pair[0].base_offset() + 1);
                }
            }
            Err(LogError::Corrupt { position, .. }) => {
                assert_eq!(position, at as u64);
                refused += 1;
            }
            Err(other) => panic!("offset {offset}: {other}"),
        }
    }
    assert!(refused >= 1, "the damaged batch was never reported");
    // A read from the start stops before the damage.
    assert_eq!(batches_of(log.read(0, 1 << 20).unwrap().records).len(), 2);
    drop(log);
    // Without its indexes, the segment is rebuilt at open, and the damage refuses the open.
    for index in segment_file(dir.path(), "index") {
        fs::remove_file(index).unwrap();
    }
    assert!(matches!(
        PartitionLog::open(dir.path(), small_segments()),
        Err(LogError::Corrupt { .. })
    ));
}

#[test]
fn a_sealed_segment_whose_end_does_not_meet_the_next_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (batch_size, first) = fill_small_segments(dir.path());
    // The last batch of the first segment claims an offset past the next segment's base.
    let mut bytes = fs::read(&first).unwrap();
    let at = bytes.len() - batch_size;
    let claimed = i64::from_be_bytes(bytes[at..at + 8].try_into().unwrap()) + 7;
    bytes[at..at + 8].copy_from_slice(&claimed.to_be_bytes());
    fs::write(&first, bytes).unwrap();
    let opened = PartitionLog::open(dir.path(), small_segments());
    assert!(
        matches!(opened, Err(LogError::Corrupt { .. })),
        "{opened:?}"
    );
}

#[test]
fn retention_by_size_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(
        dir.path(),
        LogConfig {
            retention_bytes: Some(4096),
            ..small_segments()
        },
    )
    .unwrap();
    fill(&mut log, 60);
    let segments = log.segment_count();
    let outcome = log.apply_retention(0).unwrap();
    assert!(outcome.deleted_segments > 0);
    assert_eq!(log.segment_count(), segments - outcome.deleted_segments);
    assert!(log.size_in_bytes() <= 4096 + 2048);
    assert!(log.size_in_bytes() > 4096 - 2048);
    let start = log.log_start_offset();
    assert!(start > 0);
    assert!(matches!(
        log.read(start - 1, 1),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_eq!(
        batches_of(log.read(start, 1).unwrap().records)[0].base_offset(),
        start
    );
    drop(log);

    // Time: timestamps are 1000 + 10 * offset; keep what is newer than now - retention.
    let mut log = PartitionLog::open(
        dir.path(),
        LogConfig {
            retention_ms: Some(100),
            ..small_segments()
        },
    )
    .unwrap();
    assert_eq!(log.log_start_offset(), start);
    let now = 1_000 + 10 * 59;
    log.apply_retention(now).unwrap();
    let start = log.log_start_offset();
    // Every remaining sealed segment holds a record newer than the cutoff, the deleted ones not.
    assert!(1_000 + 10 * (start - 1) < now - 100, "start {start}");
    assert!(log.segment_count() >= 1);
    // Everything old: only the active segment survives.
    log.apply_retention(i64::MAX).unwrap();
    assert_eq!(log.segment_count(), 1);
    assert!(
        !log.read(log.log_start_offset(), 1 << 20)
            .unwrap()
            .records
            .is_empty()
    );
}

#[test]
fn delete_records_moves_start_and_deletes_covered_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), small_segments()).unwrap();
    fill(&mut log, 40);
    let segments = log.segment_count();
    assert_eq!(log.delete_records_before(25).unwrap(), 25);
    assert!(log.segment_count() < segments);
    assert_eq!(log.delete_records_before(10).unwrap(), 25);
    assert!(matches!(
        log.delete_records_before(41),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(matches!(
        log.read(24, 1),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    drop(log);
    let mut log = PartitionLog::open(dir.path(), small_segments()).unwrap();
    assert_eq!(log.log_start_offset(), 25);
    assert_eq!(
        batches_of(log.read(25, 1).unwrap().records)[0].base_offset(),
        25
    );
    // Timestamp lookups ignore deleted records.
    assert_eq!(log.offset_for_timestamp(0).unwrap().unwrap().offset, 25);
    // Deleting up to the end leaves an empty readable log.
    log.delete_records_before(40).unwrap();
    assert!(log.read(40, 10).unwrap().records.is_empty());
}

#[test]
fn offset_for_timestamp_and_max_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), small_segments()).unwrap();
    assert_eq!(log.max_timestamp_offset().unwrap(), None);
    // Batches of 3 records: timestamps t, t+1, t+2 with t = 100 * batch index.
    for i in 0..30 {
        log.append(batch(3, 100 * i, 60), 0).unwrap();
    }
    // An older-timestamped batch after the max.
    log.append(batch(1, 50, 5), 0).unwrap();
    let find = |ts| log.offset_for_timestamp(ts).unwrap();
    assert_eq!(
        find(0),
        Some(TimestampOffset {
            offset: 0,
            timestamp: 0
        })
    );
    assert_eq!(
        find(1),
        Some(TimestampOffset {
            offset: 1,
            timestamp: 1
        })
    );
    assert_eq!(
        find(3),
        Some(TimestampOffset {
            offset: 3,
            timestamp: 100
        })
    );
    assert_eq!(
        find(1_502),
        Some(TimestampOffset {
            offset: 47,
            timestamp: 1_502
        })
    );
    assert_eq!(
        find(2_902),
        Some(TimestampOffset {
            offset: 89,
            timestamp: 2_902
        })
    );
    assert_eq!(find(2_903), None);
    assert_eq!(
        log.max_timestamp_offset().unwrap(),
        Some(TimestampOffset {
            offset: 89,
            timestamp: 2_902
        })
    );
    // Same answers after reopening (sealed segments answer from their time index).
    drop(log);
    let log = PartitionLog::open(dir.path(), small_segments()).unwrap();
    assert_eq!(
        log.offset_for_timestamp(1_502).unwrap().map(|t| t.offset),
        Some(47)
    );
    assert_eq!(
        log.max_timestamp_offset().unwrap().map(|t| t.offset),
        Some(89)
    );
}

#[test]
fn flush_interval_and_explicit_sync() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(
        dir.path(),
        LogConfig {
            flush: FlushPolicy::Interval { flush_ms: 100 },
            ..config()
        },
    )
    .unwrap();
    assert!(!log.flush_due(1_000));
    log.append(batch(1, 0, 5), 1_000).unwrap();
    assert_eq!(log.durable_offset(), 0);
    assert_eq!(log.unflushed_since_ms(), Some(1_000));
    assert!(!log.flush_due(1_050));
    assert!(log.flush_due(1_100));
    let target = log.sync_target().unwrap().unwrap();
    assert_eq!(target.end_offset(), 1);
    target.sync().unwrap();
    log.mark_durable(target.end_offset());
    assert_eq!(log.durable_offset(), 1);
    assert!(!log.flush_due(5_000));
    assert!(log.sync_target().unwrap().is_none());
    log.append(batch(1, 0, 5), 2_000).unwrap();
    log.flush().unwrap();
    assert_eq!(log.durable_offset(), 2);
}

#[test]
fn delete_removes_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("topic-0");
    let mut log = PartitionLog::open(&path, config()).unwrap();
    log.append(batch(1, 0, 5), 0).unwrap();
    log.delete().unwrap();
    assert!(!path.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_commit_covers_many_appends_with_few_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(
        PartitionLog::open(
            dir.path(),
            LogConfig {
                flush: FlushPolicy::Always,
                ..config()
            },
        )
        .unwrap(),
    ));
    let committer = Arc::new(GroupCommitter::spawn(Arc::clone(&log)));
    const TASKS: usize = 32;
    const APPENDS: usize = 20;
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let log = Arc::clone(&log);
        let committer = Arc::clone(&committer);
        handles.push(tokio::spawn(async move {
            for _ in 0..APPENDS {
                let info = log.lock().unwrap().append(batch(1, 0, 100), 0).unwrap();
                committer.wait_durable(info.last_offset + 1).await.unwrap();
                assert!(log.lock().unwrap().durable_offset() > info.last_offset);
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    let appends = (TASKS * APPENDS) as u64;
    let syncs = committer.sync_count();
    println!("group commit: {appends} appends, {syncs} fdatasyncs");
    assert_eq!(log.lock().unwrap().durable_offset(), appends as i64);
    assert!(syncs * 2 <= appends, "{syncs} syncs for {appends} appends");
    // Already durable: returns without a sync.
    committer.wait_durable(appends as i64).await.unwrap();
}

/// A log whose next `sync_target` calls fail as if descriptors had run out (EMFILE).
struct Flaky {
    log: Mutex<PartitionLog>,
    failures_left: Mutex<u32>,
}

impl SyncSource for Flaky {
    fn sync_target(&self) -> Result<Option<SyncTarget>> {
        let mut left = self.failures_left.lock().unwrap();
        if *left > 0 {
            *left -= 1;
            return Err(LogError::Io {
                op: "open",
                path: "flaky".into(),
                source: std::io::Error::from_raw_os_error(24),
            });
        }
        self.log.lock().unwrap().sync_target()
    }
    fn mark_durable(&self, end_offset: i64) {
        self.log.lock().unwrap().mark_durable(end_offset);
    }
    fn durable_offset(&self) -> i64 {
        self.log.lock().unwrap().durable_offset()
    }
}

#[tokio::test]
async fn a_transient_failure_fails_the_waiters_of_its_round_not_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = PartitionLog::open(
        dir.path(),
        LogConfig {
            flush: FlushPolicy::Always,
            ..config()
        },
    )
    .unwrap();
    let flaky = Arc::new(Flaky {
        log: Mutex::new(log),
        failures_left: Mutex::new(1),
    });
    let committer = GroupCommitter::spawn(Arc::clone(&flaky));
    let first = flaky
        .log
        .lock()
        .unwrap()
        .append(batch(1, 0, 10), 0)
        .unwrap();
    let failed = committer.wait_durable(first.last_offset + 1).await;
    assert!(
        matches!(failed, Err(LogError::TransientSync(_))),
        "{failed:?}"
    );
    assert!(!committer.is_offline());
    // The descriptors are back: the next append and the first become durable.
    let second = flaky
        .log
        .lock()
        .unwrap()
        .append(batch(1, 0, 10), 0)
        .unwrap();
    committer
        .wait_durable(second.last_offset + 1)
        .await
        .unwrap();
    assert_eq!(flaky.durable_offset(), second.last_offset + 1);
    assert!(!committer.is_offline());
}

#[test]
fn many_logs_share_a_small_file_cache() {
    let dir = tempfile::tempdir().unwrap();
    let files = FileCacheHandle(FileCache::new(4));
    let config = || LogConfig {
        files: files.clone(),
        ..small_segments()
    };
    let mut logs: Vec<PartitionLog> = (0..20)
        .map(|i| PartitionLog::open(dir.path().join(format!("p-{i}")), config()).unwrap())
        .collect();
    for round in 0..30 {
        for log in &mut logs {
            log.append(batch(1, round, 100), 0).unwrap();
        }
    }
    assert!(
        files.0.open_files() <= 4,
        "{} segment files open",
        files.0.open_files()
    );
    for log in &mut logs {
        assert!(log.segment_count() > 1);
        for offset in 0..30 {
            let read = batches_of(log.read(offset, 1).unwrap().records);
            assert_eq!(read[0].base_offset(), offset);
        }
        log.flush().unwrap();
    }
    assert!(files.0.open_files() <= 4);
    drop(logs);
    for i in 0..20 {
        let log = PartitionLog::open(dir.path().join(format!("p-{i}")), config()).unwrap();
        assert_eq!(log.log_end_offset(), 30);
    }
}

/// A log whose fdatasync fails (its sync target is /dev/null: EINVAL), as a disk error would.
struct Failing;

impl SyncSource for Failing {
    fn sync_target(&self) -> Result<Option<SyncTarget>> {
        let path = Path::new("/dev/null");
        let file = std::fs::File::open(path).unwrap();
        Ok(Some(SyncTarget::over(file, path, 10)))
    }
    fn mark_durable(&self, _end_offset: i64) {}
    fn durable_offset(&self) -> i64 {
        0
    }
}

#[tokio::test]
async fn a_failed_fdatasync_takes_the_log_offline_for_good() {
    let committer = GroupCommitter::spawn(Arc::new(Failing));
    assert!(!committer.is_offline());
    let first = committer.wait_durable(5).await;
    assert!(matches!(first, Err(LogError::SyncFailed(_))), "{first:?}");
    assert!(committer.is_offline());
    // Every later wait fails too: nothing is durable any more.
    let later = committer.wait_durable(1).await;
    assert!(matches!(later, Err(LogError::SyncFailed(_))), "{later:?}");
}
