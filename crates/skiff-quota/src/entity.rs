//! Quota entities, quota keys, the configured quotas, and which quota applies to a request.
//!
//! An entity names a user, a client ID, or both (Kafka's `/config/users/<user>/clients/<id>`),
//! each either a name or the default (`<default>`: every user, every client ID, without a quota
//! of its own); or a client instance ID (KIP-1313; Skiff's). For a request of user `u`, client ID
//! `c` and instance `i`, each quota key is taken from the first of these that sets it (Kafka's
//! order, after Skiff's instance entity):
//!
//! 0. `client-instance-id=i`
//! 1. `user=u, client-id=c`
//! 2. `user=u, client-id=<default>`
//! 3. `user=u`
//! 4. `user=<default>, client-id=c`
//! 5. `user=<default>, client-id=<default>`
//! 6. `user=<default>`
//! 7. `client-id=c`
//! 8. `client-id=<default>`
//!
//! The quota is shared by the requests counted in the same bucket: the matched entity with its
//! defaults filled in by the request's names (a `user=<default>` quota gives every user a bucket
//! of its own, as Kafka's metric tags do).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Kafka's entity type names, and Skiff's.
pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const CLIENT_INSTANCE_ID: &str = "client-instance-id";

/// A name in an entity: a given one, or the default.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Name {
    Named(String),
    Default,
}

impl Name {
    /// The name as the protocol carries it (`None`: the default).
    pub fn as_protocol(&self) -> Option<&str> {
        match self {
            Name::Named(n) => Some(n),
            Name::Default => None,
        }
    }

    fn from_protocol(name: Option<&str>) -> Name {
        name.map_or(Name::Default, |n| Name::Named(n.to_string()))
    }
}

/// A quota entity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Entity {
    /// A user, a client ID, or a user's client ID (at least one of the two).
    UserClient {
        user: Option<Name>,
        client_id: Option<Name>,
    },
    /// One client instance (KIP-1313), by its ID in Kafka's text form.
    Instance(String),
}

/// Why an entity, a key or a value is refused (INVALID_REQUEST, with this message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

fn invalid(message: impl Into<String>) -> Invalid {
    Invalid(message.into())
}

impl Entity {
    /// The entity of AlterClientQuotas' (type, name) pairs (`None` name: the default).
    pub fn from_parts(parts: &[(&str, Option<&str>)]) -> Result<Entity, Invalid> {
        let mut user = None;
        let mut client_id = None;
        let mut instance = None;
        for (kind, name) in parts {
            let slot = match *kind {
                USER => &mut user,
                CLIENT_ID => &mut client_id,
                CLIENT_INSTANCE_ID => {
                    if instance.is_some() {
                        return Err(invalid(format!("Duplicate {CLIENT_INSTANCE_ID} entity")));
                    }
                    let Some(id) = name else {
                        return Err(invalid(format!(
                            "A {CLIENT_INSTANCE_ID} quota names one instance: it has no default"
                        )));
                    };
                    instance = Some(id.to_string());
                    continue;
                }
                "ip" => {
                    return Err(invalid(
                        "ip quotas (connection_creation_rate) are not supported",
                    ));
                }
                other => return Err(invalid(format!("Unknown entity type {other}"))),
            };
            if slot.is_some() {
                return Err(invalid(format!("Duplicate {kind} entity")));
            }
            *slot = Some(Name::from_protocol(*name));
        }
        match (user, client_id, instance) {
            (None, None, Some(id)) => Ok(Entity::Instance(id)),
            (_, _, Some(_)) => Err(invalid(format!(
                "A {CLIENT_INSTANCE_ID} quota stands alone: no {USER} or {CLIENT_ID} with it"
            ))),
            (None, None, None) => Err(invalid("Invalid empty client quota entity")),
            (user, client_id, None) => Ok(Entity::UserClient { user, client_id }),
        }
    }

    /// The entity as (type, name) pairs (`None` name: the default), users first.
    pub fn parts(&self) -> Vec<(&'static str, Option<&str>)> {
        match self {
            Entity::UserClient { user, client_id } => {
                let mut parts = Vec::new();
                if let Some(u) = user {
                    parts.push((USER, u.as_protocol()));
                }
                if let Some(c) = client_id {
                    parts.push((CLIENT_ID, c.as_protocol()));
                }
                parts
            }
            Entity::Instance(id) => vec![(CLIENT_INSTANCE_ID, Some(id.as_str()))],
        }
    }
}

/// The quota keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Key {
    /// Bytes per second produced.
    ProducerByteRate,
    /// Bytes per second fetched.
    ConsumerByteRate,
    /// Percentage of one request-handling thread's time.
    RequestPercentage,
    /// Partitions created or deleted per second (KIP-599).
    ControllerMutationRate,
}

impl Key {
    pub const ALL: [Key; 4] = [
        Key::ProducerByteRate,
        Key::ConsumerByteRate,
        Key::RequestPercentage,
        Key::ControllerMutationRate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Key::ProducerByteRate => "producer_byte_rate",
            Key::ConsumerByteRate => "consumer_byte_rate",
            Key::RequestPercentage => "request_percentage",
            Key::ControllerMutationRate => "controller_mutation_rate",
        }
    }

    pub fn parse(name: &str) -> Option<Key> {
        Key::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Kafka's checks of a value: the byte rates are whole numbers (its LONG configs), every
    /// value is above zero.
    pub fn check(self, value: f64) -> Result<(), Invalid> {
        if !value.is_finite() || value <= 0.0 {
            return Err(invalid(format!(
                "Quota {} must be a positive number, not {value}",
                self.name()
            )));
        }
        if matches!(self, Key::ProducerByteRate | Key::ConsumerByteRate) && value.fract() != 0.0 {
            return Err(invalid(format!(
                "Quota {} must be a whole number of bytes per second, not {value}",
                self.name()
            )));
        }
        Ok(())
    }
}

/// One change of AlterClientQuotas: set a key to a value, or remove it.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    pub key: String,
    pub value: f64,
    pub remove: bool,
}

/// How DescribeClientQuotas matches one entity type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// This name.
    Exact(String),
    /// The default.
    Default,
    /// Any name but the default (Kafka's MATCH_TYPE_SPECIFIED).
    Specified,
}

/// One component of a DescribeClientQuotas filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    pub entity_type: String,
    pub matching: Match,
}

/// An entity's quotas, as DescribeClientQuotas lists them.
pub type Described = Vec<(Entity, BTreeMap<Key, f64>)>;

/// The configured quotas: each entity's keys and values. Stored as a list of (entity, quotas)
/// (JSON maps need string keys).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(
    from = "Vec<(Entity, BTreeMap<Key, f64>)>",
    into = "Vec<(Entity, BTreeMap<Key, f64>)>"
)]
pub struct Quotas {
    entries: BTreeMap<Entity, BTreeMap<Key, f64>>,
}

impl From<Vec<(Entity, BTreeMap<Key, f64>)>> for Quotas {
    fn from(entries: Vec<(Entity, BTreeMap<Key, f64>)>) -> Quotas {
        Quotas {
            entries: entries.into_iter().filter(|(_, k)| !k.is_empty()).collect(),
        }
    }
}

impl From<Quotas> for Vec<(Entity, BTreeMap<Key, f64>)> {
    fn from(q: Quotas) -> Self {
        q.entries.into_iter().collect()
    }
}

impl Quotas {
    /// An entity's quotas (none: empty).
    pub fn of(&self, entity: &Entity) -> BTreeMap<Key, f64> {
        self.entries.get(entity).cloned().unwrap_or_default()
    }

    /// Every entity with quotas.
    pub fn entities(&self) -> impl Iterator<Item = (&Entity, &BTreeMap<Key, f64>)> {
        self.entries.iter()
    }

    /// AlterClientQuotas of one entity: every op checked first (unknown or repeated keys,
    /// values), then applied together; an entity left without keys is forgotten.
    pub fn alter(&mut self, entity: &Entity, ops: &[Op]) -> Result<(), Invalid> {
        let mut seen = std::collections::BTreeSet::new();
        let mut checked = Vec::with_capacity(ops.len());
        for op in ops {
            let Some(key) = Key::parse(&op.key) else {
                return Err(invalid(format!("Unknown quota key {}", op.key)));
            };
            if !seen.insert(key) {
                return Err(invalid(format!("Duplicate quota key {}", op.key)));
            }
            if !op.remove {
                key.check(op.value)?;
            }
            checked.push((key, (!op.remove).then_some(op.value)));
        }
        let mut keys = self.of(entity);
        for (key, value) in checked {
            match value {
                Some(v) => keys.insert(key, v),
                None => keys.remove(&key),
            };
        }
        if keys.is_empty() {
            self.entries.remove(entity);
        } else {
            self.entries.insert(entity.clone(), keys);
        }
        Ok(())
    }

    /// DescribeClientQuotas: the entities matching every component (and, `strict`, having no
    /// other entity type), with their quotas. A component repeated, or of an unknown type, is
    /// refused.
    pub fn describe(&self, components: &[Component], strict: bool) -> Result<Described, Invalid> {
        let mut types = std::collections::BTreeSet::new();
        for c in components {
            if ![USER, CLIENT_ID, CLIENT_INSTANCE_ID, "ip"].contains(&c.entity_type.as_str()) {
                return Err(invalid(format!("Unknown entity type {}", c.entity_type)));
            }
            if !types.insert(c.entity_type.as_str()) {
                return Err(invalid(format!(
                    "Duplicate filter component entity type {}",
                    c.entity_type
                )));
            }
        }
        Ok(self
            .entries
            .iter()
            .filter(|(entity, _)| {
                let parts = entity.parts();
                let all = components.iter().all(|c| {
                    parts
                        .iter()
                        .find(|(t, _)| *t == c.entity_type)
                        .is_some_and(|(_, name)| match (&c.matching, name) {
                            (Match::Exact(want), Some(n)) => want == n,
                            (Match::Default, None) => true,
                            (Match::Specified, Some(_)) => true,
                            _ => false,
                        })
                });
                all && (!strict || parts.len() == components.len())
            })
            .map(|(entity, keys)| (entity.clone(), keys.clone()))
            .collect())
    }

    /// The quota of `key` for a request of `user`, `client_id` and client instance `instance`,
    /// with the bucket it is counted in; `None` when no entity sets it.
    pub fn resolve(
        &self,
        key: Key,
        user: &str,
        client_id: &str,
        instance: Option<&str>,
    ) -> Option<(f64, Bucket)> {
        if let Some(id) = instance {
            let entity = Entity::Instance(id.to_string());
            if let Some(v) = self.entries.get(&entity).and_then(|k| k.get(&key)) {
                return Some((*v, Bucket::Instance(id.to_string())));
            }
        }
        let named = |n: &str| Some(Name::Named(n.to_string()));
        let order = [
            (named(user), named(client_id)),
            (named(user), Some(Name::Default)),
            (named(user), None),
            (Some(Name::Default), named(client_id)),
            (Some(Name::Default), Some(Name::Default)),
            (Some(Name::Default), None),
            (None, named(client_id)),
            (None, Some(Name::Default)),
        ];
        order.into_iter().find_map(|(u, c)| {
            let entity = Entity::UserClient {
                user: u.clone(),
                client_id: c.clone(),
            };
            let value = *self.entries.get(&entity)?.get(&key)?;
            // The bucket: the matched levels, defaults filled in by the request's names.
            let bucket = Bucket::UserClient {
                user: u.map(|_| user.to_string()),
                client_id: c.map(|_| client_id.to_string()),
            };
            Some((value, bucket))
        })
    }
}

/// Where a request is counted against its quota: requests in one bucket share it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bucket {
    UserClient {
        user: Option<String>,
        client_id: Option<String>,
    },
    Instance(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(parts: &[(&str, Option<&str>)]) -> Entity {
        Entity::from_parts(parts).expect("valid entity")
    }

    fn set(key: &str, value: f64) -> Op {
        Op {
            key: key.into(),
            value,
            remove: false,
        }
    }

    #[test]
    fn entities_are_checked_and_round_trip() {
        let e = entity(&[(CLIENT_ID, Some("app")), (USER, None)]);
        assert_eq!(e.parts(), vec![(USER, None), (CLIENT_ID, Some("app"))]);
        assert_eq!(Entity::from_parts(&e.parts()), Ok(e));
        let i = entity(&[(CLIENT_INSTANCE_ID, Some("AAAAAAAAAAAAAAAAAAAAAQ"))]);
        assert_eq!(Entity::from_parts(&i.parts()), Ok(i));
        for bad in [
            vec![],
            vec![(USER, Some("a")), (USER, Some("b"))],
            vec![("ip", Some("1.2.3.4"))],
            vec![("group", Some("g"))],
            vec![(CLIENT_INSTANCE_ID, None)],
            vec![(CLIENT_INSTANCE_ID, Some("x")), (USER, Some("a"))],
        ] {
            assert!(Entity::from_parts(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn alterations_are_checked_whole_and_applied_together() {
        let mut q = Quotas::default();
        let e = entity(&[(USER, Some("alice"))]);
        q.alter(
            &e,
            &[
                set("producer_byte_rate", 1024.0),
                set("request_percentage", 12.5),
            ],
        )
        .expect("set");
        assert_eq!(q.of(&e).get(&Key::ProducerByteRate), Some(&1024.0));
        for bad in [
            vec![set("producer_byte_rate", 1.5)],
            vec![set("consumer_byte_rate", 0.0)],
            vec![set("request_percentage", -1.0)],
            vec![set("request_percentage", f64::NAN)],
            vec![set("no_such_key", 1.0)],
            vec![
                set("producer_byte_rate", 1.0),
                set("producer_byte_rate", 2.0),
            ],
            // One bad op: nothing of the entity changes.
            vec![
                set("consumer_byte_rate", 10.0),
                set("producer_byte_rate", -5.0),
            ],
        ] {
            let before = q.clone();
            assert!(q.alter(&e, &bad).is_err(), "{bad:?}");
            assert_eq!(q, before);
        }
        let remove = |key: &str| Op {
            key: key.into(),
            value: 0.0,
            remove: true,
        };
        q.alter(
            &e,
            &[remove("producer_byte_rate"), remove("request_percentage")],
        )
        .expect("removed");
        assert_eq!(
            q.entities().count(),
            0,
            "an entity without keys is forgotten"
        );
    }

    #[test]
    fn the_first_entity_that_sets_a_key_wins_in_kafkas_order() {
        let mut q = Quotas::default();
        type Parts<'a> = &'a [(&'a str, Option<&'a str>)];
        let levels: [(Parts<'_>, f64); 8] = [
            (&[(USER, Some("u")), (CLIENT_ID, Some("c"))], 1.0),
            (&[(USER, Some("u")), (CLIENT_ID, None)], 2.0),
            (&[(USER, Some("u"))], 3.0),
            (&[(USER, None), (CLIENT_ID, Some("c"))], 4.0),
            (&[(USER, None), (CLIENT_ID, None)], 5.0),
            (&[(USER, None)], 6.0),
            (&[(CLIENT_ID, Some("c"))], 7.0),
            (&[(CLIENT_ID, None)], 8.0),
        ];
        for (parts, v) in levels {
            q.alter(&entity(parts), &[set("producer_byte_rate", v)])
                .expect("set");
        }
        // Remove the levels from the top one by one: the next takes over each time.
        for (i, (parts, v)) in levels.iter().enumerate() {
            let (value, _) = q
                .resolve(Key::ProducerByteRate, "u", "c", None)
                .expect("a quota");
            assert_eq!(value, *v, "level {i}");
            q.alter(
                &entity(parts),
                &[Op {
                    key: "producer_byte_rate".into(),
                    value: 0.0,
                    remove: true,
                }],
            )
            .expect("removed");
        }
        assert_eq!(q.resolve(Key::ProducerByteRate, "u", "c", None), None);
    }

    #[test]
    fn buckets_follow_the_matched_entity_and_instances_stand_alone() {
        let mut q = Quotas::default();
        q.alter(
            &entity(&[(CLIENT_ID, None)]),
            &[set("consumer_byte_rate", 100.0)],
        )
        .expect("set");
        q.alter(
            &entity(&[(CLIENT_INSTANCE_ID, Some("inst-1"))]),
            &[set("consumer_byte_rate", 5.0)],
        )
        .expect("set");
        // The default client-id quota: each client ID a bucket of its own, users not told apart.
        let (_, a) = q
            .resolve(Key::ConsumerByteRate, "u1", "a", None)
            .expect("quota");
        let (_, a2) = q
            .resolve(Key::ConsumerByteRate, "u2", "a", None)
            .expect("quota");
        let (_, b) = q
            .resolve(Key::ConsumerByteRate, "u1", "b", None)
            .expect("quota");
        assert_eq!(a, a2);
        assert_ne!(a, b);
        // The instance quota: only that instance, over every other level; its siblings (same
        // client ID) keep the client-id quota.
        assert_eq!(
            q.resolve(Key::ConsumerByteRate, "u1", "a", Some("inst-1")),
            Some((5.0, Bucket::Instance("inst-1".into())))
        );
        assert_eq!(
            q.resolve(Key::ConsumerByteRate, "u1", "a", Some("inst-2")),
            Some((100.0, a))
        );
        // Keys resolve independently.
        assert_eq!(
            q.resolve(Key::ProducerByteRate, "u1", "a", Some("inst-1")),
            None
        );
    }

    #[test]
    fn describe_filters_as_kafka() {
        let mut q = Quotas::default();
        for parts in [
            &[(USER, Some("alice"))][..],
            &[(USER, Some("alice")), (CLIENT_ID, Some("app"))][..],
            &[(USER, None)][..],
            &[(CLIENT_ID, Some("app"))][..],
        ] {
            q.alter(&entity(parts), &[set("producer_byte_rate", 1.0)])
                .expect("set");
        }
        let c = |t: &str, m: Match| Component {
            entity_type: t.into(),
            matching: m,
        };
        let names =
            |found: Vec<(Entity, BTreeMap<Key, f64>)>| -> Vec<Vec<(&'static str, Option<String>)>> {
                found
                    .iter()
                    .map(|(e, _)| {
                        e.parts()
                            .into_iter()
                            .map(|(t, n)| (t, n.map(str::to_string)))
                            .collect()
                    })
                    .collect()
            };
        let alice = names(
            q.describe(&[c(USER, Match::Exact("alice".into()))], false)
                .expect("ok"),
        );
        assert_eq!(alice.len(), 2, "{alice:?}");
        let strict = names(
            q.describe(&[c(USER, Match::Exact("alice".into()))], true)
                .expect("ok"),
        );
        assert_eq!(strict, vec![vec![(USER, Some("alice".to_string()))]]);
        let defaults = names(q.describe(&[c(USER, Match::Default)], false).expect("ok"));
        assert_eq!(defaults, vec![vec![(USER, None)]]);
        let specified = q.describe(&[c(USER, Match::Specified)], false).expect("ok");
        assert_eq!(specified.len(), 2);
        assert_eq!(q.describe(&[], false).expect("ok").len(), 4);
        assert_eq!(q.describe(&[], true).expect("ok").len(), 0);
        assert!(
            q.describe(&[c(USER, Match::Default), c(USER, Match::Specified)], false)
                .is_err()
        );
        assert!(q.describe(&[c("topic", Match::Default)], false).is_err());
    }

    #[test]
    fn quotas_serialize() {
        let mut q = Quotas::default();
        q.alter(
            &entity(&[(USER, None), (CLIENT_ID, Some("c"))]),
            &[set("request_percentage", 50.0)],
        )
        .expect("set");
        let json = serde_json::to_string(&q).expect("json");
        assert_eq!(serde_json::from_str::<Quotas>(&json).expect("back"), q);
    }
}
