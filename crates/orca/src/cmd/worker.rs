//! `orca worker`: the command-line side of an [`orca_services::Worker`] — its arguments, the
//! signals that stop it, the store's notifications and what it prints. What a worker does
//! (which executions it takes, claiming executions or tasks, handing over to a leader) is the
//! services' (ADR 0022, 0026).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use clap::{Args, ValueEnum};
use orca_core::ExecutionId;
use orca_services::{
    ClaimMode, DriveOutcome, NoHuman, Notifications, RunOutcome, Worker, WorkerConfig, WorkerEvent,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::cli::{OnFailure, RunOptions};
use crate::exit::{CliError, Exit};
use crate::term::Progress;

/// What a worker claims (`--claim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Claim {
    /// Ready tasks of any running execution, one by one (several workers per execution).
    Task,
    /// Whole executions: one leader drives each (its tasks in parallel).
    Execution,
}

impl From<Claim> for ClaimMode {
    fn from(claim: Claim) -> Self {
        match claim {
            Claim::Task => Self::Task,
            Claim::Execution => Self::Execution,
        }
    }
}

/// `orca worker`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// Executions driven at once by this worker.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) concurrency: u16,
    /// Tasks in flight at once in each execution.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) tasks: u16,
    /// Seconds between two looks at the store when no notification comes (the fallback).
    #[arg(long, value_name = "SECS", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) poll: u64,
    /// Exit when nothing is left to drive (no execution ready, none in flight): for scripts
    /// and tests.
    #[arg(long)]
    pub(crate) until_idle: bool,
    /// What this worker claims: ready tasks one by one (several workers share one execution)
    /// or whole executions (one leader each). ADR 0026.
    #[arg(long, value_enum, default_value_t = Claim::Execution)]
    pub(crate) claim: Claim,
    /// Seconds a step's processes get between SIGTERM and SIGKILL.
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub(crate) kill_grace: u64,
}

/// `orca run --detach`: the execution is left to the workers.
pub(crate) fn detached(app: &App, exec: ExecutionId) -> Exit {
    if app.json() {
        crate::app::out_json(&json!({"execution_id": exec, "outcome": "detached"}));
    } else if app.quiet {
        crate::app::out_id(&exec);
    } else {
        crate::app::out(&format!(
            "execution {exec} handed to the workers: follow it with `orca watch {exec}`"
        ));
    }
    Exit::Ok
}

/// What a drive ended with, for the log line.
fn outcome_text(outcome: &RunOutcome) -> &'static str {
    match outcome {
        RunOutcome::Completed => "completed",
        RunOutcome::Failed { .. } => "failed",
        RunOutcome::Stopped { .. } => "stopped",
        RunOutcome::Interrupted { .. } => "interrupted",
        RunOutcome::AwaitingDecision { .. } => "waiting for a decision",
        RunOutcome::Replanned { .. } => "replanned",
        _ => "ended",
    }
}

/// What a worker's drive ended with, for the log line.
fn drive_text(outcome: &DriveOutcome) -> &'static str {
    match outcome {
        DriveOutcome::Led(report) => outcome_text(&report.outcome),
        DriveOutcome::LedElsewhere => "led by another worker",
        DriveOutcome::Interrupted { .. } => "interrupted",
        _ => "ended",
    }
}

/// Notifications on `channels` from the shared PostgreSQL store at `url`, if that is the
/// store (`None`: poll).
pub(crate) async fn listener(
    url: Option<&str>,
    channels: &[&str],
) -> Option<tokio::sync::mpsc::Receiver<String>> {
    let pg = orca_store_postgres::PgStore::open(
        url?,
        orca_store::Authority::permissive(),
        crate::redact::redactor(),
    )
    .ok()?;
    match pg.listen(channels).await {
        Ok(rx) => Some(rx),
        Err(e) => {
            tracing::warn!(error = %e, "no notifications: polling only");
            None
        }
    }
}

/// A worker wakes when an execution is created or changes stage (a task ending makes no new
/// execution ready: its leader sees it); one claiming tasks also when a task changes.
const fn worker_channels(claim: Claim) -> &'static [&'static str] {
    match claim {
        Claim::Execution => &["orca_executions"],
        Claim::Task => orca_store_postgres::CHANNELS,
    }
}

/// The shared PostgreSQL store's notifications on a worker's channels, listened to again
/// after the connection ended: through the store the worker writes with, so that its own task
/// writes (which its runners know) do not wake it.
struct Listener {
    store: Option<orca_store_postgres::PgStore>,
    channels: &'static [&'static str],
}

#[async_trait]
impl Notifications for Listener {
    async fn listen(&self) -> Option<tokio::sync::mpsc::Receiver<String>> {
        match self.store.as_ref()?.listen_to_others(self.channels).await {
            Ok(rx) => Some(rx),
            Err(e) => {
                tracing::warn!(error = %e, "no notifications: polling only");
                None
            }
        }
    }
}

/// Runs the worker until Ctrl-C / SIGTERM (or idle, with `--until-idle`).
pub(crate) async fn run(app: &App, args: WorkerArgs) -> Result<Exit, CliError> {
    let options = RunOptions {
        concurrency: args.tasks,
        yes: false,
        on_failure: OnFailure::Ask,
        max_attempts: 2,
        kill_grace: args.kill_grace,
        lease_timeout: 30,
        apply: false,
    };
    // ADR 0017: isolated steps get their worktrees here too (none outside a git repository).
    let orca = Arc::new(
        app.orca(Arc::new(NoHuman))
            .with_workspaces(crate::isolation::workspaces(app, None).await)
            .with_changes(Some(crate::isolation::changes(app).await)),
    );
    let cancel = CancellationToken::new();
    {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            let sigterm = async {
                match term.as_mut() {
                    Some(t) => {
                        t.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = sigterm => {}
            }
            cancel.cancel();
        });
    }
    let notifications = Listener {
        store: app.shared.clone(),
        channels: worker_channels(args.claim),
    };
    let limit = usize::from(args.concurrency);
    let config = WorkerConfig {
        claim: args.claim.into(),
        executions: limit,
        poll: Duration::from_secs(args.poll),
        until_idle: args.until_idle,
    };
    // Each drive: a holder of its own, and its own (quiet) progress.
    let runners = {
        let (orca, style, isolation) = (Arc::clone(&orca), app.style(), app.config_isolation());
        move || {
            let mut config = crate::cmd::run::run_config(&options);
            config.isolation = isolation;
            orca.runner(config, Arc::new(Progress::new(style, true, 0, 0)))
        }
    };
    let worker = Worker::new(&orca, config, runners);
    let traces = crate::telemetry::Drives::new(app);
    let tally = worker
        .run(&notifications, &cancel, |event| match event {
            WorkerEvent::Driving { execution } => traces.driving(*execution),
            WorkerEvent::NotDriven { execution } => traces.ended(*execution),
            WorkerEvent::Started => app.info(&format!(
                "worker {} started: up to {limit} executions at once, {} tasks each, claiming {}",
                std::process::id(),
                args.tasks,
                match args.claim {
                    Claim::Task => "tasks",
                    Claim::Execution => "executions",
                }
            )),
            WorkerEvent::Drove { execution, outcome } => {
                traces.ended(*execution);
                app.info(&format!("worker: {execution} {}", drive_text(outcome)));
            }
            _ => {}
        })
        .await;
    traces.finish().await;
    let (driven, errors) = (tally.driven, tally.store_errors);
    orca_os::process_group::settle(app.agents.kill_grace() + Duration::from_secs(5)).await;
    if app.json() {
        crate::app::out_json(&json!({"driven": driven, "store_errors": errors}));
    } else {
        app.info(&format!(
            "worker stopped: {driven} drives, {errors} store errors"
        ));
    }
    Ok(Exit::Ok)
}
