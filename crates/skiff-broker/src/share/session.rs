//! KIP-932 share sessions (Kafka's `ShareSessionCache` with `SharePartitionManager.newContext`
//! and `acknowledgeSessionUpdate`): plain data and pure functions.
//!
//! A share session is keyed by (group ID, member ID) and holds the partitions a member fetches
//! from, in the order they were added. ShareFetch epochs:
//!
//! - `0` opens a session with the request's partitions, closing an older one of the same key
//!   first; acknowledgements in such a request are INVALID_REQUEST; when the cache already holds
//!   `max` sessions, SHARE_SESSION_LIMIT_REACHED.
//! - `-1` (final) needs the session (SHARE_SESSION_NOT_FOUND otherwise): nothing is fetched, the
//!   request's acknowledgements are applied, then the broker closes the session.
//! - any other epoch must be the session's next one (INVALID_SHARE_SESSION_EPOCH) of an existing
//!   session (SHARE_SESSION_NOT_FOUND); the request's partitions are added, its forgotten ones
//!   removed, and every partition of the session is fetched; only those with something to say
//!   (records, an error, or newly added) are answered.
//!
//! ShareAcknowledge: epoch 0 is INVALID_SHARE_SESSION_EPOCH; the session must exist; `-1` leaves
//! it as it is (the broker closes it after the acknowledgements); any other epoch must be the
//! next one, and moves it on.
//!
//! Bounds: at most `max` sessions (Kafka's `group.share.max.share.sessions`, 2000) and at most
//! [`MAX_SESSION_PARTITIONS`] partitions in one session (a request that would go past it is
//! INVALID_REQUEST: Kafka has no such bound, Skiff keeps a client from growing a session without
//! end). Each session remembers the connection that opened it: when that connection closes, the
//! session goes (Kafka's connection-disconnect listener).

use std::collections::{HashMap, HashSet};

use indexmap::IndexMap;
use skiff_protocol::{ErrorCode, Uuid};

/// The epoch of a ShareFetch that opens a session.
pub const INITIAL_EPOCH: i32 = 0;
/// The epoch that closes a session.
pub const FINAL_EPOCH: i32 = -1;
/// The most partitions one share session holds.
pub const MAX_SESSION_PARTITIONS: usize = 10_000;

/// A partition, by topic ID.
pub type TopicPartition = (Uuid, i32);

/// A share session's key: the group and the member.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionKey {
    pub group_id: String,
    pub member_id: String,
}

impl SessionKey {
    pub fn new(group_id: impl Into<String>, member_id: impl Into<String>) -> Self {
        SessionKey {
            group_id: group_id.into(),
            member_id: member_id.into(),
        }
    }
}

/// Why a request's session handling failed; [`SessionError::code`] is the top-level error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("no such share session")]
    NotFound,
    #[error("the share session epoch is not the expected one")]
    InvalidEpoch,
    #[error("the share session cache is full")]
    LimitReached,
    #[error("acknowledgements in a request that opens a share session")]
    AcknowledgementsOnOpen,
    #[error("a share session holds at most {MAX_SESSION_PARTITIONS} partitions")]
    TooManyPartitions,
}

impl SessionError {
    pub fn code(self) -> ErrorCode {
        match self {
            SessionError::NotFound => ErrorCode::SHARE_SESSION_NOT_FOUND,
            SessionError::InvalidEpoch => ErrorCode::INVALID_SHARE_SESSION_EPOCH,
            SessionError::LimitReached => ErrorCode::SHARE_SESSION_LIMIT_REACHED,
            SessionError::AcknowledgementsOnOpen | SessionError::TooManyPartitions => {
                ErrorCode::INVALID_REQUEST
            }
        }
    }
}

/// How a ShareFetch is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Context {
    /// A session was just opened: these partitions are fetched and all of them answered.
    Full { partitions: Vec<TopicPartition> },
    /// An existing session: all its partitions are fetched, the changed ones answered.
    Incremental { partitions: Vec<TopicPartition> },
    /// The final request of a session: nothing is fetched.
    Final,
}

#[derive(Debug, Clone)]
struct Session {
    /// The epoch the next request must carry.
    epoch: i32,
    /// Partition -> whether it must be in the next response whatever it holds (just added, or
    /// it had an error last time).
    partitions: IndexMap<TopicPartition, bool>,
    /// The connection that opened the session.
    connection: u64,
}

/// Every share session of the broker.
#[derive(Debug)]
pub struct ShareSessions {
    sessions: HashMap<SessionKey, Session>,
    max: usize,
    partitions: usize,
}

/// Kafka's `ShareRequestMetadata.nextEpoch`: 1 after the last positive epoch.
fn next_epoch(epoch: i32) -> i32 {
    if epoch < 0 {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

impl ShareSessions {
    /// An empty cache holding at most `max` sessions (at least one).
    pub fn new(max: usize) -> Self {
        ShareSessions {
            sessions: HashMap::new(),
            max: max.max(1),
            partitions: 0,
        }
    }

    /// How many sessions are open.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// How many partitions all sessions hold.
    pub fn total_partitions(&self) -> usize {
        self.partitions
    }

    /// The epoch the session's next request must carry, if it exists.
    #[cfg(test)]
    pub fn expected_epoch(&self, key: &SessionKey) -> Option<i32> {
        self.sessions.get(key).map(|s| s.epoch)
    }

    /// The partitions of a session, in order.
    #[cfg(test)]
    pub fn partitions(&self, key: &SessionKey) -> Option<Vec<TopicPartition>> {
        self.sessions
            .get(key)
            .map(|s| s.partitions.keys().copied().collect())
    }

    /// A ShareFetch: opens, updates or finds the final use of the session of `key` (see the
    /// module documentation). `add` are the request's partitions, `forget` its forgotten ones;
    /// `has_acks` whether it carries acknowledgements; `connection` the connection it came on.
    /// Nothing changes when it fails.
    pub fn fetch(
        &mut self,
        key: &SessionKey,
        epoch: i32,
        add: &[TopicPartition],
        forget: &[TopicPartition],
        has_acks: bool,
        connection: u64,
    ) -> Result<Context, SessionError> {
        match epoch {
            INITIAL_EPOCH => {
                if has_acks {
                    return Err(SessionError::AcknowledgementsOnOpen);
                }
                let mut partitions: IndexMap<TopicPartition, bool> = IndexMap::new();
                for tp in add {
                    partitions.insert(*tp, false);
                }
                if partitions.len() > MAX_SESSION_PARTITIONS {
                    return Err(SessionError::TooManyPartitions);
                }
                // The older session of the key goes first (so it does not count against the
                // limit), as in Kafka.
                self.close(key);
                if self.sessions.len() >= self.max {
                    return Err(SessionError::LimitReached);
                }
                let list = partitions.keys().copied().collect();
                self.partitions += partitions.len();
                self.sessions.insert(
                    key.clone(),
                    Session {
                        epoch: next_epoch(INITIAL_EPOCH),
                        partitions,
                        connection,
                    },
                );
                Ok(Context::Full { partitions: list })
            }
            FINAL_EPOCH => {
                if self.sessions.contains_key(key) {
                    Ok(Context::Final)
                } else {
                    Err(SessionError::NotFound)
                }
            }
            _ => {
                let session = self.sessions.get_mut(key).ok_or(SessionError::NotFound)?;
                if session.epoch != epoch {
                    return Err(SessionError::InvalidEpoch);
                }
                let new: HashSet<&TopicPartition> = add
                    .iter()
                    .filter(|tp| !session.partitions.contains_key(*tp))
                    .collect();
                let forgotten: HashSet<&TopicPartition> = forget.iter().collect();
                let gone = forgotten
                    .iter()
                    .filter(|tp| session.partitions.contains_key(**tp) || new.contains(**tp))
                    .count();
                if session
                    .partitions
                    .len()
                    .saturating_add(new.len())
                    .saturating_sub(gone)
                    > MAX_SESSION_PARTITIONS
                {
                    return Err(SessionError::TooManyPartitions);
                }
                let before = session.partitions.len();
                for tp in add {
                    session.partitions.entry(*tp).or_insert(true);
                }
                for tp in forget {
                    session.partitions.shift_remove(tp);
                }
                self.partitions = self
                    .partitions
                    .saturating_sub(before)
                    .saturating_add(session.partitions.len());
                session.epoch = next_epoch(session.epoch);
                Ok(Context::Incremental {
                    partitions: session.partitions.keys().copied().collect(),
                })
            }
        }
    }

    /// A ShareAcknowledge: checks the session and its epoch, and moves the epoch on (not for
    /// the final epoch).
    pub fn acknowledge(&mut self, key: &SessionKey, epoch: i32) -> Result<(), SessionError> {
        if epoch == INITIAL_EPOCH {
            return Err(SessionError::InvalidEpoch);
        }
        let session = self.sessions.get_mut(key).ok_or(SessionError::NotFound)?;
        if epoch == FINAL_EPOCH {
            return Ok(());
        }
        if session.epoch != epoch {
            return Err(SessionError::InvalidEpoch);
        }
        session.epoch = next_epoch(session.epoch);
        Ok(())
    }

    /// Whether an incremental response must carry `tp` (Kafka's
    /// `CachedSharePartition.maybeUpdateResponseData`): it returned records, it has an error
    /// (and is then answered again once the error is gone), or it was just added.
    pub fn must_answer(
        &mut self,
        key: &SessionKey,
        tp: TopicPartition,
        has_records: bool,
        has_error: bool,
    ) -> bool {
        let Some(flag) = self
            .sessions
            .get_mut(key)
            .and_then(|s| s.partitions.get_mut(&tp))
        else {
            return has_records || has_error;
        };
        let answer = has_records || has_error || *flag;
        *flag = has_error;
        answer
    }

    /// Closes the session of `key`; whether there was one.
    pub fn close(&mut self, key: &SessionKey) -> bool {
        match self.sessions.remove(key) {
            Some(session) => {
                self.partitions = self.partitions.saturating_sub(session.partitions.len());
                true
            }
            None => false,
        }
    }

    /// A connection closed: the sessions it opened go. Returns their keys.
    pub fn connection_closed(&mut self, connection: u64) -> Vec<SessionKey> {
        let keys: Vec<SessionKey> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.connection == connection)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &keys {
            self.close(key);
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: u128, partition: i32) -> TopicPartition {
        (Uuid::from_u128(topic), partition)
    }

    fn key(member: &str) -> SessionKey {
        SessionKey::new("g", member)
    }

    fn partitions_of(context: Result<Context, SessionError>) -> Vec<TopicPartition> {
        match context {
            Ok(Context::Full { partitions }) | Ok(Context::Incremental { partitions }) => {
                partitions
            }
            other => panic!("not a fetching context: {other:?}"),
        }
    }

    #[test]
    fn epoch_zero_opens_and_replaces_final_needs_a_session() {
        let mut cache = ShareSessions::new(10);
        let m = key("m1");
        // Unknown session: every non-initial epoch is SHARE_SESSION_NOT_FOUND.
        for epoch in [FINAL_EPOCH, 1, 7] {
            assert_eq!(
                cache.fetch(&m, epoch, &[], &[], false, 1),
                Err(SessionError::NotFound)
            );
        }
        assert_eq!(cache.acknowledge(&m, 1), Err(SessionError::NotFound));
        assert_eq!(
            cache.acknowledge(&m, FINAL_EPOCH),
            Err(SessionError::NotFound)
        );
        // Opening with acknowledgements is INVALID_REQUEST, and opens nothing.
        let err = cache.fetch(&m, 0, &[tp(1, 0)], &[], true, 1);
        assert_eq!(err, Err(SessionError::AcknowledgementsOnOpen));
        assert_eq!(
            SessionError::AcknowledgementsOnOpen.code(),
            ErrorCode::INVALID_REQUEST
        );
        assert_eq!(cache.len(), 0);

        let opened = cache.fetch(&m, 0, &[tp(1, 0), tp(1, 1), tp(1, 0)], &[], false, 1);
        assert_eq!(
            opened,
            Ok(Context::Full {
                partitions: vec![tp(1, 0), tp(1, 1)]
            })
        );
        assert_eq!(cache.expected_epoch(&m), Some(1));
        assert_eq!(cache.total_partitions(), 2);
        // Epoch 0 again: a new session replaces the old one.
        let reopened = cache.fetch(&m, 0, &[tp(2, 0)], &[], false, 2);
        assert_eq!(partitions_of(reopened), vec![tp(2, 0)]);
        assert_eq!((cache.len(), cache.total_partitions()), (1, 1));
        assert_eq!(cache.expected_epoch(&m), Some(1));
        // Final: allowed with acknowledgements, fetches nothing, leaves the session to close.
        assert_eq!(
            cache.fetch(&m, FINAL_EPOCH, &[], &[], true, 2),
            Ok(Context::Final)
        );
        assert!(cache.close(&m));
        assert!(!cache.close(&m));
        assert_eq!((cache.len(), cache.total_partitions()), (0, 0));
    }

    #[test]
    fn epochs_must_follow_on() {
        let mut cache = ShareSessions::new(10);
        let m = key("m1");
        cache
            .fetch(&m, 0, &[tp(1, 0)], &[], false, 1)
            .expect("opened");
        // Stale (0 is "open", so try the one before and one ahead) and repeated epochs.
        assert_eq!(
            cache.fetch(&m, 2, &[], &[], false, 1),
            Err(SessionError::InvalidEpoch)
        );
        assert_eq!(
            SessionError::InvalidEpoch.code(),
            ErrorCode::INVALID_SHARE_SESSION_EPOCH
        );
        assert!(cache.fetch(&m, 1, &[], &[], true, 1).is_ok());
        assert_eq!(
            cache.fetch(&m, 1, &[], &[], false, 1),
            Err(SessionError::InvalidEpoch)
        );
        // ShareAcknowledge moves the same epoch on; epoch 0 is never valid there; -1 does not
        // move it.
        assert_eq!(cache.acknowledge(&m, 2), Ok(()));
        assert_eq!(cache.acknowledge(&m, 2), Err(SessionError::InvalidEpoch));
        assert_eq!(cache.acknowledge(&m, 0), Err(SessionError::InvalidEpoch));
        assert_eq!(cache.acknowledge(&m, FINAL_EPOCH), Ok(()));
        assert_eq!(cache.expected_epoch(&m), Some(3));
        // The epoch wraps to 1 after i32::MAX.
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(0), 1);
    }

    #[test]
    fn incremental_requests_add_and_forget_partitions() {
        let mut cache = ShareSessions::new(10);
        let m = key("m1");
        cache
            .fetch(&m, 0, &[tp(1, 0), tp(1, 1)], &[], false, 1)
            .expect("opened");
        // A full session's partitions are answered only when they have something.
        assert!(!cache.must_answer(&m, tp(1, 0), false, false));
        assert!(cache.must_answer(&m, tp(1, 0), true, false));
        let next = cache.fetch(&m, 1, &[tp(2, 0), tp(1, 0)], &[tp(1, 1)], false, 1);
        assert_eq!(partitions_of(next), vec![tp(1, 0), tp(2, 0)]);
        assert_eq!(cache.total_partitions(), 2);
        // Just added: answered once even when empty.
        assert!(cache.must_answer(&m, tp(2, 0), false, false));
        assert!(!cache.must_answer(&m, tp(2, 0), false, false));
        // An error is answered, and the partition is answered again the time after.
        assert!(cache.must_answer(&m, tp(2, 0), false, true));
        assert!(cache.must_answer(&m, tp(2, 0), false, false));
        assert!(!cache.must_answer(&m, tp(2, 0), false, false));
        // Forgetting something not in the session changes nothing.
        let next = cache.fetch(&m, 2, &[], &[tp(9, 9)], false, 1);
        assert_eq!(partitions_of(next), vec![tp(1, 0), tp(2, 0)]);
        assert_eq!(cache.partitions(&m), Some(vec![tp(1, 0), tp(2, 0)]));
    }

    #[test]
    fn the_cache_and_each_session_are_bounded() {
        let mut cache = ShareSessions::new(2);
        cache.fetch(&key("a"), 0, &[], &[], false, 1).expect("a");
        cache.fetch(&key("b"), 0, &[], &[], false, 1).expect("b");
        assert_eq!(
            cache.fetch(&key("c"), 0, &[], &[], false, 1),
            Err(SessionError::LimitReached)
        );
        assert_eq!(
            SessionError::LimitReached.code(),
            ErrorCode::SHARE_SESSION_LIMIT_REACHED
        );
        // Reopening an existing key does not need a free slot.
        assert!(cache.fetch(&key("a"), 0, &[], &[], false, 1).is_ok());
        assert_eq!(cache.len(), 2);

        // Partitions per session: at the bound, fine; past it, refused without a change.
        let mut cache = ShareSessions::new(2);
        let many: Vec<TopicPartition> = (0..MAX_SESSION_PARTITIONS)
            .map(|p| tp(1, i32::try_from(p).unwrap_or(i32::MAX)))
            .collect();
        cache
            .fetch(&key("a"), 0, &many, &[], false, 1)
            .expect("full");
        assert_eq!(
            cache.fetch(&key("a"), 1, &[tp(2, 0)], &[], false, 1),
            Err(SessionError::TooManyPartitions)
        );
        assert_eq!(cache.expected_epoch(&key("a")), Some(1));
        // Adding one while forgetting one fits.
        assert!(
            cache
                .fetch(&key("a"), 1, &[tp(2, 0)], &[tp(1, 0)], false, 1)
                .is_ok()
        );
        let mut too_many = many.clone();
        too_many.push(tp(3, 0));
        assert_eq!(
            cache.fetch(&key("b"), 0, &too_many, &[], false, 1),
            Err(SessionError::TooManyPartitions)
        );
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_closed_connection_takes_its_sessions() {
        let mut cache = ShareSessions::new(10);
        cache
            .fetch(&key("a"), 0, &[tp(1, 0)], &[], false, 7)
            .expect("a");
        cache.fetch(&key("b"), 0, &[], &[], false, 8).expect("b");
        // "c" opened on 7 and reopened on 8: it belongs to 8 now.
        cache.fetch(&key("c"), 0, &[], &[], false, 7).expect("c");
        cache
            .fetch(&key("c"), 0, &[], &[], false, 8)
            .expect("c again");
        assert_eq!(cache.connection_closed(7), vec![key("a")]);
        assert_eq!(cache.len(), 2);
        let mut gone = cache.connection_closed(8);
        gone.sort();
        assert_eq!(gone, vec![key("b"), key("c")]);
        assert_eq!(cache.len(), 0);
        assert_eq!(cache.total_partitions(), 0);
    }
}
