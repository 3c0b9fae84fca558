//! The backend trait and the provider-neutral transcript it speaks.
//!
//! A backend turns a [`ChatRequest`] (system prompt, messages, tools) into one model turn
//! ([`ChatResponse`]). Implement [`ChatBackend`] to plug in any model; nothing here depends on
//! an HTTP crate. Provider wire formats stay private to their adapters.

use async_trait::async_trait;
use orca_core::{ToolCall, ToolSpec, Usage};
use serde::{Deserialize, Serialize};

use crate::error::BackendError;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Message {
    /// Text from the user (or from orca on the user's behalf).
    User {
        /// The text.
        text: String,
    },
    /// A model turn: text and/or tool calls.
    Assistant {
        /// The text, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// Tool calls, if any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The results of the tool calls of the previous assistant turn.
    Tool {
        /// One result per call.
        results: Vec<ToolResult>,
    },
}

/// The result of one tool call, as the model reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The call it answers.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The result (JSON text, or an error message).
    pub content: String,
    /// Whether the call failed.
    #[serde(default)]
    pub is_error: bool,
}

/// Whether and how the model must call a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must call some tool.
    Required,
}

/// One model call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The system prompt.
    pub system: String,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The tools offered.
    pub tools: Vec<ToolSpec>,
    /// Whether a tool call is required.
    pub tool_choice: ToolChoice,
    /// A cap on the output tokens of this turn.
    pub max_output_tokens: Option<u32>,
    /// Sampling settings; unset ones are not sent (the server's defaults apply).
    #[serde(default)]
    pub sampling: Sampling,
    /// A JSON schema the answer's text must match (`tool_mode = "json"`): sent as
    /// `response_format` `json_schema` by OpenAI-compatible adapters; adapters whose API has
    /// no such constraint ignore it (the loop reads the call from the text either way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
}

/// Generation settings of an agent, sent with every turn when set.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Sampling {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// A seed, for servers that make sampling repeatable with one (OpenAI-compatible ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// How hard a reasoning model thinks (`low`, `medium`, `high`; OpenAI's `reasoning_effort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
}

/// OpenAI's `reasoning_effort` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    /// `minimal`.
    Minimal,
    /// `low`.
    Low,
    /// `medium`.
    Medium,
    /// `high`.
    High,
}

impl ReasoningEffort {
    /// The wire value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Minimal => "minimal",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

/// Why a model turn ended. Unknown provider values are kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model finished its answer.
    EndTurn,
    /// The model wants tool results.
    ToolUse,
    /// The output token cap was reached.
    MaxTokens,
    /// Output was filtered by the provider.
    ContentFilter,
    /// A value this crate does not know.
    Other(String),
}

impl StopReason {
    /// The reason in the words of the GenAI semantic conventions'
    /// `gen_ai.response.finish_reasons`.
    #[must_use]
    pub fn finish_reason(&self) -> &str {
        match self {
            Self::EndTurn => "stop",
            Self::ToolUse => "tool_calls",
            Self::MaxTokens => "length",
            Self::ContentFilter => "content_filter",
            Self::Other(other) => other,
        }
    }
}

/// One model turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// Text, if any.
    pub text: Option<String>,
    /// Tool calls, if any (whatever the stop reason says).
    pub tool_calls: Vec<ToolCall>,
    /// Why the turn ended.
    pub stop_reason: StopReason,
    /// Tokens of this turn (`turns` is 1; cost if the backend knows prices).
    pub usage: Usage,
}

/// A model backend. Object-safe; cancellation is by dropping the future.
#[async_trait]
pub trait ChatBackend: Send + Sync + std::fmt::Debug {
    /// The backend kind (`openai`, `anthropic`, `scripted`, or a custom name).
    fn kind(&self) -> &str;

    /// The model, if there is one.
    fn model(&self) -> Option<&str>;

    /// Runs one model turn.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError>;
}

/// A tool call id for providers that send none.
#[must_use]
pub fn generated_call_id(index: usize) -> String {
    format!("call_orca_{index}_{:08x}", fastrand::u32(..))
}
