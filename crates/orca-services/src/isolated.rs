//! Worktree isolation at dispatch (ADR 0017): a step whose effective isolation is `worktree`
//! gets a fresh worktree before its agent runs (the execution's base plus the results of its
//! dependencies, which the runner resolved into `step.depends_on`), and a success is merged
//! into the execution's integration branch before it counts. A merge conflict — of the
//! step into the branch, or between its dependencies' results while preparing — is a
//! `merge_conflict` failure listing the files, which goes to the human's deviation decision.
//! Without a [`StepWorkspaces`] (outside a git repository) the step runs in place.

use std::sync::Arc;

use orca_core::{
    ErrorCode, Isolation, Reply, StepWorkspaces, TaskFailure, TaskRequest, TaskResult,
    WorkspaceError,
};

use crate::tools::ToolContext;

/// Prepares the attempt's worktree: sets `request.workdir` and returns the tool context whose
/// workspace tools are rooted there. `Err` is the attempt's failure.
pub(crate) async fn prepare(
    workspaces: &Arc<dyn StepWorkspaces>,
    ctx: &ToolContext,
    request: &mut TaskRequest,
) -> Result<ToolContext, TaskFailure> {
    let step = &request.step.id;
    let after = request.step.depends_on.clone().unwrap_or_default();
    let dir = workspaces
        .prepare(request.execution_id, step, &after)
        .await
        .map_err(|e| match e {
            WorkspaceError::DependenciesConflict {
                ref dependencies,
                ref files,
                ..
            } => TaskFailure::new(
                ErrorCode::MergeConflict,
                format!(
                    "step `{step}` cannot start: the results of its dependencies {} conflict in {}; retry with guidance (it restarts from the execution's branch, where they were merged), replan, or stop",
                    dependencies
                        .iter()
                        .map(|d| format!("`{d}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    files.join(", ")
                ),
            ),
            other => TaskFailure::new(
                ErrorCode::TaskFailed,
                format!("cannot prepare the worktree of step `{step}`"),
            )
            .with_cause(other.to_string()),
        })?;
    let mut ctx = ctx.clone();
    if ctx.workspace.is_some() {
        // Model agents' file tools act in the worktree, never in the user's tree.
        ctx.workspace = workspaces.tools_at(&dir);
    }
    request.workdir = Some(dir);
    Ok(ctx)
}

/// Merges a successful attempt into the integration branch.
pub(crate) async fn integrate(
    workspaces: &Arc<dyn StepWorkspaces>,
    request: &TaskRequest,
    mut reply: Reply<TaskResult>,
) -> Reply<TaskResult> {
    if !matches!(reply.outcome, TaskResult::Success(_)) {
        return reply;
    }
    let step = &request.step.id;
    if let Err(e) = workspaces
        .integrate(request.execution_id, step, request.attempt)
        .await
    {
        reply.outcome = TaskResult::Failure(match e {
            WorkspaceError::Conflict {
                ref files,
                ref branch,
                ..
            } => TaskFailure::new(
                ErrorCode::MergeConflict,
                format!(
                    "step `{step}` conflicts with `{branch}` in {}; retry with guidance (it restarts from the merged results), replan, or stop",
                    files.join(", ")
                ),
            ),
            other => TaskFailure::new(ErrorCode::TaskFailed, format!("cannot merge step `{step}`"))
                .with_cause(other.to_string()),
        });
    }
    reply
}

/// Whether this request runs in a worktree (the runner resolved the plan default into the
/// step's `isolation`).
pub(crate) fn wanted(request: &TaskRequest) -> bool {
    request.step.isolation == Some(Isolation::Worktree)
}

/// The execution ended: its worktrees are removed (completed) or kept. A failure to clean up
/// is logged, never a reason to fail a completed execution.
pub(crate) async fn end(
    dispatch: &crate::dispatch::DispatchService,
    execution: orca_core::ExecutionId,
    end: orca_core::WorkspaceEnd,
) {
    if let Some(ws) = dispatch.workspaces()
        && let Err(e) = ws.end(execution, end).await
    {
        tracing::warn!(%execution, error = %e, "cannot remove the execution's worktrees");
    }
}
