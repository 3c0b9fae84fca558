//! The diff of every step: the hook around an attempt that records what it changed (a
//! `step.changes` entry under the attempt), and the reading of those records.
//!
//! A failure to snapshot never fails the attempt: it is logged, and the attempt has no entry.

use std::path::Path;

use orca_core::changes::MAX_LISTED_FILES;
use orca_core::{
    AuditKind, ExecutionId, RecordedChanges, Snapshot, StepChanges, StepId, TaskRequest,
};
use orca_store::Store;
use serde_json::Value;

use crate::error::Result;
use crate::execution::ExecutionService;
use crate::tools::Gate;

/// The snapshot before an attempt, or `None` (logged) if it cannot be taken.
pub(crate) async fn before(
    changes: &dyn StepChanges,
    request: &TaskRequest,
    workdir: Option<&Path>,
) -> Option<Snapshot> {
    let step = &request.step.id;
    match changes
        .snapshot(request.execution_id, step, request.attempt, workdir)
        .await
    {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(%step, error = %e, "cannot snapshot the step's files before its attempt");
            None
        }
    }
}

/// Snapshots after the attempt, compares with `before` and writes the attempt's
/// `step.changes` entry through its gate.
pub(crate) async fn record(
    changes: &dyn StepChanges,
    gate: &Gate,
    request: &TaskRequest,
    workdir: Option<&Path>,
    before: Snapshot,
) {
    let step = &request.step.id;
    let (execution, attempt) = (request.execution_id, request.attempt);
    let compared = match changes.snapshot(execution, step, attempt, workdir).await {
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
