//! The output schema of each tool: a successful answer is a JSON object (also sent as
//! `structuredContent`) holding at least these fields. The fields' own shapes are the
//! documents the rest of orca writes (`docs/events.md`, `orca plan schema`), so a schema here
//! names them and leaves their inside open.

use std::sync::Arc;

use rmcp::model::JsonObject;
use serde_json::{Value, json};

/// An object schema with `required` fields (any JSON each), other fields allowed.
#[must_use]
pub(crate) fn object(required: &[&str]) -> Arc<JsonObject> {
    let properties: serde_json::Map<String, Value> = required
        .iter()
        .map(|f| ((*f).to_owned(), json!({})))
        .collect();
    let schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": true,
    });
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}
