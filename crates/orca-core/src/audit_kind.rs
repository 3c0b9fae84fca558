//! The kinds of audit entries orca writes, typed. The strings are the on-disk `kind` of each
//! entry (ADR 0008) and never change: stored logs, their hash chains and the tamper catalogue
//! depend on them.

use serde::{Deserialize, Serialize};

/// Where an execution log entry hangs: under the log's first entry (`execution.created`, seq 0).
/// Every transition of the execution and its tasks is a child of it; what an agent logs during
/// an attempt hangs under that attempt's `task.attempt.started` instead.
pub const UNDER_EXECUTION: Option<u64> = Some(0);

macro_rules! audit_kinds {
    ($( $(#[$doc:meta])* $variant:ident = $text:literal, )+) => {
        /// The kind of an audit entry.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[non_exhaustive]
        pub enum AuditKind {
            $( $(#[$doc])* #[serde(rename = $text)] $variant, )+
        }

        impl AuditKind {
            /// Every kind.
            pub const ALL: &'static [Self] = &[$(Self::$variant,)+];

            /// The on-disk `kind` string.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }

            /// The kind of an on-disk `kind` string, if it is one orca writes.
            #[must_use]
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

audit_kinds! {
    // The execution log: the execution.
    /// An execution was created (also in the plan's run register).
    ExecutionCreated = "execution.created",
    /// A runner started a pending execution.
    ExecutionStarted = "execution.started",
    /// A runner resumed a running execution (possibly taking over from a dead one).
    ExecutionResumed = "execution.resumed",
    /// Every task completed.
    ExecutionCompleted = "execution.completed",
    /// The execution ended failed.
    ExecutionFailed = "execution.failed",
    /// The execution was stopped after a human's Stop decision.
    ExecutionStopped = "execution.stopped",
    /// The run was interrupted (Ctrl-C, `exec stop`); the execution stays resumable.
    ExecutionInterrupted = "execution.interrupted",
    /// A human's Replan produced a new plan.
    ExecutionReplanned = "execution.replanned",
    /// `exec stop` / `exec cancel` asked the execution to stop.
    ExecutionStopRequested = "execution.stop_requested",
    /// The execution was forked from another one by `exec retry` (which steps it reuses).
    ExecutionForked = "execution.forked",
    /// The sandbox a run's steps run under.
    Sandbox = "sandbox",
    // The execution log: tasks.
    /// An attempt started (its agent call; what the agent logs hangs under it).
    TaskAttemptStarted = "task.attempt.started",
    /// An attempt succeeded (carries the result's digest).
    TaskAttemptCompleted = "task.attempt.completed",
    /// An attempt failed.
    TaskAttemptFailed = "task.attempt.failed",
    /// An attempt was interrupted (a question, or the run was stopped).
    TaskAttemptInterrupted = "task.attempt.interrupted",
    /// An attempt's reply is logged but its task state could not be written.
    TaskAttemptUnrecorded = "task.attempt.unrecorded",
    /// An attempt in flight when its runner died, recorded by the next run.
    TaskAttemptAbandoned = "task.attempt.abandoned",
    /// What an attempt changed: its files, and in a git repository the trees before and
    /// after it (under the attempt's `task.attempt.started`).
    StepChanges = "step.changes",
    /// A task was skipped (an upstream step was abandoned).
    TaskSkipped = "task.skipped",
    /// A dead runner's step processes were ended before anything ran again.
    TakeoverProcessesEnded = "takeover.processes_ended",
    // The execution log: decisions.
    /// A human decision is needed.
    DecisionRequested = "decision.requested",
    /// A human answered the decision.
    DecisionAnswered = "decision.answered",
    /// The runner applied the answered decision.
    DecisionApplied = "decision.applied",
    /// An unattended failure policy (stop, skip) was applied instead of asking.
    PolicyApplied = "policy.applied",
    /// A Replan produced no usable plan; the decision is open again.
    ReplanFailed = "replan.failed",
    // The plan's run register.
    /// A run was refused (tampering, an approval that does not hold).
    RunRefused = "run.refused",
    /// A newer plan supersedes this one.
    PlanSuperseded = "plan.superseded",
    /// An execution of this plan was retried as a new one (`exec retry`).
    ExecutionRetried = "execution.retried",
    /// A human accepted an execution's result into their branch (signed, bound to the
    /// result's tree).
    ExecutionAccepted = "execution.accepted",
    /// A human discarded an execution's result: its branches and worktrees were removed.
    ExecutionDiscarded = "execution.discarded",
    // The plan log.
    /// A plan was created.
    PlanCreated = "plan.created",
    /// A draft was edited.
    PlanEdited = "plan.edited",
    /// A draft was submitted for approval.
    PlanSubmitted = "plan.submitted",
    /// A submission was refused (the draft does not validate).
    PlanSubmitRefused = "plan.submit_refused",
    /// The human approved the plan (signed).
    PlanApproved = "plan.approved",
    /// The human rejected the plan.
    PlanRejected = "plan.rejected",
    /// One approver approved a plan under an approval policy (signed by their own key).
    PlanApprovalGiven = "plan.approval.given",
    /// An approval policy's rule escalated: another set of approvers is asked.
    PlanApprovalEscalated = "plan.approval.escalated",
    /// An approval policy's approvers were reminded before the expiry.
    PlanApprovalReminded = "plan.approval.reminded",
    /// The human asked for changes.
    PlanChangesRequested = "plan.changes_requested",
    // Agent activity under an attempt.
    /// A tool call by an agent, audited once it returned: its result or error (bounded).
    ToolCall = "tool.call",
    /// A tool call that was refused.
    ToolRefused = "tool.refused",
    /// A model's text answer in one turn of an agent's conversation (bounded).
    AgentAnswer = "agent.answer",
    /// One turn of an agent's conversation that answered no text (it only called tools): the
    /// turn, why it ended and its tokens (no prompt, no answer).
    AgentTurn = "agent.turn",
    /// A tool a command-line agent's own program ran (its built-in shell, edit or search
    /// tools: not offered, gated nor run by orca), read from the program's output once it
    /// exited: the tool, its input and its output (bounded).
    AgentToolUsed = "agent.tool",
    /// A check ran and exited 0: under the attempt it judged, or (a plan's check) under the
    /// execution.
    CheckPassed = "check.passed",
    /// A check ran and did not pass (non-zero exit, timeout, could not run), with the tail of
    /// its output (bounded).
    CheckFailed = "check.failed",
}

impl std::fmt::Display for AuditKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<AuditKind> for String {
    fn from(kind: AuditKind) -> Self {
        kind.as_str().to_owned()
    }
}

impl PartialEq<AuditKind> for String {
    fn eq(&self, other: &AuditKind) -> bool {
        self == other.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_round_trip_through_serde_and_parse() {
        for kind in AuditKind::ALL {
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json, serde_json::Value::String(kind.as_str().to_owned()));
            assert_eq!(AuditKind::parse(kind.as_str()), Some(*kind));
            let back: AuditKind = serde_json::from_value(json).unwrap();
            assert_eq!(back, *kind);
        }
    }
}
