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
    serde_json::from_value(v.clone()).map_err(|e| {
        ToolError::new(format!(
            "argument `{name}`: {e}; call again with `{name}` as the tool's schema describes it"
        ))
    })
}

/// An optional argument (absent, `null` or a blank string: `None`). A small model in json
/// mode writes every field of a tool's arguments, and fills one it means to leave out with
/// `""`: a Qwen2.5-Coder-1.5B planner sent `"session_id": ""` to `orca_ask_agent` three times
/// after being told to omit it, and stalled.
pub(super) fn opt_arg<T: for<'de> Deserialize<'de>>(
    args: &Value,
    name: &str,
) -> Result<Option<T>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| {
                ToolError::new(format!(
                    "argument `{name}`: {e}; `{name}` is optional: omit it, unless an earlier result gave you one to pass"
                ))
            }),
    }
}

#[cfg(test)]
mod tests {
    use orca_core::SessionId;
    use serde_json::json;

    use super::{arg, opt_arg};

    /// A refused argument says how to fix the call, not only what is wrong.
    #[test]
    fn a_bad_argument_says_how_to_fix_the_call() {
        // What a small model sent: a made-up session id for a new conversation.
        let e = opt_arg::<SessionId>(&json!({"session_id": "abc123"}), "session_id").unwrap_err();
        assert!(
            e.message.contains("expected prefix") && e.message.contains("omit it"),
            "{}",
            e.message
        );
        assert!(
            opt_arg::<SessionId>(&json!({}), "session_id")
                .unwrap()
                .is_none()
        );
        // Left blank: taken as left out.
        for blank in ["", "  "] {
            assert!(
                opt_arg::<SessionId>(&json!({ "session_id": blank }), "session_id")
                    .unwrap()
                    .is_none()
            );
        }
        let e = arg::<u32>(&json!({"n": "x"}), "n").unwrap_err();
        assert!(e.message.contains("call again with `n`"), "{}", e.message);
    }
}
