//! The one word for an execution's state on every surface — `exec show` (text and `--json`),
//! `exec list` and its `--status` filter, `watch`, the web badge, MCP — documented in
//! `docs/states.md`. The stored stage says how the record ended or that it has not; the status
//! adds what a person needs next: whether a process drives it, a decision waits, or a result
//! waits to be accepted.

use orca_core::ExecutionStage;
use serde::Serialize;

/// What a person sees an execution as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Status {
    /// Created, not started by any driver yet.
    Pending,
    /// A live driver holds it and runs its steps.
    Running,
    /// Not ended, and no live driver: `orca exec resume` (or a worker) goes on.
    Interrupted,
    /// A step failed for good: a human decides retry, replan or stop (`orca exec decide`).
    AwaitingDecision,
    /// Every step completed in worktrees; the result waits on its branch for `orca exec accept`.
    AwaitingAcceptance,
    /// Every step completed (and, with worktrees, the result was accepted or discarded).
    Completed,
    /// Ended with work not done.
    Failed,
    /// Ended by `orca exec cancel` (or a Stop decision).
    Stopped,
}

impl Status {
    /// Every status, in the order of a run's life.
    pub const ALL: [Self; 8] = [
        Self::Pending,
        Self::Running,
        Self::Interrupted,
        Self::AwaitingDecision,
        Self::AwaitingAcceptance,
        Self::Completed,
        Self::Failed,
        Self::Stopped,
    ];

    /// The status of an execution at `stage`: `awaiting_decision` when a decision is pending,
    /// `driven` whether a live driver holds it (`None`: not known), `awaiting_acceptance` when
    /// its completed result waits for acceptance.
    #[must_use]
    pub const fn of(
        stage: ExecutionStage,
        awaiting_decision: bool,
        driven: Option<bool>,
        awaiting_acceptance: bool,
    ) -> Self {
        match stage {
            ExecutionStage::Completed if awaiting_acceptance => Self::AwaitingAcceptance,
            ExecutionStage::Completed => Self::Completed,
            ExecutionStage::Failed => Self::Failed,
            ExecutionStage::Stopped => Self::Stopped,
            _ if awaiting_decision => Self::AwaitingDecision,
            ExecutionStage::Pending => match driven {
                Some(true) => Self::Running,
                _ => Self::Pending,
            },
            ExecutionStage::Running => match driven {
                Some(false) => Self::Interrupted,
                _ => Self::Running,
            },
        }
    }

    /// The token of `--status`, `--json` and the web badge's class: `awaiting_decision`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Interrupted => "interrupted",
            Self::AwaitingDecision => "awaiting_decision",
            Self::AwaitingAcceptance => "awaiting_acceptance",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Stopped => "stopped",
        }
    }

    /// The same word for people: `awaiting decision`.
    #[must_use]
    pub const fn words(self) -> &'static str {
        match self {
            Self::AwaitingDecision => "awaiting decision",
            Self::AwaitingAcceptance => "awaiting acceptance",
            other => other.as_str(),
        }
    }

    /// A status named as a token or in words (`awaiting_decision`, `awaiting decision`,
    /// `awaiting-decision`).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let token = text.trim().to_ascii_lowercase().replace([' ', '-'], "_");
        Self::ALL.into_iter().find(|s| s.as_str() == token)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.words())
    }
}

#[cfg(test)]
mod tests {
    use super::Status;
    use orca_core::ExecutionStage as S;

    #[test]
    fn one_word_per_state() {
        assert_eq!(
            Status::of(S::Running, false, Some(true), false),
            Status::Running
        );
        assert_eq!(
            Status::of(S::Running, false, Some(false), false),
            Status::Interrupted
        );
        assert_eq!(
            Status::of(S::Running, true, Some(false), false),
            Status::AwaitingDecision
        );
        assert_eq!(
            Status::of(S::Running, true, Some(true), false),
            Status::AwaitingDecision
        );
        assert_eq!(Status::of(S::Pending, false, None, false), Status::Pending);
        assert_eq!(
            Status::of(S::Completed, false, None, true),
            Status::AwaitingAcceptance
        );
        assert_eq!(
            Status::of(S::Completed, false, None, false),
            Status::Completed
        );
        assert_eq!(Status::of(S::Stopped, true, None, true), Status::Stopped);
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
            assert_eq!(Status::parse(s.words()), Some(s));
        }
        assert_eq!(
            Status::parse("awaiting-decision"),
            Some(Status::AwaitingDecision)
        );
        assert_eq!(Status::parse("done"), None);
    }
}
