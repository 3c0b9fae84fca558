//! The JSON the tools and resources return (before the redactor).

use orca_core::{Execution, Task};
use orca_store::AuditEntry;
use serde_json::{Value, json};

/// The most events one `execution_watch` answer carries; the cursor pages through the rest.
pub const MAX_EVENTS: usize = 100;

/// An execution with every task record (the shape of `orca exec show --json`).
pub use orca_services::execution::snapshot_json as snapshot;

/// One line per task: its step, status and attempts.
#[must_use]
pub fn task_brief(task: &Task) -> Value {
    json!({
        "step_id": task.step_id(),
        "status": task.status(),
        "attempts": task.attempts().len(),
    })
}

/// The decision an execution waits for, with what this server lets the agent answer.
#[must_use]
pub fn pending_decision(execution: &Execution) -> Option<Value> {
    let Execution::Running(running) = execution else {
        return None;
    };
    let pending = running.decision.as_ref()?;
    let keys = pending.request.option_keys();
    let allowed: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| matches!(*k, "retry" | "stop"))
        .collect();
    Some(json!({
        "request": pending.request,
        "answered": pending.answer,
        "agent_may_answer": allowed,
        "with": "the decision_answer tool (retry or stop); other answers are the human's: orca exec decide",
    }))
}

/// Audit entries from `cursor` on (at most [`MAX_EVENTS`]), and the cursor after them.
#[must_use]
pub fn events_since(entries: &[AuditEntry], cursor: u64) -> (Vec<Value>, u64) {
    let new: Vec<&AuditEntry> = entries
        .iter()
        .filter(|e| e.seq >= cursor)
        .take(MAX_EVENTS)
        .collect();
    let next = new.last().map_or(cursor, |e| e.seq + 1);
    let events = new
        .into_iter()
        .map(|e| {
            let mut v = json!(e);
            if let Some(obj) = v.as_object_mut() {
                obj.remove("prev");
                obj.remove("hash");
            }
            v
        })
        .collect();
    (events, next)
}
