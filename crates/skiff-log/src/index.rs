//! Sparse indexes of a segment, kept in memory and written to a file when the segment is sealed.
//!
//! - offset index (`.index`): `relative offset (u32), position (u32)` per entry, one entry every
//!   `index.interval.bytes` of batches, keyed by the base offset of the batch at `position`;
//! - time index (`.timeindex`): `max timestamp so far (i64), relative offset (u32)`, written at
//!   the same points plus once when the segment is closed, whenever the maximum grew. The offset
//!   is the base offset of the batch holding that maximum, so every batch before it has a max
//!   timestamp no greater than the entry's.
//!
//! No index holds a file descriptor: a partition costs one descriptor (its active segment), not
//! three. The active segment's entries live in memory only (recovery rebuilds them from the log,
//! which it validates anyway); a sealed segment's are written and synced once, when it is sealed
//! or its indexes are rebuilt, and loaded back into memory when the log is opened.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};

/// A fixed-size index entry.
pub(crate) trait Entry: Copy {
    const SIZE: usize;
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(bytes: &[u8]) -> Option<Self>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OffsetEntry {
    pub(crate) relative_offset: u32,
    pub(crate) position: u32,
}

impl Entry for OffsetEntry {
    const SIZE: usize = 8;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
        out.extend_from_slice(&self.position.to_be_bytes());
    }
    fn decode(bytes: &[u8]) -> Option<Self> {
        let (offset, rest) = bytes.split_first_chunk::<4>()?;
        let (position, _) = rest.split_first_chunk::<4>()?;
        Some(Self {
            relative_offset: u32::from_be_bytes(*offset),
            position: u32::from_be_bytes(*position),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeEntry {
    pub(crate) timestamp: i64,
    pub(crate) relative_offset: u32,
}

impl Entry for TimeEntry {
    const SIZE: usize = 12;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
    }
    fn decode(bytes: &[u8]) -> Option<Self> {
        let (timestamp, rest) = bytes.split_first_chunk::<8>()?;
        let (offset, _) = rest.split_first_chunk::<4>()?;
        Some(Self {
            timestamp: i64::from_be_bytes(*timestamp),
            relative_offset: u32::from_be_bytes(*offset),
        })
    }
}

/// One index: entries in memory, written to `path` on [`Index::persist`].
#[derive(Debug)]
pub(crate) struct Index<E: Entry> {
    path: PathBuf,
    entries: Vec<E>,
}

impl<E: Entry> Index<E> {
    /// Loads the index at `path` if it exists, has whole entries and passes `consistent`.
    /// `Ok(None)` tells the caller to rebuild it.
    pub(crate) fn load(path: &Path, consistent: impl Fn(&[E]) -> bool) -> Result<Option<Self>> {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err).io("read index", path),
        };
        if bytes.len() % E::SIZE != 0 {
            return Ok(None);
        }
        let entries: Option<Vec<E>> = bytes.chunks_exact(E::SIZE).map(E::decode).collect();
        let Some(entries) = entries else {
            return Ok(None);
        };
        if !consistent(&entries) {
            return Ok(None);
        }
        Ok(Some(Self {
            path: path.to_path_buf(),
            entries,
        }))
    }

    /// Replaces whatever is at `path` with `entries` (not synced: see [`Index::persist`]).
    pub(crate) fn rewrite(path: &Path, entries: Vec<E>) -> Result<Self> {
        let index = Self {
            path: path.to_path_buf(),
            entries,
        };
        index.write(false)?;
        Ok(index)
    }

    /// An index of `entries` that lives in memory until [`Index::persist`] (the active
    /// segment's: whatever a file held would be rebuilt at the next open anyway).
    pub(crate) fn in_memory(path: &Path, entries: Vec<E>) -> Self {
        Self {
            path: path.to_path_buf(),
            entries,
        }
    }

    fn write(&self, sync: bool) -> Result<()> {
        let mut bytes = Vec::with_capacity(self.entries.len() * E::SIZE);
        for entry in &self.entries {
            entry.encode(&mut bytes);
        }
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&self.path)
            .io("create index", &self.path)?;
        file.write_all(&bytes).io("write index", &self.path)?;
        if sync {
            file.sync_data().io("fsync index", &self.path)?;
        }
        Ok(())
    }

    pub(crate) fn append(&mut self, entry: E) {
        self.entries.push(entry);
    }

    #[cfg(test)]
    pub(crate) fn entries(&self) -> &[E] {
        &self.entries
    }

    pub(crate) fn last(&self) -> Option<&E> {
        self.entries.last()
    }

    /// Writes every entry to the file and syncs it (when the segment is sealed).
    pub(crate) fn persist(&self) -> Result<()> {
        self.write(true)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Index<OffsetEntry> {
    /// Position of the last indexed batch whose base offset is at most `relative_offset`
    /// (0 when none is: scan from the segment start).
    #[cfg(test)]
    pub(crate) fn position_for(&self, relative_offset: u32) -> u32 {
        self.entry_for(relative_offset)
            .map_or(0, |entry| entry.position)
    }

    /// The last entry whose batch's base offset is at most `relative_offset`.
    pub(crate) fn entry_for(&self, relative_offset: u32) -> Option<&OffsetEntry> {
        let after = self
            .entries
            .partition_point(|entry| entry.relative_offset <= relative_offset);
        after.checked_sub(1).and_then(|at| self.entries.get(at))
    }
}

impl Index<TimeEntry> {
    /// Relative offset of the last entry with a timestamp strictly below `timestamp`: every batch
    /// before it is older than `timestamp`, so a search may start there.
    pub(crate) fn start_offset_for(&self, timestamp: i64) -> Option<u32> {
        let after = self
            .entries
            .partition_point(|entry| entry.timestamp < timestamp);
        after
            .checked_sub(1)
            .and_then(|at| self.entries.get(at))
            .map(|entry| entry.relative_offset)
    }
}

/// Offset-index entries must grow strictly in both fields and stay inside the segment.
pub(crate) fn offset_index_consistent(
    entries: &[OffsetEntry],
    segment_size: u64,
    max_relative_offset: Option<u32>,
) -> bool {
    let ordered = entries.windows(2).all(|pair| match pair {
        [a, b] => a.relative_offset < b.relative_offset && a.position < b.position,
        _ => true,
    });
    let inside = entries.last().is_none_or(|last| {
        u64::from(last.position) < segment_size
            && max_relative_offset.is_none_or(|max| last.relative_offset <= max)
    });
    ordered && inside
}

/// Time-index entries must not go backwards in either field.
pub(crate) fn time_index_consistent(
    entries: &[TimeEntry],
    max_relative_offset: Option<u32>,
) -> bool {
    let ordered = entries.windows(2).all(|pair| match pair {
        [a, b] => a.timestamp < b.timestamp && a.relative_offset <= b.relative_offset,
        _ => true,
    });
    let inside = entries
        .last()
        .is_none_or(|last| max_relative_offset.is_none_or(|max| last.relative_offset <= max));
    ordered && inside
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_pick_the_floor_entry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.index");
        let mut index = Index::<OffsetEntry>::rewrite(&path, Vec::new()).unwrap();
        assert_eq!(index.position_for(5), 0);
        for (relative_offset, position) in [(10, 4100), (20, 8300), (35, 12_500)] {
            index.append(OffsetEntry {
                relative_offset,
                position,
            });
        }
        assert_eq!(index.position_for(9), 0);
        assert_eq!(index.position_for(10), 4100);
        assert_eq!(index.position_for(34), 8300);
        assert_eq!(index.position_for(1000), 12_500);

        // Appends stay in memory until the index is persisted (when its segment is sealed).
        assert_eq!(fs::metadata(&path).unwrap().len(), 0);
        index.persist().unwrap();
        let loaded =
            Index::<OffsetEntry>::load(&path, |e| offset_index_consistent(e, 20_000, None))
                .unwrap()
                .unwrap();
        assert_eq!(loaded.entries(), index.entries());
        // A position beyond the segment makes the index untrustworthy.
        assert!(
            Index::<OffsetEntry>::load(&path, |e| offset_index_consistent(e, 10_000, None))
                .unwrap()
                .is_none()
        );
        // A torn entry too.
        fs::write(&path, [0u8; 11]).unwrap();
        assert!(
            Index::<OffsetEntry>::load(&path, |_| true)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn time_lookup_is_strictly_below() {
        let dir = tempfile::tempdir().unwrap();
        let entries = vec![
            TimeEntry {
                timestamp: 100,
                relative_offset: 3,
            },
            TimeEntry {
                timestamp: 200,
                relative_offset: 9,
            },
        ];
        let index = Index::rewrite(&dir.path().join("0.timeindex"), entries).unwrap();
        assert_eq!(index.start_offset_for(50), None);
        assert_eq!(index.start_offset_for(100), None);
        assert_eq!(index.start_offset_for(101), Some(3));
        assert_eq!(index.start_offset_for(500), Some(9));
    }
}
