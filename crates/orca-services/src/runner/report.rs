//! What a run reports: its outcome, and progress events for a UI.

use std::time::Duration;

use orca_core::{
    DecisionRequest, Execution, ExecutionId, ExecutionStage, PlanId, StepId, TaskFailure, Usage,
};

/// How a run ended (for now).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunOutcome {
    /// Every task completed.
    Completed,
    /// Ended with work not done.
    Failed {
        /// Why.
        reason: String,
    },
    /// Stopped by a person.
    Stopped {
        /// Why, if given.
        reason: Option<String>,
    },
    /// Stopped by Ctrl-C or `exec stop` (the run was cancelled): the attempts in flight were
    /// ended and recorded as interrupted; the execution stays running, and `resume` continues
    /// it without re-running completed steps.
    Interrupted {
        /// The steps whose attempts were interrupted.
        steps: Vec<StepId>,
    },
    /// Waiting for a human decision nobody could make now (answer with `decide`, then resume).
    AwaitingDecision {
        /// What is asked.
        request: DecisionRequest,
    },
    /// The human chose Replan: this execution ended failed; a new plan supersedes its plan.
    Replanned {
        /// The new plan.
        plan_id: PlanId,
        /// The new plan's execution, if it was approved.
        execution_id: Option<ExecutionId>,
    },
}

impl RunOutcome {
    /// The stage the execution is in after this outcome.
    #[must_use]
    pub const fn stage(&self) -> ExecutionStage {
        match self {
            Self::Completed => ExecutionStage::Completed,
            Self::Failed { .. } | Self::Replanned { .. } => ExecutionStage::Failed,
            Self::Stopped { .. } => ExecutionStage::Stopped,
            Self::AwaitingDecision { .. } | Self::Interrupted { .. } => ExecutionStage::Running,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// The execution.
    pub execution_id: ExecutionId,
    /// How it ended.
    pub outcome: RunOutcome,
    /// Agent usage during this run.
    pub usage: Usage,
}

/// Progress, for a UI.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunEvent {
    /// The run took over from a dead process; these attempts were abandoned.
    Recovered {
        /// The steps whose attempts were abandoned.
        steps: Vec<StepId>,
    },
    /// An attempt started.
    TaskStarted {
        /// The step.
        step: StepId,
        /// Its agent.
        agent: String,
        /// The attempt.
        attempt: u32,
    },
    /// A step completed.
    TaskCompleted {
        /// The step.
        step: StepId,
        /// Its summary.
        summary: String,
    },
    /// An attempt failed.
    TaskFailed {
        /// The step.
        step: StepId,
        /// The failure.
        failure: TaskFailure,
        /// When it will be retried automatically, if it will.
        retry_in: Option<Duration>,
    },
    /// A step was skipped.
    TaskSkipped {
        /// The step.
        step: StepId,
    },
    /// A ready step waits for a resource lock (emitted once when the wait begins).
    WaitingForLock {
        /// The waiting step.
        step: StepId,
        /// The lock it waits for.
        resource: String,
        /// The running step holding it, if one is found (in this or another execution).
        holder: Option<crate::locks::LockHolder>,
    },
    /// A human decision is needed.
    DecisionNeeded {
        /// What is asked.
        request: DecisionRequest,
    },
}

/// Receives progress events.
pub trait Observer: Send + Sync {
    /// Called for each event, in order.
    fn event(&self, event: &RunEvent);
}

/// Ignores events.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Observer for Quiet {
    fn event(&self, _event: &RunEvent) {}
}

/// The outcome of an execution that has ended, if it has.
#[must_use]
pub fn terminal_outcome(execution: &Execution) -> Option<RunOutcome> {
    match execution {
        Execution::Completed(_) => Some(RunOutcome::Completed),
        Execution::Failed(f) => Some(match f.replanned_as {
            Some(plan_id) => RunOutcome::Replanned {
                plan_id,
                execution_id: None,
            },
            None => RunOutcome::Failed {
                reason: f.reason.clone(),
            },
        }),
        Execution::Stopped(s) => Some(RunOutcome::Stopped {
            reason: s.reason.clone(),
        }),
        Execution::Pending(_) | Execution::Running(_) => None,
    }
}
