//! The diff of every step: the hook around an attempt that records what it changed (a
//! `step.changes` entry under the attempt), and the reading of those records.
//!
//! A failure to snapshot never fails the attempt: it is logged, and the attempt has no entry.

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use orca_core::changes::MAX_LISTED_FILES;
use orca_core::{
    AuditKind, ExecutionId, RecordedChanges, Snapshot, StepChanges, StepId, TaskRequest,
};
use orca_store::Store;
use serde_json::Value;

use crate::error::Result;
use crate::execution::ExecutionService;
use crate::tools::Gate;

/// The in-place attempts of one process: a snapshot of the working tree holds whatever every
/// attempt running beside it changed too, so an attempt that overlapped another says so.
#[derive(Debug, Default)]
pub(crate) struct InPlace {
    running: AtomicUsize,
    started: AtomicU64,
}

/// What an in-place attempt saw when it started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started {
    others: usize,
    number: u64,
}

impl InPlace {
    fn begin(&self) -> Started {
        Started {
            others: self.running.fetch_add(1, Ordering::SeqCst),
            number: self.started.fetch_add(1, Ordering::SeqCst) + 1,
        }
    }

    /// Whether another in-place attempt ran at any moment of this one.
    fn end(&self, started: Started) -> bool {
        self.running.fetch_sub(1, Ordering::SeqCst);
        started.others > 0 || self.started.load(Ordering::SeqCst) != started.number
    }
}

/// The snapshot before an attempt (with, in place, what was running), or `None` (logged) if
/// it cannot be taken.
pub(crate) async fn before(
    changes: &dyn StepChanges,
    in_place: &InPlace,
    request: &TaskRequest,
    workdir: Option<&Path>,
) -> Option<(Snapshot, Option<Started>)> {
    let step = &request.step.id;
    let started = workdir.is_none().then(|| in_place.begin());
    match changes
        .snapshot(request.execution_id, step, request.attempt, workdir)
        .await
    {
        Ok(s) => Some((s, started)),
        Err(e) => {
            if let Some(started) = started {
                in_place.end(started);
            }
            tracing::warn!(%step, error = %e, "cannot snapshot the step's files before its attempt");
            None
        }
    }
}

/// Snapshots after the attempt, compares with `before` and writes the attempt's
/// `step.changes` entry through its gate.
pub(crate) async fn record(
    changes: &dyn StepChanges,
    in_place: &InPlace,
    gate: &Gate,
    request: &TaskRequest,
    workdir: Option<&Path>,
    (before, started): (Snapshot, Option<Started>),
) {
    let step = &request.step.id;
    let (execution, attempt) = (request.execution_id, request.attempt);
    let after = changes.snapshot(execution, step, attempt, workdir).await;
    let shared = started.is_some_and(|s| in_place.end(s));
    let compared = match after {
        Ok(after) => {
            changes
                .compare(execution, step, attempt, before, after)
                .await
        }
        Err(e) => Err(e),
    };
    let (mut files, trees) = match compared {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(%step, error = %e, "cannot record what the step's attempt changed");
            return;
        }
    };
    let more = files.len().saturating_sub(MAX_LISTED_FILES);
    files.truncate(MAX_LISTED_FILES);
    let (before, after) = trees.unzip();
    let recorded = RecordedChanges {
        step: step.clone(),
        attempt,
        worktree: workdir.is_some(),
        shared,
        before,
        after,
        files,
        more_files: u64::try_from(more).unwrap_or(u64::MAX),
    };
    match serde_json::to_value(&recorded) {
        Ok(data) => gate.record_changes(data).await,
        Err(e) => tracing::warn!(%step, error = %e, "cannot serialise the step's changes"),
    }
}

/// The changes recorded for an execution's attempts, in log order (a later attempt of a step
/// after its earlier ones). Entries that do not parse are skipped (the audit verifies them).
///
/// # Errors
/// The execution or its log cannot be read.
pub async fn recorded(
    executions: &ExecutionService,
    execution: ExecutionId,
) -> Result<Vec<RecordedChanges>> {
    let header = executions.header(execution).await?;
    let plan_id = header.value.info().plan_id;
    recorded_in(&**executions.store(), plan_id, execution).await
}

async fn recorded_in(
    store: &dyn Store,
    plan_id: orca_core::PlanId,
    execution: ExecutionId,
) -> Result<Vec<RecordedChanges>> {
    let entries = store
        .entries(ExecutionService::log(plan_id, execution))
        .await?;
    Ok(entries
        .into_iter()
        .filter(|e| e.kind == AuditKind::StepChanges)
        .filter_map(|e| serde_json::from_value::<RecordedChanges>(e.data).ok())
        .collect())
}

/// The last recorded attempt of each step of `order` (the plan's steps, in plan order).
#[must_use]
pub fn latest<'a>(recorded: &'a [RecordedChanges], order: &[&StepId]) -> Vec<&'a RecordedChanges> {
    order
        .iter()
        .filter_map(|s| recorded.iter().rev().find(|r| &r.step == *s))
        .collect()
}

/// A recorded attempt as JSON (the entry's own shape).
#[must_use]
pub fn to_json(recorded: &RecordedChanges) -> Value {
    serde_json::to_value(recorded).unwrap_or(Value::Null)
}
