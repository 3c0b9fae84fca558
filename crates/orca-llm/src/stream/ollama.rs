//! Ollama native chunks (one JSON object a line): `message.content` deltas appended,
//! `message.tool_calls` (whole calls) collected, and the last object (`"done": true`) giving
//! `done_reason` and the counts. An `{"error": "…"}` line ends the turn with that message.

use serde_json::{Value, json};

use super::sse::SseEvent;
use super::{Assemble, Flow, Produced, StreamFailure, data_json};
use crate::backend::ChatResponse;
use crate::error::BackendError;

/// Assembles one `/api/chat` stream.
#[derive(Debug, Default)]
pub(crate) struct OllamaAssembler {
    text: String,
    calls: Vec<Value>,
    last: Option<Value>,
    produced: Produced,
}

impl Assemble for OllamaAssembler {
    fn event(&mut self, event: &SseEvent) -> Result<Flow, StreamFailure> {
        let v = data_json(event)?;
        match v.get("error") {
            None | Some(Value::Null) => {}
            Some(Value::String(message)) => {
                return Err(StreamFailure {
                    kind: None,
                    message: message.clone(),
                });
            }
            Some(_) => return Err(StreamFailure::from_json(&v)),
        }
        if let Some(t) = v.pointer("/message/content").and_then(Value::as_str)
            && !t.is_empty()
        {
            self.text.push_str(t);
            self.produced.text(t);
        }
        for c in v
            .pointer("/message/tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.produced.text(
                &c.pointer("/function/arguments")
                    .map_or_else(String::new, Value::to_string),
            );
            self.calls.push(c.clone());
        }
        if v.get("done").and_then(Value::as_bool) == Some(true) {
            self.last = Some(v);
            return Ok(Flow::Done);
        }
        Ok(Flow::More)
    }

    fn produced(&self) -> Produced {
        self.produced
    }

    fn finish(self: Box<Self>, endpoint: &str) -> Result<ChatResponse, BackendError> {
        let Some(mut body) = self.last else {
            return Err(BackendError::InvalidResponse {
                endpoint: endpoint.to_owned(),
                message: "the stream ended before its last object (`\"done\": true`)".to_owned(),
            });
        };
        let mut message = json!({"role": "assistant", "content": self.text});
        if !self.calls.is_empty() {
            message["tool_calls"] = Value::Array(self.calls);
        }
        body["message"] = message;
        crate::ollama::parse_response(body, endpoint)
    }
}
