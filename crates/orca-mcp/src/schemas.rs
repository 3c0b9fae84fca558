//! The output schema of each tool: a successful answer is a JSON object (also sent as
//! `structuredContent`) holding at least these fields, each of the JSON type named. The
//! fields' own insides are the documents the rest of orca writes (`docs/events.md`,
//! `orca plan schema`), so a schema here names their type and leaves their inside open.

use std::sync::Arc;

use rmcp::model::JsonObject;
use serde_json::{Value, json};

/// An object schema with `required` fields (name, JSON type), other fields allowed. Every
/// property has a type: a property schema of `{}` constrains nothing, and schema checkers
/// (the MCP Inspector's `--strict`) flag it.
#[must_use]
pub(crate) fn object(required: &[(&str, &str)]) -> Arc<JsonObject> {
    let properties: serde_json::Map<String, Value> = required
        .iter()
        .map(|(field, ty)| ((*field).to_owned(), json!({ "type": ty })))
        .collect();
    let names: Vec<&str> = required.iter().map(|(field, _)| *field).collect();
    let schema = json!({
        "type": "object",
        "properties": properties,
        "required": names,
        "additionalProperties": true,
    });
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}
