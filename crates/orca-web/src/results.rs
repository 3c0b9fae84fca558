//! What steps changed and the result a person accepts: the execution page's diff view and its
//! Accept / Discard forms, the inbox's list of results waiting, and the two actions.
//!
//! A diff is what a step wrote: hostile. Every path and line goes through [`esc`]; a diff is
//! shown in a `<pre>` that scrolls on its own, so a long line never widens the page. The
//! Accept form carries the id of the result's git tree the page showed, and its action token
//! is issued for that tree: a result that moved since is refused.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::Extension;
use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use orca_core::{ExecutionId, ExecutionStage, Merged, RecordedChanges, StepWorkspaces};
use orca_services::acceptance::{self, ResultState};
use serde::Deserialize;

use crate::post::{given, redeem};

use crate::html::{esc, nonce_field, page};
use crate::pages::{Reply, service_error, status_page};
use crate::state::Web;
use crate::tokens::TokenName;

/// The most of one step's diff a page shows.
const MAX_PATCH: usize = 200 * 1024;

/// How many recent executions the inbox looks at for results waiting.
const INBOX_LOOKS_AT: usize = 50;

/// The action an Accept form's token is issued for: the execution and the result's tree.
fn accept_action(id: ExecutionId, tree: &str) -> String {
    format!("exec:{id}:accept:{tree}")
}

fn discard_action(id: ExecutionId) -> String {
    format!("exec:{id}:discard")
}

fn workspaces(web: &Web) -> Option<&dyn StepWorkspaces> {
    web.orca.dispatch().workspaces().map(|w| &**w)
}

/// The Accept / Discard forms for a result whose tree is `tree`.
fn forms(web: &Web, me: &TokenName, id: ExecutionId, tree: &str) -> String {
    let accept = web.actions.issue(me, &accept_action(id, tree));
    let discard = web.actions.issue(me, &discard_action(id));
    format!(
        "<form class=\"stack accept\" method=\"post\" action=\"/executions/{id}/accept\">{}\
<input type=\"hidden\" name=\"tree\" value=\"{}\"><label>Note (optional, signed with the decision)<input type=\"text\" name=\"note\"></label>\
<button type=\"submit\" id=\"accept\">Accept into the checked-out branch</button></form>\
<form class=\"act\" method=\"post\" action=\"/executions/{id}/discard\">{}<button class=\"bad\" type=\"submit\" id=\"discard\">Discard</button></form>",
        nonce_field(&accept),
        esc(tree),
        nonce_field(&discard)
    )
}

/// One step's changes: its files and, in a repository, its diff.
async fn step_changes(web: &Web, r: &RecordedChanges) -> String {
    let (added, removed) = r.totals();
    let mut out = format!(
        "<div class=\"card changes\"><div class=\"meta\">step <b>{}</b> · attempt {}{} · {} file(s) · +{added} −{removed}</div><ul class=\"files\">",
        esc(r.step.as_str()),
        r.attempt,
        if r.worktree {
            " · in its worktree"
        } else if r.shared {
            " · in place beside other steps: their changes may be here too"
        } else {
            ""
        },
        r.files.len()
    );
    for f in &r.files {
        let _ = write!(
            out,
            "<li><code>{}</code> <span class=\"id\">{}</span></li>",
            f.change.mark(),
            esc(&f.path)
        );
    }
    out.push_str("</ul>");
    let patch = match (r.trees(), web.orca.dispatch().changes()) {
        (Some((before, after)), Some(changes)) if before != after => {
            changes.patch(before, after).await.ok()
        }
        _ => None,
    };
    if let Some(mut patch) = patch {
        if patch.len() > MAX_PATCH {
            let mut cut = MAX_PATCH;
            while !patch.is_char_boundary(cut) {
                cut -= 1;
            }
            patch.truncate(cut);
            patch.push_str("\n… (cut; the whole diff: orca exec diff)\n");
        }
        out.push_str("<pre class=\"diff\">");
        for line in patch.lines() {
            let class = if line.starts_with("+++") || line.starts_with("---") {
                "h"
            } else if line.starts_with('+') {
                "a"
            } else if line.starts_with('-') {
                "d"
            } else if line.starts_with("@@") {
                "u"
            } else {
                "c"
            };
            let _ = writeln!(out, "<span class=\"{class}\">{}</span>", esc(line));
        }
        out.push_str("</pre>");
    }
    out.push_str("</div>");
    out
}

/// The execution page's section: where the result stands (with the forms when it waits) and
/// what each step changed.
pub(crate) async fn section(web: &Web, me: &TokenName, id: ExecutionId) -> String {
    let mut out = String::new();
    match acceptance::state(web.orca.executions(), workspaces(web), id).await {
        Ok(ResultState::Awaiting { tree }) => {
            let _ = write!(
                out,
                "<h2>Result</h2><div class=\"card\" id=\"result\"><p>Waiting for acceptance on branch <code>orca/{id}</code> (tree <code class=\"id\">{}</code>).</p>{}</div>",
                esc(&tree),
                forms(web, me, id, &tree)
            );
        }
        Ok(ResultState::Decided(d)) => {
            let _ = write!(
                out,
                "<h2>Result</h2><p class=\"msg ok\" id=\"result\">{}</p>",
                esc(&d.to_string())
            );
        }
        Ok(ResultState::None) | Err(_) => {}
    }
    let recorded = orca_services::changes::recorded(web.orca.executions(), id)
        .await
        .unwrap_or_default();
    let snapshot = web.orca.executions().get(id).await.ok();
    let order: Vec<&orca_core::StepId> = snapshot
        .iter()
        .flat_map(|s| s.tasks.iter().map(|t| t.value.step_id()))
        .collect();
    let latest = orca_services::changes::latest(&recorded, &order);
    if !latest.is_empty() {
        out.push_str("<h2>Changes</h2>");
        for r in latest {
            out.push_str(&step_changes(web, r).await);
        }
    }
    out
}

/// The inbox's results waiting for acceptance, as cards with their forms.
pub(crate) async fn inbox_cards(web: &Web, me: &TokenName) -> (usize, String) {
    let Some(ws) = workspaces(web) else {
        return (0, String::new());
    };
    let Ok(listing) = web.orca.executions().list(None).await else {
        return (0, String::new());
    };
    let with_results = ws.with_results().await;
    let mut out = String::new();
    let mut count = 0;
    for item in listing
        .items
        .iter()
        .filter(|i| i.stage == ExecutionStage::Completed)
        .filter(|i| {
            with_results
                .as_ref()
                .is_none_or(|ids| ids.contains(&i.execution_id))
        })
        .take(INBOX_LOOKS_AT)
    {
        let id = item.execution_id;
        let Ok(ResultState::Awaiting { tree }) =
            acceptance::state(web.orca.executions(), Some(ws), id).await
        else {
            continue;
        };
        count += 1;
        let _ = write!(
            out,
            "<div class=\"card inbox-item result\"><div class=\"meta\">result waiting for acceptance · <span class=\"id\">{id}</span></div>\
<p><a href=\"/executions/{id}\">See what it changed →</a></p>{}</div>",
            forms(web, me, id, &tree)
        );
    }
    (count, out)
}

fn parse_exec(id: &str) -> Result<ExecutionId, Response> {
    id.parse().map_err(|e| {
        status_page(
            StatusCode::NOT_FOUND,
            "Not found",
            &format!("execution {id}: {e}"),
        )
    })
}

fn refusal(e: orca_services::ServiceError) -> Response {
    let text = e.to_string();
    if text.contains("changed since it was shown") {
        status_page(StatusCode::CONFLICT, "Changed since shown", &text)
    } else if matches!(e, orca_services::ServiceError::BadInput(_)) {
        status_page(StatusCode::CONFLICT, "Refused", &text)
    } else {
        service_error(e)
    }
}

fn no_repository() -> Response {
    status_page(
        StatusCode::CONFLICT,
        "Refused",
        "the project is not in a git repository: there is no result to accept or discard",
    )
}

#[derive(Debug, Deserialize)]
pub(crate) struct AcceptForm {
    nonce: String,
    /// The id of the result's tree the page showed: the acceptance binds it.
    tree: String,
    note: Option<String>,
}

pub(crate) async fn accept(
    State(web): State<Arc<Web>>,
    Extension(me): Extension<TokenName>,
    Path(id): Path<String>,
    Form(f): Form<AcceptForm>,
) -> Reply {
    let id = parse_exec(&id)?;
    if !is_object_id(&f.tree) {
        return Err(status_page(
            StatusCode::BAD_REQUEST,
            "Bad form",
            "the form's tree is not an object id",
        ));
    }
    redeem(&web, &me, &f.nonce, &accept_action(id, &f.tree))?;
    let ws = workspaces(&web).ok_or_else(no_repository)?;
    let note = given(f.note);
    let (merged, _) = acceptance::accept(
        web.orca.executions(),
        ws,
        id,
        &f.tree,
        &me.actor(),
        note.as_deref(),
    )
    .await
    .map_err(refusal)?;
    let how = match merged {
        Merged::FastForward { commit } => format!("fast-forwarded to {commit}"),
        Merged::MergeCommit { commit } => format!("merged with commit {commit}"),
        Merged::UpToDate { commit } => format!("already held ({commit})"),
    };
    let body = format!(
        "<h1>Accepted</h1><p class=\"msg ok\" id=\"result\">accepted the result of execution {id} (tree <code>{}</code>) as {}: {}; signed with {}</p>\
<a href=\"/executions/{id}\">Back to the execution</a> · <a href=\"/inbox\">Inbox</a>",
        esc(&f.tree),
        esc(&me.actor()),
        esc(&how),
        esc(&web.settings.signer)
    );
    Ok(Html(page("Accepted", &body)).into_response())
}

/// Whether `text` is a full git object id (hex, 40 or 64 digits).
fn is_object_id(text: &str) -> bool {
    (text.len() == 40 || text.len() == 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

#[derive(Debug, Deserialize)]
pub(crate) struct DiscardForm {
    nonce: String,
    note: Option<String>,
}

pub(crate) async fn discard(
    State(web): State<Arc<Web>>,
    Extension(me): Extension<TokenName>,
    Path(id): Path<String>,
    Form(f): Form<DiscardForm>,
) -> Reply {
    let id = parse_exec(&id)?;
    redeem(&web, &me, &f.nonce, &discard_action(id))?;
    let ws = workspaces(&web).ok_or_else(no_repository)?;
    let note = given(f.note);
    let removed = acceptance::discard(web.orca.executions(), ws, id, &me.actor(), note.as_deref())
        .await
        .map_err(refusal)?;
    let body = format!(
        "<h1>Discarded</h1><p class=\"msg ok\" id=\"result\">discarded the result of execution {id}: removed {}</p>\
<a href=\"/executions/{id}\">Back to the execution</a> · <a href=\"/inbox\">Inbox</a>",
        esc(&removed.join(", "))
    );
    Ok(Html(page("Discarded", &body)).into_response())
}
