//! Server-side assignors: `uniform` (Kafka's default: balanced and sticky) and `range`.
//!
//! Both are pure functions from the members' subscriptions and their previous target assignment
//! to a new target assignment. They only hand out partitions of topics that exist (are in the
//! `topics` map) and that the member subscribes to.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use skiff_protocol::Uuid;

use super::member::{Assignment, assignment_size};

pub const UNIFORM: &str = "uniform";
pub const RANGE: &str = "range";
/// The assignors this crate implements.
pub const SUPPORTED: [&str; 2] = [UNIFORM, RANGE];

/// One member as an assignor sees it.
#[derive(Debug, Clone)]
pub struct AssignorMember<'a> {
    pub member_id: &'a str,
    pub instance_id: Option<&'a str>,
    /// Subscribed topic IDs (existing topics only).
    pub subscribed: BTreeSet<Uuid>,
    /// The member's previous target assignment (stickiness).
    pub current: Option<&'a Assignment>,
}

/// Computes a target assignment per member (same order as `members`).
/// `topics`: topic ID -> partition count. An unknown name falls back to `uniform`.
pub fn assign(
    name: &str,
    members: &[AssignorMember<'_>],
    topics: &BTreeMap<Uuid, i32>,
) -> Vec<Assignment> {
    if name == RANGE {
        range(members, topics)
    } else {
        uniform(members, topics)
    }
}

/// Per-topic "is this partition taken" flags.
struct Taken(HashMap<Uuid, Vec<bool>>);

impl Taken {
    fn new(topics: &BTreeMap<Uuid, i32>) -> Self {
        Taken(
            topics
                .iter()
                .map(|(id, n)| (*id, vec![false; usize::try_from(*n).unwrap_or(0)]))
                .collect(),
        )
    }

    /// Marks a partition taken; false if it does not exist or was already taken.
    fn take(&mut self, topic: Uuid, partition: i32) -> bool {
        let Ok(index) = usize::try_from(partition) else {
            return false;
        };
        match self
            .0
            .get_mut(&topic)
            .and_then(|flags| flags.get_mut(index))
        {
            Some(flag) if !*flag => {
                *flag = true;
                true
            }
            _ => false,
        }
    }

    fn release(&mut self, topic: Uuid, partition: i32) {
        if let Ok(index) = usize::try_from(partition)
            && let Some(flag) = self
                .0
                .get_mut(&topic)
                .and_then(|flags| flags.get_mut(index))
        {
            *flag = false;
        }
    }

    fn is_taken(&self, topic: Uuid, partition: i32) -> bool {
        usize::try_from(partition)
            .ok()
            .and_then(|index| self.0.get(&topic).and_then(|flags| flags.get(index)))
            .copied()
            .unwrap_or(true)
    }
}

/// Keeps each member's previous partitions that are still valid for it (stickiness); a partition
/// claimed twice goes to the first member.
fn sticky_start(members: &[AssignorMember<'_>], taken: &mut Taken) -> Vec<Assignment> {
    members
        .iter()
        .map(|member| {
            let mut kept = Assignment::new();
            if let Some(current) = member.current {
                for (topic, partitions) in current {
                    if !member.subscribed.contains(topic) {
                        continue;
                    }
                    for p in partitions {
                        if taken.take(*topic, *p) {
                            kept.entry(*topic).or_default().insert(*p);
                        }
                    }
                }
            }
            kept
        })
        .collect()
}

fn uniform(members: &[AssignorMember<'_>], topics: &BTreeMap<Uuid, i32>) -> Vec<Assignment> {
    if members.is_empty() {
        return Vec::new();
    }
    let homogeneous = members
        .windows(2)
        .all(|pair| matches!(pair, [a, b] if a.subscribed == b.subscribed));
    if homogeneous {
        uniform_homogeneous(members, topics)
    } else {
        uniform_heterogeneous(members, topics)
    }
}

/// Every member subscribes to the same topics: each gets `P / N` or `P / N + 1` partitions,
/// members keeping as many of their previous partitions as the quotas allow.
fn uniform_homogeneous(
    members: &[AssignorMember<'_>],
    topics: &BTreeMap<Uuid, i32>,
) -> Vec<Assignment> {
    let subscribed: Vec<(Uuid, i32)> = members
        .first()
        .map(|m| {
            m.subscribed
                .iter()
                .filter_map(|id| topics.get(id).map(|n| (*id, *n)))
                .collect()
        })
        .unwrap_or_default();
    let total: usize = subscribed
        .iter()
        .map(|(_, n)| usize::try_from(*n).unwrap_or(0))
        .sum();
    let n = members.len();
    let base = total / n;
    let extra = total % n;

    let mut taken = Taken::new(topics);
    let mut result = sticky_start(members, &mut taken);

    // The members that already hold the most get the `extra` larger quotas (fewer moves).
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|i| std::cmp::Reverse(result.get(*i).map_or(0, assignment_size)));
    let mut quota = vec![base; n];
    for i in order.iter().take(extra) {
        if let Some(q) = quota.get_mut(*i) {
            *q += 1;
        }
    }

    // Trim members above their quota (drop their highest partitions).
    for (assignment, q) in result.iter_mut().zip(&quota) {
        let mut size = assignment_size(assignment);
        while size > *q {
            let Some((topic, partition)) = last_partition(assignment) else {
                break;
            };
            remove_partition(assignment, topic, partition);
            taken.release(topic, partition);
            size -= 1;
        }
    }

    // Fill members below their quota, in member order, with the free partitions.
    let mut free = subscribed
        .iter()
        .flat_map(|(topic, count)| (0..*count).map(move |p| (*topic, p)));
    for (assignment, q) in result.iter_mut().zip(&quota) {
        let mut size = assignment_size(assignment);
        while size < *q {
            let Some((topic, p)) = free.by_ref().find(|(t, p)| !taken.is_taken(*t, *p)) else {
                break;
            };
            taken.take(topic, p);
            assignment.entry(topic).or_default().insert(p);
            size += 1;
        }
    }
    result
}

/// Members subscribe to different topics: greedy placement on the least loaded eligible member
/// (most constrained topics first), then moves from the most to the least loaded eligible member
/// until no move improves the balance.
fn uniform_heterogeneous(
    members: &[AssignorMember<'_>],
    topics: &BTreeMap<Uuid, i32>,
) -> Vec<Assignment> {
    let mut taken = Taken::new(topics);
    let mut result = sticky_start(members, &mut taken);
    let mut load: Vec<usize> = result.iter().map(assignment_size).collect();

    // Subscribers of each existing topic.
    let mut subscribers: BTreeMap<Uuid, Vec<usize>> = BTreeMap::new();
    for (index, member) in members.iter().enumerate() {
        for topic in &member.subscribed {
            if topics.contains_key(topic) {
                subscribers.entry(*topic).or_default().push(index);
            }
        }
    }
    let mut topic_order: Vec<(&Uuid, &Vec<usize>)> = subscribers.iter().collect();
    topic_order.sort_by_key(|(id, subs)| (subs.len(), **id));

    let least_loaded = |load: &[usize], subs: &[usize]| -> Option<usize> {
        subs.iter()
            .copied()
            .min_by_key(|i| (load.get(*i).copied().unwrap_or(usize::MAX), *i))
    };

    for (topic, subs) in &topic_order {
        let count = topics.get(*topic).copied().unwrap_or(0);
        for p in 0..count {
            if taken.is_taken(**topic, p) {
                continue;
            }
            if let Some(winner) = least_loaded(&load, subs)
                && let (Some(assignment), Some(l)) = (result.get_mut(winner), load.get_mut(winner))
            {
                taken.take(**topic, p);
                assignment.entry(**topic).or_default().insert(p);
                *l += 1;
            }
        }
    }

    // Balance: move partitions from overloaded holders to the least loaded eligible member.
    let total: usize = load.iter().sum();
    for _round in 0..=total {
        let mut moved = false;
        for (topic, subs) in &topic_order {
            for holder in subs.iter().copied() {
                while let Some(target) = least_loaded(&load, subs) {
                    let holder_load = load.get(holder).copied().unwrap_or(0);
                    let target_load = load.get(target).copied().unwrap_or(0);
                    if holder_load <= target_load + 1 {
                        break;
                    }
                    let Some(p) = result
                        .get(holder)
                        .and_then(|a| a.get(*topic))
                        .and_then(|set| set.iter().next_back().copied())
                    else {
                        break;
                    };
                    if let Some(a) = result.get_mut(holder) {
                        remove_partition(a, **topic, p);
                    }
                    if let Some(a) = result.get_mut(target) {
                        a.entry(**topic).or_default().insert(p);
                    }
                    if let Some(l) = load.get_mut(holder) {
                        *l -= 1;
                    }
                    if let Some(l) = load.get_mut(target) {
                        *l += 1;
                    }
                    moved = true;
                }
            }
        }
        if !moved {
            break;
        }
    }
    result
}

/// Kafka's range assignor: for each topic, its subscribers (sorted by instance ID, else member
/// ID) receive contiguous ranges; the first `P % N` get one extra partition.
fn range(members: &[AssignorMember<'_>], topics: &BTreeMap<Uuid, i32>) -> Vec<Assignment> {
    let mut result = vec![Assignment::new(); members.len()];
    for (topic, count) in topics {
        let mut subs: Vec<usize> = members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.subscribed.contains(topic))
            .map(|(i, _)| i)
            .collect();
        if subs.is_empty() || *count <= 0 {
            continue;
        }
        subs.sort_by_key(|i| {
            members
                .get(*i)
                .map(|m| (m.instance_id.unwrap_or(m.member_id), m.member_id))
        });
        let n = i32::try_from(subs.len()).unwrap_or(i32::MAX);
        let base = count / n;
        let extra = count % n;
        let mut start = 0;
        for (position, index) in subs.iter().enumerate() {
            let position = i32::try_from(position).unwrap_or(i32::MAX);
            let len = base + i32::from(position < extra);
            if len > 0
                && let Some(assignment) = result.get_mut(*index)
            {
                assignment.insert(*topic, (start..start + len).collect());
            }
            start += len;
        }
    }
    result
}

fn last_partition(assignment: &Assignment) -> Option<(Uuid, i32)> {
    assignment
        .iter()
        .next_back()
        .and_then(|(topic, set)| set.iter().next_back().map(|p| (*topic, *p)))
}

fn remove_partition(assignment: &mut Assignment, topic: Uuid, partition: i32) {
    if let Some(set) = assignment.get_mut(&topic) {
        set.remove(&partition);
        if set.is_empty() {
            assignment.remove(&topic);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn members<'a>(
        ids: &'a [String],
        subscribed: &[Uuid],
        current: &'a [Assignment],
    ) -> Vec<AssignorMember<'a>> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| AssignorMember {
                member_id: id,
                instance_id: None,
                subscribed: subscribed.iter().copied().collect(),
                current: current.get(i),
            })
            .collect()
    }

    fn check_complete(result: &[Assignment], topics: &BTreeMap<Uuid, i32>) {
        let mut seen = BTreeSet::new();
        for a in result {
            for (t, ps) in a {
                for p in ps {
                    assert!(seen.insert((*t, *p)), "partition {t:?}-{p} assigned twice");
                }
            }
        }
        let total: i32 = topics.values().sum();
        assert_eq!(seen.len(), usize::try_from(total).unwrap());
    }

    #[test]
    fn uniform_balances_and_is_sticky() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 6), (topic(2), 3)].into();
        let ids: Vec<String> = (0..3).map(|i| format!("m{i}")).collect();
        let first = assign(UNIFORM, &members(&ids, &[topic(1), topic(2)], &[]), &topics);
        check_complete(&first, &topics);
        assert!(first.iter().all(|a| assignment_size(a) == 3));

        // A fourth member joins: the others keep what they can, only 2 partitions move.
        let ids4: Vec<String> = (0..4).map(|i| format!("m{i}")).collect();
        let second = assign(
            UNIFORM,
            &members(&ids4, &[topic(1), topic(2)], &first),
            &topics,
        );
        check_complete(&second, &topics);
        let sizes: Vec<usize> = second.iter().map(assignment_size).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 9);
        assert!(sizes.iter().all(|s| *s == 2 || *s == 3));
        let kept: usize = first
            .iter()
            .zip(&second)
            .map(|(a, b)| iter_common(a, b))
            .sum();
        assert_eq!(kept, 7);
    }

    fn iter_common(a: &Assignment, b: &Assignment) -> usize {
        a.iter()
            .map(|(t, ps)| b.get(t).map_or(0, |qs| ps.intersection(qs).count()))
            .sum()
    }

    #[test]
    fn uniform_heterogeneous_covers_every_subscribed_partition() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 4), (topic(2), 4)].into();
        let ids = ["a".to_string(), "b".to_string(), "c".to_string()];
        let ms = vec![
            AssignorMember {
                member_id: &ids[0],
                instance_id: None,
                subscribed: [topic(1)].into(),
                current: None,
            },
            AssignorMember {
                member_id: &ids[1],
                instance_id: None,
                subscribed: [topic(1), topic(2)].into(),
                current: None,
            },
            AssignorMember {
                member_id: &ids[2],
                instance_id: None,
                subscribed: [topic(2)].into(),
                current: None,
            },
        ];
        let result = assign(UNIFORM, &ms, &topics);
        check_complete(&result, &topics);
        let sizes: Vec<usize> = result.iter().map(assignment_size).collect();
        assert!(
            sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1,
            "{sizes:?}"
        );
        assert!(result[0].keys().all(|t| *t == topic(1)));
        assert!(result[2].keys().all(|t| *t == topic(2)));
    }

    #[test]
    fn range_gives_contiguous_ranges() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 7)].into();
        let ids: Vec<String> = ["b", "a", "c"].iter().map(|s| s.to_string()).collect();
        let result = assign(RANGE, &members(&ids, &[topic(1)], &[]), &topics);
        check_complete(&result, &topics);
        // Sorted order a, b, c: a=0..3, b=3..5, c=5..7.
        assert_eq!(result[1][&topic(1)], (0..3).collect());
        assert_eq!(result[0][&topic(1)], (3..5).collect());
        assert_eq!(result[2][&topic(1)], (5..7).collect());
    }

    #[test]
    fn unsubscribed_and_missing_topics_are_not_assigned() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 2)].into();
        let ids = ["a".to_string()];
        let previous: Assignment = [(topic(9), [0].into())].into();
        let ms = vec![AssignorMember {
            member_id: &ids[0],
            instance_id: None,
            subscribed: [topic(1), topic(9)].into(),
            current: Some(&previous),
        }];
        let result = assign(UNIFORM, &ms, &topics);
        assert_eq!(result[0], [(topic(1), [0, 1].into())].into());
    }
}
