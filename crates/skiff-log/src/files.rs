//! Segment files opened on demand, behind a bounded cache of descriptors.
//!
//! A log with many partitions cannot keep a descriptor per segment: 100,000 idle partitions would
//! need 100,000 descriptors. Every segment's file is a [`SegmentFile`]: opened when first used,
//! and closed again when the [`FileCache`] it belongs to holds more open files than its capacity
//! (the least recently used go first, by the CLOCK approximation: a file used since the hand last
//! passed keeps its descriptor one more round). A closed file reopens on its next use.
//!
//! The hot path (a file already open) takes the file's own uncontended lock and sets a flag; the
//! cache's lock is taken only when a file opens. A handle given out (a read in progress, a sync
//! target) keeps its descriptor open until it is dropped, so the count may pass the capacity
//! briefly.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::error::{IoContext, Result};

/// The descriptors of many logs' segment files, bounded; shared by every log of a broker.
pub struct FileCache {
    capacity: usize,
    state: Mutex<ClockState>,
    opened: AtomicUsize,
}

#[derive(Default)]
struct ClockState {
    open: Vec<Weak<Slot>>,
    hand: usize,
}

impl fmt::Debug for FileCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileCache")
            .field("capacity", &self.capacity)
            .field("open", &self.open_files())
            .finish()
    }
}

impl FileCache {
    /// A cache keeping at most `capacity` segment files open (at least 1).
    pub fn new(capacity: usize) -> Arc<FileCache> {
        Arc::new(FileCache {
            capacity: capacity.max(1),
            state: Mutex::new(ClockState::default()),
            opened: AtomicUsize::new(0),
        })
    }

    /// A cache that never closes a file (a single log, tests).
    pub fn unbounded() -> Arc<FileCache> {
        Self::new(usize::MAX)
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Segment files whose descriptor the cache holds now.
    pub fn open_files(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
            .iter()
            .filter(|slot| slot.upgrade().is_some_and(|s| s.is_open()))
            .count()
    }

    /// How many times a segment file was opened (a measure of how often the cache misses).
    pub fn opens(&self) -> usize {
        self.opened.load(Ordering::Relaxed)
    }

    /// Registers a slot that just opened, and closes others while over capacity.
    fn admit(&self, slot: &Arc<Slot>) {
        self.opened.fetch_add(1, Ordering::Relaxed);
        let mut victims = Vec::new();
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.open.push(Arc::downgrade(slot));
            // Each slot is looked at most twice per admission (once to clear its flag).
            let mut budget = state.open.len().saturating_mul(2);
            while state.open.len() > self.capacity && budget > 0 && !state.open.is_empty() {
                budget -= 1;
                let at = state.hand % state.open.len();
                let Some(candidate) = state.open.get(at).and_then(Weak::upgrade) else {
                    state.open.swap_remove(at);
                    continue;
                };
                if Arc::ptr_eq(&candidate, slot)
                    || candidate.referenced.swap(false, Ordering::Relaxed)
                {
                    state.hand = at + 1;
                    continue;
                }
                state.open.swap_remove(at);
                victims.push(candidate);
            }
        }
        // Closed outside the cache's lock (a slot's lock is never taken under it).
        for victim in victims {
            victim.close();
        }
    }
}

/// A file's descriptor, when open.
struct Slot {
    path: PathBuf,
    file: Mutex<Option<Arc<File>>>,
    /// Used since the clock hand last passed.
    referenced: AtomicBool,
}

impl Slot {
    fn is_open(&self) -> bool {
        self.file
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    fn close(&self) {
        *self.file.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// One segment file, open or not; see the module docs.
pub(crate) struct SegmentFile {
    slot: Arc<Slot>,
    cache: Arc<FileCache>,
}

impl fmt::Debug for SegmentFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SegmentFile")
            .field("path", &self.slot.path)
            .field("open", &self.slot.is_open())
            .finish()
    }
}

impl SegmentFile {
    /// Opens (with `create`, creating) the file at `path` now.
    pub(crate) fn open(cache: &Arc<FileCache>, path: &Path, create: bool) -> Result<SegmentFile> {
        let file = Arc::new(open(path, create)?);
        let slot = Arc::new(Slot {
            path: path.to_path_buf(),
            file: Mutex::new(Some(file)),
            // Not yet used: a file opened and then left idle is the first to go.
            referenced: AtomicBool::new(false),
        });
        cache.admit(&slot);
        Ok(SegmentFile {
            slot,
            cache: Arc::clone(cache),
        })
    }

    /// The open file, reopened if the cache had closed it.
    pub(crate) fn get(&self) -> Result<Arc<File>> {
        if let Some(file) = &*self
            .slot
            .file
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            self.slot.referenced.store(true, Ordering::Relaxed);
            return Ok(Arc::clone(file));
        }
        let file = Arc::new(open(&self.slot.path, false)?);
        {
            let mut slot = self
                .slot
                .file
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(open) = &*slot {
                return Ok(Arc::clone(open));
            }
            *slot = Some(Arc::clone(&file));
        }
        self.slot.referenced.store(true, Ordering::Relaxed);
        self.cache.admit(&self.slot);
        Ok(file)
    }

    #[cfg(test)]
    pub(crate) fn is_open(&self) -> bool {
        self.slot.is_open()
    }
}

fn open(path: &Path, create: bool) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .open(path)
        .io("open segment", path)
}

/// The file cache a [`crate::LogConfig`] names; equal when it is the same cache.
#[derive(Clone)]
pub struct FileCacheHandle(pub Arc<FileCache>);

impl Default for FileCacheHandle {
    fn default() -> Self {
        FileCacheHandle(FileCache::unbounded())
    }
}

impl PartialEq for FileCacheHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for FileCacheHandle {}

impl fmt::Debug for FileCacheHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    use super::*;

    #[test]
    fn at_most_capacity_files_stay_open_and_closed_ones_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache::new(3);
        let files: Vec<SegmentFile> = (0..10)
            .map(|i| {
                let path = dir.path().join(format!("{i}.log"));
                let file = SegmentFile::open(&cache, &path, true).expect("open");
                file.get()
                    .expect("get")
                    .write_all_at(&[i as u8; 4], 0)
                    .expect("write");
                file
            })
            .collect();
        assert!(cache.open_files() <= 3, "{} open", cache.open_files());
        assert!(!files[0].is_open(), "the oldest was closed");
        // A closed file reopens with its data, and the cache stays bounded.
        for (i, file) in files.iter().enumerate() {
            let mut buf = [0u8; 4];
            file.get()
                .expect("reopen")
                .read_exact_at(&mut buf, 0)
                .expect("read");
            assert_eq!(buf, [i as u8; 4]);
            assert!(cache.open_files() <= 3);
        }
        assert!(cache.opens() > 10);
    }

    #[test]
    fn a_file_in_use_keeps_its_descriptor_until_its_handle_drops() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache::new(1);
        let a = SegmentFile::open(&cache, &dir.path().join("a.log"), true).expect("open");
        let held = a.get().expect("get");
        let _b = SegmentFile::open(&cache, &dir.path().join("b.log"), true).expect("open");
        assert!(!a.is_open(), "closed in the cache");
        // The handle given out still works.
        (&*held)
            .write_all(b"x")
            .expect("write through the held handle");
    }

    #[test]
    fn recently_used_files_are_kept_over_idle_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache::new(2);
        let hot = SegmentFile::open(&cache, &dir.path().join("hot.log"), true).expect("open");
        for i in 0..20 {
            hot.get().expect("hot");
            let _cold = SegmentFile::open(&cache, &dir.path().join(format!("{i}.log")), true)
                .expect("cold");
            assert!(hot.is_open(), "round {i}: the file in use was closed");
        }
    }
}
