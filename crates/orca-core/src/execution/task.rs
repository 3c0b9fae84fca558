//! A task's states — pending, running, completed, failed, skipped — its attempts and who holds
//! it; each transition consumes the old state.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{
    DocumentError, ErrorCode, FormatVersion, StepId, TaskContext, TaskFailure, TaskInterruption,
    TaskSuccess,
};

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
