//! Backoff with full jitter, and a retry budget that stops retry storms.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::Rng;

/// When a transient failure is retried, and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Deliveries before a message that keeps failing goes to the dead-letter queue.
    pub max_attempts: u32,
    /// The backoff ceiling of the first retry; it doubles per attempt.
    pub base: Duration,
    /// The largest backoff.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
        }
    }
}

impl RetryPolicy {
    /// `max_attempts` deliveries with exponential backoff from `base` up to `cap`.
    pub fn exponential(max_attempts: u32, base: Duration, cap: Duration) -> Self {
        Self {
            max_attempts,
            base,
            cap,
        }
    }

    /// The ceiling before attempt `attempt + 1`: `base · 2^(attempt-1)`, at most `cap`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.base.saturating_mul(1u32 << doublings).min(self.cap)
    }

    /// Full jitter: a uniformly random delay up to the ceiling, so that many
    /// consumers failing together do not come back together.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rand::rng().random_range(0..=millis))
    }
}

/// A token bucket shared by a consumer's workers: each retry spends a token;
/// when the bucket is empty (a dependency is down and everything fails),
/// retries wait the policy's `cap` instead of hammering it.
#[derive(Debug)]
pub struct RetryBudget {
    capacity: f64,
    refill_per_second: f64,
    state: Mutex<(f64, Instant)>,
}

impl RetryBudget {
    /// A bucket of `capacity` retries, refilled at `refill_per_second`.
    pub fn new(capacity: u32, refill_per_second: f64) -> Self {
        Self {
            capacity: f64::from(capacity),
            refill_per_second,
            state: Mutex::new((f64::from(capacity), Instant::now())),
        }
    }

    /// Spends a token; `false` when the budget is exhausted.
    pub fn try_spend(&self) -> bool {
        let mut state = self.state.lock().expect("retry budget lock poisoned");
        let (tokens, last) = &mut *state;
        let now = Instant::now();
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * self.refill_per_second)
            .min(self.capacity);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl Default for RetryBudget {
    /// 100 retries, refilled at 10 per second.
    fn default() -> Self {
        Self::new(100, 10.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_never_exceeds_its_ceiling() {
        let policy =
            RetryPolicy::exponential(10, Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(policy.ceiling(1), Duration::from_millis(100));
        assert_eq!(policy.ceiling(2), Duration::from_millis(200));
        assert_eq!(policy.ceiling(4), Duration::from_millis(800));
        assert_eq!(policy.ceiling(5), Duration::from_secs(1));
        assert_eq!(policy.ceiling(400), Duration::from_secs(1));
        let delays: Vec<Duration> = (0..200).map(|_| policy.backoff(3)).collect();
        assert!(
            delays
                .iter()
                .all(|delay| *delay <= Duration::from_millis(400))
        );
        assert!(
            delays
                .iter()
                .any(|delay| *delay < Duration::from_millis(200)),
            "full jitter spreads over the whole range"
        );
    }

    #[test]
    fn an_empty_budget_refuses_until_it_refills() {
        let budget = RetryBudget::new(2, 0.0);
        assert!(budget.try_spend());
        assert!(budget.try_spend());
        assert!(!budget.try_spend());
    }
}
