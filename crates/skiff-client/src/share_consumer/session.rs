//! Share session bookkeeping with one broker, pure (KIP-932; Kafka's `ShareSessionHandler`).
//!
//! - epoch 0 opens a session: the request names every partition to fetch, and may carry no
//!   acknowledgements;
//! - each answered request moves the epoch on by one (wrapping from `i32::MAX` to 1); later
//!   requests name only the partitions added since (or carrying acknowledgements) and list the
//!   partitions dropped as forgotten;
//! - SHARE_SESSION_NOT_FOUND or INVALID_SHARE_SESSION_EPOCH, or a request that got no answer,
//!   start over with epoch 0;
//! - epoch -1 closes the session (ShareAcknowledge on close).

use std::collections::BTreeSet;

use skiff_protocol::{Uuid, error_codes};

/// A partition by topic ID.
pub(crate) type TopicIdPartition = (Uuid, i32);

/// The epoch that opens a session.
pub(crate) const INITIAL_EPOCH: i32 = 0;
/// The epoch that closes one.
pub(crate) const FINAL_EPOCH: i32 = -1;

/// One ShareFetch as the session sees it: its epoch, the partitions to name, and those to forget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FetchPlan {
    pub epoch: i32,
    pub send: Vec<TopicIdPartition>,
    pub forget: Vec<TopicIdPartition>,
}

/// This member's share session with one broker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ShareSession {
    epoch: i32,
    partitions: BTreeSet<TopicIdPartition>,
}

impl ShareSession {
    /// The epoch the next request carries.
    #[cfg(test)]
    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// Whether the broker holds a session for us (acknowledgements can be sent).
    pub fn is_open(&self) -> bool {
        self.epoch > 0
    }

    /// The partitions in the session (as of the last request built).
    pub fn partitions(&self) -> &BTreeSet<TopicIdPartition> {
        &self.partitions
    }

    /// The next ShareFetch for fetching `wanted`; the session takes `wanted` as its partitions.
    pub fn plan_fetch(&mut self, wanted: &BTreeSet<TopicIdPartition>) -> FetchPlan {
        let plan = if self.is_open() {
            FetchPlan {
                epoch: self.epoch,
                send: wanted.difference(&self.partitions).copied().collect(),
                forget: self.partitions.difference(wanted).copied().collect(),
            }
        } else {
            FetchPlan {
                epoch: INITIAL_EPOCH,
                send: wanted.iter().copied().collect(),
                forget: Vec::new(),
            }
        };
        self.partitions = wanted.clone();
        plan
    }

    /// The epoch of a ShareAcknowledge, or `None` when no session is open (a session cannot be
    /// opened by ShareAcknowledge).
    pub fn acknowledge_epoch(&self) -> Option<i32> {
        self.is_open().then_some(self.epoch)
    }

    /// A response to a request of this session arrived with top-level `error_code`.
    pub fn on_response(&mut self, error_code: i16) {
        if error_code == error_codes::SHARE_SESSION_NOT_FOUND
            || error_code == error_codes::INVALID_SHARE_SESSION_EPOCH
        {
            self.reset();
            return;
        }
        self.epoch = next_epoch(self.epoch);
    }

    /// A request got no answer (broken connection, timeout): whether the broker moved the
    /// session on is unknown, so the next request opens a new one.
    pub fn reset(&mut self) {
        self.epoch = INITIAL_EPOCH;
        self.partitions.clear();
    }

    /// Closes the session: the epoch of the closing request (`None` when none is open); the
    /// session is reset either way.
    pub fn close(&mut self) -> Option<i32> {
        let open = self.is_open();
        self.reset();
        open.then_some(FINAL_EPOCH)
    }
}

/// The epoch after `epoch` (0 and `i32::MAX` are followed by 1; -1 stays closed).
pub(crate) fn next_epoch(epoch: i32) -> i32 {
    match epoch {
        FINAL_EPOCH => FINAL_EPOCH,
        i32::MAX => 1,
        e if e < 0 => INITIAL_EPOCH,
        e => e + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tip(p: i32) -> TopicIdPartition {
        (Uuid::from_u128(7), p)
    }

    fn set(ps: &[i32]) -> BTreeSet<TopicIdPartition> {
        ps.iter().map(|&p| tip(p)).collect()
    }

    #[test]
    fn a_session_opens_with_every_partition_then_sends_changes_only() {
        let mut s = ShareSession::default();
        assert!(!s.is_open());
        assert_eq!(s.acknowledge_epoch(), None);
        let plan = s.plan_fetch(&set(&[0, 1]));
        assert_eq!(
            plan,
            FetchPlan {
                epoch: 0,
                send: vec![tip(0), tip(1)],
                forget: vec![]
            }
        );
        s.on_response(error_codes::NONE);
        assert_eq!(s.epoch(), 1);
        assert_eq!(s.acknowledge_epoch(), Some(1));
        // Same partitions: nothing named, nothing forgotten.
        let plan = s.plan_fetch(&set(&[0, 1]));
        assert_eq!((plan.epoch, plan.send.len(), plan.forget.len()), (1, 0, 0));
        s.on_response(error_codes::NONE);
        // The assignment changes: 2 added, 0 forgotten.
        let plan = s.plan_fetch(&set(&[1, 2]));
        assert_eq!(
            plan,
            FetchPlan {
                epoch: 2,
                send: vec![tip(2)],
                forget: vec![tip(0)]
            }
        );
        s.on_response(error_codes::NONE);
        // A ShareAcknowledge in between moves the epoch on as well.
        assert_eq!(s.acknowledge_epoch(), Some(3));
        s.on_response(error_codes::NONE);
        assert_eq!(s.epoch(), 4);
        // Other errors still move the epoch on (the broker counted the request).
        s.on_response(error_codes::TOPIC_AUTHORIZATION_FAILED);
        assert_eq!(s.epoch(), 5);
        assert_eq!(s.partitions(), &set(&[1, 2]));
    }

    #[test]
    fn session_errors_and_lost_requests_open_a_new_session() {
        for code in [
            error_codes::SHARE_SESSION_NOT_FOUND,
            error_codes::INVALID_SHARE_SESSION_EPOCH,
        ] {
            let mut s = ShareSession::default();
            s.plan_fetch(&set(&[0]));
            s.on_response(error_codes::NONE);
            s.plan_fetch(&set(&[0]));
            s.on_response(code);
            assert_eq!(s.epoch(), 0);
            assert!(s.partitions().is_empty());
            // The new session names every partition again.
            let plan = s.plan_fetch(&set(&[0]));
            assert_eq!((plan.epoch, plan.send), (0, vec![tip(0)]));
        }
        let mut s = ShareSession::default();
        s.plan_fetch(&set(&[0, 1]));
        s.on_response(error_codes::NONE);
        s.reset();
        let plan = s.plan_fetch(&set(&[1]));
        assert_eq!(
            plan,
            FetchPlan {
                epoch: 0,
                send: vec![tip(1)],
                forget: vec![]
            }
        );
    }

    #[test]
    fn close_sends_the_final_epoch_only_for_an_open_session() {
        let mut s = ShareSession::default();
        assert_eq!(s.close(), None);
        s.plan_fetch(&set(&[0]));
        s.on_response(error_codes::NONE);
        assert_eq!(s.close(), Some(FINAL_EPOCH));
        assert!(!s.is_open());
        assert_eq!(s.close(), None);
    }

    #[test]
    fn epochs_wrap_to_one() {
        assert_eq!(next_epoch(0), 1);
        assert_eq!(next_epoch(1), 2);
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(FINAL_EPOCH), FINAL_EPOCH);
        assert_eq!(next_epoch(-5), 0);
    }
}
