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

use crate::context::TaskContext;
use crate::error::{DocumentError, TransitionError};
use crate::format::{Digest, FormatVersion};
use crate::hitl::{Decision, DecisionRequest};
use crate::id::{ExecutionId, PlanId, StepId};
use crate::plan::ApprovedPlan;
use crate::results::{ErrorCode, TaskFailure, TaskInterruption, TaskSuccess};

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
        StoppedExecution {
            format_version: FormatVersion,
            info: self.info,
            started_at: None,
            finished_at: at,
            by: by.into(),
            reason,
        }
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
        StoppedExecution {
            format_version: FormatVersion,
            info: self.info,
            started_at: Some(self.started_at),
            finished_at: at,
            by: by.into(),
            reason,
        }
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

/// Who holds a running task: the process that claimed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    /// Process id.
    pub pid: u32,
    /// Host name.
    pub host: String,
    /// A per-process token, so a reused pid is not mistaken for the holder.
    pub token: String,
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
pub enum AttemptOutcome {
    /// It succeeded.
    Succeeded,
    /// It failed.
    Failed {
        /// The failure.
        failure: TaskFailure,
    },
    /// The specialist asked a human something.
    Interrupted {
        /// The interruption.
        interruption: TaskInterruption,
    },
    /// The process running it died; found on recovery. At-least-once: it may have had effects.
    Abandoned {
        /// What was found.
        note: String,
    },
}

/// One attempt of a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptRecord {
    /// 1-based.
    pub number: u32,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When it ended.
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
    /// How.
    pub outcome: AttemptOutcome,
    /// What the human said about it, for the next attempt (guidance or an answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guidance: Option<String>,
}

/// The status of a task, without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Not started.
    Pending,
    /// An attempt is running.
    Running,
    /// Done.
    Completed,
    /// The last attempt failed.
    Failed,
    /// Never run: an upstream task was abandoned.
    Skipped,
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        })
    }
}

/// Not started: no attempt yet. (An attempt abandoned by a crash leaves the task `failed`.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingTask {
    format_version: FormatVersion,
    /// The step.
    pub step_id: StepId,
}

/// An attempt is running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunningTask {
    format_version: FormatVersion,
    /// The step.
    pub step_id: StepId,
    /// Earlier attempts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptRecord>,
    /// This attempt's number (1-based).
    pub attempt: u32,
    /// When this attempt started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// The context it was given.
    pub context: TaskContext,
    /// Who runs it.
    pub holder: Holder,
    /// The process groups this attempt started (on `holder.host`), recorded as they start so
    /// whoever takes the execution over can end them first (ADR 0010).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<crate::ownership::ProcessGroup>,
}

/// Done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletedTask {
    format_version: FormatVersion,
    /// The step.
    pub step_id: StepId,
    /// Every attempt, the last one the success.
    pub attempts: Vec<AttemptRecord>,
    /// The result.
    pub result: TaskSuccess,
}

/// The last attempt failed (or asked a question).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailedTask {
    format_version: FormatVersion,
    /// The step.
    pub step_id: StepId,
    /// Every attempt; the last one is the failure.
    pub attempts: Vec<AttemptRecord>,
}

/// Never run: an upstream task was abandoned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkippedTask {
    format_version: FormatVersion,
    /// The step.
    pub step_id: StepId,
    /// Why.
    pub reason: String,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// A task in any status: the persisted task record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Task {
    /// Not started.
    Pending(PendingTask),
    /// Running.
    Running(RunningTask),
    /// Done.
    Completed(CompletedTask),
    /// Failed.
    Failed(FailedTask),
    /// Skipped.
    Skipped(SkippedTask),
}

impl Task {
    /// Reads a stored task record, checking its format version first.
    ///
    /// # Errors
    ///
    /// See [`crate::format::read_document`].
    pub fn from_json(text: &str) -> Result<Self, DocumentError> {
        crate::format::read_document(text, "task")
    }

    /// The status.
    #[must_use]
    pub const fn status(&self) -> TaskStatus {
        match self {
            Self::Pending(_) => TaskStatus::Pending,
            Self::Running(_) => TaskStatus::Running,
            Self::Completed(_) => TaskStatus::Completed,
            Self::Failed(_) => TaskStatus::Failed,
            Self::Skipped(_) => TaskStatus::Skipped,
        }
    }

    /// The step.
    #[must_use]
    pub const fn step_id(&self) -> &StepId {
        match self {
            Self::Pending(t) => &t.step_id,
            Self::Running(t) => &t.step_id,
            Self::Completed(t) => &t.step_id,
            Self::Failed(t) => &t.step_id,
            Self::Skipped(t) => &t.step_id,
        }
    }

    /// Finished attempts.
    #[must_use]
    pub fn attempts(&self) -> &[AttemptRecord] {
        match self {
            Self::Pending(_) | Self::Skipped(_) => &[],
            Self::Running(t) => &t.attempts,
            Self::Completed(t) => &t.attempts,
            Self::Failed(t) => &t.attempts,
        }
    }

    /// Attempts that count against `max_attempts`: abandoned ones (a crash) do not.
    #[must_use]
    pub fn counted_attempts(&self) -> u32 {
        let finished = self
            .attempts()
            .iter()
            .filter(|a| !matches!(a.outcome, AttemptOutcome::Abandoned { .. }))
            .count();
        let running = usize::from(matches!(self, Self::Running(_)));
        u32::try_from(finished + running).unwrap_or(u32::MAX)
    }

    /// The success, if completed.
    #[must_use]
    pub const fn success(&self) -> Option<&TaskSuccess> {
        match self {
            Self::Completed(t) => Some(&t.result),
            _ => None,
        }
    }
}

fn next_number(attempts: &[AttemptRecord]) -> u32 {
    u32::try_from(attempts.len())
        .unwrap_or(u32::MAX)
        .saturating_add(1)
}

impl PendingTask {
    /// A task that has not started.
    #[must_use]
    pub const fn new(step_id: StepId) -> Self {
        Self {
            format_version: FormatVersion,
            step_id,
        }
    }

    /// Starts the first attempt.
    #[must_use]
    pub fn start(self, context: TaskContext, holder: Holder, at: OffsetDateTime) -> RunningTask {
        RunningTask {
            format_version: FormatVersion,
            step_id: self.step_id,
            attempts: Vec::new(),
            attempt: 1,
            started_at: at,
            context,
            holder,
            processes: Vec::new(),
        }
    }

    /// Skips the task: an upstream task was abandoned.
    #[must_use]
    pub fn skip(self, reason: impl Into<String>, at: OffsetDateTime) -> SkippedTask {
        SkippedTask {
            format_version: FormatVersion,
            step_id: self.step_id,
            reason: reason.into(),
            at,
        }
    }
}

impl RunningTask {
    fn finish(
        mut self,
        outcome: AttemptOutcome,
        at: OffsetDateTime,
    ) -> (StepId, Vec<AttemptRecord>) {
        self.attempts.push(AttemptRecord {
            number: self.attempt,
            started_at: self.started_at,
            finished_at: at,
            outcome,
            guidance: None,
        });
        (self.step_id, self.attempts)
    }

    /// The attempt succeeded.
    #[must_use]
    pub fn complete(self, result: TaskSuccess, at: OffsetDateTime) -> CompletedTask {
        let (step_id, attempts) = self.finish(AttemptOutcome::Succeeded, at);
        CompletedTask {
            format_version: FormatVersion,
            step_id,
            attempts,
            result,
        }
    }

    /// The attempt failed.
    #[must_use]
    pub fn fail(self, failure: TaskFailure, at: OffsetDateTime) -> FailedTask {
        let (step_id, attempts) = self.finish(AttemptOutcome::Failed { failure }, at);
        FailedTask {
            format_version: FormatVersion,
            step_id,
            attempts,
        }
    }

    /// The specialist interrupted with a question for the human.
    #[must_use]
    pub fn interrupt(self, interruption: TaskInterruption, at: OffsetDateTime) -> FailedTask {
        let (step_id, attempts) = self.finish(AttemptOutcome::Interrupted { interruption }, at);
        FailedTask {
            format_version: FormatVersion,
            step_id,
            attempts,
        }
    }

    /// Recovery found the holder gone: the attempt is recorded as abandoned and the task is
    /// failed with code `interrupted`, ready to be retried (it does not count as an attempt).
    #[must_use]
    pub fn abandon(self, note: impl Into<String>, at: OffsetDateTime) -> FailedTask {
        let (step_id, attempts) = self.finish(AttemptOutcome::Abandoned { note: note.into() }, at);
        FailedTask {
            format_version: FormatVersion,
            step_id,
            attempts,
        }
    }
}

impl FailedTask {
    /// The last attempt's failure, as a [`TaskFailure`] (interruptions and abandonment
    /// included, with codes `interrupted`).
    #[must_use]
    pub fn last_failure(&self) -> TaskFailure {
        match self.attempts.last().map(|a| &a.outcome) {
            Some(AttemptOutcome::Failed { failure }) => failure.clone(),
            Some(AttemptOutcome::Interrupted { interruption }) => TaskFailure::new(
                ErrorCode::Interrupted,
                interruption
                    .question
                    .clone()
                    .unwrap_or_else(|| interruption.reason.clone()),
            ),
            Some(AttemptOutcome::Abandoned { note }) => {
                TaskFailure::new(ErrorCode::Interrupted, note.clone())
            }
            Some(AttemptOutcome::Succeeded) | None => {
                TaskFailure::new(ErrorCode::AgentError, "failed without a recorded failure")
            }
        }
    }

    /// Whether the last attempt was abandoned by a crash.
    #[must_use]
    pub fn was_abandoned(&self) -> bool {
        matches!(
            self.attempts.last().map(|a| &a.outcome),
            Some(AttemptOutcome::Abandoned { .. })
        )
    }

    /// Starts another attempt. `guidance` (the human's, or an answer to a question) is
    /// recorded on the failed attempt and threaded into `previous_attempts`: a context built
    /// before the guidance was recorded gets it on its entry for that attempt.
    #[must_use]
    pub fn retry(
        mut self,
        guidance: Option<String>,
        mut context: TaskContext,
        holder: Holder,
        at: OffsetDateTime,
    ) -> RunningTask {
        if let Some(last) = self.attempts.last_mut()
            && guidance.is_some()
        {
            if let Some(entry) = context
                .previous_attempts
                .iter_mut()
                .find(|p| p.attempt == last.number && p.guidance.is_none())
            {
                entry.guidance.clone_from(&guidance);
            }
            last.guidance = guidance;
        }
        let attempt = next_number(&self.attempts);
        RunningTask {
            format_version: FormatVersion,
            step_id: self.step_id,
            attempts: self.attempts,
            attempt,
            started_at: at,
            context,
            holder,
            processes: Vec::new(),
        }
    }

    /// Records guidance on the last attempt without retrying yet (e.g. an answered decision
    /// that the runner applies later).
    pub fn set_guidance(&mut self, guidance: Option<String>) {
        if let Some(last) = self.attempts.last_mut() {
            last.guidance = guidance;
        }
    }
}

macro_rules! task_from {
    ($($ty:ident => $variant:ident),*) => {$(
        impl From<$ty> for Task {
            fn from(t: $ty) -> Self {
                Self::$variant(t)
            }
        }
    )*};
}
task_from!(PendingTask => Pending, RunningTask => Running, CompletedTask => Completed, FailedTask => Failed, SkippedTask => Skipped);

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
