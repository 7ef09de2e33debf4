//! Producer-state snapshot files: the idempotent producers' sequence state of one partition as of
//! a log offset, so a restart knows every producer, not only those in the log tail it rereads
//! (Kafka's `<offset>.snapshot` files).
//!
//! A snapshot is written when the active segment rolls and at a clean shutdown, into the
//! partition's directory as `producers-<offset>.snapshot`, replaced atomically; the newest
//! [`KEEP`] are kept. At start the newest one at or below the recovered log end is loaded and the
//! batches after its offset are replayed on top of it. A snapshot beyond the log end describes
//! batches a crash took back, so it is deleted; a corrupt one is skipped (the state is derived
//! data: the log tail can always be reread instead).
//!
//! Layout (big-endian): magic `SKPS`, version u16, CRC-32C (u32) of everything after it, the
//! offset (i64), the producer count (u32), then per producer its ID (i64), epoch (i16),
//! last-append time (i64 ms), (v2) the first offset of its open transaction (i64, -1 for none),
//! batch count (u8, at most [`RECENT_BATCHES`]) and per batch its first sequence (i32), last
//! sequence (i32) and base offset (i64); (v2) then the aborted transactions: count (u32) and
//! per transaction its producer ID, first offset and marker offset (three i64). Version 1 files
//! (no transactions) are still read.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::producer::{AbortedTxn, BatchMeta, ProducerEntry, ProducerStates, RECENT_BATCHES};
use crate::node_file::write_atomically;

const MAGIC: &[u8; 4] = b"SKPS";
const VERSION: u16 = 2;
const PREFIX: &str = "producers-";
const SUFFIX: &str = ".snapshot";
/// Snapshots kept per partition: the newest may lie beyond what a crash left of the log.
pub const KEEP: usize = 2;
/// Bytes of a producer with no batches: the lower bound that caps a hostile producer count.
const MIN_ENTRY_LEN_V1: usize = 8 + 2 + 8 + 1;
const MIN_ENTRY_LEN: usize = MIN_ENTRY_LEN_V1 + 8;
const ABORTED_LEN: usize = 24;
/// A larger file is not read (about two million producers active within a day on one
/// partition): a damaged or foreign file must not make the broker allocate its size.
const MAX_FILE_LEN: u64 = 256 << 20;

/// Serialises `states` as of log offset `offset`.
pub fn encode(states: &ProducerStates, offset: i64) -> Vec<u8> {
    let mut body = Vec::with_capacity(12 + states.len() * (MIN_ENTRY_LEN + 16));
    body.extend_from_slice(&offset.to_be_bytes());
    let count = u32::try_from(states.len()).unwrap_or(u32::MAX);
    body.extend_from_slice(&count.to_be_bytes());
    for (producer_id, entry) in states.entries().take(count as usize) {
        body.extend_from_slice(&producer_id.to_be_bytes());
        body.extend_from_slice(&entry.epoch.to_be_bytes());
        body.extend_from_slice(&entry.last_append_ms.to_be_bytes());
        body.extend_from_slice(&entry.txn_first_offset.unwrap_or(-1).to_be_bytes());
        // `recent` never holds more than RECENT_BATCHES (5) batches.
        let batches = entry.recent.iter().take(RECENT_BATCHES);
        body.push(batches.len() as u8);
        for batch in batches {
            body.extend_from_slice(&batch.first_seq.to_be_bytes());
            body.extend_from_slice(&batch.last_seq.to_be_bytes());
            body.extend_from_slice(&batch.base_offset.to_be_bytes());
        }
    }
    let aborted = states.aborted();
    let count = u32::try_from(aborted.len()).unwrap_or(u32::MAX);
    body.extend_from_slice(&count.to_be_bytes());
    for txn in aborted.iter().take(count as usize) {
        body.extend_from_slice(&txn.producer_id.to_be_bytes());
        body.extend_from_slice(&txn.first_offset.to_be_bytes());
        body.extend_from_slice(&txn.last_offset.to_be_bytes());
    }
    let mut out = Vec::with_capacity(10 + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Takes the next `N` bytes off the front of `input`.
fn take<const N: usize>(input: &mut &[u8]) -> Result<[u8; N]> {
    let (head, rest) = input
        .split_first_chunk::<N>()
        .context("snapshot ends early")?;
    *input = rest;
    Ok(*head)
}

/// Parses a snapshot; returns its offset and the states. Never trusts a count beyond the bytes
/// that could hold it.
pub fn decode(bytes: &[u8]) -> Result<(i64, ProducerStates)> {
    let mut input = bytes;
    if &take::<4>(&mut input)? != MAGIC {
        bail!("not a producer snapshot");
    }
    let version = u16::from_be_bytes(take(&mut input)?);
    if !(1..=VERSION).contains(&version) {
        bail!("unknown snapshot version {version}");
    }
    let min_entry_len = if version == 1 {
        MIN_ENTRY_LEN_V1
    } else {
        MIN_ENTRY_LEN
    };
    let crc = u32::from_be_bytes(take(&mut input)?);
    if crc32c::crc32c(input) != crc {
        bail!("snapshot CRC mismatch");
    }
    let offset = i64::from_be_bytes(take(&mut input)?);
    let count = u32::from_be_bytes(take(&mut input)?) as usize;
    if count > input.len() / min_entry_len {
        bail!("snapshot claims {count} producers in {} bytes", input.len());
    }
    let mut states = ProducerStates::default();
    for _ in 0..count {
        let producer_id = i64::from_be_bytes(take(&mut input)?);
        let epoch = i16::from_be_bytes(take(&mut input)?);
        let last_append_ms = i64::from_be_bytes(take(&mut input)?);
        let txn_first_offset = if version == 1 {
            None
        } else {
            Some(i64::from_be_bytes(take(&mut input)?)).filter(|offset| *offset >= 0)
        };
        let [batches] = take::<1>(&mut input)?;
        if usize::from(batches) > RECENT_BATCHES {
            bail!("snapshot holds {batches} batches for producer {producer_id}");
        }
        let mut entry = ProducerEntry {
            epoch,
            last_append_ms,
            recent: Default::default(),
            txn_first_offset,
        };
        for _ in 0..batches {
            entry.recent.push_back(BatchMeta {
                first_seq: i32::from_be_bytes(take(&mut input)?),
                last_seq: i32::from_be_bytes(take(&mut input)?),
                base_offset: i64::from_be_bytes(take(&mut input)?),
            });
        }
        states.insert(producer_id, entry);
    }
    if version >= 2 {
        let count = u32::from_be_bytes(take(&mut input)?) as usize;
        if count > input.len() / ABORTED_LEN {
            bail!(
                "snapshot claims {count} aborted transactions in {} bytes",
                input.len()
            );
        }
        let mut last = i64::MIN;
        for _ in 0..count {
            let txn = AbortedTxn {
                producer_id: i64::from_be_bytes(take(&mut input)?),
                first_offset: i64::from_be_bytes(take(&mut input)?),
                last_offset: i64::from_be_bytes(take(&mut input)?),
            };
            if txn.last_offset < last || txn.first_offset > txn.last_offset {
                bail!("aborted transactions out of order in the snapshot");
            }
            last = txn.last_offset;
            states.push_aborted(txn);
        }
    }
    if !input.is_empty() {
        bail!("{} bytes after the last producer", input.len());
    }
    Ok((offset, states))
}

fn file_name(offset: i64) -> String {
    format!("{PREFIX}{offset:020}{SUFFIX}")
}

/// The snapshot files in `dir`, oldest first.
fn list(dir: &Path) -> Result<Vec<(i64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let name = entry.file_name();
        let offset = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|n| n.strip_suffix(SUFFIX))
            .and_then(|n| n.parse::<i64>().ok());
        if let Some(offset) = offset {
            found.push((offset, entry.path()));
        }
    }
    found.sort_unstable_by_key(|(offset, _)| *offset);
    Ok(found)
}

/// Writes the snapshot of `states` as of `offset` and prunes all but the newest [`KEEP`].
/// Nothing is written when there are no producers (a partition without idempotent producers
/// never pays for snapshots; an older snapshot still replays correctly) or when a snapshot at
/// this offset exists (nothing was appended since: a restart without appends rewrites nothing).
pub fn write(dir: &Path, states: &ProducerStates, offset: i64) -> Result<()> {
    let path = dir.join(file_name(offset));
    if (states.is_empty() && !states.has_aborted()) || path.exists() {
        return Ok(());
    }
    write_atomically(&path, &encode(states, offset))?;
    let files = list(dir)?;
    let stale = files.len().saturating_sub(KEEP);
    for (_, path) in files.into_iter().take(stale) {
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    }
    Ok(())
}

fn read_bounded(path: &Path) -> Result<Vec<u8>> {
    let len = std::fs::metadata(path)?.len();
    if len > MAX_FILE_LEN {
        bail!("{len} bytes, more than a snapshot can be");
    }
    Ok(std::fs::read(path)?)
}

/// The newest readable snapshot at or below `log_end`, with its offset. Snapshots beyond the log
/// end (their batches were lost in a crash) are deleted; unreadable ones are skipped.
pub fn load(dir: &Path, log_end: i64) -> Result<Option<(i64, ProducerStates)>> {
    for (offset, path) in list(dir)?.into_iter().rev() {
        if offset > log_end {
            tracing::info!(snapshot = %path.display(), log_end, "removing a producer snapshot beyond the log end");
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            continue;
        }
        let read = read_bounded(&path).and_then(|bytes| decode(&bytes));
        match read {
            Ok((stored, states)) if stored == offset => return Ok(Some((offset, states))),
            Ok((stored, _)) => {
                tracing::warn!(snapshot = %path.display(), stored, "producer snapshot names another offset; skipped");
            }
            Err(e) => {
                tracing::warn!(snapshot = %path.display(), error = %e, "unreadable producer snapshot skipped");
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::super::producer::SequenceCheck;
    use super::*;

    fn sample() -> ProducerStates {
        let mut states = ProducerStates::default();
        for i in 0..7 {
            states.record(
                5,
                1,
                i * 2,
                i * 2 + 1,
                i64::from(i) * 100,
                1_000 + i64::from(i),
            );
        }
        states.record(i64::MAX, i16::MAX, i32::MAX, 0, 9, -1);
        // Producer 8: an aborted transaction, then an open one.
        states.record(8, 0, 0, 0, 700, 2_000);
        states.record_txn_data(8, 700);
        states.record_marker(8, 0, skiff_records::ControlRecordType::Abort, 701, 2_000);
        states.record(8, 0, 1, 1, 702, 2_001);
        states.record_txn_data(8, 702);
        states
    }

    #[test]
    fn round_trip_keeps_every_producer_and_its_last_batches() {
        let states = sample();
        let (offset, back) = decode(&encode(&states, 4242)).expect("decodes");
        assert_eq!(offset, 4242);
        assert_eq!(back.len(), 3);
        assert_eq!(back.first_unstable_offset(), Some(702));
        assert_eq!(
            back.aborted_between(0, i64::MAX),
            vec![super::super::producer::AbortedTxn {
                producer_id: 8,
                first_offset: 700,
                last_offset: 701
            }]
        );
        // The last five batches of producer 5 survive, the older two do not.
        assert_eq!(
            back.check(5, 1, 12, 13),
            Ok(SequenceCheck::Duplicate { base_offset: 600 })
        );
        assert_eq!(
            back.check(5, 1, 4, 5),
            Ok(SequenceCheck::Duplicate { base_offset: 200 })
        );
        assert_eq!(
            back.check(5, 1, 2, 3),
            Err(skiff_protocol::ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER)
        );
        assert_eq!(back.check(5, 1, 14, 20), Ok(SequenceCheck::Append));
        assert_eq!(
            back.check(i64::MAX, i16::MAX, i32::MAX, 0),
            Ok(SequenceCheck::Duplicate { base_offset: 9 })
        );
        assert_eq!(encode(&back, 4242), encode(&states, 4242));
    }

    #[test]
    fn every_damaged_snapshot_is_refused() {
        let good = encode(&sample(), 7);
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "truncated at {cut}");
        }
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x20;
            assert!(decode(&bad).is_err(), "flipped byte {at}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(decode(&longer).is_err(), "trailing byte");
    }

    /// A snapshot whose CRC is right but whose counts are hostile: refused before any
    /// allocation sized by them.
    #[test]
    fn hostile_counts_are_refused() {
        let with_body = |body: &[u8]| {
            let mut out = MAGIC.to_vec();
            out.extend_from_slice(&VERSION.to_be_bytes());
            out.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
            out.extend_from_slice(body);
            out
        };
        let mut body = 0i64.to_be_bytes().to_vec();
        body.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode(&with_body(&body)).is_err());
        let mut body = 0i64.to_be_bytes().to_vec();
        body.extend_from_slice(&1u32.to_be_bytes());
        body.extend_from_slice(&[0u8; 26]);
        body.push(200); // batches
        body.extend_from_slice(&[0u8; 64]);
        assert!(decode(&with_body(&body)).is_err());
        // No producers, then a hostile count of aborted transactions.
        let mut body = 0i64.to_be_bytes().to_vec();
        body.extend_from_slice(&0u32.to_be_bytes());
        body.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode(&with_body(&body)).is_err());
    }

    /// Snapshots written before transactions (version 1) still load.
    #[test]
    fn version_1_snapshots_are_read() {
        let mut body = 77i64.to_be_bytes().to_vec();
        body.extend_from_slice(&1u32.to_be_bytes());
        body.extend_from_slice(&5i64.to_be_bytes()); // producer ID
        body.extend_from_slice(&2i16.to_be_bytes()); // epoch
        body.extend_from_slice(&1_000i64.to_be_bytes()); // last append
        body.push(1);
        body.extend_from_slice(&0i32.to_be_bytes());
        body.extend_from_slice(&3i32.to_be_bytes());
        body.extend_from_slice(&70i64.to_be_bytes());
        let mut v1 = MAGIC.to_vec();
        v1.extend_from_slice(&1u16.to_be_bytes());
        v1.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        v1.extend_from_slice(&body);
        let (offset, states) = decode(&v1).expect("version 1 decodes");
        assert_eq!(offset, 77);
        assert_eq!(
            states.check(5, 2, 0, 3),
            Ok(SequenceCheck::Duplicate { base_offset: 70 })
        );
        assert_eq!(states.first_unstable_offset(), None);
    }

    proptest::proptest! {
        /// Whatever a snapshot file holds, decoding returns an error or a state, never panics.
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = decode(&bytes);
            let mut framed = MAGIC.to_vec();
            framed.extend_from_slice(&VERSION.to_be_bytes());
            framed.extend_from_slice(&crc32c::crc32c(&bytes).to_be_bytes());
            framed.extend_from_slice(&bytes);
            let _ = decode(&framed);
        }

        /// Any state survives a snapshot unchanged (its encoding is the same bytes again).
        #[test]
        fn any_state_round_trips(
            batches in proptest::collection::vec(
                (0i64..20, proptest::num::i16::ANY, proptest::num::i32::ANY, proptest::num::i32::ANY,
                 proptest::num::i64::ANY, proptest::num::i64::ANY),
                0..64,
            ),
            offset in proptest::num::i64::ANY,
        ) {
            let mut states = ProducerStates::default();
            let mut next_offset = 0i64;
            for (id, epoch, first, last, base, now) in batches {
                // Some batches are transactional, some are markers, by the sign of `base`.
                next_offset += 1;
                match base.rem_euclid(4) {
                    0 => states.record_marker(id, epoch, skiff_records::ControlRecordType::Abort, next_offset, now),
                    1 => {
                        states.record(id, epoch, first, last, next_offset, now);
                        states.record_txn_data(id, next_offset);
                    }
                    _ => states.record(id, epoch, first, last, base, now),
                }
            }
            let bytes = encode(&states, offset);
            let (back_offset, back) = decode(&bytes).map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
            proptest::prop_assert_eq!(back_offset, offset);
            proptest::prop_assert_eq!(encode(&back, offset), bytes);
        }
    }

    #[test]
    fn files_newest_at_or_below_the_end_is_loaded_and_older_ones_pruned() {
        let dir = tempfile::tempdir().expect("tempdir");
        for offset in [10, 20, 30] {
            let mut states = ProducerStates::default();
            states.record(offset, 0, 0, 0, offset, 1);
            write(dir.path(), &states, offset).expect("write");
        }
        let offsets: Vec<i64> = list(dir.path())
            .expect("list")
            .iter()
            .map(|(o, _)| *o)
            .collect();
        assert_eq!(offsets, vec![20, 30], "only the newest two are kept");

        // The log ends at 25 (a crash took the tail): snapshot 30 is deleted, 20 is used.
        let (offset, states) = load(dir.path(), 25).expect("load").expect("found");
        assert_eq!(offset, 20);
        assert_eq!(
            states.check(20, 0, 0, 0),
            Ok(SequenceCheck::Duplicate { base_offset: 20 })
        );
        assert_eq!(list(dir.path()).expect("list").len(), 1);

        // No producers, or a snapshot at that offset already: nothing is written.
        write(dir.path(), &ProducerStates::default(), 24).expect("write");
        assert_eq!(list(dir.path()).expect("list").len(), 1);
        let mut other = ProducerStates::default();
        other.record(99, 0, 0, 0, 99, 1);
        write(dir.path(), &other, 20).expect("write");
        let (_, kept) = load(dir.path(), 25).expect("load").expect("found");
        assert_eq!(
            kept.check(99, 0, 0, 0),
            Ok(SequenceCheck::Append),
            "not rewritten"
        );

        // A corrupt snapshot is skipped, not fatal.
        std::fs::write(dir.path().join(file_name(22)), b"garbage").expect("write");
        assert_eq!(
            load(dir.path(), 25).expect("load").map(|(o, _)| o),
            Some(20)
        );
        assert!(load(dir.path(), 19).expect("load").is_none());
    }
}
