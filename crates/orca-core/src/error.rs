//! Errors of the domain. Messages are lowercase fragments that read well after "failed to …"
//! or on their own after "error: ".

use thiserror::Error;

use crate::id::StepId;

/// A text that is not a valid id of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum IdError {
    /// The text does not have the id's exact form.
    #[error("invalid {kind} `{text}`: {why}")]
    Invalid {
        /// What kind of id was expected (`plan id`, `step id`, …).
        kind: &'static str,
        /// The offending text, shortened to one line.
        text: String,
        /// Why it was refused.
        why: &'static str,
    },
}

/// A draft builder operation that was refused. The draft is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BuilderError {
    /// A position past the end of the step list.
    #[error("position {index} is out of range: the draft has {len} steps")]
    IndexOutOfRange {
        /// The position asked for.
        index: usize,
        /// How many steps the draft has.
        len: usize,
    },
    /// A step with this id is already in the draft.
    #[error("step `{0}` already exists in this draft")]
    DuplicateStep(StepId),
    /// No step with this id is in the draft.
    #[error("step `{0}` does not exist in this draft")]
    UnknownStep(StepId),
}

/// A transition asked of a state that does not allow it. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// An approval under one policy was asked of a proposal being decided under another.
    #[error("this proposal is being decided under policy {bound}, not {now}")]
    PolicyChanged {
        /// The policy its first approval bound.
        bound: String,
        /// The policy now asked for.
        now: String,
    },
    /// The approver already approved this proposal.
    #[error("{0} already approved this proposal")]
    AlreadyApprovedBy(String),
    /// The execution cannot complete: not every task completed.
    #[error("the execution cannot complete: {open} of {total} tasks have not completed")]
    TasksNotCompleted {
        /// Tasks not in `completed`.
        open: usize,
        /// All tasks.
        total: usize,
    },
    /// The task list does not belong to this execution's plan.
    #[error("the task list does not match the execution's steps")]
    TaskMismatch,
    /// A decision was answered, but none is pending.
    #[error("no human decision is pending")]
    NoPendingDecision,
    /// The pending decision was already answered; the answer waits to be applied.
    #[error("the decision for step `{0}` was already answered")]
    DecisionAlreadyAnswered(StepId),
    /// A human decision is already pending; only one may be open at a time.
    #[error("a human decision is already pending for step `{0}`")]
    DecisionAlreadyPending(StepId),
    /// The answer is not one of the question's options.
    #[error("`{answer}` is not one of the options: {options}")]
    NotAnOption {
        /// What was answered.
        answer: String,
        /// The options, comma-separated.
        options: String,
    },
    /// A task cannot start while one of its dependencies has not completed.
    #[error("step `{step}` cannot start: dependency `{dependency}` has not completed")]
    DependencyNotCompleted {
        /// The step that was to start.
        step: StepId,
        /// The dependency that has not completed.
        dependency: StepId,
    },
    /// The step id is not in the plan.
    #[error("step `{0}` is not in the plan")]
    UnknownStep(StepId),
    /// The task is not in the status the transition starts from.
    #[error("step `{step}` is {status}; {expected}")]
    TaskStatus {
        /// The step.
        step: StepId,
        /// Its status.
        status: crate::execution::TaskStatus,
        /// What the transition needs, as a fragment (`only pending or failed tasks can start`).
        expected: &'static str,
    },
    /// A step position past the end of the plan.
    #[error("step {0} is not in the plan")]
    NoStepAt(usize),
    /// A skip was asked of a task none of whose dependencies was abandoned.
    #[error("step `{0}` cannot be skipped: none of its dependencies was abandoned")]
    NothingAbandoned(StepId),
}

/// A stored or submitted document that cannot be read.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// Not JSON, or JSON of the wrong shape. The message names the field and position.
    #[error("{0}")]
    Malformed(#[from] serde_json::Error),
    /// The document names no format version.
    #[error("missing field `format_version`: this is not an orca {kind} document")]
    MissingVersion {
        /// The kind of document expected.
        kind: &'static str,
    },
    /// The document was written by a newer orca, or is not one of ours.
    #[error(
        "unsupported format_version {found} of this {kind} document: this orca reads version {supported}"
    )]
    UnsupportedVersion {
        /// The kind of document.
        kind: &'static str,
        /// The version found.
        found: String,
        /// The version this build reads.
        supported: u32,
    },
}
