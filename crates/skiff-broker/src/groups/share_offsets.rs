//! The share group offset admin APIs in the group coordinator (KIP-932):
//! DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets, over the
//! share-partition states the coordinator keeps ([`super::share`]).
//!
//! Kafka's semantics (`GroupCoordinatorService` and `GroupMetadataManager`, with the share
//! coordinator's `ReadShareGroupStateSummary`, `InitializeShareGroupState` and
//! `DeleteShareGroupState` folded in, as Skiff is its own share coordinator):
//!
//! - **Describe** reads the persisted state, which is current: the share-partition leader writes
//!   every change through. A partition without state (never initialized, or of a topic that does
//!   not exist) has start offset -1; the group is not looked up at all, so an unknown group, or
//!   one of another type, has no offsets rather than an error, as in Kafka. Without a topic list,
//!   every share partition of the group with state is described.
//! - **Alter** needs an empty share group (NON_EMPTY_GROUP "The group is not empty."), creates
//!   one when there is none (Kafka's `getOrMaybeCreateShareGroup`), refuses a group of another
//!   type (GROUP_ID_NOT_FOUND "Group {id} is not a share group."), and writes each partition a
//!   fresh state: the given start offset, nothing in flight, the state epoch one above the
//!   previous state's (a fresh one: [`INITIAL_STATE_EPOCH`]). Partitions without state become
//!   initialized, so the group assigns them. Skiff refuses a negative start offset per partition
//!   (INVALID_REQUEST): a share partition cannot start there (Kafka stores -1 as "uninitialized",
//!   resolved by `share.auto.offset.reset` when the partition is next loaded).
//! - **Delete** needs an existing, empty share group (GROUP_ID_NOT_FOUND "Group {id} not
//!   found.", or "... is not a share group.", NON_EMPTY_GROUP), tombstones every state of each
//!   named topic, and forgets the topic's partitions as initialized, so a later member has them
//!   initialized afresh by `share.auto.offset.reset`. A topic that does not exist, or has no
//!   state in the group, is UNKNOWN_TOPIC_OR_PARTITION.
//!
//! Alter and delete tell the caller the group-log offset to wait for, so their answers are
//! durable; the handler drops the share-partition leader's loaded copies of the partitions
//! around the call (`ShareManager::rewrite_states`).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use skiff_group::GroupError;
use skiff_group::consumer::Assignment;
use skiff_group::share::{ShareGroup, group_not_found, not_a_share_group};
use skiff_protocol::generated::alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic;
use skiff_protocol::generated::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use skiff_protocol::generated::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use skiff_protocol::generated::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestTopic;
use skiff_protocol::{ByteString, Uuid, error_codes};
use skiff_share::{DeliveryState, Snapshot};

use super::share::{
    INITIAL_STATE_EPOCH, SharePartitionKey, share_keys_of, state_key, try_delete_share_states,
};
use super::{Group, GroupCoordinator, Inner, TopicsSource};

/// Kafka's message of UNKNOWN_TOPIC_OR_PARTITION.
pub const UNKNOWN_TOPIC_MESSAGE: &str = "This server does not host this topic-partition.";

/// Kafka's message of NON_EMPTY_GROUP.
const NOT_EMPTY_MESSAGE: &str = "The group is not empty.";

/// A share partition's persisted position, as Kafka's `ReadShareGroupStateSummary` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareStateSummary {
    pub start_offset: i64,
    /// Records at or after the start offset already acknowledged or archived (Kafka's
    /// `deliveryCompleteCount`).
    pub delivery_complete: i64,
}

impl ShareStateSummary {
    pub fn of(snapshot: &Snapshot) -> Self {
        let delivery_complete = snapshot
            .batches
            .iter()
            .filter(|b| {
                matches!(
                    b.delivery_state,
                    DeliveryState::Acknowledged | DeliveryState::Archived
                )
            })
            .map(|b| {
                let first = b.first_offset.max(snapshot.start_offset);
                b.last_offset.saturating_sub(first).saturating_add(1).max(0)
            })
            .fold(0i64, i64::saturating_add);
        ShareStateSummary {
            start_offset: snapshot.start_offset,
            delivery_complete,
        }
    }

    /// Kafka's share-partition lag: the partition's end offset (the high watermark) less the
    /// start offset less the records already delivered for good; 0 for a start offset altered
    /// past the end (where Kafka's formula goes negative).
    pub fn lag(&self, end_offset: i64) -> i64 {
        end_offset
            .saturating_sub(self.start_offset)
            .saturating_sub(self.delivery_complete)
            .max(0)
    }
}

/// One topic of a DescribeShareGroupOffsets answer, before its lag is computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareOffsetsTopic {
    pub name: String,
    /// Zero for a topic that does not exist.
    pub topic_id: Uuid,
    /// Each partition asked for, with its state's summary (`None`: it has no state).
    pub partitions: Vec<(i32, Option<ShareStateSummary>)>,
}

/// What an AlterShareGroupOffsets or DeleteShareGroupOffsets did.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareOffsetsChange<T> {
    /// Each topic's answer.
    pub topics: Vec<T>,
    /// The group-log end offset to wait for before answering (`None`: nothing was written).
    pub written: Option<i64>,
}

fn invalid_group_id() -> GroupError {
    GroupError::new(error_codes::INVALID_GROUP_ID, "The group id is invalid.")
}

fn not_empty() -> GroupError {
    GroupError::new(error_codes::NON_EMPTY_GROUP, NOT_EMPTY_MESSAGE)
}

fn alter_partition(
    partition_index: i32,
    error: Option<(i16, &str)>,
) -> AlterShareGroupOffsetsResponsePartition {
    AlterShareGroupOffsetsResponsePartition {
        partition_index,
        error_code: error.map_or(error_codes::NONE, |(code, _)| code),
        error_message: error.map(|(_, message)| ByteString::from(message)),
        ..Default::default()
    }
}

impl Inner {
    /// The persisted position of one share partition, if it has state (the client-instance
    /// view's share lag, read under the coordinator's lock).
    pub fn share_summary(&self, key: &SharePartitionKey) -> Option<ShareStateSummary> {
        self.share_states.get(key).map(ShareStateSummary::of)
    }
}

impl GroupCoordinator {
    /// DescribeShareGroupOffsets of one group: the named topics' partitions (`None`: every
    /// share partition of the group with state, by topic name).
    pub fn describe_share_offsets(
        &self,
        topics_source: &impl TopicsSource,
        group_id: &str,
        topics: Option<&[DescribeShareGroupOffsetsRequestTopic]>,
        now: i64,
    ) -> Vec<ShareOffsetsTopic> {
        let inner = self.lock(topics_source, now);
        let summary = |topic_id: Uuid, partition: i32| {
            inner
                .share_states
                .get(&SharePartitionKey::new(group_id, topic_id, partition))
                .map(ShareStateSummary::of)
        };
        match topics {
            Some(topics) => topics
                .iter()
                .map(|topic| {
                    let name = topic.topic_name.to_string();
                    match inner.topics.by_name.get(&name) {
                        Some((topic_id, _)) => ShareOffsetsTopic {
                            partitions: topic
                                .partitions
                                .iter()
                                .map(|p| (*p, summary(*topic_id, *p)))
                                .collect(),
                            name,
                            topic_id: *topic_id,
                        },
                        None => ShareOffsetsTopic {
                            partitions: topic.partitions.iter().map(|p| (*p, None)).collect(),
                            name,
                            topic_id: Uuid::ZERO,
                        },
                    }
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, ShareOffsetsTopic> = BTreeMap::new();
                for key in share_keys_of(&inner, group_id) {
                    let Some((name, _)) = inner.topics.by_id(key.topic_id) else {
                        continue;
                    };
                    by_topic
                        .entry(name.to_string())
                        .or_insert_with(|| ShareOffsetsTopic {
                            name: name.to_string(),
                            topic_id: key.topic_id,
                            partitions: Vec::new(),
                        })
                        .partitions
                        .push((key.partition, summary(key.topic_id, key.partition)));
                }
                by_topic.into_values().collect()
            }
        }
    }

    /// The share partitions of `group_id` with state in the named topics: those whose loaded
    /// copies an alteration or a deletion of their offsets replaces.
    pub fn share_keys_of_topics<'a>(
        &self,
        topics_source: &impl TopicsSource,
        group_id: &str,
        names: impl IntoIterator<Item = &'a str>,
        now: i64,
    ) -> Vec<SharePartitionKey> {
        let inner = self.lock(topics_source, now);
        let ids: BTreeSet<Uuid> = names
            .into_iter()
            .filter_map(|name| inner.topics.by_name.get(name).map(|(id, _)| *id))
            .collect();
        share_keys_of(&inner, group_id)
            .into_iter()
            .filter(|key| ids.contains(&key.topic_id))
            .collect()
    }

    /// AlterShareGroupOffsets: sets the start offset of each named share partition of an
    /// empty (or new) share group. A refusal of the whole request is the `Err`.
    pub fn alter_share_offsets(
        &self,
        topics_source: &impl TopicsSource,
        group_id: &str,
        topics: &[AlterShareGroupOffsetsRequestTopic],
        now: i64,
    ) -> Result<ShareOffsetsChange<AlterShareGroupOffsetsResponseTopic>, GroupError> {
        if group_id.is_empty() {
            return Err(invalid_group_id());
        }
        let mut guard = self.lock(topics_source, now);
        let inner = &mut *guard;
        match inner.groups.get(group_id) {
            Some(Group::Share(group)) if !group.is_empty() => return Err(not_empty()),
            Some(Group::Share(_)) | None => {}
            Some(_) => return Err(not_a_share_group(group_id)),
        }
        let mut answers = Vec::with_capacity(topics.len());
        // The last start offset asked for each partition wins.
        let mut wanted: BTreeMap<SharePartitionKey, i64> = BTreeMap::new();
        for topic in topics {
            let name = topic.topic_name.to_string();
            let Some(&(topic_id, count)) = inner.topics.by_name.get(&name) else {
                answers.push(AlterShareGroupOffsetsResponseTopic {
                    topic_name: topic.topic_name.clone(),
                    topic_id: Uuid::ZERO,
                    partitions: topic
                        .partitions
                        .iter()
                        .map(|p| {
                            alter_partition(
                                p.partition_index,
                                Some((
                                    error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                                    UNKNOWN_TOPIC_MESSAGE,
                                )),
                            )
                        })
                        .collect(),
                    ..Default::default()
                });
                continue;
            };
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let index = p.partition_index;
                    if !(0..count).contains(&index) {
                        let error = (
                            error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                            UNKNOWN_TOPIC_MESSAGE,
                        );
                        return alter_partition(index, Some(error));
                    }
                    if p.start_offset < 0 {
                        let message = format!(
                            "The start offset {} of partition {index} is negative.",
                            p.start_offset
                        );
                        return alter_partition(
                            index,
                            Some((error_codes::INVALID_REQUEST, &message)),
                        );
                    }
                    wanted.insert(
                        SharePartitionKey::new(group_id, topic_id, index),
                        p.start_offset,
                    );
                    alter_partition(index, None)
                })
                .collect();
            answers.push(AlterShareGroupOffsetsResponseTopic {
                topic_name: topic.topic_name.clone(),
                topic_id,
                partitions,
                ..Default::default()
            });
        }
        if wanted.is_empty() {
            return Ok(ShareOffsetsChange {
                topics: answers,
                written: None,
            });
        }
        let mut fresh = Vec::with_capacity(wanted.len());
        let mut writes = Vec::with_capacity(wanted.len());
        for (key, start_offset) in wanted {
            let state_epoch = inner
                .share_states
                .get(&key)
                .map_or(INITIAL_STATE_EPOCH, |s| s.state_epoch.saturating_add(1));
            let snapshot = Snapshot {
                start_offset,
                state_epoch,
                batches: Vec::new(),
            };
            match serde_json::to_vec(&snapshot) {
                Ok(json) => {
                    writes.push((state_key(&key), Some(Bytes::from(json))));
                    fresh.push((key, snapshot));
                }
                Err(e) => {
                    tracing::error!(group = group_id, error = %e, "cannot serialise a share partition state");
                    return Err(GroupError::new(
                        error_codes::UNKNOWN_SERVER_ERROR,
                        "the share partition state could not be serialised",
                    ));
                }
            }
        }
        let written = match inner.kv.append(&writes) {
            Ok(end) => end,
            Err(e) => {
                tracing::error!(group = group_id, error = %format!("{e:#}"), "cannot store altered share partition states");
                mark_failed(&mut answers, &fresh);
                return Ok(ShareOffsetsChange {
                    topics: answers,
                    written: None,
                });
            }
        };
        let mut initialized = Assignment::new();
        for (key, snapshot) in fresh {
            initialized
                .entry(key.topic_id)
                .or_default()
                .insert(key.partition);
            inner.share_states.insert(key, snapshot);
        }
        let Inner { groups, topics, .. } = inner;
        let group = groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::Share(ShareGroup::new(group_id)));
        if let Group::Share(group) = group {
            group.on_partitions_initialized(&initialized, topics);
        }
        self.after_change(inner, group_id);
        self.maybe_compact(inner);
        Ok(ShareOffsetsChange {
            topics: answers,
            written: Some(written),
        })
    }

    /// DeleteShareGroupOffsets: forgets the share-partition states of the named topics in an
    /// empty share group. A refusal of the whole request is the `Err`.
    pub fn delete_share_offsets(
        &self,
        topics_source: &impl TopicsSource,
        group_id: &str,
        topic_names: &[ByteString],
        now: i64,
    ) -> Result<ShareOffsetsChange<DeleteShareGroupOffsetsResponseTopic>, GroupError> {
        if group_id.is_empty() {
            return Err(invalid_group_id());
        }
        let mut guard = self.lock(topics_source, now);
        let inner = &mut *guard;
        match inner.groups.get(group_id) {
            Some(Group::Share(group)) if !group.is_empty() => return Err(not_empty()),
            Some(Group::Share(_)) => {}
            Some(_) => return Err(not_a_share_group(group_id)),
            None => return Err(group_not_found(group_id)),
        }
        let states = share_keys_of(inner, group_id);
        let mut answers = Vec::with_capacity(topic_names.len());
        let mut deleted_topics = BTreeSet::new();
        let mut written = None;
        let topic_error =
            |name: &ByteString, code: i16, message: &str| DeleteShareGroupOffsetsResponseTopic {
                topic_name: name.clone(),
                topic_id: Uuid::ZERO,
                error_code: code,
                error_message: Some(ByteString::from(message)),
                ..Default::default()
            };
        for name in topic_names {
            let Some(&(topic_id, _)) = inner.topics.by_name.get(&**name) else {
                answers.push(topic_error(
                    name,
                    error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                    UNKNOWN_TOPIC_MESSAGE,
                ));
                continue;
            };
            let keys: Vec<SharePartitionKey> = states
                .iter()
                .filter(|key| key.topic_id == topic_id)
                .cloned()
                .collect();
            if keys.is_empty() && !deleted_topics.contains(&topic_id) {
                answers.push(topic_error(
                    name,
                    error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                    "There is no offset information to delete.",
                ));
                continue;
            }
            match try_delete_share_states(inner, &keys) {
                Ok(end) => {
                    written = written.max(end);
                    deleted_topics.insert(topic_id);
                    answers.push(DeleteShareGroupOffsetsResponseTopic {
                        topic_name: name.clone(),
                        topic_id,
                        ..Default::default()
                    });
                }
                Err(e) => {
                    tracing::error!(group = group_id, error = %format!("{e:#}"), "cannot delete share partition states");
                    let mut answer = topic_error(
                        name,
                        error_codes::UNKNOWN_SERVER_ERROR,
                        "the share partition states could not be deleted",
                    );
                    answer.topic_id = topic_id;
                    answers.push(answer);
                }
            }
        }
        if let Some(Group::Share(group)) = inner.groups.get_mut(group_id) {
            group.on_states_deleted(&deleted_topics);
        }
        self.after_change(inner, group_id);
        self.maybe_compact(inner);
        Ok(ShareOffsetsChange {
            topics: answers,
            written,
        })
    }
}

/// A failed write: every partition it was for is answered UNKNOWN_SERVER_ERROR.
fn mark_failed(
    answers: &mut [AlterShareGroupOffsetsResponseTopic],
    fresh: &[(SharePartitionKey, Snapshot)],
) {
    let failed: BTreeSet<(Uuid, i32)> = fresh
        .iter()
        .map(|(key, _)| (key.topic_id, key.partition))
        .collect();
    for topic in answers {
        for partition in &mut topic.partitions {
            if failed.contains(&(topic.topic_id, partition.partition_index)) {
                partition.error_code = error_codes::UNKNOWN_SERVER_ERROR;
                partition.error_message = Some(ByteString::from(
                    "the share partition state could not be stored",
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicU64;

    use skiff_group::TopicsImage;
    use skiff_protocol::generated::alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition;
    use skiff_share::StateBatch;

    use super::super::share::ShareEvent;
    use super::super::tests::{CLIENT, ChangingTopics, MemoryStore, open, share_join};
    use super::*;

    const ORDERS: Uuid = Uuid::from_u128(3);

    fn topics() -> ChangingTopics {
        let mut image = TopicsImage::default();
        image.insert("orders", ORDERS, 2);
        image.insert("audit", Uuid::from_u128(4), 1);
        ChangingTopics {
            image: Mutex::new(image),
            generation: AtomicU64::new(1),
        }
    }

    fn alter_topic(name: &str, partitions: &[(i32, i64)]) -> AlterShareGroupOffsetsRequestTopic {
        AlterShareGroupOffsetsRequestTopic {
            topic_name: name.into(),
            partitions: partitions
                .iter()
                .map(|(p, o)| AlterShareGroupOffsetsRequestPartition {
                    partition_index: *p,
                    start_offset: *o,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn codes(
        change: &ShareOffsetsChange<AlterShareGroupOffsetsResponseTopic>,
    ) -> Vec<(String, i32, i16)> {
        change
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic_name.to_string(), p.partition_index, p.error_code))
            })
            .collect()
    }

    fn batch(first: i64, last: i64, state: DeliveryState) -> StateBatch {
        StateBatch {
            first_offset: first,
            last_offset: last,
            delivery_state: state,
            delivery_count: 1,
        }
    }

    /// Kafka's lag: end offset - start offset - records acknowledged or archived in the window.
    #[test]
    fn summaries_count_what_was_delivered_for_good() {
        let snapshot = Snapshot {
            start_offset: 10,
            state_epoch: 0,
            batches: vec![
                batch(10, 12, DeliveryState::Acknowledged),
                batch(13, 13, DeliveryState::Available),
                batch(14, 15, DeliveryState::Archived),
                batch(17, 19, DeliveryState::Acknowledged),
            ],
        };
        let summary = ShareStateSummary::of(&snapshot);
        assert_eq!(
            summary,
            ShareStateSummary {
                start_offset: 10,
                delivery_complete: 8
            }
        );
        // 30 records up to the high watermark, 20 after the start, 8 of them done.
        assert_eq!(summary.lag(30), 12);
        let empty = Snapshot {
            start_offset: 5,
            state_epoch: 0,
            batches: vec![],
        };
        assert_eq!(ShareStateSummary::of(&empty).lag(5), 0);
        // Altered past the high watermark: nothing to deliver yet.
        assert_eq!(ShareStateSummary::of(&empty).lag(3), 0);
    }

    /// Alter: refused on a non-empty share group or a group of another type; per partition
    /// UNKNOWN_TOPIC_OR_PARTITION and INVALID_REQUEST; otherwise a fresh state at the offset
    /// with the state epoch bumped, partitions initialized in a group it creates, all of it
    /// restored after a restart; describe reads it back.
    #[test]
    fn alter_writes_fresh_states_only_in_empty_share_groups() {
        let topics = topics();
        let store = MemoryStore::default();
        let coordinator = open(&store);
        let request = [
            alter_topic("orders", &[(0, 40), (1, -1), (7, 3)]),
            alter_topic("missing", &[(0, 1)]),
        ];

        // A new group: created, orders-0 written, the rest refused per partition.
        let change = coordinator
            .alter_share_offsets(&topics, "sg", &request, 1)
            .expect("altered");
        assert_eq!(
            codes(&change),
            vec![
                ("orders".into(), 0, error_codes::NONE),
                ("orders".into(), 1, error_codes::INVALID_REQUEST),
                ("orders".into(), 7, error_codes::UNKNOWN_TOPIC_OR_PARTITION),
                ("missing".into(), 0, error_codes::UNKNOWN_TOPIC_OR_PARTITION),
            ]
        );
        assert_eq!(change.topics[0].topic_id, ORDERS);
        assert_eq!(change.topics[1].topic_id, Uuid::ZERO);
        assert!(change.written.is_some());
        let key = SharePartitionKey::new("sg", ORDERS, 0);
        let state = coordinator.share_partition_state(&key).expect("state");
        assert_eq!(
            (state.start_offset, state.state_epoch),
            (40, INITIAL_STATE_EPOCH)
        );
        {
            let inner = coordinator.lock(&topics, 2);
            match inner.groups.get("sg") {
                Some(Group::Share(g)) => {
                    assert!(g.is_empty());
                    assert_eq!(
                        g.initialized_partitions().get(&ORDERS),
                        Some(&BTreeSet::from([0]))
                    );
                }
                _ => panic!("no share group created"),
            }
        }
        // Altered again: the state epoch moves on, the window is emptied.
        coordinator
            .append_share_partition_state(
                &key,
                super::super::share::ShareStateRecord::Snapshot(Snapshot {
                    start_offset: 40,
                    state_epoch: 0,
                    batches: vec![batch(40, 41, DeliveryState::Acknowledged)],
                }),
            )
            .expect("written");
        coordinator
            .alter_share_offsets(&topics, "sg", &[alter_topic("orders", &[(0, 7)])], 3)
            .expect("altered");
        let state = coordinator.share_partition_state(&key).expect("state");
        assert_eq!((state.start_offset, state.state_epoch), (7, 1));
        assert!(state.batches.is_empty());

        // A member makes the group non-empty: refused as a whole.
        coordinator
            .share_heartbeat(
                &topics,
                &share_join("sg", "m1", 0, Some(vec!["orders"])),
                CLIENT,
                4,
            )
            .expect("joined");
        let e = coordinator
            .alter_share_offsets(&topics, "sg", &[alter_topic("orders", &[(0, 1)])], 5)
            .expect_err("refused");
        assert_eq!(
            (e.code.code(), e.message.as_str()),
            (error_codes::NON_EMPTY_GROUP, "The group is not empty.")
        );
        assert_eq!(
            coordinator
                .share_partition_state(&key)
                .map(|s| s.start_offset),
            Some(7)
        );

        // A group of another type, and an empty group ID.
        let consumer = skiff_protocol::generated::ConsumerGroupHeartbeatRequest {
            group_id: "cg".into(),
            member_id: "c1".into(),
            member_epoch: 0,
            rebalance_timeout_ms: 1000,
            subscribed_topic_names: Some(vec!["orders".into()]),
            topic_partitions: Some(vec![]),
            ..Default::default()
        };
        coordinator
            .consumer_heartbeat(&topics, &consumer, 1, CLIENT, 6)
            .expect("consumer joined");
        let e = coordinator
            .alter_share_offsets(&topics, "cg", &request, 7)
            .expect_err("refused");
        assert_eq!(
            (e.code.code(), e.message.as_str()),
            (
                error_codes::GROUP_ID_NOT_FOUND,
                "Group cg is not a share group."
            )
        );
        let e = coordinator
            .alter_share_offsets(&topics, "", &request, 7)
            .expect_err("refused");
        assert_eq!(e.code.code(), error_codes::INVALID_GROUP_ID);

        // Describe: named partitions (one without state), an unknown topic, and every state.
        let described = coordinator.describe_share_offsets(
            &topics,
            "sg",
            Some(&[
                DescribeShareGroupOffsetsRequestTopic {
                    topic_name: "orders".into(),
                    partitions: vec![0, 1],
                    ..Default::default()
                },
                DescribeShareGroupOffsetsRequestTopic {
                    topic_name: "missing".into(),
                    partitions: vec![0],
                    ..Default::default()
                },
            ]),
            8,
        );
        let summary = |start| {
            Some(ShareStateSummary {
                start_offset: start,
                delivery_complete: 0,
            })
        };
        assert_eq!(
            described,
            vec![
                ShareOffsetsTopic {
                    name: "orders".into(),
                    topic_id: ORDERS,
                    // orders-1 has no state: the join asked for it, nobody initialized it.
                    partitions: vec![(0, summary(7)), (1, None)],
                },
                ShareOffsetsTopic {
                    name: "missing".into(),
                    topic_id: Uuid::ZERO,
                    partitions: vec![(0, None)],
                },
            ]
        );
        // An unknown group has no offsets, and no error (Kafka reads the state alone).
        assert!(
            coordinator
                .describe_share_offsets(&topics, "nobody", None, 9)
                .is_empty()
        );
        drop(coordinator);

        // A restart restores the altered state and the group.
        let restarted = open(&store);
        assert_eq!(
            restarted
                .share_partition_state(&key)
                .map(|s| (s.start_offset, s.state_epoch)),
            Some((7, 1))
        );
        let all = restarted.describe_share_offsets(&topics, "sg", None, 10);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].partitions.first(), Some(&(0, summary(7))));
    }

    /// Delete: GROUP_ID_NOT_FOUND for no group or one of another type, NON_EMPTY_GROUP; per
    /// topic UNKNOWN_TOPIC_OR_PARTITION; otherwise the topic's states are tombstoned, the
    /// share-partition leader told, and the partitions initialized again by the next member.
    #[test]
    fn delete_tombstones_states_of_empty_share_groups() {
        let topics = topics();
        let store = MemoryStore::default();
        let coordinator = open(&store);
        let e = coordinator
            .delete_share_offsets(&topics, "sg", &["orders".into()], 1)
            .expect_err("no group");
        assert_eq!(
            (e.code.code(), e.message.as_str()),
            (error_codes::GROUP_ID_NOT_FOUND, "Group sg not found.")
        );
        coordinator
            .alter_share_offsets(
                &topics,
                "sg",
                &[alter_topic("orders", &[(0, 5), (1, 6)])],
                2,
            )
            .expect("altered");
        coordinator
            .share_heartbeat(
                &topics,
                &share_join("sg", "m1", 0, Some(vec!["orders"])),
                CLIENT,
                3,
            )
            .expect("joined");
        let e = coordinator
            .delete_share_offsets(&topics, "sg", &["orders".into()], 4)
            .expect_err("not empty");
        assert_eq!(e.code.code(), error_codes::NON_EMPTY_GROUP);
        coordinator
            .share_heartbeat(&topics, &share_join("sg", "m1", -1, None), CLIENT, 5)
            .expect("left");
        coordinator.take_share_events();

        let change = coordinator
            .delete_share_offsets(
                &topics,
                "sg",
                &["orders".into(), "audit".into(), "missing".into()],
                6,
            )
            .expect("deleted");
        let answers: Vec<(String, Uuid, i16, Option<String>)> = change
            .topics
            .iter()
            .map(|t| {
                (
                    t.topic_name.to_string(),
                    t.topic_id,
                    t.error_code,
                    t.error_message.as_ref().map(ToString::to_string),
                )
            })
            .collect();
        assert_eq!(
            answers,
            vec![
                ("orders".into(), ORDERS, error_codes::NONE, None),
                (
                    "audit".into(),
                    Uuid::ZERO,
                    error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                    Some("There is no offset information to delete.".into())
                ),
                (
                    "missing".into(),
                    Uuid::ZERO,
                    error_codes::UNKNOWN_TOPIC_OR_PARTITION,
                    Some(UNKNOWN_TOPIC_MESSAGE.into())
                ),
            ]
        );
        assert!(change.written.is_some());
        assert!(coordinator.share_partitions_of("sg").is_empty());
        assert!(
            store
                .0
                .lock()
                .expect("pairs")
                .keys()
                .all(|k| !k.starts_with(b"s\0"))
        );
        assert_eq!(
            coordinator.take_share_events(),
            vec![ShareEvent::StatesDeleted(vec![
                SharePartitionKey::new("sg", ORDERS, 0),
                SharePartitionKey::new("sg", ORDERS, 1),
            ])]
        );
        // The next member has them initialized afresh.
        let joined = coordinator
            .share_heartbeat(
                &topics,
                &share_join("sg", "m2", 0, Some(vec!["orders"])),
                CLIENT,
                7,
            )
            .expect("joined");
        assert!(joined.initialize.is_some());
        drop(coordinator);
        let restarted = open(&store);
        assert!(restarted.share_partitions_of("sg").is_empty());
    }
}
