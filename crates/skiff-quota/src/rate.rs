//! The measure quotas are enforced with: a token bucket (KIP-599's, which Kafka uses for
//! controller mutations). Use runs ahead of the quota by at most the bucket's burst; what goes
//! beyond is owed, and the throttle time is how long paying it back at the quota takes.

/// KIP-599's token bucket: mutations spend tokens, refilled at the quota per second up to the
/// burst.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket {
    tokens: f64,
    last_ms: i64,
    burst_seconds: f64,
}

impl TokenBucket {
    /// A full bucket at `now_ms`: a burst of `samples * window_ms` seconds' worth of the quota.
    pub fn new(quota: f64, samples: usize, window_ms: i64, now_ms: i64) -> TokenBucket {
        let burst_seconds = samples.max(1) as f64 * window_ms.max(1) as f64 / 1000.0;
        TokenBucket {
            tokens: quota.max(0.0) * burst_seconds,
            last_ms: now_ms,
            burst_seconds,
        }
    }

    fn refill(&mut self, quota: f64, now_ms: i64) {
        let elapsed = (now_ms - self.last_ms).max(0) as f64 / 1000.0;
        self.tokens = (self.tokens + quota * elapsed).min(quota * self.burst_seconds);
        self.last_ms = now_ms.max(self.last_ms);
    }

    /// Whether the quota is exceeded now (the bucket is in debt): a request is refused then.
    pub fn exceeded(&mut self, quota: f64, now_ms: i64) -> bool {
        self.refill(quota, now_ms);
        self.tokens < 0.0
    }

    /// Spends `mutations` at `now_ms`.
    pub fn record(&mut self, mutations: f64, quota: f64, now_ms: i64) {
        self.refill(quota, now_ms);
        self.tokens -= mutations;
    }

    /// How long until the bucket is out of debt.
    pub fn throttle_ms(&mut self, quota: f64, now_ms: i64) -> i64 {
        self.refill(quota, now_ms);
        if self.tokens >= 0.0 || quota.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return 0;
        }
        let ms = -self.tokens / quota * 1000.0;
        if ms.is_finite() {
            ms.ceil() as i64
        } else {
            i64::MAX
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_bucket_allows_a_burst_then_throttles() {
        // 2 mutations a second, burst 2 * 11 = 22.
        let mut b = TokenBucket::new(2.0, 11, 1_000, 0);
        assert!(!b.exceeded(2.0, 0));
        b.record(22.0, 2.0, 0);
        assert!(!b.exceeded(2.0, 0), "the whole burst is allowed");
        b.record(4.0, 2.0, 0);
        assert!(b.exceeded(2.0, 0));
        assert_eq!(b.throttle_ms(2.0, 0), 2_000, "4 in debt at 2 a second");
        assert!(!b.exceeded(2.0, 2_000), "paid back");
        // Refills never beyond the burst.
        assert!(!b.exceeded(2.0, 1_000_000));
        b.record(23.0, 2.0, 1_000_000);
        assert!(b.exceeded(2.0, 1_000_000));
    }
}
