//! The forced submit tool and the JSON schemas of what it accepts, written by hand and kept in
//! step with the serde types by the tests below.
//!
//! Schemas are flat objects (every provider accepts `type: object` at the top); which fields
//! belong to which variant is stated in the descriptions and checked by deserializing.

use orca_core::{AgentAnswer, PlannerResponse, TaskResult, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

/// The name of the forced submit tool.
pub const SUBMIT_TOOL: &str = "submit_result";

const ERROR_CODES: &[&str] = &[
    "validation",
    "unknown_agent",
    "session_not_found",
    "agent_error",
    "timeout",
    "interrupted",
    "parse_error",
    "budget_exceeded",
    "cancelled",
    "tool_refused",
    "task_failed",
];

/// A string field.
fn text(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

/// A list of strings.
fn strings(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string"}, "description": description})
}

/// The schema of a specialist's result ([`TaskResult`]).
#[must_use]
pub fn task_result_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["success", "failure", "interruption"],
                "description": "success: summary (+ optional lists, notes); failure: code, message (+ cause); interruption: reason (+ question)"},
            "summary": text("success: short, self-contained summary later steps see"),
            "artifacts": strings("success: things produced (paths, URLs, ids)"),
            "key_findings": strings("success: facts later steps should know"),
            "verification": strings("success: how the work was checked"),
            "relevant_files": strings("success: files that matter for what follows"),
            "notes": text("success: anything else worth keeping"),
            "output": text("success: full output, if any (not shown to later steps)"),
            "code": {"type": "string", "enum": ERROR_CODES, "description": "failure: why, as a code (usually task_failed)"},
            "message": text("failure: what happened, one line"),
            "cause": text("failure: the underlying cause"),
            "reason": text("interruption: why you stopped"),
            "question": text("interruption: the question for the human")
        },
        "required": ["status"],
        "additionalProperties": false
    })
}

/// The schema of the planner's response ([`PlannerResponse`]).
#[must_use]
pub fn planner_response_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": ["answer", "plan", "failure"],
                "description": "answer: text; plan: plan_id, stage (+ message); failure: code, message (+ cause)"},
            "text": text("answer: the answer for the user"),
            "plan_id": text("plan: the plan's id (plan_...)"),
            "stage": {"type": "string", "enum": ["draft", "proposal"], "description": "plan: proposal once submitted, else draft"},
            "message": text("plan: a note for the user; failure: what happened"),
            "code": {"type": "string", "enum": ERROR_CODES, "description": "failure: why, as a code"},
            "cause": text("failure: the underlying cause"),
            "output": text("failure: output, if any")
        },
        "required": ["type"],
        "additionalProperties": false
    })
}

/// The schema of an answer to a question.
#[must_use]
pub fn answer_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "answer": text("the answer")
        },
        "required": ["answer"],
        "additionalProperties": false
    })
}

/// The submit tool offered with a schema.
#[must_use]
pub fn submit_tool(schema: Value, what: &str) -> ToolSpec {
    ToolSpec {
        name: SUBMIT_TOOL.to_owned(),
        description: format!(
            "Submit your final {what}. Call this exactly once, when you are done; the arguments are validated."
        ),
        parameters: schema,
    }
}

/// Parses a submitted task result.
///
/// # Errors
///
/// The serde error, for the model to repair.
pub fn parse_task_result(value: &Value) -> Result<TaskResult, String> {
    TaskResult::deserialize(value).map_err(|e| e.to_string())
}

/// Parses a submitted planner response.
///
/// # Errors
///
/// The serde error, for the model to repair.
pub fn parse_planner_response(value: &Value) -> Result<PlannerResponse, String> {
    PlannerResponse::deserialize(value).map_err(|e| e.to_string())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmittedAnswer {
    answer: String,
}

/// Parses a submitted answer.
///
/// # Errors
///
/// The serde error, for the model to repair.
pub fn parse_answer(value: &Value) -> Result<AgentAnswer, String> {
    SubmittedAnswer::deserialize(value)
        .map(|a| AgentAnswer {
            answer: a.answer,
            session_id: None,
        })
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use orca_core::{ErrorCode, PlanId, PlanRefStage, TaskFailure, TaskInterruption, TaskSuccess};

    use super::*;

    fn props(schema: &Value) -> BTreeSet<String> {
        schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }

    fn keys(v: &Value) -> BTreeSet<String> {
        v.as_object().unwrap().keys().cloned().collect()
    }

    /// A failure with every optional field set, so that each one meets the schema.
    fn every_failure_field(code: ErrorCode) -> TaskFailure {
        TaskFailure {
            code,
            message: "m".into(),
            cause: Some("c".into()),
            output: Some("o".into()),
        }
    }

    #[test]
    fn task_schema_matches_serde() {
        let full = [
            TaskResult::Success(TaskSuccess {
                summary: "s".into(),
                artifacts: vec!["a".into()],
                key_findings: vec!["k".into()],
                verification: vec!["v".into()],
                relevant_files: vec!["f".into()],
                notes: Some("n".into()),
                output: Some("o".into()),
            }),
            TaskResult::Failure(every_failure_field(ErrorCode::TaskFailed)),
            TaskResult::Interruption(TaskInterruption {
                reason: "r".into(),
                question: Some("q".into()),
            }),
        ];
        let schema = task_result_schema();
        let mut union = BTreeSet::new();
        for v in &full {
            let json = serde_json::to_value(v).unwrap();
            union.extend(keys(&json));
            // Every value the schema describes parses back.
            assert_eq!(&parse_task_result(&json).unwrap(), v);
        }
        assert_eq!(
            union,
            props(&schema),
            "schema properties drifted from TaskResult"
        );
        let statuses: BTreeSet<String> = schema["properties"]["status"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(statuses.len(), 3);
        // Every error code in the schema is one serde knows, and none is missing.
        for code in ERROR_CODES {
            let f: ErrorCode = serde_json::from_value(json!(code)).unwrap();
            assert_eq!(f.as_str(), *code);
        }
        assert_eq!(
            ERROR_CODES.len(),
            11,
            "ErrorCode gained a variant: update ERROR_CODES"
        );
    }

    #[test]
    fn planner_schema_matches_serde() {
        let full = [
            PlannerResponse::Answer { text: "t".into() },
            PlannerResponse::Plan {
                plan_id: PlanId::new(),
                stage: PlanRefStage::Proposal,
                message: Some("m".into()),
            },
            PlannerResponse::Failure(every_failure_field(ErrorCode::AgentError)),
        ];
        let mut union = BTreeSet::new();
        for v in &full {
            let json = serde_json::to_value(v).unwrap();
            union.extend(keys(&json));
            assert_eq!(&parse_planner_response(&json).unwrap(), v);
        }
        assert_eq!(union, props(&planner_response_schema()));
    }

    #[test]
    fn answer_schema_matches_serde() {
        let a = parse_answer(&json!({"answer": "x"})).unwrap();
        assert_eq!(a.answer, "x");
        assert_eq!(
            props(&answer_schema()),
            ["answer".to_owned()].into_iter().collect()
        );
        assert!(parse_answer(&json!({"answer": "x", "extra": 1})).is_err());
        assert!(
            parse_task_result(&json!({"status": "success"}))
                .unwrap_err()
                .contains("summary")
        );
    }
}
