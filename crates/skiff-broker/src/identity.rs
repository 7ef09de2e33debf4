//! KIP-1313: one client instance ID per connection.
//!
//! A connection's identity is unset until the first request that uses request header v2; that
//! request fixes it to "ID = X" or "no ID" (a zero UUID counts as no ID). Every later v2-header
//! request must carry the same thing. Requests with header v1 are never checked and never fix it.
//! This module is plain data and a pure function; the connection applies it before dispatch.

use skiff_protocol::Uuid;

/// The identity state of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnectionIdentity {
    /// No v2-header request yet.
    #[default]
    Unset,
    /// Fixed by the first v2-header request: `Some(id)` or `None` for "no ID".
    Fixed(Option<Uuid>),
}

/// Why a request was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// The connection has ID X; the request carries none.
    MissingId,
    /// The connection has ID X; the request carries another.
    DifferentId,
    /// The connection has no ID; the request carries one.
    UnexpectedId,
}

impl RejectReason {
    pub const ALL: [RejectReason; 3] = [
        RejectReason::MissingId,
        RejectReason::DifferentId,
        RejectReason::UnexpectedId,
    ];

    pub fn label(self) -> &'static str {
        match self {
            RejectReason::MissingId => "missing_id",
            RejectReason::DifferentId => "different_id",
            RejectReason::UnexpectedId => "unexpected_id",
        }
    }
}

/// The outcome of checking one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go ahead. `fixed_now` is set when this request fixed the connection's identity.
    Accept { fixed_now: bool },
    Reject {
        reason: RejectReason,
        expected: Option<Uuid>,
        received: Option<Uuid>,
    },
}

impl Verdict {
    /// The INVALID_REQUEST message for a rejection.
    pub fn message(&self) -> Option<String> {
        let show = |id: &Option<Uuid>| match id {
            Some(id) => id.to_string(),
            None => "none".to_string(),
        };
        match self {
            Verdict::Accept { .. } => None,
            Verdict::Reject {
                expected, received, ..
            } => Some(format!(
                "KIP-1313: this connection's client instance ID is {} but the request header carries {}",
                show(expected),
                show(received)
            )),
        }
    }
}

impl ConnectionIdentity {
    /// Checks a request with header version `header_version` carrying `id` (zero = `None`), and
    /// fixes the identity when this is the first v2-header request.
    pub fn check(&mut self, header_version: i16, id: Option<Uuid>) -> Verdict {
        let id = id.and_then(Uuid::non_zero);
        if header_version < 2 {
            return Verdict::Accept { fixed_now: false };
        }
        match *self {
            ConnectionIdentity::Unset => {
                *self = ConnectionIdentity::Fixed(id);
                Verdict::Accept { fixed_now: true }
            }
            ConnectionIdentity::Fixed(expected) if expected == id => {
                Verdict::Accept { fixed_now: false }
            }
            ConnectionIdentity::Fixed(expected) => Verdict::Reject {
                reason: match (expected, id) {
                    (Some(_), None) => RejectReason::MissingId,
                    (None, Some(_)) => RejectReason::UnexpectedId,
                    _ => RejectReason::DifferentId,
                },
                expected,
                received: id,
            },
        }
    }

    /// The fixed ID, if the connection has one.
    pub fn instance_id(&self) -> Option<Uuid> {
        match self {
            ConnectionIdentity::Fixed(id) => *id,
            ConnectionIdentity::Unset => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Uuid = Uuid::from_u128(0xa);
    const B: Uuid = Uuid::from_u128(0xb);

    fn states() -> [ConnectionIdentity; 4] {
        [
            ConnectionIdentity::Unset,
            ConnectionIdentity::Fixed(None),
            ConnectionIdentity::Fixed(Some(A)),
            ConnectionIdentity::Fixed(Some(B)),
        ]
    }

    /// Every (state, header version, ID) combination against the rules written out by hand.
    #[test]
    fn exhaustive_state_table() {
        let ids = [None, Some(Uuid::ZERO), Some(A), Some(B)];
        for state in states() {
            for header_version in [0i16, 1, 2] {
                for id in ids {
                    let mut s = state;
                    let verdict = s.check(header_version, id);
                    let normalized = id.filter(|u| !u.is_zero());
                    if header_version < 2 {
                        assert_eq!(verdict, Verdict::Accept { fixed_now: false });
                        assert_eq!(s, state, "v1 headers never change the state");
                        continue;
                    }
                    match state {
                        ConnectionIdentity::Unset => {
                            assert_eq!(verdict, Verdict::Accept { fixed_now: true });
                            assert_eq!(s, ConnectionIdentity::Fixed(normalized));
                        }
                        ConnectionIdentity::Fixed(expected) => {
                            assert_eq!(s, state, "a fixed identity never changes");
                            if expected == normalized {
                                assert_eq!(verdict, Verdict::Accept { fixed_now: false });
                            } else {
                                let reason = match (expected, normalized) {
                                    (Some(_), None) => RejectReason::MissingId,
                                    (None, Some(_)) => RejectReason::UnexpectedId,
                                    _ => RejectReason::DifferentId,
                                };
                                assert_eq!(
                                    verdict,
                                    Verdict::Reject {
                                        reason,
                                        expected,
                                        received: normalized
                                    }
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn explicit_zero_is_the_same_as_absent() {
        let mut s = ConnectionIdentity::default();
        assert_eq!(
            s.check(2, Some(Uuid::ZERO)),
            Verdict::Accept { fixed_now: true }
        );
        assert_eq!(s, ConnectionIdentity::Fixed(None));
        assert_eq!(s.check(2, None), Verdict::Accept { fixed_now: false });
        assert!(matches!(s.check(2, Some(A)), Verdict::Reject { .. }));
    }

    #[test]
    fn a_sequence_with_interleaved_v1_requests() {
        let mut s = ConnectionIdentity::default();
        assert_eq!(s.check(1, Some(B)), Verdict::Accept { fixed_now: false });
        assert_eq!(s.check(2, Some(A)), Verdict::Accept { fixed_now: true });
        assert_eq!(s.check(1, None), Verdict::Accept { fixed_now: false });
        assert_eq!(s.check(2, Some(A)), Verdict::Accept { fixed_now: false });
        let rejected = s.check(2, Some(B));
        assert!(
            rejected
                .message()
                .is_some_and(|m| m.contains(&A.to_string()) && m.contains(&B.to_string()))
        );
        // A rejection changes nothing: the right ID still works.
        assert_eq!(s.check(2, Some(A)), Verdict::Accept { fixed_now: false });
        assert_eq!(s.instance_id(), Some(A));
    }
}
