//! The client-instance journal: what happened to each client instance, in order, with times —
//! its connections opening and closing (and why), the software it named, its KIP-1313
//! rejections, its group joins, leaves, fences, rejoins and assignments, the producer IDs it
//! was given or lost, its transactions' ends, its telemetry subscriptions and terminating
//! pushes, and its throttling. `GET /clients/{id}/events` and `skiff clients events` read it.
//!
//! This module owns the journal's shared handle ([`ClientJournal`]) and its I/O: the clock,
//! the file under `data.dir` (loaded at start, appended by [`write_loop`], rewritten when it
//! reaches twice the bound, flushed at shutdown) and the signal readers wait on for new
//! events. The journal itself is plain data with pure rules ([`events`]); the file format is
//! [`file`]. Each broker keeps its own journal (in cluster mode too).

pub mod events;
pub mod file;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use skiff_protocol::Uuid;
use tokio::sync::watch;

use crate::shutdown::stopped;
use events::Journal;
pub use events::{Bounds, DisconnectReason, Event, EventKind, Heartbeat, IdentifiedBy, clip};

/// How often new events are appended to the file.
const WRITE_EVERY: Duration = Duration::from_millis(500);

/// The most bytes of the file read at start per event the journal may hold (lines are
/// bounded: every text from a peer is clipped).
const FILE_BYTES_PER_EVENT: u64 = 4096;

/// Events recorded and not yet in the file, and whether the file must be rewritten whole.
#[derive(Default)]
struct Unwritten {
    lines: Vec<String>,
    rewrite: bool,
}

struct Shared {
    journal: Journal,
    unwritten: Unwritten,
}

/// The broker's journal of client instances. Recording takes a short lock; the file is
/// written by [`write_loop`], never by the request path.
pub struct ClientJournal {
    shared: Mutex<Shared>,
    bounds: Bounds,
    /// Where the file is (`None`: kept in memory only).
    dir: Option<PathBuf>,
    /// The seq of the newest event: readers waiting for events watch it.
    newest: watch::Sender<u64>,
}

impl ClientJournal {
    /// A journal kept in memory only.
    #[cfg(test)]
    pub fn in_memory(bounds: Bounds) -> ClientJournal {
        ClientJournal {
            shared: Mutex::new(Shared {
                journal: Journal::new(bounds),
                unwritten: Unwritten::default(),
            }),
            bounds,
            dir: None,
            newest: watch::Sender::new(0),
        }
    }

    /// The journal kept in `dir`: what its file holds, within `bounds`. A damaged file is
    /// read as far as it can be, with one warning; nothing here stops the broker.
    pub fn open(dir: &Path, bounds: Bounds) -> ClientJournal {
        let limit = FILE_BYTES_PER_EVENT.saturating_mul(bounds.total as u64 * 2 + 16);
        let decoded = file::load(dir, limit);
        let mut journal = Journal::new(bounds);
        let read = decoded.entries.len();
        let mut entries = decoded.entries;
        entries.sort_by_key(|(_, e)| e.seq);
        for (instance, event) in entries {
            journal.restore(instance, event);
        }
        if decoded.skipped > 0 || decoded.foreign {
            tracing::warn!(
                path = %dir.join(file::FILE_NAME).display(),
                skipped = decoded.skipped,
                foreign = decoded.foreign,
                kept = journal.len(),
                "the client journal file was damaged: what could not be read is skipped"
            );
        }
        // Rewritten at once when it is damaged, missing, or holds more than the bounds keep.
        let rewrite = decoded.skipped > 0
            || decoded.foreign
            || read != journal.len()
            || !dir.join(file::FILE_NAME).exists();
        let newest = journal.last_seq();
        ClientJournal {
            shared: Mutex::new(Shared {
                journal,
                unwritten: Unwritten {
                    lines: Vec::new(),
                    rewrite,
                },
            }),
            bounds,
            dir: Some(dir.to_path_buf()),
            newest: watch::Sender::new(newest),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the journal now (the broker's clock) and queues what it recorded for the
    /// file.
    pub fn with(&self, f: impl FnOnce(&mut Journal, i64)) {
        let now = crate::clock::now_ms();
        let mut shared = self.lock();
        f(&mut shared.journal, now);
        let recorded = shared.journal.take_recorded();
        if recorded.is_empty() {
            return;
        }
        let newest = shared.journal.last_seq();
        let unwritten = &mut shared.unwritten;
        if self.dir.is_some() && !unwritten.rewrite {
            unwritten.lines.extend(
                recorded
                    .iter()
                    .filter_map(|(id, event)| file::encode_line(*id, event)),
            );
            // The writer fell behind by a whole journal: rewrite the file instead.
            if unwritten.lines.len() > self.bounds.total {
                unwritten.lines.clear();
                unwritten.rewrite = true;
            }
        }
        drop(shared);
        self.newest.send_replace(newest);
    }

    /// Records one event for `instance` now.
    pub fn record(&self, instance: Uuid, kind: EventKind) {
        self.with(|journal, now| {
            journal.record(instance, now, kind);
        });
    }

    /// `instance`'s events in order (see [`Journal::events`]).
    pub fn events(&self, instance: Uuid, since_ms: Option<i64>, after: Option<u64>) -> Vec<Event> {
        self.lock().journal.events(instance, since_ms, after)
    }

    /// (events kept, events dropped to stay within the bounds since start).
    pub fn sizes(&self) -> (usize, u64) {
        let shared = self.lock();
        (shared.journal.len(), shared.journal.dropped())
    }

    /// Watches the seq of the newest event.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.newest.subscribe()
    }

    /// Writes what was recorded since the last call to the file; `file_lines` is the writer's
    /// count of lines in the file, which decides when it is rewritten whole.
    pub fn flush(&self, file_lines: &mut usize) {
        let Some(dir) = &self.dir else {
            return;
        };
        let (lines, rewrite) = {
            let mut shared = self.lock();
            let pending = std::mem::take(&mut shared.unwritten);
            let rewrite = pending.rewrite
                || *file_lines + pending.lines.len() > self.bounds.total.saturating_mul(2);
            if rewrite {
                let all: Vec<String> = shared
                    .journal
                    .all()
                    .into_iter()
                    .filter_map(|(id, e)| file::encode_line(id, e))
                    .collect();
                (all, true)
            } else {
                (pending.lines, false)
            }
        };
        if !rewrite && lines.is_empty() {
            return;
        }
        let written = if rewrite {
            file::rewrite(dir, &lines).map_err(|e| format!("{e:#}"))
        } else {
            file::append(dir, &lines).map_err(|e| e.to_string())
        };
        match written {
            Ok(()) => {
                *file_lines = if rewrite {
                    lines.len()
                } else {
                    *file_lines + lines.len()
                };
            }
            Err(e) => {
                tracing::warn!(error = %e, "writing the client journal failed; the file is rewritten next time");
                self.lock().unwritten.rewrite = true;
            }
        }
    }
}

/// Appends the journal's new events to its file every [`WRITE_EVERY`] until `stop`, then once
/// more (the server stops it after the last connection closed, so their ends are in).
pub async fn write_loop(journal: std::sync::Arc<ClientJournal>, mut stop: watch::Receiver<bool>) {
    let mut file_lines = 0usize;
    loop {
        let stopping = tokio::select! {
            _ = tokio::time::sleep(WRITE_EVERY) => false,
            _ = stopped(&mut stop) => true,
        };
        let j = std::sync::Arc::clone(&journal);
        file_lines = tokio::task::spawn_blocking(move || {
            j.flush(&mut file_lines);
            file_lines
        })
        .await
        .unwrap_or(usize::MAX / 4);
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(total: usize) -> Bounds {
        Bounds {
            per_instance: 50,
            total,
        }
    }

    fn software(n: u64) -> EventKind {
        EventKind::Software {
            connection: n,
            name: "app".into(),
            version: "1".into(),
        }
    }

    fn lines_in(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join(file::FILE_NAME))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    #[test]
    fn kept_across_a_restart_and_the_file_stays_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = ClientJournal::open(dir.path(), bounds(20));
        let mut file_lines = 0;
        for n in 0..500u64 {
            journal.record(Uuid::from_u128(u128::from(n % 7) + 1), software(n));
            if n % 9 == 0 {
                journal.flush(&mut file_lines);
                assert!(
                    lines_in(dir.path()) <= 2 * 20 + 1,
                    "{}",
                    lines_in(dir.path())
                );
            }
        }
        journal.flush(&mut file_lines);
        let before: Vec<Event> = journal.events(Uuid::from_u128(1), None, None);
        assert!(!before.is_empty());
        let reopened = ClientJournal::open(dir.path(), bounds(20));
        assert_eq!(reopened.events(Uuid::from_u128(1), None, None), before);
        assert_eq!(reopened.sizes().0, 20);
        reopened.record(Uuid::from_u128(1), software(1000));
        let last = reopened.events(Uuid::from_u128(1), None, None);
        assert_eq!(last.last().map(|e| e.seq), Some(501));
    }

    #[test]
    fn a_damaged_file_is_read_as_far_as_it_goes_and_rewritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Uuid::from_u128(3);
        let journal = ClientJournal::open(dir.path(), bounds(100));
        let mut file_lines = 0;
        for n in 0..5 {
            journal.record(a, software(n));
        }
        journal.flush(&mut file_lines);
        // A torn tail and garbage in the middle.
        let path = dir.path().join(file::FILE_NAME);
        let mut text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<&str> = text.lines().collect();
        let mut damaged = lines.get(..3).expect("lines").join("\n");
        damaged.push_str("\n\u{0}\u{1}garbage\n");
        damaged.push_str(&lines.get(3..).expect("lines").join("\n"));
        damaged.truncate(damaged.len() - 5);
        text = damaged;
        std::fs::write(&path, text).expect("write");
        let reopened = ClientJournal::open(dir.path(), bounds(100));
        let seqs: Vec<u64> = reopened
            .events(a, None, None)
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(
            seqs,
            vec![1, 2, 3, 4],
            "the garbage and the torn last line skipped"
        );
        let mut file_lines = 0;
        reopened.flush(&mut file_lines);
        assert_eq!(
            lines_in(dir.path()),
            5,
            "rewritten clean: the header and four"
        );
        // Not a journal at all, or unreadable bytes: an empty journal, no panic.
        std::fs::write(&path, [0xff, 0xfe, 0x00]).expect("write");
        assert_eq!(ClientJournal::open(dir.path(), bounds(100)).sizes().0, 0);
    }

    #[test]
    fn a_write_failure_is_retried_as_a_rewrite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = ClientJournal::open(dir.path(), bounds(100));
        let mut file_lines = 0;
        journal.record(Uuid::from_u128(1), software(1));
        journal.flush(&mut file_lines);
        // The file is replaced by a directory: appends fail, then a rewrite puts it back.
        let path = dir.path().join(file::FILE_NAME);
        std::fs::remove_file(&path).expect("remove");
        std::fs::create_dir(&path).expect("dir");
        journal.record(Uuid::from_u128(1), software(2));
        journal.flush(&mut file_lines);
        std::fs::remove_dir(&path).expect("rmdir");
        journal.flush(&mut file_lines);
        assert_eq!(lines_in(dir.path()), 3);
    }

    #[tokio::test]
    async fn readers_are_woken_by_new_events() {
        let journal = std::sync::Arc::new(ClientJournal::in_memory(bounds(10)));
        let mut newest = journal.subscribe();
        let writer = std::sync::Arc::clone(&journal);
        tokio::spawn(async move { writer.record(Uuid::from_u128(1), software(1)) });
        tokio::time::timeout(Duration::from_secs(10), newest.wait_for(|seq| *seq >= 1))
            .await
            .expect("in time")
            .expect("open");
        assert_eq!(journal.events(Uuid::from_u128(1), None, None).len(), 1);
    }
}
