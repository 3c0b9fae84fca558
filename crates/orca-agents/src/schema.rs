//! The forced submit tool and the JSON schemas of what it accepts, written by hand and kept in
//! step with the serde types by the tests below.
//!
//! The schemas offered as native tools are flat objects (every provider accepts `type: object`
//! at the top); which fields belong to which variant is stated in the descriptions and checked
//! by deserializing. Where the schema constrains decoding (`tool_mode = "json"`), the exact
//! schemas are sent instead: one variant per kind (`oneOf`), each holding only its own fields,
//! so a constrained model cannot write a value the validator refuses.

use orca_core::{AgentAnswer, PlannerResponse, TaskResult, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

/// The name of the forced submit tool.
pub const SUBMIT_TOOL: &str = "submit_result";

/// Every failure code ([`orca_core::ErrorCode`]), for the tests that keep the lists in step.
#[cfg(test)]
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

/// The failure codes a model may report of its own work. The others name what orca itself
/// enforces or observes — a budget run out, a timeout, a cancellation, an answer it could not
/// parse — and are orca's to give: a small model that picked `budget_exceeded` for "I could not
/// do it" was counted as a budget failure in an evaluation. `validation` is orca's too: it is
/// never retried, and a small model picked it for every failed attempt of its own (3 of 12
/// trials lost their second attempt).
pub const MODEL_ERROR_CODES: &[&str] = &["task_failed", "tool_refused", "agent_error"];

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
            "code": {"type": "string", "enum": MODEL_ERROR_CODES, "description": "failure: why, as a code (usually task_failed)"},
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
            "code": {"type": "string", "enum": MODEL_ERROR_CODES, "description": "failure: why, as a code"},
            "cause": text("failure: the underlying cause"),
            "output": text("failure: output, if any")
        },
        "required": ["type"],
        "additionalProperties": false
    })
}

/// One variant of an exact schema: `tag` fixed to `value`, only `fields`, `required` required.
fn variant(tag: &str, value: &str, fields: &[(&str, Value)], required: &[&str]) -> Value {
    let mut properties = serde_json::Map::new();
    properties.insert(tag.to_owned(), json!({"type": "string", "enum": [value]}));
    for (name, schema) in fields {
        properties.insert((*name).to_owned(), schema.clone());
    }
    let mut all = vec![tag];
    all.extend_from_slice(required);
    json!({
        "type": "object",
        "properties": properties,
        "required": all,
        "additionalProperties": false
    })
}

/// A failure's fields ([`orca_core::TaskFailure`]).
fn failure_fields() -> Vec<(&'static str, Value)> {
    vec![
        (
            "code",
            json!({"type": "string", "enum": MODEL_ERROR_CODES, "description": "why, as a code (usually task_failed)"}),
        ),
        ("message", text("what happened, one line")),
        ("cause", text("the underlying cause")),
        ("output", text("output, if any")),
    ]
}

/// What a plan id looks like (`PlanId`'s strict form).
const PLAN_ID_PATTERN: &str = "^plan_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";

/// The exact schema of a specialist's result: one variant per `status`.
#[must_use]
pub fn task_result_variants() -> Value {
    json!({"oneOf": [
        variant("status", "success", &[
            ("summary", text("short, self-contained summary later steps see")),
            ("artifacts", strings("things produced (paths, URLs, ids)")),
            ("key_findings", strings("facts later steps should know")),
            ("verification", strings("how the work was checked")),
            ("relevant_files", strings("files that matter for what follows")),
            ("notes", text("anything else worth keeping")),
            ("output", text("full output, if any (not shown to later steps)")),
        ], &["summary"]),
        variant("status", "failure", &failure_fields(), &["code", "message"]),
        variant("status", "interruption", &[
            ("reason", text("why you stopped")),
            ("question", text("the question for the human")),
        ], &["reason"]),
    ]})
}

/// The exact schema of the planner's response: one variant per `type`.
#[must_use]
pub fn planner_response_variants() -> Value {
    json!({"oneOf": [
        variant("type", "answer", &[("text", text("the answer for the user"))], &["text"]),
        variant("type", "plan", &[
            ("plan_id", json!({"type": "string", "pattern": PLAN_ID_PATTERN, "description": "the plan's id, as the plan tools returned it"})),
            ("stage", json!({"type": "string", "enum": ["draft", "proposal"], "description": "proposal once submitted, else draft"})),
            ("message", text("a note for the user")),
        ], &["plan_id", "stage"]),
        variant("type", "failure", &failure_fields(), &["code", "message"]),
    ]})
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

/// Parses a task result a model submitted: [`parse_task_result`], and a failure's code must be
/// one a model may report of itself ([`MODEL_ERROR_CODES`]).
///
/// # Errors
///
/// The serde error, or the code that is orca's, with the codes to use — for the model to repair.
pub fn parse_submitted_task_result(value: &Value) -> Result<TaskResult, String> {
    let result = parse_task_result(value)?;
    if let TaskResult::Failure(f) = &result {
        model_code(f.code.as_str())?;
    }
    Ok(result)
}

/// Parses a planner response a model submitted, its failure code checked as
/// [`parse_submitted_task_result`] does.
///
/// # Errors
///
/// As [`parse_submitted_task_result`].
pub fn parse_submitted_planner_response(value: &Value) -> Result<PlannerResponse, String> {
    let response = parse_planner_response(value)?;
    if let PlannerResponse::Failure(f) = &response {
        model_code(f.code.as_str())?;
    }
    Ok(response)
}

fn model_code(code: &str) -> Result<(), String> {
    if MODEL_ERROR_CODES.contains(&code) {
        Ok(())
    } else {
        Err(format!(
            "code `{code}` is orca's own (it gives it when it ends an attempt itself); a failure \
             you report has code {}: use task_failed if the work could not be done",
            MODEL_ERROR_CODES.join(", ")
        ))
    }
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
    use proptest::prelude::*;
    use proptest::strategy::Union;

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
        assert!(MODEL_ERROR_CODES.iter().all(|c| ERROR_CODES.contains(c)));
    }

    #[test]
    fn a_model_reports_only_its_own_failure_codes() {
        let mut refused = Vec::new();
        for code in ERROR_CODES {
            let failure = json!({"status": "failure", "code": code, "message": "could not"});
            let plan = json!({"type": "failure", "code": code, "message": "could not"});
            let task = parse_submitted_task_result(&failure);
            let planner = parse_submitted_planner_response(&plan);
            // The same value is a valid result as such (a command-line agent's, orca's own).
            assert!(parse_task_result(&failure).is_ok());
            assert_eq!(task.is_ok(), planner.is_ok(), "{code}");
            match task {
                Ok(_) => assert!(MODEL_ERROR_CODES.contains(code), "{code} accepted"),
                Err(e) => {
                    assert!(e.contains("use task_failed"), "{e}");
                    refused.push(*code);
                }
            }
        }
        assert_eq!(refused.len(), ERROR_CODES.len() - MODEL_ERROR_CODES.len());
        assert!(refused.contains(&"budget_exceeded"));
        // Never retried: a model's own failure must leave it its next attempt.
        assert!(refused.contains(&"validation"));
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

    /// Whether `value` is valid under `schema`, for the subset of JSON Schema written here
    /// (`oneOf`, `anyOf`, objects with `required` and `additionalProperties: false`, strings
    /// with `enum`, arrays). `pattern` is not checked.
    fn valid(schema: &Value, value: &Value) -> bool {
        if let Some(variants) = schema["oneOf"].as_array() {
            return variants.iter().filter(|v| valid(v, value)).count() == 1;
        }
        if let Some(variants) = schema["anyOf"].as_array() {
            return variants.iter().any(|v| valid(v, value));
        }
        match schema["type"].as_str() {
            Some("object") => {
                let Some(obj) = value.as_object() else {
                    return false;
                };
                let props = schema["properties"].as_object().unwrap();
                let required_present = schema["required"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .all(|r| obj.contains_key(r.as_str().unwrap()));
                let known = schema["additionalProperties"] != false
                    || obj.keys().all(|k| props.contains_key(k));
                required_present
                    && known
                    && obj
                        .iter()
                        .all(|(k, v)| props.get(k).is_none_or(|p| valid(p, v)))
            }
            Some("string") => {
                value.is_string() && schema["enum"].as_array().is_none_or(|e| e.contains(value))
            }
            Some("array") => value
                .as_array()
                .is_some_and(|a| a.iter().all(|v| valid(&schema["items"], v))),
            _ => true,
        }
    }

    /// Values valid under `schema` (the same subset; `pattern` honoured).
    fn values(schema: &Value) -> BoxedStrategy<Value> {
        if let Some(variants) = schema["oneOf"].as_array() {
            return Union::new(variants.iter().map(values)).boxed();
        }
        match schema["type"].as_str() {
            Some("object") => {
                let required: Vec<&str> = schema["required"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r.as_str().unwrap())
                    .collect();
                let fields: Vec<BoxedStrategy<Option<(String, Value)>>> = schema["properties"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(name, p)| {
                        let is_required = required.contains(&name.as_str());
                        let name = name.clone();
                        let field = values(p).prop_map(move |v| (name.clone(), v));
                        if is_required {
                            field.prop_map(Some).boxed()
                        } else {
                            proptest::option::of(field).boxed()
                        }
                    })
                    .collect();
                fields
                    .prop_map(|f| Value::Object(f.into_iter().flatten().collect()))
                    .boxed()
            }
            Some("string") => {
                if let Some(e) = schema["enum"].as_array() {
                    proptest::sample::select(e.clone()).boxed()
                } else if let Some(p) = schema["pattern"].as_str() {
                    let body = p.trim_start_matches('^').trim_end_matches('$');
                    proptest::string::string_regex(body)
                        .unwrap()
                        .prop_map(Value::String)
                        .boxed()
                } else {
                    any::<String>().prop_map(Value::String).boxed()
                }
            }
            Some("array") => proptest::collection::vec(values(&schema["items"]), 0..3)
                .prop_map(Value::Array)
                .boxed(),
            other => panic!("no generator for {other:?}"),
        }
    }

    proptest! {
        /// Every value valid under the json-mode schema is accepted by the validator.
        #[test]
        fn exact_task_schema_round_trips(v in values(&task_result_variants())) {
            prop_assert!(valid(&task_result_variants(), &v), "{v}");
            prop_assert!(parse_task_result(&v).is_ok(), "{v}: {:?}", parse_task_result(&v));
        }

        #[test]
        fn exact_planner_schema_round_trips(v in values(&planner_response_variants())) {
            prop_assert!(valid(&planner_response_variants(), &v), "{v}");
            prop_assert!(parse_planner_response(&v).is_ok(), "{v}: {:?}", parse_planner_response(&v));
        }
    }

    #[test]
    fn the_exact_schemas_hold_what_the_validator_writes_and_refuse_mixed_variants() {
        // What the 1.5B model wrote under the flat schema: valid there, refused by the
        // validator, and outside the exact schema.
        let mixed = json!({"status": "success", "summary": "done", "code": "task_failed"});
        assert!(valid(&task_result_schema(), &mixed));
        assert!(parse_task_result(&mixed).is_err());
        assert!(!valid(&task_result_variants(), &mixed));
        // A plan without its id, holding an answer's text instead.
        let mixed_plan = json!({"type": "plan", "stage": "draft", "text": "t"});
        assert!(valid(&planner_response_schema(), &mixed_plan));
        assert!(parse_planner_response(&mixed_plan).is_err());
        assert!(!valid(&planner_response_variants(), &mixed_plan));
        // Every shape the validator's own types write is inside the exact schema.
        for v in [
            json!({"status": "success", "summary": "s", "artifacts": ["a"], "notes": "n"}),
            json!({"status": "failure", "code": "task_failed", "message": "m", "output": "o"}),
            json!({"status": "interruption", "reason": "r", "question": "q"}),
        ] {
            let parsed = parse_task_result(&v).unwrap();
            assert!(
                valid(
                    &task_result_variants(),
                    &serde_json::to_value(parsed).unwrap()
                ),
                "{v}"
            );
        }
    }

    #[test]
    fn exact_schemas_snapshot() {
        insta::assert_json_snapshot!("task_result_variants", task_result_variants());
        insta::assert_json_snapshot!("planner_response_variants", planner_response_variants());
    }
}
