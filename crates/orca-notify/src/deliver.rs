//! Delivery: every notification to every target, each in its own task, each attempt bounded
//! by the time limit, retried with exponential backoff up to the configured attempts. Each
//! attempt's outcome goes to the log (`orca_notify` target): `delivered`, `failed … retrying in
//! Ns`, `gave up`, `abandoned` (the server stopped). Nothing here ever blocks the caller.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{MAX_BACKOFF_SECS, NotifyConfig};
use crate::email::{Email, Password};
use crate::error::{ConfigError, Failure};
use crate::webhook::Webhook;

/// A place notifications go.
#[derive(Debug)]
enum Target {
    Webhook(Webhook),
    Email(Box<Email>),
}

impl Target {
    fn name(&self) -> &str {
        match self {
            Self::Webhook(w) => w.name(),
            Self::Email(e) => e.name(),
        }
    }

    async fn send(&self, payload: &Value) -> Result<(), Failure> {
        match self {
            Self::Webhook(w) => w.send(payload).await,
            Self::Email(e) => e.send(payload).await,
        }
    }
}

/// How often and how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts per target and notification (at least 1).
    pub attempts: u32,
    /// The wait before the second attempt; each later one doubles, up to five minutes.
    pub first_backoff: Duration,
    /// The most one attempt may take.
    pub timeout: Duration,
}

impl Retry {
    /// The wait after failed attempt `attempt` (1-based).
    #[must_use]
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        self.first_backoff
            .saturating_mul(factor)
            .min(Duration::from_secs(MAX_BACKOFF_SECS))
    }

    /// The longest one notification can keep a target busy: every attempt timing out, every
    /// wait taken.
    #[must_use]
    pub fn worst_case(&self) -> Duration {
        (1..self.attempts).map(|a| self.backoff(a)).fold(
            self.timeout.saturating_mul(self.attempts),
            Duration::saturating_add,
        )
    }
}

/// The built-in targets of `[notify]` (webhooks, email). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    targets: Vec<Target>,
    retry: Retry,
    closing: CancellationToken,
    running: TaskTracker,
}

impl Notifier {
    /// The targets `config` names (none when it only has a command). `password` is the SMTP
    /// password, resolved by the caller from `password_env` / `password_file`.
    ///
    /// # Errors
    ///
    /// A setting that does not validate ([`NotifyConfig::validate`]), or a target that cannot
    /// be set up (TLS for SMTP).
    pub fn new(config: &NotifyConfig, password: Option<Password>) -> Result<Self, ConfigError> {
        config.validate()?;
        let timeout = Duration::from_secs(config.timeout_secs.max(1));
        let mut targets = Vec::new();
        for (i, hook) in config.webhook.iter().enumerate() {
            targets.push(Target::Webhook(Webhook::new(i, hook, timeout)?));
        }
        if let Some(email) = &config.email {
            targets.push(Target::Email(Box::new(Email::new(
                email, password, timeout,
            )?)));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                targets,
                retry: Retry {
                    attempts: config.attempts.max(1),
                    first_backoff: Duration::from_secs(config.backoff_secs),
                    timeout,
                },
                closing: CancellationToken::new(),
                running: TaskTracker::new(),
            }),
        })
    }

    /// Whether there is nowhere to deliver to.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.inner.targets.is_empty()
    }

    /// The retry policy.
    #[must_use]
    pub fn retry(&self) -> Retry {
        self.inner.retry
    }

    /// The targets, as the log names them.
    #[must_use]
    pub fn target_names(&self) -> Vec<String> {
        self.inner
            .targets
            .iter()
            .map(|t| t.name().to_owned())
            .collect()
    }

    /// Starts delivering `payload` (any notification: its `event` says which) to every target,
    /// each in a task of its own, and returns at once. Must be called within a tokio runtime.
    pub fn deliver(&self, payload: &Value) {
        if self.inner.closing.is_cancelled() {
            return;
        }
        let payload = Arc::new(payload.clone());
        for index in 0..self.inner.targets.len() {
            let inner = self.inner.clone();
            let payload = payload.clone();
            let tracker = self.inner.running.clone();
            tracker.spawn(async move { deliver_one(&inner, index, &payload).await });
        }
    }

    /// Waits for the deliveries under way to end (delivered or given up), at most `limit`,
    /// then stops as [`Self::close`] does: for a one-shot sender such as `orca policy timers`.
    pub async fn finish(&self, limit: Duration) {
        self.inner.running.close();
        let _ = tokio::time::timeout(limit, self.inner.running.wait()).await;
        self.close().await;
    }

    /// Stops: deliveries under way are abandoned (and logged so); returns when they have
    /// ended, or after a second at most.
    pub async fn close(&self) {
        self.inner.closing.cancel();
        self.inner.running.close();
        let _ = tokio::time::timeout(Duration::from_secs(1), self.inner.running.wait()).await;
    }
}

/// What the log says a notification is: its event and the page it links to.
fn describe(payload: &Value) -> String {
    let event = payload
        .get("event")
        .and_then(Value::as_str)
        .unwrap_or("notification");
    match payload.get("url").and_then(Value::as_str) {
        Some(url) => format!("{event} {url}"),
        None => event.to_owned(),
    }
}

async fn deliver_one(inner: &Inner, index: usize, payload: &Value) {
    let Some(target) = inner.targets.get(index) else {
        return;
    };
    let (to, what, retry) = (target.name(), describe(payload), inner.retry);
    let of = retry.attempts;
    for attempt in 1..=of {
        let outcome = tokio::select! {
            () = inner.closing.cancelled() => {
                tracing::warn!(target: "orca_notify", to, attempt, of, outcome = "abandoned", "notify: {to}: {what}: attempt {attempt} of {of} abandoned: the server is stopping");
                return;
            }
            r = tokio::time::timeout(retry.timeout, target.send(payload)) => r,
        };
        let failure = match outcome {
            Ok(Ok(())) => {
                tracing::info!(target: "orca_notify", to, attempt, of, outcome = "delivered", "notify: {to}: {what}: delivered on attempt {attempt} of {of}");
                return;
            }
            Ok(Err(f)) => f,
            Err(_) => Failure::transient(format!("no answer within {}s", retry.timeout.as_secs())),
        };
        if failure.permanent || attempt == of {
            let why = if failure.permanent {
                "a permanent failure"
            } else {
                "the last attempt"
            };
            tracing::error!(target: "orca_notify", to, attempt, of, outcome = "gave_up", "notify: {to}: {what}: attempt {attempt} of {of} failed: {}; gave up ({why})", failure.message);
            return;
        }
        let wait = retry.backoff(attempt);
        tracing::warn!(target: "orca_notify", to, attempt, of, outcome = "retrying", "notify: {to}: {what}: attempt {attempt} of {of} failed: {}; retrying in {}s", failure.message, wait.as_secs_f32());
        tokio::select! {
            () = inner.closing.cancelled() => {
                tracing::warn!(target: "orca_notify", to, attempt, of, outcome = "abandoned", "notify: {to}: {what}: abandoned after attempt {attempt} of {of}: the server is stopping");
                return;
            }
            () = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_bounded() {
        let r = Retry {
            attempts: 4,
            first_backoff: Duration::from_secs(2),
            timeout: Duration::from_secs(10),
        };
        let waits: Vec<u64> = (1..5).map(|a| r.backoff(a).as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16]);
        assert_eq!(r.worst_case(), Duration::from_secs(40 + 2 + 4 + 8));
        let long = Retry {
            attempts: 10,
            first_backoff: Duration::from_secs(300),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(long.backoff(40), Duration::from_secs(MAX_BACKOFF_SECS));
    }
}
