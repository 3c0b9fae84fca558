//! `orca exec …`: list, show, resume, stop, cancel, decide.

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
            let filter = crate::cmd::filter::Filter::new(
                &filter,
                &[
                    "pending",
                    "running",
                    "interrupted",
                    "awaiting_decision",
                    "completed",
                    "failed",
                    "stopped",
                ],
            )?;
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
            // The status a person filters on: a pending decision, no live driver, or the stage.
            let rows: Vec<(orca_store::ExecutionSummary, Value, Option<bool>)> = listing
                .items
                .into_iter()
                .zip(annotated)
                .map(|(item, (v, live))| (item, v, live))
                .collect();
            let rows = filter.apply(
                rows,
                |(item, _, live)| {
                    if item.awaiting_decision {
                        "awaiting_decision".to_owned()
                    } else if *live == Some(false) {
                        "interrupted".to_owned()
                    } else {
                        item.stage.to_string()
                    }
                },
                |(item, _, _)| item.created_at,
            );
            if app.json {
                let items: Vec<Value> = rows.into_iter().map(|(_, v, _)| v).collect();
                out_json(&json!(items));
            } else {
                let live: Vec<Option<bool>> = rows.iter().map(|(_, _, l)| *l).collect();
                let items: Vec<orca_store::ExecutionSummary> =
                    rows.into_iter().map(|(i, _, _)| i).collect();
                out(&render::exec_list(&items, &live, unreadable));
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
            if app.json {
                let mut value = orca_services::execution::snapshot_json(&snap);
                value["totals"] = crate::app::totals_json(&totals);
                if let Some(d) = crate::cmd::driver::driver_json(id, stage, lease.as_ref()) {
                    value["driver"] = d;
                }
                let (lines, worktrees) = crate::isolation::kept(app, id).await;
                if !lines.is_empty() {
                    value["worktrees"] = worktrees;
                }
                out_json(&value);
            } else {
                out(&show_text(&orca, &snap, &totals).await);
                if let Some(line) = crate::cmd::driver::driver_text(id, stage, lease.as_ref()) {
                    out(&line);
                }
                let (lines, _) = crate::isolation::kept(app, id).await;
                if !lines.is_empty() {
                    out(&lines.join("\n"));
                }
            }
            Ok(Exit::Ok)
        }
        ExecCommand::Resume { exec, run } => {
            let orca = app.orca(hitl_for(app, &run));
            let id = orca.executions().resolve(&exec).await?;
            drive(app, &orca, id, &run).await
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
    totals: &render::Totals,
) -> String {
    let plan = orca
        .planning()
        .plan(snap.execution.value.info().plan_id)
        .await
        .ok();
    render::exec_show(snap, plan.as_ref(), totals)
}
