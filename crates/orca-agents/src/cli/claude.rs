//! Claude Code: `claude -p --output-format stream-json --verbose --permission-mode <mode>`,
//! the prompt on stdin.
//!
//! It prints JSON lines: `system` (init), then `assistant` messages (text and `tool_use`
//! blocks) and `user` messages (the `tool_result` of each of its own tools), in order, and
//! last `{"type":"result", …}` — the one document `--output-format json` would print. The
//! messages and tool uses are the step's transcript; `--verbose` is required for
//! `stream-json` with `-p`. Without a permission mode that allows edits it denies every file
//! write and still ends with `"subtype":"success"`, exit 0: the denials are only in
//! `permission_denials` (seen with Claude Code 2.1), so they are read here and fail the step.

use serde_json::Value;

use std::collections::HashMap;

use orca_core::AgentToolUse;

use super::{Parsed, Said, resume_args, str_at, u64_at};
use orca_llm::pricing::micro_usd;

/// The arguments (the model and extra arguments follow).
pub(super) fn args(permission_mode: &str, resume: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "-p".into(),
        "--output-format".into(),
        "stream-json".into(),
        "--verbose".into(),
        "--permission-mode".into(),
        permission_mode.into(),
    ];
    args.extend(resume_args("--resume", resume));
    args
}

/// Reads the result document.
pub(super) fn parse(values: &[Value]) -> Parsed {
    let mut parsed = Parsed::default();
    // Where each tool use is in the transcript, by its id (its result comes later).
    let mut uses: HashMap<String, usize> = HashMap::new();
    for v in values {
        parsed.session_from(v, &["/session_id"]);
        match v.get("type").and_then(Value::as_str) {
            Some("assistant") => {
                for block in content(v) {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            if let Some(t) = block.get("text").and_then(Value::as_str) {
                                parsed.answered(t);
                            }
                        }
                        Some("tool_use") => {
                            if let Some(id) = block.get("id").and_then(Value::as_str) {
                                uses.insert(id.to_owned(), parsed.said.len());
                            }
                            parsed.said.push(Said::Tool(AgentToolUse {
                                tool: str_at(block, &["/name"])
                                    .unwrap_or_else(|| "a tool".to_owned()),
                                input: block.get("input").cloned().unwrap_or(Value::Null),
                                output: None,
                                ok: true,
                            }));
                        }
                        _ => {}
                    }
                }
                continue;
            }
            Some("user") => {
                for block in content(v) {
                    if block.get("type").and_then(Value::as_str) != Some("tool_result") {
                        continue;
                    }
                    let at = block
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .and_then(|id| uses.get(id));
                    if let Some(Said::Tool(used)) = at.and_then(|i| parsed.said.get_mut(*i)) {
                        used.output = Some(result_text(block.get("content")));
                        used.ok = !block
                            .get("is_error")
                            .and_then(Value::as_bool)
                            .unwrap_or(false);
                    }
                }
                continue;
            }
            Some("result") => {}
            _ => continue,
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

/// The content blocks of a streamed message.
fn content(v: &Value) -> impl Iterator<Item = &Value> {
    v.pointer("/message/content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A tool result's content: a string, or text blocks joined.
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}
