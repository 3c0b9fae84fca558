//! `orca worker`: drives the executions of the store as they become ready, on any host
//! (ADR 0022). One leader per execution: a worker takes an execution's lease (a free one, or
//! one whose holder died: its connection, and so its session lock, is gone) and drives it with
//! the ordinary runner, tasks in parallel; many workers share many executions. A takeover
//! re-runs only the attempts the dead holder left running, recorded as abandoned (the runner's
//! resume). Wakes on the store's notifications (LISTEN/NOTIFY on PostgreSQL), polls as a
//! fallback.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use orca_core::{ExecutionId, ExecutionStage};
use orca_services::{NoHuman, RunOutcome};
use serde_json::json;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::cli::{Global, OnFailure, RunOptions};
use crate::exit::{CliError, Exit};
use crate::term::Progress;
use crate::worker_claims::{ClaimMode, Wakes};

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
    #[arg(long, value_enum, default_value_t = ClaimMode::Execution)]
    pub(crate) claim: ClaimMode,
    /// Seconds a step's processes get between SIGTERM and SIGKILL.
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub(crate) kill_grace: u64,
}

/// `orca run --detach`: the execution is left to the workers.
pub(crate) fn detached(app: &App, exec: ExecutionId) -> Exit {
    if app.json() {
        crate::app::out_json(&json!({"execution_id": exec, "outcome": "detached"}));
    } else {
        crate::app::out(&format!(
            "execution {exec} handed to the workers: follow it with `orca watch {exec}`"
        ));
    }
    Exit::Ok
}

/// What a drive ended with, for the log line.
pub(crate) fn outcome_text(outcome: &RunOutcome) -> &'static str {
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
const fn worker_channels(claim: ClaimMode) -> &'static [&'static str] {
    match claim {
        ClaimMode::Execution => &["orca_executions"],
        ClaimMode::Task => orca_store_postgres::CHANNELS,
    }
}

/// The next notification's payload; `None` when the connection ended.
async fn next_wake(rx: &mut Option<tokio::sync::mpsc::Receiver<String>>) -> Option<String> {
    match rx {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// Runs the worker until Ctrl-C / SIGTERM (or idle, with `--until-idle`).
pub(crate) async fn run(app: &App, global: &Global, args: WorkerArgs) -> Result<Exit, CliError> {
    orca_os::process_group::set_kill_grace(Duration::from_secs(args.kill_grace));
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
            .with_workspaces(crate::isolation::workspaces(app, None).await),
    );
    let store = app.store().clone();
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
    let url = crate::cmd::store::url(global, app.config()).ok().flatten();
    let channels = worker_channels(args.claim);
    let mut wake = listener(url.as_deref(), channels).await;
    let mut wakes = Wakes::default();
    let limit = usize::from(args.concurrency);
    let mut inflight: HashSet<ExecutionId> = HashSet::new();
    let mut joins: JoinSet<(ExecutionId, Result<&'static str, String>)> = JoinSet::new();
    let (mut driven, mut errors) = (0usize, 0usize);
    app.info(&format!(
        "worker {} started: up to {limit} executions at once, {} tasks each, claiming {}",
        std::process::id(),
        args.tasks,
        match args.claim {
            ClaimMode::Task => "tasks",
            ClaimMode::Execution => "executions",
        }
    ));
    let mut relist = true;
    let mut ready = 0usize;
    loop {
        if cancel.is_cancelled() {
            break;
        }
        if relist && inflight.len() < limit {
            ready = 0;
            match store.list_executions(None).await {
                Ok(list) => {
                    for s in list.items {
                        if s.stage.is_terminal()
                            || s.awaiting_decision
                            || inflight.contains(&s.execution_id)
                        {
                            continue;
                        }
                        match store.lease(s.execution_id).await {
                            Ok(Some(l)) if !l.stale => continue,
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "reading a lease");
                                continue;
                            }
                        }
                        ready += 1;
                        if inflight.len() >= limit {
                            continue;
                        }
                        let id = s.execution_id;
                        inflight.insert(id);
                        let mut config = crate::cmd::run::run_config(&options);
                        config.isolation = app.config_isolation();
                        let runner =
                            orca.runner(config, Arc::new(Progress::new(app.style(), true, 0, 0)));
                        let token = cancel.child_token();
                        let (claim, pending) = (args.claim, s.stage == ExecutionStage::Pending);
                        let wake = wakes.of(id);
                        joins.spawn(async move {
                            let r = match claim {
                                ClaimMode::Execution => runner
                                    .run(id, token)
                                    .await
                                    .map(|r| outcome_text(&r.outcome)),
                                ClaimMode::Task => {
                                    crate::worker_claims::drive(&runner, id, pending, &token, wake)
                                        .await
                                }
                            };
                            (id, r.map_err(|e| e.to_string()))
                        });
                    }
                }
                Err(e) => {
                    // The database restarting, say: try again at the next wake.
                    // (A dropped notification connection is re-listened below.)
                    tracing::warn!(error = %e, "listing executions");
                    errors += 1;
                }
            }
        }
        if args.until_idle && inflight.is_empty() && ready == 0 {
            break;
        }
        relist = true;
        tokio::select! {
            Some(done) = joins.join_next() => {
                if let Ok((id, result)) = done {
                    inflight.remove(&id);
                    wakes.remove(id);
                    match result {
                        Ok(outcome) => {
                            driven += 1;
                            app.info(&format!("worker: {id} {outcome}"));
                        }
                        // Another worker took it first (LeaseHeld), or the store failed.
                        Err(e) => tracing::info!(execution = %id, error = %e, "not driven"),
                    }
                }
            }
            payload = next_wake(&mut wake) => match payload {
                // A task of an execution this worker claims in: its drive looks again.
                Some(p) => relist = !wakes.wake(&p),
                // The notification connection ended (a database restart): reconnect.
                None => wake = listener(url.as_deref(), channels).await,
            },
            () = tokio::time::sleep(Duration::from_secs(args.poll)) => {
                if wake.is_none() {
                    wake = listener(url.as_deref(), channels).await;
                }
            }
            () = cancel.cancelled() => break,
        }
    }
    cancel.cancel();
    while let Some(done) = joins.join_next().await {
        if let Ok((_, Ok(_))) = done {
            driven += 1;
        }
    }
    orca_os::process_group::settle(orca_os::process_group::kill_grace() + Duration::from_secs(5))
        .await;
    if app.json() {
        crate::app::out_json(&json!({"driven": driven, "store_errors": errors}));
    } else {
        app.info(&format!(
            "worker stopped: {driven} drives, {errors} store errors"
        ));
    }
    Ok(Exit::Ok)
}
