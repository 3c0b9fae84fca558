//! An agent's transcript as `exec logs` and `audit show` print it: the model's answers
//! (`agent.answer`), its tool calls with their results (`tool.call`, `tool.refused`) and the
//! tools a command-line agent's own program ran (`agent.tool`), as the gate recorded them
//! (bounded to 4 KB each, redacted: `orca_services::tools::transcript`).

use std::fmt::Write as _;

use orca_services::events::ExecEvent;
use serde_json::{Map, Value, json};

pub(crate) use orca_services::timeline::is_transcript;
use orca_services::timeline::{answer_tokens, check_outcome, cut_note, tool_outcome};

fn str_of<'a>(data: &'a Value, key: &str) -> Option<&'a str> {
    data.get(key).and_then(Value::as_str)
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
            let tokens = answer_tokens(d)
                .map(|(i, o)| format!(", {i} in / {o} out tokens"))
                .unwrap_or_default();
            let agent = str_of(d, "agent").unwrap_or("?");
            let _ = writeln!(text, "   answer (turn {turn}, {agent}{tokens}):");
            block(text, str_of(d, "text").unwrap_or(""));
        }
        "check.passed" | "check.failed" => {
            let command = str_of(d, "command").unwrap_or("?");
            let millis = d.get("millis").and_then(Value::as_u64).unwrap_or(0);
            let how = check_outcome(d);
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
            let how = tool_outcome(kind, d);
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
