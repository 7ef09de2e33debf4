//! The rates quotas are measured with, and throttle times.
//!
//! [`SampledRate`] is Kafka's `Rate` over a `SampledStat`: values are added to the current
//! sample, a sample is complete once its window (`quota.window.size.seconds`, from its first
//! value) has passed, `quota.window.num` samples are kept, samples older than all of them are
//! dropped, and the rate is their total over the time they cover, never counted as less than
//! all but one full window (so a first burst is not measured over a sliver of time).
//! [`throttle_ms`] is `QuotaUtils.throttleTime`: how long the rate must pause to come back to the
//! quota, at most the whole sampled span. [`TokenBucket`] is KIP-599's controller mutation
//! quota: a burst of `quota * window.num * window.size` mutations, refilled at the quota.

/// Kafka's defaults: `quota.window.num` and `quota.window.size.seconds`.
pub const DEFAULT_SAMPLES: usize = 11;
pub const DEFAULT_WINDOW_MS: i64 = 1_000;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    start_ms: i64,
    value: f64,
}

/// A rate per second over sampled windows.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledRate {
    samples: Vec<Sample>,
    current: usize,
    max_samples: usize,
    window_ms: i64,
}

impl SampledRate {
    /// A rate over `samples` windows of `window_ms` (at least 2 and 1).
    pub fn new(samples: usize, window_ms: i64) -> SampledRate {
        SampledRate {
            samples: Vec::new(),
            current: 0,
            max_samples: samples.max(2),
            window_ms: window_ms.max(1),
        }
    }

    /// Adds `value` at `now_ms`.
    pub fn record(&mut self, value: f64, now_ms: i64) {
        let complete = self
            .samples
            .get(self.current)
            .is_none_or(|s| now_ms - s.start_ms >= self.window_ms);
        if complete {
            let fresh = Sample {
                start_ms: now_ms,
                value: 0.0,
            };
            if self.samples.is_empty() {
                self.samples.push(fresh);
                self.current = 0;
            } else {
                self.current = (self.current + 1) % self.max_samples;
                match self.samples.get_mut(self.current) {
                    Some(slot) => *slot = fresh,
                    None => {
                        self.samples.push(fresh);
                        self.current = self.samples.len() - 1;
                    }
                }
            }
        }
        if let Some(s) = self.samples.get_mut(self.current) {
            s.value += value;
        }
    }

    /// Drops the samples that ended before every kept window could (Kafka's
    /// `purgeObsoleteSamples`: reset to empty at `now`).
    fn purge(&mut self, now_ms: i64) {
        let span = self.window_ms.saturating_mul(self.max_samples as i64);
        for s in &mut self.samples {
            if now_ms - s.start_ms >= span {
                *s = Sample {
                    start_ms: now_ms,
                    value: 0.0,
                };
            }
        }
    }

    /// The time the rate is measured over at `now_ms` (Kafka's `Rate.windowSize`).
    pub fn window_size_ms(&mut self, now_ms: i64) -> i64 {
        self.purge(now_ms);
        let oldest = self
            .samples
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms);
        let mut elapsed = now_ms - oldest;
        let full = elapsed / self.window_ms;
        let min_full = self.max_samples as i64 - 1;
        if full < min_full {
            elapsed += (min_full - full) * self.window_ms;
        }
        elapsed.max(1)
    }

    /// The rate per second at `now_ms`.
    pub fn rate(&mut self, now_ms: i64) -> f64 {
        let window = self.window_size_ms(now_ms);
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        total / (window as f64 / 1000.0)
    }

    /// How long the rate must pause to be back at `quota` (0 when it is not above it).
    pub fn throttle_ms(&mut self, quota: f64, now_ms: i64) -> i64 {
        let rate = self.rate(now_ms);
        let window = self.window_size_ms(now_ms);
        throttle_ms(
            rate,
            quota,
            window,
            self.window_ms * self.max_samples as i64,
        )
    }
}

/// Kafka's `QuotaUtils.throttleTime`: `(rate - quota) / quota * window`, 0 at or under the quota,
/// at most `max_ms`.
pub fn throttle_ms(rate: f64, quota: f64, window_ms: i64, max_ms: i64) -> i64 {
    if quota.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || rate <= quota {
        return 0;
    }
    let ms = (rate - quota) / quota * window_ms as f64;
    if ms.is_finite() {
        (ms.round() as i64).clamp(0, max_ms)
    } else {
        max_ms
    }
}

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
    use proptest::prelude::*;

    #[test]
    fn a_steady_rate_is_measured_as_itself() {
        let mut r = SampledRate::new(DEFAULT_SAMPLES, DEFAULT_WINDOW_MS);
        // 1,000 bytes every 100 ms for 30 s: 10,000 bytes a second.
        let mut now = 0;
        while now < 30_000 {
            r.record(1_000.0, now);
            now += 100;
        }
        let rate = r.rate(now);
        assert!((9_000.0..=11_000.0).contains(&rate), "{rate}");
        assert_eq!(r.throttle_ms(20_000.0, now), 0);
        // At a quota of 5,000 a second the rate is twice the quota: pause a whole window's
        // worth (about 10-11 s).
        let t = r.throttle_ms(5_000.0, now);
        assert!((9_000..=11_000).contains(&t), "{t}");
    }

    #[test]
    fn a_first_burst_is_measured_over_all_but_one_window() {
        let mut r = SampledRate::new(11, 1_000);
        r.record(10_000.0, 0);
        // Not 10,000 bytes over 1 ms: over (11 - 1) windows.
        assert_eq!(r.rate(1), 10_000.0 / 10.001);
        assert_eq!(r.window_size_ms(1), 10_001);
    }

    #[test]
    fn old_samples_are_forgotten() {
        let mut r = SampledRate::new(3, 1_000);
        r.record(3_000.0, 0);
        assert!(r.rate(500) > 0.0);
        // Three windows later nothing of it is left.
        assert_eq!(r.rate(3_000), 0.0);
        assert_eq!(r.throttle_ms(1.0, 3_000), 0);
    }

    #[test]
    fn throttle_times_are_kafkas() {
        assert_eq!(throttle_ms(100.0, 100.0, 10_000, 11_000), 0);
        assert_eq!(throttle_ms(150.0, 100.0, 10_000, 11_000), 5_000);
        assert_eq!(throttle_ms(1e12, 1.0, 10_000, 11_000), 11_000);
        assert_eq!(throttle_ms(5.0, 0.0, 10_000, 11_000), 0);
    }

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

    proptest! {
        /// Whatever is recorded, the rate is never negative, the throttle time is within the
        /// sampled span, and there is one exactly when the rate is above the quota.
        #[test]
        fn throttle_times_follow_the_rate(
            values in proptest::collection::vec((0.0f64..100_000.0, 0i64..400), 1..200),
            quota in 1.0f64..50_000.0,
        ) {
            let mut r = SampledRate::new(DEFAULT_SAMPLES, DEFAULT_WINDOW_MS);
            let mut now = 0i64;
            for (v, step) in values {
                now += step;
                r.record(v, now);
            }
            let rate = r.rate(now);
            prop_assert!(rate >= 0.0);
            let t = r.throttle_ms(quota, now);
            prop_assert!((0..=DEFAULT_WINDOW_MS * DEFAULT_SAMPLES as i64).contains(&t));
            // Half a millisecond of rounding either way.
            if rate > quota * 1.001 {
                prop_assert!(t > 0, "rate {} over quota {} unthrottled", rate, quota);
            }
            if rate <= quota {
                prop_assert_eq!(t, 0);
            }
        }
    }
}
