//! The `scripted` backend: replays model turns from a JSON file, so scripted runs exercise the
//! real agent loop (tools, submit, repairs, limits). For tests and demos.
//!
//! ```json
//! {"turns": [
//!   {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
//!   {"error": {"kind": "rate_limited", "retry_after_ms": 10}},
//!   {"tool_calls": [{"name": "submit_result", "arguments": {"status": "success", "summary": "done"}}],
//!    "usage": {"input_tokens": 10, "output_tokens": 5}}
//! ]}
//! ```

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use orca_core::{ToolCall, Usage};
use serde::Deserialize;
use serde_json::Value;

use crate::backend::{ChatBackend, ChatRequest, ChatResponse, StopReason, generated_call_id};
use crate::error::{BackendError, ScriptError};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    turns: Vec<ScriptTurn>,
}

/// One scripted model turn: a reply, or an error.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptTurn {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ScriptCall>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<ScriptedError>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    arguments: Value,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedError {
    kind: ScriptedErrorKind,
    #[serde(default)]
    retry_after_ms: Option<u64>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ScriptedErrorKind {
    RateLimited,
    Overloaded,
    Server,
    Timeout,
    Quota,
    Auth,
}

/// Replays scripted turns in order; records the requests it was given.
#[derive(Debug)]
pub struct ScriptedBackend {
    name: String,
    turns: Vec<ScriptTurn>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: usize,
    requests: Vec<ChatRequest>,
}

impl ScriptedBackend {
    /// Reads a script file.
    ///
    /// # Errors
    ///
    /// The file cannot be read or is not a valid script.
    pub fn from_file(path: &Path) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScriptError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_json(&text, &path.display().to_string())
    }

    /// Parses a script; `name` names it in errors.
    ///
    /// # Errors
    ///
    /// The text is not a valid script.
    pub fn from_json(text: &str, name: &str) -> Result<Self, ScriptError> {
        let script: Script = serde_json::from_str(text).map_err(|e| ScriptError::Invalid {
            path: name.to_owned(),
            message: e.to_string(),
        })?;
        Ok(Self {
            name: name.to_owned(),
            turns: script.turns,
            state: Mutex::new(State::default()),
        })
    }

    /// The requests received so far.
    #[must_use]
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.state
            .lock()
            .map(|s| s.requests.clone())
            .unwrap_or_default()
    }

    /// Turns not replayed yet.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.state
            .lock()
            .map(|s| self.turns.len().saturating_sub(s.next))
            .unwrap_or(0)
    }
}

#[async_trait]
impl ChatBackend for ScriptedBackend {
    fn kind(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> Option<&str> {
        None
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError> {
        let endpoint = format!("script {}", self.name);
        let turn = {
            let mut state = self
                .state
                .lock()
                .map_err(|_| BackendError::InvalidResponse {
                    endpoint: endpoint.clone(),
                    message: "the script state is poisoned".to_owned(),
                })?;
            state.requests.push(request.clone());
            let turn = self.turns.get(state.next).cloned();
            state.next += 1;
            turn
        };
        let Some(turn) = turn else {
            return Err(BackendError::InvalidResponse {
                endpoint,
                message: format!("the script has no turn left (it has {})", self.turns.len()),
            });
        };
        if let Some(err) = turn.error {
            let message = err.message.unwrap_or_else(|| "scripted error".to_owned());
            let retry_after = err.retry_after_ms.map(Duration::from_millis);
            return Err(match err.kind {
                ScriptedErrorKind::RateLimited => BackendError::RateLimited {
                    endpoint,
                    message,
                    retry_after,
                },
                ScriptedErrorKind::Overloaded => BackendError::Overloaded {
                    endpoint,
                    message,
                    retry_after,
                },
                ScriptedErrorKind::Server => BackendError::Server {
                    endpoint,
                    status: 500,
                    message,
                    retry_after,
                },
                ScriptedErrorKind::Timeout => BackendError::Timeout { endpoint },
                ScriptedErrorKind::Quota => BackendError::Quota { endpoint, message },
                ScriptedErrorKind::Auth => BackendError::Auth {
                    endpoint,
                    status: 401,
                    message,
                },
            });
        }
        let tool_calls: Vec<ToolCall> = turn
            .tool_calls
            .into_iter()
            .enumerate()
            .map(|(i, c)| ToolCall {
                id: c.id.unwrap_or_else(|| generated_call_id(i)),
                name: c.name,
                arguments: c.arguments,
            })
            .collect();
        let mut usage = turn.usage.unwrap_or_default();
        usage.turns = 1;
        Ok(ChatResponse {
            text: turn.text,
            stop_reason: if tool_calls.is_empty() {
                StopReason::EndTurn
            } else {
                StopReason::ToolUse
            },
            tool_calls,
            usage,
        })
    }
}
