//! Small helpers: poison-tolerant locks, response accessors, jittered backoff.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use skiff_protocol::Response;

/// Locks a mutex, recovering the data if a holder panicked (the state stays usable).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The throttle time a response asks for (KIP-219: the client waits this long before sending
/// more to that broker).
pub(crate) fn throttle_time_ms(response: &Response) -> i32 {
    match response {
        Response::Produce(r) => r.throttle_time_ms,
        Response::Fetch(r) => r.throttle_time_ms,
        Response::ListOffsets(r) => r.throttle_time_ms,
        Response::Metadata(r) => r.throttle_time_ms,
        Response::OffsetCommit(r) => r.throttle_time_ms,
        Response::OffsetFetch(r) => r.throttle_time_ms,
        Response::FindCoordinator(r) => r.throttle_time_ms,
        Response::ListGroups(r) => r.throttle_time_ms,
        Response::DescribeGroups(r) => r.throttle_time_ms,
        Response::DeleteGroups(r) => r.throttle_time_ms,
        Response::CreateTopics(r) => r.throttle_time_ms,
        Response::DeleteTopics(r) => r.throttle_time_ms,
        Response::InitProducerId(r) => r.throttle_time_ms,
        Response::ConsumerGroupHeartbeat(r) => r.throttle_time_ms,
        Response::ConsumerGroupDescribe(r) => r.throttle_time_ms,
        Response::ShareGroupHeartbeat(r) => r.throttle_time_ms,
        Response::ShareGroupDescribe(r) => r.throttle_time_ms,
        Response::ShareFetch(r) => r.throttle_time_ms,
        Response::ShareAcknowledge(r) => r.throttle_time_ms,
        _ => 0,
    }
    .clamp(0, 60_000)
}

/// The first error message a response carries, for the APIs that have one.
pub(crate) fn first_error_message(response: &Response) -> Option<String> {
    let s = match response {
        Response::ConsumerGroupHeartbeat(r) => r.error_message.clone(),
        Response::ShareGroupHeartbeat(r) => r.error_message.clone(),
        Response::ShareGroupDescribe(r) => r.groups.iter().find_map(|g| g.error_message.clone()),
        Response::ShareFetch(r) => r.error_message.clone().or_else(|| {
            r.responses
                .iter()
                .flat_map(|t| t.partitions.iter())
                .find_map(|p| p.error_message.clone())
        }),
        Response::ShareAcknowledge(r) => r.error_message.clone().or_else(|| {
            r.responses
                .iter()
                .flat_map(|t| t.partitions.iter())
                .find_map(|p| p.error_message.clone())
        }),
        Response::FindCoordinator(r) => r
            .error_message
            .clone()
            .or_else(|| r.coordinators.iter().find_map(|c| c.error_message.clone())),
        Response::CreateTopics(r) => r.topics.iter().find_map(|t| t.error_message.clone()),
        Response::DeleteTopics(r) => r.responses.iter().find_map(|t| t.error_message.clone()),
        Response::Produce(r) => r
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter())
            .find_map(|p| p.error_message.clone()),
        Response::ConsumerGroupDescribe(r) => r.groups.iter().find_map(|g| g.error_message.clone()),
        Response::DescribeGroups(r) => r.groups.iter().find_map(|g| g.error_message.clone()),
        _ => None,
    };
    s.map(|s| s.to_string())
}

static RNG: AtomicU64 = AtomicU64::new(0);

/// A cheap pseudo-random number (splitmix64), seeded from the OS once; for jitter only.
pub(crate) fn random_u64() -> u64 {
    let mut state = RNG.load(Ordering::Relaxed);
    if state == 0 {
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        state = u64::from_le_bytes(seed) | 1;
    }
    let next = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    RNG.store(next, Ordering::Relaxed);
    let mut z = next;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Jittered exponential backoff: `base * 2^attempt` capped at `max`, then scaled by a random
/// factor in [0.8, 1.2] (Kafka's `reconnect.backoff` jitter).
pub(crate) fn backoff(base: Duration, max: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.min(16));
    let capped = exp.min(max);
    let jitter = 0.8 + (random_u64() % 4001) as f64 / 10_000.0;
    capped.mul_f64(jitter)
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
