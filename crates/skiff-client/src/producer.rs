//! The producer: per-partition batching (linger, batch size), Kafka's murmur2 partitioner for
//! keyed records and a sticky partitioner for unkeyed ones, acks 0/1/all, idempotence, retries,
//! and delivery futures.
//!
//! Ordering: at most **one** Produce request is in flight per partition. A batch that fails with
//! a retriable error goes back to the head of its partition's queue with the same producer
//! sequence, so retries can neither reorder nor (with idempotence) duplicate records. Requests to
//! different partitions (and brokers) are pipelined.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use skiff_protocol::generated::produce_request::{PartitionProduceData, TopicProduceData};
use skiff_protocol::generated::{InitProducerIdRequest, ProduceRequest};
use skiff_protocol::{ApiKey, error_codes};
use skiff_records::{Compression, RecordBatchBuilder};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result, is_retriable_code};
use crate::util::{backoff, lock, now_ms, random_u64};

/// How many acknowledgements a produce request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// Fire and forget: no response; delivery reports offset -1.
    None,
    /// The leader appended the batch.
    Leader,
    /// All in-sync replicas (and, on Skiff, the fsync policy) have it.
    All,
}

impl Acks {
    fn code(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    pub acks: Acks,
    /// How long a non-full batch waits for more records (`linger.ms`).
    pub linger: Duration,
    /// A batch is sent once its encoded size reaches this (`batch.size`).
    pub batch_size: usize,
    /// Idempotent producer (InitProducerId + sequences); requires `acks = All`.
    pub idempotent: bool,
    /// A record not acknowledged within this time fails (`delivery.timeout.ms`).
    pub delivery_timeout: Duration,
    /// Buffered bytes beyond which `send` waits (`buffer.memory`).
    pub buffer_memory: usize,
    /// Codec for the records of each batch (`compression.type`): none, gzip, snappy (xerial
    /// framing, as the Java client writes it), lz4 (frame format) or zstd. `batch_size` counts
    /// uncompressed bytes.
    pub compression: Compression,
    /// Makes the producer transactional (`transactional.id`): records are sent only inside
    /// `begin_transaction` … `commit_transaction`/`abort_transaction`, and a newer producer with
    /// the same ID fences this one. Needs `idempotent` and `acks = All`.
    pub transactional_id: Option<String>,
    /// How long the coordinator lets a transaction stay open before aborting it
    /// (`transaction.timeout.ms`).
    pub transaction_timeout: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            acks: Acks::All,
            linger: Duration::from_millis(5),
            batch_size: 16 * 1024,
            idempotent: true,
            delivery_timeout: Duration::from_secs(120),
            buffer_memory: 32 * 1024 * 1024,
            compression: Compression::None,
            transactional_id: None,
            transaction_timeout: Duration::from_secs(60),
        }
    }
}

/// A record to send.
#[derive(Debug, Clone, Default)]
pub struct ProducerRecord {
    pub topic: String,
    /// `None`: chosen by the partitioner.
    pub partition: Option<i32>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Create time in ms since the epoch; `None`: now.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    pub fn new(topic: impl Into<String>, value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: topic.into(),
            value: Some(value.into()),
            ..Default::default()
        }
    }

    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    pub fn header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push((key.into(), Some(value.into())));
        self
    }
}

/// Where a record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    pub topic: String,
    pub partition: i32,
    /// -1 with acks=0 (or for a batch the broker reported as a duplicate).
    pub offset: i64,
    pub timestamp: i64,
}

/// Resolves when the record is acknowledged (or fails).
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Closed("producer"))))
    }
}

/// Kafka's murmur2 hash (`org.apache.kafka.common.utils.Utils.murmur2`).
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len() as u32;
    let mut h: u32 = SEED ^ length;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's default partition for a keyed record: `toPositive(murmur2(key)) % partitions`.
pub fn partition_for_key(key: &[u8], partitions: usize) -> i32 {
    let positive = murmur2(key) & 0x7fff_ffff;
    (positive as usize % partitions.max(1)) as i32
}

type Waiter = oneshot::Sender<Result<RecordMetadata>>;

struct OpenBatch {
    builder: RecordBatchBuilder,
    created: Instant,
    waiters: Vec<(Waiter, i64, i64)>,
    bytes: usize,
}

struct SealedBatch {
    topic: String,
    partition: i32,
    records: Bytes,
    base_sequence: i32,
    waiters: Vec<(Waiter, i64, i64)>,
    bytes: usize,
    first_attempt: Instant,
    attempts: u32,
    not_before: Option<Instant>,
}

#[derive(Default)]
struct PartitionQueue {
    retry: Option<SealedBatch>,
    ready: VecDeque<OpenBatch>,
    open: Option<OpenBatch>,
    in_flight: bool,
}

impl PartitionQueue {
    fn is_empty(&self) -> bool {
        self.retry.is_none() && self.ready.is_empty() && self.open.is_none() && !self.in_flight
    }
}

#[derive(Default)]
struct State {
    /// Partitions with records queued or in flight (removed when drained).
    queues: BTreeMap<(String, i32), PartitionQueue>,
    /// The idempotent producer's next sequence per partition. Kept apart from `queues`, which
    /// forget a partition when it drains: restarting at 0 would make the broker take the next
    /// batch for a retry of the first one and drop it.
    next_sequence: HashMap<(String, i32), i32>,
    sticky: HashMap<String, i32>,
    buffered: usize,
    outstanding: usize,
}

struct Inner {
    client: Client,
    config: ProducerConfig,
    producer_id: i64,
    producer_epoch: i16,
    /// Present for a transactional producer.
    txn: Option<crate::transaction::Transactional>,
    state: Mutex<State>,
    wake: Arc<Notify>,
    space: Notify,
    idle: Notify,
    flushing: AtomicUsize,
    closed: AtomicBool,
}

/// An async producer. Cheap to clone; `close` (or dropping every clone) stops its sender task.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

impl Producer {
    /// Creates a producer (an idempotent one first obtains a producer ID).
    pub async fn new(client: Client, config: ProducerConfig) -> Result<Producer> {
        if config.idempotent && config.acks != Acks::All {
            return Err(Error::Config(
                "an idempotent producer needs acks=all (set idempotent = false for acks 0/1)"
                    .into(),
            ));
        }
        if config.batch_size == 0 {
            return Err(Error::Config("batch_size must be positive".into()));
        }
        let txn = match &config.transactional_id {
            Some(_) if !config.idempotent => {
                return Err(Error::Config(
                    "a transactional producer must be idempotent".into(),
                ));
            }
            Some(id) if id.is_empty() => {
                return Err(Error::Config("the transactional ID is empty".into()));
            }
            Some(id) => Some(crate::transaction::Transactional::new(
                id.clone(),
                config.transaction_timeout,
            )),
            None => None,
        };
        let (producer_id, producer_epoch) = match &txn {
            Some(txn) => txn.init(&client).await?,
            None if config.idempotent => init_producer_id(&client).await?,
            None => (-1, -1),
        };
        let inner = Arc::new(Inner {
            client,
            config,
            producer_id,
            producer_epoch,
            txn,
            state: Mutex::new(State::default()),
            wake: Arc::new(Notify::new()),
            space: Notify::new(),
            idle: Notify::new(),
            flushing: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        });
        tokio::spawn(sender_loop(Arc::downgrade(&inner), Arc::clone(&inner.wake)));
        Ok(Producer { inner })
    }

    /// The idempotent producer ID (-1 when not idempotent).
    pub fn producer_id(&self) -> i64 {
        self.inner.producer_id
    }

    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Queues a record; the returned future resolves with its partition and offset.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("producer"));
        }
        if let Some(txn) = &self.inner.txn {
            txn.check_alive()?;
            if !lock(&txn.state).open {
                return Err(Error::Transaction(
                    "send outside a transaction: call begin_transaction first".into(),
                ));
            }
        }
        let topic = self.inner.client.topic(&record.topic).await?;
        let count = topic.partitions.len();
        let size = record.key.as_ref().map_or(0, |k| k.len())
            + record.value.as_ref().map_or(0, |v| v.len())
            + record
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()))
                .sum::<usize>()
            + 24;
        // Back-pressure: wait while the buffer is full.
        loop {
            let space = self.inner.space.notified();
            if lock(&self.inner.state).buffered + size <= self.inner.config.buffer_memory
                || self.inner.closed.load(Ordering::Acquire)
            {
                break;
            }
            space.await;
        }
        let (tx, rx) = oneshot::channel();
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        let mut state = lock(&self.inner.state);
        let partition = match (record.partition, &record.key) {
            (Some(p), _) => {
                if topic.partition(p).is_none() {
                    return Err(Error::UnknownPartition {
                        topic: record.topic,
                        partition: p,
                    });
                }
                p
            }
            (None, Some(key)) => partition_for_key(key, count),
            (None, None) => *state
                .sticky
                .entry(record.topic.clone())
                .or_insert_with(|| (random_u64() % count.max(1) as u64) as i32),
        };
        let headers: Vec<(&[u8], Option<&[u8]>)> = record
            .headers
            .iter()
            .map(|(k, v)| (k.as_bytes(), v.as_deref()))
            .collect();
        let batch_size = self.inner.config.batch_size;
        let compression = self.inner.config.compression;
        let queue = state
            .queues
            .entry((record.topic.clone(), partition))
            .or_default();
        // Kafka's rule: a record goes into the open batch only if it still fits; otherwise that
        // batch is sealed and the record starts a new one (a lone record may exceed the size).
        let mut sealed = false;
        if queue
            .open
            .as_ref()
            .is_some_and(|o| !o.builder.is_empty() && o.builder.size_in_bytes() + size > batch_size)
            && let Some(batch) = queue.open.take()
        {
            queue.ready.push_back(batch);
            sealed = true;
        }
        let open = queue.open.get_or_insert_with(|| OpenBatch {
            builder: RecordBatchBuilder::new().compression(compression),
            created: Instant::now(),
            waiters: Vec::new(),
            bytes: 0,
        });
        let index = open.builder.len() as i64;
        open.builder
            .append(
                timestamp,
                record.key.as_deref(),
                record.value.as_deref(),
                &headers,
            )
            .map_err(|e| Error::Records(e.to_string()))?;
        open.waiters.push((tx, index, timestamp));
        open.bytes += size;
        let first = index == 0;
        let full = open.builder.size_in_bytes() >= batch_size;
        if full && let Some(batch) = queue.open.take() {
            queue.ready.push_back(batch);
        }
        state.buffered += size;
        state.outstanding += 1;
        if full && record.partition.is_none() && record.key.is_none() && count > 1 {
            // Sticky partitioner: move on once a batch is full.
            let next = (partition + 1) % count as i32;
            state.sticky.insert(record.topic.clone(), next);
        }
        drop(state);
        if first || full || sealed {
            self.inner.wake.notify_one();
        }
        Ok(DeliveryFuture { rx })
    }

    /// Sends everything queued now and waits until every record is acknowledged or failed.
    pub async fn flush(&self) -> Result<()> {
        self.inner.flushing.fetch_add(1, Ordering::AcqRel);
        self.inner.wake.notify_one();
        loop {
            let idle = self.inner.idle.notified();
            if lock(&self.inner.state).outstanding == 0 {
                break;
            }
            idle.await;
        }
        self.inner.flushing.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    }

    fn transactional(&self) -> Result<&crate::transaction::Transactional> {
        self.inner.txn.as_ref().ok_or_else(|| {
            Error::Config("not a transactional producer (set transactional_id)".into())
        })
    }

    /// Starts a transaction (transactional producers only).
    pub fn begin_transaction(&self) -> Result<()> {
        let txn = self.transactional()?;
        txn.check_alive()?;
        let mut state = lock(&txn.state);
        if state.open {
            return Err(Error::Transaction("a transaction is already open".into()));
        }
        state.reset(true);
        Ok(())
    }

    /// Commits the consumer's `offsets` (the next offsets to read) for its group as part of
    /// the transaction: they count only if it commits (consume-transform-produce).
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &[(crate::TopicPartition, i64)],
        group: &crate::consumer::GroupMetadata,
    ) -> Result<()> {
        let txn = self.transactional()?;
        txn.check_alive()?;
        if !lock(&txn.state).open {
            return Err(Error::Transaction("no transaction is open".into()));
        }
        let ids = (self.inner.producer_id, self.inner.producer_epoch);
        let sent = txn
            .send_offsets(&self.inner.client, ids, offsets, group)
            .await;
        if let Err(e) = &sent {
            txn.fail(e);
        }
        sent
    }

    /// Sends every record of the transaction, then commits it. If any of them failed, nothing
    /// is committed: the error says why, and the transaction must be aborted.
    pub async fn commit_transaction(&self) -> Result<()> {
        self.end_transaction(true).await
    }

    /// Aborts the transaction: its records and offsets are never seen by read_committed
    /// consumers.
    pub async fn abort_transaction(&self) -> Result<()> {
        self.end_transaction(false).await
    }

    async fn end_transaction(&self, commit: bool) -> Result<()> {
        let txn = self.transactional()?;
        txn.check_alive()?;
        if !lock(&txn.state).open {
            return Err(Error::Transaction("no transaction is open".into()));
        }
        self.flush().await?;
        txn.check_alive()?;
        let (started, failed) = {
            let state = lock(&txn.state);
            (state.started, state.failed.clone())
        };
        if commit && let Some(e) = failed {
            return Err(Error::Transaction(format!(
                "cannot commit, a part of the transaction failed (abort it): {e}"
            )));
        }
        if started {
            let ids = (self.inner.producer_id, self.inner.producer_epoch);
            txn.end(&self.inner.client, ids, commit).await?;
        }
        let mut state = lock(&txn.state);
        state.reset(false);
        Ok(())
    }

    /// Flushes, then stops the producer. Later `send`s fail with [`Error::Closed`].
    pub async fn close(&self) -> Result<()> {
        let result = self.flush().await;
        self.inner.closed.store(true, Ordering::Release);
        self.inner.wake.notify_one();
        self.inner.space.notify_waiters();
        result
    }
}

async fn init_producer_id(client: &Client) -> Result<(i64, i16)> {
    let mut attempt = 0;
    loop {
        let response = client
            .request_any(|_| InitProducerIdRequest {
                transactional_id: None,
                transaction_timeout_ms: 60_000,
                producer_id: -1,
                producer_epoch: -1,
                ..Default::default()
            })
            .await;
        let err = match response {
            Ok(r) if r.error_code == error_codes::NONE => {
                return Ok((r.producer_id, r.producer_epoch));
            }
            Ok(r) => Error::broker("InitProducerId", r.error_code, None),
            Err(e) => e,
        };
        if !err.is_retriable() || attempt >= 10 {
            return Err(err);
        }
        tokio::time::sleep(backoff(
            client.config().retry_backoff,
            Duration::from_secs(1),
            attempt,
        ))
        .await;
        attempt += 1;
    }
}

/// Picks the batches to send now and the time the next one becomes due.
fn drain(inner: &Inner, now: Instant) -> (Vec<SealedBatch>, Option<Instant>) {
    let flushing =
        inner.flushing.load(Ordering::Acquire) > 0 || inner.closed.load(Ordering::Acquire);
    let linger = inner.config.linger;
    let mut out = Vec::new();
    let mut next: Option<Instant> = None;
    let mut soonest = |at: Instant| {
        next = Some(next.map_or(at, |n: Instant| n.min(at)));
    };
    let mut failed = Vec::new();
    let mut state = lock(&inner.state);
    let state = &mut *state;
    let sequences = &mut state.next_sequence;
    for ((topic, partition), queue) in state.queues.iter_mut() {
        if queue.in_flight {
            continue;
        }
        if let Some(retry) = &queue.retry {
            match retry.not_before {
                Some(at) if at > now => soonest(at),
                _ => {
                    if let Some(mut batch) = queue.retry.take() {
                        batch.not_before = None;
                        queue.in_flight = true;
                        out.push(batch);
                    }
                }
            }
            continue;
        }
        let batch = if let Some(b) = queue.ready.pop_front() {
            Some(b)
        } else {
            match &queue.open {
                Some(open) if flushing || open.created + linger <= now => queue.open.take(),
                Some(open) => {
                    soonest(open.created + linger);
                    None
                }
                None => None,
            }
        };
        let Some(batch) = batch else { continue };
        let record_count = batch.builder.len() as i32;
        let base_sequence = if inner.producer_id >= 0 {
            let next = sequences.entry((topic.clone(), *partition)).or_insert(0);
            let s = *next;
            *next = s
                .checked_add(record_count)
                .unwrap_or(record_count - (i32::MAX - s) - 1);
            s
        } else {
            -1
        };
        let built = batch
            .builder
            .producer(inner.producer_id, inner.producer_epoch, base_sequence)
            .transactional(inner.txn.is_some())
            .build();
        match built {
            Ok(b) => {
                queue.in_flight = true;
                out.push(SealedBatch {
                    topic: topic.clone(),
                    partition: *partition,
                    records: b.into_bytes(),
                    base_sequence,
                    waiters: batch.waiters,
                    bytes: batch.bytes,
                    first_attempt: now,
                    attempts: 0,
                    not_before: None,
                });
            }
            Err(e) => failed.push((batch.waiters, batch.bytes, e.to_string())),
        }
    }
    for (waiters, bytes, reason) in failed {
        state.buffered = state.buffered.saturating_sub(bytes);
        state.outstanding = state.outstanding.saturating_sub(waiters.len());
        for (w, _, _) in waiters {
            let _ = w.send(Err(Error::Records(reason.clone())));
        }
    }
    (out, next)
}

async fn sender_loop(weak: std::sync::Weak<Inner>, wake_handle: Arc<Notify>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let (batches, next) = drain(&inner, Instant::now());
        if !batches.is_empty() {
            dispatch(&inner, batches).await;
        }
        if inner.closed.load(Ordering::Acquire) && lock(&inner.state).outstanding == 0 {
            return;
        }
        let wake = wake_handle.notified();
        let sleep = next.map(tokio::time::sleep_until);
        drop(inner);
        match sleep {
            Some(sleep) => {
                tokio::select! {
                    _ = wake => {}
                    _ = sleep => {}
                }
            }
            None => {
                // Re-check now and then so a dropped producer's task ends.
                tokio::select! {
                    _ = wake => {}
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}

/// Groups batches by leader and sends one Produce request per broker, each in its own task. A
/// transactional producer first adds the batches' new partitions to its transaction; if that
/// fails, the batches fail with it.
async fn dispatch(inner: &Arc<Inner>, batches: Vec<SealedBatch>) {
    if let Some(txn) = &inner.txn {
        let partitions: Vec<(String, i32)> = batches
            .iter()
            .map(|b| (b.topic.clone(), b.partition))
            .collect();
        let ids = (inner.producer_id, inner.producer_epoch);
        if let Err(e) = txn.add_partitions(&inner.client, ids, &partitions).await {
            txn.fail(&e);
            for batch in batches {
                finish(inner, batch, Err(Error::Transaction(e.to_string())));
            }
            return;
        }
    }
    let mut by_node: BTreeMap<i32, Vec<SealedBatch>> = BTreeMap::new();
    for batch in batches {
        match inner.client.topic(&batch.topic).await {
            Ok(t) => match t.partition(batch.partition) {
                Some(p) if p.leader >= 0 => by_node.entry(p.leader).or_default().push(batch),
                _ => {
                    let generation = inner.client.cached_metadata().generation;
                    inner.client.invalidate_metadata(generation);
                    finish(
                        inner,
                        batch,
                        Err(Error::broker_for(
                            "Produce",
                            error_codes::LEADER_NOT_AVAILABLE,
                            "partition without leader",
                            None,
                        )),
                    );
                }
            },
            Err(e) => finish(inner, batch, Err(e)),
        }
    }
    for (node, batches) in by_node {
        let inner = Arc::clone(inner);
        tokio::spawn(async move {
            send_to_node(&inner, node, batches).await;
        });
    }
}

async fn send_to_node(inner: &Arc<Inner>, node: i32, batches: Vec<SealedBatch>) {
    let mut topics: BTreeMap<&str, Vec<PartitionProduceData>> = BTreeMap::new();
    for b in &batches {
        topics
            .entry(&b.topic)
            .or_default()
            .push(PartitionProduceData {
                index: b.partition,
                records: Some(b.records.clone()),
                ..Default::default()
            });
    }
    let timeout_ms = inner
        .client
        .config()
        .request_timeout
        .as_millis()
        .min(i32::MAX as u128) as i32;
    let request = ProduceRequest {
        transactional_id: inner
            .txn
            .as_ref()
            .map(|t| t.transactional_id.as_str().into()),
        acks: inner.config.acks.code(),
        timeout_ms,
        topic_data: topics
            .into_iter()
            .map(|(name, partition_data)| TopicProduceData {
                name: name.into(),
                partition_data,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let result = async {
        let conn = inner.client.connection(node).await?;
        let version = conn.version(ApiKey::Produce)?;
        if inner.config.acks == Acks::None {
            conn.send_only(request.into(), version).await?;
            return Ok(None);
        }
        conn.request(request, version, inner.client.config().request_timeout)
            .await
            .map(Some)
    }
    .await;
    match result {
        Ok(None) => {
            for b in batches {
                finish(inner, b, Ok(-1));
            }
        }
        Ok(Some(response)) => {
            for b in batches {
                let part = response
                    .responses
                    .iter()
                    .filter(|t| t.name.as_ref() as &str == b.topic.as_str())
                    .flat_map(|t| t.partition_responses.iter())
                    .find(|p| p.index == b.partition);
                let outcome = match part {
                    None => Err(Error::protocol(
                        "Produce",
                        format!("no result for {}-{}", b.topic, b.partition),
                    )),
                    Some(p) if p.error_code == error_codes::NONE => Ok(p.base_offset),
                    Some(p) if p.error_code == error_codes::DUPLICATE_SEQUENCE_NUMBER => Ok(-1),
                    Some(p) => Err(Error::broker_for(
                        "Produce",
                        p.error_code,
                        format!("{}-{}", b.topic, b.partition),
                        p.error_message.as_ref().map(|m| m.to_string()),
                    )),
                };
                finish(inner, b, outcome);
            }
        }
        Err(e) => {
            for b in batches {
                finish(inner, b, Err(e.clone()));
            }
        }
    }
    inner.wake.notify_one();
}

/// Completes a batch (offset of its first record) or schedules its retry.
fn finish(inner: &Inner, mut batch: SealedBatch, outcome: Result<i64>) {
    let mut state = lock(&inner.state);
    let key = (batch.topic.clone(), batch.partition);
    match outcome {
        Err(e)
            if e.is_retriable()
                && batch.first_attempt.elapsed() < inner.config.delivery_timeout
                && !inner.closed.load(Ordering::Acquire) =>
        {
            if matches!(e.code(), Some(c) if is_retriable_code(c)) || e.code().is_none() {
                let generation = inner.client.cached_metadata().generation;
                inner.client.invalidate_metadata(generation);
            }
            tracing::debug!(topic = %batch.topic, partition = batch.partition, error = %e, "retrying produce");
            let delay = backoff(
                inner.client.config().retry_backoff,
                Duration::from_secs(1),
                batch.attempts,
            );
            batch.attempts += 1;
            batch.not_before = Some(Instant::now() + delay);
            if let Some(queue) = state.queues.get_mut(&key) {
                queue.in_flight = false;
                queue.retry = Some(batch);
            }
            drop(state);
            inner.wake.notify_one();
        }
        outcome => {
            if let (Err(e), Some(txn)) = (&outcome, &inner.txn) {
                txn.fail(e);
            }
            let done = batch.waiters.len();
            state.buffered = state.buffered.saturating_sub(batch.bytes);
            state.outstanding = state.outstanding.saturating_sub(done);
            if outcome.is_err() && inner.producer_id >= 0 && batch.base_sequence >= 0 {
                // The broker did not take the batch: reuse its sequence for the next one.
                state.next_sequence.insert(key.clone(), batch.base_sequence);
            }
            if let Some(queue) = state.queues.get_mut(&key) {
                queue.in_flight = false;
                if queue.is_empty() {
                    state.queues.remove(&key);
                }
            }
            let idle = state.outstanding == 0;
            drop(state);
            let metrics = &inner.client.telemetry().metrics;
            let counter = if outcome.is_ok() {
                &metrics.records_sent
            } else {
                &metrics.record_errors
            };
            crate::telemetry::ClientMetrics::add(counter, done as u64);
            for (waiter, index, timestamp) in batch.waiters {
                let result = match &outcome {
                    Ok(base) => Ok(RecordMetadata {
                        topic: batch.topic.clone(),
                        partition: batch.partition,
                        offset: if *base >= 0 { base + index } else { -1 },
                        timestamp,
                    }),
                    Err(e) => Err(e.clone()),
                };
                let _ = waiter.send(result);
            }
            inner.space.notify_waiters();
            if idle {
                inner.idle.notify_waiters();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafka_utils_test_vectors() {
        // org.apache.kafka.common.utils.UtilsTest#testMurmur2
        let cases: &[(&[u8], i32)] = &[
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (input, expected) in cases {
            assert_eq!(
                murmur2(input),
                *expected,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
        assert!((0..1000).all(|i| {
            let p = partition_for_key(format!("k{i}").as_bytes(), 7);
            (0..7).contains(&p)
        }));
    }

    #[test]
    fn backoff_is_jittered_and_capped() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(1);
        for attempt in 0..20 {
            let d = backoff(base, max, attempt);
            assert!(
                d <= max.mul_f64(1.2) && d >= Duration::from_millis(80),
                "{d:?}"
            );
        }
        let samples: std::collections::BTreeSet<u128> =
            (0..50).map(|_| backoff(base, max, 3).as_micros()).collect();
        assert!(samples.len() > 10, "jitter varies the delay");
    }
}
