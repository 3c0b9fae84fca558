//! Ollama's native chat API (`api = "ollama"`, ADR 0025): `POST /api/chat`, streamed as
//! NDJSON (one object a line, [`crate::stream::ollama`]) when `stream` is on, through the
//! shared [`Endpoint`] (idle timeout, progress, a plain JSON body still accepted).
//!
//! Unlike Ollama's OpenAI-compatible endpoint, it takes the context size: every request sets
//! `options.num_ctx` to the configured `context_window` or, if none, to the window asked from
//! the server (`/api/show`: the model's `num_ctx`, else its trained context up to
//! [`crate::window_probe::OLLAMA_NATIVE_MAX_DEFAULT`]), so the window is what orca assumes
//! and a long prompt is never cut silently to Ollama's default. Tools go in Ollama's format
//! (OpenAI-style function tools; arguments as JSON objects), `format` carries the JSON schema
//! of `tool_mode = "json"`, usage comes from `prompt_eval_count` / `eval_count`, and
//! `done_reason: "length"` is the truncation outcome. Wire types stay here.

use std::sync::Arc;

use orca_core::Usage;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::backend::{ChatRequest, ChatResponse, Message, StopReason};
use crate::endpoint::{Auth, Endpoint, Wire, http_backend};
use crate::error::BackendError;
use crate::http;
use crate::openai::{WireToolCall, tool_calls_of};
use crate::secret::ApiKey;
use crate::stream::{self, ollama::OllamaAssembler};
use crate::window_probe::{ServerApi, Windows, server_root};

/// An Ollama server spoken to natively.
#[derive(Debug, Clone)]
pub struct OllamaBackend {
    /// The server's root (no `/v1`).
    pub(crate) endpoint: Endpoint,
    context_window: Option<u64>,
    windows: Arc<Windows>,
}

const WIRE: Wire = Wire {
    path: "/api/chat",
    parse: parse_response,
    assembler: stream::boxed::<OllamaAssembler>,
    framing: stream::Framing::Ndjson,
};

http_backend!(OllamaBackend, "ollama", |this, request| this
    .request_body(request, this.num_ctx().await));

impl OllamaBackend {
    /// A backend for the server at `base_url` (its root; a trailing `/v1` is dropped), asking
    /// with `client`.
    #[must_use]
    pub fn new(
        base_url: &str,
        model: &str,
        api_key: Option<ApiKey>,
        client: reqwest::Client,
    ) -> Self {
        Self {
            endpoint: Endpoint::with_client(
                server_root(base_url),
                model,
                api_key,
                Auth::Bearer,
                client,
            ),
            context_window: None,
            windows: Arc::new(Windows::new()),
        }
    }

    /// The window sent as `num_ctx` (otherwise asked from the server once).
    #[must_use]
    pub const fn with_context_window(mut self, window: Option<u64>) -> Self {
        self.context_window = window;
        self
    }

    /// Shares the run's cache of asked windows.
    #[must_use]
    pub fn with_windows(mut self, windows: Arc<Windows>) -> Self {
        self.windows = windows;
        self
    }

    /// The `num_ctx` sent: the configured window, else the one the server reports.
    pub async fn num_ctx(&self) -> Option<u64> {
        match self.context_window {
            Some(w) => Some(w),
            None => self
                .windows
                .window(
                    &self.endpoint.client,
                    ServerApi::OllamaNative,
                    &self.endpoint.base_url,
                    &self.endpoint.model,
                )
                .await
                .map(|w| w.tokens),
        }
    }

    /// The JSON body sent for a request with `num_ctx`.
    #[must_use]
    pub fn request_body(&self, request: &ChatRequest, num_ctx: Option<u64>) -> Value {
        let mut messages = vec![json!({"role": "system", "content": request.system})];
        for m in &request.messages {
            match m {
                Message::User { text } => messages.push(json!({"role": "user", "content": text})),
                Message::Assistant { text, tool_calls } => {
                    let mut msg =
                        json!({"role": "assistant", "content": text.clone().unwrap_or_default()});
                    if !tool_calls.is_empty() {
                        msg["tool_calls"] = tool_calls
                            .iter()
                            .map(|c| {
                                json!({"function": {"name": c.name, "arguments": arguments_object(&c.arguments)}})
                            })
                            .collect();
                    }
                    messages.push(msg);
                }
                Message::Tool { results } => {
                    for r in results {
                        messages.push(
                            json!({"role": "tool", "tool_name": r.name, "content": r.content}),
                        );
                    }
                }
            }
        }
        let mut body = json!({
            "model": self.endpoint.model,
            "messages": messages,
            "stream": self.endpoint.streaming.enabled,
        });
        if !request.tools.is_empty() {
            body["tools"] = crate::openai::function_tools(&request.tools);
        }
        if let Some(schema) = &request.output_schema {
            body["format"] = schema.clone();
        }
        let mut options = serde_json::Map::new();
        if let Some(n) = num_ctx {
            options.insert("num_ctx".into(), json!(n));
        }
        if let Some(max) = request.max_output_tokens {
            options.insert("num_predict".into(), json!(max));
        }
        let s = &request.sampling;
        if let Some(t) = s.temperature {
            options.insert("temperature".into(), json!(t));
        }
        if let Some(p) = s.top_p {
            options.insert("top_p".into(), json!(p));
        }
        if let Some(seed) = s.seed {
            options.insert("seed".into(), json!(seed));
        }
        if !options.is_empty() {
            body["options"] = Value::Object(options);
        }
        body
    }
}

/// Ollama wants arguments as a JSON object; a raw string that never parsed is sent as its
/// parse, or wrapped.
fn arguments_object(arguments: &Value) -> Value {
    match arguments {
        Value::String(raw) => serde_json::from_str(raw).unwrap_or_else(|_| json!({"raw": raw})),
        other => other.clone(),
    }
}

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    done_reason: Option<String>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    eval_count: Option<u64>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

/// Parses an `/api/chat` answer (`stream: false`, or rebuilt from the stream).
///
/// # Errors
///
/// A body that is not the expected shape.
pub fn parse_response(body: Value, endpoint: &str) -> Result<ChatResponse, BackendError> {
    let wire: WireResponse = http::decode_shape(body, endpoint)?;
    let Some(message) = wire.message else {
        return Err(BackendError::InvalidResponse {
            endpoint: endpoint.to_owned(),
            message: "the response has no message".to_owned(),
        });
    };
    let tool_calls = tool_calls_of(message.tool_calls);
    let stop_reason = match wire.done_reason.as_deref() {
        Some("length") => StopReason::MaxTokens,
        _ if !tool_calls.is_empty() => StopReason::ToolUse,
        Some("stop") | None => StopReason::EndTurn,
        Some(other) => StopReason::Other(other.to_owned()),
    };
    let usage = Usage {
        input_tokens: wire.prompt_eval_count.unwrap_or(0),
        output_tokens: wire.eval_count.unwrap_or(0),
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        turns: 1,
        cost_micro_usd: 0,
    };
    Ok(ChatResponse {
        text: message.content.filter(|t| !t.is_empty()),
        tool_calls,
        stop_reason,
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_in_the_recorded_shapes() {
        // Ollama 0.x `/api/chat`, stream false, a tool call (no id) and the counts.
        let r = parse_response(
            json!({"model": "qwen2.5-coder:1.5b", "created_at": "2025-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": "",
                    "tool_calls": [{"function": {"name": "read_file", "arguments": {"path": "a"}}}]},
                "done_reason": "stop", "done": true, "total_duration": 1,
                "prompt_eval_count": 120, "eval_count": 15}),
            "e",
        )
        .unwrap();
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(r.tool_calls[0].arguments, json!({"path": "a"}));
        assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (120, 15));
        let cut = parse_response(
            json!({"message": {"role": "assistant", "content": "and then"}, "done_reason": "length", "done": true}),
            "e",
        )
        .unwrap();
        assert_eq!(cut.stop_reason, StopReason::MaxTokens);
        assert!(parse_response(json!({"done": true}), "e").is_err());
    }
}
