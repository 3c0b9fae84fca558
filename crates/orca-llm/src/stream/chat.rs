//! Chat Completions chunks (`data: {"choices":[{"delta":…}]}` … `data: [DONE]`): text deltas
//! appended, tool-call deltas assembled by `index`, the finish reason kept, usage from the
//! last chunk (`stream_options.include_usage`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::sse::SseEvent;
use super::{Assemble, Flow, Produced, StreamFailure, data_json};
use crate::backend::ChatResponse;
use crate::error::BackendError;

#[derive(Debug, Default)]
struct Call {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Assembles one Chat Completions stream.
#[derive(Debug, Default)]
pub(crate) struct ChatAssembler {
    text: String,
    calls: BTreeMap<u64, Call>,
    finish_reason: Option<String>,
    usage: Option<Value>,
    produced: Produced,
    any: bool,
}

impl ChatAssembler {
    /// Where a tool-call delta without `index` belongs (servers that send each call whole
    /// leave it out): the call with its id, else a new call when it names a function, else
    /// the last call.
    fn unindexed(&self, c: &Value) -> u64 {
        let id = c
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        if let Some(i) = self
            .calls
            .iter()
            .find(|(_, call)| id.is_some() && call.id.as_deref() == id)
            .map(|(i, _)| *i)
        {
            return i;
        }
        let next = self.calls.keys().next_back().map_or(0, |i| i + 1);
        let names = c
            .pointer("/function/name")
            .and_then(Value::as_str)
            .is_some();
        if names || self.calls.is_empty() {
            next
        } else {
            next - 1
        }
    }
}

impl Assemble for ChatAssembler {
    fn event(&mut self, event: &SseEvent) -> Result<Flow, StreamFailure> {
        if event.data.trim() == "[DONE]" {
            return Ok(Flow::Done);
        }
        let v = data_json(event)?;
        if v.get("error").is_some_and(|e| !e.is_null()) {
            return Err(StreamFailure::from_json(&v));
        }
        self.any = true;
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        let Some(choice) = v
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(Flow::More);
        };
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(r.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(Flow::More);
        };
        if let Some(t) = delta.get("content").and_then(Value::as_str)
            && !t.is_empty()
        {
            self.text.push_str(t);
            self.produced.text(t);
        }
        for c in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = match c.get("index").and_then(Value::as_u64) {
                Some(i) => i,
                None => self.unindexed(c),
            };
            let call = self.calls.entry(index).or_default();
            if let Some(id) = c
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                call.id = Some(id.to_owned());
            }
            let f = c.get("function");
            if let Some(n) = f.and_then(|f| f.get("name")).and_then(Value::as_str) {
                call.name.push_str(n);
            }
            let arguments = match f.and_then(|f| f.get("arguments")) {
                Some(Value::String(a)) => a.clone(),
                Some(v @ Value::Object(_)) => v.to_string(),
                _ => String::new(),
            };
            call.arguments.push_str(&arguments);
            self.produced.text(&arguments);
        }
        Ok(Flow::More)
    }

    fn produced(&self) -> Produced {
        self.produced
    }

    fn looping(&self) -> Option<crate::repetition::Loop> {
        crate::repetition::looping(&self.text).or_else(|| {
            self.calls
                .values()
                .next_back()
                .and_then(|c| crate::repetition::looping(&c.arguments))
        })
    }

    fn end(&mut self, cut: bool) {
        if !cut {
            let kept = self.text.trim_end().len();
            self.text.truncate(kept);
        }
        let reason = match (cut, self.calls.is_empty()) {
            (true, _) => "length",
            (false, true) => "stop",
            (false, false) => "tool_calls",
        };
        self.finish_reason = Some(reason.to_owned());
    }

    fn finish(self: Box<Self>, endpoint: &str) -> Result<ChatResponse, BackendError> {
        if !self.any {
            return Err(BackendError::InvalidResponse {
                endpoint: endpoint.to_owned(),
                message: "the stream ended before any answer".to_owned(),
            });
        }
        let calls: Vec<Value> = self
            .calls
            .into_values()
            .filter(|c| !c.name.is_empty())
            .map(|c| {
                let mut call =
                    json!({"type": "function", "function": {"name": c.name, "arguments": c.arguments}});
                if let Some(id) = c.id {
                    call["id"] = json!(id);
                }
                call
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": self.text});
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        let mut body =
            json!({"choices": [{"message": message, "finish_reason": self.finish_reason}]});
        if let Some(u) = self.usage {
            body["usage"] = u;
        }
        crate::openai::parse_response(body, endpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(a: &mut ChatAssembler, data: Value) {
        let event = SseEvent {
            name: String::new(),
            data: data.to_string(),
        };
        assert!(matches!(a.event(&event), Ok(Flow::More)));
    }

    #[test]
    fn calls_without_index_are_told_apart() {
        // Each call whole in its own chunk, no index (as some servers stream them).
        let mut a = ChatAssembler::default();
        for (id, name) in [("c1", "read_file"), ("c2", "list_files")] {
            feed(
                &mut a,
                json!({"choices": [{"delta": {"tool_calls": [
                    {"id": id, "function": {"name": name, "arguments": "{}"}}]}}]}),
            );
        }
        feed(
            &mut a,
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
        );
        let r = Box::new(a).finish("e").unwrap();
        let names: Vec<_> = r.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["read_file", "list_files"]);
    }
}
