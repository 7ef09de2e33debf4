//! The partitions' logs in PostgreSQL: committing an uploaded object's batches (the rules of
//! [`crate::commit`], applied under row locks), finding batches to fetch, offsets, moving the
//! log start (DeleteRecords, retention) and releasing objects no batch refers to.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

use crate::commit::{
    self, Append, LogState, OpenTxn, OpenTxns, PartitionKey, ProducerState, RecentBatch, Verdict,
};
use crate::db::{Db, DbError};
use crate::membership::{self, Registration};

/// The channel changes to logs are announced on (commits, a log start moving): the payload
/// lists `topic_id:partition:log_start:high_watermark:last_stable`, separated by spaces
/// (brokers before transactions sent no last stable offset: it is then the high watermark).
pub const COMMITS_CHANNEL: &str = "skiff_commits";

/// How many changes one NOTIFY carries: payloads are limited to 8000 bytes, and an entry takes
/// at most 36 + 1 + 10 + 3 × (1 + 19) + 1 = 108.
const CHANGES_PER_NOTIFY: usize = 60;

/// A change announced on [`COMMITS_CHANNEL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogChange {
    pub key: PartitionKey,
    pub log_start: i64,
    pub high_watermark: i64,
    pub last_stable: i64,
}

/// Reads a [`COMMITS_CHANNEL`] payload (entries that do not parse are skipped).
pub fn parse_changes(payload: &str) -> Vec<LogChange> {
    payload
        .split_whitespace()
        .filter_map(|entry| {
            let mut parts = entry.split(':');
            let topic_id = Uuid::parse_str(parts.next()?).ok()?;
            let partition = parts.next()?.parse().ok()?;
            let log_start = parts.next()?.parse().ok()?;
            let high_watermark = parts.next()?.parse().ok()?;
            let last_stable = match parts.next() {
                None => high_watermark,
                Some(s) => s.parse().ok()?,
            };
            if parts.next().is_some() {
                return None;
            }
            Some(LogChange {
                key: PartitionKey {
                    topic_id,
                    partition,
                },
                log_start,
                high_watermark,
                last_stable,
            })
        })
        .collect()
}

fn format_changes(changes: &[LogChange]) -> String {
    changes
        .iter()
        .map(|c| {
            format!(
                "{}:{}:{}:{}:{}",
                c.key.topic_id, c.key.partition, c.log_start, c.high_watermark, c.last_stable
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

async fn announce(
    tx: &tokio_postgres::Transaction<'_>,
    changes: &[LogChange],
) -> Result<(), DbError> {
    // NOTIFY payloads are limited to 8000 bytes: a longer list goes in pieces.
    for chunk in changes.chunks(CHANGES_PER_NOTIFY) {
        tx.execute(
            "SELECT pg_notify($1, $2)",
            &[&COMMITS_CHANNEL, &format_changes(chunk)],
        )
        .await?;
    }
    Ok(())
}

/// What a commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// One per append, in order.
    pub verdicts: Vec<Verdict>,
    /// The object's row, when any batch was committed; `None` means nothing refers to the
    /// object and the caller deletes it.
    pub object_id: Option<i64>,
    /// The log start of each partition the commit touched (produce answers carry it).
    pub log_starts: BTreeMap<PartitionKey, i64>,
    /// The logs the commit advanced, as announced.
    pub changes: Vec<LogChange>,
    /// The batch rows it inserted (in the object named by the commit).
    pub rows: Vec<commit::BatchRow>,
}

fn partitions_arrays(keys: &BTreeSet<PartitionKey>) -> (Vec<Uuid>, Vec<i32>) {
    keys.iter().map(|k| (k.topic_id, k.partition)).unzip()
}

fn to_i64(v: u64, what: &str) -> Result<i64, DbError> {
    i64::try_from(v).map_err(|_| DbError::Corrupt(format!("{what} {v} out of range")))
}

/// Commits an uploaded object: checks the broker's registration, locks the partitions in
/// [`PartitionKey`] order, applies [`commit::plan`], and writes the object's row, the batch
/// rows, the logs' new high watermarks and last stable offsets, the producers' states and the
/// transactions opened, closed and aborted in one transaction, which also announces the commit
/// on [`COMMITS_CHANNEL`].
pub async fn commit(
    db: &Db,
    reg: Registration,
    object_key: &str,
    object_size: u64,
    appends: &[Append],
    now_ms: i64,
) -> Result<Committed, DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    membership::check_current(&tx, reg).await?;

    let keys: BTreeSet<PartitionKey> = appends.iter().map(|a| a.key).collect();
    let (topic_ids, partitions) = partitions_arrays(&keys);
    let rows = tx
        .query(
            "SELECT topic_id, partition, log_start, high_watermark, last_stable, size_bytes FROM logs
             WHERE (topic_id, partition) IN (SELECT * FROM unnest($1::uuid[], $2::int[]))
             ORDER BY topic_id, partition FOR UPDATE",
            &[&topic_ids, &partitions],
        )
        .await?;
    let mut logs = BTreeMap::new();
    for r in &rows {
        logs.insert(
            PartitionKey {
                topic_id: r.try_get(0)?,
                partition: r.try_get(1)?,
            },
            LogState {
                log_start: r.try_get(2)?,
                high_watermark: r.try_get(3)?,
                last_stable: r.try_get(4)?,
                size_bytes: r.try_get(5)?,
            },
        );
    }

    // Every open transaction of the locked partitions (the last stable offset needs them all).
    let mut open = OpenTxns::new();
    if !logs.is_empty() {
        let rows = tx
            .query(
                "SELECT topic_id, partition, producer_id, producer_epoch, first_offset, opened_ms
                 FROM open_transactions
                 WHERE (topic_id, partition) IN (SELECT * FROM unnest($1::uuid[], $2::int[]))",
                &[&topic_ids, &partitions],
            )
            .await?;
        for r in &rows {
            let key = PartitionKey {
                topic_id: r.try_get(0)?,
                partition: r.try_get(1)?,
            };
            open.entry(key).or_default().insert(
                r.try_get(2)?,
                OpenTxn {
                    producer_epoch: r.try_get(3)?,
                    first_offset: r.try_get(4)?,
                    opened_ms: r.try_get(5)?,
                },
            );
        }
    }

    let wanted: BTreeSet<(PartitionKey, i64)> = appends
        .iter()
        .flat_map(|a| a.batches.iter().map(move |b| (a.key, b.producer_id)))
        .filter(|(_, pid)| *pid >= 0)
        .collect();
    let mut producers = HashMap::new();
    if !wanted.is_empty() {
        let (t, p, pid): (Vec<Uuid>, Vec<i32>, Vec<i64>) = wanted.iter().fold(
            (Vec::new(), Vec::new(), Vec::new()),
            |(mut t, mut p, mut pid), (k, id)| {
                t.push(k.topic_id);
                p.push(k.partition);
                pid.push(*id);
                (t, p, pid)
            },
        );
        let rows = tx
            .query(
                "SELECT topic_id, partition, producer_id, epoch, recent, last_append_ms FROM producers
                 WHERE (topic_id, partition, producer_id) IN
                    (SELECT * FROM unnest($1::uuid[], $2::int[], $3::bigint[]))",
                &[&t, &p, &pid],
            )
            .await?;
        for r in &rows {
            let key = PartitionKey {
                topic_id: r.try_get(0)?,
                partition: r.try_get(1)?,
            };
            let recent: serde_json::Value = r.try_get(4)?;
            let recent: Vec<RecentBatch> = serde_json::from_value(recent)
                .map_err(|e| DbError::Corrupt(format!("producers.recent: {e}")))?;
            producers.insert(
                (key, r.try_get::<_, i64>(2)?),
                ProducerState {
                    epoch: r.try_get(3)?,
                    recent,
                    last_append_ms: r.try_get(5)?,
                },
            );
        }
    }

    let plan = commit::plan(&logs, &producers, &open, appends, now_ms);
    let log_starts = logs.iter().map(|(k, l)| (*k, l.log_start)).collect();
    if plan.rows.is_empty() {
        tx.commit().await?;
        return Ok(Committed {
            verdicts: plan.verdicts,
            object_id: None,
            log_starts,
            changes: Vec::new(),
            rows: Vec::new(),
        });
    }

    let object_id: i64 = tx
        .query_one(
            "INSERT INTO objects (key, node_id, broker_epoch, size_bytes, used_bytes)
             VALUES ($1, $2, $3, $4, $5) RETURNING object_id",
            &[
                &object_key,
                &reg.node_id,
                &reg.epoch,
                &to_i64(object_size, "object size")?,
                &to_i64(plan.used_bytes(), "used bytes")?,
            ],
        )
        .await?
        .try_get(0)?;

    let mut cols = BatchColumns::default();
    for r in &plan.rows {
        cols.push(r)?;
    }
    tx.execute(
        "INSERT INTO batches (topic_id, partition, base_offset, last_offset, object_id, byte_offset,
            byte_size, max_timestamp, log_append_time, producer_id, producer_epoch, base_sequence,
            last_sequence)
         SELECT t, p, b, l, $1, bo, bs, mt, lat, pid, pe, bseq, lseq FROM unnest(
            $2::uuid[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[], $7::int[],
            $8::bigint[], $9::bigint[], $10::bigint[], $11::smallint[], $12::int[], $13::int[])
            AS u(t, p, b, l, bo, bs, mt, lat, pid, pe, bseq, lseq)",
        &[
            &object_id,
            &cols.topic_ids,
            &cols.partitions,
            &cols.base_offsets,
            &cols.last_offsets,
            &cols.byte_offsets,
            &cols.byte_sizes,
            &cols.max_timestamps,
            &cols.log_append_times,
            &cols.producer_ids,
            &cols.producer_epochs,
            &cols.base_sequences,
            &cols.last_sequences,
        ],
    )
    .await?;

    let mut t = Vec::new();
    let mut p = Vec::new();
    let mut hw = Vec::new();
    let mut stable = Vec::new();
    let mut size = Vec::new();
    for (k, l) in &plan.logs {
        t.push(k.topic_id);
        p.push(k.partition);
        hw.push(l.high_watermark);
        stable.push(l.last_stable);
        size.push(l.size_bytes);
    }
    tx.execute(
        "UPDATE logs SET high_watermark = u.hw, last_stable = u.stable, size_bytes = u.size
         FROM unnest($1::uuid[], $2::int[], $3::bigint[], $4::bigint[], $5::bigint[])
            AS u(t, p, hw, stable, size)
         WHERE logs.topic_id = u.t AND logs.partition = u.p",
        &[&t, &p, &hw, &stable, &size],
    )
    .await?;

    write_transactions(&tx, &plan).await?;

    if !plan.producers.is_empty() {
        let mut t = Vec::new();
        let mut p = Vec::new();
        let mut pid = Vec::new();
        let mut epoch = Vec::new();
        let mut recent = Vec::new();
        let mut last = Vec::new();
        for ((k, id), s) in &plan.producers {
            t.push(k.topic_id);
            p.push(k.partition);
            pid.push(*id);
            epoch.push(s.epoch);
            recent.push(
                serde_json::to_value(&s.recent)
                    .map_err(|e| DbError::Corrupt(format!("producers.recent: {e}")))?,
            );
            last.push(s.last_append_ms);
        }
        tx.execute(
            "INSERT INTO producers (topic_id, partition, producer_id, epoch, recent, last_append_ms)
             SELECT * FROM unnest($1::uuid[], $2::int[], $3::bigint[], $4::smallint[], $5::jsonb[],
                $6::bigint[])
             ON CONFLICT (topic_id, partition, producer_id) DO UPDATE SET
                epoch = EXCLUDED.epoch, recent = EXCLUDED.recent,
                last_append_ms = EXCLUDED.last_append_ms",
            &[&t, &p, &pid, &epoch, &recent, &last],
        )
        .await?;
    }

    let changes: Vec<LogChange> = plan
        .logs
        .iter()
        .map(|(k, l)| LogChange {
            key: *k,
            log_start: l.log_start,
            high_watermark: l.high_watermark,
            last_stable: l.last_stable,
        })
        .collect();
    announce(&tx, &changes).await?;
    tx.commit().await?;
    Ok(Committed {
        verdicts: plan.verdicts,
        object_id: Some(object_id),
        log_starts,
        changes,
        rows: plan.rows,
    })
}

/// Inside a commit: deletes the open transactions the plan closed, inserts those it opened, and
/// records the aborted ones.
async fn write_transactions(
    tx: &tokio_postgres::Transaction<'_>,
    plan: &commit::Plan,
) -> Result<(), DbError> {
    if !plan.closed.is_empty() {
        let (t, p, pid): (Vec<Uuid>, Vec<i32>, Vec<i64>) =
            plan.closed
                .iter()
                .fold(Default::default(), |(mut t, mut p, mut pid), (k, id)| {
                    t.push(k.topic_id);
                    p.push(k.partition);
                    pid.push(*id);
                    (t, p, pid)
                });
        tx.execute(
            "DELETE FROM open_transactions
             WHERE (topic_id, partition, producer_id) IN
                (SELECT * FROM unnest($1::uuid[], $2::int[], $3::bigint[]))",
            &[&t, &p, &pid],
        )
        .await?;
    }
    if !plan.opened.is_empty() {
        let mut t = Vec::new();
        let mut p = Vec::new();
        let mut pid = Vec::new();
        let mut epoch = Vec::new();
        let mut first = Vec::new();
        let mut opened = Vec::new();
        for ((k, id), o) in &plan.opened {
            t.push(k.topic_id);
            p.push(k.partition);
            pid.push(*id);
            epoch.push(o.producer_epoch);
            first.push(o.first_offset);
            opened.push(o.opened_ms);
        }
        tx.execute(
            "INSERT INTO open_transactions
                (topic_id, partition, producer_id, producer_epoch, first_offset, opened_ms)
             SELECT * FROM unnest($1::uuid[], $2::int[], $3::bigint[], $4::smallint[],
                $5::bigint[], $6::bigint[])",
            &[&t, &p, &pid, &epoch, &first, &opened],
        )
        .await?;
    }
    if !plan.aborted.is_empty() {
        let mut t = Vec::new();
        let mut p = Vec::new();
        let mut pid = Vec::new();
        let mut first = Vec::new();
        let mut last = Vec::new();
        for a in &plan.aborted {
            t.push(a.key.topic_id);
            p.push(a.key.partition);
            pid.push(a.producer_id);
            first.push(a.first_offset);
            last.push(a.last_offset);
        }
        tx.execute(
            "INSERT INTO aborted_transactions
                (topic_id, partition, producer_id, first_offset, last_offset)
             SELECT * FROM unnest($1::uuid[], $2::int[], $3::bigint[], $4::bigint[], $5::bigint[])",
            &[&t, &p, &pid, &first, &last],
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_payloads_round_trip() {
        let changes = vec![
            LogChange {
                key: PartitionKey {
                    topic_id: Uuid::from_u128(9),
                    partition: 3,
                },
                log_start: 4,
                high_watermark: 10,
                last_stable: 7,
            },
            LogChange {
                key: PartitionKey {
                    topic_id: Uuid::from_u128(1),
                    partition: 0,
                },
                log_start: 0,
                high_watermark: 0,
                last_stable: 0,
            },
        ];
        assert_eq!(parse_changes(&format_changes(&changes)), changes);
        assert!(parse_changes("junk 1:2 x:y:z:w").is_empty());
        let id = Uuid::from_u128(9);
        // Brokers before transactions announce no last stable offset: the high watermark.
        assert_eq!(
            parse_changes(&format!("{id}:3:4:10 {id}:3:4:10:x {id}:3:4:10:7:1")),
            vec![LogChange {
                key: PartitionKey {
                    topic_id: id,
                    partition: 3
                },
                log_start: 4,
                high_watermark: 10,
                last_stable: 10,
            }]
        );
    }

    #[test]
    fn the_longest_announcement_fits_a_notify_payload() {
        let longest = LogChange {
            key: PartitionKey {
                topic_id: Uuid::from_u128(u128::MAX),
                partition: i32::MIN,
            },
            log_start: i64::MIN,
            high_watermark: i64::MIN,
            last_stable: i64::MIN,
        };
        let payload = format_changes(&[longest; CHANGES_PER_NOTIFY]);
        assert!(payload.len() < 8000, "{}", payload.len());
    }
}

#[derive(Default)]
struct BatchColumns {
    topic_ids: Vec<Uuid>,
    partitions: Vec<i32>,
    base_offsets: Vec<i64>,
    last_offsets: Vec<i64>,
    byte_offsets: Vec<i64>,
    byte_sizes: Vec<i32>,
    max_timestamps: Vec<i64>,
    log_append_times: Vec<i64>,
    producer_ids: Vec<i64>,
    producer_epochs: Vec<i16>,
    base_sequences: Vec<i32>,
    last_sequences: Vec<i32>,
}

impl BatchColumns {
    fn push(&mut self, r: &commit::BatchRow) -> Result<(), DbError> {
        self.topic_ids.push(r.key.topic_id);
        self.partitions.push(r.key.partition);
        self.base_offsets.push(r.base_offset);
        self.last_offsets.push(r.last_offset);
        self.byte_offsets
            .push(to_i64(r.byte_offset, "byte offset")?);
        self.byte_sizes.push(
            i32::try_from(r.byte_size)
                .map_err(|_| DbError::Corrupt(format!("batch size {}", r.byte_size)))?,
        );
        self.max_timestamps.push(r.max_timestamp);
        self.log_append_times.push(r.log_append_time);
        self.producer_ids.push(r.producer_id);
        self.producer_epochs.push(r.producer_epoch);
        self.base_sequences.push(r.base_sequence);
        self.last_sequences.push(r.last_sequence);
        Ok(())
    }
}

/// A committed batch, where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub object_key: String,
    pub byte_offset: u64,
    pub byte_size: u32,
    pub max_timestamp: i64,
    pub log_append_time: i64,
}

/// A partition's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    pub log_start: i64,
    pub high_watermark: i64,
    /// The last stable offset: consumers reading committed stop here.
    pub last_stable: i64,
    pub size_bytes: i64,
}

fn found(r: &tokio_postgres::Row) -> Result<FoundBatch, DbError> {
    let byte_offset: i64 = r.try_get(3)?;
    let byte_size: i32 = r.try_get(4)?;
    Ok(FoundBatch {
        base_offset: r.try_get(0)?,
        last_offset: r.try_get(1)?,
        object_key: r.try_get(2)?,
        byte_offset: u64::try_from(byte_offset)
            .map_err(|_| DbError::Corrupt(format!("byte_offset {byte_offset}")))?,
        byte_size: u32::try_from(byte_size)
            .map_err(|_| DbError::Corrupt(format!("byte_size {byte_size}")))?,
        max_timestamp: r.try_get(5)?,
        log_append_time: r.try_get(6)?,
    })
}

const FOUND_COLUMNS: &str = "b.base_offset, b.last_offset, o.key, b.byte_offset, b.byte_size, \
                             b.max_timestamp, b.log_append_time";

/// The columns of a `logs` row that [`offsets_of`] reads.
const OFFSETS_COLUMNS: &str = "log_start, high_watermark, size_bytes, last_stable";

/// The columns [`OFFSETS_COLUMNS`] of a `logs` row.
fn offsets_of(r: &tokio_postgres::Row) -> Result<Offsets, DbError> {
    Ok(Offsets {
        log_start: r.try_get(0)?,
        high_watermark: r.try_get(1)?,
        size_bytes: r.try_get(2)?,
        last_stable: r.try_get(3)?,
    })
}

/// A partition's offsets, `None` when it does not exist.
pub async fn offsets(db: &Db, key: PartitionKey) -> Result<Option<Offsets>, DbError> {
    let client = db.client().await?;
    let row = client
        .query_opt(
            &format!("SELECT {OFFSETS_COLUMNS} FROM logs WHERE topic_id = $1 AND partition = $2"),
            &[&key.topic_id, &key.partition],
        )
        .await?;
    row.as_ref().map(offsets_of).transpose()
}

/// The batches from the one holding `offset` on, in offset order, up to `max_bytes` (the first
/// one whole even if larger) and at most `max_batches`; with the partition's offsets, read in
/// the same snapshot. `None` when the partition does not exist.
pub async fn find_batches(
    db: &Db,
    key: PartitionKey,
    offset: i64,
    max_bytes: u64,
    max_batches: i64,
) -> Result<Option<(Offsets, Vec<FoundBatch>)>, DbError> {
    let mut client = db.client().await?;
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let Some(r) = tx
        .query_opt(
            &format!("SELECT {OFFSETS_COLUMNS} FROM logs WHERE topic_id = $1 AND partition = $2"),
            &[&key.topic_id, &key.partition],
        )
        .await?
    else {
        return Ok(None);
    };
    let offsets = offsets_of(&r)?;
    if offset >= offsets.high_watermark {
        return Ok(Some((offsets, Vec::new())));
    }
    // Batches do not overlap: the one holding `offset` is the last starting at or below it.
    let rows = tx
        .query(
            &format!(
                "SELECT {FOUND_COLUMNS} FROM batches b JOIN objects o USING (object_id)
                 WHERE b.topic_id = $1 AND b.partition = $2 AND b.base_offset >= COALESCE(
                    (SELECT MAX(base_offset) FROM batches
                     WHERE topic_id = $1 AND partition = $2 AND base_offset <= $3), 0)
                 ORDER BY b.base_offset LIMIT $4"
            ),
            &[&key.topic_id, &key.partition, &offset, &max_batches.max(1)],
        )
        .await?;
    tx.commit().await?;
    let mut out = Vec::new();
    let mut bytes = 0u64;
    for r in &rows {
        let b = found(r)?;
        if b.last_offset < offset {
            continue;
        }
        if !out.is_empty() && bytes + u64::from(b.byte_size) > max_bytes {
            break;
        }
        bytes += u64::from(b.byte_size);
        out.push(b);
    }
    Ok(Some((offsets, out)))
}

/// The first batch at or after the log start whose largest timestamp is at or after
/// `timestamp` (ListOffsets by time: the exact record is inside it).
pub async fn batch_at_time(
    db: &Db,
    key: PartitionKey,
    timestamp: i64,
) -> Result<Option<FoundBatch>, DbError> {
    let client = db.client().await?;
    let row = client
        .query_opt(
            &format!(
                "SELECT {FOUND_COLUMNS} FROM batches b JOIN objects o USING (object_id)
                 JOIN logs l ON l.topic_id = b.topic_id AND l.partition = b.partition
                 WHERE b.topic_id = $1 AND b.partition = $2 AND b.last_offset >= l.log_start
                    AND GREATEST(b.max_timestamp, b.log_append_time) >= $3
                 ORDER BY b.base_offset LIMIT 1"
            ),
            &[&key.topic_id, &key.partition, &timestamp],
        )
        .await?;
    row.as_ref().map(found).transpose()
}

/// The batch holding the largest timestamp at or after the log start (ListOffsets
/// MAX_TIMESTAMP): the earliest such batch when several share it.
pub async fn batch_with_max_time(
    db: &Db,
    key: PartitionKey,
) -> Result<Option<FoundBatch>, DbError> {
    let client = db.client().await?;
    let row = client
        .query_opt(
            &format!(
                "SELECT {FOUND_COLUMNS} FROM batches b JOIN objects o USING (object_id)
                 JOIN logs l ON l.topic_id = b.topic_id AND l.partition = b.partition
                 WHERE b.topic_id = $1 AND b.partition = $2 AND b.last_offset >= l.log_start
                 ORDER BY GREATEST(b.max_timestamp, b.log_append_time) DESC, b.base_offset LIMIT 1"
            ),
            &[&key.topic_id, &key.partition],
        )
        .await?;
    row.as_ref().map(found).transpose()
}

/// Inside a writing transaction: checks the registration and locks the partition's log row
/// for the rest of it; `None` when the partition does not exist.
async fn lock_log(
    tx: &tokio_postgres::Transaction<'_>,
    reg: Registration,
    key: PartitionKey,
) -> Result<Option<Offsets>, DbError> {
    membership::check_current(tx, reg).await?;
    let row = tx
        .query_opt(
            &format!(
                "SELECT {OFFSETS_COLUMNS} FROM logs
                 WHERE topic_id = $1 AND partition = $2 FOR UPDATE"
            ),
            &[&key.topic_id, &key.partition],
        )
        .await?;
    row.as_ref().map(offsets_of).transpose()
}

/// Moves a partition's log start up to `offset` (never down, never past the high watermark)
/// and drops the batches wholly below it, releasing their bytes in their objects. Returns the
/// new log start, `None` when the partition does not exist.
pub async fn delete_before(
    db: &Db,
    reg: Registration,
    key: PartitionKey,
    offset: i64,
) -> Result<Option<i64>, DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    let Some(Offsets {
        log_start: start,
        high_watermark: hw,
        ..
    }) = lock_log(&tx, reg, key).await?
    else {
        return Ok(None);
    };
    let new_start = offset.clamp(start, hw);
    if new_start > start {
        release_below(&tx, key, new_start).await?;
    }
    tx.commit().await?;
    Ok(Some(new_start))
}

/// Inside a transaction holding the log's row: sets the log start (the last stable offset
/// moving up with it when below), drops the batches below it and the aborted transactions
/// that ended below it, and announces the change.
async fn release_below(
    tx: &tokio_postgres::Transaction<'_>,
    key: PartitionKey,
    new_start: i64,
) -> Result<(), DbError> {
    tx.execute(
        "WITH gone AS (
            DELETE FROM batches WHERE topic_id = $1 AND partition = $2 AND last_offset < $3
            RETURNING object_id, byte_size
         ), freed AS (
            SELECT object_id, SUM(byte_size)::bigint AS bytes FROM gone GROUP BY object_id
         ), objs AS (
            UPDATE objects o SET used_bytes = o.used_bytes - f.bytes,
                unused_since = CASE WHEN o.used_bytes - f.bytes = 0 THEN now() ELSE o.unused_since END
            FROM freed f WHERE o.object_id = f.object_id
            RETURNING f.bytes
         )
         UPDATE logs SET log_start = $3, last_stable = GREATEST(last_stable, $3),
            size_bytes = GREATEST(0, size_bytes - COALESCE((SELECT SUM(bytes) FROM objs), 0))
         WHERE topic_id = $1 AND partition = $2",
        &[&key.topic_id, &key.partition, &new_start],
    )
    .await?;
    tx.execute(
        "DELETE FROM aborted_transactions
         WHERE topic_id = $1 AND partition = $2 AND last_offset < $3",
        &[&key.topic_id, &key.partition, &new_start],
    )
    .await?;
    let r = tx
        .query_one(
            "SELECT high_watermark, last_stable FROM logs WHERE topic_id = $1 AND partition = $2",
            &[&key.topic_id, &key.partition],
        )
        .await?;
    announce(
        tx,
        &[LogChange {
            key,
            log_start: new_start,
            high_watermark: r.try_get(0)?,
            last_stable: r.try_get(1)?,
        }],
    )
    .await
}

/// Applies time and size retention to a partition: the log start moves past the oldest batches
/// whose largest timestamp is older than `retention_ms` (when set), then past the oldest
/// batches while the log is larger than `retention_bytes` (when set). Returns the new log start.
pub async fn apply_retention(
    db: &Db,
    reg: Registration,
    key: PartitionKey,
    now_ms: i64,
    retention_ms: Option<i64>,
    retention_bytes: Option<i64>,
) -> Result<Option<i64>, DbError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    let Some(Offsets {
        log_start: start,
        high_watermark: hw,
        size_bytes: size,
        ..
    }) = lock_log(&tx, reg, key).await?
    else {
        return Ok(None);
    };
    let mut new_start = start;
    if let Some(ms) = retention_ms.filter(|ms| *ms >= 0) {
        // The first batch young enough to keep; everything before it goes.
        let keep: Option<i64> = tx
            .query_one(
                "SELECT MIN(base_offset) FROM batches WHERE topic_id = $1 AND partition = $2
                    AND last_offset >= $3 AND GREATEST(max_timestamp, log_append_time) >= $4",
                &[&key.topic_id, &key.partition, &start, &(now_ms - ms)],
            )
            .await?
            .try_get(0)?;
        let end = keep.unwrap_or(hw);
        new_start = new_start.max(end);
    }
    if let Some(limit) = retention_bytes.filter(|b| *b >= 0)
        && size > limit
    {
        // Oldest first: drop batches until what is left fits.
        let cut: Option<i64> = tx
            .query_one(
                "SELECT MIN(next) FROM (
                        SELECT last_offset + 1 AS next,
                            SUM(byte_size) OVER (ORDER BY base_offset) AS dropped
                        FROM batches WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3
                     ) s WHERE $4 - dropped <= $5",
                &[&key.topic_id, &key.partition, &start, &size, &limit],
            )
            .await?
            .try_get(0)?;
        if let Some(cut) = cut {
            new_start = new_start.max(cut);
        }
    }
    if new_start > start {
        release_below(&tx, key, new_start).await?;
    }
    tx.commit().await?;
    Ok(Some(new_start))
}

/// Objects no batch has referred to for at least `grace_ms`: to delete from the object store,
/// then [`forget_objects`].
pub async fn unused_objects(
    db: &Db,
    grace_ms: i64,
    limit: i64,
) -> Result<Vec<(i64, String)>, DbError> {
    let client = db.client().await?;
    let rows = client
        .query(
            "SELECT object_id, key FROM objects
             WHERE unused_since IS NOT NULL AND used_bytes = 0
                AND unused_since < now() - $1 * interval '1 millisecond'
             ORDER BY object_id LIMIT $2",
            &[&(grace_ms as f64), &limit],
        )
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// Drops the rows of objects deleted from the store (only those still unused).
pub async fn forget_objects(db: &Db, ids: &[i64]) -> Result<u64, DbError> {
    let client = db.client().await?;
    Ok(client
        .execute(
            "DELETE FROM objects o WHERE o.object_id = ANY($1) AND o.used_bytes = 0
                AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.object_id = o.object_id)",
            &[&ids],
        )
        .await?)
}

/// Whether the object store key belongs to a committed object (the sweep of objects uploaded
/// but never committed asks this).
pub async fn known_objects(db: &Db, keys: &[String]) -> Result<BTreeSet<String>, DbError> {
    let client = db.client().await?;
    let rows = client
        .query("SELECT key FROM objects WHERE key = ANY($1)", &[&keys])
        .await?;
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}

/// The aborted transactions of a partition that overlap `[from_offset, upto_offset)` (the
/// range a fetch returns), as `(producer_id, first_offset)`, by first offset: what a consumer
/// reading committed needs to skip their batches.
pub async fn aborted_transactions(
    db: &Db,
    key: PartitionKey,
    from_offset: i64,
    upto_offset: i64,
) -> Result<Vec<(i64, i64)>, DbError> {
    let client = db.client().await?;
    let rows = client
        .query(
            "SELECT producer_id, first_offset FROM aborted_transactions
             WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3 AND first_offset < $4
             ORDER BY first_offset, producer_id",
            &[&key.topic_id, &key.partition, &from_offset, &upto_offset],
        )
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// Transactions opened before `opened_before_ms` and still open, oldest first, at most
/// `limit`: `(partition, producer_id, producer_epoch, first_offset)` (the sweep of hanging
/// transactions).
pub async fn open_transactions_before(
    db: &Db,
    opened_before_ms: i64,
    limit: i64,
) -> Result<Vec<OpenRow>, DbError> {
    let client = db.client().await?;
    let rows = client
        .query(
            "SELECT topic_id, partition, producer_id, producer_epoch, first_offset, opened_ms
             FROM open_transactions WHERE opened_ms < $1
             ORDER BY opened_ms, topic_id, partition, producer_id LIMIT $2",
            &[&opened_before_ms, &limit.max(0)],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(OpenRow {
                key: PartitionKey {
                    topic_id: r.try_get(0)?,
                    partition: r.try_get(1)?,
                },
                producer_id: r.try_get(2)?,
                producer_epoch: r.try_get(3)?,
                first_offset: r.try_get(4)?,
                opened_ms: r.try_get(5)?,
            })
        })
        .collect()
}

/// A transaction open on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenRow {
    pub key: PartitionKey,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub first_offset: i64,
    pub opened_ms: i64,
}
