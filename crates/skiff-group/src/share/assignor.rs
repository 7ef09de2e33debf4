//! Kafka's share-group assignor, `simple` (KIP-932; Kafka 4.2's `SimpleAssignor` with its
//! `SimpleHomogeneousAssignmentBuilder` and `SimpleHeterogeneousAssignmentBuilder`).
//!
//! Share groups hand out partitions differently from consumer groups: a partition may belong to
//! several members at once (the share-partition leader hands each record to one of them), so
//! when a group has more members than partitions, the partitions are shared instead of leaving
//! members idle. The rules, for a set of members and the partitions they can be given:
//!
//! - each partition should be held by `S = ceil(M / P)` members (`M` members, `P` partitions):
//!   once when `M <= P`, several times when `M > P`;
//! - that makes `S * P` holdings, which are split as evenly as possible: the member at position
//!   `i` (0-based) should hold `ceil(S*P*(i+1)/M) - ceil(S*P*i/M)` partitions, so any two
//!   members differ by at most one;
//! - balance comes first, stickiness second: each member keeps what it held in the previous
//!   target assignment as far as its quota and the partition's sharing allow, then the
//!   partitions that need more holders are handed round-robin to the members below quota.
//!
//! When every member subscribes to the same topics (homogeneous), one such balance covers all
//! partitions of those topics. Otherwise (heterogeneous) each topic is balanced on its own among
//! its subscribers, and a member's assignment is the union over its topics.
//!
//! Differences from Kafka, none of which change the rules above:
//! - Kafka walks Java hash maps and sets, so its exact choices depend on hash order; here every
//!   walk is in a fixed order (members in the order given, partitions by topic ID then index),
//!   so the result is deterministic and reproducible;
//! - the quotas are computed with exact integer arithmetic (Kafka uses doubles for the same
//!   formula, which can round a quota up by one);
//! - when no member below quota can take a partition (they all hold it already), the
//!   partition stays short of the target sharing, as in Kafka ("harmless tolerating a slight
//!   imbalance");
//!   but where Kafka then stops handing out partitions for the rest of that pass, here the next
//!   partitions are still offered, which can only improve balance. Every partition still gets
//!   at least one holder, and when there are at least as many partitions as members each gets
//!   exactly one;
//! - previous holdings that are no longer assignable (not initialized, beyond the partition
//!   count) or of topics nobody subscribes to any more are dropped, where Kafka may carry them
//!   over in the target (its members never receive them: reconciliation filters them).

use std::collections::{BTreeMap, BTreeSet};

use skiff_protocol::Uuid;

use crate::consumer::Assignment;

/// The assignor's name, reported by ShareGroupDescribe (Kafka's `group.share.assignors`
/// default and only built-in share assignor).
pub const SIMPLE: &str = "simple";

/// Whether every member subscribes to the same topics (Kafka's `SubscriptionType`). Kafka
/// decides it on the subscribed topic *names* (every subscribed name has every member as a
/// subscriber), so the group passes it in rather than the assignor guessing from topic IDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionType {
    Homogeneous,
    Heterogeneous,
}

/// One member as the assignor sees it.
#[derive(Debug, Clone)]
pub struct ShareAssignorMember<'a> {
    pub member_id: &'a str,
    /// Subscribed topic IDs (existing topics only).
    pub subscribed: BTreeSet<Uuid>,
    /// The member's previous target assignment (stickiness).
    pub current: Option<&'a Assignment>,
}

/// A partition as the assignor handles it: (topic ID, partition index).
type Partition = (Uuid, i32);

/// Computes a target assignment per member (same order as `members`; the order also decides
/// which members get the larger quotas, so callers pass a stable order such as by member ID).
///
/// `topics`: topic ID -> partition count. `assignable`: when given, only these partitions may be
/// assigned (Kafka assigns a share group only the partitions whose share state is initialized);
/// `None` makes every partition assignable. With `Homogeneous`, the first member's subscription
/// is taken as everyone's, as Kafka does.
pub fn assign(
    members: &[ShareAssignorMember<'_>],
    topics: &BTreeMap<Uuid, i32>,
    assignable: Option<&Assignment>,
    subscription: SubscriptionType,
) -> Vec<Assignment> {
    let mut result = vec![Assignment::new(); members.len()];
    match subscription {
        SubscriptionType::Homogeneous => {
            let Some(first) = members.first() else {
                return result;
            };
            let partitions = target_partitions(&first.subscribed, topics, assignable);
            let everyone: Vec<usize> = (0..members.len()).collect();
            balance(&everyone, &partitions, members, &mut result);
        }
        SubscriptionType::Heterogeneous => {
            let mut subscribers: BTreeMap<Uuid, Vec<usize>> = BTreeMap::new();
            for (index, member) in members.iter().enumerate() {
                for topic in &member.subscribed {
                    subscribers.entry(*topic).or_default().push(index);
                }
            }
            for (topic, subs) in &subscribers {
                let partitions = target_partitions(&BTreeSet::from([*topic]), topics, assignable);
                balance(subs, &partitions, members, &mut result);
            }
        }
    }
    result
}

/// The assignable partitions of `subscribed` topics that exist, in (topic, index) order.
fn target_partitions(
    subscribed: &BTreeSet<Uuid>,
    topics: &BTreeMap<Uuid, i32>,
    assignable: Option<&Assignment>,
) -> Vec<Partition> {
    let mut partitions = Vec::new();
    for topic in subscribed {
        let Some(&count) = topics.get(topic) else {
            continue;
        };
        if count <= 0 {
            continue;
        }
        match assignable {
            None => partitions.extend((0..count).map(|p| (*topic, p))),
            Some(allowed) => {
                if let Some(set) = allowed.get(topic) {
                    partitions.extend(set.range(0..count).map(|p| (*topic, *p)));
                }
            }
        }
    }
    partitions
}

/// `ceil(a / b)`, 0 when `b` is 0.
fn ceil_div(a: u128, b: u128) -> u128 {
    if b == 0 { 0 } else { a.div_ceil(b) }
}

/// The target sharing of each partition and the quota of each member position.
fn quotas(members: usize, partitions: usize) -> (usize, Vec<usize>) {
    if members == 0 || partitions == 0 {
        return (0, vec![0; members]);
    }
    let sharing = members.div_ceil(partitions);
    let total = (sharing as u128).saturating_mul(partitions as u128);
    let m = members as u128;
    let quota = (0..members as u128)
        .map(|i| {
            let high = ceil_div(total.saturating_mul(i + 1), m);
            let low = ceil_div(total.saturating_mul(i), m);
            usize::try_from(high - low).unwrap_or(usize::MAX)
        })
        .collect();
    (sharing, quota)
}

/// Balances `partitions` over the members at `scope` (indices into `members`), adding the
/// result to `result`.
fn balance(
    scope: &[usize],
    partitions: &[Partition],
    members: &[ShareAssignorMember<'_>],
    result: &mut [Assignment],
) {
    let (sharing, quota) = quotas(scope.len(), partitions.len());
    if sharing == 0 {
        return;
    }
    let quota_of = |pos: usize| quota.get(pos).copied().unwrap_or(0);
    // Partition -> positions (in `scope`) of the members holding it, and the reverse.
    let mut holders: BTreeMap<Partition, BTreeSet<usize>> =
        partitions.iter().map(|p| (*p, BTreeSet::new())).collect();
    let mut held: Vec<BTreeSet<Partition>> = vec![BTreeSet::new(); scope.len()];

    // 1. Keep what each member held before, if it is still one of these partitions.
    for ((pos, index), holding) in scope.iter().enumerate().zip(held.iter_mut()) {
        let Some(current) = members.get(*index).and_then(|m| m.current) else {
            continue;
        };
        for (topic, set) in current {
            for p in set {
                if let Some(h) = holders.get_mut(&(*topic, *p)) {
                    h.insert(pos);
                    holding.insert((*topic, *p));
                }
            }
        }
    }

    // 2. Members above quota give up their highest partitions.
    for (pos, holding) in held.iter_mut().enumerate() {
        while holding.len() > quota_of(pos) {
            let Some(p) = holding.pop_last() else {
                break;
            };
            if let Some(h) = holders.get_mut(&p) {
                h.remove(&pos);
            }
        }
    }

    // 3. Partitions held by more members than the target sharing lose the extra holders
    //    (lowest positions first).
    for (p, h) in holders.iter_mut() {
        while h.len() > sharing {
            let Some(pos) = h.pop_first() else {
                break;
            };
            if let Some(holding) = held.get_mut(pos) {
                holding.remove(p);
            }
        }
    }

    // 4. Partitions still short of holders go round-robin to the members below quota. The
    //    cursor carries over from one partition to the next, which spreads consecutive
    //    partitions over different members.
    let mut unfilled: Vec<usize> = held
        .iter()
        .enumerate()
        .filter(|(pos, holding)| holding.len() < quota_of(*pos))
        .map(|(pos, _)| pos)
        .collect();
    let mut cursor = 0;
    for (p, h) in holders.iter_mut() {
        if unfilled.is_empty() {
            break;
        }
        // Consecutive members that could not take this partition (they hold it already).
        let mut misses = 0;
        while h.len() < sharing && !unfilled.is_empty() && misses < unfilled.len() {
            if cursor >= unfilled.len() {
                cursor = 0;
            }
            let Some(&pos) = unfilled.get(cursor) else {
                break;
            };
            if h.contains(&pos) {
                misses += 1;
                cursor += 1;
                continue;
            }
            misses = 0;
            h.insert(pos);
            let full = match held.get_mut(pos) {
                Some(holding) => {
                    holding.insert(*p);
                    holding.len() >= quota_of(pos)
                }
                None => true,
            };
            if full {
                unfilled.remove(cursor);
            } else {
                cursor += 1;
            }
        }
    }

    for (index, holding) in scope.iter().zip(held) {
        if let Some(assignment) = result.get_mut(*index) {
            for (topic, p) in holding {
                assignment.entry(topic).or_default().insert(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment_size(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    fn topic(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("m{i}")).collect()
    }

    fn same_subscription<'a>(
        ids: &'a [String],
        subscribed: &[Uuid],
        current: &'a [Assignment],
    ) -> Vec<ShareAssignorMember<'a>> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| ShareAssignorMember {
                member_id: id,
                subscribed: subscribed.iter().copied().collect(),
                current: current.get(i),
            })
            .collect()
    }

    /// Partition -> number of members holding it.
    fn sharing(result: &[Assignment]) -> BTreeMap<Partition, usize> {
        let mut counts = BTreeMap::new();
        for a in result {
            for (t, ps) in a {
                for p in ps {
                    *counts.entry((*t, *p)).or_default() += 1;
                }
            }
        }
        counts
    }

    fn sizes(result: &[Assignment]) -> Vec<usize> {
        result.iter().map(assignment_size).collect()
    }

    fn spread(result: &[Assignment]) -> usize {
        let s = sizes(result);
        s.iter().max().unwrap() - s.iter().min().unwrap()
    }

    fn homogeneous(
        ids: &[String],
        subscribed: &[Uuid],
        topics: &BTreeMap<Uuid, i32>,
        current: &[Assignment],
    ) -> Vec<Assignment> {
        assign(
            &same_subscription(ids, subscribed, current),
            topics,
            None,
            SubscriptionType::Homogeneous,
        )
    }

    #[test]
    fn quotas_follow_kafkas_formula() {
        assert_eq!(quotas(3, 10), (1, vec![4, 3, 3]));
        assert_eq!(quotas(4, 4), (1, vec![1, 1, 1, 1]));
        assert_eq!(quotas(5, 2), (3, vec![2, 1, 1, 1, 1]));
        assert_eq!(quotas(7, 3), (3, vec![2, 1, 1, 2, 1, 1, 1]));
        assert_eq!(quotas(3, 0), (0, vec![0, 0, 0]));
        assert_eq!(quotas(0, 5), (0, vec![]));
        for m in 1..40 {
            for p in 1..40 {
                let (s, q) = quotas(m, p);
                assert_eq!(q.iter().sum::<usize>(), s * p, "m={m} p={p}");
                let (lo, hi) = (q.iter().min().unwrap(), q.iter().max().unwrap());
                assert!(hi - lo <= 1, "m={m} p={p} {q:?}");
            }
        }
    }

    #[test]
    fn fewer_members_than_partitions_split_without_sharing() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 10)].into();
        let result = homogeneous(&ids(3), &[topic(1)], &topics, &[]);
        assert_eq!(sizes(&result), vec![4, 3, 3]);
        let counts = sharing(&result);
        assert_eq!(counts.len(), 10);
        assert!(counts.values().all(|c| *c == 1));
        // Round-robin over the members.
        assert_eq!(result[0][&topic(1)], BTreeSet::from([0, 3, 6, 9]));
        assert_eq!(result[1][&topic(1)], BTreeSet::from([1, 4, 7]));
        assert_eq!(result[2][&topic(1)], BTreeSet::from([2, 5, 8]));
    }

    #[test]
    fn as_many_members_as_partitions_get_one_each() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 2), (topic(2), 2)].into();
        let result = homogeneous(&ids(4), &[topic(1), topic(2)], &topics, &[]);
        assert_eq!(sizes(&result), vec![1, 1, 1, 1]);
        let counts = sharing(&result);
        assert_eq!(counts.len(), 4);
        assert!(counts.values().all(|c| *c == 1));
    }

    #[test]
    fn more_members_than_partitions_share_partitions() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 2)].into();
        let result = homogeneous(&ids(5), &[topic(1)], &topics, &[]);
        // ceil(5 / 2) = 3 members per partition, 6 holdings over 5 members.
        assert_eq!(sizes(&result), vec![2, 1, 1, 1, 1]);
        let counts = sharing(&result);
        assert_eq!(
            counts,
            BTreeMap::from([((topic(1), 0), 3), ((topic(1), 1), 3)])
        );
        // A single partition is shared by everyone.
        let one: BTreeMap<Uuid, i32> = [(topic(1), 1)].into();
        let result = homogeneous(&ids(4), &[topic(1)], &one, &[]);
        assert!(
            result
                .iter()
                .all(|a| a == &Assignment::from([(topic(1), BTreeSet::from([0]))]))
        );
    }

    #[test]
    fn every_partition_is_covered_and_balanced_for_many_shapes() {
        for members in 1..12 {
            for partitions in 1..12 {
                let topics: BTreeMap<Uuid, i32> = [(topic(1), partitions)].into();
                let result = homogeneous(&ids(members), &[topic(1)], &topics, &[]);
                let counts = sharing(&result);
                assert_eq!(counts.len(), partitions as usize, "{members}x{partitions}");
                let target = members.div_ceil(partitions as usize);
                assert!(
                    counts.values().all(|c| *c == target),
                    "{members}x{partitions}"
                );
                assert!(spread(&result) <= 1, "{members}x{partitions}");
                assert!(result.iter().all(|a| !a.is_empty()));
            }
        }
    }

    #[test]
    fn deterministic() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 7), (topic(2), 5)].into();
        let first = homogeneous(&ids(4), &[topic(1), topic(2)], &topics, &[]);
        for _ in 0..5 {
            assert_eq!(
                homogeneous(&ids(4), &[topic(1), topic(2)], &topics, &[]),
                first
            );
        }
        let again = homogeneous(&ids(4), &[topic(1), topic(2)], &topics, &first);
        assert_eq!(again, first, "a balanced assignment is kept as it is");
    }

    #[test]
    fn sticky_when_a_member_joins_or_leaves() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 12)].into();
        let first = homogeneous(&ids(3), &[topic(1)], &topics, &[]);
        assert_eq!(sizes(&first), vec![4, 4, 4]);
        // A fourth member joins: each existing member gives up one partition, nothing else moves.
        let second = homogeneous(&ids(4), &[topic(1)], &topics, &first);
        assert_eq!(sizes(&second), vec![3, 3, 3, 3]);
        for (before, after) in first.iter().zip(&second) {
            let (b, a) = (&before[&topic(1)], &after[&topic(1)]);
            assert!(a.is_subset(b));
        }
        assert!(sharing(&second).values().all(|c| *c == 1));
        // The last member leaves again: the others keep what they have and split its share.
        let third = homogeneous(&ids(3), &[topic(1)], &topics, &second[..3]);
        for (before, after) in second.iter().zip(&third) {
            assert!(before[&topic(1)].is_subset(&after[&topic(1)]));
        }
        assert_eq!(sizes(&third), vec![4, 4, 4]);
    }

    #[test]
    fn growing_partitions_reduce_sharing() {
        let small: BTreeMap<Uuid, i32> = [(topic(1), 2)].into();
        let first = homogeneous(&ids(4), &[topic(1)], &small, &[]);
        assert!(sharing(&first).values().all(|c| *c == 2));
        let big: BTreeMap<Uuid, i32> = [(topic(1), 4)].into();
        let second = homogeneous(&ids(4), &[topic(1)], &big, &first);
        assert_eq!(sizes(&second), vec![1, 1, 1, 1]);
        let counts = sharing(&second);
        assert_eq!(counts.len(), 4);
        assert!(counts.values().all(|c| *c == 1));
        // One holder of each shared partition keeps it; the others move to the new partitions.
        let of = |a: &Assignment| a[&topic(1)].iter().copied().collect::<Vec<_>>();
        assert_eq!(
            first.iter().map(of).collect::<Vec<_>>(),
            [[0], [0], [1], [1]]
        );
        assert_eq!(
            second.iter().map(of).collect::<Vec<_>>(),
            [[2], [0], [3], [1]]
        );
    }

    #[test]
    fn heterogeneous_balances_each_topic_among_its_subscribers() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 4), (topic(2), 4)].into();
        let names = ["a".to_string(), "b".to_string(), "c".to_string()];
        let members = vec![
            ShareAssignorMember {
                member_id: &names[0],
                subscribed: [topic(1)].into(),
                current: None,
            },
            ShareAssignorMember {
                member_id: &names[1],
                subscribed: [topic(2)].into(),
                current: None,
            },
            ShareAssignorMember {
                member_id: &names[2],
                subscribed: [topic(1), topic(2)].into(),
                current: None,
            },
        ];
        let result = assign(&members, &topics, None, SubscriptionType::Heterogeneous);
        assert_eq!(
            result[0].keys().copied().collect::<Vec<_>>(),
            vec![topic(1)]
        );
        assert_eq!(
            result[1].keys().copied().collect::<Vec<_>>(),
            vec![topic(2)]
        );
        // c gets half of each topic.
        assert_eq!(result[2][&topic(1)].len(), 2);
        assert_eq!(result[2][&topic(2)].len(), 2);
        let counts = sharing(&result);
        assert_eq!(counts.len(), 8);
        assert!(counts.values().all(|c| *c == 1));
    }

    #[test]
    fn heterogeneous_drops_partitions_of_topics_a_member_left() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 2), (topic(2), 2)].into();
        let names = ["a".to_string(), "b".to_string()];
        let before: Vec<Assignment> = vec![
            [
                (topic(1), BTreeSet::from([0, 1])),
                (topic(2), BTreeSet::from([0])),
            ]
            .into(),
            [(topic(2), BTreeSet::from([1]))].into(),
        ];
        let members = vec![
            ShareAssignorMember {
                member_id: &names[0],
                subscribed: [topic(1)].into(),
                current: before.first(),
            },
            ShareAssignorMember {
                member_id: &names[1],
                subscribed: [topic(2)].into(),
                current: before.get(1),
            },
        ];
        let result = assign(&members, &topics, None, SubscriptionType::Heterogeneous);
        assert_eq!(
            result[0],
            Assignment::from([(topic(1), BTreeSet::from([0, 1]))])
        );
        assert_eq!(
            result[1],
            Assignment::from([(topic(2), BTreeSet::from([0, 1]))])
        );
    }

    #[test]
    fn only_assignable_partitions_are_handed_out() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 4), (topic(2), 2)].into();
        let allowed: Assignment = [(topic(1), BTreeSet::from([1, 3, 9]))].into();
        let two = ids(2);
        let members = same_subscription(&two, &[topic(1), topic(2)], &[]);
        let result = assign(
            &members,
            &topics,
            Some(&allowed),
            SubscriptionType::Homogeneous,
        );
        // Partition 9 does not exist; topic 2 has nothing initialized.
        assert_eq!(
            sharing(&result).keys().copied().collect::<Vec<_>>(),
            vec![(topic(1), 1), (topic(1), 3)]
        );
        assert_eq!(sizes(&result), vec![1, 1]);
        // Nothing assignable: nothing assigned, previous holdings dropped.
        let none = Assignment::new();
        let again = assign(
            &same_subscription(&ids(2), &[topic(1)], &result),
            &topics,
            Some(&none),
            SubscriptionType::Homogeneous,
        );
        assert!(again.iter().all(Assignment::is_empty));
    }

    #[test]
    fn homogeneous_drops_unsubscribed_and_unknown_holdings() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 2)].into();
        let before: Vec<Assignment> = vec![
            [
                (topic(1), BTreeSet::from([0, 7])),
                (topic(5), BTreeSet::from([0])),
            ]
            .into(),
        ];
        let result = homogeneous(&ids(1), &[topic(1)], &topics, &before);
        assert_eq!(
            result,
            vec![Assignment::from([(topic(1), BTreeSet::from([0, 1]))])]
        );
    }

    #[test]
    fn no_members_or_no_topics() {
        let topics: BTreeMap<Uuid, i32> = [(topic(1), 2)].into();
        assert!(assign(&[], &topics, None, SubscriptionType::Homogeneous).is_empty());
        assert!(assign(&[], &topics, None, SubscriptionType::Heterogeneous).is_empty());
        let result = homogeneous(&ids(2), &[], &topics, &[]);
        assert_eq!(result, vec![Assignment::new(), Assignment::new()]);
        let result = homogeneous(&ids(2), &[topic(9)], &topics, &[]);
        assert_eq!(result, vec![Assignment::new(), Assignment::new()]);
    }
}
