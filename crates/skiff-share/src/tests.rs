//! Unit tests, after Kafka's `SharePartitionTest`.

use super::*;

const T0: i64 = 1_000_000;
const LOCK: i64 = 100;
const MEMBER: &str = "member-1";
const OTHER: &str = "member-2";

fn config() -> ShareConfig {
    ShareConfig {
        record_lock_duration_ms: LOCK,
        delivery_count_limit: 5,
        max_record_locks: 200,
    }
}

fn with_limit(limit: i16) -> ShareConfig {
    ShareConfig {
        delivery_count_limit: limit,
        ..config()
    }
}

fn batches(ranges: &[(i64, i64)]) -> Vec<FetchedBatch> {
    ranges
        .iter()
        .map(|&(base_offset, last_offset)| FetchedBatch {
            base_offset,
            last_offset,
        })
        .collect()
}

fn ranges(acquired: &[AcquiredRange]) -> Vec<(i64, i64, i16)> {
    acquired
        .iter()
        .map(|r| (r.first_offset, r.last_offset, r.delivery_count))
        .collect()
}

/// A read from `next_fetch_offset` returning `read`, acquired with `max_records` in `mode`.
fn fetch_with(
    sp: &mut SharePartition,
    member: &str,
    read: &[(i64, i64)],
    skip: &[(i64, i64)],
    max_records: u32,
    mode: AcquireMode,
    now_ms: i64,
) -> Vec<(i64, i64, i16)> {
    let read = batches(read);
    let skip: Vec<OffsetRange> = skip.iter().map(|&(a, b)| OffsetRange::new(a, b)).collect();
    let fetch = Fetch {
        fetch_offset: sp.next_fetch_offset(),
        batches: &read,
        skip: &skip,
    };
    ranges(&sp.acquire(member, &fetch, max_records, mode, now_ms))
}

/// A read from `next_fetch_offset` returning `read`, acquired by `member` at T0 with a large
/// record limit.
fn fetch(sp: &mut SharePartition, member: &str, read: &[(i64, i64)]) -> Vec<(i64, i64, i16)> {
    fetch_with(sp, member, read, &[], 500, AcquireMode::BatchOptimized, T0)
}

fn ack(
    sp: &mut SharePartition,
    member: &str,
    first: i64,
    last: i64,
    ack: AckType,
) -> Result<(), ShareError> {
    sp.acknowledge(member, &[AckBatch::uniform(first, last, ack)], T0 + 1)
}

fn acquired(member: &str, deadline_ms: i64) -> RecordState {
    RecordState::Acquired {
        member: member.to_string(),
        deadline_ms,
    }
}

/// The window as `(first, last, state, delivery count)`.
fn window(sp: &SharePartition) -> Vec<(i64, i64, RecordState, i16)> {
    sp.window()
        .into_iter()
        .map(|e| (e.first_offset, e.last_offset, e.state, e.delivery_count))
        .collect()
}

fn batch(first: i64, last: i64, delivery_state: DeliveryState, count: i16) -> StateBatch {
    StateBatch {
        first_offset: first,
        last_offset: last,
        delivery_state,
        delivery_count: count,
    }
}

use DeliveryState::{Acknowledged as Acked, Archived, Available};
use RecordState::{Acknowledged as AckedState, Archived as ArchivedState, Available as Free};

// ---- Acquisition ----

#[test]
fn a_new_share_partition_is_empty_at_its_start_offset() {
    let sp = SharePartition::new(ShareConfig::default(), 42);
    assert_eq!(sp.start_offset(), 42);
    assert_eq!(sp.end_offset(), 42);
    assert_eq!(sp.next_fetch_offset(), 42);
    assert_eq!(sp.state_epoch(), 0);
    assert_eq!(sp.counts(), WindowCounts::default());
    assert!(sp.can_acquire());
    assert_eq!(sp.next_deadline(), None);
    assert_eq!(SharePartition::new(config(), -1).start_offset(), 0);
    let defaults = ShareConfig::default();
    assert_eq!(defaults.record_lock_duration_ms, 30_000);
    assert_eq!(defaults.delivery_count_limit, 5);
    assert_eq!(defaults.max_record_locks, 2000);
}

#[test]
fn acquire_single_batch() {
    let mut sp = SharePartition::new(config(), 0);
    assert_eq!(fetch(&mut sp, MEMBER, &[(0, 4)]), vec![(0, 4, 1)]);
    assert_eq!(window(&sp), vec![(0, 4, acquired(MEMBER, T0 + LOCK), 1)]);
    assert_eq!((sp.start_offset(), sp.end_offset()), (0, 5));
    assert_eq!(sp.next_fetch_offset(), 5);
    assert_eq!(sp.next_deadline(), Some(T0 + LOCK));
    let counts = sp.counts();
    assert_eq!((counts.in_flight, counts.acquired), (5, 5));
}

#[test]
fn acquire_multiple_batches_in_one_read() {
    let mut sp = SharePartition::new(config(), 0);
    assert_eq!(
        fetch(&mut sp, MEMBER, &[(0, 4), (5, 9), (10, 14)]),
        vec![(0, 14, 1)]
    );
    assert_eq!(sp.run_count(), 1);
    assert_eq!(sp.end_offset(), 15);
}

#[test]
fn acquire_the_same_batch_again_hands_out_nothing() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 4)]);
    let read = batches(&[(0, 4)]);
    let again = Fetch {
        fetch_offset: 0,
        batches: &read,
        skip: &[],
    };
    assert!(
        sp.acquire(OTHER, &again, 500, AcquireMode::BatchOptimized, T0)
            .is_empty()
    );
    assert_eq!(sp.acquired_ranges().len(), 1);
}

#[test]
fn acquire_with_nothing_read_or_no_record_wanted_hands_out_nothing() {
    let mut sp = SharePartition::new(config(), 0);
    assert!(fetch(&mut sp, MEMBER, &[]).is_empty());
    assert!(
        fetch_with(
            &mut sp,
            MEMBER,
            &[(0, 4)],
            &[],
            0,
            AcquireMode::RecordLimit,
            T0
        )
        .is_empty()
    );
    assert_eq!(sp.end_offset(), 0);
}

#[test]
fn malformed_batches_end_the_read() {
    let mut sp = SharePartition::new(config(), 0);
    // 5-9 is fine; 3-4 goes backwards, so it and everything after are ignored.
    assert_eq!(
        fetch(&mut sp, MEMBER, &[(0, 4), (5, 9), (3, 4), (10, 14)]),
        vec![(0, 9, 1)]
    );
    let mut sp = SharePartition::new(config(), 0);
    assert!(fetch(&mut sp, MEMBER, &[(4, 0)]).is_empty());
    assert!(fetch(&mut sp, MEMBER, &[(-3, 2)]).is_empty());
    assert!(fetch(&mut sp, MEMBER, &[(0, i64::MAX)]).is_empty());
}

#[test]
fn batch_optimized_rounds_the_record_limit_up_to_the_batch_end() {
    let mut sp = SharePartition::new(config(), 0);
    let got = fetch_with(
        &mut sp,
        MEMBER,
        &[(0, 9), (10, 19)],
        &[],
        5,
        AcquireMode::BatchOptimized,
        T0,
    );
    assert_eq!(got, vec![(0, 9, 1)]);
    assert_eq!(sp.end_offset(), 10);
    // The limit reached exactly at a batch end stops there too.
    let got = fetch_with(
        &mut sp,
        MEMBER,
        &[(10, 19), (20, 29)],
        &[],
        10,
        AcquireMode::BatchOptimized,
        T0,
    );
    assert_eq!(got, vec![(10, 19, 1)]);
}

#[test]
fn record_limit_acquires_at_most_the_limit() {
    let mut sp = SharePartition::new(config(), 0);
    let got = fetch_with(
        &mut sp,
        MEMBER,
        &[(0, 9), (10, 19)],
        &[],
        5,
        AcquireMode::RecordLimit,
        T0,
    );
    assert_eq!(got, vec![(0, 4, 1)]);
    assert_eq!(sp.end_offset(), 5);
    assert_eq!(sp.next_fetch_offset(), 5);
    // The next read is from 5, still inside the batch 0-9.
    let got = fetch_with(
        &mut sp,
        OTHER,
        &[(0, 9), (10, 19)],
        &[],
        7,
        AcquireMode::RecordLimit,
        T0,
    );
    assert_eq!(got, vec![(5, 11, 1)]);
    assert_eq!(
        sp.acquired_ranges().get(OTHER),
        Some(&vec![OffsetRange::new(5, 11)])
    );
}

#[test]
fn record_limit_counts_available_records_in_the_window_too() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 9)]);
    ack(&mut sp, MEMBER, 0, 9, AckType::Release).unwrap();
    let got = fetch_with(
        &mut sp,
        OTHER,
        &[(0, 9), (10, 19)],
        &[],
        4,
        AcquireMode::RecordLimit,
        T0,
    );
    assert_eq!(got, vec![(0, 3, 2)]);
    // Batch-optimized takes the rest of the batch 0-9, then stops.
    let got = fetch_with(
        &mut sp,
        OTHER,
        &[(0, 9), (10, 19)],
        &[],
        1,
        AcquireMode::BatchOptimized,
        T0,
    );
    assert_eq!(got, vec![(4, 9, 2)]);
    assert_eq!(sp.end_offset(), 10);
}

#[test]
fn acquire_beyond_the_record_lock_limit() {
    let config = ShareConfig {
        max_record_locks: 10,
        ..config()
    };
    let mut sp = SharePartition::new(config, 0);
    // Room for 10: the batches 0-4 and 5-9 fit, 10-14 does not.
    assert_eq!(
        fetch(&mut sp, MEMBER, &[(0, 4), (5, 9), (10, 14)]),
        vec![(0, 9, 1)]
    );
    assert!(!sp.can_acquire());
    assert!(fetch(&mut sp, OTHER, &[(10, 14)]).is_empty());
    assert_eq!(sp.end_offset(), 10);
    // Acknowledging 0-4 moves the start offset and makes room.
    ack(&mut sp, MEMBER, 0, 4, AckType::Accept).unwrap();
    assert_eq!(sp.start_offset(), 5);
    assert!(sp.can_acquire());
    assert_eq!(fetch(&mut sp, OTHER, &[(10, 14)]), vec![(10, 14, 1)]);

    // Batch-optimized goes past the limit to finish the batch it was reached in; record-limit
    // stops at it.
    let config = ShareConfig {
        max_record_locks: 7,
        ..self::config()
    };
    let mut sp = SharePartition::new(config, 0);
    assert_eq!(fetch(&mut sp, MEMBER, &[(0, 4), (5, 9)]), vec![(0, 9, 1)]);
    let mut sp = SharePartition::new(config, 0);
    let got = fetch_with(
        &mut sp,
        MEMBER,
        &[(0, 4), (5, 9)],
        &[],
        500,
        AcquireMode::RecordLimit,
        T0,
    );
    assert_eq!(got, vec![(0, 6, 1)]);
}

#[test]
fn records_released_in_a_full_window_can_still_be_acquired() {
    let config = ShareConfig {
        max_record_locks: 10,
        ..config()
    };
    let mut sp = SharePartition::new(config, 0);
    fetch(&mut sp, MEMBER, &[(0, 9)]);
    ack(&mut sp, MEMBER, 3, 4, AckType::Release).unwrap();
    assert!(sp.can_acquire());
    assert_eq!(sp.next_fetch_offset(), 3);
    assert_eq!(fetch(&mut sp, OTHER, &[(0, 9), (10, 19)]), vec![(3, 4, 2)]);
    assert_eq!(sp.end_offset(), 10);
}

#[test]
fn finishing_a_batch_stops_at_the_end_of_a_full_window() {
    for (locks, expected) in [(5, vec![(3, 4, 2)]), (200, vec![(3, 4, 2), (5, 9, 1)])] {
        let config = ShareConfig {
            max_record_locks: locks,
            ..config()
        };
        let mut sp = SharePartition::new(config, 0);
        let got = fetch_with(
            &mut sp,
            MEMBER,
            &[(0, 9)],
            &[],
            5,
            AcquireMode::RecordLimit,
            T0,
        );
        assert_eq!(got, vec![(0, 4, 1)]);
        ack(&mut sp, MEMBER, 3, 4, AckType::Release).unwrap();
        // Batch-optimized finishes the batch 0-9 only if the window has room past its end.
        let got = fetch_with(
            &mut sp,
            OTHER,
            &[(0, 9)],
            &[],
            1,
            AcquireMode::BatchOptimized,
            T0,
        );
        assert_eq!(got, expected, "max record locks {locks}");
    }
}

#[test]
fn skipped_records_are_archived_not_acquired() {
    let mut sp = SharePartition::new(config(), 0);
    // A control record at 4 and an aborted transaction at 7-8.
    let got = fetch_with(
        &mut sp,
        MEMBER,
        &[(0, 3), (4, 4), (5, 9)],
        &[(7, 8), (4, 4)],
        500,
        AcquireMode::BatchOptimized,
        T0,
    );
    assert_eq!(got, vec![(0, 3, 1), (5, 6, 1), (9, 9, 1)]);
    assert_eq!(sp.record(4), Some((ArchivedState, 0)));
    assert_eq!(sp.record(8), Some((ArchivedState, 0)));
    assert_eq!(sp.counts().archived, 3);
    // Skipped records at the start are dropped with the start offset.
    let mut sp = SharePartition::new(config(), 0);
    let got = fetch_with(
        &mut sp,
        MEMBER,
        &[(0, 0), (1, 5)],
        &[(0, 0)],
        500,
        AcquireMode::BatchOptimized,
        T0,
    );
    assert_eq!(got, vec![(1, 5, 1)]);
    assert_eq!(sp.start_offset(), 1);
    // Skipped records do not count against the record limit.
    let mut sp = SharePartition::new(config(), 0);
    let got = fetch_with(
        &mut sp,
        MEMBER,
        &[(0, 9)],
        &[(0, 4)],
        3,
        AcquireMode::RecordLimit,
        T0,
    );
    assert_eq!(got, vec![(5, 7, 1)]);
}

#[test]
fn an_available_record_read_again_in_a_skipped_range_is_archived() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 9)]);
    ack(&mut sp, MEMBER, 0, 9, AckType::Release).unwrap();
    let got = fetch_with(
        &mut sp,
        OTHER,
        &[(0, 9)],
        &[(0, 1)],
        500,
        AcquireMode::BatchOptimized,
        T0,
    );
    assert_eq!(got, vec![(2, 9, 2)]);
    assert_eq!(sp.start_offset(), 2);
}

#[test]
fn offsets_missing_before_the_first_batch_are_archived() {
    // Compaction removed 0-4: the read from 0 starts at 5.
    let mut sp = SharePartition::new(config(), 0);
    assert_eq!(fetch(&mut sp, MEMBER, &[(5, 9)]), vec![(5, 9, 1)]);
    assert_eq!(sp.start_offset(), 5);
    // Offsets missing between two batches of one read are handed out (the client reports gaps).
    assert_eq!(
        fetch(&mut sp, MEMBER, &[(10, 12), (20, 22)]),
        vec![(10, 22, 1)]
    );
    // Records made available again that the log no longer has are archived on the next read.
    ack(&mut sp, MEMBER, 5, 22, AckType::Release).unwrap();
    assert_eq!(sp.next_fetch_offset(), 5);
    assert_eq!(fetch(&mut sp, OTHER, &[(8, 9), (10, 12)]), vec![(8, 12, 2)]);
    assert_eq!(sp.start_offset(), 8);
    assert_eq!(sp.record(13), Some((Free, 1)));
}

#[test]
fn a_read_past_the_window_end_hands_out_no_new_records() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 4)]);
    let read = batches(&[(20, 24)]);
    let past = Fetch {
        fetch_offset: 20,
        batches: &read,
        skip: &[],
    };
    assert!(
        sp.acquire(MEMBER, &past, 500, AcquireMode::BatchOptimized, T0)
            .is_empty()
    );
    assert_eq!(sp.end_offset(), 5);
}

#[test]
fn batches_before_the_start_offset_are_clipped() {
    let mut sp = SharePartition::new(config(), 7);
    let read = batches(&[(5, 9)]);
    let from_batch = Fetch {
        fetch_offset: 7,
        batches: &read,
        skip: &[],
    };
    let got = sp.acquire(MEMBER, &from_batch, 500, AcquireMode::BatchOptimized, T0);
    assert_eq!(ranges(&got), vec![(7, 9, 1)]);
    assert_eq!(sp.start_offset(), 7);
}

#[test]
fn a_million_record_batch_stays_a_handful_of_runs() {
    let mut sp = SharePartition::new(ShareConfig::default(), 0);
    // One batch of a million records: batch-optimized takes all of it at once, as Kafka does.
    let got = fetch_with(
        &mut sp,
        MEMBER,
        &[(0, 999_999)],
        &[],
        500,
        AcquireMode::BatchOptimized,
        T0,
    );
    assert_eq!(got, vec![(0, 999_999, 1)]);
    assert_eq!(sp.run_count(), 1);
    assert_eq!(sp.counts().acquired, 1_000_000);
    // Scattered acknowledgements split it into a few runs.
    let acks = vec![
        AckBatch::uniform(10, 10, AckType::Reject),
        AckBatch::uniform(500_000, 500_009, AckType::Release),
        AckBatch {
            first_offset: 999_997,
            last_offset: 999_999,
            types: vec![AckType::Accept, AckType::Gap, AckType::Accept],
        },
    ];
    sp.acknowledge(MEMBER, &acks, T0 + 1).unwrap();
    assert!(sp.run_count() <= 8, "{} runs", sp.run_count());
    assert_eq!(sp.snapshot().batches.len(), 6);
    // Offset 10 is archived, not acquired: acknowledging it is refused.
    let err = ack(&mut sp, MEMBER, 0, 499_999, AckType::Accept).unwrap_err();
    assert_eq!(err.code(), INVALID_RECORD_STATE);
    let acks = vec![
        AckBatch::uniform(0, 9, AckType::Accept),
        AckBatch::uniform(11, 499_999, AckType::Accept),
    ];
    sp.acknowledge(MEMBER, &acks, T0 + 1).unwrap();
    assert_eq!(sp.start_offset(), 500_000);
    ack(&mut sp, MEMBER, 500_010, 999_996, AckType::Accept).unwrap();
    assert_eq!(
        window(&sp),
        vec![
            (500_000, 500_009, Free, 1),
            (500_010, 999_997, AckedState, 1),
            (999_998, 999_998, ArchivedState, 1),
            (999_999, 999_999, AckedState, 1),
        ]
    );
    // Three of the released records, record-limit.
    let got = fetch_with(
        &mut sp,
        OTHER,
        &[(0, 999_999)],
        &[],
        3,
        AcquireMode::RecordLimit,
        T0,
    );
    assert_eq!(got, vec![(500_000, 500_002, 2)]);
    assert_eq!(sp.run_count(), 5);

    // Record-limit on a new million-record batch takes only what was asked for.
    let mut sp = SharePartition::new(ShareConfig::default(), 0);
    let got = fetch_with(
        &mut sp,
        MEMBER,
        &[(0, 999_999)],
        &[],
        500,
        AcquireMode::RecordLimit,
        T0,
    );
    assert_eq!(got, vec![(0, 499, 1)]);
    assert_eq!(sp.end_offset(), 500);
}

// ---- Acknowledgement ----

#[test]
fn acknowledge_a_single_range() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 4)]);
    ack(&mut sp, MEMBER, 0, 4, AckType::Accept).unwrap();
    assert_eq!((sp.start_offset(), sp.end_offset()), (5, 5));
    assert!(sp.window().is_empty());
    assert_eq!(sp.next_deadline(), None);
}

#[test]
fn acknowledge_multiple_ranges_with_different_types() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 4), (5, 9), (10, 14)]);
    let acks = vec![
        AckBatch::uniform(0, 4, AckType::Release),
        AckBatch::uniform(5, 9, AckType::Accept),
        AckBatch::uniform(10, 14, AckType::Reject),
    ];
    sp.acknowledge(MEMBER, &acks, T0 + 1).unwrap();
    assert_eq!(
        window(&sp),
        vec![
            (0, 4, Free, 1),
            (5, 9, AckedState, 1),
            (10, 14, ArchivedState, 1)
        ]
    );
    assert_eq!(sp.start_offset(), 0);
    assert_eq!(sp.next_fetch_offset(), 0);
}

#[test]
fn per_offset_types_and_gaps() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 5)]);
    let per_offset = AckBatch {
        first_offset: 1,
        last_offset: 5,
        types: vec![
            AckType::Accept,
            AckType::Gap,
            AckType::Release,
            AckType::Release,
            AckType::Reject,
        ],
    };
    sp.acknowledge(MEMBER, &[per_offset], T0 + 1).unwrap();
    assert_eq!(
        window(&sp),
        vec![
            (0, 0, acquired(MEMBER, T0 + LOCK), 1),
            (1, 1, AckedState, 1),
            (2, 2, ArchivedState, 1),
            (3, 4, Free, 1),
            (5, 5, ArchivedState, 1),
        ]
    );
    assert_eq!(sp.next_fetch_offset(), 3);
    // A gap acknowledged for the whole batch archives it all.
    ack(&mut sp, MEMBER, 0, 0, AckType::Gap).unwrap();
    assert_eq!(sp.start_offset(), 3);
}

#[test]
fn release_then_acquire_again_counts_a_second_delivery() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 4)]);
    ack(&mut sp, MEMBER, 0, 4, AckType::Release).unwrap();
    assert_eq!(window(&sp), vec![(0, 4, Free, 1)]);
    assert_eq!(fetch(&mut sp, OTHER, &[(0, 4)]), vec![(0, 4, 2)]);
    assert_eq!(window(&sp), vec![(0, 4, acquired(OTHER, T0 + LOCK), 2)]);
}

#[test]
fn releasing_part_of_a_batch_acquires_only_that_part_again() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 9), (10, 19)]);
    sp.acknowledge(
        MEMBER,
        &[
            AckBatch::uniform(2, 3, AckType::Release),
            AckBatch::uniform(12, 12, AckType::Release),
        ],
        T0 + 1,
    )
    .unwrap();
    assert_eq!(
        fetch(&mut sp, OTHER, &[(0, 9), (10, 19), (20, 29)]),
        vec![(2, 3, 2), (12, 12, 2), (20, 29, 1)]
    );
}

#[test]
fn reject_archives() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 4), (5, 9)]);
    ack(&mut sp, MEMBER, 5, 9, AckType::Reject).unwrap();
    assert_eq!(sp.record(7), Some((ArchivedState, 1)));
    assert_eq!(sp.start_offset(), 0);
    ack(&mut sp, MEMBER, 0, 4, AckType::Reject).unwrap();
    assert_eq!((sp.start_offset(), sp.end_offset()), (10, 10));
    assert!(fetch(&mut sp, OTHER, &[(0, 9)]).is_empty());
}

#[test]
fn a_record_is_archived_after_the_delivery_count_limit() {
    let mut sp = SharePartition::new(with_limit(2), 0);
    fetch(&mut sp, MEMBER, &[(0, 4)]);
    ack(&mut sp, MEMBER, 0, 4, AckType::Release).unwrap();
    assert_eq!(fetch(&mut sp, MEMBER, &[(0, 4)]), vec![(0, 4, 2)]);
    ack(&mut sp, MEMBER, 0, 1, AckType::Release).unwrap();
    assert_eq!(
        (sp.start_offset(), sp.record(2)),
        (2, Some((acquired(MEMBER, T0 + LOCK), 2)))
    );
    ack(&mut sp, MEMBER, 2, 4, AckType::Release).unwrap();
    assert_eq!((sp.start_offset(), sp.end_offset()), (5, 5));

    // With the default limit of 5, the fifth delivery is the last.
    let mut sp = SharePartition::new(config(), 0);
    for delivery in 1..=5 {
        let got = fetch_with(
            &mut sp,
            MEMBER,
            &[(0, 0)],
            &[],
            500,
            AcquireMode::BatchOptimized,
            T0,
        );
        assert_eq!(got, vec![(0, 0, delivery)]);
        ack(&mut sp, MEMBER, 0, 0, AckType::Release).unwrap();
    }
    assert_eq!(sp.start_offset(), 1);
    assert!(fetch(&mut sp, MEMBER, &[(0, 0)]).is_empty());
}

#[test]
fn throttled_records_are_delivered_in_smaller_groups_and_alone_on_their_last_delivery() {
    // Limit 5: records delivered 3 times or more are throttled (Kafka's threshold: half the
    // limit rounded up, at least 2).
    let mut sp = SharePartition::new(config(), 0);
    let read = [(0, 7), (8, 15)];
    for delivery in 1..=3 {
        assert_eq!(fetch(&mut sp, MEMBER, &read[..1]), vec![(0, 7, delivery)]);
        ack(&mut sp, MEMBER, 0, 7, AckType::Release).unwrap();
    }
    // Fourth delivery: half of the batch (8 >> 1), and nothing after it in the same read.
    assert_eq!(fetch(&mut sp, MEMBER, &read), vec![(0, 3, 4)]);
    assert_eq!(fetch(&mut sp, OTHER, &read), vec![(4, 7, 4)]);
    ack(&mut sp, MEMBER, 0, 3, AckType::Release).unwrap();
    ack(&mut sp, OTHER, 4, 7, AckType::Release).unwrap();
    // Fifth and last delivery: one record at a time.
    assert_eq!(fetch(&mut sp, MEMBER, &read), vec![(0, 0, 5)]);
    assert_eq!(fetch(&mut sp, MEMBER, &read), vec![(1, 1, 5)]);
    // Record-limit keeps its limit when throttled too.
    let got = fetch_with(&mut sp, OTHER, &read, &[], 1, AcquireMode::RecordLimit, T0);
    assert_eq!(got, vec![(2, 2, 5)]);

    // A throttled record ends an acquisition that already holds records.
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 3)]);
    for _ in 0..2 {
        ack(&mut sp, MEMBER, 2, 3, AckType::Release).unwrap();
        fetch(&mut sp, MEMBER, &[(0, 3)]);
    }
    ack(&mut sp, MEMBER, 2, 3, AckType::Release).unwrap();
    ack(&mut sp, MEMBER, 0, 1, AckType::Release).unwrap();
    assert_eq!(sp.record(1), Some((Free, 1)));
    assert_eq!(sp.record(2), Some((Free, 3)));
    assert_eq!(fetch(&mut sp, OTHER, &[(0, 3), (4, 9)]), vec![(0, 1, 2)]);
    // It comes first in the next one, alone in its group: the fresh records wait again.
    assert_eq!(fetch(&mut sp, OTHER, &[(0, 3), (4, 9)]), vec![(2, 3, 4)]);
    assert_eq!(fetch(&mut sp, OTHER, &[(4, 9)]), vec![(4, 9, 1)]);
}

#[test]
fn acknowledgement_by_another_member_is_refused() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 4)]);
    let before = window(&sp);
    let err = ack(&mut sp, OTHER, 0, 4, AckType::Accept).unwrap_err();
    assert_eq!(err.code(), INVALID_RECORD_STATE);
    let err = ack(&mut sp, OTHER, 2, 2, AckType::Renew).unwrap_err();
    assert_eq!(err.code(), INVALID_RECORD_STATE);
    assert_eq!(window(&sp), before);
    assert_eq!(sp.take_delta().map(|d| d.batches.len()), Some(1));
}

#[test]
fn acknowledging_records_not_acquired_is_refused_and_changes_nothing() {
    let mut sp = SharePartition::new(config(), 0);
    // Nothing in flight at all.
    let err = ack(&mut sp, MEMBER, 0, 4, AckType::Accept).unwrap_err();
    assert!(matches!(err, ShareError::InvalidRecordState(_)), "{err}");
    fetch(&mut sp, MEMBER, &[(0, 9)]);
    ack(&mut sp, MEMBER, 5, 9, AckType::Release).unwrap();
    ack(&mut sp, MEMBER, 3, 3, AckType::Accept).unwrap();
    let before = window(&sp);
    let _ = sp.take_delta();
    for (first, last, code) in [
        // Available (released) records.
        (5, 6, INVALID_RECORD_STATE),
        // Already acknowledged.
        (3, 3, INVALID_RECORD_STATE),
        (2, 3, INVALID_RECORD_STATE),
        // Past the window's end.
        (8, 10, INVALID_REQUEST),
        (20, 30, INVALID_REQUEST),
    ] {
        let err = ack(&mut sp, MEMBER, first, last, AckType::Accept).unwrap_err();
        assert_eq!(err.code(), code, "{first}-{last}: {err}");
        assert_eq!(window(&sp), before);
    }
    assert_eq!(sp.take_delta(), None);
}

#[test]
fn malformed_acknowledgements_are_invalid_requests() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 9)]);
    let before = window(&sp);
    let cases: Vec<Vec<AckBatch>> = vec![
        // First offset past the last.
        vec![AckBatch::uniform(4, 2, AckType::Accept)],
        // Overlapping, touching at one offset (Kafka lets this one through), out of order.
        vec![
            AckBatch::uniform(0, 4, AckType::Accept),
            AckBatch::uniform(3, 6, AckType::Accept),
        ],
        vec![
            AckBatch::uniform(0, 4, AckType::Accept),
            AckBatch::uniform(4, 6, AckType::Accept),
        ],
        vec![
            AckBatch::uniform(5, 6, AckType::Accept),
            AckBatch::uniform(0, 1, AckType::Accept),
        ],
        // No type; types neither one nor one per offset.
        vec![AckBatch {
            first_offset: 0,
            last_offset: 1,
            types: vec![],
        }],
        vec![AckBatch {
            first_offset: 0,
            last_offset: 2,
            types: vec![AckType::Accept, AckType::Accept],
        }],
    ];
    for batches in cases {
        let err = sp.acknowledge(MEMBER, &batches, T0 + 1).unwrap_err();
        assert_eq!(err.code(), INVALID_REQUEST, "{batches:?}: {err}");
        assert_eq!(window(&sp), before);
    }
    // Unknown acknowledge types never make it into a batch.
    assert_eq!(AckType::from_code(5).unwrap_err().code(), INVALID_REQUEST);
    assert_eq!(AckType::from_code(-1).unwrap_err().code(), INVALID_REQUEST);
    for code in 0..=4 {
        assert_eq!(AckType::from_code(code).map(AckType::code), Ok(code));
    }
}

#[test]
fn a_bad_batch_does_not_half_apply() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 9)]);
    fetch(&mut sp, OTHER, &[(10, 14)]);
    let before = window(&sp);
    let acks = vec![
        AckBatch::uniform(0, 4, AckType::Accept),
        AckBatch::uniform(5, 11, AckType::Accept),
    ];
    let err = sp.acknowledge(MEMBER, &acks, T0 + 1).unwrap_err();
    assert_eq!(err.code(), INVALID_RECORD_STATE);
    assert_eq!(window(&sp), before);
    assert_eq!(sp.start_offset(), 0);
}

#[test]
fn offsets_below_the_start_offset_are_passed_over() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 9)]);
    ack(&mut sp, MEMBER, 0, 4, AckType::Accept).unwrap();
    assert_eq!(sp.start_offset(), 5);
    // Entirely below: nothing to do. Straddling: only 5-6 are acknowledged.
    ack(&mut sp, MEMBER, 0, 4, AckType::Reject).unwrap();
    sp.acknowledge(
        MEMBER,
        &[AckBatch {
            first_offset: 3,
            last_offset: 6,
            types: vec![
                AckType::Release,
                AckType::Release,
                AckType::Accept,
                AckType::Reject,
            ],
        }],
        T0 + 1,
    )
    .unwrap();
    assert_eq!(sp.start_offset(), 7);
}

#[test]
fn the_start_offset_moves_past_leading_acknowledged_and_archived_records() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 4), (5, 9), (10, 14)]);
    ack(&mut sp, MEMBER, 5, 9, AckType::Accept).unwrap();
    assert_eq!(sp.start_offset(), 0);
    ack(&mut sp, MEMBER, 0, 2, AckType::Reject).unwrap();
    assert_eq!(sp.start_offset(), 3);
    ack(&mut sp, MEMBER, 3, 4, AckType::Accept).unwrap();
    assert_eq!(sp.start_offset(), 10);
    assert_eq!(window(&sp), vec![(10, 14, acquired(MEMBER, T0 + LOCK), 1)]);
    assert_eq!(sp.counts().in_flight, 5);
    // A released record holds the start offset.
    ack(&mut sp, MEMBER, 10, 10, AckType::Release).unwrap();
    ack(&mut sp, MEMBER, 11, 14, AckType::Accept).unwrap();
    assert_eq!((sp.start_offset(), sp.end_offset()), (10, 15));
}

// ---- Locks ----

#[test]
fn an_expired_lock_makes_the_records_available_again() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 4)]);
    fetch_with(
        &mut sp,
        OTHER,
        &[(5, 9)],
        &[],
        500,
        AcquireMode::BatchOptimized,
        T0 + 50,
    );
    assert_eq!(sp.next_deadline(), Some(T0 + LOCK));
    assert_eq!(sp.expire_locks(T0 + LOCK - 1), 0);
    assert_eq!(sp.expire_locks(T0 + LOCK), 5);
    assert_eq!(window(&sp)[0], (0, 4, Free, 1));
    assert_eq!(sp.next_deadline(), Some(T0 + 50 + LOCK));
    assert_eq!(sp.next_fetch_offset(), 0);
    // The member that lost the lock can no longer acknowledge.
    let err = ack(&mut sp, MEMBER, 0, 4, AckType::Accept).unwrap_err();
    assert_eq!(err.code(), INVALID_RECORD_STATE);
    assert_eq!(fetch(&mut sp, OTHER, &[(0, 4)]), vec![(0, 4, 2)]);
    // An expiry that only gives records back persists nothing new: they were persisted as
    // available already.
    let _ = sp.take_delta();
    assert_eq!(sp.expire_locks(T0 + 10 * LOCK), 10);
    assert_eq!(sp.take_delta(), None);
}

#[test]
fn an_expired_lock_at_the_delivery_count_limit_archives_the_records() {
    let mut sp = SharePartition::new(with_limit(2), 0);
    fetch(&mut sp, MEMBER, &[(0, 4), (5, 9)]);
    sp.expire_locks(T0 + LOCK);
    assert_eq!(
        fetch_with(
            &mut sp,
            MEMBER,
            &[(0, 4), (5, 9)],
            &[],
            5,
            AcquireMode::BatchOptimized,
            T0 + LOCK
        ),
        vec![(0, 4, 2)]
    );
    assert_eq!(sp.expire_locks(T0 + 2 * LOCK), 5);
    assert_eq!((sp.start_offset(), sp.next_fetch_offset()), (5, 5));
    assert_eq!(sp.take_delta().map(|d| d.start_offset), Some(5));
}

#[test]
fn renew_starts_the_lock_over() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 4)]);
    let _ = sp.take_delta();
    sp.acknowledge(MEMBER, &[AckBatch::uniform(0, 1, AckType::Renew)], T0 + 60)
        .unwrap();
    assert_eq!(sp.record(0), Some((acquired(MEMBER, T0 + 60 + LOCK), 1)));
    assert_eq!(sp.record(2), Some((acquired(MEMBER, T0 + LOCK), 1)));
    // A renewal persists nothing.
    assert_eq!(sp.take_delta(), None);
    assert_eq!(sp.expire_locks(T0 + LOCK), 3);
    assert_eq!(sp.next_deadline(), Some(T0 + 60 + LOCK));
    assert_eq!(sp.expire_locks(T0 + 60 + LOCK - 1), 0);
    ack(&mut sp, MEMBER, 0, 1, AckType::Accept).unwrap();
    assert_eq!(sp.start_offset(), 2);
    // Renew per offset, mixed with other types.
    fetch(&mut sp, OTHER, &[(2, 4)]);
    sp.acknowledge(
        OTHER,
        &[AckBatch {
            first_offset: 2,
            last_offset: 4,
            types: vec![AckType::Accept, AckType::Renew, AckType::Accept],
        }],
        T0 + 500,
    )
    .unwrap();
    assert_eq!(
        window(&sp),
        vec![
            (3, 3, acquired(OTHER, T0 + 500 + LOCK), 2),
            (4, 4, AckedState, 2)
        ]
    );
}

#[test]
fn a_member_that_leaves_gives_its_records_back_without_the_lost_delivery() {
    let mut sp = SharePartition::new(with_limit(2), 0);
    fetch(&mut sp, MEMBER, &[(0, 4)]);
    fetch(&mut sp, OTHER, &[(5, 9)]);
    ack(&mut sp, MEMBER, 0, 0, AckType::Accept).unwrap();
    assert_eq!(sp.release_member(MEMBER), 4);
    // Kafka's DeliveryCountOps.DECREASE: back to the count before the delivery.
    assert_eq!(
        window(&sp),
        vec![(1, 4, Free, 0), (5, 9, acquired(OTHER, T0 + LOCK), 1)]
    );
    assert_eq!(sp.release_member(MEMBER), 0);
    // Even on the last delivery the records come back available, never archived.
    assert_eq!(fetch(&mut sp, MEMBER, &[(0, 4)]), vec![(1, 4, 1)]);
    ack(&mut sp, MEMBER, 1, 4, AckType::Release).unwrap();
    assert_eq!(fetch(&mut sp, MEMBER, &[(0, 4)]), vec![(1, 4, 2)]);
    assert_eq!(sp.release_member(MEMBER), 4);
    assert_eq!(sp.record(1), Some((Free, 1)));
    assert_eq!(sp.acquired_ranges().keys().collect::<Vec<_>>(), vec![OTHER]);
}

// ---- Log start ----

#[test]
fn the_log_start_moving_archives_what_is_below_it() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 9)]);
    ack(&mut sp, MEMBER, 0, 5, AckType::Release).unwrap();
    assert!(!sp.log_start_moved(0));
    assert!(sp.log_start_moved(4));
    // 0-3 were available: archived and dropped. 4-5 stay available, 6-9 acquired.
    assert_eq!(sp.start_offset(), 4);
    // Past the end: acquired records stay with their member, the window reaches the log start.
    assert!(sp.log_start_moved(20));
    assert_eq!(sp.start_offset(), 6);
    assert_eq!(sp.end_offset(), 20);
    assert_eq!(sp.record(15), Some((ArchivedState, 0)));
    ack(&mut sp, MEMBER, 6, 9, AckType::Accept).unwrap();
    assert_eq!((sp.start_offset(), sp.end_offset()), (20, 20));
    // An empty window just moves.
    assert!(sp.log_start_moved(30));
    assert_eq!(
        (sp.start_offset(), sp.end_offset(), sp.next_fetch_offset()),
        (30, 30, 30)
    );
}

// ---- Persistence ----

#[test]
fn deltas_rebuild_the_snapshot() {
    let mut sp = SharePartition::new(config(), 0);
    let mut reader = sp.take_snapshot();
    assert_eq!(
        reader,
        Snapshot {
            start_offset: 0,
            state_epoch: 0,
            batches: vec![]
        }
    );
    assert_eq!(sp.take_delta(), None);
    fetch(&mut sp, MEMBER, &[(0, 9), (10, 19)]);
    let delta = sp.take_delta().unwrap();
    // Acquired records are persisted as available with their delivery count.
    assert_eq!(
        delta,
        Delta {
            start_offset: 0,
            batches: vec![batch(0, 19, Available, 1)]
        }
    );
    reader = apply_delta(&reader, &delta);
    ack(&mut sp, MEMBER, 0, 4, AckType::Accept).unwrap();
    ack(&mut sp, MEMBER, 8, 9, AckType::Accept).unwrap();
    ack(&mut sp, MEMBER, 12, 13, AckType::Reject).unwrap();
    let delta = sp.take_delta().unwrap();
    assert_eq!(
        delta,
        Delta {
            start_offset: 5,
            batches: vec![batch(8, 9, Acked, 1), batch(12, 13, Archived, 1)]
        }
    );
    reader = apply_delta(&reader, &delta);
    assert_eq!(reader, sp.snapshot());
    assert_eq!(
        reader.batches,
        vec![
            batch(5, 7, Available, 1),
            batch(8, 9, Acked, 1),
            batch(10, 11, Available, 1),
            batch(12, 13, Archived, 1),
            batch(14, 19, Available, 1),
        ]
    );
    // The snapshot and delta serialize.
    let json = serde_json::to_string(&reader).unwrap();
    assert_eq!(serde_json::from_str::<Snapshot>(&json).unwrap(), reader);
    // A member leaving lowers the counts again; the later delta wins.
    sp.release_member(MEMBER);
    reader = apply_delta(&reader, &sp.take_delta().unwrap());
    assert_eq!(reader, sp.snapshot());
    assert_eq!(reader.batches[0], batch(5, 7, Available, 0));
}

#[test]
fn a_restore_redelivers_acquired_records_with_their_count_and_never_acknowledged_ones() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 9)]);
    ack(&mut sp, MEMBER, 0, 1, AckType::Accept).unwrap();
    ack(&mut sp, MEMBER, 4, 5, AckType::Accept).unwrap();
    ack(&mut sp, MEMBER, 6, 6, AckType::Release).unwrap();
    fetch(&mut sp, OTHER, &[(6, 6)]);
    let snapshot = sp.snapshot();
    let mut restored = SharePartition::restore(config(), &snapshot).unwrap();
    assert_eq!(restored.snapshot(), snapshot);
    assert_eq!(restored.start_offset(), 2);
    assert_eq!(restored.end_offset(), 10);
    assert!(restored.acquired_ranges().is_empty());
    assert_eq!(restored.take_delta(), None);
    // 2-3 and 7-9 were acquired once, 6 twice; 4-5 are acknowledged and never come back.
    assert_eq!(
        fetch(&mut restored, OTHER, &[(0, 9), (10, 14)]),
        vec![(2, 3, 2), (6, 6, 3), (7, 9, 2), (10, 14, 1)]
    );
    assert_eq!(restored.record(4), Some((AckedState, 1)));
}

#[test]
fn a_restore_archives_available_records_at_the_delivery_count_limit() {
    let mut sp = SharePartition::new(with_limit(2), 0);
    fetch(&mut sp, MEMBER, &[(0, 4)]);
    ack(&mut sp, MEMBER, 0, 4, AckType::Release).unwrap();
    fetch(&mut sp, MEMBER, &[(0, 4)]);
    // 0-4 are on their last delivery when the broker stops: as if their lock expired.
    let snapshot = sp.take_snapshot();
    assert_eq!(snapshot.batches, vec![batch(0, 4, Available, 2)]);
    let mut restored = SharePartition::restore(with_limit(2), &snapshot).unwrap();
    assert_eq!((restored.start_offset(), restored.end_offset()), (5, 5));
    // The writer learns it through the next delta.
    let delta = restored.take_delta().unwrap();
    assert_eq!(delta.start_offset, 5);
    assert_eq!(apply_delta(&snapshot, &delta), restored.snapshot());
}

#[test]
fn a_restore_makes_unknown_offsets_available_and_keeps_the_state_epoch() {
    let snapshot = Snapshot {
        start_offset: 5,
        state_epoch: 7,
        batches: vec![batch(8, 10, Acked, 1), batch(15, 16, Available, 2)],
    };
    let mut sp = SharePartition::restore(config(), &snapshot).unwrap();
    assert_eq!(sp.state_epoch(), 7);
    assert_eq!(
        window(&sp),
        vec![
            (5, 7, Free, 0),
            (8, 10, AckedState, 1),
            (11, 14, Free, 0),
            (15, 16, Free, 2)
        ]
    );
    assert_eq!(sp.next_fetch_offset(), 5);
    let delta = sp.take_delta().unwrap();
    assert_eq!(apply_delta(&snapshot, &delta), sp.snapshot());
    // The gaps are read again; what the log no longer has is archived.
    assert_eq!(
        fetch(&mut sp, MEMBER, &[(6, 7), (8, 10), (11, 20)]),
        vec![(6, 7, 1), (11, 14, 1), (15, 16, 3), (17, 20, 1)]
    );
    assert_eq!(sp.start_offset(), 6);
}

#[test]
fn invalid_snapshots_are_refused() {
    let bad = [
        vec![batch(5, 4, Available, 1)],
        vec![batch(0, 4, Available, 1)],
        vec![batch(10, 14, Available, 1), batch(12, 20, Acked, 1)],
        vec![batch(10, 14, Available, 1), batch(5, 6, Acked, 1)],
        vec![batch(10, 14, Available, -1)],
        vec![batch(10, i64::MAX, Available, 1)],
    ];
    for batches in bad {
        let snapshot = Snapshot {
            start_offset: 5,
            state_epoch: 0,
            batches,
        };
        let err = SharePartition::restore(config(), &snapshot).unwrap_err();
        assert_eq!(err.code(), UNKNOWN_SERVER_ERROR, "{snapshot:?}");
    }
    let negative = Snapshot {
        start_offset: -1,
        state_epoch: 0,
        batches: vec![],
    };
    assert!(SharePartition::restore(config(), &negative).is_err());
}

// ---- Observability ----

#[test]
fn counts_and_ranges_per_member() {
    let mut sp = SharePartition::new(config(), 0);
    fetch(&mut sp, MEMBER, &[(0, 4)]);
    fetch(&mut sp, OTHER, &[(5, 9)]);
    fetch_with(
        &mut sp,
        MEMBER,
        &[(10, 14)],
        &[(12, 12)],
        500,
        AcquireMode::BatchOptimized,
        T0 + 5,
    );
    ack(&mut sp, OTHER, 6, 6, AckType::Accept).unwrap();
    ack(&mut sp, OTHER, 7, 7, AckType::Release).unwrap();
    assert_eq!(
        sp.counts(),
        WindowCounts {
            in_flight: 15,
            available: 1,
            acquired: 12,
            acknowledged: 1,
            archived: 1,
        }
    );
    let ranges = sp.acquired_ranges();
    assert_eq!(
        ranges.get(MEMBER),
        Some(&vec![
            OffsetRange::new(0, 4),
            OffsetRange::new(10, 11),
            OffsetRange::new(13, 14)
        ])
    );
    assert_eq!(
        ranges.get(OTHER),
        Some(&vec![OffsetRange::new(5, 5), OffsetRange::new(8, 9)])
    );
    assert_eq!(sp.record(20), None);
    assert_eq!(OffsetRange::new(3, 5).len(), 3);
    assert!(OffsetRange::new(3, 2).is_empty());
}

#[test]
fn wire_codes() {
    assert_eq!(AcquireMode::default(), AcquireMode::BatchOptimized);
    assert_eq!(AcquireMode::from_code(0), Ok(AcquireMode::BatchOptimized));
    assert_eq!(AcquireMode::from_code(1), Ok(AcquireMode::RecordLimit));
    assert_eq!(AcquireMode::RecordLimit.code(), 1);
    assert_eq!(
        AcquireMode::from_code(2).unwrap_err().code(),
        INVALID_REQUEST
    );
    assert_eq!(
        ShareError::InvalidRecordState("x".into()).to_string(),
        "invalid record state: x"
    );
}
