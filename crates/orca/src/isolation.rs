//! Worktree isolation in the binary (ADR 0017): picks [`GitWorktrees`] for the project, says
//! clearly when the project is not in a git repository (isolated steps then run in place),
//! lists kept worktrees for `exec show`, a result's state, and `--apply` (an acceptance).

use std::sync::Arc;

use orca_core::{ExecutionId, Merged, PlanContent, StepChanges, StepWorkspaces};
use orca_os::{FileChanges, GitWorktrees};
use serde_json::{Value, json};

use crate::app::App;

/// The worktrees of the project's repository, for a run of `plan`. Outside a repository:
/// `None`, and a warning when the plan has isolated steps.
pub(crate) async fn workspaces(
    app: &App,
    plan: Option<&PlanContent>,
) -> Option<Arc<dyn StepWorkspaces>> {
    match GitWorktrees::discover(app.root()).await {
        Ok(git) => Some(Arc::new(git.with_tools(app.workspace_tools()))),
        Err(e) => {
            let fallback = app.config_isolation();
            if plan.is_some_and(|p| orca_core::isolation::any_worktree(p, fallback)) {
                crate::term::say(&format!(
                    "warning: {e}: steps with isolation \"worktree\" run in place, in {}",
                    app.root().display()
                ));
            }
            None
        }
    }
}

/// What records each attempt's changes: git trees in a repository, else the list of files.
pub(crate) async fn changes(app: &App) -> Arc<dyn StepChanges> {
    match GitWorktrees::discover(app.root()).await {
        Ok(git) => Arc::new(git.changes()),
        Err(_) => Arc::new(FileChanges::new(app.root().to_path_buf())),
    }
}

/// The worktrees kept for `exec` (after a failure), as lines for `exec show`, and as JSON.
pub(crate) async fn kept(app: &App, exec: ExecutionId) -> (Vec<String>, Value) {
    let Ok(git) = GitWorktrees::discover(app.root()).await else {
        return (Vec::new(), Value::Null);
    };
    let branch = git.branch(exec);
    let kept = git.kept(exec).await.unwrap_or_default();
    let mut lines = Vec::new();
    if !kept.is_empty() {
        lines.push(format!("worktrees kept for inspection (branch {branch}):"));
        for k in &kept {
            lines.push(format!("  {}  {}  {}", k.step, k.branch, k.path.display()));
        }
    }
    (lines, json!({ "branch": branch, "kept": kept }))
}

/// Where an execution's result stands, for `exec show`: waiting for acceptance (with the
/// command), accepted or discarded; `None` when it has no result of its own.
pub(crate) async fn result_line(
    app: &App,
    orca: &orca_services::Orca,
    exec: ExecutionId,
) -> Option<(String, Value)> {
    use orca_services::acceptance::{ResultState, state};
    let git = GitWorktrees::discover(app.root()).await.ok();
    let ws = git.as_ref().map(|g| g as &dyn StepWorkspaces);
    match state(orca.executions(), ws, exec).await.ok()? {
        ResultState::None => None,
        ResultState::Awaiting { tree } => Some((
            format!(
                "result: awaiting acceptance on branch orca/{exec} (tree {tree}): `orca exec accept {exec}` or `orca exec discard {exec}`"
            ),
            json!({ "state": "awaiting_acceptance", "tree": tree, "branch": format!("orca/{exec}") }),
        )),
        ResultState::Decided(d) => Some((
            format!("result: {d}"),
            json!({
                "state": if d.kind == orca_core::AuditKind::ExecutionAccepted { "accepted" } else { "discarded" },
                "by": d.by, "at": d.at, "entry": d.seq,
            }),
        )),
    }
}

/// For `exec list`: whether each execution's result waits for acceptance (completed, with an
/// integration branch, not yet accepted or discarded).
pub(crate) async fn awaiting(
    app: &App,
    orca: &orca_services::Orca,
    items: &[orca_store::ExecutionSummary],
) -> Vec<bool> {
    let mut awaiting = vec![false; items.len()];
    let Ok(git) = GitWorktrees::discover(app.root()).await else {
        return awaiting;
    };
    let branches = git.result_branches().await.unwrap_or_default();
    for (slot, item) in awaiting.iter_mut().zip(items) {
        let id = item.execution_id;
        if item.stage == orca_core::ExecutionStage::Completed && branches.contains(&id.to_string())
        {
            *slot = matches!(
                orca_services::acceptance::decided(orca.executions(), id).await,
                Ok(None)
            );
        }
    }
    awaiting
}

/// `--apply`: accepts the completed execution's result into the checked-out branch, as
/// `orca exec accept --yes` does (signed and audited, bound to the result's tree as it is now).
pub(crate) async fn apply(
    app: &App,
    orca: &orca_services::Orca,
    exec: ExecutionId,
) -> Result<String, String> {
    use orca_services::acceptance::{ResultState, accept, state};
    let git = GitWorktrees::discover(app.root())
        .await
        .map_err(|e| e.to_string())?;
    let branch = git.branch(exec);
    let tree = match state(orca.executions(), Some(&git), exec).await {
        Ok(ResultState::Awaiting { tree }) => tree,
        Ok(ResultState::Decided(d)) => return Err(format!("execution {exec} was already {d}")),
        Ok(ResultState::None) => return Err(format!("execution {exec} has no branch `{branch}`")),
        Err(e) => return Err(e.to_string()),
    };
    let note = Some("run --apply");
    let (merged, _) = accept(
        orca.executions(),
        &git,
        exec,
        &tree,
        &crate::app::user(),
        note,
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(match merged {
        Merged::FastForward { commit } => {
            format!(
                "applied: fast-forwarded the checked-out branch to {branch} ({commit}); accepted, signed"
            )
        }
        Merged::MergeCommit { commit } => {
            format!("applied: merged {branch} with commit {commit}; accepted, signed")
        }
        Merged::UpToDate { .. } => {
            format!("applied: the checked-out branch already holds {branch}; accepted, signed")
        }
    })
}

/// A replan's execution continues from the merged results of the one it replaces.
pub(crate) async fn continue_from(app: &App, previous: ExecutionId, next: ExecutionId) {
    let Ok(git) = GitWorktrees::discover(app.root()).await else {
        return;
    };
    match git.continue_from(previous, next).await {
        Ok(true) => app.info(&format!(
            "{} starts from {}",
            git.branch(next),
            git.branch(previous)
        )),
        Ok(false) => {}
        Err(e) => crate::term::say(&format!("warning: {e}")),
    }
}
