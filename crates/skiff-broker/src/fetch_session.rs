//! KIP-227 incremental fetch sessions: plain data and pure functions (the clock is a parameter),
//! used by the Fetch handler.
//!
//! A full fetch with epoch 0 opens a session holding the requested partitions and answers with
//! its ID; later fetches name the session and the next epoch, list only the partitions whose
//! fetch position changed (plus `forgotten_topics_data` to drop some), and get back only the
//! partitions with something new: records, an error, or a moved high watermark or log start.
//! Partitions are read in session order, and one that returned records moves to the end, so a
//! fetch capped by `max_bytes` does not always serve the same partitions first.
//! Epoch -1 closes a session (and is a plain full fetch). Unknown session: FETCH_SESSION_ID_NOT_FOUND;
//! wrong epoch: INVALID_FETCH_SESSION_EPOCH; switching between topic names and topic IDs (Fetch
//! v13) inside a session: FETCH_SESSION_TOPIC_ID_ERROR. The client reacts to each by starting over
//! with a full fetch.
//!
//! The cache holds at most [`MAX_SESSIONS`] sessions of at most [`MAX_SESSION_PARTITIONS`]
//! partitions, [`MAX_TOTAL_PARTITIONS`] in all. When full, the least recently used session is
//! evicted if it has been idle for [`EVICTION_IDLE_MS`]; otherwise the new fetch is served
//! without a session (ID 0), which every client accepts. Session IDs are random, so a client from before a restart cannot land in a
//! new client's session.

use std::collections::HashMap;

use indexmap::IndexMap;

use skiff_protocol::generated::FetchRequest;
use skiff_protocol::generated::fetch_response::FetchResponse;
use skiff_protocol::{ByteString, ErrorCode, Uuid, error_codes};

/// A session epoch that closes the session (and asks for a sessionless full fetch).
pub const FINAL_EPOCH: i32 = -1;
/// The epoch of a full fetch that opens a session.
pub const INITIAL_EPOCH: i32 = 0;
/// Sessions the broker keeps (Kafka's `max.incremental.fetch.session.cache.slots` default).
pub const MAX_SESSIONS: usize = 1000;
/// A fetch with more partitions than this is served without a session.
pub const MAX_SESSION_PARTITIONS: usize = 10_000;
/// Partitions held by all sessions together, so that a client opening many large sessions
/// cannot make the cache grow without bound (under 100 MB at this size, with topic names of at
/// most 249 bytes).
pub const MAX_TOTAL_PARTITIONS: usize = 200_000;
/// A session unused for this long may be evicted to make room for a new one.
pub const EVICTION_IDLE_MS: i64 = 120_000;

pub const FETCH_SESSION_ID_NOT_FOUND: ErrorCode = ErrorCode::FETCH_SESSION_ID_NOT_FOUND;
pub const FETCH_SESSION_TOPIC_ID_ERROR: ErrorCode = ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR;
pub const INVALID_FETCH_SESSION_EPOCH: ErrorCode = ErrorCode::INVALID_FETCH_SESSION_EPOCH;

/// How a session names topics: by name (Fetch v7-12) or by ID (v13+).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TopicKey {
    Name(ByteString),
    Id(Uuid),
}

/// One partition of a session.
pub type PartitionKey = (TopicKey, i32);

/// What the client last asked of a partition, and what it was last told about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPartition {
    pub topic: ByteString,
    pub topic_id: Uuid,
    pub fetch_offset: i64,
    pub max_bytes: i32,
    pub leader_epoch: i32,
    /// `None` until a response carried this partition.
    sent: Option<Sent>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sent {
    high_watermark: i64,
    /// A commit or abort moves it without moving the high watermark much; read_committed
    /// consumers compute their lag from it.
    last_stable_offset: i64,
    log_start_offset: i64,
}

#[derive(Debug, Clone)]
struct Session {
    /// The epoch the next fetch in this session must carry.
    next_epoch: i32,
    by_id: bool,
    /// In the order they are read; a partition that returned records moves to the end, so
    /// that under `max_bytes` every partition gets its turn (Kafka does the same).
    partitions: IndexMap<PartitionKey, SessionPartition>,
    last_used_ms: i64,
}

/// How one Fetch request is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchContext {
    /// The requested partitions, all of them in the response; `session_id` is the session just
    /// opened, or 0 for none.
    Full { session_id: i32 },
    /// The session's partitions (after this request's changes), only changed ones answered.
    Incremental {
        session_id: i32,
        partitions: Vec<(PartitionKey, SessionPartition)>,
    },
}

/// All fetch sessions of the broker.
#[derive(Debug, Default)]
pub struct FetchSessions {
    sessions: HashMap<i32, Session>,
}

/// A fetch that neither uses nor opens nor closes a session (before v7, or session 0 with the
/// final epoch: librdkafka's kind). The handler serves it without touching the shared cache.
pub fn is_sessionless(request: &FetchRequest, version: i16) -> bool {
    version < 7 || (request.session_id == 0 && request.session_epoch == FINAL_EPOCH)
}

fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX { 1 } else { epoch + 1 }
}

/// Topic key of a request or response topic, by the session's naming.
pub fn topic_key(by_id: bool, name: &ByteString, id: Uuid) -> TopicKey {
    if by_id {
        TopicKey::Id(id)
    } else {
        TopicKey::Name(name.clone())
    }
}

/// The partitions a request lists, ready to keep in a session; `None` when a topic name is
/// longer than any topic's can be (such a fetch is served without a session). Names are copied
/// out of the request: a slice would keep the whole request frame alive as long as the session.
fn requested(request: &FetchRequest, by_id: bool) -> Option<Vec<(PartitionKey, SessionPartition)>> {
    let mut out = Vec::new();
    for topic in &request.topics {
        if topic.topic.len() > skiff_meta::MAX_TOPIC_NAME_LEN {
            return None;
        }
        let name = ByteString::from(&*topic.topic);
        for p in &topic.partitions {
            out.push((
                (topic_key(by_id, &name, topic.topic_id), p.partition),
                SessionPartition {
                    topic: name.clone(),
                    topic_id: topic.topic_id,
                    fetch_offset: p.fetch_offset,
                    max_bytes: p.partition_max_bytes,
                    leader_epoch: p.current_leader_epoch,
                    sent: None,
                },
            ));
        }
    }
    Some(out)
}

impl FetchSessions {
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Decides how `request` (of `version`) is served and updates the sessions. `new_id` proposes
    /// random non-zero session IDs. The error is a Kafka error code for the whole response.
    pub fn begin(
        &mut self,
        request: &FetchRequest,
        version: i16,
        now_ms: i64,
        mut new_id: impl FnMut() -> i32,
    ) -> Result<FetchContext, ErrorCode> {
        let by_id = version >= 13;
        let (id, epoch) = (request.session_id, request.session_epoch);
        if is_sessionless(request, version) {
            return Ok(FetchContext::Full { session_id: 0 });
        }
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            if id != 0 {
                self.sessions.remove(&id);
            }
            if epoch == FINAL_EPOCH {
                return Ok(FetchContext::Full { session_id: 0 });
            }
            let Some(partitions) = requested(request, by_id) else {
                return Ok(FetchContext::Full { session_id: 0 });
            };
            if partitions.len() > MAX_SESSION_PARTITIONS
                || !self.make_room(now_ms, partitions.len())
            {
                return Ok(FetchContext::Full { session_id: 0 });
            }
            let Some(session_id) = (0..64)
                .map(|_| new_id())
                .find(|candidate| *candidate > 0 && !self.sessions.contains_key(candidate))
            else {
                return Ok(FetchContext::Full { session_id: 0 });
            };
            self.sessions.insert(
                session_id,
                Session {
                    next_epoch: 1,
                    by_id,
                    partitions: partitions.into_iter().collect(),
                    last_used_ms: now_ms,
                },
            );
            return Ok(FetchContext::Full { session_id });
        }
        if id == 0 {
            // An epoch beyond the first with no session: nothing to continue.
            return Err(FETCH_SESSION_ID_NOT_FOUND);
        }
        let Some(session) = self.sessions.get_mut(&id) else {
            return Err(FETCH_SESSION_ID_NOT_FOUND);
        };
        if session.next_epoch != epoch {
            return Err(INVALID_FETCH_SESSION_EPOCH);
        }
        if session.by_id != by_id {
            return Err(FETCH_SESSION_TOPIC_ID_ERROR);
        }
        let size_before = session.partitions.len();
        let Some(listed) = requested(request, by_id) else {
            self.sessions.remove(&id);
            return Err(FETCH_SESSION_ID_NOT_FOUND);
        };
        for (key, mut asked) in listed {
            match session.partitions.get_mut(&key) {
                Some(existing) => {
                    asked.sent = existing.sent;
                    *existing = asked;
                }
                None => {
                    session.partitions.insert(key, asked);
                }
            }
        }
        for forgotten in &request.forgotten_topics_data {
            let topic = topic_key(by_id, &forgotten.topic, forgotten.topic_id);
            for partition in &forgotten.partitions {
                session
                    .partitions
                    .shift_remove(&(topic.clone(), *partition));
            }
        }
        session.next_epoch = next_epoch(session.next_epoch);
        session.last_used_ms = now_ms;
        let partitions: Vec<_> = session
            .partitions
            .iter()
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        // The total is only summed when this session grew (it costs a pass over the sessions).
        if partitions.len() > MAX_SESSION_PARTITIONS
            || (partitions.len() > size_before && self.total_partitions() > MAX_TOTAL_PARTITIONS)
        {
            // Grown past a limit: the session ends, and the client starts over with a full
            // fetch (served without a session if it is still too large).
            self.sessions.remove(&id);
            return Err(FETCH_SESSION_ID_NOT_FOUND);
        }
        Ok(FetchContext::Incremental {
            session_id: id,
            partitions,
        })
    }

    /// Partitions held by all sessions together.
    pub fn total_partitions(&self) -> usize {
        self.sessions.values().map(|s| s.partitions.len()).sum()
    }

    /// Makes room for a session of `partitions` partitions: evicts least recently used sessions
    /// that have been idle long enough until a slot and the partitions fit. Returns whether
    /// they do.
    fn make_room(&mut self, now_ms: i64, partitions: usize) -> bool {
        let mut total = self.total_partitions();
        while self.sessions.len() >= MAX_SESSIONS || total + partitions > MAX_TOTAL_PARTITIONS {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.last_used_ms)
                .map(|(id, s)| (*id, s.last_used_ms));
            match oldest {
                Some((id, last_used)) if now_ms.saturating_sub(last_used) >= EVICTION_IDLE_MS => {
                    if let Some(evicted) = self.sessions.remove(&id) {
                        total = total.saturating_sub(evicted.partitions.len());
                    }
                }
                _ => return false,
            }
        }
        true
    }

    /// Completes the response of a fetch served by `context`: sets its session ID and, for an
    /// incremental fetch, drops the partitions with nothing new (and topics left empty). The
    /// session remembers what this response told the client.
    pub fn finish(&mut self, context: &FetchContext, response: &mut FetchResponse) {
        let (session_id, incremental) = match context {
            FetchContext::Full { session_id } => (*session_id, false),
            FetchContext::Incremental { session_id, .. } => (*session_id, true),
        };
        response.session_id = session_id;
        let Some(session) = self.sessions.get_mut(&session_id) else {
            return;
        };
        let mut with_records = Vec::new();
        for topic in &mut response.responses {
            let key = topic_key(session.by_id, &topic.topic, topic.topic_id);
            topic.partitions.retain(|data| {
                let partition = (key.clone(), data.partition_index);
                let Some(cached) = session.partitions.get_mut(&partition) else {
                    return !incremental;
                };
                let now = Sent {
                    high_watermark: data.high_watermark,
                    last_stable_offset: data.last_stable_offset,
                    log_start_offset: data.log_start_offset,
                };
                let has_records = data.records.as_ref().is_some_and(|r| !r.is_empty());
                let changed =
                    cached.sent != Some(now) || has_records || data.error_code != error_codes::NONE;
                cached.sent = Some(now);
                if has_records {
                    with_records.push(partition);
                }
                changed || !incremental
            });
        }
        if incremental {
            response.responses.retain(|t| !t.partitions.is_empty());
            for partition in with_records {
                if let Some(cached) = session.partitions.shift_remove(&partition) {
                    session.partitions.insert(partition, cached);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use skiff_protocol::generated::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
    use skiff_protocol::generated::fetch_response::{FetchableTopicResponse, PartitionData};

    use super::*;

    fn request(id: i32, epoch: i32, parts: &[(&str, i32, i64)]) -> FetchRequest {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for (name, partition, offset) in parts {
            let p = FetchPartition {
                partition: *partition,
                fetch_offset: *offset,
                partition_max_bytes: 1 << 20,
                current_leader_epoch: -1,
                ..Default::default()
            };
            match topics.iter_mut().find(|t| &*t.topic == *name) {
                Some(t) => t.partitions.push(p),
                None => topics.push(FetchTopic {
                    topic: (*name).into(),
                    topic_id: id_of(name),
                    partitions: vec![p],
                    ..Default::default()
                }),
            }
        }
        FetchRequest {
            session_id: id,
            session_epoch: epoch,
            topics,
            ..Default::default()
        }
    }

    fn id_of(name: &str) -> Uuid {
        Uuid::from_u128(name.len() as u128 + 1)
    }

    /// A response for `parts`: (topic, partition, high watermark, records).
    fn response(parts: &[(&str, i32, i64, &[u8])]) -> FetchResponse {
        let mut responses: Vec<FetchableTopicResponse> = Vec::new();
        for (name, partition, hw, records) in parts {
            let data = PartitionData {
                partition_index: *partition,
                high_watermark: *hw,
                log_start_offset: 0,
                records: Some(Bytes::copy_from_slice(records)),
                ..Default::default()
            };
            match responses.iter_mut().find(|t| &*t.topic == *name) {
                Some(t) => t.partitions.push(data),
                None => responses.push(FetchableTopicResponse {
                    topic: (*name).into(),
                    topic_id: id_of(name),
                    partitions: vec![data],
                    ..Default::default()
                }),
            }
        }
        FetchResponse {
            responses,
            ..Default::default()
        }
    }

    fn answered(r: &FetchResponse) -> Vec<(String, i32)> {
        r.responses
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.topic.to_string(), p.partition_index))
            })
            .collect()
    }

    fn ids(first: i32) -> impl FnMut() -> i32 {
        let mut next = first;
        move || {
            next += 1;
            next - 1
        }
    }

    fn open(s: &mut FetchSessions, version: i16) -> i32 {
        let req = request(0, INITIAL_EPOCH, &[("a", 0, 0), ("a", 1, 0), ("bb", 0, 5)]);
        let ctx = s.begin(&req, version, 0, ids(7)).expect("opens");
        let mut r = response(&[("a", 0, 10, b"x"), ("a", 1, 0, b""), ("bb", 0, 5, b"")]);
        s.finish(&ctx, &mut r);
        assert_eq!(r.session_id, 7);
        assert_eq!(
            answered(&r).len(),
            3,
            "a full fetch answers every partition"
        );
        7
    }

    #[test]
    fn sessionless_fetches_touch_no_session() {
        let mut s = FetchSessions::default();
        for (version, id, epoch) in [(6, 0, -1), (12, 0, -1), (13, 0, -1), (6, 0, 0)] {
            let ctx = s
                .begin(&request(id, epoch, &[("a", 0, 0)]), version, 0, ids(1))
                .expect("ok");
            assert_eq!(ctx, FetchContext::Full { session_id: 0 });
        }
        assert!(s.is_empty());
    }

    #[test]
    fn incremental_fetch_answers_only_what_changed() {
        for version in [7, 12, 13, 17] {
            let mut s = FetchSessions::default();
            let id = open(&mut s, version);
            // The client consumed a-0 up to 10 and says so; nothing else changed.
            let ctx = s
                .begin(&request(id, 1, &[("a", 0, 10)]), version, 1, ids(100))
                .expect("continues");
            let FetchContext::Incremental { partitions, .. } = &ctx else {
                panic!("incremental expected, got {ctx:?}");
            };
            assert_eq!(partitions.len(), 3, "the whole session is read");
            let a0_key = (topic_key(version >= 13, &"a".into(), id_of("a")), 0);
            let a0 = partitions
                .iter()
                .find(|(k, _)| *k == a0_key)
                .map(|(_, p)| p.fetch_offset);
            assert_eq!(a0, Some(10), "the new position replaces the old one");
            // bb-0 got a record; a-1's high watermark moved; a-0 is unchanged.
            let mut r = response(&[("a", 0, 10, b""), ("a", 1, 3, b""), ("bb", 0, 6, b"y")]);
            s.finish(&ctx, &mut r);
            assert_eq!(r.session_id, id);
            assert_eq!(
                answered(&r),
                vec![("a".to_string(), 1), ("bb".to_string(), 0)]
            );
            // Nothing new at all: an empty response, topics included.
            let ctx = s
                .begin(&request(id, 2, &[]), version, 2, ids(100))
                .expect("ok");
            let mut r = response(&[("a", 0, 10, b""), ("a", 1, 3, b""), ("bb", 0, 6, b"")]);
            s.finish(&ctx, &mut r);
            assert!(r.responses.is_empty());
            // An error is always answered.
            let ctx = s
                .begin(&request(id, 3, &[]), version, 3, ids(100))
                .expect("ok");
            let mut r = response(&[("a", 0, 10, b""), ("a", 1, 3, b""), ("bb", 0, 6, b"")]);
            r.responses[0].partitions[0].error_code = error_codes::OFFSET_OUT_OF_RANGE;
            s.finish(&ctx, &mut r);
            assert_eq!(answered(&r), vec![("a".to_string(), 0)]);
            // A commit moved only bb-0's last stable offset: read_committed consumers need it.
            let ctx = s
                .begin(&request(id, 4, &[]), version, 4, ids(100))
                .expect("ok");
            let mut r = response(&[("a", 0, 10, b""), ("a", 1, 3, b""), ("bb", 0, 6, b"")]);
            if let Some(bb) = r
                .responses
                .get_mut(1)
                .and_then(|t| t.partitions.first_mut())
            {
                bb.last_stable_offset = 5;
            }
            s.finish(&ctx, &mut r);
            assert_eq!(answered(&r), vec![("bb".to_string(), 0)]);
        }
    }

    #[test]
    fn a_partition_that_returned_records_is_read_last_next_time() {
        let mut s = FetchSessions::default();
        let id = open(&mut s, 12);
        let order = |ctx: &FetchContext| match ctx {
            FetchContext::Incremental { partitions, .. } => partitions
                .iter()
                .map(|(key, p)| (p.topic.to_string(), key.1))
                .collect::<Vec<_>>(),
            FetchContext::Full { .. } => panic!("incremental expected"),
        };
        let ctx = s.begin(&request(id, 1, &[]), 12, 1, ids(100)).expect("ok");
        assert_eq!(
            order(&ctx),
            vec![("a".into(), 0), ("a".into(), 1), ("bb".into(), 0)]
        );
        let mut r = response(&[("a", 0, 10, b"x"), ("a", 1, 0, b""), ("bb", 0, 5, b"")]);
        s.finish(&ctx, &mut r);
        let ctx = s.begin(&request(id, 2, &[]), 12, 2, ids(100)).expect("ok");
        assert_eq!(
            order(&ctx),
            vec![("a".into(), 1), ("bb".into(), 0), ("a".into(), 0)]
        );
    }

    #[test]
    fn partitions_are_added_and_forgotten() {
        let mut s = FetchSessions::default();
        let id = open(&mut s, 12);
        let mut req = request(id, 1, &[("ccc", 2, 0)]);
        req.forgotten_topics_data = vec![ForgottenTopic {
            topic: "a".into(),
            partitions: vec![0, 1, 9],
            ..Default::default()
        }];
        let ctx = s.begin(&req, 12, 1, ids(100)).expect("ok");
        let FetchContext::Incremental { partitions, .. } = &ctx else {
            panic!("incremental expected");
        };
        let keys: Vec<_> = partitions.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(
            keys,
            vec![
                (TopicKey::Name("bb".into()), 0),
                (TopicKey::Name("ccc".into()), 2)
            ]
        );
        // The added partition is answered the first time even with nothing in it.
        let mut r = response(&[("bb", 0, 5, b""), ("ccc", 2, 0, b"")]);
        s.finish(&ctx, &mut r);
        assert_eq!(answered(&r), vec![("ccc".to_string(), 2)]);
    }

    #[test]
    fn wrong_epoch_unknown_session_and_naming_switch_are_refused() {
        let mut s = FetchSessions::default();
        let id = open(&mut s, 12);
        assert_eq!(
            s.begin(&request(id, 2, &[]), 12, 1, ids(1)),
            Err(INVALID_FETCH_SESSION_EPOCH)
        );
        assert_eq!(
            s.begin(&request(id + 1, 1, &[]), 12, 1, ids(1)),
            Err(FETCH_SESSION_ID_NOT_FOUND)
        );
        assert_eq!(
            s.begin(&request(0, 1, &[]), 12, 1, ids(1)),
            Err(FETCH_SESSION_ID_NOT_FOUND)
        );
        assert_eq!(
            s.begin(&request(id, 1, &[]), 13, 1, ids(1)),
            Err(FETCH_SESSION_TOPIC_ID_ERROR)
        );
        // A refused request does not advance the epoch: the right one still works.
        assert!(matches!(
            s.begin(&request(id, 1, &[]), 12, 1, ids(1)),
            Ok(FetchContext::Incremental { .. })
        ));
    }

    /// One step of a client (or a hostile peer): which session it names, with which epoch, at
    /// which version, which partitions it lists and forgets, and what the response then holds.
    type Step = (
        u8,
        i32,
        bool,
        Vec<(u8, i32)>,
        Vec<(u8, i32)>,
        Vec<(u8, i32, bool)>,
    );

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        let partition = (0u8..3, 0i32..4);
        (
            0u8..4,
            -2i32..4,
            any::<bool>(),
            proptest::collection::vec(partition.clone(), 0..6),
            proptest::collection::vec(partition, 0..3),
            proptest::collection::vec((0u8..3, 0i32..4, any::<bool>()), 0..6),
        )
    }

    proptest::proptest! {
        /// Any sequence of fetches keeps the cache consistent: no panic, incremental contexts
        /// list each partition once, responses never grow, sessions stay within bounds.
        #[test]
        fn any_fetch_sequence_keeps_the_cache_consistent(steps in proptest::collection::vec(step(), 1..40)) {
            let names = ["a", "bb", "ccc"];
            let mut s = FetchSessions::default();
            let mut known = vec![0i32];
            let mut next = ids(1);
            for (now, (which, epoch, by_id, listed, forgotten, answered)) in steps.into_iter().enumerate() {
                let session_id = known.get(usize::from(which)).copied().unwrap_or(which.into());
                let parts: Vec<(&str, i32, i64)> = listed
                    .iter()
                    .map(|(t, p)| (names[usize::from(*t)], *p, 0))
                    .collect();
                let mut req = request(session_id, epoch, &parts);
                req.forgotten_topics_data = forgotten
                    .iter()
                    .map(|(t, p)| ForgottenTopic {
                        topic: names[usize::from(*t)].into(),
                        topic_id: id_of(names[usize::from(*t)]),
                        partitions: vec![*p],
                        ..Default::default()
                    })
                    .collect();
                let version = if by_id { 13 } else { 12 };
                let Ok(ctx) = s.begin(&req, version, now as i64, &mut next) else { continue };
                if let FetchContext::Incremental { partitions, .. } = &ctx {
                    let mut keys: Vec<_> = partitions.iter().map(|(k, _)| k.clone()).collect();
                    keys.sort();
                    keys.dedup();
                    proptest::prop_assert_eq!(keys.len(), partitions.len());
                }
                let resp: Vec<(&str, i32, i64, &[u8])> = answered
                    .iter()
                    .map(|(t, p, data)| (names[usize::from(*t)], *p, 1, if *data { &b"x"[..] } else { &b""[..] }))
                    .collect();
                let mut r = response(&resp);
                let before = answered.len();
                s.finish(&ctx, &mut r);
                proptest::prop_assert!(answered_count(&r) <= before);
                if let FetchContext::Full { session_id } = ctx
                    && session_id != 0
                {
                    known.push(session_id);
                }
                proptest::prop_assert!(s.len() <= MAX_SESSIONS);
                proptest::prop_assert!(s.total_partitions() <= MAX_TOTAL_PARTITIONS);
            }
        }
    }

    fn answered_count(r: &FetchResponse) -> usize {
        r.responses.iter().map(|t| t.partitions.len()).sum()
    }

    #[test]
    fn epochs_wrap_past_the_largest() {
        assert_eq!(next_epoch(1), 2);
        assert_eq!(next_epoch(i32::MAX), 1);
    }

    #[test]
    fn final_epoch_closes_and_initial_epoch_replaces() {
        let mut s = FetchSessions::default();
        let id = open(&mut s, 12);
        let ctx = s.begin(&request(id, FINAL_EPOCH, &[("a", 0, 0)]), 12, 1, ids(50));
        assert_eq!(ctx, Ok(FetchContext::Full { session_id: 0 }));
        assert!(s.is_empty());
        let id = open(&mut s, 12);
        let ctx = s.begin(&request(id, INITIAL_EPOCH, &[("a", 0, 0)]), 12, 1, ids(50));
        assert_eq!(ctx, Ok(FetchContext::Full { session_id: 50 }));
        assert_eq!(s.len(), 1, "the old session is gone, the new one is there");
    }

    #[test]
    fn a_full_cache_evicts_only_idle_sessions() {
        let mut s = FetchSessions::default();
        let mut next = ids(1);
        for now in 0..MAX_SESSIONS as i64 {
            let ctx = s.begin(
                &request(0, INITIAL_EPOCH, &[("a", 0, 0)]),
                12,
                now,
                &mut next,
            );
            assert!(matches!(ctx, Ok(FetchContext::Full { session_id }) if session_id > 0));
        }
        // Full, and the oldest was used at 0: not yet idle long enough.
        let ctx = s.begin(
            &request(0, INITIAL_EPOCH, &[("a", 0, 0)]),
            12,
            1_000,
            &mut next,
        );
        assert_eq!(ctx, Ok(FetchContext::Full { session_id: 0 }));
        assert_eq!(s.len(), MAX_SESSIONS);
        // Later the oldest (ID 1) is evicted for the newcomer.
        let ctx = s.begin(
            &request(0, INITIAL_EPOCH, &[("a", 0, 0)]),
            12,
            EVICTION_IDLE_MS,
            &mut next,
        );
        assert!(matches!(ctx, Ok(FetchContext::Full { session_id }) if session_id > 0));
        assert_eq!(s.len(), MAX_SESSIONS);
        assert_eq!(
            s.begin(&request(1, 1, &[]), 12, EVICTION_IDLE_MS, ids(1)),
            Err(FETCH_SESSION_ID_NOT_FOUND)
        );
    }

    #[test]
    fn all_sessions_together_hold_a_bounded_number_of_partitions() {
        let mut s = FetchSessions::default();
        let mut next = ids(1);
        let big: Vec<(&str, i32, i64)> = (0..MAX_SESSION_PARTITIONS as i32)
            .map(|p| ("a", p, 0))
            .collect();
        let fit = MAX_TOTAL_PARTITIONS / MAX_SESSION_PARTITIONS;
        for _ in 0..fit {
            let ctx = s.begin(&request(0, INITIAL_EPOCH, &big), 12, 0, &mut next);
            assert!(matches!(ctx, Ok(FetchContext::Full { session_id }) if session_id > 0));
        }
        let ctx = s.begin(&request(0, INITIAL_EPOCH, &big), 12, 0, &mut next);
        assert_eq!(ctx, Ok(FetchContext::Full { session_id: 0 }), "no room");
        // A session growing past the total through incremental fetches is ended.
        let ctx = s.begin(&request(1, 1, &[("zz", 0, 0)]), 12, 0, &mut next);
        assert_eq!(ctx, Err(FETCH_SESSION_ID_NOT_FOUND));
        assert_eq!(s.len(), fit - 1);
    }

    #[test]
    fn names_longer_than_a_topic_name_get_no_session() {
        let long = "t".repeat(skiff_meta::MAX_TOPIC_NAME_LEN + 1);
        let mut s = FetchSessions::default();
        let ctx = s.begin(&request(0, INITIAL_EPOCH, &[(&long, 0, 0)]), 12, 0, ids(1));
        assert_eq!(ctx, Ok(FetchContext::Full { session_id: 0 }));
        assert!(s.is_empty());
        let id = open(&mut s, 12);
        let ctx = s.begin(&request(id, 1, &[(&long, 0, 0)]), 12, 0, ids(1));
        assert_eq!(ctx, Err(FETCH_SESSION_ID_NOT_FOUND), "the session ends");
        assert!(s.is_empty());
    }

    #[test]
    fn oversized_fetches_get_no_session_and_ids_never_collide() {
        let mut s = FetchSessions::default();
        let many: Vec<(&str, i32, i64)> = (0..=MAX_SESSION_PARTITIONS as i32)
            .map(|p| ("a", p, 0))
            .collect();
        let ctx = s.begin(&request(0, INITIAL_EPOCH, &many), 12, 0, ids(1));
        assert_eq!(ctx, Ok(FetchContext::Full { session_id: 0 }));
        // The generator proposes 0, a negative and a taken ID before a free one.
        let first = open(&mut s, 12);
        let mut proposals = vec![9, first, -4, 0].into_iter();
        let ctx = s.begin(
            &request(0, INITIAL_EPOCH, &[("a", 0, 0)]),
            12,
            0,
            move || proposals.next_back().unwrap_or(0),
        );
        assert_eq!(ctx, Ok(FetchContext::Full { session_id: 9 }));
    }
}
