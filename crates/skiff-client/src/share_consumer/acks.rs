//! Acknowledgements, pure: how a partition's acknowledged offsets become the
//! `AcknowledgementBatches` of ShareFetch and ShareAcknowledge, and which acquired offsets a
//! response did not deliver (gaps, and records whose batch was not in the response).
//!
//! Wire form (KIP-932): a batch is an inclusive offset range with either one acknowledge type for
//! every offset or one type per offset; type 0 is a gap (an acquired offset with no record,
//! e.g. a control record or one removed by compaction), 1 accept, 2 release, 3 reject. Here a
//! contiguous run of offsets with one type is one batch with one type; a contiguous run mixing
//! types is one batch with a type per offset when it is short (as Kafka's client sends them), and
//! one single-type batch per type otherwise, so a long gap never becomes a long array.

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::error::Error;

/// How a delivered record is acknowledged (Kafka's `AcknowledgeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AcknowledgeType {
    /// Processed: the record is done and never delivered again (ACCEPT, 1).
    Accept,
    /// Not processed: the record goes back to be delivered again, to this consumer or another,
    /// with its delivery count one higher (RELEASE, 2).
    Release,
    /// Unprocessable: the record is never delivered again (REJECT, 3).
    Reject,
}

impl AcknowledgeType {
    /// The wire value.
    pub fn code(self) -> i8 {
        match self {
            AcknowledgeType::Accept => 1,
            AcknowledgeType::Release => 2,
            AcknowledgeType::Reject => 3,
        }
    }
}

impl std::fmt::Display for AcknowledgeType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AcknowledgeType::Accept => "accept",
            AcknowledgeType::Release => "release",
            AcknowledgeType::Reject => "reject",
        })
    }
}

/// `accept`, `release` or `reject` (any case).
impl FromStr for AcknowledgeType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "accept" => Ok(AcknowledgeType::Accept),
            "release" => Ok(AcknowledgeType::Release),
            "reject" => Ok(AcknowledgeType::Reject),
            _ => Err(Error::Config(format!(
                "acknowledge type {s:?}: expected accept, release or reject"
            ))),
        }
    }
}

/// The acknowledge type of an acquired offset that holds no record.
pub(crate) const GAP: i8 = 0;

/// The longest mixed-type run sent as one batch with a type per offset.
pub(crate) const MAX_TYPES_PER_BATCH: i64 = 512;

/// One `AcknowledgementBatch`: `first..=last` with one type, or one type per offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AckBatch {
    pub first: i64,
    pub last: i64,
    pub types: Vec<i8>,
}

/// One partition's acknowledgements waiting to be sent: disjoint inclusive ranges, each with
/// one acknowledge type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Acknowledgements {
    /// first offset -> (last offset, type).
    ranges: BTreeMap<i64, (i64, i8)>,
}

impl Acknowledgements {
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Acknowledges `first..=last` with `code`. Offsets already acknowledged keep their type
    /// (an offset is acknowledged once); an empty or negative range is ignored.
    pub fn add_range(&mut self, first: i64, last: i64, code: i8) {
        if first < 0 || last < first {
            return;
        }
        let mut cursor = first;
        if let Some((_, &(end, _))) = self.ranges.range(..first).next_back()
            && end >= cursor
        {
            match end.checked_add(1) {
                Some(next) => cursor = next,
                None => return,
            }
        }
        if cursor > last {
            return;
        }
        let covered: Vec<(i64, i64)> = self
            .ranges
            .range(cursor..=last)
            .map(|(&f, &(l, _))| (f, l))
            .collect();
        let mut free = Vec::new();
        let mut done = false;
        for (f, l) in covered {
            if f > cursor {
                free.push((cursor, f - 1));
            }
            match l.checked_add(1) {
                Some(next) => cursor = next,
                None => {
                    done = true;
                    break;
                }
            }
            if cursor > last {
                done = true;
                break;
            }
        }
        if !done {
            free.push((cursor, last));
        }
        for (f, l) in free {
            self.ranges.insert(f, (l, code));
        }
    }

    /// The batches to send, in offset order.
    pub fn batches(&self) -> Vec<AckBatch> {
        // Adjacent ranges of one type become one run.
        let mut runs: Vec<(i64, i64, i8)> = Vec::new();
        for (&first, &(last, code)) in &self.ranges {
            if let Some(prev) = runs.last_mut()
                && prev.2 == code
                && prev.1.checked_add(1) == Some(first)
            {
                prev.1 = last;
                continue;
            }
            runs.push((first, last, code));
        }
        // Contiguous runs form groups.
        let mut groups: Vec<Vec<(i64, i64, i8)>> = Vec::new();
        for run in runs {
            match groups.last_mut() {
                Some(group)
                    if group
                        .last()
                        .is_some_and(|prev| prev.1.checked_add(1) == Some(run.0)) =>
                {
                    group.push(run)
                }
                _ => groups.push(vec![run]),
            }
        }
        let mut out = Vec::new();
        for group in groups {
            let (Some(head), Some(tail)) = (group.first(), group.last()) else {
                continue;
            };
            let (first, last) = (head.0, tail.1);
            let span = last.checked_sub(first).and_then(|d| d.checked_add(1));
            if group.len() > 1 && span.is_some_and(|s| s <= MAX_TYPES_PER_BATCH) {
                let mut types = Vec::new();
                for &(f, l, code) in &group {
                    for _ in f..=l {
                        types.push(code);
                    }
                }
                out.push(AckBatch { first, last, types });
            } else {
                out.extend(group.into_iter().map(|(f, l, code)| AckBatch {
                    first: f,
                    last: l,
                    types: vec![code],
                }));
            }
        }
        out
    }
}

/// One acquired range of a ShareFetch response: `first..=last`, delivered `delivery_count` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Acquired {
    pub first: i64,
    pub last: i64,
    pub delivery_count: i16,
}

/// The acquired ranges as a sorted list of disjoint ranges: negative or reversed ranges are
/// dropped, overlaps are cut off the later range (a well-behaved broker sends neither).
pub(crate) fn normalize_acquired(mut ranges: Vec<Acquired>) -> Vec<Acquired> {
    ranges.retain(|r| r.first >= 0 && r.last >= r.first);
    ranges.sort_by_key(|r| (r.first, r.last));
    let mut out: Vec<Acquired> = Vec::with_capacity(ranges.len());
    for mut r in ranges {
        if let Some(prev) = out.last() {
            if r.last <= prev.last {
                continue;
            }
            if r.first <= prev.last {
                r.first = prev.last + 1;
            }
        }
        out.push(r);
    }
    out
}

/// The delivery count of `offset` if it lies in one of the (normalized) acquired ranges.
pub(crate) fn delivery_count(acquired: &[Acquired], offset: i64) -> Option<i16> {
    let after = acquired.partition_point(|r| r.first <= offset);
    let candidate = acquired.get(after.checked_sub(1)?)?;
    (offset <= candidate.last).then_some(candidate.delivery_count)
}

/// What to do with the acquired offsets a response did not deliver as records:
/// `gaps` lie inside the batches the response carried (no record there: a control record, a
/// compacted one) and are acknowledged as gaps; `missing` lie outside them (their batch was not
/// in the response, or was cut short) and are released so they can be delivered again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Undelivered {
    pub gaps: Vec<(i64, i64)>,
    pub missing: Vec<(i64, i64)>,
}

/// Splits the acquired offsets (normalized) that are not in `delivered` (ascending) into gaps and
/// missing ones, by `covered`: the inclusive ranges of the complete batches the response held.
pub(crate) fn undelivered(
    acquired: &[Acquired],
    delivered: &[i64],
    covered: &[(i64, i64)],
) -> Undelivered {
    // Acquired offsets minus the delivered ones, as ranges.
    let mut rest: Vec<(i64, i64)> = Vec::new();
    let mut d = delivered.iter().copied().peekable();
    for r in acquired {
        let mut cursor = Some(r.first);
        while let Some(&offset) = d.peek() {
            if offset > r.last {
                break;
            }
            d.next();
            let Some(c) = cursor else { continue };
            if offset < c {
                continue;
            }
            if offset > c {
                rest.push((c, offset - 1));
            }
            cursor = offset.checked_add(1).filter(|&n| n <= r.last);
        }
        if let Some(c) = cursor {
            rest.push((c, r.last));
        }
    }
    // Merge the covered ranges.
    let mut cover: Vec<(i64, i64)> = covered.iter().copied().filter(|(f, l)| f <= l).collect();
    cover.sort_unstable();
    let mut merged: Vec<(i64, i64)> = Vec::with_capacity(cover.len());
    for (f, l) in cover {
        match merged.last_mut() {
            Some(prev) if f <= prev.1.saturating_add(1) => prev.1 = prev.1.max(l),
            _ => merged.push((f, l)),
        }
    }
    // Split each undelivered range at the covered ranges' edges.
    let mut out = Undelivered::default();
    for (first, last) in rest {
        let mut cursor = Some(first);
        let start = merged.partition_point(|&(_, l)| l < first);
        for &(cf, cl) in merged.iter().skip(start) {
            let Some(c) = cursor else { break };
            if cf > last {
                break;
            }
            if cf > c {
                out.missing.push((c, cf - 1));
            }
            let (begin, end) = (c.max(cf), cl.min(last));
            if begin <= end {
                out.gaps.push((begin, end));
            }
            cursor = end.checked_add(1).filter(|&n| n <= last);
        }
        if let Some(c) = cursor {
            out.missing.push((c, last));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acks(entries: &[(i64, i64, i8)]) -> Acknowledgements {
        let mut a = Acknowledgements::default();
        for &(f, l, c) in entries {
            a.add_range(f, l, c);
        }
        a
    }

    fn batch(first: i64, last: i64, types: &[i8]) -> AckBatch {
        AckBatch {
            first,
            last,
            types: types.to_vec(),
        }
    }

    #[test]
    fn acknowledge_types_have_kafkas_codes_and_names() {
        assert_eq!(AcknowledgeType::Accept.code(), 1);
        assert_eq!(AcknowledgeType::Release.code(), 2);
        assert_eq!(AcknowledgeType::Reject.code(), 3);
        for t in [
            AcknowledgeType::Accept,
            AcknowledgeType::Release,
            AcknowledgeType::Reject,
        ] {
            assert_eq!(t.to_string().parse::<AcknowledgeType>().ok(), Some(t));
        }
        assert_eq!(
            "RELEASE".parse::<AcknowledgeType>().ok(),
            Some(AcknowledgeType::Release)
        );
        assert!("gap".parse::<AcknowledgeType>().is_err());
    }

    #[test]
    fn contiguous_offsets_of_one_type_are_one_batch() {
        let a = acks(&[(5, 5, 1), (6, 6, 1), (7, 7, 1), (3, 4, 1)]);
        assert_eq!(a.batches(), vec![batch(3, 7, &[1])]);
    }

    #[test]
    fn offsets_with_holes_are_separate_batches() {
        // 0-1 accepted, 2 not acknowledged (still in flight), 3-4 accepted, 10 rejected.
        let a = acks(&[(0, 0, 1), (1, 1, 1), (3, 3, 1), (4, 4, 1), (10, 10, 3)]);
        assert_eq!(
            a.batches(),
            vec![batch(0, 1, &[1]), batch(3, 4, &[1]), batch(10, 10, &[3])]
        );
    }

    #[test]
    fn short_mixed_runs_carry_one_type_per_offset() {
        // Records 0, 1, 4 accepted, 2 released, 3 a gap (a control record).
        let a = acks(&[(0, 1, 1), (2, 2, 2), (3, 3, GAP), (4, 4, 1)]);
        assert_eq!(a.batches(), vec![batch(0, 4, &[1, 1, 2, 0, 1])]);
    }

    #[test]
    fn long_mixed_runs_are_split_by_type() {
        // A long gap between two records: no array of thousands of zeros.
        let a = acks(&[(0, 0, 1), (1, 10_000, GAP), (10_001, 10_001, 3)]);
        assert_eq!(
            a.batches(),
            vec![
                batch(0, 0, &[1]),
                batch(1, 10_000, &[GAP]),
                batch(10_001, 10_001, &[3])
            ]
        );
        // Exactly at the bound it is still one batch.
        let a = acks(&[(0, 0, 1), (1, MAX_TYPES_PER_BATCH - 1, GAP)]);
        let b = a.batches();
        assert_eq!(b.len(), 1);
        assert_eq!(
            b.first().map(|b| b.types.len()),
            Some(MAX_TYPES_PER_BATCH as usize)
        );
    }

    #[test]
    fn an_offset_is_acknowledged_once() {
        let mut a = acks(&[(5, 5, 3)]);
        a.add_range(5, 5, 1);
        a.add_range(3, 8, GAP);
        assert_eq!(a.batches(), vec![batch(3, 8, &[0, 0, 3, 0, 0, 0])]);
        a.add_range(-1, 2, 1); // negative: ignored
        a.add_range(9, 8, 1); // reversed: ignored
        assert_eq!(a.batches().len(), 1);
        let mut b = acks(&[(0, 2, 2)]);
        b.add_range(2, 4, 1);
        assert_eq!(b.batches(), vec![batch(0, 4, &[2, 2, 2, 1, 1])]);
        // The top of the offset range does not overflow.
        let mut c = acks(&[(i64::MAX - 1, i64::MAX, 1)]);
        c.add_range(i64::MAX - 3, i64::MAX, 2);
        assert_eq!(
            c.batches(),
            vec![batch(i64::MAX - 3, i64::MAX, &[2, 2, 1, 1])]
        );
    }

    fn acquired(ranges: &[(i64, i64, i16)]) -> Vec<Acquired> {
        ranges
            .iter()
            .map(|&(first, last, delivery_count)| Acquired {
                first,
                last,
                delivery_count,
            })
            .collect()
    }

    #[test]
    fn acquired_ranges_are_sorted_and_made_disjoint() {
        let n = normalize_acquired(acquired(&[
            (10, 12, 2),
            (0, 4, 1),
            (3, 6, 3),   // overlaps 0-4: becomes 5-6
            (7, 5, 1),   // reversed
            (-3, 1, 1),  // negative
            (11, 11, 4), // inside 10-12
        ]));
        assert_eq!(n, acquired(&[(0, 4, 1), (5, 6, 3), (10, 12, 2)]));
        assert_eq!(delivery_count(&n, 0), Some(1));
        assert_eq!(delivery_count(&n, 5), Some(3));
        assert_eq!(delivery_count(&n, 12), Some(2));
        assert_eq!(delivery_count(&n, 8), None);
        assert_eq!(delivery_count(&n, 13), None);
        assert_eq!(delivery_count(&n, -1), None);
    }

    #[test]
    fn undelivered_acquired_offsets_are_gaps_inside_batches_and_missing_outside() {
        // Acquired 0-9; batches 0-4 and 5-7 in the response; records 0, 1, 3, 5, 6 delivered
        // (2 and 4 were control records, 7 compacted away); 8-9's batch was not in the response.
        let a = acquired(&[(0, 9, 1)]);
        let u = undelivered(&a, &[0, 1, 3, 5, 6], &[(5, 7), (0, 4)]);
        assert_eq!(u.gaps, vec![(2, 2), (4, 4), (7, 7)]);
        assert_eq!(u.missing, vec![(8, 9)]);
        // Everything delivered.
        let u = undelivered(&a, &(0..10).collect::<Vec<_>>(), &[(0, 9)]);
        assert_eq!(u, Undelivered::default());
        // Nothing delivered, no batch: all missing.
        let u = undelivered(&acquired(&[(3, 4, 1), (8, 8, 2)]), &[], &[]);
        assert_eq!(u.missing, vec![(3, 4), (8, 8)]);
        assert!(u.gaps.is_empty());
        // A batch covering part of a range, in the middle.
        let u = undelivered(&acquired(&[(0, 9, 1)]), &[4], &[(3, 5)]);
        assert_eq!(u.gaps, vec![(3, 3), (5, 5)]);
        assert_eq!(u.missing, vec![(0, 2), (6, 9)]);
        // Delivered offsets outside the acquired ranges change nothing.
        let u = undelivered(&acquired(&[(5, 6, 1)]), &[1, 5, 9], &[(0, 10)]);
        assert_eq!(u.gaps, vec![(6, 6)]);
        assert!(u.missing.is_empty());
        // A huge acquired range costs nothing.
        let u = undelivered(&acquired(&[(0, i64::MAX, 1)]), &[0], &[(0, 0)]);
        assert_eq!(u.missing, vec![(1, i64::MAX)]);
        let u = undelivered(&acquired(&[(0, i64::MAX, 1)]), &[], &[(0, i64::MAX)]);
        assert_eq!(u.gaps, vec![(0, i64::MAX)]);
        assert!(u.missing.is_empty());
    }
}
