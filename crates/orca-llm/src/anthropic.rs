//! The Anthropic Messages adapter. Wire types are private and tolerant.

use orca_core::{ToolCall, Usage};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::backend::{
    ChatRequest, ChatResponse, Message, StopReason, ToolChoice, generated_call_id,
};
use crate::endpoint::{Auth, Endpoint, Wire, http_backend, timeout_constructors};
use crate::error::BackendError;
use crate::http;
use crate::stream::{self, messages::MessagesAssembler};

/// The `anthropic-version` header sent.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` when the request sets none (the API requires one).
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The Anthropic Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicBackend {
    pub(crate) endpoint: Endpoint,
}

const WIRE: Wire = Wire {
    path: "/v1/messages",
    parse: parse_response,
    assembler: stream::boxed::<MessagesAssembler>,
    framing: stream::Framing::Sse,
};

timeout_constructors!(AnthropicBackend, Auth::Anthropic, "without `/v1`");

impl AnthropicBackend {
    const fn from_endpoint(endpoint: Endpoint) -> Self {
        Self { endpoint }
    }

    /// The JSON body sent for a request.
    #[must_use]
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let mut messages: Vec<Value> = Vec::new();
        for m in &request.messages {
            match m {
                Message::User { text } => messages.push(json!({
                    "role": "user", "content": [{"type": "text", "text": text}]
                })),
                Message::Assistant { text, tool_calls } => {
                    let mut content = Vec::new();
                    if let Some(t) = text.as_deref().filter(|t| !t.is_empty()) {
                        content.push(json!({"type": "text", "text": t}));
                    }
                    for c in tool_calls {
                        let input = if c.arguments.is_object() {
                            c.arguments.clone()
                        } else {
                            json!({})
                        };
                        content.push(
                            json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                        );
                    }
                    if content.is_empty() {
                        // The API refuses empty assistant turns.
                        content.push(json!({"type": "text", "text": "(no output)"}));
                    }
                    messages.push(json!({"role": "assistant", "content": content}));
                }
                Message::Tool { results } => {
                    let content: Vec<Value> = results
                        .iter()
                        .map(|r| {
                            json!({"type": "tool_result", "tool_use_id": r.call_id,
                                   "content": r.content, "is_error": r.is_error})
                        })
                        .collect();
                    messages.push(json!({"role": "user", "content": content}));
                }
            }
        }
        let mut body = json!({
            "model": self.endpoint.model,
            "max_tokens": request.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "system": request.system,
            "messages": messages,
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
            body["tool_choice"] = match request.tool_choice {
                ToolChoice::Required => json!({"type": "any"}),
                ToolChoice::Auto => json!({"type": "auto"}),
            };
        }
        if let Some(t) = request.sampling.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(p) = request.sampling.top_p {
            body["top_p"] = json!(p);
        }
        if self.endpoint.streaming.enabled {
            body["stream"] = json!(true);
        }
        mark_cache_breakpoints(&mut body);
        body
    }
}

/// Prompt caching: two `cache_control` breakpoints. One on the system prompt caches the stable
/// prefix (tools, then system: Anthropic orders them so); one on the last block of the last
/// message caches the conversation so far, which the next turn of the agent loop reads back at a
/// tenth of the input price instead of paying for it again. Prefixes shorter than the model's
/// minimum are simply not cached.
fn mark_cache_breakpoints(body: &mut Value) {
    let ephemeral = json!({"type": "ephemeral"});
    if let Some(system) = body
        .get("system")
        .and_then(Value::as_str)
        .map(str::to_owned)
        && !system.is_empty()
    {
        body["system"] = json!([{"type": "text", "text": system, "cache_control": ephemeral}]);
    }
    if let Some(block) = body
        .get_mut("messages")
        .and_then(Value::as_array_mut)
        .and_then(|m| m.last_mut())
        .and_then(|m| m.get_mut("content"))
        .and_then(Value::as_array_mut)
        .and_then(|c| c.last_mut())
        && let Some(obj) = block.as_object_mut()
    {
        obj.insert("cache_control".to_owned(), ephemeral);
    }
}

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    content: Vec<Value>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

pub(crate) fn parse_response(body: Value, endpoint: &str) -> Result<ChatResponse, BackendError> {
    let wire: WireResponse = http::decode_shape(body, endpoint)?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    // Blocks of unknown types (thinking, server tools…) are skipped.
    for (i, block) in wire.content.into_iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => {
                let Some(name) = block.get("name").and_then(Value::as_str) else {
                    continue;
                };
                tool_calls.push(ToolCall {
                    id: block
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .map_or_else(|| generated_call_id(i), str::to_owned),
                    name: name.to_owned(),
                    arguments: crate::openai::parse_arguments(block.get("input").cloned()),
                });
            }
            _ => {}
        }
    }
    let stop_reason = match wire.stop_reason.as_deref() {
        Some("end_turn" | "stop_sequence") | None => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("refusal") => StopReason::ContentFilter,
        Some(other) => StopReason::Other(other.to_owned()),
    };
    let u = wire.usage.unwrap_or_default();
    Ok(ChatResponse {
        text: Some(text).filter(|t| !t.is_empty()),
        tool_calls,
        stop_reason,
        usage: Usage {
            input_tokens: u.input_tokens.unwrap_or(0),
            output_tokens: u.output_tokens.unwrap_or(0),
            cache_read_tokens: u.cache_read_input_tokens.unwrap_or(0),
            cache_write_tokens: u.cache_creation_input_tokens.unwrap_or(0),
            turns: 1,
            cost_micro_usd: 0,
        },
    })
}

http_backend!(AnthropicBackend, "anthropic");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerant_parsing() {
        let r = parse_response(
            json!({"content": [
                {"type": "thinking", "thinking": "hmm"},
                {"type": "text", "text": "ok"},
                {"type": "tool_use", "name": "a", "input": {"x": 1}}
            ], "stop_reason": "pause_turn",
               "usage": {"input_tokens": 5, "output_tokens": 3, "cache_creation_input_tokens": 7, "cache_read_input_tokens": 11}}),
            "e",
        )
        .unwrap();
        assert_eq!(r.text.as_deref(), Some("ok"));
        assert_eq!(r.tool_calls.len(), 1);
        assert!(r.tool_calls[0].id.starts_with("call_orca_"));
        assert_eq!(r.stop_reason, StopReason::Other("pause_turn".into()));
        assert_eq!(
            (r.usage.cache_write_tokens, r.usage.cache_read_tokens),
            (7, 11)
        );
        let r = parse_response(json!({"content": []}), "e").unwrap();
        assert_eq!(
            r.usage,
            Usage {
                turns: 1,
                ..Usage::default()
            }
        );
    }
}
