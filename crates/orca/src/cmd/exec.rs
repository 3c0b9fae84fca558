//! `orca exec …`: list, show, resume, stop, cancel, decide.

use orca_services::status::Status;
use std::sync::Arc;

use orca_core::Decision;
use orca_services::NoHuman;
use serde_json::{Value, json};

use crate::app::{App, out, out_json, user};
use crate::cli::{DecisionArg, ExecCommand};
use crate::cmd::run::{drive, hitl_for};
use crate::exit::{CliError, Exit};
use crate::render;
use crate::term::say;

pub(crate) async fn exec(app: &App, cmd: ExecCommand) -> Result<Exit, CliError> {
    match cmd {
        ExecCommand::Logs { exec, step, follow } => {
            crate::cmd::logs::logs(app, &exec, step.as_deref(), follow).await
        }
        ExecCommand::Retry { exec, from, run } => {
            crate::cmd::retry::retry(app, &exec, from.as_deref(), &run).await
        }
        ExecCommand::List { plan, filter } => {
            let statuses: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
            let filter = crate::cmd::filter::Filter::new(&filter, &statuses)?;
            let orca = app.orca(Arc::new(NoHuman));
            let plan = match plan {
                Some(p) => Some(orca.planning().resolve(&p).await?),
                None => None,
            };
            let listing = orca.executions().list(plan).await?;
            let unreadable = listing.problems.len();
            for problem in &listing.problems {
                say(&format!(
                    "warning: {}: {}",
                    problem.location, problem.message
                ));
            }
            let annotated = crate::cmd::driver::annotate_list(app, &listing.items).await?;
            let awaiting = crate::isolation::awaiting(app, &orca, &listing.items).await;
            // The status a person filters on: a pending decision, no live driver, a result
            // waiting for acceptance, or the stage.
            let rows: Vec<(orca_store::ExecutionSummary, Value, Option<bool>, bool)> = listing
                .items
                .into_iter()
                .zip(annotated)
                .zip(awaiting)
                .map(|((item, (mut v, live)), waits)| {
                    if waits {
                        v["result"] = json!("awaiting_acceptance");
                    }
                    let status = Status::of(item.stage, item.awaiting_decision, live, waits);
                    v["status"] = json!(status.as_str());
                    (item, v, live, waits)
                })
                .collect();
            let rows = filter.apply(
                rows,
                |(item, _, live, waits)| {
                    Status::of(item.stage, item.awaiting_decision, *live, *waits)
                        .as_str()
                        .to_owned()
                },
                |(item, _, _, _)| item.created_at,
            );
            if app.json {
                let items: Vec<Value> = rows.into_iter().map(|(_, v, _, _)| v).collect();
                out_json(&json!(items));
            } else {
                let live: Vec<Option<bool>> = rows.iter().map(|(_, _, l, _)| *l).collect();
                let waits: Vec<bool> = rows.iter().map(|(_, _, _, w)| *w).collect();
                let items: Vec<orca_store::ExecutionSummary> =
                    rows.into_iter().map(|(i, _, _, _)| i).collect();
                out(&render::exec_list(&items, &live, &waits, unreadable));
            }
            Ok(Exit::Ok)
        }
        ExecCommand::Show { exec } => {
            let orca = app.orca(Arc::new(NoHuman));
            let id = orca.executions().resolve(&exec).await?;
            if let Some(f) = orca_services::integrity::check_execution(app.store.as_ref(), id)
                .await?
                .into_iter()
                .next()
            {
                return Err(CliError::with(
                    Exit::Tampered,
                    format!("execution {id}: {f} (run `orca audit verify {id}`)"),
                ));
            }
            let snap = orca.executions().get(id).await?;
            let lease = app.store.lease(id).await?;
            let stage = snap.execution.value.stage();
            let totals = crate::app::totals(app, id).await?;
            let result = crate::isolation::result_line(app, &orca, id).await;
            let status = Status::of(
                stage,
                snap.execution
                    .value
                    .decision()
                    .is_some_and(|d| d.answer.is_none()),
                (!stage.is_terminal()).then(|| crate::cmd::driver::is_live(lease.as_ref())),
                result
                    .as_ref()
                    .is_some_and(|(_, v)| v["state"] == "awaiting_acceptance"),
            );
            if app.json {
                let mut value = orca_services::execution::snapshot_json(&snap);
                value["status"] = json!(status.as_str());
                value["totals"] = crate::app::totals_json(&totals);
                if let Some(d) = crate::cmd::driver::driver_json(id, stage, lease.as_ref()) {
                    value["driver"] = d;
                }
                let (lines, worktrees) = crate::isolation::kept(app, id).await;
                if !lines.is_empty() {
                    value["worktrees"] = worktrees;
                }
                let (changed, changes) = crate::cmd::diff::show_lines(&orca, id).await;
                if !changed.is_empty() {
                    value["changes"] = changes;
                }
                if let Some((_, result)) = result {
                    value["result"] = result;
                }
                out_json(&value);
            } else {
                out(&show_text(&orca, &snap, status, &totals).await);
                if let Some(line) = crate::cmd::driver::driver_text(id, stage, lease.as_ref()) {
                    out(&line);
                }
                let (lines, _) = crate::isolation::kept(app, id).await;
                if !lines.is_empty() {
                    out(&lines.join("\n"));
                }
                let (changed, _) = crate::cmd::diff::show_lines(&orca, id).await;
                if !changed.is_empty() {
                    out(&changed.join("\n"));
                }
                if let Some((line, _)) = result {
                    out(&line);
                }
            }
            Ok(Exit::Ok)
        }
        ExecCommand::Resume { exec, run } => {
            let orca = app.orca(hitl_for(app, &run));
            let id = orca.executions().resolve(&exec).await?;
            drive(app, &orca, id, &run).await
        }
        ExecCommand::Diff { exec, step, stat } => {
            crate::cmd::diff::diff(app, &exec, step.as_deref(), stat).await
        }
        ExecCommand::Accept { exec, note, yes } => {
            crate::cmd::accept::accept(app, &exec, note.as_deref(), yes).await
        }
        ExecCommand::Discard { exec, note } => {
            crate::cmd::accept::discard(app, &exec, note.as_deref()).await
        }
        ExecCommand::Stop { exec, reason } => crate::cmd::driver::stop(app, &exec, reason).await,
        ExecCommand::Cancel { exec, reason } => {
            crate::cmd::driver::cancel(app, &exec, reason).await
        }
        ExecCommand::Decide {
            exec,
            decision,
            guidance,
            no_run,
            run,
        } => {
            let orca = app.orca(hitl_for(app, &run));
            let id = orca.executions().resolve(&exec).await?;
            let header = orca.executions().header(id).await?;
            crate::checkpoint::refuse_rolled_back(app, header.value.info().plan_id, id).await?;
            let decision = match decision {
                DecisionArg::Retry => Decision::Retry { guidance },
                DecisionArg::Replan => Decision::Replan { guidance },
                DecisionArg::Stop => Decision::Stop,
                DecisionArg::Answer => Decision::Answer {
                    text: guidance.ok_or_else(|| {
                        CliError::bad_input("`answer` needs the answer in --guidance")
                    })?,
                },
            };
            crate::telemetry::mark(app, header.value.info().plan_id, id).await;
            orca.executions().decide(id, decision, &user()).await?;
            app.info(&format!("recorded the decision for {id}"));
            if no_run {
                if app.json {
                    out_json(&json!({ "execution_id": id, "stage": "running" }));
                }
                return Ok(Exit::Ok);
            }
            drive(app, &orca, id, &run).await
        }
    }
}

/// `exec show`'s text: the execution, with its plan's step descriptions when the plan can be
/// read, and its totals.
pub(crate) async fn show_text(
    orca: &orca_services::Orca,
    snap: &orca_store::ExecutionSnapshot,
    status: Status,
    totals: &render::Totals,
) -> String {
    let plan = orca
        .planning()
        .plan(snap.execution.value.info().plan_id)
        .await
        .ok();
    render::exec_show(snap, plan.as_ref(), status, totals)
}
