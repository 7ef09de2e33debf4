//! Identities owned by principals, Skiff's step beyond Kafka: with authentication on, a client
//! instance ID (KIP-1313's header ID, which is also the KIP-714 telemetry ID) belongs to the
//! first principal that presents it, while any of its connections is open and for
//! `client.instance.id.binding.ms` after; a group member ID (KIP-848's client-chosen ones, classic
//! and static members too) belongs to the principal that created the member.
//!
//! Plain data behind locks, with the time passed in.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use skiff_auth::principal::KafkaPrincipal;
use skiff_protocol::Uuid;

/// Instance IDs remembered after their last connection closed, at most; beyond that the ones
/// released longest ago are forgotten first.
const RELEASED_KEPT: usize = 100_000;
/// Member IDs remembered, at most; beyond that the oldest are forgotten.
const MEMBERS_KEPT: usize = 1_000_000;

type MemberOwners = HashMap<(String, String), Arc<KafkaPrincipal>>;

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The principal owns the identity (now, or already).
    Owner,
    /// Another principal owns it.
    Conflict { owner: String },
}

struct InstanceOwner {
    principal: Arc<KafkaPrincipal>,
    /// Open connections of the owner that presented the ID.
    connections: usize,
    /// When the last of them closed.
    released_at_ms: i64,
}

/// Who owns which identity.
pub struct Owners {
    /// How long an instance ID stays its owner's after its last connection closes.
    hold_ms: i64,
    instances: Mutex<HashMap<Uuid, InstanceOwner>>,
    /// (group, member ID) -> owner, and the order members were created in.
    members: Mutex<(MemberOwners, VecDeque<(String, String)>)>,
    /// Claims refused (or, with `warn`, let through) because another principal owned the ID.
    pub conflicts: std::sync::atomic::AtomicU64,
}

impl Owners {
    pub fn new(hold_ms: i64) -> Owners {
        Owners {
            hold_ms,
            instances: Mutex::new(HashMap::new()),
            members: Mutex::new(Default::default()),
            conflicts: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A connection of `principal` presents instance ID `id`: it owns it if nobody does (or the
    /// previous owner's hold ran out), and the connection is counted until [`Self::release`].
    pub fn claim_instance(&self, id: Uuid, principal: &Arc<KafkaPrincipal>, now_ms: i64) -> Claim {
        let mut instances = self
            .instances
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let held = instances.get(&id).is_some_and(|owner| {
            owner.connections > 0 || now_ms - owner.released_at_ms < self.hold_ms
        });
        match instances.get_mut(&id) {
            Some(owner) if held && owner.principal != *principal => {
                self.count_conflict();
                return Claim::Conflict {
                    owner: owner.principal.to_string(),
                };
            }
            Some(owner) if held => owner.connections += 1,
            _ => {
                instances.insert(
                    id,
                    InstanceOwner {
                        principal: Arc::clone(principal),
                        connections: 1,
                        released_at_ms: now_ms,
                    },
                );
                forget_oldest_released(&mut instances);
            }
        }
        Claim::Owner
    }

    /// One of the owner's connections with this ID closed.
    pub fn release_instance(&self, id: Uuid, now_ms: i64) {
        let mut instances = self
            .instances
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(owner) = instances.get_mut(&id) {
            owner.connections = owner.connections.saturating_sub(1);
            owner.released_at_ms = now_ms;
        }
    }

    /// The instance IDs with a connection of their owner open here, and their owners (cluster
    /// mode renews these claims).
    pub fn open_instances(&self) -> Vec<(Uuid, String)> {
        let instances = self
            .instances
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        instances
            .iter()
            .filter(|(_, owner)| owner.connections > 0)
            .map(|(id, owner)| (*id, owner.principal.to_string()))
            .collect()
    }

    /// Counts a claim another broker's owner refused (cluster mode).
    pub fn conflict_elsewhere(&self) {
        self.count_conflict();
    }

    /// Whether `principal` may speak for instance ID `id` (telemetry pushes name it in the body).
    pub fn instance_owner_is(&self, id: Uuid, principal: &KafkaPrincipal) -> Claim {
        let instances = self
            .instances
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match instances.get(&id) {
            Some(owner) if *owner.principal != *principal => Claim::Conflict {
                owner: owner.principal.to_string(),
            },
            _ => Claim::Owner,
        }
    }

    /// A request of `principal` names member `member` of `group`: the first principal to name
    /// it owns it.
    pub fn claim_member(
        &self,
        group: &str,
        member: &str,
        principal: &Arc<KafkaPrincipal>,
    ) -> Claim {
        let mut members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        let (owners, order) = &mut *members;
        let key = (group.to_string(), member.to_string());
        match owners.get(&key) {
            Some(owner) if **owner != **principal => {
                self.count_conflict();
                Claim::Conflict {
                    owner: owner.to_string(),
                }
            }
            Some(_) => Claim::Owner,
            None => {
                owners.insert(key.clone(), Arc::clone(principal));
                order.push_back(key);
                while order.len() > MEMBERS_KEPT {
                    if let Some(oldest) = order.pop_front() {
                        owners.remove(&oldest);
                    }
                }
                Claim::Owner
            }
        }
    }

    /// Whether a principal owns the member ID now.
    pub fn member_owned(&self, group: &str, member: &str) -> bool {
        let members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        members
            .0
            .contains_key(&(group.to_string(), member.to_string()))
    }

    /// Forgets the owners of every member of the groups `pick` chooses (cluster mode: a shard
    /// that moved away, or that is about to be loaded with the owners stored with it).
    pub fn forget_members_of(&self, pick: impl Fn(&str) -> bool) {
        let mut members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        members.0.retain(|(group, _), _| !pick(group));
    }

    /// The member left its group: its ID may be created again by anyone.
    pub fn forget_member(&self, group: &str, member: &str) {
        // Its place in the creation order stays until it comes round (removing it there would
        // cost a scan); by then its key may name a newer member, which is forgotten early.
        let mut members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        members.0.remove(&(group.to_string(), member.to_string()));
    }

    fn count_conflict(&self) {
        self.conflicts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Keeps at most [`RELEASED_KEPT`] released instance IDs: the ones released longest ago go.
fn forget_oldest_released(instances: &mut HashMap<Uuid, InstanceOwner>) {
    let released = instances.values().filter(|o| o.connections == 0).count();
    if released <= RELEASED_KEPT {
        return;
    }
    let mut times: Vec<i64> = instances
        .values()
        .filter(|o| o.connections == 0)
        .map(|o| o.released_at_ms)
        .collect();
    times.sort_unstable();
    let cutoff = times
        .get(released - RELEASED_KEPT)
        .copied()
        .unwrap_or(i64::MIN);
    instances.retain(|_, o| o.connections > 0 || o.released_at_ms > cutoff);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> Arc<KafkaPrincipal> {
        Arc::new(KafkaPrincipal::user(name))
    }

    #[test]
    fn an_instance_id_is_held_while_connected_and_for_the_hold_after() {
        let owners = Owners::new(1_000);
        let id = Uuid::from_u128(7);
        let (alice, mallory) = (user("alice"), user("mallory"));
        assert_eq!(owners.claim_instance(id, &alice, 0), Claim::Owner);
        assert_eq!(owners.claim_instance(id, &alice, 10), Claim::Owner);
        assert_eq!(
            owners.claim_instance(id, &mallory, 20),
            Claim::Conflict {
                owner: "User:alice".into()
            }
        );
        owners.release_instance(id, 100);
        owners.release_instance(id, 200);
        // Released, but within the hold.
        assert!(matches!(
            owners.claim_instance(id, &mallory, 1_199),
            Claim::Conflict { .. }
        ));
        assert_eq!(
            owners.instance_owner_is(id, &mallory),
            Claim::Conflict {
                owner: "User:alice".into()
            }
        );
        // After the hold anyone may take it.
        assert_eq!(owners.claim_instance(id, &mallory, 1_200), Claim::Owner);
        assert_eq!(owners.instance_owner_is(id, &mallory), Claim::Owner);
        assert_eq!(
            owners.conflicts.load(std::sync::atomic::Ordering::Relaxed),
            2
        );
    }

    #[test]
    fn a_member_id_belongs_to_its_creator_until_it_leaves() {
        let owners = Owners::new(0);
        let (alice, mallory) = (user("alice"), user("mallory"));
        assert_eq!(owners.claim_member("g", "m1", &alice), Claim::Owner);
        assert_eq!(owners.claim_member("g", "m1", &alice), Claim::Owner);
        assert!(matches!(
            owners.claim_member("g", "m1", &mallory),
            Claim::Conflict { .. }
        ));
        // Another group's member of the same ID is another member.
        assert_eq!(owners.claim_member("h", "m1", &mallory), Claim::Owner);
        owners.forget_member("g", "m1");
        assert_eq!(owners.claim_member("g", "m1", &mallory), Claim::Owner);
    }
}
