//! The waits before a step attempt, from its `task.attempt.started` entry (`ready_at`,
//! `lock_wait`): a `queue wait` span from when the runner saw the step ready to run to when it
//! started (under the root), and within it a `lock wait` span from when the step first found a
//! resource lock it needs held by someone else.

use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanId, SpanKind};
use orca_services::events::ExecEvent;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::ids;
use crate::spans::Builder;

fn time_at(v: Option<&Value>) -> Option<OffsetDateTime> {
    v.and_then(Value::as_str)
        .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok())
}

/// The wait spans of the attempt `started` begins (none for an entry without `ready_at`: a log
/// written before they were recorded).
pub(crate) fn push(
    b: &mut Builder,
    started: &ExecEvent,
    root: SpanId,
    base: &dyn Fn(&str) -> Vec<KeyValue>,
) {
    let Some(ready) = time_at(started.data.get("ready_at")) else {
        return;
    };
    let exec = started.execution_id;
    let step = started.step_id.clone().unwrap_or_default();
    let attempt = i64::from(started.attempt.unwrap_or(0));
    let queue = ids::wait_span(exec, "queue", started.seq);
    let mut attrs = base("queue_wait");
    attrs.push(KeyValue::new("orca.step.id", step.clone()));
    attrs.push(KeyValue::new("orca.attempt", attempt));
    if let Some(agent) = crate::spans::text(&started.data, "agent") {
        attrs.push(KeyValue::new("gen_ai.agent.name", agent));
    }
    b.push(
        queue,
        root,
        SpanKind::Internal,
        "queue wait".to_owned(),
        (ready, started.at),
        attrs,
        None,
        Vec::new(),
    );
    let Some(since) = time_at(started.data.pointer("/lock_wait/since")) else {
        return;
    };
    let locks: Vec<opentelemetry::StringValue> = started
        .data
        .pointer("/lock_wait/locks")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(|s| opentelemetry::StringValue::from(s.to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let mut attrs = base("lock_wait");
    attrs.push(KeyValue::new("orca.step.id", step));
    attrs.push(KeyValue::new("orca.attempt", attempt));
    attrs.push(KeyValue::new(
        "orca.lock.resources",
        opentelemetry::Value::Array(locks.into()),
    ));
    b.push(
        ids::wait_span(exec, "lock", started.seq),
        queue,
        SpanKind::Internal,
        "lock wait".to_owned(),
        (since, started.at),
        attrs,
        None,
        Vec::new(),
    );
}
