//! Consumer lag per client instance: the arithmetic alone, on plain data. What a member's
//! position is on an assigned partition (its group's committed offset, or a share partition's
//! start offset), what the partition holds (log start, high watermark, last stable offset) and
//! the timestamp of the first unconsumed batch go in; records and seconds behind come out.
//! Gathering those inputs (the coordinator's offsets, the partitions' watermarks, one batch
//! header) is the admin view's business (`admin::lag`); nothing here reads or locks anything.
//!
//! - **Records**: the high watermark less the position (raised to the log start: records
//!   deleted by retention cannot be consumed), less the records past the position already
//!   delivered for good (a share partition's acknowledged and archived records: Kafka's
//!   share-partition lag); never negative. Unknown without a position or a high watermark.
//! - **Seconds**: 0 when no record is behind; else how long ago the first unconsumed record's
//!   batch was written (now less its timestamp), unknown without that timestamp.
//! - **Totals** of a membership or an instance: the records summed and the seconds' maximum
//!   over the partitions whose figure is known (unknown when none is).

use serde::{Deserialize, Serialize};

/// What is known of one assigned partition, gathered by the caller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    /// The group's committed offset (consumer and classic members) or the share partition's
    /// start offset (share members); `None`: nothing committed.
    pub position: Option<i64>,
    /// Records at or after `position` already delivered for good (share partitions:
    /// acknowledged or archived); 0 for consumer groups.
    pub done: i64,
    pub log_start: Option<i64>,
    pub high_watermark: Option<i64>,
    pub last_stable: Option<i64>,
    /// The timestamp (ms) of the batch holding the first unconsumed record ([`first_unconsumed`]),
    /// when it was read.
    pub timestamp_ms: Option<i64>,
}

/// One assigned partition as the client-instance view shows it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    /// The committed offset, or for a share member the share partition's start offset.
    pub committed_offset: Option<i64>,
    pub high_watermark: Option<i64>,
    pub last_stable_offset: Option<i64>,
    pub lag_records: Option<i64>,
    pub lag_seconds: Option<f64>,
}

/// Records and seconds behind, summed (records) and maximised (seconds) over what is known.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    pub records: Option<i64>,
    pub seconds: Option<f64>,
}

/// Where a reader at `position` starts: the position, raised to the log start.
fn start(p: &Position) -> Option<i64> {
    let position = p.position?;
    Some(p.log_start.map_or(position, |s| position.max(s)))
}

/// Records behind: see the module documentation.
pub fn records(p: &Position) -> Option<i64> {
    let end = p.high_watermark?;
    Some(
        end.saturating_sub(start(p)?)
            .saturating_sub(p.done.max(0))
            .max(0),
    )
}

/// The offset whose batch timestamp the seconds need: the first unconsumed record's, when any
/// record is behind (`None`: no read is needed, or none would help).
pub fn first_unconsumed(p: &Position) -> Option<i64> {
    match records(p) {
        Some(n) if n > 0 => start(p),
        _ => None,
    }
}

/// Seconds behind at `now_ms`: see the module documentation. A timestamp in the future (a
/// producer's clock ahead of the broker's) counts as 0; a negative one (no timestamp) as
/// unknown.
pub fn seconds(p: &Position, now_ms: i64) -> Option<f64> {
    match records(p)? {
        0 => Some(0.0),
        _ => {
            let ts = p.timestamp_ms.filter(|ts| *ts >= 0)?;
            Some(now_ms.saturating_sub(ts).max(0) as f64 / 1000.0)
        }
    }
}

/// One partition's figures.
pub fn partition(topic: &str, partition: i32, p: &Position, now_ms: i64) -> PartitionLag {
    PartitionLag {
        topic: topic.to_string(),
        partition,
        committed_offset: p.position,
        high_watermark: p.high_watermark,
        last_stable_offset: p.last_stable,
        lag_records: records(p),
        lag_seconds: seconds(p, now_ms),
    }
}

/// Sums the records and takes the largest seconds of what is known.
pub fn totals(figures: impl IntoIterator<Item = Totals>) -> Totals {
    figures
        .into_iter()
        .fold(Totals::default(), |acc, t| Totals {
            records: match (acc.records, t.records) {
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                (a, b) => a.or(b),
            },
            seconds: match (acc.seconds, t.seconds) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
        })
}

impl PartitionLag {
    pub fn totals(&self) -> Totals {
        Totals {
            records: self.lag_records,
            seconds: self.lag_seconds,
        }
    }
}

/// The `n` largest values with their keys, largest first (equal values by key); unknown values
/// are left out. What `/metrics` shows per instance, so that its series stay few.
pub fn top<'a>(
    values: impl IntoIterator<Item = (&'a str, Option<f64>)>,
    n: usize,
) -> Vec<(&'a str, f64)> {
    let mut known: Vec<(&str, f64)> = values
        .into_iter()
        .filter_map(|(key, value)| Some((key, value.filter(|v| v.is_finite())?)))
        .collect();
    known.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    known.truncate(n);
    known
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(position: Option<i64>, log_start: i64, end: i64) -> Position {
        Position {
            position,
            log_start: Some(log_start),
            high_watermark: Some(end),
            last_stable: Some(end),
            ..Position::default()
        }
    }

    #[test]
    fn records_behind() {
        assert_eq!(records(&at(Some(30), 0, 100)), Some(70));
        assert_eq!(records(&at(Some(100), 0, 100)), Some(0), "caught up");
        assert_eq!(records(&at(Some(120), 0, 100)), Some(0), "past the end");
        assert_eq!(
            records(&at(Some(5), 40, 100)),
            Some(60),
            "deleted records are not behind"
        );
        assert_eq!(records(&at(None, 0, 100)), None, "nothing committed");
        let unknown_end = Position {
            high_watermark: None,
            ..at(Some(3), 0, 0)
        };
        assert_eq!(records(&unknown_end), None);
        // A share partition: 8 of the 20 records after its start are done.
        let share = Position {
            done: 8,
            ..at(Some(10), 0, 30)
        };
        assert_eq!(records(&share), Some(12));
    }

    #[test]
    fn seconds_behind() {
        let now = 1_000_000;
        let behind = Position {
            timestamp_ms: Some(now - 90_500),
            ..at(Some(30), 0, 100)
        };
        assert_eq!(seconds(&behind, now), Some(90.5));
        assert_eq!(first_unconsumed(&behind), Some(30));
        let raised = at(Some(5), 40, 100);
        assert_eq!(first_unconsumed(&raised), Some(40), "from the log start");
        // Caught up: 0 without any read.
        let caught_up = at(Some(100), 0, 100);
        assert_eq!(seconds(&caught_up, now), Some(0.0));
        assert_eq!(first_unconsumed(&caught_up), None);
        // Behind, without a timestamp (cluster mode, or a batch without one): unknown.
        assert_eq!(seconds(&at(Some(30), 0, 100), now), None);
        let no_timestamp = Position {
            timestamp_ms: Some(-1),
            ..behind
        };
        assert_eq!(seconds(&no_timestamp, now), None);
        let future = Position {
            timestamp_ms: Some(now + 5_000),
            ..behind
        };
        assert_eq!(seconds(&future, now), Some(0.0));
        assert_eq!(seconds(&at(None, 0, 100), now), None);
    }

    #[test]
    fn partition_figures() {
        let p = Position {
            timestamp_ms: Some(1_000),
            last_stable: Some(90),
            ..at(Some(30), 0, 100)
        };
        assert_eq!(
            partition("t", 1, &p, 3_000),
            PartitionLag {
                topic: "t".into(),
                partition: 1,
                committed_offset: Some(30),
                high_watermark: Some(100),
                last_stable_offset: Some(90),
                lag_records: Some(70),
                lag_seconds: Some(2.0),
            }
        );
    }

    #[test]
    fn totals_sum_records_and_keep_the_largest_seconds() {
        let t = |records, seconds| Totals { records, seconds };
        assert_eq!(totals([]), t(None, None));
        assert_eq!(
            totals([
                t(Some(70), Some(3.0)),
                t(Some(50), Some(9.5)),
                t(None, None)
            ]),
            t(Some(120), Some(9.5))
        );
        assert_eq!(
            totals([t(None, None), t(Some(0), Some(0.0))]),
            t(Some(0), Some(0.0))
        );
        assert_eq!(
            totals([t(Some(i64::MAX), None), t(Some(1), None)]),
            t(Some(i64::MAX), None)
        );
    }

    #[test]
    fn top_keeps_the_largest() {
        let values = [
            ("a", Some(1.0)),
            ("b", None),
            ("c", Some(7.0)),
            ("d", Some(7.0)),
            ("e", Some(f64::NAN)),
            ("f", Some(0.0)),
        ];
        assert_eq!(top(values, 2), vec![("c", 7.0), ("d", 7.0)]);
        assert_eq!(
            top(values, 10),
            vec![("c", 7.0), ("d", 7.0), ("a", 1.0), ("f", 0.0)]
        );
        assert!(top(values, 0).is_empty());
    }
}
