//! Execution events for other tools: a stable JSON Lines stream derived from the execution's
//! audit log (durable, hash-chained, already redacted), so it works from any process, during a
//! run and after it, and gives the same events every time (schema: `docs/events.md`).
//!
//! Each event is one audit entry: its `seq`, time and kind (`type`), the step and attempt it
//! belongs to (found through the entry's parent chain: a tool call's parent is its attempt's
//! `task.attempt.started` entry), and the entry's data as written. Also here: the per-step
//! totals (time, tokens, cost) that `exec show` and the run summary print.

use std::collections::BTreeMap;

use orca_core::{ExecutionId, PlanId, Usage};
use orca_store::{AuditEntry, Store};
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use crate::ExecutionService;
use crate::error::Result;

/// The version of the event shape (`format_version` of every event).
pub const EVENTS_FORMAT_VERSION: u32 = 1;

/// One execution event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecEvent {
    /// [`EVENTS_FORMAT_VERSION`].
    pub format_version: u32,
    /// The entry's position in the execution's audit log (0-based, gap-free, increasing).
    pub seq: u64,
    /// When it was recorded.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The execution.
    pub execution_id: ExecutionId,
    /// Its plan.
    pub plan_id: PlanId,
    /// What happened: the audit entry's kind (`execution.started`, `task.attempt.completed`,
    /// `tool.call` with its bounded result, `agent.answer`, `decision.requested`…).
    #[serde(rename = "type")]
    pub kind: String,
    /// The entry this one happened inside.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
    /// The step it is about, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// The attempt it is about, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The entry's data, as recorded (redacted).
    pub data: Value,
}

impl ExecEvent {
    /// Whether this event ends the execution (`execution.completed`, `.failed`, `.stopped`,
    /// `.replanned`).
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.kind.as_str(),
            "execution.completed"
                | "execution.failed"
                | "execution.stopped"
                | "execution.replanned"
        )
    }
}

/// Derives the events of `entries` (one execution's log, in order).
#[must_use]
pub fn from_entries(
    plan_id: PlanId,
    execution_id: ExecutionId,
    entries: &[AuditEntry],
) -> Vec<ExecEvent> {
    // seq → (step, attempt) of every entry that names one, for its children.
    let mut scope: BTreeMap<u64, (Option<String>, Option<u32>)> = BTreeMap::new();
    entries
        .iter()
        .map(|entry| {
            let own_step = entry
                .data
                .get("step_id")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let own_attempt = entry
                .data
                .get("attempt")
                .and_then(Value::as_u64)
                .and_then(|a| u32::try_from(a).ok());
            let inherited = entry.parent.and_then(|p| scope.get(&p)).cloned();
            let step_id = own_step.or_else(|| inherited.as_ref().and_then(|i| i.0.clone()));
            let attempt = own_attempt.or_else(|| inherited.as_ref().and_then(|i| i.1));
            if step_id.is_some() {
                scope.insert(entry.seq, (step_id.clone(), attempt));
            }
            ExecEvent {
                format_version: EVENTS_FORMAT_VERSION,
                seq: entry.seq,
                at: entry.at,
                execution_id,
                plan_id,
                kind: entry.kind.clone(),
                parent: entry.parent,
                step_id,
                attempt,
                data: entry.data.clone(),
            }
        })
        .collect()
}

/// The events of an execution, from its durable audit log; with `after`, only later ones.
///
/// # Errors
///
/// The log cannot be read.
pub async fn read(
    store: &dyn Store,
    plan_id: PlanId,
    execution_id: ExecutionId,
    after: Option<u64>,
) -> Result<Vec<ExecEvent>> {
    let entries = store
        .entries(ExecutionService::log(plan_id, execution_id))
        .await?;
    let mut events = from_entries(plan_id, execution_id, &entries);
    if let Some(after) = after {
        events.retain(|e| e.seq > after);
    }
    Ok(events)
}

/// What a step took: attempts, time in its attempts, tokens and cost.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StepTotals {
    /// Attempts that ended (completed, failed or interrupted).
    pub attempts: u32,
    /// Milliseconds from each attempt's start to its end, summed.
    pub duration_ms: u64,
    /// Tokens, turns and cost (micro-USD) of its model calls.
    pub usage: Usage,
}

/// When each attempt started, by step and attempt number (its `task.attempt.started` entry):
/// an attempt's end is measured from its own start, whatever entry its end hangs under (an
/// interruption's parent is the stop, not the start).
#[must_use]
pub fn attempt_starts(events: &[ExecEvent]) -> BTreeMap<(String, u32), OffsetDateTime> {
    events
        .iter()
        .filter(|e| e.kind == "task.attempt.started")
        .filter_map(|e| Some(((e.step_id.clone()?, e.attempt?), e.at)))
        .collect()
}

/// When the attempt `e` ends started: its own start entry, else (older logs without attempt
/// numbers) its parent's time.
#[must_use]
pub fn start_of(
    e: &ExecEvent,
    starts: &BTreeMap<(String, u32), OffsetDateTime>,
    by_seq: &BTreeMap<u64, OffsetDateTime>,
) -> Option<OffsetDateTime> {
    match (&e.step_id, e.attempt) {
        (Some(step), Some(attempt)) => starts.get(&(step.clone(), attempt)).copied(),
        _ => e.parent.and_then(|p| by_seq.get(&p)).copied(),
    }
}

/// Per-step totals and the execution's total, from its events.
#[must_use]
pub fn totals(events: &[ExecEvent]) -> (BTreeMap<String, StepTotals>, StepTotals) {
    let starts = attempt_starts(events);
    let by_seq: BTreeMap<u64, OffsetDateTime> = events.iter().map(|e| (e.seq, e.at)).collect();
    let mut steps: BTreeMap<String, StepTotals> = BTreeMap::new();
    for e in events {
        let Some(step) = &e.step_id else { continue };
        match e.kind.as_str() {
            "task.attempt.completed" | "task.attempt.failed" | "task.attempt.interrupted" => {
                let t = steps.entry(step.clone()).or_default();
                t.attempts += 1;
                if let Some(start) = start_of(e, &starts, &by_seq) {
                    let ms = (e.at - start).whole_milliseconds();
                    t.duration_ms = t.duration_ms.saturating_add(u64::try_from(ms).unwrap_or(0));
                }
                if let Some(usage) = e
                    .data
                    .get("usage")
                    .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok())
                {
                    t.usage.add(&usage);
                }
            }
            _ => {}
        }
    }
    let mut total = StepTotals::default();
    for t in steps.values() {
        total.attempts += t.attempts;
        total.duration_ms = total.duration_ms.saturating_add(t.duration_ms);
        total.usage.add(&t.usage);
    }
    (steps, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use orca_core::Digest;
    use serde_json::json;

    fn entry(seq: u64, parent: Option<u64>, kind: &str, data: Value) -> AuditEntry {
        AuditEntry {
            seq,
            at: OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(i64::try_from(seq).unwrap()),
            parent,
            kind: kind.to_owned(),
            data,
            prev: Digest::of_bytes(b""),
            hash: Digest::of_bytes(b""),
        }
    }

    #[test]
    fn steps_and_attempts_come_from_the_parent_chain_and_totals_add_up() {
        let entries = vec![
            entry(0, None, "execution.created", json!({})),
            entry(
                1,
                Some(0),
                "task.attempt.started",
                json!({"step_id": "a", "attempt": 2}),
            ),
            entry(2, Some(1), "tool.call", json!({"tool": "read_file"})),
            entry(
                4,
                Some(1),
                "task.attempt.completed",
                json!({"step_id": "a", "usage": {"input_tokens": 10, "output_tokens": 5, "cost_micro_usd": 7}}),
            ),
        ];
        let events = from_entries(PlanId::new(), ExecutionId::new(), &entries);
        assert_eq!(events[2].step_id.as_deref(), Some("a"));
        assert_eq!(events[2].attempt, Some(2));
        assert_eq!(events[0].step_id, None);
        let (steps, total) = totals(&events);
        assert_eq!(steps["a"].duration_ms, 3000);
        assert_eq!(total.usage.input_tokens, 10);
        assert_eq!(total.usage.cost_micro_usd, 7);
        assert_eq!(total.attempts, 1);
    }
}
