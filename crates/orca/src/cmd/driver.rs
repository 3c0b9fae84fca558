//! Who drives an execution, as a person sees it (ADR 0010): an execution is `running` only
//! while a live driver holds its lease, otherwise `interrupted` (since when, by which host and
//! pid) with the command that resumes it. `exec stop` stops a driver (resumable), `exec cancel`
//! ends an execution for good; `watch` follows one.

use std::time::Duration;

use orca_core::{ExecutionId, ExecutionStage};
use orca_services::NoHuman;
use orca_store::LeaseInfo;
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::app::{App, out, out_json, own_host, user};
use crate::exit::{CliError, Exit};

/// How long a lease held on another host counts as live without a renewal.
pub(crate) const DEFAULT_LEASE_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `lease` names a live driver: its lock is held (on this host the kernel drops it the
/// moment the holder dies) and, for a holder on another host, it renewed within the timeout.
pub(crate) fn is_live(lease: Option<&LeaseInfo>) -> bool {
    lease.is_some_and(|l| {
        !l.stale
            && (l.holder.host == own_host()
                || OffsetDateTime::now_utc() - l.last_seen() < DEFAULT_LEASE_TIMEOUT)
    })
}

/// The driver of a `running` (or `pending`) execution as JSON: `{"state": "running", host,
/// pid}` or `{"state": "interrupted", since, host, pid, resume}`; `None` for an ended one.
pub(crate) fn driver_json(
    id: ExecutionId,
    stage: ExecutionStage,
    lease: Option<&LeaseInfo>,
) -> Option<Value> {
    if stage.is_terminal() {
        return None;
    }
    let live = is_live(lease);
    if stage == ExecutionStage::Pending && !live {
        return None;
    }
    let mut v = json!({ "state": if live { "running" } else { "interrupted" } });
    if let Some(l) = lease {
        v["host"] = json!(l.holder.host);
        v["pid"] = json!(l.holder.pid);
        if !live {
            v["since"] = json!(rfc3339(l.last_seen()));
        }
    }
    if !live {
        v["resume"] = json!(format!("orca exec resume {id}"));
    }
    Some(v)
}

/// One line for people: who drives it, or since when it is interrupted and how to resume it.
pub(crate) fn driver_text(
    id: ExecutionId,
    stage: ExecutionStage,
    lease: Option<&LeaseInfo>,
) -> Option<String> {
    if stage.is_terminal() || (stage == ExecutionStage::Pending && !is_live(lease)) {
        return None;
    }
    Some(match lease {
        Some(l) if is_live(lease) => format!(
            "Driver:    running: pid {} on {}",
            l.holder.pid, l.holder.host
        ),
        Some(l) => format!(
            "Driver:    interrupted since {} (pid {} on {} is gone): resume with `orca exec resume {id}`",
            rfc3339(l.last_seen()),
            l.holder.pid,
            l.holder.host
        ),
        None => format!(
            "Driver:    interrupted (no process drives it): resume with `orca exec resume {id}`"
        ),
    })
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}

/// `exec stop`: the driver (on this host) gets SIGTERM — the same as Ctrl-C in its terminal —
/// ends its running steps, records their attempts interrupted and lets the lease go; the
/// execution stays resumable. Waits until the driver has let go.
pub(crate) async fn stop(app: &App, exec: &str, reason: Option<String>) -> Result<Exit, CliError> {
    let orca = app.orca(std::sync::Arc::new(NoHuman));
    let id = orca.executions().resolve(exec).await?;
    let header = orca.executions().header(id).await?;
    let stage = header.value.stage();
    if stage.is_terminal() {
        return Err(CliError::bad_input(format!(
            "execution {id} has already ended ({stage}); there is nothing to stop"
        )));
    }
    let lease = app.store().lease(id).await?;
    let mut stopped_driver = None;
    if let Some(l) = lease.as_ref().filter(|l| is_live(Some(l))) {
        if l.holder.host != own_host() {
            return Err(CliError::bad_input(format!(
                "execution {id} is driven by pid {} on host {}: stop it there, or end it for good with `orca exec cancel {id}`",
                l.holder.pid, l.holder.host
            )));
        }
        signal_driver(l)?;
        stopped_driver = Some(l.holder.clone());
        // The driver ends its steps (SIGTERM, grace, SIGKILL) before it lets the lease go.
        let most = app.agents.kill_grace() + Duration::from_secs(60);
        let start = std::time::Instant::now();
        loop {
            let now = app.store().lease(id).await?;
            let same = now
                .as_ref()
                .is_some_and(|n| !n.stale && n.holder.token == l.holder.token);
            if !same {
                break;
            }
            if start.elapsed() > most {
                return Err(CliError::internal(format!(
                    "pid {} did not let {id} go within {}s",
                    l.holder.pid,
                    most.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let header = orca
        .executions()
        .record_stop_requested(id, &user(), reason.as_deref(), stopped_driver.as_ref())
        .await?;
    let stage = header.value.stage();
    if app.json() {
        out_json(&json!({
            "execution_id": id,
            "stage": stage,
            "state": if stage.is_terminal() { "ended" } else { "interrupted" },
            "resume": (!stage.is_terminal()).then(|| format!("orca exec resume {id}")),
        }));
    } else if stage.is_terminal() {
        out(&format!("{id} ended ({stage}) before it could be stopped"));
    } else if let Some(h) = stopped_driver {
        out(&format!(
            "stopped {id} (pid {} on {}): its running steps were ended and recorded as interrupted; continue with `orca exec resume {id}`",
            h.pid, h.host
        ));
    } else {
        out(&format!(
            "no process is driving {id}; it stays resumable: `orca exec resume {id}` (`orca exec cancel {id}` ends it for good)"
        ));
    }
    Ok(Exit::Ok)
}

/// SIGTERM to the live holder of a lease (its flock is held, so the pid is still that
/// process: a pid is not reused while its process lives).
fn signal_driver(lease: &LeaseInfo) -> Result<(), CliError> {
    orca_os::process_group::terminate_process(lease.holder.pid).map_err(|e| {
        CliError::internal(format!(
            "cannot signal driver pid {}: {e}",
            lease.holder.pid
        ))
    })
}

/// `exec cancel`: ends an execution for good (`stopped`, final). A process driving it notices
/// within its watch interval and ends its running steps.
pub(crate) async fn cancel(
    app: &App,
    exec: &str,
    reason: Option<String>,
) -> Result<Exit, CliError> {
    let orca = app.orca(std::sync::Arc::new(NoHuman));
    let id = orca.executions().resolve(exec).await?;
    let stopped = orca.executions().stop(id, &user(), reason.clone()).await?;
    // No live process drives it: nobody else will seal its log (ADR 0013).
    if !is_live(app.store().lease(id).await?.as_ref()) {
        orca.executions().seal_if_ended(id).await?;
    }
    if app.json() {
        out_json(&json!({ "execution_id": id, "stage": stopped.value.stage() }));
    } else {
        out(&format!(
            "cancelled {id} for good; a process driving it ends its running steps"
        ));
    }
    Ok(Exit::Ok)
}

/// Adds the driver of each not-ended execution to `exec list --json` items, and marks the
/// stage of interrupted ones in the text table.
pub(crate) async fn annotate_list(
    app: &App,
    items: &[orca_store::ExecutionSummary],
) -> Result<Vec<(Value, Option<bool>)>, CliError> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let mut value = json!(item);
        let mut live = None;
        if !item.stage.is_terminal() {
            let lease = app.store().lease(item.execution_id).await?;
            if let Some(d) = driver_json(item.execution_id, item.stage, lease.as_ref()) {
                live = Some(d["state"] == "running");
                value["driver"] = d;
            }
        }
        out.push((value, live));
    }
    Ok(out)
}
