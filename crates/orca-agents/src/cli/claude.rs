//! Claude Code: `claude -p --output-format json --permission-mode <mode>`, the prompt on stdin.
//!
//! It prints one JSON document, `{"type":"result", …}`. Without a permission mode that allows
//! edits it denies every file write and still ends with `"subtype":"success"`, exit 0: the
//! denials are only in `permission_denials` (seen with Claude Code 2.1), so they are read here
//! and fail the step.

use serde_json::Value;

use super::{Parsed, resume_args, str_at, u64_at};
use crate::pricing::micro_usd;

/// The arguments (the model and extra arguments follow).
pub(super) fn args(permission_mode: &str, resume: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "-p".into(),
        "--output-format".into(),
        "json".into(),
        "--permission-mode".into(),
        permission_mode.into(),
    ];
    args.extend(resume_args("--resume", resume));
    args
}

/// Reads the result document.
pub(super) fn parse(values: &[Value]) -> Parsed {
    let mut parsed = Parsed::default();
    for v in values {
        parsed.session_from(v, &["/session_id"]);
        if v.get("type").and_then(Value::as_str) != Some("result") {
            continue;
        }
        let text = str_at(v, &["/result"]);
        if v.get("is_error").and_then(Value::as_bool).unwrap_or(false) {
            parsed.error = Some(text.clone().unwrap_or_else(|| {
                str_at(v, &["/subtype"]).unwrap_or_else(|| "unknown error".to_owned())
            }));
        }
        parsed.text = text;
        for denial in v
            .get("permission_denials")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let tool = str_at(denial, &["/tool_name"]).unwrap_or_else(|| "a tool".to_owned());
            parsed.denied(tool);
        }
        let cost = v.get("total_cost_usd").and_then(Value::as_f64);
        parsed.cost_reported = cost.is_some();
        parsed.usage = orca_core::Usage {
            input_tokens: u64_at(v, "/usage/input_tokens"),
            output_tokens: u64_at(v, "/usage/output_tokens"),
            cache_read_tokens: u64_at(v, "/usage/cache_read_input_tokens"),
            cache_write_tokens: u64_at(v, "/usage/cache_creation_input_tokens"),
            turns: u32::try_from(u64_at(v, "/num_turns")).unwrap_or(u32::MAX),
            cost_micro_usd: cost.map_or(0, micro_usd),
        };
    }
    parsed
}
