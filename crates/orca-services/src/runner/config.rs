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
}

impl RunConfig {
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
        }
    }
}
