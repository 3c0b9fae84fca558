//! opencode: `opencode run --format json [--auto]`, the prompt on stdin.
//!
//! A prompt given as an argument arrives wrapped in quotes with every inner quote escaped; on
//! stdin it arrives intact. Without `--auto` a permission set to "ask" is rejected
//! automatically and the run ends with no text and exit 0; such rejections (and "deny" rules)
//! appear as `tool_use` parts with `"status":"error"` and are read here. It prints JSON lines,
//! each carrying the `sessionID`; `step_finish` parts carry tokens and a cost (0 for models it
//! has no price for, which are then priced from orca's table).

use serde_json::Value;

use orca_core::AgentToolUse;

use super::{Parsed, Said, resume_args, str_at, u64_at};
use orca_llm::pricing::micro_usd;

/// The messages opencode gives a tool call its permission rules refused.
const DENIED: &[&str] = &[
    "rejected permission to use",
    "specified a rule which prevents you from using",
];

/// The arguments (the model and extra arguments follow).
pub(super) fn args(permission_mode: &str, resume: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = vec!["run".into(), "--format".into(), "json".into()];
    match permission_mode {
        "auto" => args.push("--auto".into()),
        "plan" => args.extend(["--agent".into(), "plan".into()]),
        _ => {}
    }
    args.extend(resume_args("--session", resume));
    args
}

/// Reads the JSON lines.
pub(super) fn parse(values: &[Value]) -> Parsed {
    let mut parsed = Parsed::default();
    let mut cost = 0u64;
    for v in values {
        parsed.session_from(v, &["/sessionID", "/part/sessionID"]);
        match v.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => {
                if let Some(t) = str_at(v, &["/part/text", "/text"])
                    && !t.trim().is_empty()
                {
                    parsed.answered(&t);
                    parsed.text = Some(t);
                }
            }
            "tool_use" => {
                let tool = str_at(v, &["/part/tool"]).unwrap_or_else(|| "a tool".into());
                let status = v.pointer("/part/state/status").and_then(Value::as_str);
                let error = str_at(v, &["/part/state/error"]);
                if status == Some("error")
                    && error
                        .as_deref()
                        .is_some_and(|e| DENIED.iter().any(|d| e.contains(d)))
                {
                    parsed.denied(tool.clone());
                }
                parsed.said.push(Said::Tool(AgentToolUse {
                    tool,
                    input: v
                        .pointer("/part/state/input")
                        .cloned()
                        .unwrap_or(Value::Null),
                    output: str_at(v, &["/part/state/output"]).or(error),
                    ok: status != Some("error"),
                }));
            }
            "step_finish" => {
                parsed.usage.input_tokens += u64_at(v, "/part/tokens/input");
                // Reasoning tokens are billed as output.
                parsed.usage.output_tokens +=
                    u64_at(v, "/part/tokens/output") + u64_at(v, "/part/tokens/reasoning");
                parsed.usage.cache_read_tokens += u64_at(v, "/part/tokens/cache/read");
                parsed.usage.cache_write_tokens += u64_at(v, "/part/tokens/cache/write");
                parsed.usage.turns += 1;
                cost += v
                    .pointer("/part/cost")
                    .and_then(Value::as_f64)
                    .map_or(0, micro_usd);
            }
            "error" => {
                parsed.error = str_at(
                    v,
                    &[
                        "/error/data/message",
                        "/error/message",
                        "/error",
                        "/message",
                    ],
                )
                .or_else(|| Some("unknown error".into()));
            }
            _ => {}
        }
    }
    parsed.usage.cost_micro_usd = cost;
    parsed.cost_reported = cost > 0;
    parsed
}
