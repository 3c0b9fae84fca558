//! The tools' arguments. Their JSON schemas are a contract (snapshot-tested in
//! `crates/orca/tests/mcp.rs`): no argument of any tool can carry an approval.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A plan document.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePlan {
    /// The plan document: a JSON object in the format `orca plan schema` prints (goal,
    /// summary, assumptions, risks, verification, steps), or that object as a JSON string.
    pub document: Value,
}

/// A request for the planner.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    /// What the user wants done, in their words.
    pub request: String,
}

/// One plan.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanRef {
    /// The plan: its id or a unique prefix of it.
    pub plan: String,
}

/// Executions, optionally of one plan.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutionFilter {
    /// Only the executions of this plan (an id or a unique prefix).
    #[serde(default)]
    pub plan: Option<String>,
}

/// One execution.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutionRef {
    /// The execution: its id or a unique prefix of it.
    pub execution: String,
}

/// What is new in an execution.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Watch {
    /// The execution: its id or a unique prefix of it.
    pub execution: String,
    /// The `next_cursor` of the previous call; events from there on are returned (0 or
    /// absent: from the start).
    #[serde(default)]
    pub cursor: Option<u64>,
    /// Wait up to this many seconds (at most 30) for something new before answering.
    #[serde(default)]
    pub wait_seconds: Option<u64>,
}

/// One step of an execution.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepRef {
    /// The execution: its id or a unique prefix of it.
    pub execution: String,
    /// The step id.
    pub step: String,
}

/// What to do about a failed step. Only these two: replanning and approving are decisions a
/// human makes outside the agent (ADR 0019).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeviationChoice {
    /// Run the failed step again (with the guidance, if any).
    Retry,
    /// Stop the execution.
    Stop,
}

/// An answer to a pending deviation decision.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerDeviation {
    /// The execution waiting for the decision (an id or a unique prefix).
    pub execution: String,
    /// `retry` or `stop`.
    pub action: DeviationChoice,
    /// For `retry`: what the step's agent should do differently.
    #[serde(default)]
    pub guidance: Option<String>,
}

/// No arguments (any given are refused).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}
