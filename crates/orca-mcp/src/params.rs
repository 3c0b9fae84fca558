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
    #[schemars(schema_with = "object_or_string")]
    pub document: Value,
}

/// `{"anyOf": [object, string]}`: a schema of `{}` (what `Value` gets) says nothing, and
/// schema checkers flag it.
fn object_or_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "anyOf": [{ "type": "object" }, { "type": "string" }]
    })
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
    /// The plan: its id or a unique prefix of it (`plan` is accepted too).
    #[serde(rename = "plan_id", alias = "plan")]
    pub plan: String,
}

/// Executions, optionally of one plan.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutionFilter {
    /// Only the executions of this plan (an id or a unique prefix; `plan` is accepted too).
    #[serde(default, rename = "plan_id", alias = "plan")]
    #[schemars(with = "String", transform = no_null_default)]
    pub plan: Option<String>,
}

/// One execution.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutionRef {
    /// The execution: its id or a unique prefix of it (`execution` is accepted too).
    #[serde(rename = "execution_id", alias = "execution")]
    pub execution: String,
}

/// What is new in an execution.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Watch {
    /// The execution: its id or a unique prefix of it (`execution` is accepted too).
    #[serde(rename = "execution_id", alias = "execution")]
    pub execution: String,
    /// The `next_cursor` of the previous call; events from there on are returned (0 or
    /// absent: from the start). An integer; generic clients may send it as a string of digits.
    #[serde(default, deserialize_with = "lenient_u64")]
    #[schemars(with = "u64", transform = no_null_default)]
    pub cursor: Option<u64>,
    /// Wait up to this many seconds (at most 30) for something new before answering.
    #[serde(default, deserialize_with = "lenient_u64")]
    #[schemars(with = "u64", transform = no_null_default)]
    pub wait_seconds: Option<u64>,
}

/// One step of an execution.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepRef {
    /// The execution: its id or a unique prefix of it (`execution` is accepted too).
    #[serde(rename = "execution_id", alias = "execution")]
    pub execution: String,
    /// The step id (`step` is accepted too).
    #[serde(rename = "step_id", alias = "step")]
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
    /// The execution waiting for the decision (an id or a unique prefix; `execution` is
    /// accepted too).
    #[serde(rename = "execution_id", alias = "execution")]
    pub execution: String,
    /// `retry` or `stop`.
    pub action: DeviationChoice,
    /// For `retry`: what the step's agent should do differently.
    #[serde(default)]
    #[schemars(with = "String", transform = no_null_default)]
    pub guidance: Option<String>,
}

/// No arguments (any given are refused).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// Drops `"default": null` from an optional argument's schema: its type says it is a string
/// or an integer, and a default outside that type contradicts it (absent means "not given").
fn no_null_default(schema: &mut schemars::Schema) {
    if schema
        .get("default")
        .is_some_and(serde_json::Value::is_null)
    {
        schema.remove("default");
    }
}

/// An optional integer as a number, a string of digits (clients that coerce every argument to
/// text send `"18"`) or null.
fn lenient_u64<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<u64>, D::Error> {
    match Option::<Value>::deserialize(de)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| {
            serde::de::Error::custom(format!("{n}: expected a whole number from 0"))
        }),
        Some(Value::String(s)) => s.trim().parse().map(Some).map_err(|_| {
            serde::de::Error::custom(format!("{s:?}: expected a whole number from 0"))
        }),
        Some(other) => Err(serde::de::Error::custom(format!(
            "{other}: expected a whole number from 0"
        ))),
    }
}
