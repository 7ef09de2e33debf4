//! Failpoints for tests of disk faults. With the `fault-injection` feature, a test makes every
//! fdatasync, segment write or rename on paths containing a given string fail with EIO, until
//! it clears the rule; without the feature (release builds) the checks compile to nothing.

use std::io;
use std::path::Path;

/// A file-system call a test can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// fdatasync / fsync of a segment, index or checkpoint.
    Sync,
    /// The `pwritev` of a segment append.
    Write,
    /// The rename that replaces a checkpoint.
    Rename,
}

#[cfg(feature = "fault-injection")]
mod rules {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Mutex, PoisonError};

    use super::Fault;

    static ANY: AtomicBool = AtomicBool::new(false);
    static RULES: Mutex<Vec<(Fault, String)>> = Mutex::new(Vec::new());

    /// From now on, `fault` fails on every path containing `path_part`.
    pub fn inject(fault: Fault, path_part: &str) {
        let mut rules = RULES.lock().unwrap_or_else(PoisonError::into_inner);
        rules.push((fault, path_part.to_owned()));
        ANY.store(true, Ordering::Release);
    }

    /// Removes every rule for paths containing `path_part`.
    pub fn clear(path_part: &str) {
        let mut rules = RULES.lock().unwrap_or_else(PoisonError::into_inner);
        rules.retain(|(_, part)| part != path_part);
        ANY.store(!rules.is_empty(), Ordering::Release);
    }

    pub(super) fn matches(fault: Fault, path: &str) -> bool {
        ANY.load(Ordering::Acquire)
            && RULES
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .any(|(f, part)| *f == fault && path.contains(part.as_str()))
    }
}

#[cfg(feature = "fault-injection")]
pub use rules::{clear, inject};

/// Fails with EIO when a test injected `fault` for `path`.
#[cfg(feature = "fault-injection")]
pub(crate) fn check(fault: Fault, path: &Path) -> io::Result<()> {
    if rules::matches(fault, &path.to_string_lossy()) {
        return Err(io::Error::from(rustix::io::Errno::IO));
    }
    Ok(())
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn check(_fault: Fault, _path: &Path) -> io::Result<()> {
    Ok(())
}
