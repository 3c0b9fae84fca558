//! The OpenAI-compatible Chat Completions adapter (OpenAI, Ollama, vLLM, llama.cpp server,
//! LM Studio). Wire types are private and tolerant.

use orca_core::{ToolCall, ToolSpec, Usage};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::backend::{
    ChatRequest, ChatResponse, Message, StopReason, ToolChoice, generated_call_id,
};
use crate::endpoint::{Auth, Endpoint, Wire, http_backend, timeout_constructors};
use crate::error::BackendError;
use crate::http;
use crate::stream::{self, chat::ChatAssembler};

/// An OpenAI-compatible Chat Completions endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiBackend {
    pub(crate) endpoint: Endpoint,
    token_param: TokenParam,
}

const WIRE: Wire = Wire {
    path: "/chat/completions",
    parse: parse_response,
    assembler: stream::boxed::<ChatAssembler>,
    framing: stream::Framing::Sse,
};

/// The name of the output-token cap in a request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenParam {
    /// By model family: `max_completion_tokens` for OpenAI's reasoning models (o-series,
    /// gpt-5), which refuse `max_tokens`; `max_tokens` for every other model and server.
    #[default]
    Auto,
    /// Always `max_tokens` (older OpenAI models, most local servers).
    MaxTokens,
    /// Always `max_completion_tokens`.
    MaxCompletionTokens,
}

impl TokenParam {
    /// The field to send for `model`.
    #[must_use]
    pub fn field(self, model: &str) -> &'static str {
        match self {
            Self::MaxTokens => "max_tokens",
            Self::MaxCompletionTokens => "max_completion_tokens",
            Self::Auto if is_reasoning_model(model) => "max_completion_tokens",
            Self::Auto => "max_tokens",
        }
    }
}

/// OpenAI's reasoning families: `o1`, `o3`, `o4-mini`… and `gpt-5…` (a `provider/` prefix is
/// ignored).
fn is_reasoning_model(model: &str) -> bool {
    let id = model.rsplit('/').next().unwrap_or(model);
    let o_series = id.strip_prefix('o').is_some_and(|rest| {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let tail = &rest[digits..];
        digits > 0 && (tail.is_empty() || tail.starts_with('-'))
    });
    o_series || id.starts_with("gpt-5")
}

timeout_constructors!(OpenAiBackend, Auth::Bearer, "up to and including `/v1`");

impl OpenAiBackend {
    const fn from_endpoint(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            token_param: TokenParam::Auto,
        }
    }

    /// Chooses the output-token field (default [`TokenParam::Auto`]).
    #[must_use]
    pub fn with_token_param(mut self, token_param: TokenParam) -> Self {
        self.token_param = token_param;
        self
    }

    /// The JSON body sent for a request.
    #[must_use]
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let mut messages = vec![json!({"role": "system", "content": request.system})];
        for m in &request.messages {
            match m {
                Message::User { text } => messages.push(json!({"role": "user", "content": text})),
                Message::Assistant { text, tool_calls } => {
                    let mut msg = json!({"role": "assistant", "content": text});
                    if !tool_calls.is_empty() {
                        msg["tool_calls"] = tool_calls
                            .iter()
                            .map(|c| {
                                json!({
                                    "id": c.id,
                                    "type": "function",
                                    "function": {"name": c.name, "arguments": arguments_text(&c.arguments)}
                                })
                            })
                            .collect();
                    }
                    messages.push(msg);
                }
                Message::Tool { results } => {
                    for r in results {
                        messages.push(json!({"role": "tool", "tool_call_id": r.call_id, "content": r.content}));
                    }
                }
            }
        }
        let streamed = self.endpoint.streaming.enabled;
        let mut body =
            json!({"model": self.endpoint.model, "messages": messages, "stream": streamed});
        if streamed {
            body["stream_options"] = json!({"include_usage": true});
        }
        if !request.tools.is_empty() {
            body["tools"] = function_tools(&request.tools);
            body["tool_choice"] = json!(match request.tool_choice {
                ToolChoice::Required => "required",
                ToolChoice::Auto => "auto",
            });
        }
        if let Some(schema) = &request.output_schema {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {"name": "tool_call", "schema": schema},
            });
        }
        let token_field = self.token_param.field(&self.endpoint.model);
        if let Some(max) = request.max_output_tokens {
            body[token_field] = json!(max);
        }
        let sampling = &request.sampling;
        if let Some(t) = sampling.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(p) = sampling.top_p {
            body["top_p"] = json!(p);
        }
        if let Some(seed) = sampling.seed {
            body["seed"] = json!(seed);
        }
        // Only reasoning models take it; other models refuse an unknown parameter.
        if let Some(effort) = sampling.reasoning_effort
            && token_field == "max_completion_tokens"
        {
            body["reasoning_effort"] = json!(effort.as_str());
        }
        body
    }
}

/// Tools as OpenAI-style function tools (what Ollama's native API takes too).
pub(crate) fn function_tools(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters
            }})
        })
        .collect()
}

/// Arguments as the JSON text the API expects (raw text kept if it never parsed).
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

/// A tool call as OpenAI-style servers (and Ollama) answer it.
#[derive(Deserialize)]
pub(crate) struct WireToolCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Deserialize)]
pub(crate) struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<WirePromptDetails>,
}

#[derive(Deserialize, Default)]
struct WirePromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// The named calls of an answer (nameless ones dropped), each with its id or a made-up one.
pub(crate) fn tool_calls_of(calls: Option<Vec<WireToolCall>>) -> Vec<ToolCall> {
    calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let f = c.function?;
            Some(ToolCall {
                id: c
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| generated_call_id(i)),
                name: f.name?,
                arguments: parse_arguments(f.arguments),
            })
        })
        .collect()
}

/// Parses arguments that arrive as a JSON string, an object, or nothing.
pub(crate) fn parse_arguments(raw: Option<Value>) -> Value {
    match raw {
        None | Some(Value::Null) => json!({}),
        Some(Value::String(s)) if s.trim().is_empty() => json!({}),
        Some(Value::String(s)) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
        Some(other) => other,
    }
}

fn content_text(content: Option<Value>) -> Option<String> {
    match content? {
        Value::String(s) => Some(s),
        Value::Array(parts) => {
            let text: String = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            Some(text)
        }
        _ => None,
    }
    .filter(|s| !s.is_empty())
}

pub(crate) fn parse_response(body: Value, endpoint: &str) -> Result<ChatResponse, BackendError> {
    let wire: WireResponse = http::decode_shape(body, endpoint)?;
    let Some(choice) = wire.choices.into_iter().next() else {
        return Err(BackendError::InvalidResponse {
            endpoint: endpoint.to_owned(),
            message: "the response has no choices".to_owned(),
        });
    };
    let message = choice.message.unwrap_or(WireMessage {
        content: None,
        tool_calls: None,
    });
    let tool_calls = tool_calls_of(message.tool_calls);
    let stop_reason = match choice.finish_reason.as_deref() {
        Some("stop") | None => StopReason::EndTurn,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::ContentFilter,
        Some(other) => StopReason::Other(other.to_owned()),
    };
    let u = wire.usage.unwrap_or_default();
    let cached = u
        .prompt_tokens_details
        .and_then(|d| d.cached_tokens)
        .unwrap_or(0);
    let usage = Usage {
        input_tokens: u.prompt_tokens.unwrap_or(0).saturating_sub(cached),
        output_tokens: u.completion_tokens.unwrap_or(0),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
        turns: 1,
        cost_micro_usd: 0,
    };
    Ok(ChatResponse {
        text: content_text(message.content),
        tool_calls,
        stop_reason,
        usage,
    })
}

http_backend!(OpenAiBackend, "openai");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_families() {
        for (model, reasoning) in [
            ("o1", true),
            ("o3-mini", true),
            ("o4-mini-2025-04-16", true),
            ("gpt-5", true),
            ("azure/gpt-5-nano", true),
            ("gpt-4o", false),
            ("o3x", false),
            ("omni", false),
            ("ollama", false),
            ("qwen2.5-coder:1.5b", false),
        ] {
            assert_eq!(is_reasoning_model(model), reasoning, "{model}");
        }
    }

    #[test]
    fn tolerant_parsing() {
        // Tool calls with finish_reason "stop", no ids, no usage, arguments as an object.
        let r = parse_response(
            json!({"choices": [{"message": {"content": null, "tool_calls": [
                {"function": {"name": "a", "arguments": {"x": 1}}},
                {"id": "c2", "function": {"name": "b", "arguments": "{\"y\":2}"}},
                {"id": "c3", "function": {"name": "c", "arguments": "{not json"}}
            ]}, "finish_reason": "stop"}]}),
            "e",
        )
        .unwrap();
        assert_eq!(r.tool_calls.len(), 3);
        assert!(r.tool_calls[0].id.starts_with("call_orca_0_"));
        assert_eq!(r.tool_calls[0].arguments, json!({"x": 1}));
        assert_eq!(r.tool_calls[1].arguments, json!({"y": 2}));
        assert_eq!(r.tool_calls[2].arguments, json!("{not json"));
        assert_eq!(r.usage.total_tokens(), 0);
        let r = parse_response(
            json!({"choices": [{"message": {"content": "hi"}, "finish_reason": "weird_new_value"}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}}),
            "e",
        )
        .unwrap();
        assert_eq!(r.stop_reason, StopReason::Other("weird_new_value".into()));
        assert_eq!(
            (
                r.usage.input_tokens,
                r.usage.cache_read_tokens,
                r.usage.output_tokens
            ),
            (6, 4, 2)
        );
        assert!(parse_response(json!({"choices": []}), "e").is_err());
    }
}
