//! A scripted model behind a local HTTP server, speaking what each real command-line agent
//! needs (found by running them against it and logging their requests, see ADR 0020):
//! Anthropic Messages with streaming (Claude Code, `POST /v1/messages?beta=true`), the OpenAI
//! Responses API as server-sent events (Codex, `POST /v1/responses`), OpenAI chat completions
//! streamed (opencode, `POST /v1/chat/completions`).
//!
//! The script: if the agent offers its file-writing tool (`Write`, `apply_patch`, `write`) and
//! no tool result has come back, the model writes [`EDITED`] to the target file with it; once a
//! tool result is back it ends with a JSON result block — a success, or (when it is not told
//! to lie) a failure if the tool result says the call was refused. Other requests (titles) get
//! a short text. Usage per response is fixed so that the parsed totals can be checked.

use std::path::PathBuf;

use serde_json::{Value, json};
use wiremock::{Request, Respond, ResponseTemplate};

/// The words in a task that make the model write the file.
pub(crate) const ASK_FOR_EDIT: &str = "Write hello.txt";

/// What the model writes.
pub(crate) const EDITED: &str = "edited by the model\n";

/// Anthropic usage per response: input, output.
pub(crate) const ANTHROPIC_USAGE: (u64, u64) = (11, 7);
/// Responses API usage per response: input (cached included), cached, output.
pub(crate) const RESPONSES_USAGE: (u64, u64, u64) = (50, 20, 9);
/// Chat completions usage per response: prompt (cached included), cached, completion.
pub(crate) const CHAT_USAGE: (u64, u64, u64) = (40, 10, 8);

/// The scripted model.
#[derive(Debug, Clone)]
pub(crate) struct FakeModel {
    /// The file to write (absolute).
    pub(crate) target: PathBuf,
    /// Claim success even when the edit was refused (so that only orca can notice).
    pub(crate) lies: bool,
}

enum Action {
    Edit,
    Final(String),
}

impl FakeModel {
    fn decide(&self, offers_edit: bool, tool_result: Option<&str>) -> Action {
        match tool_result {
            None if offers_edit => Action::Edit,
            None => Action::Final("An answer.".into()),
            Some(out) => {
                let lower = out.to_lowercase();
                let refused = [
                    "rejected",
                    "blocked",
                    "denied",
                    "haven't granted",
                    "not granted",
                ]
                .iter()
                .any(|w| lower.contains(w));
                if refused && !self.lies {
                    Action::Final(format!(
                        "The edit was refused.\n```json\n{}\n```",
                        json!({"status": "failure", "code": "task_failed", "message": format!("the edit was refused: {}", first_line(out))})
                    ))
                } else {
                    Action::Final(
                        "Done.\n```json\n{\"status\":\"success\",\"summary\":\"wrote hello.txt\",\"relevant_files\":[\"hello.txt\"]}\n```"
                            .into(),
                    )
                }
            }
        }
    }

    fn anthropic(&self, body: &Value) -> String {
        let offers = tool_names(body, "/tools", "/name")
            .iter()
            .any(|n| n == "Write");
        let result = body
            .pointer("/messages")
            .and_then(Value::as_array)
            .and_then(|m| m.last())
            .and_then(|m| m.get("content"))
            .and_then(Value::as_array)
            .and_then(|blocks| {
                blocks
                    .iter()
                    .find(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            })
            .map(|b| {
                let text = match b.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                if b.get("is_error").and_then(Value::as_bool) == Some(true) {
                    format!("error: {text}")
                } else {
                    text
                }
            });
        let (input, output) = ANTHROPIC_USAGE;
        let mut events = vec![(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": body.get("model"), "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": input, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}}}),
        )];
        let stop = match self.decide(offers, result.as_deref()) {
            Action::Edit => {
                let input = json!({"file_path": self.target, "content": EDITED}).to_string();
                events.push(("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {}}})));
                events.push(("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": input}})));
                "tool_use"
            }
            Action::Final(text) => {
                events.push(("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})));
                events.push(("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})));
                "end_turn"
            }
        };
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ));
        events.push(("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": output}})));
        events.push(("message_stop", json!({"type": "message_stop"})));
        sse(events.into_iter().map(|(e, d)| (Some(e), d)))
    }

    fn responses(&self, body: &Value) -> String {
        let tools = body.pointer("/tools").and_then(Value::as_array);
        let patch_tool = tools.and_then(|t| {
            t.iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("apply_patch"))
        });
        let result = body
            .pointer("/input")
            .and_then(Value::as_array)
            .and_then(|items| {
                items.iter().rev().find(|i| {
                    matches!(
                        i.get("type").and_then(Value::as_str),
                        Some("function_call_output" | "custom_tool_call_output")
                    )
                })
            })
            .map(|i| match i.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            });
        let item = match self.decide(patch_tool.is_some(), result.as_deref()) {
            Action::Edit => {
                let patch = format!(
                    "*** Begin Patch\n*** Add File: {}\n+{}*** End Patch\n",
                    self.target.display(),
                    EDITED
                );
                if patch_tool
                    .and_then(|t| t.get("type"))
                    .and_then(Value::as_str)
                    == Some("custom")
                {
                    json!({"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_1", "name": "apply_patch", "input": patch, "status": "completed"})
                } else {
                    json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "apply_patch", "arguments": json!({"input": patch}).to_string(), "status": "completed"})
                }
            }
            Action::Final(text) => {
                json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]})
            }
        };
        let (input, cached, output) = RESPONSES_USAGE;
        sse([
            (
                Some("response.created"),
                json!({"type": "response.created", "response": {"id": "resp_1"}}),
            ),
            (
                Some("response.output_item.done"),
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            ),
            (
                Some("response.completed"),
                json!({"type": "response.completed", "response": {"id": "resp_1", "usage": {"input_tokens": input, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": input + output}}}),
            ),
        ])
    }

    fn chat(&self, body: &Value) -> String {
        let offers = tool_names(body, "/tools", "/function/name")
            .iter()
            .any(|n| n == "write");
        let result = body
            .pointer("/messages")
            .and_then(Value::as_array)
            .and_then(|m| m.last())
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
            .map(|m| match m.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            });
        let base = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": body.get("model")});
        let chunk = |choices: Value| {
            let mut c = base.clone();
            c["choices"] = choices;
            c
        };
        let mut chunks = match self.decide(offers, result.as_deref()) {
            Action::Edit => {
                let args = json!({"filePath": self.target, "content": EDITED}).to_string();
                vec![
                    chunk(
                        json!([{"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "write", "arguments": args}}]}, "finish_reason": null}]),
                    ),
                    chunk(json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])),
                ]
            }
            Action::Final(text) => vec![
                chunk(
                    json!([{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]),
                ),
                chunk(json!([{"index": 0, "delta": {}, "finish_reason": "stop"}])),
            ],
        };
        let (prompt, cached, completion) = CHAT_USAGE;
        let mut last = chunk(json!([]));
        last["usage"] = json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}});
        chunks.push(last);
        let mut out = sse(chunks.into_iter().map(|c| (None, c)));
        out.push_str("data: [DONE]\n\n");
        out
    }
}

impl Respond for FakeModel {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        if !String::from_utf8_lossy(&request.body).contains(ASK_FOR_EDIT) {
            // Nobody asked for the file (a question, a title): no tool is used.
            if let Some(b) = body.as_object_mut() {
                b.remove("tools");
            }
        }
        let path = request.url.path();
        let stream = if path.ends_with("/messages") {
            self.anthropic(&body)
        } else if path.ends_with("/responses") {
            self.responses(&body)
        } else if path.ends_with("/chat/completions") {
            self.chat(&body)
        } else {
            return ResponseTemplate::new(404);
        };
        ResponseTemplate::new(200).set_body_raw(stream, "text/event-stream")
    }
}

fn tool_names(body: &Value, tools: &str, name: &str) -> Vec<String> {
    body.pointer(tools)
        .and_then(Value::as_array)
        .map(|t| {
            t.iter()
                .filter_map(|t| t.pointer(name).and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

fn sse(events: impl IntoIterator<Item = (Option<&'static str>, Value)>) -> String {
    let mut out = String::new();
    for (event, data) in events {
        if let Some(e) = event {
            out.push_str("event: ");
            out.push_str(e);
            out.push('\n');
        }
        out.push_str("data: ");
        out.push_str(&data.to_string());
        out.push_str("\n\n");
    }
    out
}
