//! `orca run`, and driving an execution to its end (also for `exec resume`, `exec decide`
//! and `ask`): approval, the runner with its progress, Ctrl-C, the final summary.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use orca_core::{ExecutionId, ExecutionStage, PlanId, PlanStage, Task};
use orca_services::{
    ApprovalOutcome, ExecutionService, FailurePolicy, Hitl, NoHuman, Orca, RunConfig, RunOutcome,
    RunReport,
};
use orca_store::audit::VerifyReport;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::app::{App, holder, out, out_json, tamper_text, user};
use crate::cli::{OnFailure, RunOptions};
use crate::cmd::ask::planner_text;
use crate::exit::{CliError, Exit};
use crate::render;
use crate::term::{Progress, TerminalHitl, interactive, say};

/// `orca run PLAN`: an id/prefix, or a plan document to create first.
pub(crate) async fn run_plan(
    app: &App,
    plan: &str,
    options: &RunOptions,
    detach: bool,
) -> Result<Exit, CliError> {
    let orca = app.orca(hitl_for(app, options));
    let path = Path::new(plan);
    let id = if plan.ends_with(".json") || (path.is_file() && plan.parse::<PlanId>().is_err()) {
        let (id, new) = crate::cmd::plan::proposal_for_run(&orca, path).await?;
        if new {
            app.info(&format!("created proposal {id} from {}", path.display()));
        } else {
            app.info(&format!(
                "proposal {id} already holds the content of {}: using it",
                path.display()
            ));
        }
        id
    } else {
        orca.planning().resolve(plan).await?
    };
    approve_and_run(app, &orca, id, options, detach).await
}

pub(crate) fn hitl_for(app: &App, options: &RunOptions) -> Arc<dyn Hitl> {
    if interactive() && !app.json && options.on_failure == OnFailure::Ask {
        Arc::new(TerminalHitl { style: app.style })
    } else {
        Arc::new(NoHuman)
    }
}

pub(crate) async fn approve_and_run(
    app: &App,
    orca: &Orca,
    id: PlanId,
    options: &RunOptions,
    detach: bool,
) -> Result<Exit, CliError> {
    let plan = orca.planning().plan(id).await?;
    match plan.stage() {
        PlanStage::Approved => {}
        PlanStage::Proposal if options.yes => {
            let approved = orca
                .planning()
                .approve(id, &format!("{} (--yes)", user()), None)
                .await?;
            app.info(&format!(
                "approved {id} (--yes), digest {}",
                approved.digest()
            ));
        }
        PlanStage::Proposal if interactive() && !app.json => {
            // What each step will receive is part of what the human approves.
            say(&crate::settings::step_env::step_env_text(
                &plan,
                app.agents.env_policy(),
            ));
            let budgets = crate::budget_view::text(orca, &plan).await;
            if !budgets.is_empty() {
                say(budgets.trim_end());
            }
            let hitl = TerminalHitl { style: app.style };
            match orca.relay().approval_loop(id, &hitl, &user()).await? {
                ApprovalOutcome::Approved(_) => {}
                ApprovalOutcome::Rejected(_) => {
                    if !app.quiet {
                        out(&format!("rejected {id}"));
                    }
                    return Ok(Exit::Ok);
                }
                ApprovalOutcome::Pending(_) => return Err(awaiting_approval(id)),
                ApprovalOutcome::Draft { response, .. } => {
                    if !app.quiet {
                        out(&format!("{id} stays a draft: {}", planner_text(&response)));
                    }
                    return Ok(Exit::Ok);
                }
                _ => return Err(CliError::internal("unexpected approval outcome")),
            }
        }
        PlanStage::Proposal => return Err(awaiting_approval(id)),
        PlanStage::Draft => {
            return Err(CliError::bad_input(format!(
                "plan {id} is a draft: the planner has not submitted it yet"
            )));
        }
        PlanStage::Rejected => {
            return Err(CliError::bad_input(format!(
                "plan {id} was rejected; it cannot run"
            )));
        }
    }
    let (plan, exec) = orca.executions().create(id).await?;
    crate::ids::learn_exec(exec);
    if plan.approval().policy.is_some() {
        // Checked before the run was created; said here: which signatures satisfied which rule.
        let entries = app
            .store()
            .entries(orca_store::AuditLogId::Plan { plan_id: id })
            .await?;
        if let Some(Ok(x)) =
            orca_services::policy::explain(&app.store().authority(), &plan, &entries)
        {
            for line in x.lines() {
                app.info(&format!("approved under policy {}: {line}", x.policy));
            }
        }
    }
    app.info(&format!(
        "execution {exec} of plan {id}: {}, concurrency {}",
        orca_core::plural::count(plan.content().steps.len(), "step", "steps"),
        options.concurrency
    ));
    if detach {
        return Ok(crate::cmd::worker::detached(app, exec));
    }
    drive(app, orca, exec, options).await
}

fn awaiting_approval(id: PlanId) -> CliError {
    CliError::with(
        Exit::AwaitingHuman,
        format!(
            "plan {id} is a proposal waiting for approval: run `orca plan approve {id}`, or pass --yes"
        ),
    )
}

pub(crate) fn run_config(options: &RunOptions) -> RunConfig {
    let mut config = RunConfig::new(holder());
    config.concurrency = usize::from(options.concurrency);
    config.max_attempts = options.max_attempts;
    config.on_failure = match options.on_failure {
        OnFailure::Ask => FailurePolicy::Ask,
        OnFailure::Stop => FailurePolicy::Stop,
        OnFailure::Skip => FailurePolicy::Skip,
    };
    config.actor = user();
    config.lease_timeout = Duration::from_secs(options.lease_timeout);
    config
}

/// Drives an execution (and the execution of a replacement plan, if the human replans).
pub(crate) async fn drive(
    app: &App,
    orca: &Orca,
    first: ExecutionId,
    options: &RunOptions,
) -> Result<Exit, CliError> {
    let mut exec = first;
    loop {
        let snap = orca.executions().get(exec).await?;
        crate::checkpoint::refuse_rolled_back(app, snap.execution.value.info().plan_id, exec)
            .await?;
        if !snap.execution.value.stage().is_terminal() {
            orca.executions()
                .record_sandbox(&snap.execution.value, app.sandbox.audit_data())
                .await?;
        }
        let total = snap.tasks.len();
        let done = snap
            .tasks
            .iter()
            .filter(|t| matches!(t.value, Task::Completed(_)))
            .count();
        let progress = Arc::new(Progress::new(app.style, app.quiet || app.json, total, done));
        let plan = orca
            .planning()
            .plan(snap.execution.value.info().plan_id)
            .await
            .ok();
        let workspaces =
            crate::isolation::workspaces(app, plan.as_ref().map(orca_core::Plan::content)).await;
        let mut config = run_config(options);
        config.isolation = app.config_isolation();
        let runner = orca
            .clone()
            .with_workspaces(workspaces)
            .with_changes(Some(crate::isolation::changes(app).await))
            .runner(config, progress);
        let cancel = CancellationToken::new();
        // Registered here, before anything runs, so an early Ctrl-C is not lost.
        let signals = crate::driver_signals::listen(exec, cancel.clone())?;
        let traced = crate::telemetry::follow(app, plan.as_ref(), exec).await;
        let report = runner.run(exec, cancel).await;
        signals.abort();
        if let Some(follower) = traced {
            follower.finish().await;
        }
        // Steps ended by the run get their grace period before this process exits (its exit
        // SIGKILLs every group still alive).
        orca_os::process_group::settle(app.agents.kill_grace() + Duration::from_secs(5)).await;
        let report = report?;
        let code = finish(app, orca, &report).await?;
        if options.apply && matches!(report.outcome, RunOutcome::Completed) {
            match crate::isolation::apply(app, orca, report.execution_id).await {
                Ok(line) => app.info(&line),
                Err(e) => say(&format!("not applied: {e}")),
            }
        }
        match report.outcome {
            RunOutcome::Replanned {
                execution_id: Some(next),
                plan_id,
            } => {
                app.info(&format!(
                    "running the new plan {plan_id} as execution {next}"
                ));
                // ADR 0017: the new run's branch starts from the merged results so far.
                crate::isolation::continue_from(app, exec, next).await;
                exec = next;
            }
            _ => return Ok(code),
        }
    }
}

/// Prints the summary of a run and returns its exit code.
pub(crate) async fn finish(app: &App, orca: &Orca, report: &RunReport) -> Result<Exit, CliError> {
    if let RunOutcome::Replanned {
        plan_id,
        execution_id,
    } = &report.outcome
    {
        crate::ids::learn_plan(*plan_id);
        if let Some(e) = execution_id {
            crate::ids::learn_exec(*e);
        }
    }
    let snap = orca.executions().get(report.execution_id).await?;
    let totals = crate::app::totals(app, report.execution_id).await?;
    let info = snap.execution.value.info().clone();
    let plan = orca.planning().plan(info.plan_id).await.ok();
    let log = ExecutionService::log(info.plan_id, info.id);
    let verify = app.store.verify(log).await?;
    let stage = snap.execution.value.stage();
    // This process drove it and has stopped driving it.
    let status = orca_services::status::Status::of(
        stage,
        snap.execution
            .value
            .decision()
            .is_some_and(|d| d.answer.is_none()),
        Some(false),
        crate::isolation::result_line(app, orca, info.id)
            .await
            .is_some_and(|(_, v)| v["state"] == "awaiting_acceptance"),
    );
    let (exit, outcome, detail) = match &report.outcome {
        RunOutcome::Completed => (Exit::Ok, "completed", None),
        RunOutcome::Failed { reason } => (Exit::ExecutionFailed, "failed", Some(reason.clone())),
        RunOutcome::Stopped { reason } => (Exit::ExecutionFailed, "stopped", reason.clone()),
        RunOutcome::Interrupted { steps } => (
            Exit::Interrupted,
            "interrupted",
            Some(format!(
                "stopped; {} interrupted; continue with `orca exec resume {}`",
                orca_core::plural::count(steps.len(), "running step", "running steps"),
                info.id
            )),
        ),
        RunOutcome::AwaitingDecision { request } => (
            Exit::AwaitingHuman,
            "awaiting_decision",
            Some(format!(
                "step `{}` needs a decision: orca exec decide {} {}",
                request.step_id(),
                info.id,
                request.option_keys().join("|")
            )),
        ),
        RunOutcome::Replanned {
            plan_id,
            execution_id,
        } => (
            if execution_id.is_some() {
                Exit::Ok
            } else {
                Exit::ExecutionFailed
            },
            "replanned",
            Some(format!("replaced by plan {plan_id}")),
        ),
        _ => (Exit::Internal, "unknown", None),
    };
    if app.json {
        let tasks: Vec<Value> = snap
            .tasks
            .iter()
            .map(|t| json!({ "step_id": t.value.step_id(), "status": t.value.status() }))
            .collect();
        out_json(&json!({
            "execution_id": info.id,
            "plan_id": info.plan_id,
            "stage": stage,
            "status": status.as_str(),
            "outcome": outcome,
            "detail": detail,
            "tasks": tasks,
            "audit": verify,
            "totals": crate::app::totals_json(&totals),
        }));
    } else if app.quiet {
        // The outcome is in the exit code; the id is for the next command.
        crate::app::out_id(&info.id);
    } else {
        out(&render::exec_show(&snap, plan.as_ref(), status, &totals));
        let audit = match &verify {
            VerifyReport::Intact { entries, sealed } => {
                format!(
                    "audit log verified: {}{}",
                    orca_core::plural::count(*entries, "entry", "entries"),
                    if *sealed { ", sealed" } else { "" }
                )
            }
            VerifyReport::Tampered { seq, problem } => {
                format!("audit log TAMPERED: {}", tamper_text(*seq, problem))
            }
        };
        out(&audit);
        let headline = match stage {
            _ if outcome == "interrupted" => app.style.yellow("interrupted"),
            ExecutionStage::Completed => app.style.green("completed"),
            ExecutionStage::Running => app.style.yellow("waiting for a decision"),
            other => app.style.red(&other.to_string()),
        };
        say(&format!(
            "{} {}{}",
            info.id,
            headline,
            detail.map(|d| format!(": {d}")).unwrap_or_default()
        ));
    }
    Ok(if verify.is_intact() {
        exit
    } else {
        Exit::Tampered
    })
}
