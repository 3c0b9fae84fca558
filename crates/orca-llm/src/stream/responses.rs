//! Responses API events: `response.output_item.added` / `.done`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`, and the end — `response.completed` or
//! `response.incomplete` (carrying the whole response with usage), `response.failed` or
//! `error`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::sse::SseEvent;
use super::{Assemble, Flow, Produced, StreamFailure, typed};
use crate::backend::ChatResponse;
use crate::error::BackendError;

/// Assembles one Responses stream.
#[derive(Debug, Default)]
pub(crate) struct ResponsesAssembler {
    /// Output items by `output_index`, as far as they are known.
    items: BTreeMap<u64, Value>,
    /// Text deltas by `output_index`.
    texts: BTreeMap<u64, String>,
    /// Function-call argument deltas by `output_index`.
    arguments: BTreeMap<u64, String>,
    /// Items whose `output_item.done` arrived (complete as sent).
    done: std::collections::BTreeSet<u64>,
    /// The final response object.
    last: Option<Value>,
    produced: Produced,
}

impl Assemble for ResponsesAssembler {
    fn event(&mut self, event: &SseEvent) -> Result<Flow, StreamFailure> {
        let (v, kind) = typed(event)?;
        let index = v.get("output_index").and_then(Value::as_u64).unwrap_or(0);
        let delta = || v.get("delta").and_then(Value::as_str).unwrap_or("");
        match kind.as_str() {
            "error" => return Err(StreamFailure::from_json(&v)),
            "response.failed" => {
                let error = v
                    .pointer("/response/error")
                    .filter(|e| e.is_object())
                    .cloned()
                    .unwrap_or_else(|| json!({"message": "the response failed"}));
                return Err(StreamFailure::from_json(&json!({ "error": error })));
            }
            "response.output_item.added" => {
                if let Some(item) = v.get("item") {
                    self.items.insert(index, item.clone());
                }
            }
            "response.output_item.done" => {
                if let Some(item) = v.get("item") {
                    self.items.insert(index, item.clone());
                    self.done.insert(index);
                }
            }
            "response.output_text.delta" => {
                let d = delta();
                self.produced.text(d);
                self.texts.entry(index).or_default().push_str(d);
            }
            "response.function_call_arguments.delta" => {
                let d = delta();
                self.produced.text(d);
                self.arguments.entry(index).or_default().push_str(d);
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.produced.hidden();
            }
            "response.completed" | "response.incomplete" => {
                self.last = v.get("response").cloned();
                return Ok(Flow::Done);
            }
            _ => {} // created, in_progress, content_part.*, *.done…
        }
        Ok(Flow::More)
    }

    fn produced(&self) -> Produced {
        self.produced
    }

    fn finish(self: Box<Self>, endpoint: &str) -> Result<ChatResponse, BackendError> {
        let Some(mut response) = self.last else {
            return Err(BackendError::InvalidResponse {
                endpoint: endpoint.to_owned(),
                message: "the stream ended before the answer did (no response.completed)"
                    .to_owned(),
            });
        };
        let has_output = response
            .get("output")
            .and_then(Value::as_array)
            .is_some_and(|o| !o.is_empty());
        if !has_output {
            // The final event's output is the authority; some servers leave it empty and only
            // the items streamed before it say what was produced.
            let mut items = self.items;
            for (i, item) in &mut items {
                if self.done.contains(i) {
                    continue;
                }
                if let Some(args) = self.arguments.get(i) {
                    item["arguments"] = Value::String(args.clone());
                }
                if let Some(text) = self.texts.get(i) {
                    item["content"] = json!([{"type": "output_text", "text": text}]);
                }
            }
            response["output"] = Value::Array(items.into_values().collect());
        }
        crate::responses::parse_response(&response, endpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(data: Value) -> SseEvent {
        SseEvent {
            name: String::new(),
            data: data.to_string(),
        }
    }

    #[test]
    fn an_empty_final_output_is_filled_from_the_streamed_items() {
        let mut a = ResponsesAssembler::default();
        for data in [
            json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "message", "content": []}}),
            json!({"type": "response.output_text.delta", "output_index": 0, "delta": "hé"}),
            json!({"type": "response.output_item.added", "output_index": 1,
                "item": {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{\"path\":"}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "\"a\"}"}),
        ] {
            assert!(matches!(a.event(&event(data)), Ok(Flow::More)));
        }
        let done = json!({"type": "response.completed", "response": {"status": "completed",
            "output": [], "usage": {"input_tokens": 3, "output_tokens": 2}}});
        assert!(matches!(a.event(&event(done)), Ok(Flow::Done)));
        let r = Box::new(a).finish("e").unwrap();
        assert_eq!(r.text.as_deref(), Some("hé"));
        assert_eq!(r.tool_calls[0].arguments, json!({"path": "a"}));
        assert_eq!(r.usage.output_tokens, 2);
        // A stream cut before its end is an invalid response, not an empty answer.
        assert!(Box::new(ResponsesAssembler::default()).finish("e").is_err());
    }
}
