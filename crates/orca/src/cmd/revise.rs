//! `orca plan revise PLAN --file NEW.json`: the way on from a plan created from a file and sent
//! back with `request-changes` (or any plan a person wants to change): the next revision, a new
//! proposal that supersedes PLAN. `PlanningService::create_proposal` records `plan.created`
//! (with `supersedes`) in the new plan's log and `plan.superseded` in PLAN's run register; a
//! proposal it replaces is rejected, so only the revision can be approved.

use std::path::Path;

use orca_core::{Plan, PlanId};
use orca_services::Orca;
use serde_json::json;

use crate::app::{App, out, out_json, user};
use crate::cmd::plan::create_revision;
use crate::exit::{CliError, Exit};

pub(crate) async fn revise(
    app: &App,
    orca: &Orca,
    previous: PlanId,
    file: &Path,
) -> Result<Exit, CliError> {
    let before = orca.planning().plan(previous).await?;
    let revision = create_revision(orca, file, Some(previous)).await?;
    let id = revision.id();
    let replaced = if matches!(before, Plan::Proposal(_)) {
        orca.planning()
            .reject(previous, &user(), Some(format!("revised as {id}")))
            .await?;
        true
    } else {
        false
    };
    if app.json {
        out_json(&json!({
            "plan_id": id,
            "stage": "proposal",
            "supersedes": previous,
            "steps": revision.content().steps.len(),
            "superseded_stage": if replaced { "rejected".to_owned() } else { before.stage().to_string() },
        }));
    } else {
        out(&format!(
            "created proposal {id} ({}), revising {previous}{}",
            orca_core::plural::count(revision.content().steps.len(), "step", "steps"),
            if replaced { " (rejected: revised)" } else { "" }
        ));
        app.hint(&format!(
            "next: orca plan show {id} · orca plan approve {id} · orca run {id} --yes"
        ));
    }
    Ok(Exit::Ok)
}
