//! Trace and span ids derived from the execution: the trace id is the execution id's 128 bits
//! (a UUIDv7), a span id the first 64 bits of `sha256(execution id ‖ key)`. Any process that
//! reads the same log — the first run, a resume, a takeover — names the same spans the same way,
//! and a step's process can be told its parent span before the span is exported.

use opentelemetry::trace::{SpanId, TraceId};
use orca_core::ExecutionId;
use sha2::{Digest as _, Sha256};

/// The execution's trace.
#[must_use]
pub fn trace_id(exec: ExecutionId) -> TraceId {
    TraceId::from_bytes(*exec.uuid().as_bytes())
}

/// The span named `key` in the execution's trace (never the invalid all-zero id).
#[must_use]
pub fn span_id(exec: ExecutionId, key: &str) -> SpanId {
    let mut h = Sha256::new();
    h.update(exec.uuid().as_bytes());
    h.update(b"\0");
    h.update(key.as_bytes());
    let digest = h.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    if bytes == [0; 8] {
        bytes[7] = 1;
    }
    SpanId::from_bytes(bytes)
}

/// The root span (`invoke_workflow`).
#[must_use]
pub fn root_span(exec: ExecutionId) -> SpanId {
    span_id(exec, "root")
}

/// A step attempt's span (`invoke_agent`).
#[must_use]
pub fn attempt_span(exec: ExecutionId, step: &str, attempt: u32) -> SpanId {
    span_id(exec, &format!("attempt\0{step}\0{attempt}"))
}

/// The span of the audit entry `seq` (a model turn, a tool call, a check, a decision).
#[must_use]
pub fn entry_span(exec: ExecutionId, seq: u64) -> SpanId {
    span_id(exec, &format!("seq\0{seq}"))
}

/// The W3C `traceparent` of a step attempt: what its model requests and its command-line
/// agent's own spans hang under.
#[must_use]
pub fn traceparent(exec: ExecutionId, step: &str, attempt: u32) -> String {
    format!(
        "00-{}-{}-01",
        trace_id(exec),
        attempt_span(exec, step, attempt)
    )
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
        assert_eq!(tp.len(), 55, "{tp}");
        assert!(tp.starts_with("00-") && tp.ends_with("-01"), "{tp}");
    }
}
