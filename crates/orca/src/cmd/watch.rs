//! `orca watch EXEC`: follows an execution driven by another process; whether it still has a
//! live driver is `driver`'s question (`is_live`, `driver_json`, `driver_text`).

use std::time::Duration;

use orca_core::ExecutionStage;
use orca_services::NoHuman;
use serde_json::json;

use crate::app::{App, out, out_json};
use crate::cmd::driver::{driver_json, driver_text, is_live};
use crate::exit::{CliError, Exit};
use crate::term::say;

/// `watch`: follows an execution until it ends, waits for a decision nobody drives, or is
/// interrupted (no live driver).
pub(crate) async fn watch(
    app: &App,
    exec: &str,
    shared_url: Option<&str>,
) -> Result<Exit, CliError> {
    let orca = app.orca(std::sync::Arc::new(NoHuman));
    let id = orca.executions().resolve(exec).await?;
    // On a shared store, woken by its notifications for this execution (polled every 2 s as a
    // fallback); otherwise polled.
    let mut wake = crate::cmd::worker::listener(shared_url, orca_store_postgres::CHANNELS).await;
    let key = id.to_string();
    let mut seen: Vec<String> = Vec::new();
    let start = std::time::Instant::now();
    // On a shared store a dead driver's run is taken over by a worker: the watch goes on.
    let mut orphaned = false;
    loop {
        let snap = orca.executions().get(id).await?;
        let now: Vec<String> = snap
            .tasks
            .iter()
            .map(|t| format!("{}:{}", t.value.step_id(), t.value.status()))
            .collect();
        if !app.json() {
            for (i, line) in now.iter().enumerate() {
                if seen.get(i) != Some(line) {
                    let t = &snap.tasks[i].value;
                    say(&format!(
                        "[{:>6.1}s] {:<24} {}",
                        start.elapsed().as_secs_f64(),
                        t.step_id().as_str(),
                        t.status()
                    ));
                }
            }
        }
        seen = now;
        let stage = snap.execution.value.stage();
        let waiting = snap
            .execution
            .value
            .decision()
            .is_some_and(|d| d.answer.is_none());
        let lease = app.store().lease(id).await?;
        let driven = is_live(lease.as_ref());
        // A dead driver's lease is seen at once; with no lease at all, give a starting
        // driver a moment to take it.
        let settled = lease.is_some() || start.elapsed() > Duration::from_secs(2);
        let ended = stage.is_terminal()
            || (waiting && !driven)
            || (stage == ExecutionStage::Pending && !driven && settled);
        if ended {
            let awaits = crate::isolation::result_line(app, &orca, id)
                .await
                .is_some_and(|(_, v)| v["state"] == "awaiting_acceptance");
            let status = orca_services::status::Status::of(stage, waiting, Some(driven), awaits);
            if app.json() {
                out_json(&json!({
                    "execution_id": id, "stage": stage, "status": status.as_str(),
                    "awaiting_decision": waiting,
                }));
            } else {
                let totals = crate::app::totals(app, id).await?;
                out(&crate::cmd::exec::show_text(&orca, &snap, status, &totals).await);
            }
            return Ok(match stage {
                ExecutionStage::Completed => Exit::Ok,
                ExecutionStage::Failed | ExecutionStage::Stopped => Exit::ExecutionFailed,
                _ if waiting => Exit::AwaitingHuman,
                _ => Exit::Ok,
            });
        }
        if driven && orphaned {
            orphaned = false;
            if !app.json() {
                let by = lease.as_ref().map_or_else(String::new, |l| {
                    format!(" by pid {} on {}", l.holder.pid, l.holder.host)
                });
                say(&format!("{id}: taken over{by}"));
            }
        }
        if stage == ExecutionStage::Running && !driven && settled && shared_url.is_some() {
            if !orphaned && !app.json() {
                let who = lease.as_ref().map_or_else(
                    || "its driver".to_owned(),
                    |l| format!("its driver (pid {} on {})", l.holder.pid, l.holder.host),
                );
                say(&format!(
                    "{id}: {who} is gone; waiting for a worker to take it over (Ctrl-C stops watching; `orca exec resume {id}` drives it here)"
                ));
            }
            orphaned = true;
        } else if stage == ExecutionStage::Running && !driven && settled {
            if app.json() {
                out_json(&json!({
                    "execution_id": id,
                    "stage": stage,
                    "awaiting_decision": waiting,
                    "driver": driver_json(id, stage, lease.as_ref()),
                }));
            } else if let Some(line) = driver_text(id, stage, lease.as_ref()) {
                say(&format!(
                    "{id}: {}",
                    line.trim_start_matches("Driver:").trim()
                ));
            }
            return Ok(Exit::Interrupted);
        }
        match wake.as_mut() {
            Some(rx) => {
                let mine = async {
                    while let Some(payload) = rx.recv().await {
                        if payload == key {
                            return true;
                        }
                    }
                    false
                };
                if let Ok(false) = tokio::time::timeout(Duration::from_secs(2), mine).await {
                    // The notification connection ended: poll from now on.
                    wake = None;
                }
            }
            None => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}
