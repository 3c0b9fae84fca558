//! Retry timing, defined once: exponential backoff with jitter. The runner waits this long
//! between a step's automatic attempts; the agent loop (orca-agents) uses the same growth for
//! retries of transient model-backend errors. Pure: the caller supplies the random sample.

use std::time::Duration;

/// Exponential backoff with jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first delay.
    pub base: Duration,
    /// The longest delay.
    pub max: Duration,
    /// Random spread, as a fraction of the delay (0.0–1.0).
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(500),
            max: Duration::from_secs(30),
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// The delay before retry number `retry` (0-based) without jitter: `base · 2^retry`, at
    /// most `max`.
    #[must_use]
    pub fn ceiling(&self, retry: u32) -> Duration {
        self.base
            .saturating_mul(1u32 << retry.min(20))
            .min(self.max)
    }

    /// The delay before retry number `retry` (0-based), spread by `jitter` around the ceiling
    /// using `unit` (a random sample in `[0, 1)`), at most `max`.
    #[must_use]
    pub fn delay(&self, retry: u32, unit: f64) -> Duration {
        let spread = self.jitter.clamp(0.0, 1.0);
        let factor = 1.0 + spread * (unit.clamp(0.0, 1.0) * 2.0 - 1.0);
        self.ceiling(retry).mul_f64(factor.max(0.0)).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_within_the_jitter_and_the_cap() {
        let b = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
            jitter: 0.2,
        };
        assert_eq!(b.ceiling(0), Duration::from_millis(100));
        assert_eq!(b.ceiling(2), Duration::from_millis(400));
        assert_eq!(b.ceiling(40), Duration::from_secs(1));
        assert_eq!(b.delay(1, 0.0), Duration::from_millis(160));
        assert_eq!(b.delay(1, 1.0), Duration::from_millis(240));
        assert_eq!(b.delay(9, 1.0), Duration::from_secs(1));
    }
}
