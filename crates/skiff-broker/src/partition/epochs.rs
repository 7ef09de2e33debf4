//! A partition's leader-epoch history (Kafka's `LeaderEpochFileCache`): for each leader epoch in
//! which records were appended, the offset its first record took. OffsetForLeaderEpoch (KIP-320)
//! answers from it where an epoch ended, so that a consumer whose position lies past that end
//! learns that the log lost records it had read (an unclean stop cut the log's tail) instead of
//! skipping past the loss.
//!
//! On one node the leader epoch is the broker's start count: every start is a new epoch, as a
//! Kafka partition's leader epoch grows when its only replica comes back. When a partition opens,
//! its history is read from `leader-epoch-checkpoint` (Kafka's file: a version line, a count line,
//! then `epoch start-offset` lines), epochs that start beyond the log's end are dropped (their
//! records are gone), and the current epoch starts at the log's end. The file is written (crash
//! safely) at the first append of each epoch, not at open, so a start with many partitions writes
//! nothing; until then the current epoch's entry is in memory only, and if it is lost in a crash
//! the epoch before answers for it, which never reports a truncation that did not happen.

use std::path::{Path, PathBuf};

/// The history file in a partition's directory.
pub const CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";

/// The format version written.
const VERSION: i32 = 0;

/// Entries a checkpoint may hold; beyond, the file is ignored as corrupt.
const MAX_ENTRIES: usize = 100_000;

/// Kafka's `UNDEFINED_EPOCH` and `UNDEFINED_EPOCH_OFFSET`.
pub const UNDEFINED_EPOCH: i32 = -1;
pub const UNDEFINED_OFFSET: i64 = -1;

/// Kafka's `LeaderEpochFileCache.endOffsetFor`: the epoch at or below `requested` and where it
/// ended, over `epochs` (epoch, start offset), ascending, the last one current until
/// `log_end_offset`.
pub fn end_offset_for(epochs: &[(i32, i64)], requested: i32, log_end_offset: i64) -> (i32, i64) {
    if requested == UNDEFINED_EPOCH {
        return (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
    }
    if epochs.last().is_some_and(|(epoch, _)| *epoch == requested) {
        return (requested, log_end_offset);
    }
    let Some(&(_, higher_start)) = epochs.iter().find(|(epoch, _)| *epoch > requested) else {
        // Later than any epoch known.
        return (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
    };
    match epochs.iter().rev().find(|(epoch, _)| *epoch <= requested) {
        Some(&(floor, _)) => (floor, higher_start),
        // Earlier than any epoch known.
        None => (requested, higher_start),
    }
}

/// The entries a checkpoint file holds (`None`: not one Skiff or Kafka wrote).
fn parse(text: &str) -> Option<Vec<(i32, i64)>> {
    let mut lines = text.lines();
    let version: i32 = lines.next()?.trim().parse().ok()?;
    let count: usize = lines.next()?.trim().parse().ok()?;
    if version != VERSION || count > MAX_ENTRIES {
        return None;
    }
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let mut fields = lines.next()?.split_whitespace();
        let epoch: i32 = fields.next()?.parse().ok()?;
        let start: i64 = fields.next()?.parse().ok()?;
        if fields.next().is_some() || epoch < 0 || start < 0 {
            return None;
        }
        if entries
            .last()
            .is_some_and(|&(e, s): &(i32, i64)| e >= epoch || s > start)
        {
            return None;
        }
        entries.push((epoch, start));
    }
    Some(entries)
}

fn render(entries: &[(i32, i64)]) -> String {
    let mut out = format!("{VERSION}\n{}\n", entries.len());
    for (epoch, start) in entries {
        out.push_str(&format!("{epoch} {start}\n"));
    }
    out
}

/// A partition's epochs and where each started.
#[derive(Debug)]
pub struct EpochHistory {
    entries: Vec<(i32, i64)>,
    /// The checkpoint file (`None`: kept in memory only).
    path: Option<PathBuf>,
    /// The current epoch's entry is not in the file yet.
    unwritten: bool,
}

impl EpochHistory {
    /// The history of the partition in `dir` (its checkpoint, if any and readable), with the
    /// `current` epoch starting at `log_end` (entries starting past it dropped).
    pub fn open(dir: &Path, current: i32, log_end: i64) -> EpochHistory {
        let path = dir.join(CHECKPOINT_FILE);
        let entries = match std::fs::read_to_string(&path) {
            Ok(text) => parse(&text).unwrap_or_else(|| {
                tracing::warn!(file = %path.display(), "leader epoch checkpoint unreadable; starting a new history");
                Vec::new()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot read the leader epoch checkpoint");
                Vec::new()
            }
        };
        EpochHistory::from_entries(entries, Some(path), current, log_end)
    }

    /// A history kept in memory only (tests, stores without a directory).
    pub fn in_memory(current: i32, log_end: i64) -> EpochHistory {
        EpochHistory::from_entries(Vec::new(), None, current, log_end)
    }

    fn from_entries(
        mut entries: Vec<(i32, i64)>,
        path: Option<PathBuf>,
        current: i32,
        log_end: i64,
    ) -> EpochHistory {
        // Kafka's truncateFromEnd: epochs whose records the log no longer has, and any epoch
        // not older than the current one (a clock that went back), go.
        entries.retain(|&(epoch, start)| start <= log_end && epoch < current);
        let unwritten = entries.last().is_none_or(|&(e, _)| e != current);
        if unwritten {
            entries.push((current, log_end));
        }
        EpochHistory {
            entries,
            path,
            unwritten,
        }
    }

    /// The current leader epoch.
    pub fn current(&self) -> i32 {
        self.entries.last().map_or(UNDEFINED_EPOCH, |&(e, _)| e)
    }

    /// Records are about to be appended: the first append of the epoch writes its entry.
    pub fn before_append(&mut self) {
        if !self.unwritten {
            return;
        }
        self.unwritten = false;
        let Some(path) = &self.path else {
            return;
        };
        if let Err(e) = crate::node_file::write_atomically(path, render(&self.entries).as_bytes()) {
            tracing::warn!(file = %path.display(), error = %format!("{e:#}"), "cannot write the leader epoch checkpoint");
        }
    }

    /// Where epoch `requested` ended, with the log's start and end offsets now.
    pub fn end_offset_for(&self, requested: i32, log_start: i64, log_end: i64) -> (i32, i64) {
        // Kafka's truncateFromStart: nothing starts before the log start.
        let clamped: Vec<(i32, i64)> = self
            .entries
            .iter()
            .map(|&(e, s)| (e, s.max(log_start)))
            .collect();
        end_offset_for(&clamped, requested, log_end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_offsets_follow_kafkas_epoch_cache() {
        let one = [(0, 5)];
        assert_eq!(end_offset_for(&one, 0, 42), (0, 42));
        assert_eq!(end_offset_for(&one, 1, 42), (-1, -1));
        assert_eq!(end_offset_for(&one, -1, 42), (-1, -1));
        assert_eq!(end_offset_for(&one, -5, 42), (-5, 5));
        assert_eq!(end_offset_for(&[], 0, 42), (-1, -1));
        let many = [(1, 0), (3, 10), (6, 25)];
        assert_eq!(end_offset_for(&many, 6, 40), (6, 40));
        assert_eq!(end_offset_for(&many, 1, 40), (1, 10));
        assert_eq!(end_offset_for(&many, 2, 40), (1, 10));
        assert_eq!(end_offset_for(&many, 4, 40), (3, 25));
        assert_eq!(end_offset_for(&many, 0, 40), (0, 0));
        assert_eq!(end_offset_for(&many, 7, 40), (-1, -1));
    }

    #[test]
    fn checkpoints_round_trip_and_bad_ones_are_refused() {
        let entries = vec![(0, 0), (2, 10), (5, 10)];
        assert_eq!(parse(&render(&entries)), Some(entries));
        for bad in [
            "",
            "1\n0\n",
            "0\n2\n0 0\n",
            "0\n1\n0\n",
            "0\n1\n-1 0\n",
            "0\n2\n3 5\n2 6\n",
            "0\n2\n1 9\n2 6\n",
            "0\n1\n1 2 3\n",
            "0\n99999999999\n",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn each_start_is_an_epoch_written_at_its_first_append() {
        let dir = tempfile::tempdir().expect("tempdir");
        // First start: epoch 0 from offset 0, written at the first append.
        let mut h = EpochHistory::open(dir.path(), 0, 0);
        assert_eq!(h.current(), 0);
        assert!(!dir.path().join(CHECKPOINT_FILE).exists());
        h.before_append();
        h.before_append();
        // Three records later the broker restarts: epoch 1 from 3. Epoch 0 ended at 3.
        let mut h = EpochHistory::open(dir.path(), 1, 3);
        assert_eq!(h.end_offset_for(0, 0, 3), (0, 3));
        assert_eq!(h.end_offset_for(1, 0, 3), (1, 3));
        // Nothing appended in epoch 1; the next start knows no epoch 1 (0 answers for it).
        let h2 = EpochHistory::open(dir.path(), 2, 3);
        assert_eq!(h2.end_offset_for(1, 0, 3), (0, 3));
        h.before_append();
        // Epoch 1 appended to offset 7, then a stop lost the tail from 5: epochs past the end
        // go, and a consumer at 7 in epoch 1 learns that epoch 1 ends at 5.
        let h = EpochHistory::open(dir.path(), 2, 5);
        assert_eq!(h.end_offset_for(1, 0, 5), (1, 5));
        assert_eq!(h.end_offset_for(2, 0, 5), (2, 5));
        // A tail lost back into epoch 0: epoch 1 is gone.
        let h = EpochHistory::open(dir.path(), 3, 2);
        assert_eq!(h.end_offset_for(1, 0, 2), (0, 2));
        assert_eq!(h.end_offset_for(0, 0, 2), (0, 2));
        // The log start clamps where epochs start.
        assert_eq!(h.end_offset_for(-3, 1, 2), (-3, 1));
        // A corrupt checkpoint is a fresh history.
        std::fs::write(dir.path().join(CHECKPOINT_FILE), "garbage").expect("write");
        let h = EpochHistory::open(dir.path(), 4, 2);
        assert_eq!(h.end_offset_for(0, 0, 2), (0, 2));
        assert_eq!(h.end_offset_for(4, 0, 2), (4, 2));
        assert_eq!(h.current(), 4);
    }
}
