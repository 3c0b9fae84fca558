//! The W3C trace context of a step attempt (ADR 0048, telemetry), derived from ids alone so
//! every process names it the same way: the trace id is the execution id's 128 bits, a span id
//! the first 64 bits of `sha256(execution id ‖ 0 ‖ key)`. The exporter names its spans with it;
//! an agent passes it on (`traceparent` on model requests, `TRACEPARENT` to a command-line
//! agent) so their own spans join the execution's trace.

use sha2::{Digest as _, Sha256};

use crate::ExecutionId;

/// The span id named `key` in the execution's trace (never all zeros).
#[must_use]
pub fn span_id(exec: ExecutionId, key: &str) -> [u8; 8] {
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
    bytes
}

/// The key of a step attempt's span.
#[must_use]
pub fn attempt_key(step: &str, attempt: u32) -> String {
    format!("attempt\0{step}\0{attempt}")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `traceparent` (version 00, sampled) of a step attempt's span.
#[must_use]
pub fn traceparent(exec: ExecutionId, step: &str, attempt: u32) -> String {
    format!(
        "00-{}-{}-01",
        hex(exec.uuid().as_bytes()),
        hex(&span_id(exec, &attempt_key(step, attempt)))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_w3c_shaped_and_stable() {
        let exec = ExecutionId::new();
        let tp = traceparent(exec, "build", 2);
        assert_eq!(tp, traceparent(exec, "build", 2));
        assert_ne!(tp, traceparent(exec, "build", 3));
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!(parts.len(), 4, "{tp}");
        assert_eq!(
            (parts[0], parts[1].len(), parts[2].len(), parts[3]),
            ("00", 32, 16, "01")
        );
        assert_eq!(parts[1], hex(exec.uuid().as_bytes()));
    }
}
