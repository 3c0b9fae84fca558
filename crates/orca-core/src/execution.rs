//! Executions and tasks: how a run of an approved plan went.
//!
//! ```text
//! Execution:  pending ──start──► running ──┬─► completed   (every task completed)
//!                │                         ├─► failed
//!                └──────stop───────────────┴─► stopped
//!
//! Task:       pending ──start──► running ──┬─► completed
//!                │                 ▲       └─► failed ──retry──┐
//!                └─skip─► skipped  └───────────────────────────┘
//! ```
//!
//! Every transition consumes the old state. Those that can be refused return
//! [`TransitionFailed`], which hands the unchanged state back with the reason.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::error::{DocumentError, TransitionError};
use crate::format::{Digest, FormatVersion};
use crate::hitl::{Decision, DecisionRequest};
use crate::id::{ExecutionId, PlanId, StepId};
use crate::plan::ApprovedPlan;

mod task;
pub use task::{
    AttemptOutcome, AttemptRecord, CompletedTask, FailedTask, Holder, PendingTask, RunningTask,
    SkippedTask, Task, TaskStatus,
};

/// A refused transition: the state, unchanged, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransitionFailed<S> {
    /// The state, unchanged (boxed: states are large, errors should be small).
    pub state: Box<S>,
    /// Why the transition was refused.
    pub error: TransitionError,
}

impl<S: std::fmt::Debug> std::fmt::Display for TransitionFailed<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.error, f)
    }
}

impl<S: std::fmt::Debug> std::error::Error for TransitionFailed<S> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

fn refuse<S>(state: S, error: TransitionError) -> TransitionFailed<S> {
    TransitionFailed {
        state: Box::new(state),
        error,
    }
}

/// What every execution records, whatever its stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutionInfo {
    /// The execution.
    pub id: ExecutionId,
    /// The plan it runs.
    pub plan_id: PlanId,
    /// The digest of the approved plan content it runs.
    pub plan_digest: Digest,
    /// The plan's steps, in plan order: one task each.
    pub steps: Vec<StepId>,
    /// When it was created.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// A human decision that is pending or answered but not yet applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingDecision {
    /// What is asked.
    pub request: DecisionRequest,
    /// When it was asked.
    #[serde(with = "time::serde::rfc3339")]
    pub asked_at: OffsetDateTime,
    /// The answer, once given (possibly by another process); applied by the runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<AnsweredDecision>,
}

/// A recorded answer to a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnsweredDecision {
    /// The decision.
    pub decision: Decision,
    /// Who decided.
    pub by: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// Not started yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingExecution {
    format_version: FormatVersion,
    /// Ids, plan and steps.
    pub info: ExecutionInfo,
}

/// Running: tasks are being claimed and dispatched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunningExecution {
    format_version: FormatVersion,
    /// Ids, plan and steps.
    pub info: ExecutionInfo,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// A human decision the run waits for, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<PendingDecision>,
}

/// Every task completed. Final.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletedExecution {
    format_version: FormatVersion,
    /// Ids, plan and steps.
    pub info: ExecutionInfo,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When it ended.
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
}

/// Ended with work not done (a failure that was not recovered, or skipped steps). Final.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailedExecution {
    format_version: FormatVersion,
    /// Ids, plan and steps.
    pub info: ExecutionInfo,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When it ended.
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
    /// Why.
    pub reason: String,
    /// The plan that replaces this one's, if the human chose to replan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replanned_as: Option<PlanId>,
}

/// Stopped by a person (or a policy). Final.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoppedExecution {
    format_version: FormatVersion,
    /// Ids, plan and steps.
    pub info: ExecutionInfo,
    /// When it started, if it did.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub started_at: Option<OffsetDateTime>,
    /// When it stopped.
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
    /// Who stopped it.
    pub by: String,
    /// Why, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl StoppedExecution {
    /// Stopped by `by` at `at`, from whichever stage it was in (`started_at`: if it had started).
    const fn new(
        info: ExecutionInfo,
        started_at: Option<OffsetDateTime>,
        by: String,
        reason: Option<String>,
        at: OffsetDateTime,
    ) -> Self {
        Self {
            format_version: FormatVersion,
            info,
            started_at,
            finished_at: at,
            by,
            reason,
        }
    }
}

/// The stage of an execution, without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStage {
    /// Not started.
    Pending,
    /// Running.
    Running,
    /// Every task completed.
    Completed,
    /// Ended with work not done.
    Failed,
    /// Stopped.
    Stopped,
}

impl ExecutionStage {
    /// Completed, failed or stopped.
    #[must_use]
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Stopped)
    }
}

impl std::fmt::Display for ExecutionStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Stopped => "stopped",
        })
    }
}

/// An execution in any stage: the persisted execution header. Tasks are separate records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "stage", rename_all = "snake_case")]
pub enum Execution {
    /// Not started.
    Pending(PendingExecution),
    /// Running.
    Running(RunningExecution),
    /// Completed.
    Completed(CompletedExecution),
    /// Failed.
    Failed(FailedExecution),
    /// Stopped.
    Stopped(StoppedExecution),
}

impl Execution {
    /// Reads a stored execution document, checking its format version first.
    ///
    /// # Errors
    ///
    /// See [`crate::format::read_document`].
    pub fn from_json(text: &str) -> Result<Self, DocumentError> {
        crate::format::read_document(text, "execution")
    }

    /// The stage.
    #[must_use]
    pub const fn stage(&self) -> ExecutionStage {
        match self {
            Self::Pending(_) => ExecutionStage::Pending,
            Self::Running(_) => ExecutionStage::Running,
            Self::Completed(_) => ExecutionStage::Completed,
            Self::Failed(_) => ExecutionStage::Failed,
            Self::Stopped(_) => ExecutionStage::Stopped,
        }
    }

    /// Ids, plan and steps.
    #[must_use]
    pub const fn info(&self) -> &ExecutionInfo {
        match self {
            Self::Pending(e) => &e.info,
            Self::Running(e) => &e.info,
            Self::Completed(e) => &e.info,
            Self::Failed(e) => &e.info,
            Self::Stopped(e) => &e.info,
        }
    }

    /// The id.
    #[must_use]
    pub const fn id(&self) -> ExecutionId {
        self.info().id
    }

    /// The pending or answered decision, if running and waiting for one.
    #[must_use]
    pub const fn decision(&self) -> Option<&PendingDecision> {
        match self {
            Self::Running(e) => e.decision.as_ref(),
            _ => None,
        }
    }
}

impl PendingExecution {
    /// A new execution of an approved plan: one pending task per step.
    #[must_use]
    pub fn new(id: ExecutionId, plan: &ApprovedPlan, at: OffsetDateTime) -> (Self, Vec<Task>) {
        let steps: Vec<StepId> = plan.content().steps.iter().map(|s| s.id.clone()).collect();
        let tasks = steps
            .iter()
            .cloned()
            .map(|s| Task::Pending(PendingTask::new(s)))
            .collect();
        (
            Self {
                format_version: FormatVersion,
                info: ExecutionInfo {
                    id,
                    plan_id: plan.id(),
                    plan_digest: plan.digest().clone(),
                    steps,
                    created_at: at,
                },
            },
            tasks,
        )
    }

    /// Starts running.
    #[must_use]
    pub fn start(self, at: OffsetDateTime) -> RunningExecution {
        RunningExecution {
            format_version: FormatVersion,
            info: self.info,
            started_at: at,
            decision: None,
        }
    }

    /// Stopped before it started.
    #[must_use]
    pub fn stop(
        self,
        by: impl Into<String>,
        reason: Option<String>,
        at: OffsetDateTime,
    ) -> StoppedExecution {
        StoppedExecution::new(self.info, None, by.into(), reason, at)
    }
}

impl RunningExecution {
    /// Completes the execution.
    ///
    /// # Errors
    ///
    /// Not every task is completed, or the tasks are not this execution's.
    pub fn complete(
        self,
        tasks: &[Task],
        at: OffsetDateTime,
    ) -> Result<CompletedExecution, TransitionFailed<Self>> {
        if tasks.len() != self.info.steps.len()
            || tasks
                .iter()
                .zip(&self.info.steps)
                .any(|(t, s)| t.step_id() != s)
        {
            return Err(refuse(self, TransitionError::TaskMismatch));
        }
        let open = tasks
            .iter()
            .filter(|t| t.status() != TaskStatus::Completed)
            .count();
        if open > 0 {
            let total = tasks.len();
            return Err(refuse(
                self,
                TransitionError::TasksNotCompleted { open, total },
            ));
        }
        Ok(CompletedExecution {
            format_version: FormatVersion,
            info: self.info,
            started_at: self.started_at,
            finished_at: at,
        })
    }

    /// Ends the execution as failed.
    #[must_use]
    pub fn fail(
        self,
        reason: impl Into<String>,
        replanned_as: Option<PlanId>,
        at: OffsetDateTime,
    ) -> FailedExecution {
        FailedExecution {
            format_version: FormatVersion,
            info: self.info,
            started_at: self.started_at,
            finished_at: at,
            reason: reason.into(),
            replanned_as,
        }
    }

    /// Stops the execution.
    #[must_use]
    pub fn stop(
        self,
        by: impl Into<String>,
        reason: Option<String>,
        at: OffsetDateTime,
    ) -> StoppedExecution {
        StoppedExecution::new(self.info, Some(self.started_at), by.into(), reason, at)
    }

    /// Records that the run waits for a human decision.
    ///
    /// # Errors
    ///
    /// Another decision is already pending, or the request names a step that is not one of
    /// this execution's.
    pub fn await_decision(
        mut self,
        request: DecisionRequest,
        at: OffsetDateTime,
    ) -> Result<Self, TransitionFailed<Self>> {
        if let Some(pending) = &self.decision {
            let step = pending.request.step_id().clone();
            return Err(refuse(self, TransitionError::DecisionAlreadyPending(step)));
        }
        if !self.info.steps.contains(request.step_id()) {
            let step = request.step_id().clone();
            return Err(refuse(self, TransitionError::UnknownStep(step)));
        }
        self.decision = Some(PendingDecision {
            request,
            asked_at: at,
            answer: None,
        });
        Ok(self)
    }

    /// Records a human's answer to the pending decision (it is applied by the runner).
    ///
    /// # Errors
    ///
    /// No decision is pending, it was already answered, or the decision does not fit the
    /// request (e.g. `answer` to a deviation).
    pub fn answer_decision(
        mut self,
        decision: Decision,
        by: impl Into<String>,
        at: OffsetDateTime,
    ) -> Result<Self, TransitionFailed<Self>> {
        let Some(pending) = self.decision.as_mut() else {
            return Err(refuse(self, TransitionError::NoPendingDecision));
        };
        if pending.answer.is_some() {
            let step = pending.request.step_id().clone();
            return Err(refuse(self, TransitionError::DecisionAlreadyAnswered(step)));
        }
        let fits = matches!(
            (&pending.request, &decision),
            (
                DecisionRequest::Deviation { .. },
                Decision::Retry { .. } | Decision::Replan { .. } | Decision::Stop
            ) | (
                DecisionRequest::Interruption { .. },
                Decision::Answer { .. } | Decision::Stop
            )
        );
        if !fits {
            let options = pending.request.option_keys().join(", ");
            return Err(refuse(
                self,
                TransitionError::NotAnOption {
                    answer: decision.key().to_owned(),
                    options,
                },
            ));
        }
        pending.answer = Some(AnsweredDecision {
            decision,
            by: by.into(),
            at,
        });
        Ok(self)
    }

    /// Takes the answered decision out, to apply it. Unanswered decisions stay.
    #[must_use]
    pub fn take_answered(mut self) -> (Self, Option<(DecisionRequest, AnsweredDecision)>) {
        match self.decision.take() {
            Some(PendingDecision {
                request,
                answer: Some(answer),
                ..
            }) => (self, Some((request, answer))),
            other => {
                self.decision = other;
                (self, None)
            }
        }
    }
}

macro_rules! execution_from {
    ($($ty:ident => $variant:ident),*) => {$(
        impl From<$ty> for Execution {
            fn from(e: $ty) -> Self {
                Self::$variant(e)
            }
        }
    )*};
}
execution_from!(
    PendingExecution => Pending,
    RunningExecution => Running,
    CompletedExecution => Completed,
    FailedExecution => Failed,
    StoppedExecution => Stopped
);
