//! Failpoints for tests of disk faults. With the `fault-injection` feature, a test makes every
//! fdatasync, segment write or rename on paths containing a given string fail with EIO, until
//! it clears the rule, or holds such calls (the calling thread blocks before the call) until it
//! releases them, to order a race deterministically; without the feature (release builds) the
//! checks compile to nothing.

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
    use std::sync::{Condvar, Mutex, PoisonError};
    use std::time::{Duration, Instant};

    use super::Fault;

    static ANY: AtomicBool = AtomicBool::new(false);
    static RULES: Mutex<Vec<(Fault, String)>> = Mutex::new(Vec::new());

    /// A held call: which, on which paths, and how many calls wait on it now.
    struct Hold {
        fault: Fault,
        path_part: String,
        waiting: usize,
    }

    static ANY_HOLD: AtomicBool = AtomicBool::new(false);
    static HOLDS: Mutex<Vec<Hold>> = Mutex::new(Vec::new());
    /// Signalled when a call starts waiting on a hold and when a hold is released.
    static CHANGED: Condvar = Condvar::new();

    /// From now on, `fault` blocks on every path containing `path_part` (before the call is
    /// made) until [`release`] of `path_part`.
    pub fn hold(fault: Fault, path_part: &str) {
        let mut holds = HOLDS.lock().unwrap_or_else(PoisonError::into_inner);
        holds.push(Hold {
            fault,
            path_part: path_part.to_owned(),
            waiting: 0,
        });
        ANY_HOLD.store(true, Ordering::Release);
    }

    /// Waits until at least one call is blocked on a hold of `path_part`, at most `timeout`;
    /// whether one is.
    pub fn wait_held(path_part: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut holds = HOLDS.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if holds
                .iter()
                .any(|h| h.path_part == path_part && h.waiting > 0)
            {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            holds = CHANGED
                .wait_timeout(holds, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Removes every hold of `path_part`: the calls blocked on it go on.
    pub fn release(path_part: &str) {
        let mut holds = HOLDS.lock().unwrap_or_else(PoisonError::into_inner);
        holds.retain(|h| h.path_part != path_part);
        ANY_HOLD.store(!holds.is_empty(), Ordering::Release);
        CHANGED.notify_all();
    }

    /// Blocks while a hold matches `fault` on `path`.
    pub(super) fn wait_while_held(fault: Fault, path: &str) {
        if !ANY_HOLD.load(Ordering::Acquire) {
            return;
        }
        let matching = |h: &Hold| h.fault == fault && path.contains(h.path_part.as_str());
        let mut holds = HOLDS.lock().unwrap_or_else(PoisonError::into_inner);
        let mut counted = false;
        while let Some(h) = holds.iter_mut().find(|h| matching(h)) {
            if !counted {
                h.waiting += 1;
                counted = true;
                CHANGED.notify_all();
            }
            holds = CHANGED.wait(holds).unwrap_or_else(PoisonError::into_inner);
        }
    }

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
pub use rules::{clear, hold, inject, release, wait_held};

/// Blocks while a test holds `fault` for `path`, then fails with EIO when a test injected
/// `fault` for it.
#[cfg(feature = "fault-injection")]
pub(crate) fn check(fault: Fault, path: &Path) -> io::Result<()> {
    let path = path.to_string_lossy();
    rules::wait_while_held(fault, &path);
    if rules::matches(fault, &path) {
        return Err(io::Error::from(rustix::io::Errno::IO));
    }
    Ok(())
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn check(_fault: Fault, _path: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(all(test, feature = "fault-injection"))]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::{Fault, check, hold, release, wait_held};

    #[test]
    fn a_held_call_waits_for_its_release_and_others_pass() {
        let part = "faults-unit-held";
        assert!(
            !wait_held(part, Duration::from_millis(10)),
            "nothing held yet"
        );
        hold(Fault::Sync, part);
        // Another fault, or another path, is not held.
        check(Fault::Write, Path::new("/x/faults-unit-held/0.log")).expect("write passes");
        check(Fault::Sync, Path::new("/x/other/0.log")).expect("other path passes");
        assert!(!wait_held(part, Duration::from_millis(10)));

        let held =
            std::thread::spawn(|| check(Fault::Sync, Path::new("/x/faults-unit-held/0.log")));
        assert!(wait_held(part, Duration::from_secs(30)), "the sync is held");
        assert!(!held.is_finished());
        release(part);
        held.join()
            .expect("thread")
            .expect("the released sync goes on");
        assert!(!wait_held(part, Duration::from_millis(10)), "released");
    }
}
