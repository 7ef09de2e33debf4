//! The broker's wall clock: milliseconds since the Unix epoch, the clock Kafka timestamps,
//! session deadlines and transaction timeouts use. The state machines below the broker take
//! the time as an argument; this is where the broker reads it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the system clock is before it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
