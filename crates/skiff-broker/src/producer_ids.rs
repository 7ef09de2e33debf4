//! Producer ID allocation: IDs are reserved on disk in blocks, so a restart never hands one out
//! twice, and the allocator stays above every ID the partitions and the transaction
//! coordinator still know (the broker raises it at start).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::node_file::write_atomically;

/// Producer IDs are reserved on disk in blocks, so a restart never hands one out twice.
const ID_BLOCK: i64 = 1000;
const ID_FILE: &str = "producer-ids";

/// Hands out producer IDs, never reusing one across restarts.
#[derive(Debug)]
pub struct ProducerIdAllocator {
    path: PathBuf,
    next: i64,
    reserved_until: i64,
}

impl ProducerIdAllocator {
    pub fn open(data_dir: &Path) -> Result<Self> {
        let path = data_dir.join(ID_FILE);
        let start = match std::fs::read_to_string(&path) {
            Ok(text) => {
                let v: i64 = text
                    .trim()
                    .parse()
                    .with_context(|| format!("{} is corrupt", path.display()))?;
                if v < 0 {
                    bail!("{} holds a negative producer ID", path.display());
                }
                v
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        Ok(ProducerIdAllocator {
            path,
            next: start,
            reserved_until: start,
        })
    }

    /// Makes sure no ID up to `highest_in_use` is handed out (at start: the file may have been
    /// lowered or lost while partitions still know producers); the next allocation persists
    /// the new floor.
    pub fn stay_above(&mut self, highest_in_use: i64) {
        if self.next <= highest_in_use {
            tracing::warn!(
                file = %self.path.display(),
                was = self.next,
                now = highest_in_use.saturating_add(1),
                "producer IDs in use lie above the allocator's file; moving past them"
            );
            self.next = highest_in_use.saturating_add(1);
            self.reserved_until = self.next;
        }
    }

    /// The next ID [`ProducerIdAllocator::allocate`] would hand out.
    #[cfg(test)]
    pub fn peek(&self) -> i64 {
        self.next
    }

    pub fn allocate(&mut self) -> Result<i64> {
        if self.next >= self.reserved_until {
            let until = self
                .next
                .checked_add(ID_BLOCK)
                .context("producer IDs exhausted")?;
            write_atomically(&self.path, format!("{until}\n").as_bytes())?;
            self.reserved_until = until;
        }
        let id = self.next;
        self.next += 1;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_ids_are_never_reused_across_restarts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut a = ProducerIdAllocator::open(dir.path()).expect("open");
        let first = a.allocate().expect("id");
        let second = a.allocate().expect("id");
        assert_eq!(second, first + 1);
        drop(a);
        let mut b = ProducerIdAllocator::open(dir.path()).expect("reopen");
        assert!(b.allocate().expect("id") > second);
    }

    #[test]
    fn the_allocator_stays_above_ids_in_use_when_its_file_was_lost() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut a = ProducerIdAllocator::open(dir.path()).expect("open");
        a.stay_above(4_321);
        assert_eq!(a.allocate().expect("id"), 4_322);
        // The new floor is on disk before the ID is handed out.
        drop(a);
        let mut b = ProducerIdAllocator::open(dir.path()).expect("reopen");
        assert!(b.allocate().expect("id") > 4_322);
        // A floor below the next ID changes nothing.
        let next = b.peek();
        b.stay_above(3);
        assert_eq!(b.peek(), next);
    }
}
