//! What the gate records of an agent's conversation: each tool call's result or
//! error (in its `tool.call` entry) and each model answer (`agent.answer`), bounded to
//! [`MAX_RECORDED_BYTES`] with the original length noted. The store redacts the entry before
//! it is hashed, like every audit detail.
//!
//! A cut never keeps part of a word: the text is cut back to the last delimiter (white space,
//! a quote, a comma, a bracket…) before the limit, so a secret straddling the limit is left
//! out whole rather than recorded in part, where the redactor (which matches whole values and
//! shapes) could not recognise it.

use orca_core::{ToolError, Usage};
use serde_json::{Value, json};

/// The most bytes of one tool result, error or answer recorded in the audit log.
pub const MAX_RECORDED_BYTES: usize = 4096;

/// A text as recorded: at most `max` bytes, whole words only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bounded {
    /// What is recorded.
    pub text: String,
    /// The original length in bytes.
    pub bytes: usize,
    /// Whether `text` is shorter than the original.
    pub truncated: bool,
}

/// Whether `c` may end a recorded prefix: it cannot be part of a credential.
fn delimiter(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '"' | '\'' | '`' | ',' | ';' | '{' | '}' | '[' | ']' | '(' | ')' | '<' | '>' | '|'
        )
}

/// `text` bounded to `max` bytes, cut after the last delimiter at or before the limit.
pub(super) fn bounded(text: &str, max: usize) -> Bounded {
    if text.len() <= max {
        return Bounded {
            text: text.to_owned(),
            bytes: text.len(),
            truncated: false,
        };
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    // Keep up to and including the last delimiter: the word after it may be cut.
    let keep = text[..cut]
        .char_indices()
        .rev()
        .find(|(_, c)| delimiter(*c))
        .map_or(0, |(i, c)| i + c.len_utf8());
    Bounded {
        text: text[..keep].to_owned(),
        bytes: text.len(),
        truncated: true,
    }
}

/// A tool's result as the model reads it: a string as it is, anything else as JSON text.
fn result_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The data of a `tool.call` entry, written once the call returned.
pub(super) fn tool_call_data(
    agent: &orca_core::AgentId,
    call: &orca_core::ToolCall,
    result: &Result<Value, ToolError>,
) -> Value {
    let (ok, error, recorded) = match result {
        Ok(value) => (true, None, bounded(&result_text(value), MAX_RECORDED_BYTES)),
        Err(e) => {
            let b = bounded(&e.message, MAX_RECORDED_BYTES);
            (false, Some(b.text.clone()), b)
        }
    };
    let (arguments, arguments_truncated) = bounded_arguments(&call.arguments);
    json!({
        "agent": agent,
        "tool": call.name,
        "arguments": arguments,
        "arguments_bytes": call.arguments.to_string().len(),
        "arguments_truncated": arguments_truncated,
        "ok": ok,
        "error": error,
        "result": ok.then_some(&recorded.text),
        "bytes": recorded.bytes,
        "truncated": recorded.truncated,
    })
}

/// The data of a `tool.refused` entry: the call's arguments bounded, and why (when a
/// confinement rule refused it; none when the tool was not granted).
pub(super) fn refused_data(
    agent: &orca_core::AgentId,
    call: &orca_core::ToolCall,
    reason: Option<&str>,
) -> Value {
    let (arguments, arguments_truncated) = bounded_arguments(&call.arguments);
    let mut data = json!({
        "agent": agent,
        "tool": call.name,
        "arguments": arguments,
        "arguments_truncated": arguments_truncated,
    });
    if let (Some(reason), Some(map)) = (reason, data.as_object_mut()) {
        map.insert(
            "reason".into(),
            Value::String(bounded(reason, MAX_RECORDED_BYTES).text),
        );
    }
    data
}

/// The most items of one array in a tool call's arguments recorded.
const MAX_RECORDED_ITEMS: usize = 64;

/// A tool call's arguments as recorded: the same JSON shape (so a path or a command stays
/// whole and readable), every string bounded like a result (a big `write_file` content is
/// cut to [`MAX_RECORDED_BYTES`], whole words only) and long arrays cut; and whether anything
/// was cut.
fn bounded_arguments(value: &Value) -> (Value, bool) {
    match value {
        Value::String(s) => {
            let b = bounded(s, MAX_RECORDED_BYTES);
            (Value::String(b.text), b.truncated)
        }
        Value::Array(items) => {
            let mut cut = items.len() > MAX_RECORDED_ITEMS;
            let kept = items
                .iter()
                .take(MAX_RECORDED_ITEMS)
                .map(|v| {
                    let (v, c) = bounded_arguments(v);
                    cut |= c;
                    v
                })
                .collect();
            (Value::Array(kept), cut)
        }
        Value::Object(map) => {
            let mut cut = false;
            let kept = map
                .iter()
                .map(|(k, v)| {
                    let (v, c) = bounded_arguments(v);
                    cut |= c;
                    (k.clone(), v)
                })
                .collect();
            (Value::Object(kept), cut)
        }
        other => (other.clone(), false),
    }
}

/// The data of an `agent.tool` entry: a tool the agent's own program ran.
pub(super) fn agent_tool_data(agent: &orca_core::AgentId, used: &orca_core::AgentToolUse) -> Value {
    let (input, input_truncated) = bounded_arguments(&used.input);
    let output = used
        .output
        .as_deref()
        .map(|o| bounded(o, MAX_RECORDED_BYTES));
    json!({
        "agent": agent,
        "tool": used.tool,
        "input": input,
        "input_truncated": input_truncated,
        "ok": used.ok,
        "output": output.as_ref().map(|b| &b.text),
        "bytes": output.as_ref().map_or(0, |b| b.bytes),
        "truncated": output.as_ref().is_some_and(|b| b.truncated),
    })
}

/// The data of an `agent.answer` entry: the model's text in one turn.
pub(super) fn answer_data(
    agent: &orca_core::AgentId,
    turn: u32,
    text: &str,
    usage: &Usage,
) -> Value {
    let b = bounded(text, MAX_RECORDED_BYTES);
    json!({
        "agent": agent,
        "turn": turn,
        "text": b.text,
        "bytes": b.bytes,
        "truncated": b.truncated,
        "usage": usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_texts_are_kept_whole() {
        let b = bounded("hello world", 64);
        assert_eq!(b.text, "hello world");
        assert_eq!((b.bytes, b.truncated), (11, false));
    }

    #[test]
    fn a_cut_never_keeps_part_of_a_word() {
        let secret = "s3cr3t-VALUE-0123456789abcdef";
        for pad in 0..secret.len() + 8 {
            let text = format!("{} {secret} tail", "x ".repeat(pad));
            let max = 2 * pad + 10;
            let b = bounded(&text, max);
            assert!(b.text.len() <= max);
            assert!(b.truncated);
            assert_eq!(b.bytes, text.len());
            // Either the whole secret or none of it; never a piece of it.
            for cut in 4..secret.len() {
                let piece = &secret[..cut];
                assert!(
                    !b.text.contains(piece) || b.text.contains(secret),
                    "{pad}: `{}` holds a piece of the secret",
                    b.text
                );
            }
        }
    }

    #[test]
    fn arguments_keep_their_shape_and_big_strings_are_cut() {
        let secret = "s3cr3t-VALUE-0123456789abcdef";
        let content = format!("{} {secret} {}", "word ".repeat(818), "more ".repeat(5000));
        let args = json!({ "path": "src/lib.rs", "content": content, "n": 3,
                           "list": (0..100).collect::<Vec<u32>>() });
        let (recorded, cut) = bounded_arguments(&args);
        assert!(cut);
        assert_eq!(recorded["path"], "src/lib.rs");
        assert_eq!(recorded["n"], 3);
        assert_eq!(
            recorded["list"].as_array().map(Vec::len),
            Some(MAX_RECORDED_ITEMS)
        );
        let text = recorded["content"].as_str().unwrap_or_default();
        assert!(text.len() <= MAX_RECORDED_BYTES, "{}", text.len());
        for n in 4..secret.len() {
            assert!(
                !text.contains(&secret[..n]) || text.contains(secret),
                "piece of the secret"
            );
        }
        let small = json!({ "path": "a", "lines": [1, 2] });
        assert_eq!(bounded_arguments(&small), (small.clone(), false));
    }

    #[test]
    fn cuts_land_on_char_boundaries_and_json_delimiters() {
        let text = format!(
            "{{\"a\":\"{}\",\"b\":\"{}\"}}",
            "é".repeat(10),
            "z".repeat(50)
        );
        let b = bounded(&text, 40);
        assert_eq!(b.text, "{\"a\":\"éééééééééé\",\"b\":\"");
        let b = bounded(&"é".repeat(100), 11);
        assert_eq!(b.text, "", "one long word is left out whole");
        assert!(b.truncated);
    }
}
