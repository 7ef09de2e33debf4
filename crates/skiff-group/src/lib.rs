//! `skiff-group` owns group coordination as deterministic state machines: KIP-848 consumer
//! groups with KIP-1082 client-chosen member IDs (`consumer`), KIP-932 share group membership
//! and assignment (`share`), classic JoinGroup/SyncGroup groups (`classic`), online migration
//! between classic and consumer groups (`migration`, with the embedded consumer protocol in
//! `embedded`), and committed offsets (`offsets`).
//!
//! Nothing here does I/O or reads a clock: every operation takes `now_ms`, timers are exposed as
//! deadlines, and every change to persistent state bumps a counter so the broker knows when to
//! write a snapshot record. The broker owns sockets, timers and the internal log.

pub mod classic;
pub mod consumer;
pub mod embedded;
pub mod migration;
pub mod offsets;
pub mod share;
pub mod types;

pub use offsets::{CommittedOffset, OffsetKey, OffsetStore};
pub use types::{GroupConfig, GroupError, MigrationPolicy, TopicsImage};
