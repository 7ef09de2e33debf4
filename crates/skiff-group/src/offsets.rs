//! Committed offsets per group, topic and partition.
//!
//! Plain data: the coordinator validates a commit against the group's generation or member epoch
//! before it lands here, and persists each change as a record. Topics are kept by name (requests
//! that name topics by ID are resolved by the broker).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

/// One committed offset, as OffsetFetch returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    pub offset: i64,
    /// -1 when the client did not send one.
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_timestamp_ms: i64,
}

/// The key of one committed offset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OffsetKey {
    pub topic: String,
    pub partition: i32,
}

/// Committed offsets of every group.
#[derive(Debug, Default, Clone)]
pub struct OffsetStore {
    groups: HashMap<String, BTreeMap<OffsetKey, CommittedOffset>>,
}

impl OffsetStore {
    pub fn commit(&mut self, group: &str, key: OffsetKey, value: CommittedOffset) {
        self.groups
            .entry(group.to_string())
            .or_default()
            .insert(key, value);
    }

    pub fn fetch(&self, group: &str, topic: &str, partition: i32) -> Option<&CommittedOffset> {
        self.groups.get(group)?.get(&OffsetKey {
            topic: topic.to_string(),
            partition,
        })
    }

    /// Every committed offset of a group, ordered by topic and partition.
    pub fn fetch_all(&self, group: &str) -> impl Iterator<Item = (&OffsetKey, &CommittedOffset)> {
        self.groups.get(group).into_iter().flat_map(|m| m.iter())
    }

    pub fn has_offsets(&self, group: &str) -> bool {
        self.groups.get(group).is_some_and(|m| !m.is_empty())
    }

    /// Removes one offset; returns whether it existed.
    pub fn delete(&mut self, group: &str, topic: &str, partition: i32) -> bool {
        let Some(offsets) = self.groups.get_mut(group) else {
            return false;
        };
        let removed = offsets
            .remove(&OffsetKey {
                topic: topic.to_string(),
                partition,
            })
            .is_some();
        if offsets.is_empty() {
            self.groups.remove(group);
        }
        removed
    }

    /// Removes every offset of a group; returns how many there were.
    pub fn delete_group(&mut self, group: &str) -> usize {
        self.groups.remove(group).map_or(0, |m| m.len())
    }

    /// Removes every group's offsets for a deleted topic; returns the (group, key) pairs removed.
    pub fn delete_topic(&mut self, topic: &str) -> Vec<(String, OffsetKey)> {
        let mut removed = Vec::new();
        for (group, offsets) in self.groups.iter_mut() {
            offsets.retain(|key, _| {
                let keep = key.topic != topic;
                if !keep {
                    removed.push((group.clone(), key.clone()));
                }
                keep
            });
        }
        self.groups.retain(|_, offsets| !offsets.is_empty());
        removed
    }

    /// The groups that have committed offsets.
    pub fn groups(&self) -> impl Iterator<Item = &str> {
        self.groups.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(topic: &str, partition: i32) -> OffsetKey {
        OffsetKey {
            topic: topic.into(),
            partition,
        }
    }

    fn at(offset: i64) -> CommittedOffset {
        CommittedOffset {
            offset,
            leader_epoch: -1,
            metadata: None,
            commit_timestamp_ms: 0,
        }
    }

    #[test]
    fn commit_fetch_overwrite_delete() {
        let mut store = OffsetStore::default();
        store.commit("g", key("t", 0), at(5));
        store.commit("g", key("t", 0), at(7));
        store.commit("g", key("t", 1), at(1));
        store.commit("h", key("u", 0), at(3));
        assert_eq!(store.fetch("g", "t", 0).map(|c| c.offset), Some(7));
        assert_eq!(store.fetch("g", "t", 2), None);
        assert_eq!(store.fetch_all("g").count(), 2);
        assert!(store.delete("g", "t", 1));
        assert!(!store.delete("g", "t", 1));
        assert_eq!(store.delete_topic("u").len(), 1);
        assert!(!store.has_offsets("h"));
        assert_eq!(store.delete_group("g"), 1);
        assert_eq!(store.groups().count(), 0);
    }
}
