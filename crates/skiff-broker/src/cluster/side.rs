//! PostgreSQL for synchronous callers that hold locks: a small runtime on a thread of its own,
//! driving connections of its own ([`SideDb`]).
//!
//! Handler code is synchronous. When it waits for PostgreSQL under a std lock (a shared
//! document's change under the ACL, credential or telemetry lock; an instance claim while a
//! connection binds its identity), the wait must not depend on the broker's runtime: the other
//! worker threads may all be blocked on that same lock, leaving nobody to drive the connection
//! the lock holder waits for (a deadlock). Here the connections are driven by the side thread,
//! and the caller polls its query itself, so the wait ends whatever the broker's workers do.

use std::future::Future;

use skiff_cluster::Db;

/// A pool of PostgreSQL connections driven by a runtime on a thread of its own (see the module).
pub struct SideDb {
    db: Db,
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl SideDb {
    /// Starts the thread (named `name`) with a lazy pool of `pool_size` connections to `url`
    /// (lock and idle-transaction limits `limit_ms`, as the broker's).
    pub fn start(name: &str, url: &str, pool_size: usize, limit_ms: u64) -> anyhow::Result<SideDb> {
        let db = Db::with_limits(url, pool_size, Some(limit_ms))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                // Drives the connections' tasks, their sockets and timers until the broker stops.
                let _ = runtime.block_on(stopped);
            })?;
        Ok(SideDb {
            db,
            handle,
            stop: Some(stop),
        })
    }

    /// The pool whose connections the side thread drives: use it only in work given to
    /// [`SideDb::block_on`].
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Runs `work` (which uses [`SideDb::db`]) to completion on the calling thread, its
    /// connections driven by the side thread. On a worker of the broker's multi-thread runtime
    /// the worker's other tasks are handed off first (`block_in_place`).
    pub fn block_on<F: Future>(&self, work: F) -> F::Output {
        let run = || {
            let _side = self.handle.enter();
            futures::executor::block_on(work)
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(run)
            }
            _ => run(),
        }
    }
}

impl Drop for SideDb {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The side runtime drives its own timers (and, the same way, its sockets) while the caller
    /// blocks, even on a runtime whose only worker is the caller.
    #[test]
    fn work_completes_while_the_callers_runtime_is_blocked() {
        let side = SideDb::start(
            "skiff-side-test",
            "postgres://nobody@127.0.0.1:1/none",
            1,
            1_000,
        )
        .expect("starts");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let lock = std::sync::Mutex::new(0);
        let value = runtime.block_on(async {
            let _held = lock.lock().expect("lock");
            side.block_on(async {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                7
            })
        });
        assert_eq!(value, 7);
    }
}
