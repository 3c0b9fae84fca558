//! Retries of transient backend errors: the policy (backoff with jitter, or the provider's
//! `retry-after`) and the call that applies it. Used by the agent loop for every model call.

use std::time::Duration;

use crate::backend::{ChatBackend, ChatRequest, ChatResponse};
use crate::error::BackendError;

/// Retries of transient backend errors (429, 529, 5xx, timeouts): exponential backoff with
/// jitter, or the provider's `retry-after` when it sends one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first call.
    pub max_retries: u32,
    /// The first backoff.
    pub base_delay: Duration,
    /// The largest backoff, and the largest `retry-after` honoured.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based) after `error`.
    #[must_use]
    pub fn delay(&self, retry: u32, error: &BackendError) -> Duration {
        if let Some(after) = error.retry_after() {
            return after.min(self.max_delay);
        }
        // The growth is the one retry definition (`orca_core::Backoff`); the jitter differs.
        let exp = orca_core::Backoff {
            base: self.base_delay,
            max: self.max_delay,
            jitter: 0.0,
        }
        .ceiling(retry);
        // Full jitter in [exp/2, exp].
        let half = exp / 2;
        let extra = half.as_nanos().min(u128::from(u64::MAX));
        let jitter = Duration::from_nanos(fastrand::u64(0..=u64::try_from(extra).unwrap_or(0)));
        half + jitter
    }
}

/// Calls the backend, retrying transient errors per `policy`.
///
/// # Errors
///
/// The last error, or the first one that is not retryable (quota, auth, unreachable…).
pub async fn call_with_retry(
    backend: &dyn ChatBackend,
    request: &ChatRequest,
    policy: &RetryPolicy,
) -> Result<ChatResponse, BackendError> {
    let mut retry = 0u32;
    loop {
        match backend.chat(request).await {
            Ok(r) => return Ok(r),
            Err(err) if err.is_retryable() && retry < policy.max_retries => {
                let delay = policy.delay(retry, &err);
                tracing::warn!(%err, retry = retry + 1, delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), "backend call failed; retrying");
                tokio::time::sleep(delay).await;
                retry += 1;
            }
            Err(err) => return Err(err),
        }
    }
}
