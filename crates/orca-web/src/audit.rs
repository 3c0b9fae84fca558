//! The audit pages, as `orca audit show` draws them: an execution's log as the causal tree
//! its entries' parents form (execution → task attempt → model answer / tool call), each
//! entry with its time since the start and an ended attempt with how long it took
//! (`orca_services::timeline`, the same computation as the command line); a plan's lifecycle
//! and run register; and, unfiltered, every log with its newest entries in a few words.
//!
//! Entries are data written from agents' text: every word goes through [`esc`]. The tree is a
//! list whose rows wrap on a narrow window (no table to overflow).

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse};
use orca_core::{ExecutionId, PlanId};
use orca_services::events::{self, ExecEvent};
use orca_services::timeline::{self, Took};
use orca_store::{AuditEntry, AuditLogId};
use serde::Deserialize;

use crate::html::{badge, esc, page, secs, when, when_cell};
use crate::pages::{Reply, error_response, resolve_exec, resolve_plan, short_id};
use crate::state::Web;

/// How many of the newest entries the unfiltered page shows.
const NEWEST: usize = 100;

/// The deepest indentation drawn (deeper entries stay at it).
const MAX_INDENT: usize = 6;

#[derive(Debug, Deserialize)]
pub(crate) struct AuditQuery {
    plan: Option<String>,
    exec: Option<String>,
}

pub(crate) async fn audit(State(web): State<Arc<Web>>, Query(q): Query<AuditQuery>) -> Reply {
    if let Some(e) = &q.exec {
        let id = resolve_exec(&web, e).await?;
        return execution(&web, id).await;
    }
    if let Some(p) = &q.plan {
        let id = resolve_plan(&web, p).await?;
        return plan(&web, id).await;
    }
    everything(&web).await
}

fn store_error(e: orca_store::StoreError) -> axum::response::Response {
    error_response(&orca_services::ServiceError::from(e).into())
}

/// Whether a log verifies, as a badge.
async fn verified(web: &Web, log: AuditLogId) -> String {
    match web.store.verify(log).await {
        Ok(r) if r.is_intact() => badge("ok"),
        _ => badge("failed"),
    }
}

/// A link to the step page of an entry's step and attempt, when it names one.
fn step_link(e: &ExecEvent) -> String {
    match (&e.step_id, e.attempt) {
        (Some(s), a) => format!(
            " <a class=\"step\" href=\"/executions/{}/steps/{}\">[{}{}]</a>",
            e.execution_id,
            esc(s),
            esc(s),
            a.map(|a| format!(" #{a}")).unwrap_or_default()
        ),
        _ => String::new(),
    }
}

/// One execution's log as a tree with durations.
async fn execution(web: &Web, id: ExecutionId) -> Reply {
    let header = web.store.execution_header(id).await.map_err(store_error)?;
    let plan_id = header.value.info().plan_id;
    let log = orca_services::ExecutionService::log(plan_id, id);
    let entries = web.store.entries(log).await.map_err(store_error)?;
    let evs = events::from_entries(plan_id, id, &entries);
    let mut body = format!(
        "<h1>Audit of execution <a class=\"id\" href=\"/executions/{id}\">{}</a></h1>\
<p>plan <a class=\"id\" href=\"/plans/{plan_id}\">{}</a> · log {} · {}</p>",
        esc(&short_id(&id.to_string())),
        esc(&short_id(&plan_id.to_string())),
        verified(web, log).await,
        orca_core::plural::count(evs.len(), "entry", "entries"),
    );
    body.push_str(&tree(&evs));
    let _ = write!(
        body,
        "<p><a href=\"/audit?plan={plan_id}\">Audit trail of its plan</a></p>"
    );
    Ok(Html(page("Audit", &body)).into_response())
}

/// The tree of `evs` ([`timeline::tree`]): offset, sequence number, the kind indented under
/// its parent, the step and attempt, how long an attempt took, what it says.
fn tree(evs: &[ExecEvent]) -> String {
    let Some(first) = evs.first() else {
        return "<p class=\"mut\">(no entries)</p>".to_owned();
    };
    let mut out = format!(
        "<p class=\"mut\">started {}; times are since then</p><ol class=\"tree\">",
        when_cell(first.at)
    );
    for n in timeline::tree(evs) {
        let e = n.event;
        let took = match n.took {
            None => String::new(),
            Some(Took::Ran(d)) => format!(" <span class=\"took\">in {}</span>", secs(d)),
            Some(Took::FoundAfter(d)) => format!(
                " <span class=\"took\">(found {} after it started)</span>",
                secs(d)
            ),
        };
        let _ = write!(
            out,
            "<li class=\"d{}\" id=\"e{}\"><span class=\"off\">+{:.3}s</span> <span class=\"seq\">#{}</span> \
<code class=\"kind\">{}</code>{}{took}{}</li>",
            n.depth.min(MAX_INDENT),
            e.seq,
            n.since_start.as_seconds_f64(),
            e.seq,
            esc(&e.kind),
            step_link(e),
            words(&n.detail),
        );
    }
    out.push_str("</ol>");
    out
}

fn words(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(
            " <span class=\"det\">— {}</span>",
            crate::markdown::line(detail)
        )
    }
}

/// Entries without a tree (a plan's lifecycle, its run register): when, what, a few words.
fn flat(entries: &[AuditEntry]) -> String {
    if entries.is_empty() {
        return "<p class=\"mut\">(no entries)</p>".to_owned();
    }
    let mut out = String::from("<ol class=\"tree\">");
    for e in entries {
        let _ = write!(
            out,
            "<li>{} <span class=\"seq\">#{}</span> <code class=\"kind\">{}</code>{}</li>",
            when_cell(e.at),
            e.seq,
            esc(&e.kind),
            words(&timeline::detail(&e.kind, &e.data))
        );
    }
    out.push_str("</ol>");
    out
}

/// A plan's lifecycle, its run register and links to its executions' trees.
async fn plan(web: &Web, id: PlanId) -> Reply {
    let lifecycle = AuditLogId::Plan { plan_id: id };
    let runs = AuditLogId::Runs { plan_id: id };
    let life = web.store.entries(lifecycle).await.map_err(store_error)?;
    let register = web.store.entries(runs).await.unwrap_or_default();
    let mut body = format!(
        "<h1>Audit of plan <a class=\"id\" href=\"/plans/{id}\">{}</a></h1>\
<h2>Lifecycle {}</h2>{}<h2>Runs</h2>{}",
        esc(&short_id(&id.to_string())),
        verified(web, lifecycle).await,
        flat(&life),
        flat(&register),
    );
    let logs = web.store.audit_logs().await.map_err(store_error)?;
    let mut execs = String::new();
    for log in logs {
        if let AuditLogId::Execution {
            plan_id,
            execution_id,
        } = log
            && plan_id == id
        {
            let _ = write!(
                execs,
                "<li><a class=\"id\" href=\"/audit?exec={execution_id}\">{}</a> {}</li>",
                esc(&short_id(&execution_id.to_string())),
                verified(web, log).await
            );
        }
    }
    if !execs.is_empty() {
        let _ = write!(
            body,
            "<h2>Its executions' logs</h2><ul class=\"logs\">{execs}</ul>"
        );
    }
    Ok(Html(page("Audit", &body)).into_response())
}

/// Every log, linked to its page, and the newest entries across them in a few words.
async fn everything(web: &Web) -> Reply {
    let logs = web.store.audit_logs().await.map_err(store_error)?;
    let mut rows = Vec::new();
    let mut list = String::new();
    for log in &logs {
        let (href, label) = match *log {
            AuditLogId::Execution { execution_id, .. } => (
                format!("/audit?exec={execution_id}"),
                format!("execution {}", short_id(&execution_id.to_string())),
            ),
            AuditLogId::Plan { plan_id } => (
                format!("/audit?plan={plan_id}"),
                format!("plan {}", short_id(&plan_id.to_string())),
            ),
            AuditLogId::Runs { .. } => {
                // Shown on its plan's page, with the lifecycle.
                if let Ok(entries) = web.store.entries(*log).await {
                    rows.extend(entries.into_iter().map(|e| (*log, e)));
                }
                continue;
            }
        };
        let entries = web.store.entries(*log).await.unwrap_or_default();
        let _ = write!(
            list,
            "<li><a href=\"{href}\">{}</a> <span class=\"mut\">{}{}</span></li>",
            esc(&label),
            orca_core::plural::count(entries.len(), "entry", "entries"),
            entries
                .last()
                .map(|e| format!(", last {}", when(e.at)))
                .unwrap_or_default()
        );
        rows.extend(entries.into_iter().map(|e| (*log, e)));
    }
    rows.sort_by_key(|(_, e)| std::cmp::Reverse(e.at));
    let total = rows.len();
    rows.truncate(NEWEST);
    let mut body = format!(
        "<h1>Audit timeline</h1><p class=\"mut\">{} in {}. Open a log for its tree.</p>\
<ul class=\"logs\">{list}</ul><h2>Newest entries{}</h2><ol class=\"tree\">",
        orca_core::plural::count(total, "entry", "entries"),
        orca_core::plural::count(logs.len(), "log", "logs"),
        if total > NEWEST {
            format!(" (the newest {NEWEST})")
        } else {
            String::new()
        }
    );
    for (log, e) in rows {
        let link = match log {
            AuditLogId::Execution { execution_id, .. } => format!(
                "<a class=\"id\" href=\"/audit?exec={execution_id}#e{}\">{}</a>",
                e.seq,
                esc(&short_id(&execution_id.to_string()))
            ),
            AuditLogId::Plan { plan_id } | AuditLogId::Runs { plan_id } => format!(
                "<a class=\"id\" href=\"/audit?plan={plan_id}\">{}</a>",
                esc(&short_id(&plan_id.to_string()))
            ),
        };
        let _ = write!(
            body,
            "<li>{} {link} <code class=\"kind\">{}</code>{}</li>",
            when_cell(e.at),
            esc(&e.kind),
            words(&timeline::detail(&e.kind, &e.data))
        );
    }
    body.push_str("</ol>");
    Ok(Html(page("Audit", &body)).into_response())
}
