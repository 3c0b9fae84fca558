//! The trace context of the step attempt a model request belongs to (ADR 0048, telemetry): the
//! agent runtime sets it around an attempt when export is on; every model request then carries
//! it as `traceparent`, so a backend that traces joins the execution's trace.

use reqwest::header::{HeaderMap, HeaderValue};

tokio::task_local! {
    /// The attempt's W3C `traceparent`.
    pub static TRACEPARENT: String;
}

/// The `traceparent` in force, if any.
#[must_use]
pub fn current() -> Option<String> {
    TRACEPARENT.try_with(Clone::clone).ok()
}

/// Adds `traceparent` to a request's headers when one is in force.
pub(crate) fn insert(headers: &mut HeaderMap) {
    if let Some(value) = current().and_then(|tp| HeaderValue::from_str(&tp).ok()) {
        headers.insert("traceparent", value);
    }
}
