//! Reading a tool call's arguments; errors the model can act on.

use orca_core::ToolError;
use serde::Deserialize;
use serde_json::Value;

/// A service error as the model reads it.
pub(super) fn tool_err(e: crate::ServiceError) -> ToolError {
    ToolError::new(e.to_string())
}

/// A store error as the model reads it.
pub(super) fn store_err(e: orca_store::StoreError) -> ToolError {
    ToolError::new(e.to_string())
}

/// A required argument.
pub(super) fn arg<T: for<'de> Deserialize<'de>>(args: &Value, name: &str) -> Result<T, ToolError> {
    let v = args
        .get(name)
        .ok_or_else(|| ToolError::new(format!("missing argument `{name}`")))?;
    serde_json::from_value(v.clone()).map_err(|e| ToolError::new(format!("argument `{name}`: {e}")))
}

/// An optional argument (absent or `null`: `None`).
pub(super) fn opt_arg<T: for<'de> Deserialize<'de>>(
    args: &Value,
    name: &str,
) -> Result<Option<T>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| ToolError::new(format!("argument `{name}`: {e}"))),
    }
}
