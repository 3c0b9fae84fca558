//! The OpenAI Responses API adapter (`api = "responses"`): the wire format Codex-class models
//! are served by. Requests are stateless (`store: false`, the whole transcript each turn).
//! Wire types are private and tolerant.

use std::time::Duration;

use orca_core::{ToolCall, Usage};
use serde_json::{Value, json};

use crate::backend::{
    ChatRequest, ChatResponse, Message, StopReason, ToolChoice, generated_call_id,
};
use crate::endpoint::{Auth, Endpoint, Wire, http_backend};
use crate::error::BackendError;
use crate::openai::{TokenParam, parse_arguments};
use crate::secret::ApiKey;
use crate::stream::{self, responses::ResponsesAssembler};

/// An endpoint speaking OpenAI's Responses API (`POST {base_url}/responses`).
#[derive(Debug, Clone)]
pub struct ResponsesBackend {
    pub(crate) endpoint: Endpoint,
}

const WIRE: Wire = Wire {
    path: "/responses",
    parse: parse_body,
    assembler: stream::boxed::<ResponsesAssembler>,
    framing: stream::Framing::Sse,
};

fn parse_body(body: Value, endpoint: &str) -> Result<ChatResponse, BackendError> {
    parse_response(&body, endpoint)
}

impl ResponsesBackend {
    /// A backend for `base_url` (up to and including `/v1`) with a request timeout.
    #[must_use]
    pub fn new(base_url: &str, model: &str, api_key: Option<ApiKey>, timeout: Duration) -> Self {
        Self {
            endpoint: Endpoint::new(base_url, model, api_key, Auth::Bearer, timeout),
        }
    }

    /// The JSON body sent for a request.
    #[must_use]
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let mut input = Vec::new();
        for m in &request.messages {
            match m {
                Message::User { text } => input.push(json!({"role": "user", "content": text})),
                Message::Assistant { text, tool_calls } => {
                    if let Some(t) = text.as_deref().filter(|t| !t.is_empty()) {
                        input.push(json!({"role": "assistant", "content": t}));
                    }
                    for c in tool_calls {
                        let arguments = match &c.arguments {
                            Value::String(raw) => raw.clone(),
                            other => other.to_string(),
                        };
                        input.push(json!({"type": "function_call", "call_id": c.id,
                            "name": c.name, "arguments": arguments}));
                    }
                }
                Message::Tool { results } => {
                    for r in results {
                        input.push(json!({"type": "function_call_output",
                            "call_id": r.call_id, "output": r.content}));
                    }
                }
            }
        }
        let mut body = json!({
            "model": self.endpoint.model,
            "instructions": request.system,
            "input": input,
            "store": false,
        });
        if self.endpoint.streaming.enabled {
            body["stream"] = json!(true);
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "name": t.name, "description": t.description,
                        "parameters": t.parameters})
                })
                .collect();
            body["tool_choice"] = json!(match request.tool_choice {
                ToolChoice::Required => "required",
                ToolChoice::Auto => "auto",
            });
        }
        if let Some(schema) = &request.output_schema {
            body["text"] =
                json!({"format": {"type": "json_schema", "name": "tool_call", "schema": schema}});
        }
        if let Some(max) = request.max_output_tokens {
            body["max_output_tokens"] = json!(max);
        }
        let s = &request.sampling;
        let reasoning = TokenParam::Auto.field(&self.endpoint.model) == "max_completion_tokens";
        // Reasoning models refuse sampling parameters; the Responses API has no seed.
        if !reasoning {
            if let Some(t) = s.temperature {
                body["temperature"] = json!(t);
            }
            if let Some(p) = s.top_p {
                body["top_p"] = json!(p);
            }
        }
        if let Some(effort) = s.reasoning_effort
            && reasoning
        {
            body["reasoning"] = json!({"effort": effort.as_str()});
        }
        body
    }
}

fn invalid(endpoint: &str, message: impl Into<String>) -> BackendError {
    BackendError::InvalidResponse {
        endpoint: endpoint.to_owned(),
        message: message.into(),
    }
}

/// Parses a Responses API body.
pub(crate) fn parse_response(body: &Value, endpoint: &str) -> Result<ChatResponse, BackendError> {
    let output = body
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(endpoint, "the response has no output"))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for item in output {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(t) = part.get("text").and_then(Value::as_str) {
                        text.push_str(t);
                    }
                }
            }
            Some("function_call") => {
                let Some(name) = item.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let id = item
                    .get("call_id")
                    .or_else(|| item.get("id"))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map_or_else(|| generated_call_id(tool_calls.len()), str::to_owned);
                tool_calls.push(ToolCall {
                    id,
                    name: name.to_owned(),
                    arguments: parse_arguments(item.get("arguments").cloned()),
                });
            }
            _ => {}
        }
    }
    let incomplete = body.get("status").and_then(Value::as_str) == Some("incomplete");
    let reason = body
        .pointer("/incomplete_details/reason")
        .and_then(Value::as_str);
    let stop_reason = match (incomplete, reason) {
        (true, Some("max_output_tokens")) => StopReason::MaxTokens,
        (true, Some("content_filter")) => StopReason::ContentFilter,
        (true, other) => StopReason::Other(other.unwrap_or("incomplete").to_owned()),
        (false, _) if !tool_calls.is_empty() => StopReason::ToolUse,
        (false, _) => StopReason::EndTurn,
    };
    let n = |p: &str| body.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let cached = n("/usage/input_tokens_details/cached_tokens");
    let usage = Usage {
        input_tokens: n("/usage/input_tokens").saturating_sub(cached),
        // Reasoning tokens are part of output_tokens and billed as output.
        output_tokens: n("/usage/output_tokens"),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
        turns: 1,
        cost_micro_usd: 0,
    };
    Ok(ChatResponse {
        text: (!text.is_empty()).then_some(text),
        tool_calls,
        stop_reason,
        usage,
    })
}

http_backend!(ResponsesBackend, "openai");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_items_usage_and_truncation() {
        let r = parse_response(
            &json!({"status": "completed", "output": [
                {"type": "reasoning", "summary": []},
                {"type": "message", "content": [{"type": "output_text", "text": "hi"}]},
                {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"a\"}"}
            ], "usage": {"input_tokens": 100, "output_tokens": 30,
                "input_tokens_details": {"cached_tokens": 40},
                "output_tokens_details": {"reasoning_tokens": 20}}}),
            "e",
        )
        .unwrap();
        assert_eq!(r.text.as_deref(), Some("hi"));
        assert_eq!(r.tool_calls[0].arguments, json!({"path": "a"}));
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(
            (
                r.usage.input_tokens,
                r.usage.cache_read_tokens,
                r.usage.output_tokens
            ),
            (60, 40, 30)
        );
        let cut = parse_response(
            &json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []}),
            "e",
        )
        .unwrap();
        assert_eq!(cut.stop_reason, StopReason::MaxTokens);
        assert!(parse_response(&json!({"error": null}), "e").is_err());
    }
}
