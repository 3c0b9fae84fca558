//! Codex: `codex exec --json -s <sandbox> [--skip-git-repo-check] … -`, the prompt on stdin.
//!
//! Its default sandbox is read-only: edits fail (exit 0), so `workspace-write` is the default
//! here. It refuses to run outside a git repository unless told to skip that check. It prints
//! JSON lines; `{"type":"error","message":"Reconnecting... 1/5 …"}` is a retry notice, not a
//! failure (the run often succeeds after it): only `turn.failed` or a non-zero exit fail a
//! run. With no reachable server it prints "Reconnecting... waiting for network" forever, so
//! the hard timeout ends it. It reports tokens but no cost.

use serde_json::Value;

use orca_core::AgentToolUse;

use super::{Parsed, Said, resume_args, str_at, u64_at};

/// The arguments before the model and extra arguments.
pub(super) fn args(sandbox: &str, in_git: bool) -> Vec<String> {
    let mut args: Vec<String> = vec!["exec".into(), "--json".into(), "-s".into(), sandbox.into()];
    if !in_git {
        args.push("--skip-git-repo-check".into());
    }
    args
}

/// The arguments after the extra ones: the session to resume, and `-` (prompt on stdin).
pub(super) fn finish_args(args: &mut Vec<String>, resume: Option<&str>) {
    args.extend(resume_args("resume", resume));
    args.push("-".into());
}

/// Reads the JSON lines.
pub(super) fn parse(values: &[Value]) -> Parsed {
    let mut parsed = Parsed::default();
    for v in values {
        match v.get("type").and_then(Value::as_str).unwrap_or("") {
            "thread.started" => parsed.session = str_at(v, &["/thread_id"]),
            "item.completed" => match v.pointer("/item/type").and_then(Value::as_str) {
                Some("agent_message") => {
                    parsed.text = str_at(v, &["/item/text"]);
                    if let Some(t) = parsed.text.clone() {
                        parsed.answered(&t);
                    }
                }
                Some("error") => parsed.warnings.extend(str_at(v, &["/item/message"])),
                Some("reasoning" | "todo_list") | None => {}
                Some(tool) => {
                    if let Some(item) = v.get("item") {
                        parsed.said.push(Said::Tool(tool_use(tool, item)));
                    }
                }
            },
            "turn.completed" => {
                // `input_tokens` counts the cached ones too.
                let cached = u64_at(v, "/usage/cached_input_tokens");
                let written = u64_at(v, "/usage/cache_write_input_tokens");
                parsed.usage.input_tokens += u64_at(v, "/usage/input_tokens")
                    .saturating_sub(cached)
                    .saturating_sub(written);
                parsed.usage.cache_read_tokens += cached;
                parsed.usage.cache_write_tokens += written;
                // Reasoning tokens are part of `output_tokens` (and billed as output).
                parsed.usage.output_tokens += u64_at(v, "/usage/output_tokens");
                parsed.usage.turns += 1;
            }
            "turn.failed" => {
                parsed.error = str_at(v, &["/error/message", "/message"])
                    .or_else(|| Some("the turn failed".into()));
            }
            "error" => parsed
                .warnings
                .push(str_at(v, &["/message", "/error/message"]).unwrap_or_else(|| "error".into())),
            _ => {
                // Older Codex versions: {"msg": {"type": "agent_message", "message": "..."}}.
                if v.pointer("/msg/type").and_then(Value::as_str) == Some("agent_message") {
                    parsed.text = str_at(v, &["/msg/message"]);
                    if let Some(t) = parsed.text.clone() {
                        parsed.answered(&t);
                    }
                }
            }
        }
    }
    parsed
}

/// A completed item that is a tool Codex ran itself (`command_execution`, `file_change`,
/// `mcp_tool_call`, `web_search`…): named by its type, its fields the input, a command's
/// output the output; failed when its status says so or a command exited non-zero.
fn tool_use(tool: &str, item: &Value) -> AgentToolUse {
    let mut input = item.clone();
    if let Some(map) = input.as_object_mut() {
        for key in ["id", "type", "status", "aggregated_output", "exit_code"] {
            map.remove(key);
        }
    }
    let failed = item.get("status").and_then(Value::as_str) == Some("failed")
        || item
            .get("exit_code")
            .and_then(Value::as_i64)
            .is_some_and(|c| c != 0);
    AgentToolUse {
        tool: tool.to_owned(),
        input,
        output: str_at(item, &["/aggregated_output", "/error/message", "/result"]),
        ok: !failed,
    }
}
