//! An agent's transcript as `exec logs` and `audit show` print it: the model's answers
//! (`agent.answer`), its tool calls with their results (`tool.call`, `tool.refused`) and the
//! tools a command-line agent's own program ran (`agent.tool`), as the gate recorded them
//! (bounded to 4 KB each, redacted: `orca_services::tools::transcript`).

use std::fmt::Write as _;

use orca_services::events::ExecEvent;
use serde_json::{Map, Value, json};

/// The kinds that make up a transcript.
pub(crate) fn is_transcript(kind: &str) -> bool {
    matches!(
        kind,
        "agent.answer"
            | "tool.call"
            | "tool.refused"
            | "agent.tool"
            | "check.passed"
            | "check.failed"
    )
}

fn str_of<'a>(data: &'a Value, key: &str) -> Option<&'a str> {
    data.get(key).and_then(Value::as_str)
}

/// "(cut at 4096 of 100000 bytes)" when the recorded text is a prefix of what was said.
fn cut_note(data: &Value) -> Option<String> {
    let truncated = data.get("truncated").and_then(Value::as_bool) == Some(true);
    let bytes = data.get("bytes").and_then(Value::as_u64)?;
    truncated.then(|| format!("… (recorded in part: the first 4 KB of {bytes} bytes)"))
}

/// Writes `body`'s lines indented under an item.
fn block(text: &mut String, body: &str) {
    for l in body.lines() {
        let _ = writeln!(text, "     │ {l}");
    }
}

/// One transcript event for people: an answer with its text, a tool call with its arguments,
/// how it ended and its result.
pub(crate) fn line(text: &mut String, e: &ExecEvent) {
    let d = &e.data;
    match e.kind.as_str() {
        "agent.answer" => {
            let turn = d.get("turn").and_then(Value::as_u64).unwrap_or(0);
            // A command-line agent reports no usage per message: none is shown.
            let tokens = d
                .get("usage")
                .map(|u| {
                    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
                    (n("input_tokens"), n("output_tokens"))
                })
                .filter(|(i, o)| i + o > 0)
                .map(|(i, o)| format!(", {i} in / {o} out tokens"))
                .unwrap_or_default();
            let agent = str_of(d, "agent").unwrap_or("?");
            let _ = writeln!(text, "   answer (turn {turn}, {agent}{tokens}):");
            block(text, str_of(d, "text").unwrap_or(""));
        }
        "check.passed" | "check.failed" => {
            let command = str_of(d, "command").unwrap_or("?");
            let millis = d.get("millis").and_then(Value::as_u64).unwrap_or(0);
            let how = match str_of(d, "verdict") {
                Some("passed") => "passed".to_owned(),
                Some("failed") => format!("failed: {}", str_of(d, "status").unwrap_or("?")),
                Some("timed_out") => format!(
                    "failed: timed out after {}s",
                    d.get("after_secs").and_then(Value::as_u64).unwrap_or(0)
                ),
                _ => format!("did not run: {}", str_of(d, "reason").unwrap_or("?")),
            };
            let _ = writeln!(
                text,
                "   check `{}` → {how} ({millis} ms)",
                crate::term::clip(command, 200)
            );
            if e.kind == "check.failed" {
                block(text, str_of(d, "output").unwrap_or(""));
            }
        }
        "agent.tool" => {
            // Run by the agent's own program, not through orca: as the program reported it.
            let tool = str_of(d, "tool").unwrap_or("?");
            let input = d.get("input").map(Value::to_string).unwrap_or_default();
            let how = if d.get("ok").and_then(Value::as_bool) == Some(false) {
                "failed"
            } else {
                "ok"
            };
            let _ = writeln!(
                text,
                "   own tool {tool} {} → {how}",
                crate::term::clip(&input, 200)
            );
            if let Some(output) = str_of(d, "output") {
                block(text, output);
            }
            if let Some(note) = cut_note(d) {
                let _ = writeln!(text, "     {note}");
            }
        }
        kind => {
            let tool = str_of(d, "tool").unwrap_or("?");
            let args = d.get("arguments").map(Value::to_string).unwrap_or_default();
            let how = if kind == "tool.refused" {
                format!("refused: {}", str_of(d, "reason").unwrap_or(""))
            } else if let Some(err) = str_of(d, "error") {
                format!("error: {err}")
            } else {
                match d.get("bytes").and_then(Value::as_u64) {
                    Some(n) => format!("ok ({n} bytes)"),
                    None => "ok".to_owned(),
                }
            };
            let _ = writeln!(
                text,
                "   tool {tool} {} → {}",
                crate::term::clip(&args, 200),
                how.lines().next().unwrap_or("")
            );
            if let Some(result) = str_of(d, "result") {
                block(text, result);
            } else if let Some(err) = str_of(d, "error").filter(|e| e.contains('\n')) {
                block(text, err);
            }
            if let Some(note) = cut_note(d) {
                let _ = writeln!(text, "     {note}");
            }
        }
    }
}

/// A transcript event for `--json`: its `type`, `seq`, `at` and the recorded data.
pub(crate) fn item(e: &ExecEvent) -> Option<Value> {
    if !is_transcript(&e.kind) {
        return None;
    }
    let mut out = Map::new();
    out.insert("type".into(), json!(e.kind));
    out.insert("seq".into(), json!(e.seq));
    out.insert(
        "at".into(),
        json!(
            e.at.format(&time::format_description::well_known::Rfc3339)
                .ok()
        ),
    );
    if let Value::Object(data) = &e.data {
        for (k, v) in data {
            out.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    Some(Value::Object(out))
}

/// A few words for `audit show`'s tree.
pub(crate) fn detail(kind: &str, data: &Value) -> Vec<String> {
    let mut parts = Vec::new();
    if kind == "agent.answer" {
        if let Some(turn) = data.get("turn").and_then(Value::as_u64) {
            parts.push(format!("turn {turn}"));
        }
        if let Some(t) = str_of(data, "text") {
            parts.push(crate::term::headline(t));
        }
        return parts;
    }
    if let Some(tool) = str_of(data, "tool") {
        parts.push(tool.to_owned());
    }
    if let Some(err) = str_of(data, "error").or_else(|| str_of(data, "reason")) {
        parts.push(format!("error: {err}"));
    } else if kind == "agent.tool" {
        let ok = data.get("ok").and_then(Value::as_bool) != Some(false);
        parts.push(
            if ok {
                "ok (its own tool)"
            } else {
                "failed (its own tool)"
            }
            .to_owned(),
        );
    } else if let Some(r) = str_of(data, "result") {
        let bytes = data.get("bytes").and_then(Value::as_u64).unwrap_or(0);
        parts.push(format!("ok ({bytes} bytes): {}", crate::term::headline(r)));
    }
    parts
}
