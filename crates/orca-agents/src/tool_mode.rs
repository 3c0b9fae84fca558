//! Tool calls written as JSON in the model's text, for models whose native tool calls are weak
//! (`tool_mode = "json"`), and as a fallback in native mode when a model answers with a JSON
//! block instead of a call.
//!
//! In `json` mode no native tools are offered: the system prompt lists them, and the request
//! carries an output schema ([`output_schema`]) that servers supporting `response_format`
//! `json_schema` (llama.cpp, vLLM, Ollama, OpenAI) use to constrain the answer to one call
//! `{"tool": NAME, "arguments": {…}}`. [`calls_in_text`] reads such a call from the text: the
//! whole text, or a fenced block (```json … ```), or the first balanced `{…}`.

use orca_core::{ToolCall, ToolSpec};
use serde_json::{Value, json};

use orca_llm::backend::generated_call_id;

/// The schema of one call of any of `tools`: `{"tool": NAME, "arguments": PARAMETERS}`.
#[must_use]
pub fn output_schema(tools: &[ToolSpec]) -> Value {
    let one_of: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "type": "object",
                "properties": {
                    "tool": {"type": "string", "enum": [t.name]},
                    "arguments": t.parameters,
                },
                "required": ["tool", "arguments"],
            })
        })
        .collect();
    json!({"anyOf": one_of})
}

/// What the system prompt says in `json` mode: how to call, and the tools with their schemas.
#[must_use]
pub fn instructions(tools: &[ToolSpec]) -> String {
    let mut s = String::from(
        "\n\n## How to call tools\nAnswer every turn with exactly ONE JSON object and nothing else: {\"tool\": \"<name>\", \"arguments\": {...}}. The result comes back in the next message. Tools:\n",
    );
    for t in tools {
        s.push_str(&format!(
            "- `{}`: {}\n  arguments schema: {}\n",
            t.name, t.description, t.parameters
        ));
    }
    s
}

/// A tool's result as the model reads it in `json` mode: an object's fields one per line, a
/// text field's own lines kept (a command's output, a file), not a JSON string of `\n` escapes
/// that a small model must decode to read a traceback. Anything else is returned as it is.
#[must_use]
pub fn result_text(content: &str) -> String {
    let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(content) else {
        return content.to_owned();
    };
    let mut out = String::new();
    for (key, value) in &fields {
        match value {
            Value::String(s) if s.contains('\n') => {
                out.push_str(&format!("{key}:\n{}\n", s.trim_end()));
            }
            Value::String(s) => out.push_str(&format!("{key}: {s}\n")),
            other => out.push_str(&format!("{key}: {other}\n")),
        }
    }
    out.trim_end().to_owned()
}

/// A call found in text.
#[derive(Debug, Clone, PartialEq)]
pub enum TextCall {
    /// `{"tool": NAME, "arguments": {…}}` (or `name` / `parameters`) naming an offered tool.
    Call(ToolCall),
    /// Some other JSON object: possibly the submitted result itself, written without the
    /// envelope (the caller validates it).
    Bare(Value),
}

/// The calls in `text`, in order: every JSON object found (whole text, fenced blocks, or the
/// first balanced object), each read as a call of one of `tools` or a bare object.
#[must_use]
pub fn calls_in_text(text: &str, tools: &[ToolSpec]) -> Vec<TextCall> {
    candidates(text)
        .into_iter()
        .map(|v| as_call(v, tools))
        .collect()
}

fn as_call(v: Value, tools: &[ToolSpec]) -> TextCall {
    let name = v
        .get("tool")
        .or_else(|| v.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let args = v.get("arguments").or_else(|| v.get("parameters")).cloned();
    match (name, args) {
        (Some(name), Some(args)) if tools.iter().any(|t| t.name == name) => {
            let arguments = match args {
                // Some models put the arguments in as JSON text.
                Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
                other => other,
            };
            TextCall::Call(ToolCall {
                id: generated_call_id(0),
                name,
                arguments,
            })
        }
        _ => TextCall::Bare(v),
    }
}

/// JSON objects in `text`: the whole text if it is one, else each fenced block that is one,
/// else the first balanced `{…}` that parses.
fn candidates(text: &str) -> Vec<Value> {
    let parse = |s: &str| {
        serde_json::from_str::<Value>(s.trim())
            .ok()
            .filter(Value::is_object)
    };
    if let Some(v) = parse(text) {
        return vec![v];
    }
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        // Skip the info string (`json`, `JSON`…) up to the end of the line.
        let body_start = after.find('\n').map_or(after.len(), |i| i + 1);
        let body = &after[body_start..];
        let Some(end) = body.find("```") else { break };
        if let Some(v) = parse(&body[..end]) {
            found.push(v);
        }
        rest = &body[end + 3..];
    }
    if found.is_empty()
        && let Some(v) = first_balanced_object(text).and_then(parse)
    {
        found.push(v);
    }
    found
}

/// The first `{…}` with balanced braces (strings respected).
fn first_balanced_object(text: &str) -> Option<&str> {
    let start = text.find('{')?;
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text[start..].char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => depth += 1,
            '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return text.get(start..=start + i);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "read_file".into(),
            description: "reads".into(),
            parameters: json!({"type": "object"}),
        }]
    }

    #[test]
    fn finds_calls_in_every_shape_weak_models_write() {
        let t = tools();
        let whole = calls_in_text(r#"{"tool": "read_file", "arguments": {"path": "a"}}"#, &t);
        assert!(matches!(&whole[..], [TextCall::Call(c)] if c.arguments == json!({"path": "a"})));
        let fenced = calls_in_text(
            "Here is the plan:\n```json\n{\"name\": \"read_file\", \"arguments\": \"{\\\"path\\\": \\\"b\\\"}\"}\n```\nDone.",
            &t,
        );
        assert!(matches!(&fenced[..], [TextCall::Call(c)] if c.arguments == json!({"path": "b"})));
        let prose = calls_in_text(
            r#"Result: {"status": "success", "summary": "a {b}"} ok"#,
            &t,
        );
        assert!(
            matches!(&prose[..], [TextCall::Bare(v)] if v["summary"] == "a {b}"),
            "{prose:?}"
        );
        let unknown = calls_in_text(r#"{"tool": "rm_rf", "arguments": {}}"#, &t);
        assert!(matches!(&unknown[..], [TextCall::Bare(_)]));
        assert!(calls_in_text("no json here", &t).is_empty());
        assert!(calls_in_text("```\nnot json\n```", &t).is_empty());
        assert!(calls_in_text("{ unbalanced", &t).is_empty());
    }

    #[test]
    fn results_read_as_text_with_their_own_lines() {
        let run = json!({"exit_code": 1, "output": "F.\nAssertionError: -1 != 5\n"}).to_string();
        assert_eq!(
            result_text(&run),
            "exit_code: 1\noutput:\nF.\nAssertionError: -1 != 5"
        );
        let listed = json!({"files": ["a.py", "b.py"], "truncated": false}).to_string();
        assert_eq!(
            result_text(&listed),
            "files: [\"a.py\",\"b.py\"]\ntruncated: false"
        );
        assert_eq!(result_text("def f():\n    pass\n"), "def f():\n    pass\n");
        assert_eq!(result_text("[1, 2]"), "[1, 2]");
    }
}
