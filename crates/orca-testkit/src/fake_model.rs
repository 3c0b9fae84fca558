//! The bodies a fake OpenAI-compatible model server answers with (a test's `wiremock`
//! responder decides what to say; these say it in the Chat Completions wire format).

use serde_json::{Value, json};

/// One function call of an assistant message: `name` with `arguments` (sent as a JSON string,
/// as the API does).
#[must_use]
pub fn tool_call(id: &str, name: &str, arguments: &Value) -> Value {
    json!({"id": id, "type": "function",
        "function": {"name": name, "arguments": arguments.to_string()}})
}

/// A non-streamed chat completion by `model` whose assistant message makes `calls` (see
/// [`tool_call`]), with a small fixed usage (10 prompt, 5 completion tokens).
#[must_use]
pub fn tool_calls(id: &str, model: &Value, calls: Vec<Value>) -> Value {
    json!({
        "id": id,
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "tool_calls": calls}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}
    })
}
