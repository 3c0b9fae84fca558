//! Service errors. User errors (bad input, unknown ids, wrong stage) are kept apart from
//! internal ones (storage failures).

use orca_core::{Digest, ExecutionId, ExecutionStage, PlanId, PlanStage, Problem, TransitionError};
use orca_store::StoreError;
use thiserror::Error;

/// What can go wrong in a service call.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The plan is not in a stage that allows this.
    #[error("plan {plan} is {stage}; this needs a {expected} plan")]
    PlanStage {
        /// The plan.
        plan: PlanId,
        /// Its stage.
        stage: PlanStage,
        /// The stage needed.
        expected: &'static str,
    },
    /// The execution is not in a stage that allows this.
    #[error("execution {execution} is {stage}; {why}")]
    ExecutionStage {
        /// The execution.
        execution: ExecutionId,
        /// Its stage.
        stage: ExecutionStage,
        /// Why that matters.
        why: &'static str,
    },
    /// The plan does not validate.
    #[error("{}", format_problems(.0))]
    Invalid(Vec<Problem>),
    /// A builder operation or an argument was refused.
    #[error("{0}")]
    BadInput(String),
    /// An id prefix matched nothing or more than one thing.
    #[error("{0}")]
    UnknownId(String),
    /// The approved plan file no longer matches its approval digest.
    #[error(
        "plan {0} was changed after approval: its content no longer matches the approved digest"
    )]
    PlanTampered(PlanId),
    /// The human decided on a plan whose content has changed since it was shown to them (a
    /// concurrent request for changes and a new submission, an edited plan file): nothing was
    /// approved.
    #[error(
        "plan {plan} changed after it was shown to you (shown: {shown}, now: {now}); nothing was approved: look at it again and decide on what it says now"
    )]
    ContentChanged {
        /// The plan.
        plan: PlanId,
        /// The digest of the content the human was shown.
        shown: Digest,
        /// The digest of its content now.
        now: Digest,
    },
    /// An approver's approval was recorded; the approval policy needs more before the plan is
    /// approved.
    #[error("plan {plan}: your approval is recorded; it is not approved yet: {needs}")]
    AwaitingApprovals {
        /// The plan.
        plan: PlanId,
        /// What it still needs ("default: needs 2 of {alice, bob}; 1 given (alice)").
        needs: String,
    },
    /// Processes of a dead runner's step are still alive: nothing is re-run over them.
    #[error("{0}")]
    ProcessesAlive(String),
    /// A plan's approval does not cover the plan as stored (missing, unsigned, untrusted, or
    /// the content changed): it must not run.
    #[error("refused to run {0}")]
    ApprovalRefused(crate::approval::ApprovalProblem),
    /// A record disagrees with the audit log (a state file, a log cut under a running
    /// execution).
    #[error("{0}")]
    Tampered(String),
    /// The domain refused a transition (a dependency not completed, a decision already
    /// answered…). Nothing changed.
    #[error(transparent)]
    Transition(#[from] TransitionError),
    /// A record kept changing under concurrent writers (another process deciding, stopping or
    /// driving the same execution) past the retry limit: transient, nothing changed; try again.
    #[error("execution {execution} kept changing concurrently; nothing was changed, try again")]
    Contended {
        /// The execution.
        execution: ExecutionId,
    },
    /// The human chose Replan but no usable plan came of it. The execution was not ended and the
    /// decision is open again (retry, stop, or a later replan still work).
    #[error("replanning execution {execution} failed: {cause}; the decision is open again")]
    ReplanFailed {
        /// The execution.
        execution: ExecutionId,
        /// Why (no planner configured, the planner's answer was not a plan…).
        cause: String,
    },
    /// A claiming worker's shared hold on the execution was lost (its database connection
    /// was cut): a leader may take the execution now, so it stopped its attempts.
    #[error(
        "execution {execution}: this worker's hold on the execution was lost (its database connection was cut); it stopped its attempts, which will run again"
    )]
    HoldLost {
        /// The execution whose tasks were claimed.
        execution: orca_core::ExecutionId,
    },
    /// A claiming worker could not renew its task leases: it stopped its attempts before
    /// another worker could take them over.
    #[error(
        "execution {execution}: this worker could not renew its task leases for {}s; it stopped its attempts before another worker may take them over",
        .since.as_secs()
    )]
    TaskLeasesLost {
        /// The execution whose tasks were claimed.
        execution: orca_core::ExecutionId,
        /// How long ago the last renewal that succeeded was sent.
        since: std::time::Duration,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ServiceError {
    /// Whether the error says a record was tampered with (exit 5 in the binary).
    #[must_use]
    pub const fn is_tampering(&self) -> bool {
        matches!(
            self,
            Self::PlanTampered(_)
                | Self::ApprovalRefused(_)
                | Self::Tampered(_)
                | Self::Store(StoreError::Tampered { .. })
        )
    }

    /// Whether the error is the caller's (bad input, unknown id, wrong stage, corrupt data)
    /// rather than an internal failure.
    #[must_use]
    pub const fn is_user_error(&self) -> bool {
        match self {
            Self::Store(e) => e.is_user_error() || matches!(e, StoreError::LeaseHeld { .. }),
            Self::Contended { .. } => false,
            _ => true,
        }
    }
}

fn format_problems(problems: &[Problem]) -> String {
    let mut out = format!(
        "the plan has {}: ",
        orca_core::plural::count(problems.len(), "problem", "problems")
    );
    for (i, p) in problems.iter().enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        out.push_str(&p.to_string());
    }
    out
}

/// An error followed by each of its sources that adds something, joined by `: `.
#[must_use]
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// The whole chain of an error on one line ([`error_chain`], line breaks as spaces): what a
/// terminal, a log line or an audit entry shows.
#[must_use]
pub fn chain(error: &dyn std::error::Error) -> String {
    error_chain(error).replace('\n', " ")
}

/// A result of a service call.
pub type Result<T, E = ServiceError> = std::result::Result<T, E>;
