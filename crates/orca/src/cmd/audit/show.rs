//! `orca audit show EXEC|PLAN`: an audit log for people — a timeline (when, how long after the
//! start, who, what, which step and attempt, how long an attempt took) drawn as the causal tree
//! the entries' parents form: execution → task attempt → model answer / tool call (with its
//! result). A plan shows its lifecycle
//! log, its run register and the executions it names.

use std::fmt::Write as _;
use std::sync::Arc;

use orca_core::{ExecutionId, PlanId};
use orca_services::events::{self, ExecEvent};
use orca_services::timeline::{self, Took};
use orca_services::{ExecutionService, NoHuman};
use orca_store::{AuditEntry, AuditLogId};
use serde_json::json;
use time::OffsetDateTime;

use crate::app::{App, out, out_json};
use crate::exit::{CliError, Exit};

enum Target {
    Execution(ExecutionId),
    Plan(PlanId),
}

/// An execution or a plan: a full id of either kind, or a prefix that names exactly one.
async fn resolve(app: &App, text: &str) -> Result<Target, CliError> {
    let orca = app.orca(Arc::new(NoHuman));
    let exec = orca.executions().resolve(text).await;
    let plan = orca.planning().resolve(text).await;
    match (exec, plan) {
        (Ok(e), Err(_)) => Ok(Target::Execution(e)),
        (Err(_), Ok(p)) => Ok(Target::Plan(p)),
        (Ok(e), Ok(p)) => Err(CliError::bad_input(format!(
            "`{text}` is ambiguous: it names execution {e} and plan {p}"
        ))),
        (Err(e), Err(_)) => Err(CliError::bad_input(format!(
            "no execution or plan matches `{text}` ({})",
            crate::exit::chain(&e)
        ))),
    }
}

pub(crate) async fn show(app: &App, target: &str) -> Result<Exit, CliError> {
    match resolve(app, target).await? {
        Target::Execution(id) => {
            let header = app.store().execution_header(id).await?;
            let plan = header.value.info().plan_id;
            let entries = app.store().entries(ExecutionService::log(plan, id)).await?;
            let evs = events::from_entries(plan, id, &entries);
            if app.json() {
                out_json(&json!({ "execution_id": id, "plan_id": plan, "events": evs }));
            } else {
                let mut text = format!("Execution {id} (plan {plan})\n");
                text.push_str(&tree(&evs));
                out(&text);
            }
        }
        Target::Plan(id) => {
            let store = app.store();
            let lifecycle = store.entries(AuditLogId::Plan { plan_id: id }).await?;
            let runs = store
                .entries(AuditLogId::Runs { plan_id: id })
                .await
                .unwrap_or_default();
            if app.json() {
                out_json(&json!({ "plan_id": id, "lifecycle": lifecycle, "runs": runs }));
            } else {
                let mut text = format!("Plan {id}\n");
                text.push_str("Lifecycle:\n");
                text.push_str(&flat(&lifecycle));
                text.push_str("Runs:\n");
                text.push_str(&flat(&runs));
                out(&text);
            }
        }
    }
    Ok(Exit::Ok)
}

fn clock(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// The execution's entries as a tree ([`timeline::tree`]): each under its parent, with the
/// time since the first entry, the step and attempt, and how long an attempt took.
fn tree(evs: &[ExecEvent]) -> String {
    let Some(first) = evs.first() else {
        return "  (no entries)\n".to_owned();
    };
    let mut text = String::new();
    for n in timeline::tree(evs) {
        let e = n.event;
        let who = match (&e.step_id, e.attempt) {
            (Some(s), Some(a)) => format!(" [{s} #{a}]"),
            (Some(s), None) => format!(" [{s}]"),
            _ => String::new(),
        };
        let took = match n.took {
            None => String::new(),
            Some(Took::FoundAfter(s)) => {
                format!(" (found {:.3}s after it started)", s.as_seconds_f64())
            }
            Some(Took::Ran(s)) => format!(" in {:.3}s", s.as_seconds_f64()),
        };
        let _ = writeln!(
            text,
            "  {:>9}  #{:<3} {}{}{who}{took}{}",
            format!("+{:.3}s", n.since_start.as_seconds_f64()),
            e.seq,
            "  ".repeat(n.depth),
            e.kind,
            if n.detail.is_empty() {
                String::new()
            } else {
                format!(" — {}", n.detail)
            }
        );
    }
    let _ = writeln!(text, "  started {}", clock(first.at));
    text
}

fn flat(entries: &[AuditEntry]) -> String {
    let mut text = String::new();
    if entries.is_empty() {
        text.push_str("  (no entries)\n");
    }
    for e in entries {
        let what = timeline::detail(&e.kind, &e.data);
        let _ = writeln!(
            text,
            "  {}  #{:<3} {}{}",
            clock(e.at),
            e.seq,
            e.kind,
            if what.is_empty() {
                String::new()
            } else {
                format!(" — {what}")
            }
        );
    }
    text
}
