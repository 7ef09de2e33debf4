//! What a share fetch makes of a partition read: the whole batches it holds, the offsets that
//! must never be delivered, the slice of bytes a response carries for the records acquired, and
//! the acquired ranges cut to the client's `BatchSize`.
//!
//! Never delivered (archived by the share partition instead): control batches (transaction
//! markers), always, and under read_committed the batches of aborted transactions, found as a
//! consumer finds them (Kafka's `SharePartition.filterAbortedTransactionalAcquiredRecords`): an
//! aborted transaction's producer is aborting from the transaction's first offset until its next
//! control batch. Only headers are read (no CRC pass, no decompression); a batch whose header
//! cannot be read, or that the read cut short, ends the chunk.

use std::collections::BTreeSet;

use bytes::Bytes;
use skiff_records::BatchHeader;
use skiff_share::{AcquireMode, AcquiredRange, FetchedBatch, OffsetRange};

use crate::partition::Aborted;

/// One batch of a chunk: its offsets and where its bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ChunkBatch {
    fetched: FetchedBatch,
    start: usize,
    end: usize,
}

/// The whole batches of one partition read.
#[derive(Debug, Clone, Default)]
pub struct LogChunk {
    records: Bytes,
    batches: Vec<ChunkBatch>,
    skip: Vec<OffsetRange>,
}

impl LogChunk {
    /// Reads the batch headers of `records`. `aborted`: the read's aborted transactions
    /// (`Some` under read_committed, possibly empty; `None` under read_uncommitted).
    pub fn parse(records: Bytes, aborted: Option<&[Aborted]>) -> LogChunk {
        let mut batches = Vec::new();
        let mut headers = Vec::new();
        let mut position = 0usize;
        while let Some(Ok(header)) = records.get(position..).map(BatchHeader::parse) {
            let end = position.saturating_add(header.total_len());
            if end > records.len() || header.base_offset < 0 {
                break;
            }
            let fetched = FetchedBatch {
                base_offset: header.base_offset,
                last_offset: header.last_offset(),
            };
            if batches
                .last()
                .is_some_and(|b: &ChunkBatch| b.fetched.last_offset >= fetched.base_offset)
            {
                break;
            }
            batches.push(ChunkBatch {
                fetched,
                start: position,
                end,
            });
            headers.push(header);
            position = end;
        }
        let skip = never_delivered(&headers, aborted);
        LogChunk {
            records,
            batches,
            skip,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// The batches' offsets, in order.
    pub fn fetched(&self) -> Vec<FetchedBatch> {
        self.batches.iter().map(|b| b.fetched).collect()
    }

    /// Offsets never to deliver: control batches and aborted transactions' batches.
    pub fn skip(&self) -> &[OffsetRange] {
        &self.skip
    }

    /// The bytes a response carries for `acquired` (ranges in offset order): every batch from
    /// the one holding the first acquired offset to the one holding the last, as Kafka's
    /// `ShareFetchUtils.maybeSliceFetchRecords` does.
    pub fn slice(&self, acquired: &[AcquiredRange]) -> Bytes {
        let (Some(first), Some(last)) = (
            acquired.iter().map(|a| a.first_offset).min(),
            acquired.iter().map(|a| a.last_offset).max(),
        ) else {
            return Bytes::new();
        };
        let from = self
            .batches
            .iter()
            .find(|b| b.fetched.last_offset >= first)
            .map(|b| b.start);
        let to = self
            .batches
            .iter()
            .rev()
            .find(|b| b.fetched.base_offset <= last)
            .map(|b| b.end);
        match (from, to) {
            (Some(from), Some(to)) if from < to && to <= self.records.len() => {
                self.records.slice(from..to)
            }
            _ => Bytes::new(),
        }
    }
}

/// The offsets of `headers` that are never delivered.
fn never_delivered(headers: &[BatchHeader], aborted: Option<&[Aborted]>) -> Vec<OffsetRange> {
    let mut pending: Vec<(i64, i64)> = aborted
        .unwrap_or_default()
        .iter()
        .map(|a| (a.first_offset, a.producer_id))
        .collect();
    // Oldest first, taken from the back.
    pending.sort_unstable_by(|a, b| b.cmp(a));
    let mut aborting: BTreeSet<i64> = BTreeSet::new();
    let mut skip: Vec<OffsetRange> = Vec::new();
    for header in headers {
        let last = header.last_offset();
        while let Some(&(first, producer)) = pending.last() {
            if first > last {
                break;
            }
            aborting.insert(producer);
            pending.pop();
        }
        let skipped = if header.is_control() {
            // A producer's marker ends its transaction (an aborting one's is its abort marker).
            aborting.remove(&header.producer_id);
            true
        } else {
            header.is_transactional() && aborting.contains(&header.producer_id)
        };
        if skipped {
            match skip.last_mut() {
                Some(prev) if prev.last_offset.checked_add(1) == Some(header.base_offset) => {
                    prev.last_offset = last;
                }
                _ => skip.push(OffsetRange::new(header.base_offset, last)),
            }
        }
    }
    skip
}

/// `acquired` cut into ranges of about `batch_size` records at batch boundaries (Kafka's
/// `SharePartition.createBatches`): in [`AcquireMode::BatchOptimized`] only, and only when
/// `batch_size` is positive; a cut is made at the first batch starting `batch_size` or more
/// records after the range's current start.
pub fn split_by_batch_size(
    acquired: Vec<AcquiredRange>,
    batches: &[FetchedBatch],
    batch_size: i32,
    mode: AcquireMode,
) -> Vec<AcquiredRange> {
    if mode != AcquireMode::BatchOptimized || batch_size <= 0 {
        return acquired;
    }
    let size = i64::from(batch_size);
    let mut out = Vec::with_capacity(acquired.len());
    for range in acquired {
        let mut first = range.first_offset;
        for batch in batches {
            let base = batch.base_offset;
            if base <= first || base > range.last_offset {
                continue;
            }
            if base.saturating_sub(first) >= size {
                out.push(AcquiredRange {
                    first_offset: first,
                    last_offset: base - 1,
                    delivery_count: range.delivery_count,
                });
                first = base;
            }
        }
        out.push(AcquiredRange {
            first_offset: first,
            last_offset: range.last_offset,
            delivery_count: range.delivery_count,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_records::RecordBatchBuilder;

    /// A batch of `n` records at `base`, of producer `pid` when transactional or control.
    fn batch(base: i64, n: usize, pid: i64, transactional: bool, control: bool) -> Bytes {
        let mut builder = RecordBatchBuilder::new()
            .base_offset(base)
            .producer(pid, 0, 0)
            .transactional(transactional)
            .control(control);
        for _ in 0..n {
            builder
                .append(1_700_000_000_000, None, Some(b"v"), &[])
                .expect("append");
        }
        builder.build().expect("build").into_bytes()
    }

    fn concat(parts: &[Bytes]) -> Bytes {
        let mut all = Vec::new();
        for p in parts {
            all.extend_from_slice(p);
        }
        Bytes::from(all)
    }

    fn fb(base: i64, last: i64) -> FetchedBatch {
        FetchedBatch {
            base_offset: base,
            last_offset: last,
        }
    }

    fn range(first: i64, last: i64, count: i16) -> AcquiredRange {
        AcquiredRange {
            first_offset: first,
            last_offset: last,
            delivery_count: count,
        }
    }

    #[test]
    fn batches_are_read_whole_and_slices_follow_the_acquired_records() {
        let parts = [
            batch(0, 3, -1, false, false),
            batch(3, 2, -1, false, false),
            batch(5, 4, -1, false, false),
        ];
        let all = concat(&parts);
        // A cut-off last batch is left out.
        let cut = all.slice(..all.len() - 5);
        let chunk = LogChunk::parse(cut, None);
        assert_eq!(chunk.fetched(), vec![fb(0, 2), fb(3, 4)]);
        assert!(chunk.skip().is_empty());

        let chunk = LogChunk::parse(all.clone(), None);
        assert_eq!(chunk.fetched(), vec![fb(0, 2), fb(3, 4), fb(5, 8)]);
        // Offsets 3-4 acquired: the middle batch only; 1-5: all three; none: nothing.
        assert_eq!(chunk.slice(&[range(3, 4, 1)]), parts[1]);
        assert_eq!(chunk.slice(&[range(1, 1, 1), range(5, 5, 2)]), all);
        assert_eq!(chunk.slice(&[range(4, 6, 1)]), concat(&parts[1..]));
        assert!(chunk.slice(&[]).is_empty());
        // Garbage reads as no batches.
        assert!(LogChunk::parse(Bytes::from_static(b"\x00\x01garbage"), None).is_empty());
    }

    #[test]
    fn control_batches_and_aborted_transactions_are_never_delivered() {
        // Producer 7: transaction 0-1 aborted (marker 2); producer 8: 3-4 committed (marker 5);
        // producer 7 again: 6-7 committed (marker 8); a plain batch 9.
        let parts = [
            batch(0, 2, 7, true, false),
            batch(2, 1, 7, false, true),
            batch(3, 2, 8, true, false),
            batch(5, 1, 8, false, true),
            batch(6, 2, 7, true, false),
            batch(8, 1, 7, false, true),
            batch(9, 1, -1, false, false),
        ];
        let all = concat(&parts);
        // read_uncommitted: only the markers.
        let chunk = LogChunk::parse(all.clone(), None);
        assert_eq!(
            chunk.skip(),
            &[
                OffsetRange::new(2, 2),
                OffsetRange::new(5, 5),
                OffsetRange::new(8, 8)
            ]
        );
        // read_committed: the aborted transaction too, merged with its marker.
        let aborted = [Aborted {
            producer_id: 7,
            first_offset: 0,
        }];
        let chunk = LogChunk::parse(all, Some(&aborted));
        assert_eq!(
            chunk.skip(),
            &[
                OffsetRange::new(0, 2),
                OffsetRange::new(5, 5),
                OffsetRange::new(8, 8)
            ]
        );
        // With no aborted transactions under read_committed: the markers only.
        let chunk = LogChunk::parse(concat(&parts[..2]), Some(&[]));
        assert_eq!(chunk.skip(), &[OffsetRange::new(2, 2)]);
    }

    #[test]
    fn acquired_ranges_are_cut_at_batch_boundaries_by_batch_size() {
        let batches = [fb(0, 2), fb(3, 5), fb(6, 8), fb(9, 9)];
        let acquired = vec![range(0, 9, 1)];
        assert_eq!(
            split_by_batch_size(acquired.clone(), &batches, 4, AcquireMode::BatchOptimized),
            vec![range(0, 5, 1), range(6, 9, 1)]
        );
        assert_eq!(
            split_by_batch_size(acquired.clone(), &batches, 3, AcquireMode::BatchOptimized),
            vec![
                range(0, 2, 1),
                range(3, 5, 1),
                range(6, 8, 1),
                range(9, 9, 1)
            ]
        );
        // Not in record_limit mode, nor with a batch size of 0 or larger than the range.
        for (size, mode) in [
            (3, AcquireMode::RecordLimit),
            (0, AcquireMode::BatchOptimized),
            (-5, AcquireMode::BatchOptimized),
            (100, AcquireMode::BatchOptimized),
        ] {
            assert_eq!(
                split_by_batch_size(acquired.clone(), &batches, size, mode),
                acquired
            );
        }
        // Ranges starting inside a batch keep their delivery counts.
        assert_eq!(
            split_by_batch_size(
                vec![range(4, 9, 3)],
                &batches,
                2,
                AcquireMode::BatchOptimized
            ),
            vec![range(4, 5, 3), range(6, 8, 3), range(9, 9, 3)]
        );
    }
}
