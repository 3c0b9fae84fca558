//! Codex: `codex exec --json -s <sandbox> [--skip-git-repo-check] … -`, the prompt on stdin.
//!
//! Its default sandbox is read-only: edits fail (exit 0), so `workspace-write` is the default
//! here. It refuses to run outside a git repository unless told to skip that check. It prints
//! JSON lines; `{"type":"error","message":"Reconnecting... 1/5 …"}` is a retry notice, not a
//! failure (the run often succeeds after it): only `turn.failed` or a non-zero exit fail a
//! run. With no reachable server it prints "Reconnecting... waiting for network" forever, so
//! the hard timeout ends it. It reports tokens but no cost.

use serde_json::Value;

use super::{Parsed, resume_args, str_at, u64_at};

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
                Some("agent_message") => parsed.text = str_at(v, &["/item/text"]),
                Some("error") => parsed.warnings.extend(str_at(v, &["/item/message"])),
                _ => {}
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
                }
            }
        }
    }
    parsed
}
