//! `orca exec accept` and `orca exec discard`: a person's decision on an execution's result
//! (the logic and the signed record are `orca_services::acceptance`).

use std::sync::Arc;

use orca_core::{Merged, StepWorkspaces};
use orca_services::NoHuman;
use orca_services::acceptance::{self, ResultState};
use serde_json::json;

use crate::app::{App, out_json, out_raw, user};
use crate::exit::{CliError, Exit};

async fn repository(app: &App) -> Result<Arc<dyn StepWorkspaces>, CliError> {
    crate::isolation::workspaces(app, None).await.ok_or_else(|| {
        CliError::bad_input(format!(
            "{} is not in a git repository: an execution's work there is already in place, there is no result to accept",
            app.root().display()
        ))
    })
}

/// `orca exec accept EXEC [--note T] [--yes]`.
pub(crate) async fn accept(
    app: &App,
    exec: &str,
    note: Option<&str>,
    yes: bool,
) -> Result<Exit, CliError> {
    let orca = app.orca(Arc::new(NoHuman));
    let id = orca.executions().resolve(exec).await?;
    let ws = repository(app).await?;
    let tree = match acceptance::state(orca.executions(), Some(&*ws), id).await? {
        ResultState::Awaiting { tree } => tree,
        ResultState::Decided(d) => {
            return Err(CliError::bad_input(format!(
                "execution {id} was already {d}; nothing was changed"
            )));
        }
        ResultState::None => {
            return Err(CliError::bad_input(format!(
                "execution {id} has no result waiting to be accepted (it is not completed, or its steps ran in place, in your working tree)"
            )));
        }
    };
    if !yes {
        let patch = ws
            .result_patch(id)
            .await
            .map_err(|e| CliError::bad_input(e.to_string()))?;
        out_raw(&crate::cmd::diff::sanitize(&patch));
        let question = format!(
            "accept the result of execution {id} (tree {tree}) into the checked-out branch?"
        );
        let agreed = tokio::task::spawn_blocking(move || crate::term::confirm(&question))
            .await
            .unwrap_or(false);
        if !agreed {
            return Err(CliError::bad_input("not accepted; nothing was changed"));
        }
    }
    let (merged, seq) =
        acceptance::accept(orca.executions(), &*ws, id, &tree, &user(), note).await?;
    if app.json {
        out_json(&json!({ "execution_id": id, "tree": tree, "merged": merged, "entry": seq }));
    } else {
        let line = match &merged {
            Merged::FastForward { commit } => {
                format!("accepted: fast-forwarded the checked-out branch to {commit}")
            }
            Merged::MergeCommit { commit } => {
                format!("accepted: merged with commit {commit}")
            }
            Merged::UpToDate { commit } => {
                format!("accepted: the checked-out branch already held it ({commit})")
            }
        };
        app.info(&format!("{line} (execution {id}, tree {tree})"));
    }
    Ok(Exit::Ok)
}

/// `orca exec discard EXEC`.
pub(crate) async fn discard(app: &App, exec: &str, note: Option<&str>) -> Result<Exit, CliError> {
    let orca = app.orca(Arc::new(NoHuman));
    let id = orca.executions().resolve(exec).await?;
    let ws = repository(app).await?;
    let removed = acceptance::discard(orca.executions(), &*ws, id, &user(), note).await?;
    if app.json {
        out_json(&json!({ "execution_id": id, "removed": removed }));
    } else {
        app.info(&format!(
            "discarded the result of execution {id}: removed {}",
            if removed.is_empty() {
                "its worktrees (no branch was left)".to_owned()
            } else {
                removed.join(", ")
            }
        ));
    }
    Ok(Exit::Ok)
}
