//! Trace and span ids derived from the execution: the trace id is the execution id's 128 bits
//! (a UUIDv7), a span id the first 64 bits of `sha256(execution id ‖ key)`. Any process that
//! reads the same log — the first run, a resume, a takeover — names the same spans the same way,
//! and a step's process can be told its parent span before the span is exported.

use opentelemetry::trace::{SpanId, TraceId};
use orca_core::ExecutionId;
use orca_core::trace_context;

/// The execution's trace.
#[must_use]
pub fn trace_id(exec: ExecutionId) -> TraceId {
    TraceId::from_bytes(*exec.uuid().as_bytes())
}

/// The span named `key` in the execution's trace (never the invalid all-zero id).
#[must_use]
pub fn span_id(exec: ExecutionId, key: &str) -> SpanId {
    SpanId::from_bytes(trace_context::span_id(exec, key))
}

/// The root span (`invoke_workflow`).
#[must_use]
pub fn root_span(exec: ExecutionId) -> SpanId {
    span_id(exec, "root")
}

/// A step attempt's span (`invoke_agent`).
#[must_use]
pub fn attempt_span(exec: ExecutionId, step: &str, attempt: u32) -> SpanId {
    span_id(exec, &trace_context::attempt_key(step, attempt))
}

/// The span of the audit entry `seq` (a model turn, a tool call, a check, a decision).
#[must_use]
pub fn entry_span(exec: ExecutionId, seq: u64) -> SpanId {
    span_id(exec, &format!("seq\0{seq}"))
}

/// A wait before the attempt that the entry `seq` starts (`what`: `queue` or `lock`).
#[must_use]
pub fn wait_span(exec: ExecutionId, what: &str, seq: u64) -> SpanId {
    span_id(exec, &format!("{what}\0{seq}"))
}

/// The W3C `traceparent` of a step attempt: what its model requests and its command-line
/// agent's own spans hang under.
#[must_use]
pub fn traceparent(exec: ExecutionId, step: &str, attempt: u32) -> String {
    trace_context::traceparent(exec, step, attempt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinct() {
        let exec = ExecutionId::new();
        assert_eq!(trace_id(exec).to_bytes(), *exec.uuid().as_bytes());
        assert_eq!(attempt_span(exec, "a", 1), attempt_span(exec, "a", 1));
        assert_ne!(attempt_span(exec, "a", 1), attempt_span(exec, "a", 2));
        assert_ne!(root_span(exec), entry_span(exec, 0));
        assert_ne!(root_span(exec), root_span(ExecutionId::new()));
        let tp = traceparent(exec, "a", 1);
        assert!(tp.contains(&attempt_span(exec, "a", 1).to_string()), "{tp}");
        assert_eq!(tp.len(), 55, "{tp}");
        assert!(tp.starts_with("00-") && tp.ends_with("-01"), "{tp}");
    }
}
