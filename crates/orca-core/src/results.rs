//! What agents give back: task results, planner responses, answers, error codes, usage.

use serde::{Deserialize, Serialize};

use crate::id::{PlanId, SessionId};

/// Why something failed. Stable snake_case names: they are part of the on-disk contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// Input that does not validate.
    Validation,
    /// An agent id no profile answers to.
    UnknownAgent,
    /// A session to continue does not exist.
    SessionNotFound,
    /// The agent or its backend failed.
    AgentError,
    /// A time limit was reached.
    Timeout,
    /// The attempt was cut short (the process running it died).
    Interrupted,
    /// The agent's output could not be parsed.
    ParseError,
    /// A token, cost, turn or time budget was exhausted.
    BudgetExceeded,
    /// Cancelled by a stop.
    Cancelled,
    /// A tool the role was not granted was called.
    ToolRefused,
    /// The command or work itself failed (non-zero exit, failed checks…).
    TaskFailed,
    /// The agent's model could not be used at all: nothing answered at its endpoint, or the
    /// endpoint refused its credentials. A configuration problem, not a failed attempt.
    BackendUnavailable,
    /// The step's worktree branch did not merge cleanly into the execution's branch (ADR
    /// 0017): the message lists the conflicting files; the human decides.
    MergeConflict,
    /// The agent reported success but a check of the step (or of the plan) did not exit 0: the
    /// message names it, the cause quotes the tail of its output.
    CheckFailed,
    /// The agent stopped making progress: a model repeated the same tool call with the same
    /// result, or took turns that changed and learnt nothing; a command-line agent printed
    /// nothing and changed no file for its idle limit. The message names the repetition.
    Stalled,
}

impl ErrorCode {
    /// The snake_case name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Validation => "validation",
            Self::UnknownAgent => "unknown_agent",
            Self::SessionNotFound => "session_not_found",
            Self::AgentError => "agent_error",
            Self::Timeout => "timeout",
            Self::Interrupted => "interrupted",
            Self::ParseError => "parse_error",
            Self::BudgetExceeded => "budget_exceeded",
            Self::Cancelled => "cancelled",
            Self::ToolRefused => "tool_refused",
            Self::TaskFailed => "task_failed",
            Self::BackendUnavailable => "backend_unavailable",
            Self::MergeConflict => "merge_conflict",
            Self::CheckFailed => "check_failed",
            Self::Stalled => "stalled",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A specialist's successful result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSuccess {
    /// A short summary: this, not the full output, is what later steps see.
    pub summary: String,
    /// Things produced (paths, URLs, ids).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    /// Facts later steps should know.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_findings: Vec<String>,
    /// How the work was checked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verification: Vec<String>,
    /// Files that matter for what follows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relevant_files: Vec<String>,
    /// Anything else worth keeping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// The full output (e.g. of a shell command). Kept in the record, never threaded forward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl TaskSuccess {
    /// A success with only a summary.
    #[must_use]
    pub fn with_summary(summary: impl Into<String>) -> Self {
        Self {
            summary: summary.into(),
            ..Self::default()
        }
    }
}

/// A failure: a stable code, a message for people, and an optional underlying cause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskFailure {
    /// Why, as a stable code.
    pub code: ErrorCode,
    /// What happened, one line.
    pub message: String,
    /// The underlying cause, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The full output, if there was one (e.g. a failing command's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl TaskFailure {
    /// A failure with a code and a message.
    #[must_use]
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            cause: None,
            output: None,
        }
    }

    /// Adds a cause (builder style).
    #[must_use]
    pub fn with_cause(mut self, cause: impl Into<String>) -> Self {
        self.cause = Some(cause.into());
        self
    }
}

impl std::fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if let Some(cause) = &self.cause {
            write!(f, " ({cause})")?;
        }
        Ok(())
    }
}

/// A specialist stopped because it needs something from a human.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskInterruption {
    /// Why it stopped.
    pub reason: String,
    /// The question for the human, if there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
}

/// What a specialist returns for a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum TaskResult {
    /// Done.
    Success(TaskSuccess),
    /// Not done.
    Failure(TaskFailure),
    /// Needs a human.
    Interruption(TaskInterruption),
}

/// Which stage a plan the planner produced is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanRefStage {
    /// Still being built (e.g. the planner is waiting for answers).
    Draft,
    /// Submitted: ready for the human's approval.
    Proposal,
}

/// What the planner returns for one user message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PlannerResponse {
    /// A direct answer; no plan needed.
    Answer {
        /// The answer.
        text: String,
    },
    /// A plan the planner built with the plan tools.
    Plan {
        /// The plan.
        plan_id: PlanId,
        /// Its stage.
        stage: PlanRefStage,
        /// A note for the user.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The planner could not help.
    Failure(TaskFailure),
}

/// A specialist's answer to a read-only question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentAnswer {
    /// The answer.
    pub answer: String,
    /// The session, to continue the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
}

/// Resources spent by an agent call, summed across turns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Input tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens read from a prompt cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Input tokens written to a prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Model turns.
    #[serde(default)]
    pub turns: u32,
    /// Cost in millionths of a US dollar, if the backend knows prices.
    #[serde(default)]
    pub cost_micro_usd: u64,
}

impl Usage {
    /// All tokens counted against a budget.
    #[must_use]
    pub const fn total_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    /// Adds another call's usage.
    pub fn add(&mut self, other: &Self) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.turns = self.turns.saturating_add(other.turns);
        self.cost_micro_usd = self.cost_micro_usd.saturating_add(other.cost_micro_usd);
    }
}

/// Limits that fail closed: the first one reached ends the call with `budget_exceeded`.
/// `None` = no limit.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Total tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Cost in millionths of a US dollar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_micro_usd: Option<u64>,
    /// Model turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Wall-clock seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_secs: Option<u64>,
}

impl Budget {
    /// No limits.
    pub const UNLIMITED: Self = Self {
        max_tokens: None,
        max_cost_micro_usd: None,
        max_turns: None,
        max_wall_secs: None,
    };

    /// The first limit `usage` (after `elapsed_secs`) has exceeded, as a message saying by
    /// how much (`token budget exceeded: 300 > 250, over by 50`).
    #[must_use]
    pub fn exceeded(&self, usage: &Usage, elapsed_secs: u64) -> Option<String> {
        let over = |used: u64, max: u64| used.saturating_sub(max);
        if let Some(max) = self.max_tokens
            && usage.total_tokens() > max
        {
            let used = usage.total_tokens();
            return Some(format!(
                "token budget exceeded: {used} > {max}, over by {}",
                over(used, max)
            ));
        }
        if let Some(max) = self.max_cost_micro_usd
            && usage.cost_micro_usd > max
        {
            let used = usage.cost_micro_usd;
            return Some(format!(
                "cost budget exceeded: {used} > {max} micro-USD, over by {}",
                over(used, max)
            ));
        }
        if let Some(max) = self.max_turns
            && usage.turns > max
        {
            return Some(format!(
                "turn budget exceeded: {} > {max}, over by {}",
                usage.turns,
                usage.turns.saturating_sub(max)
            ));
        }
        if let Some(max) = self.max_wall_secs
            && elapsed_secs > max
        {
            return Some(format!(
                "time budget exceeded: {elapsed_secs}s > {max}s, over by {}s",
                over(elapsed_secs, max)
            ));
        }
        None
    }

    /// Whether no limit is set.
    #[must_use]
    pub const fn is_unlimited(&self) -> bool {
        self.max_tokens.is_none()
            && self.max_cost_micro_usd.is_none()
            && self.max_turns.is_none()
            && self.max_wall_secs.is_none()
    }

    /// What is left of this budget after `usage` and `elapsed_secs` (saturating at zero).
    #[must_use]
    pub fn remaining(&self, usage: &Usage, elapsed_secs: u64) -> Self {
        Self {
            max_tokens: self
                .max_tokens
                .map(|m| m.saturating_sub(usage.total_tokens())),
            max_cost_micro_usd: self
                .max_cost_micro_usd
                .map(|m| m.saturating_sub(usage.cost_micro_usd)),
            max_turns: self.max_turns.map(|m| m.saturating_sub(usage.turns)),
            max_wall_secs: self.max_wall_secs.map(|m| m.saturating_sub(elapsed_secs)),
        }
    }

    /// The tighter of two budgets, limit by limit.
    #[must_use]
    pub fn min(&self, other: &Self) -> Self {
        fn tighter<T: Ord + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, None) => x,
                (None, y) => y,
            }
        }
        Self {
            max_tokens: tighter(self.max_tokens, other.max_tokens),
            max_cost_micro_usd: tighter(self.max_cost_micro_usd, other.max_cost_micro_usd),
            max_turns: tighter(self.max_turns, other.max_turns),
            max_wall_secs: tighter(self.max_wall_secs, other.max_wall_secs),
        }
    }
}
