//! Anthropic Messages events: `message_start` (usage so far), `content_block_start`,
//! `content_block_delta` (`text_delta`, `input_json_delta` for tool input),
//! `content_block_stop`, `message_delta` (stop reason, final usage), `message_stop`, `ping`,
//! `error`.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::sse::SseEvent;
use super::{Assemble, Flow, Produced, StreamFailure, typed};
use crate::backend::ChatResponse;
use crate::error::BackendError;

/// Assembles one Messages stream.
#[derive(Debug, Default)]
pub(crate) struct MessagesAssembler {
    blocks: BTreeMap<u64, Value>,
    /// Tool input JSON text by block index.
    partial: BTreeMap<u64, String>,
    /// Text by block index.
    texts: BTreeMap<u64, String>,
    stop_reason: Option<String>,
    usage: Map<String, Value>,
    started: bool,
    stopped: bool,
    produced: Produced,
}

impl Assemble for MessagesAssembler {
    fn event(&mut self, event: &SseEvent) -> Result<Flow, StreamFailure> {
        let (v, kind) = typed(event)?;
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind.as_str() {
            "error" => return Err(StreamFailure::from_json(&v)),
            "message_start" => {
                self.started = true;
                self.merge_usage(v.pointer("/message/usage"));
            }
            "content_block_start" => {
                let block = v.get("content_block").cloned().unwrap_or_else(|| json!({}));
                self.blocks.insert(index, block);
            }
            "content_block_delta" => self.delta(index, v.get("delta")),
            "content_block_stop" => {
                if let Some(text) = self.partial.remove(&index)
                    && let Some(block) = self.blocks.get_mut(&index)
                    && !text.trim().is_empty()
                {
                    // The adapter's parser reads a JSON text the way it reads an object.
                    block["input"] = Value::String(text);
                }
            }
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(r.to_owned());
                }
                self.merge_usage(v.get("usage"));
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(Flow::Done);
            }
            _ => {} // ping, and event types added later
        }
        Ok(Flow::More)
    }

    fn produced(&self) -> Produced {
        self.produced
    }

    fn finish(self: Box<Self>, endpoint: &str) -> Result<ChatResponse, BackendError> {
        if !self.started || (!self.stopped && self.stop_reason.is_none()) {
            return Err(BackendError::InvalidResponse {
                endpoint: endpoint.to_owned(),
                message: "the stream ended before the answer did (no message_stop)".to_owned(),
            });
        }
        let mut blocks = self.blocks;
        for (index, text) in self.texts {
            if let Some(block) = blocks.get_mut(&index) {
                let mut whole = block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                whole.push_str(&text);
                block["text"] = Value::String(whole);
            }
        }
        for (index, text) in self.partial {
            if let Some(block) = blocks.get_mut(&index)
                && !text.trim().is_empty()
            {
                block["input"] = Value::String(text);
            }
        }
        let body = json!({
            "content": blocks.into_values().collect::<Vec<_>>(),
            "stop_reason": self.stop_reason,
            "usage": Value::Object(self.usage),
        });
        crate::anthropic::parse_response(body, endpoint)
    }
}

impl MessagesAssembler {
    fn delta(&mut self, index: u64, delta: Option<&Value>) {
        let Some(delta) = delta else { return };
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => {
                let t = delta.get("text").and_then(Value::as_str).unwrap_or("");
                self.produced.text(t);
                self.blocks
                    .entry(index)
                    .or_insert_with(|| json!({"type": "text", "text": ""}));
                self.texts.entry(index).or_default().push_str(t);
            }
            Some("input_json_delta") => {
                let t = delta
                    .get("partial_json")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                self.produced.text(t);
                self.partial.entry(index).or_default().push_str(t);
            }
            Some("thinking_delta") => self.produced.hidden(),
            _ => {}
        }
    }

    /// Usage fields: `message_delta`'s are the final counts and replace `message_start`'s.
    fn merge_usage(&mut self, usage: Option<&Value>) {
        if let Some(u) = usage.and_then(Value::as_object) {
            for (k, v) in u {
                if !v.is_null() {
                    self.usage.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_cut_before_message_stop_is_an_invalid_response() {
        let mut a = MessagesAssembler::default();
        let start = SseEvent {
            name: "message_start".into(),
            data: json!({"type": "message_start", "message": {"content": [], "usage": {"input_tokens": 5}}})
                .to_string(),
        };
        assert!(matches!(a.event(&start), Ok(Flow::More)));
        let err = Box::new(a).finish("e").unwrap_err();
        assert!(err.to_string().contains("no message_stop"), "{err}");
    }
}
