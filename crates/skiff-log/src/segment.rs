//! One segment: a `.log` file of whole batches plus its two sparse indexes.

use std::fs::{self, File};
use std::io::{ErrorKind, IoSlice};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use skiff_records::{BATCH_HEADER_LEN, BatchHeader, Compression, RecordBatch, TimestampType};

use crate::error::{IoContext, LogError, Result};
use crate::files::{FileCache, SegmentFile};
use crate::index::{Index, OffsetEntry, TimeEntry, offset_index_consistent, time_index_consistent};

pub(crate) const LOG_SUFFIX: &str = "log";
pub(crate) const INDEX_SUFFIX: &str = "index";
pub(crate) const TIME_INDEX_SUFFIX: &str = "timeindex";

/// Where a batch's magic byte is, and the only value a v2 batch has there.
const MAGIC_POSITION: usize = 16;
const MAGIC_V2_BYTE: u8 = 2;

/// Recovery reads segments in windows of this size instead of one syscall per batch.
const SCAN_WINDOW: usize = 1 << 20;

/// Linux's `UIO_MAXIOV`: the most slices one `pwritev` accepts.
const MAX_IOV: usize = 1024;

/// Writes every byte of `parts` at `offset` with `pwritev`, retrying short writes and `EINTR`.
///
/// Appends hand the producer's batch bytes straight to the kernel with only the rewritten
/// header prefixes as separate slices, so a produced record set is never copied in user space.
fn write_all_vectored_at(
    file: &File,
    parts: &mut [IoSlice<'_>],
    offset: u64,
) -> std::io::Result<()> {
    let mut parts = parts;
    let mut offset = offset;
    IoSlice::advance_slices(&mut parts, 0);
    while !parts.is_empty() {
        let window = parts.get(..parts.len().min(MAX_IOV)).unwrap_or(&[]);
        match rustix::io::pwritev(file, window, offset) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(written) => {
                offset += written as u64;
                IoSlice::advance_slices(&mut parts, written);
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

/// ENOSPC or EDQUOT: the file system refused more bytes, nothing went wrong with those written.
fn is_out_of_space(e: &std::io::Error) -> bool {
    e.raw_os_error().is_some_and(|code| {
        code == rustix::io::Errno::NOSPC.raw_os_error()
            || code == rustix::io::Errno::DQUOT.raw_os_error()
    })
}

/// Reads exactly `len` bytes at `offset` into a fresh buffer that is never zero-filled first
/// (a fetch of many megabytes would otherwise pay for clearing pages it then overwrites).
fn read_exact_at_uninit(file: &File, len: usize, offset: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len);
    while buf.len() < len {
        let at = offset + buf.len() as u64;
        match rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buf), at) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(err) => return Err(err.into()),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// `00000000000000000042.log`: 20 digits, like Kafka, so names sort by offset.
pub(crate) fn file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}.{suffix}")
}

/// Parses a segment file name back into its base offset.
pub(crate) fn parse_file_name(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?.strip_suffix('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// Decides where sparse index entries go; shared by appends and index rebuilds so both produce
/// identical indexes.
#[derive(Debug, Clone, Default)]
struct IndexTracker {
    bytes_since_entry: u64,
    max_timestamp: Option<i64>,
    offset_of_max_timestamp: i64,
}

impl IndexTracker {
    fn observe(
        &mut self,
        segment_base: i64,
        header: &BatchHeader,
        position: u32,
        interval: u64,
        last_time_entry: Option<i64>,
    ) -> (Option<OffsetEntry>, Option<TimeEntry>) {
        if self
            .max_timestamp
            .is_none_or(|max| header.max_timestamp > max)
        {
            self.max_timestamp = Some(header.max_timestamp);
            self.offset_of_max_timestamp = header.base_offset;
        }
        let mut entries = (None, None);
        if self.bytes_since_entry > interval {
            entries.0 = Some(OffsetEntry {
                relative_offset: relative(segment_base, header.base_offset),
                position,
            });
            entries.1 = self.time_entry(segment_base, last_time_entry);
            self.bytes_since_entry = 0;
        }
        self.bytes_since_entry += header.total_len() as u64;
        entries
    }

    /// A time-index entry for the maximum so far, if it grew since `last_time_entry`.
    fn time_entry(&self, segment_base: i64, last_time_entry: Option<i64>) -> Option<TimeEntry> {
        let max = self.max_timestamp?;
        last_time_entry
            .is_none_or(|last| max > last)
            .then(|| TimeEntry {
                timestamp: max,
                relative_offset: relative(segment_base, self.offset_of_max_timestamp),
            })
    }
}

/// Offset relative to the segment base. Appends roll before a relative offset would pass
/// `i32::MAX`, so the clamp never triggers on a log this crate wrote.
fn relative(segment_base: i64, offset: i64) -> u32 {
    u32::try_from(
        offset
            .saturating_sub(segment_base)
            .clamp(0, i64::from(i32::MAX)),
    )
    .unwrap_or(0)
}

/// How a scan of a segment ended.
pub(crate) enum ScanEnd {
    Clean,
    Invalid { position: u64, reason: String },
}

/// Reads a segment sequentially in large windows.
struct WindowReader<'a> {
    file: &'a File,
    path: &'a Path,
    len: u64,
    window_start: u64,
    window: Vec<u8>,
}

impl<'a> WindowReader<'a> {
    fn new(file: &'a File, path: &'a Path, len: u64) -> Self {
        Self {
            file,
            path,
            len,
            window_start: 0,
            window: Vec::new(),
        }
    }

    /// The bytes `[position, position + need)`; the caller checked they are inside the file,
    /// so `need` is bounded by the file size, not by a length field.
    fn bytes(&mut self, position: u64, need: usize) -> Result<&[u8]> {
        let end = position + need as u64;
        let inside =
            position >= self.window_start && end <= self.window_start + self.window.len() as u64;
        if !inside {
            let available =
                usize::try_from(self.len.saturating_sub(position)).unwrap_or(usize::MAX);
            let read_len = need.max(SCAN_WINDOW).min(available);
            self.window.resize(read_len, 0);
            self.file
                .read_exact_at(&mut self.window, position)
                .io("read segment", self.path)?;
            self.window_start = position;
        }
        let from = usize::try_from(position - self.window_start).unwrap_or(usize::MAX);
        self.window
            .get(from..from.saturating_add(need))
            .ok_or_else(|| LogError::Corrupt {
                path: self.path.to_path_buf(),
                position,
                reason: "short read".into(),
            })
    }
}

/// A segment and its indexes. Holds only whole batches (recovery cuts anything else).
#[derive(Debug)]
pub(crate) struct Segment {
    base_offset: i64,
    log_path: PathBuf,
    /// Opened on demand behind the log's [`FileCache`]; handles given out are shared with sync
    /// targets, so a group commit needs no new descriptor.
    log: SegmentFile,
    size: u64,
    /// Offset after the last batch (`base_offset` when empty).
    next_offset: i64,
    offset_index: Index<OffsetEntry>,
    time_index: Index<TimeEntry>,
    tracker: IndexTracker,
    /// When the segment received its first batch (for `segment.ms`).
    created_at_ms: Option<i64>,
}

impl Segment {
    fn paths(dir: &Path, base_offset: i64) -> [PathBuf; 3] {
        [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX].map(|s| dir.join(file_name(base_offset, s)))
    }

    fn open_log_file(files: &Arc<FileCache>, path: &Path, create: bool) -> Result<SegmentFile> {
        SegmentFile::open(files, path, create)
    }

    /// Creates an empty segment (replacing stale files of the same name).
    pub(crate) fn create(files: &Arc<FileCache>, dir: &Path, base_offset: i64) -> Result<Self> {
        let [log_path, index_path, time_path] = Self::paths(dir, base_offset);
        let log = Self::open_log_file(files, &log_path, true)?;
        log.get()?.set_len(0).io("truncate segment", &log_path)?;
        Ok(Self {
            base_offset,
            log_path,
            log,
            size: 0,
            next_offset: base_offset,
            offset_index: Index::in_memory(&index_path, Vec::new()),
            time_index: Index::in_memory(&time_path, Vec::new()),
            tracker: IndexTracker::default(),
            created_at_ms: None,
        })
    }

    /// Opens a segment that is not the last one: trusted by size; indexes are loaded, or rebuilt
    /// from batch headers when missing or inconsistent. `next_offset` is the next segment's base.
    pub(crate) fn open_sealed(
        files: &Arc<FileCache>,
        dir: &Path,
        base_offset: i64,
        next_offset: i64,
        interval: u64,
    ) -> Result<Self> {
        let [log_path, index_path, time_path] = Self::paths(dir, base_offset);
        let log = Self::open_log_file(files, &log_path, false)?;
        let size = log.get()?.metadata().io("stat segment", &log_path)?.len();
        let max_relative = u32::try_from(next_offset.saturating_sub(base_offset)).ok();
        let offset_index = Index::load(&index_path, |e| {
            offset_index_consistent(e, size, max_relative)
        })?;
        let time_index = Index::load(&time_path, |e| time_index_consistent(e, max_relative))?
            .filter(|index| size == 0 || index.last().is_some());
        let mut segment = match (offset_index, time_index) {
            (Some(offset_index), Some(time_index)) => Self {
                base_offset,
                log_path,
                log,
                size,
                next_offset,
                offset_index,
                time_index,
                tracker: IndexTracker::default(),
                created_at_ms: None,
            },
            _ => {
                tracing::info!(segment = %log_path.display(), "rebuilding indexes of sealed segment");
                let mut segment = Self::rebuild(log, log_path, base_offset, size, interval, false)?;
                if let ScanEnd::Invalid { position, reason } = segment.1 {
                    return Err(LogError::Corrupt {
                        path: segment.0.log_path,
                        position,
                        reason,
                    });
                }
                segment.0.close_time_index()?;
                segment.0
            }
        };
        segment.check_ends(next_offset)?;
        segment.next_offset = next_offset;
        if let Some(last) = segment.time_index.last() {
            segment.tracker.max_timestamp = Some(last.timestamp);
            segment.tracker.offset_of_max_timestamp =
                base_offset.saturating_add(i64::from(last.relative_offset));
        }
        Ok(segment)
    }

    /// Cheap checks of a sealed segment trusted by size: its first batch starts at its base
    /// offset, the batch at its last index entry has the base offset the entry says, and the
    /// batches from there to the end are contiguous and end where the next segment begins.
    fn check_ends(&self, next_offset: i64) -> Result<()> {
        if self.size == 0 {
            return Ok(());
        }
        let first = self.header_at(0)?;
        if first.base_offset != self.base_offset {
            return Err(self.corrupt(
                0,
                format!(
                    "first batch starts at offset {} in the segment of base offset {}",
                    first.base_offset, self.base_offset
                ),
            ));
        }
        let (position, expected) = match self.offset_index.last() {
            Some(entry) => (
                u64::from(entry.position),
                self.base_offset
                    .saturating_add(i64::from(entry.relative_offset)),
            ),
            None => (0, self.base_offset),
        };
        let mut end = expected;
        for found in self.headers_from(position, expected) {
            end = found?.1.next_offset();
        }
        if end != next_offset {
            return Err(self.corrupt(
                self.size,
                format!("the segment ends at offset {end}, the next one begins at {next_offset}"),
            ));
        }
        Ok(())
    }

    /// Opens the last segment, validating every batch (length, magic, CRC, contiguous offsets)
    /// and rebuilding both indexes. Returns where validation stopped if it did not reach the end;
    /// the caller decides whether to truncate there.
    pub(crate) fn open_active(
        files: &Arc<FileCache>,
        dir: &Path,
        base_offset: i64,
        interval: u64,
    ) -> Result<(Self, ScanEnd)> {
        let [log_path, ..] = Self::paths(dir, base_offset);
        let log = Self::open_log_file(files, &log_path, false)?;
        let size = log.get()?.metadata().io("stat segment", &log_path)?.len();
        Self::rebuild(log, log_path, base_offset, size, interval, true)
    }

    /// Scans `size` bytes of `log`, building fresh indexes over the valid prefix.
    fn rebuild(
        log: SegmentFile,
        log_path: PathBuf,
        base_offset: i64,
        size: u64,
        interval: u64,
        verify: bool,
    ) -> Result<(Self, ScanEnd)> {
        let mut tracker = IndexTracker::default();
        let mut offset_entries = Vec::new();
        let mut time_entries: Vec<TimeEntry> = Vec::new();
        let mut first_timestamp = None;
        let file = log.get()?;
        let (valid_size, next_offset, end) = scan(
            &file,
            &log_path,
            size,
            base_offset,
            verify,
            |header, position| {
                first_timestamp.get_or_insert(header.max_timestamp);
                let last_time = time_entries.last().map(|entry| entry.timestamp);
                let (offset_entry, time_entry) =
                    tracker.observe(base_offset, header, position, interval, last_time);
                offset_entries.extend(offset_entry);
                time_entries.extend(time_entry);
            },
        )?;
        let dir = log_path.parent().unwrap_or(Path::new("."));
        let [_, index_path, time_path] = Self::paths(dir, base_offset);
        let segment = Self {
            base_offset,
            log_path,
            log,
            size: valid_size,
            next_offset,
            // The last segment's indexes stay in memory until it is sealed; a sealed segment's
            // rebuilt ones are written at once.
            offset_index: if verify {
                Index::in_memory(&index_path, offset_entries)
            } else {
                Index::rewrite(&index_path, offset_entries)?
            },
            time_index: if verify {
                Index::in_memory(&time_path, time_entries)
            } else {
                Index::rewrite(&time_path, time_entries)?
            },
            tracker,
            created_at_ms: first_timestamp,
        };
        Ok((segment, end))
    }

    /// Where the first whole, CRC-valid batch after the damage at `position` starts, if any:
    /// then the damage is not a torn tail (a crash tears only what was written last), and
    /// cutting there would drop valid, acknowledged batches.
    pub(crate) fn valid_batch_after(&self, position: u64) -> Result<Option<u64>> {
        let file = self.log.get()?;
        let len = file.metadata().io("stat segment", &self.log_path)?.len();
        let mut reader = WindowReader::new(&file, &self.log_path, len);
        let mut at = position.saturating_add(1);
        while at.saturating_add(BATCH_HEADER_LEN as u64) <= len {
            let header = reader.bytes(at, BATCH_HEADER_LEN)?;
            if header.get(MAGIC_POSITION) == Some(&MAGIC_V2_BYTE)
                && let Ok(parsed) = BatchHeader::parse(header)
            {
                let total = parsed.total_len() as u64;
                if at.saturating_add(total) <= len
                    && BatchHeader::parse_validated(reader.bytes(at, total as usize)?).is_ok()
                {
                    return Ok(Some(at));
                }
            }
            at += 1;
        }
        Ok(None)
    }

    /// Cuts the file after the valid prefix found by recovery and makes the cut durable.
    pub(crate) fn truncate_to_valid(&mut self) -> Result<()> {
        let file = self.log.get()?;
        file.set_len(self.size)
            .io("truncate segment", &self.log_path)?;
        file.sync_all().io("fsync segment", &self.log_path)
    }

    pub(crate) fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub(crate) fn next_offset(&self) -> i64 {
        self.next_offset
    }
    pub(crate) fn size(&self) -> u64 {
        self.size
    }
    pub(crate) fn path(&self) -> &Path {
        &self.log_path
    }
    pub(crate) fn created_at_ms(&self) -> Option<i64> {
        self.created_at_ms
    }
    /// Largest batch max timestamp and the base offset of the batch holding it.
    pub(crate) fn max_timestamp(&self) -> Option<(i64, i64)> {
        self.tracker
            .max_timestamp
            .map(|max| (max, self.tracker.offset_of_max_timestamp))
    }
    /// The segment file (opened again if the file cache had closed it), shared: for syncing
    /// outside the log's lock, it stays open while the handle lives.
    pub(crate) fn file(&self) -> Result<Arc<File>> {
        self.log.get()
    }

    /// Appends already validated batches: `parts` hold their bytes in order (any split) and
    /// `headers` describe them.
    pub(crate) fn append(
        &mut self,
        parts: &mut [IoSlice<'_>],
        headers: &[BatchHeader],
        interval: u64,
        now_ms: i64,
    ) -> Result<()> {
        let file = self.log.get()?;
        let written = crate::faults::check(crate::faults::Fault::Write, &self.log_path)
            .and_then(|()| write_all_vectored_at(&file, parts, self.size));
        if let Err(e) = written {
            // A full disk (or quota) leaves at most part of this append past the end: cut it off
            // and the log carries on (the request fails, nothing acknowledged is touched). Any
            // other failure, or a cut that fails, leaves the file in doubt: the log goes offline.
            if is_out_of_space(&e) && file.set_len(self.size).is_ok() {
                return Err(LogError::Io {
                    op: "write segment",
                    path: self.log_path.clone(),
                    source: e,
                });
            }
            return Err(LogError::WriteFailed(Arc::new(e)));
        }
        let mut position = self.size;
        for header in headers {
            let at = u32::try_from(position).map_err(|_| LogError::Corrupt {
                path: self.log_path.clone(),
                position,
                reason: "segment position exceeds u32".into(),
            })?;
            let last_time = self.time_index.last().map(|entry| entry.timestamp);
            let (offset_entry, time_entry) =
                self.tracker
                    .observe(self.base_offset, header, at, interval, last_time);
            if let Some(entry) = offset_entry {
                self.offset_index.append(entry);
            }
            if let Some(entry) = time_entry {
                self.time_index.append(entry);
            }
            position += header.total_len() as u64;
            self.next_offset = header.next_offset();
        }
        self.size = position;
        self.created_at_ms.get_or_insert(now_ms);
        Ok(())
    }

    /// Records the final maximum timestamp in the time index so a reopened sealed segment
    /// knows it without a scan.
    fn close_time_index(&mut self) -> Result<()> {
        let last_time = self.time_index.last().map(|entry| entry.timestamp);
        if let Some(entry) = self.tracker.time_entry(self.base_offset, last_time) {
            self.time_index.append(entry);
        }
        Ok(())
    }

    /// Seals the segment before a roll: final time-index entry, then data and indexes synced.
    pub(crate) fn seal(&mut self) -> Result<()> {
        self.close_time_index()?;
        let file = self.log.get()?;
        crate::faults::check(crate::faults::Fault::Sync, &self.log_path)
            .and_then(|()| file.sync_data())
            .map_err(|e| LogError::SyncFailed(Arc::new(e)))?;
        self.offset_index.persist()?;
        self.time_index.persist()
    }

    /// Removes the segment's files.
    pub(crate) fn delete_files(&self) -> Result<()> {
        for path in [
            self.log_path.as_path(),
            self.offset_index.path(),
            self.time_index.path(),
        ] {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(err) if err.kind() == ErrorKind::NotFound => {}
                Err(err) => return Err(err).io("delete segment file", path),
            }
        }
        Ok(())
    }

    fn corrupt(&self, position: u64, reason: impl Into<String>) -> LogError {
        LogError::Corrupt {
            path: self.log_path.clone(),
            position,
            reason: reason.into(),
        }
    }

    /// Reads and parses the batch header at `position` (a batch boundary).
    pub(crate) fn header_at(&self, position: u64) -> Result<BatchHeader> {
        let available = self
            .size
            .saturating_sub(position)
            .min(BATCH_HEADER_LEN as u64);
        let mut buf = [0u8; BATCH_HEADER_LEN];
        let slot = buf
            .get_mut(..available as usize)
            .ok_or_else(|| self.corrupt(position, "header read"))?;
        self.log
            .get()?
            .read_exact_at(slot, position)
            .io("read segment", &self.log_path)?;
        let header =
            BatchHeader::parse(slot).map_err(|err| self.corrupt(position, err.to_string()))?;
        if position + header.total_len() as u64 > self.size {
            return Err(self.corrupt(position, "batch extends past segment end"));
        }
        Ok(header)
    }

    /// Position and header of the first batch whose last offset is at least `offset`. The walk
    /// starts at the index entry for `offset` and checks that the batch there has the base
    /// offset the index says and that each next one starts where the previous ended.
    pub(crate) fn find(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        let (position, expected) = match self
            .offset_index
            .entry_for(relative(self.base_offset, offset))
        {
            Some(entry) => (
                u64::from(entry.position),
                self.base_offset
                    .saturating_add(i64::from(entry.relative_offset)),
            ),
            None => (0, self.base_offset),
        };
        for found in self.headers_from(position, expected) {
            let (position, header) = found?;
            if header.last_offset() >= offset {
                return Ok(Some((position, header)));
            }
        }
        Ok(None)
    }

    /// The batch headers from `position` (a batch boundary whose batch must start at offset
    /// `expected`) to the end, each checked to start where the previous one ended: a batch whose
    /// base offset breaks the sequence makes the segment corrupt, never skipped or served.
    pub(crate) fn headers_from(&self, position: u64, expected: i64) -> HeaderWalk<'_> {
        HeaderWalk {
            segment: self,
            position,
            expected,
            failed: false,
        }
    }

    /// Whole batches starting at `position`: as many as fit in `max_bytes`, but at least the first.
    pub(crate) fn read_from(
        &self,
        position: u64,
        first: &BatchHeader,
        max_bytes: usize,
    ) -> Result<Bytes> {
        let available = self.size.saturating_sub(position);
        let want = (max_bytes.max(first.total_len()) as u64).min(available);
        let file = self.log.get()?;
        let mut buf = read_exact_at_uninit(&file, usize::try_from(want).unwrap_or(0), position)
            .io("read segment", &self.log_path)?;
        // Whole batches only, each starting where the previous ended: the read stops before a
        // batch that breaks the sequence (the next read, starting there, reports it).
        let mut cut = 0usize;
        let mut expected = first.base_offset;
        while let Some(rest) = buf.get(cut..) {
            match BatchHeader::parse(rest) {
                Ok(header)
                    if header.total_len() <= rest.len() && header.base_offset == expected =>
                {
                    cut += header.total_len();
                    expected = header.next_offset();
                }
                _ => break,
            }
        }
        if cut == 0 {
            return Err(self.corrupt(position, "no whole batch at read position"));
        }
        buf.truncate(cut);
        Ok(Bytes::from(buf))
    }

    fn read_batch(&self, position: u64, header: &BatchHeader) -> Result<RecordBatch> {
        let bytes = self.read_from(position, header, 0)?;
        RecordBatch::parse(bytes).map_err(|err| self.corrupt(position, err.to_string()))
    }

    /// First record at or after `min_offset` with a timestamp of at least `timestamp`:
    /// `(offset, timestamp)`. Exact for uncompressed batches; for compressed ones the batch's
    /// base offset and max timestamp (records are not decompressed here).
    pub(crate) fn find_by_timestamp(
        &self,
        timestamp: i64,
        min_offset: i64,
    ) -> Result<Option<(i64, i64)>> {
        let start = self
            .time_index
            .start_offset_for(timestamp)
            .map_or(self.base_offset, |rel| {
                self.base_offset.saturating_add(i64::from(rel))
            })
            .max(min_offset);
        let Some((position, first)) = self.find(start)? else {
            return Ok(None);
        };
        for found in self.headers_from(position, first.base_offset) {
            let (position, header) = found?;
            if header.max_timestamp >= timestamp
                && header.last_offset() >= min_offset
                && let Some(found) =
                    self.exact_record(position, &header, min_offset, |ts| ts >= timestamp)?
            {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The record of the batch at `position` matching `wanted`, refined to the exact record when
    /// the batch is uncompressed create-time.
    pub(crate) fn exact_record(
        &self,
        position: u64,
        header: &BatchHeader,
        min_offset: i64,
        wanted: impl Fn(i64) -> bool,
    ) -> Result<Option<(i64, i64)>> {
        let coarse = (header.base_offset.max(min_offset), header.max_timestamp);
        if header.compression() != Compression::None
            || header.timestamp_type() == TimestampType::LogAppendTime
        {
            return Ok(Some(coarse));
        }
        let batch = self.read_batch(position, header)?;
        let records = batch
            .records()
            .map_err(|err| self.corrupt(position, err.to_string()))?;
        for record in records {
            let record = record.map_err(|err| self.corrupt(position, err.to_string()))?;
            if record.offset >= min_offset && wanted(record.timestamp) {
                return Ok(Some((record.offset, record.timestamp)));
            }
        }
        Ok(None)
    }

    /// Position and header of the batch with base offset `base_offset`.
    pub(crate) fn batch_at_offset(&self, base_offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        Ok(self
            .find(base_offset)?
            .filter(|(_, header)| header.base_offset <= base_offset))
    }
}

/// See [`Segment::headers_from`].
pub(crate) struct HeaderWalk<'a> {
    segment: &'a Segment,
    position: u64,
    expected: i64,
    failed: bool,
}

impl Iterator for HeaderWalk<'_> {
    type Item = Result<(u64, BatchHeader)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.position >= self.segment.size {
            return None;
        }
        let position = self.position;
        let header = match self.segment.header_at(position) {
            Ok(header) => header,
            Err(err) => {
                self.failed = true;
                return Some(Err(err));
            }
        };
        if header.base_offset != self.expected {
            self.failed = true;
            return Some(Err(self.segment.corrupt(
                position,
                format!(
                    "batch base offset {} where {} was expected (offsets must be contiguous)",
                    header.base_offset, self.expected
                ),
            )));
        }
        self.expected = header.next_offset();
        self.position += header.total_len() as u64;
        Some(Ok((position, header)))
    }
}

/// Walks the batches of a segment file from the start, calling `on_batch` for each valid one.
/// Returns the valid size, the offset after the last valid batch, and how the walk ended.
fn scan(
    file: &File,
    path: &Path,
    len: u64,
    base_offset: i64,
    verify: bool,
    mut on_batch: impl FnMut(&BatchHeader, u32),
) -> Result<(u64, i64, ScanEnd)> {
    let mut reader = WindowReader::new(file, path, len);
    let mut position = 0u64;
    let mut next_offset = base_offset;
    let invalid = |position, reason: String| ScanEnd::Invalid { position, reason };
    while position < len {
        let remaining = len - position;
        let header_len = remaining.min(BATCH_HEADER_LEN as u64) as usize;
        let header = match BatchHeader::parse(reader.bytes(position, header_len)?) {
            Ok(header) => header,
            Err(err) => return Ok((position, next_offset, invalid(position, err.to_string()))),
        };
        let total = header.total_len();
        if total as u64 > remaining {
            let reason = format!("batch of {total} bytes extends past the end ({remaining} left)");
            return Ok((position, next_offset, invalid(position, reason)));
        }
        let Ok(at) = u32::try_from(position) else {
            return Ok((
                position,
                next_offset,
                invalid(position, "position exceeds u32".into()),
            ));
        };
        // Offsets are contiguous in every segment, sealed or not.
        if header.base_offset != next_offset {
            let reason = format!(
                "batch base offset {} where {next_offset} was expected",
                header.base_offset
            );
            return Ok((position, next_offset, invalid(position, reason)));
        }
        if verify {
            if let Err(err) = BatchHeader::parse_validated(reader.bytes(position, total)?) {
                return Ok((position, next_offset, invalid(position, err.to_string())));
            }
            if header.last_offset().saturating_sub(base_offset) > i64::from(i32::MAX) {
                let reason = "relative offset exceeds i32".to_string();
                return Ok((position, next_offset, invalid(position, reason)));
            }
        }
        on_batch(&header, at);
        next_offset = header.next_offset();
        position += total as u64;
    }
    Ok((position, next_offset, ScanEnd::Clean))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip() {
        assert_eq!(file_name(42, LOG_SUFFIX), "00000000000000000042.log");
        assert_eq!(
            parse_file_name("00000000000000000042.log", LOG_SUFFIX),
            Some(42)
        );
        assert_eq!(
            parse_file_name("00000000000000000042.index", LOG_SUFFIX),
            None
        );
        assert_eq!(parse_file_name("42.log", LOG_SUFFIX), None);
        assert_eq!(
            parse_file_name("0000000000000000004x.log", LOG_SUFFIX),
            None
        );
    }

    #[test]
    fn vectored_positional_writes_and_unzeroed_reads() {
        let dir = tempfile::tempdir().unwrap();
        let file = fs::OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(dir.path().join("f"))
            .unwrap();
        // Empty slices are skipped; more slices than one call takes are written in windows.
        let pieces: Vec<[u8; 1]> = (0..3_000u32).map(|i| [(i % 251) as u8]).collect();
        let mut parts: Vec<IoSlice<'_>> = std::iter::once(IoSlice::new(&[]))
            .chain(pieces.iter().map(|p| IoSlice::new(p)))
            .chain(std::iter::once(IoSlice::new(&[])))
            .collect();
        write_all_vectored_at(&file, &mut parts, 5).unwrap();
        let mut none: [IoSlice<'_>; 0] = [];
        write_all_vectored_at(&file, &mut none, 0).unwrap();

        let read = read_exact_at_uninit(&file, 3_000, 5).unwrap();
        let expected: Vec<u8> = pieces.iter().map(|p| p[0]).collect();
        assert_eq!(read, expected);
        assert_eq!(read_exact_at_uninit(&file, 0, 0).unwrap(), Vec::<u8>::new());
        // The 5 bytes before the write are a hole (zeros); reading past the end is an error.
        assert_eq!(read_exact_at_uninit(&file, 5, 0).unwrap(), vec![0; 5]);
        let past_end = read_exact_at_uninit(&file, 10, 3_000).unwrap_err();
        assert_eq!(past_end.kind(), ErrorKind::UnexpectedEof);
    }
}
