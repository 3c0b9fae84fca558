//! How a run behaves.

use std::time::Duration;

pub use orca_core::Backoff;
use orca_core::{Budget, ContextLimits, Holder};

/// What happens when a step finally fails and no human is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Ask the human (Retry / Replan / Stop). With no human available the decision stays
    /// pending and the run returns [`RunOutcome::AwaitingDecision`].
    #[default]
    Ask,
    /// End the execution as failed (running tasks finish first).
    Stop,
    /// Skip the failed step's dependents, finish the independent branches, end failed.
    Skip,
}

/// How a run behaves.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Tasks in flight at once.
    pub concurrency: usize,
    /// Attempts per step unless the step says otherwise.
    pub max_attempts: u32,
    /// Delay between automatic retries ([`Backoff::delay`], retry 0 after the first attempt).
    pub backoff: Backoff,
    /// Wall-clock limit per attempt unless the step says otherwise.
    pub task_timeout: Option<Duration>,
    /// What happens after a step's last attempt.
    pub on_failure: FailurePolicy,
    /// Limits per task.
    pub task_budget: Budget,
    /// Limits for the whole execution (tokens, cost, turns summed; wall time since start).
    pub execution_budget: Budget,
    /// Bounds on each task's context.
    pub context_limits: ContextLimits,
    /// Who the decisions are recorded as made by.
    pub actor: String,
    /// How often to look for a stop or decision made by another process while tasks run.
    pub watch_interval: Duration,
    /// Who holds the execution (this process).
    pub holder: Holder,
    /// How long a driver's lease counts as live without a renewal (readers on other hosts
    /// use it; on the lease's own host a dead holder is seen at once). Renewed every third.
    pub lease_timeout: Duration,
    /// The isolation of writing steps when neither they nor their plan name one (ADR 0017).
    pub isolation: Option<orca_core::Isolation>,
}

impl RunConfig {
    /// Defaults for this process as the holder: its pid, this host's name and a new token.
    #[must_use]
    pub fn for_this_process() -> Self {
        Self::new(this_process())
    }

    /// Defaults for a holder.
    #[must_use]
    pub fn new(holder: Holder) -> Self {
        Self {
            concurrency: 4,
            max_attempts: 2,
            backoff: Backoff::default(),
            task_timeout: None,
            on_failure: FailurePolicy::Ask,
            task_budget: Budget::UNLIMITED,
            execution_budget: Budget::UNLIMITED,
            context_limits: ContextLimits::default(),
            actor: "user".to_owned(),
            watch_interval: Duration::from_millis(200),
            holder,
            lease_timeout: Duration::from_secs(30),
            isolation: None,
        }
    }
}

/// This process as the holder of leases and running tasks: its pid, this host's name and a
/// new random token (so a restarted process with a reused pid is not taken for this one).
#[must_use]
pub fn this_process() -> Holder {
    Holder {
        pid: std::process::id(),
        host: own_host(),
        token: orca_core::ExecutionId::new().uuid().simple().to_string(),
    }
}

/// This host's name (as recorded in leases and running tasks).
#[must_use]
pub fn own_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}
