//! The pages (GET): inbox, plans, one plan, executions, one execution and the approval
//! confirmation; the status and error pages every handler returns. (A step: `steps`; the
//! audit: `audit`; signing in: `login`.)

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use orca_core::{ExecutionId, Plan, PlanEvent, PlanId, StepId, graph};
use serde::Deserialize;

use crate::html::{badge, esc, nonce_field, page, when, when_cell};
use crate::markdown;
use crate::state::Web;
use crate::svg::Links;
use crate::tokens::TokenName;
use crate::views::{self, InboxItem};

/// A handler's reply: `Err` holds the error page that ended it early, so `?` returns it.
pub(crate) type Reply = Result<Response, Response>;

/// A page with a status and one message, for a signed-in person.
pub(crate) fn status_page(status: StatusCode, title: &str, message: &str) -> Response {
    let class = if status.is_success() { "ok" } else { "bad" };
    (
        status,
        Html(page(
            title,
            &format!(
                "<h1>{}</h1><p class=\"msg {class}\">{}</p><p><a href=\"/inbox\">Back to the inbox</a></p>",
                esc(title),
                esc(message)
            ),
        )),
    )
        .into_response()
}

/// A refusal before the token is checked: no "Sign out", no links that need a token.
pub(crate) fn public_status_page(status: StatusCode, title: &str, message: &str) -> Response {
    (
        status,
        Html(crate::html::public_page(
            title,
            &format!(
                "<h1>{}</h1><p class=\"msg bad\">{}</p>",
                esc(title),
                esc(message)
            ),
        )),
    )
        .into_response()
}

pub(crate) fn error_response(e: &crate::error::WebError) -> Response {
    use orca_services::ServiceError;
    let status = match e {
        crate::error::WebError::Service(ServiceError::UnknownId(_)) => StatusCode::NOT_FOUND,
        crate::error::WebError::BadInput(_) | crate::error::WebError::Service(_) => {
            StatusCode::BAD_REQUEST
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    status_page(status, "Error", &e.to_string())
}

/// The error page of a failed service call.
pub(crate) fn service_error(e: orca_services::ServiceError) -> Response {
    error_response(&e.into())
}

pub(crate) async fn root() -> Redirect {
    Redirect::to("/inbox")
}

pub(crate) async fn inbox_json(State(web): State<Arc<Web>>) -> Response {
    match views::inbox(&web.orca).await {
        Ok(items) => Json(items).into_response(),
        Err(e) => error_response(&e),
    }
}

pub(crate) async fn inbox(
    State(web): State<Arc<Web>>,
    Extension(me): Extension<TokenName>,
) -> Reply {
    let items = views::inbox(&web.orca)
        .await
        .map_err(|e| error_response(&e))?;
    let (results, cards) = crate::results::inbox_cards(&web, &me).await;
    let mut body = format!(
        "<h1>Inbox <span class=\"mut\">({} waiting)</span></h1>{cards}",
        items.len() + results
    );
    if items.is_empty() && results == 0 {
        body.push_str("<p class=\"mut\">Nothing waits for a decision.</p>");
    }
    for item in &items {
        let (kind, id) = match item {
            InboxItem::PlanApproval { plan_id, .. } => ("plan approval", plan_id.to_string()),
            InboxItem::StepDecision { execution_id, .. } => {
                ("step decision", execution_id.to_string())
            }
        };
        let _ = write!(
            body,
            "<div class=\"card inbox-item\"><div class=\"meta\">{} · waiting since {} · <span class=\"id\">{}</span></div>\
<p>{}</p><a class=\"decide\" href=\"{}\">Decide →</a></div>",
            esc(kind),
            when_cell(item.since()),
            esc(&id),
            markdown::line(&item.headline()),
            esc(&item.path())
        );
    }
    Ok(Html(page("Inbox", &body)).into_response())
}

pub(crate) async fn plans(State(web): State<Arc<Web>>) -> Reply {
    let listing = web.orca.planning().list().await.map_err(service_error)?;
    let mut body = String::from(
        "<h1>Plans</h1><table><tr><th>Plan</th><th>Goal</th><th>Stage</th><th class=\"opt\">Steps</th><th class=\"opt\">Created</th></tr>",
    );
    for p in &listing.items {
        let _ = write!(
            body,
            "<tr><td><a class=\"id\" href=\"/plans/{0}\">{1}</a></td><td class=\"wide\">{2}</td><td>{3}</td><td class=\"opt\">{4}</td><td class=\"opt\">{5}</td></tr>",
            p.plan_id,
            esc(&short_id(&p.plan_id.to_string())),
            markdown::line(&p.goal),
            badge(&p.stage.to_string()),
            p.steps,
            when_cell(p.created_at)
        );
    }
    body.push_str("</table>");
    problems(&mut body, &listing.problems);
    Ok(Html(page("Plans", &body)).into_response())
}

fn problems(body: &mut String, problems: &[orca_store::ListingProblem]) {
    for p in problems {
        let _ = write!(
            body,
            "<p class=\"msg bad\">{}: {}</p>",
            esc(&p.location),
            esc(&p.message)
        );
    }
}

/// An id as people see it: its kind and the last 8 digits of its uuid (the random part, as
/// the CLI shows it: `orca_services::short_ids`); a plan and its execution never look alike.
pub(crate) fn short_id(id: &str) -> String {
    orca_services::short_ids::ShortIds::default().short(id)
}

pub(crate) async fn resolve_plan(web: &Web, text: &str) -> Result<PlanId, Response> {
    web.orca
        .planning()
        .resolve(text)
        .await
        .map_err(service_error)
}

/// The plan a URL names (its id or a unique prefix).
async fn plan_named(web: &Web, text: &str) -> Result<Plan, Response> {
    let id = resolve_plan(web, text).await?;
    web.orca.planning().plan(id).await.map_err(service_error)
}

pub(crate) async fn resolve_exec(web: &Web, text: &str) -> Result<ExecutionId, Response> {
    web.orca
        .executions()
        .resolve(text)
        .await
        .map_err(service_error)
}

pub(crate) fn steps_table(plan: &Plan) -> String {
    let steps = &plan.content().steps;
    let deps = graph::dependency_indices(steps);
    let mut out = String::from(
        "<table class=\"steps\"><tr><th>Step</th><th>Agent</th><th class=\"opt\">After</th><th>What</th></tr>",
    );
    for (i, s) in steps.iter().enumerate() {
        let after: Vec<&str> = deps
            .get(i)
            .map(|d| {
                d.iter()
                    .filter_map(|&j| steps.get(j))
                    .map(|s| s.id.as_str())
                    .collect()
            })
            .unwrap_or_default();
        let _ = write!(
            out,
            "<tr id=\"step-{}\"><td><code>{}</code></td><td>{}</td><td class=\"opt\">{}</td><td class=\"wide\">{}{}{}{}</td></tr>",
            esc(s.id.as_str()),
            esc(s.id.as_str()),
            esc(s.agent.as_ref()),
            esc(&after.join(", ")),
            markdown::line(&s.description),
            if s.locks.is_empty() {
                String::new()
            } else {
                format!("<br>locks: <code>{}</code>", esc(&s.locks.join(", ")))
            },
            s.command
                .as_ref()
                .map(|c| format!("<br><code>{}</code>", esc(c)))
                .unwrap_or_default(),
            checks_list(&s.checks)
        );
    }
    out.push_str("</table>");
    out
}

/// A step's (or the plan's) checks: each command that must exit 0.
fn checks_list(checks: &[orca_core::Check]) -> String {
    checks
        .iter()
        .map(|c| {
            format!(
                "<br>check: <code>{}</code>",
                esc(&orca_services::hitl::check_text(c))
            )
        })
        .collect()
}

fn history(plan: &Plan) -> String {
    let mut out = String::from("<dl class=\"kv\">");
    let _ = write!(
        out,
        "<dt>created</dt><dd>{}</dd>",
        esc(&when(plan.created_at()))
    );
    for e in plan.history() {
        match e {
            PlanEvent::Submitted { at } => {
                let _ = write!(out, "<dt>submitted</dt><dd>{}</dd>", esc(&when(*at)));
            }
            PlanEvent::ChangesRequested { at, by, feedback } => {
                let _ = write!(
                    out,
                    "<dt>changes requested</dt><dd>by {} at {}: {}</dd>",
                    esc(by),
                    esc(&when(*at)),
                    esc(feedback)
                );
            }
            _ => {}
        }
    }
    match plan {
        Plan::Approved(p) => {
            let a = p.approval();
            let _ = write!(
                out,
                "<dt>approved</dt><dd>{} · digest <code>{}</code></dd>",
                decided(&a.by, a.at, a.note.as_deref()),
                esc(&a.digest.to_string())
            );
            if orca_services::approval::through_agent_host(&a.by) {
                let _ = write!(
                    out,
                    "<dt>through</dt><dd class=\"agent-host\"><strong>{}</strong></dd>",
                    esc(orca_services::approval::THROUGH_AGENT_HOST)
                );
            }
        }
        Plan::Rejected(p) => {
            let r = p.rejection();
            let _ = write!(
                out,
                "<dt>rejected</dt><dd>{}</dd>",
                decided(&r.by, r.at, r.reason.as_deref())
            );
        }
        _ => {}
    }
    out.push_str("</dl>");
    out
}

/// Who decided, when, and what they said (escaped): `by B at T — note`.
fn decided(by: &str, at: time::OffsetDateTime, said: Option<&str>) -> String {
    format!(
        "by {} at {}{}",
        esc(by),
        esc(&when(at)),
        said.map(|n| format!(" — {}", esc(n))).unwrap_or_default()
    )
}

pub(crate) async fn plan(
    State(web): State<Arc<Web>>,
    Extension(me): Extension<TokenName>,
    Path(id): Path<String>,
) -> Reply {
    let plan = plan_named(&web, &id).await?;
    let id = plan.id();
    let c = plan.content();
    let mut body = format!(
        "<h1>{} {}</h1><dl class=\"kv\"><dt>plan</dt><dd class=\"id\">{id}</dd><dt>digest</dt><dd><code>{}</code></dd></dl>",
        markdown::line(&c.goal),
        badge(&plan.stage().to_string()),
        esc(&c.digest().to_string()),
    );
    if let Some(s) = &c.summary {
        body.push_str(&markdown::block(s));
    }
    if let Some(tally) = web.orca.planning().policy_tally(&plan) {
        let _ = write!(
            body,
            "<p class=\"policy\">approval policy: {}</p>",
            esc(&orca_services::policy::summaries(&tally))
        );
    }
    match &plan {
        Plan::Proposal(_) => {
            let reject = web.actions.issue(&me, &format!("plan:{id}:reject"));
            let changes = web.actions.issue(&me, &format!("plan:{id}:changes"));
            let _ = write!(
                body,
                "<div class=\"card\"><h2>Your decision</h2>\
<p><a href=\"/plans/{id}/approve?digest={}\"><button type=\"button\" id=\"approve\">Approve…</button></a> <span class=\"mut\">(you confirm on the next page)</span></p>\
<form class=\"stack\" method=\"post\" action=\"/plans/{id}/changes\">{}<label>What should change<textarea name=\"feedback\" rows=\"2\" required></textarea></label><button class=\"sec\" type=\"submit\">Request changes</button></form>\
<form class=\"stack\" method=\"post\" action=\"/plans/{id}/reject\">{}<label>Why reject (optional)<input type=\"text\" name=\"reason\"></label><button class=\"bad\" type=\"submit\">Reject</button></form></div>",
                esc(&c.digest().to_string()),
                nonce_field(&changes),
                nonce_field(&reject)
            );
        }
        Plan::Approved(_) => {
            let run = web.actions.issue(&me, &format!("plan:{id}:run"));
            let _ = write!(
                body,
                "<form class=\"act\" method=\"post\" action=\"/plans/{id}/run\">{}<button type=\"submit\" id=\"run\">Run it now</button></form>",
                nonce_field(&run)
            );
        }
        _ => {}
    }
    let _ = write!(
        body,
        "<h2>Steps</h2>{}{}<h2>History</h2>{}",
        crate::svg::dag(c, &BTreeMap::new(), Links::PlanRows),
        steps_table(&plan),
        history(&plan)
    );
    for (title, items) in [
        ("Assumptions", &c.assumptions),
        ("Risks", &c.risks),
        ("Verification", &c.verification),
    ] {
        if !items.is_empty() {
            let _ = write!(body, "<h2>{title}</h2><ul>");
            for i in items {
                let _ = write!(body, "<li>{}</li>", markdown::line(i));
            }
            body.push_str("</ul>");
        }
    }
    if !c.checks.is_empty() {
        let _ = write!(
            body,
            "<h2>Checks on the integrated result</h2><p>{}</p>",
            checks_list(&c.checks).trim_start_matches("<br>")
        );
    }
    if let Ok(listing) = web.orca.executions().list(Some(id)).await
        && !listing.items.is_empty()
    {
        body.push_str("<h2>Executions</h2>");
        body.push_str(&crate::exec_list::exec_table(&web, &listing.items).await);
    }
    let _ = write!(
        body,
        "<p><a href=\"/audit?plan={id}\">Audit trail of this plan</a></p>"
    );
    Ok(Html(page(&c.goal, &body)).into_response())
}

pub(crate) async fn plan_svg(State(web): State<Arc<Web>>, Path(id): Path<String>) -> Reply {
    let plan = plan_named(&web, &id).await?;
    Ok((
        [(header::CONTENT_TYPE, "image/svg+xml")],
        crate::svg::dag(plan.content(), &BTreeMap::new(), Links::None),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct ConfirmQuery {
    /// The digest of the content the plan page showed, when the confirmation came from it.
    digest: Option<String>,
}

/// The confirmation step before an approval is signed. Opened from the plan page, it carries
/// the digest that page showed: content changed since is not offered for approval.
pub(crate) async fn approve_confirm(
    State(web): State<Arc<Web>>,
    Extension(me): Extension<TokenName>,
    Path(id): Path<String>,
    Query(q): Query<ConfirmQuery>,
) -> Reply {
    let plan = plan_named(&web, &id).await?;
    let id = plan.id();
    if !matches!(plan, Plan::Proposal(_)) {
        let who = views::plan_decided_by(&plan).unwrap_or_else(|| plan.stage().to_string());
        return Err(status_page(
            StatusCode::CONFLICT,
            "Already decided",
            &format!("plan {id} is no longer waiting for approval: {who}"),
        ));
    }
    let c = plan.content();
    let digest = c.digest();
    if let Some(seen) = q.digest.as_deref()
        && seen != digest.to_string()
    {
        return Err(status_page(
            StatusCode::CONFLICT,
            "Changed since shown",
            &format!(
                "plan {id} changed after its page was shown to you (shown: {seen}, now: {digest}); nothing was approved: open the plan again and decide on what it says now"
            ),
        ));
    }
    let nonce = web
        .actions
        .issue(&me, &crate::post::approve_action(id, &digest));
    if web.orca.planning().policy().is_some() {
        return crate::signed_approval::confirm_page(&web, &me, &plan, &nonce);
    }
    let body = format!(
        "<h1>Approve this plan?</h1><div class=\"card\"><p><strong>{}</strong></p>\
<dl class=\"kv\"><dt>plan</dt><dd class=\"id\">{id}</dd><dt>steps</dt><dd>{}</dd><dt>digest</dt><dd><code>{}</code></dd>\
<dt>recorded as</dt><dd>{}</dd><dt>signed with</dt><dd>{}</dd></dl>\
<p>Approving signs the digest above with the server user's key. Only this exact content can then run; if the plan changes before you confirm, nothing is approved.</p>\
<form class=\"stack\" method=\"post\" action=\"/plans/{id}/approve\">{}<input type=\"hidden\" name=\"confirm\" value=\"yes\">\
<input type=\"hidden\" name=\"digest\" value=\"{}\">\
<label>Note (optional)<input type=\"text\" name=\"note\"></label>\
<button type=\"submit\" id=\"confirm\">Confirm and sign the approval</button> <a href=\"/plans/{id}\">Cancel</a></form></div>{}{}",
        markdown::line(&c.goal),
        c.steps.len(),
        esc(&digest.to_string()),
        esc(&me.actor()),
        esc(&web.settings.signer),
        nonce_field(&nonce),
        esc(&digest.to_string()),
        crate::svg::dag(c, &BTreeMap::new(), Links::PlanRows),
        steps_table(&plan),
    );
    Ok(Html(page("Approve", &body)).into_response())
}

pub(crate) async fn executions(State(web): State<Arc<Web>>) -> Response {
    match web.orca.executions().list(None).await {
        Ok(listing) => {
            let mut body = format!(
                "<h1>Executions</h1>{}",
                crate::exec_list::exec_table(&web, &listing.items).await
            );
            problems(&mut body, &listing.problems);
            Html(page("Executions", &body)).into_response()
        }
        Err(e) => error_response(&e.into()),
    }
}

pub(crate) async fn execution(
    State(web): State<Arc<Web>>,
    Extension(me): Extension<TokenName>,
    Path(id): Path<String>,
) -> Reply {
    let id = resolve_exec(&web, &id).await?;
    let view = views::execution(&web.orca, web.store.as_ref(), id)
        .await
        .map_err(|e| error_response(&e))?;
    let info = view.snapshot.execution.value.info();
    let goal = view
        .plan
        .as_ref()
        .map(|p| p.content().goal.clone())
        .unwrap_or_default();
    let fragment = crate::live::fragment(&web, &view, &me);
    let ended = view.snapshot.execution.value.stage().is_terminal();
    let body = format!(
        "<h1>Execution <span class=\"id\">{}</span></h1><p>{} · plan <a class=\"id\" href=\"/plans/{}\">{}</a></p>\
<div id=\"live\" data-events=\"{}\"{}>{fragment}</div>\
<noscript><p class=\"mut\">Live updates need JavaScript; reload the page to refresh.</p></noscript>\
{}<p><a href=\"/audit?exec={}\">Audit trail of this execution</a></p>",
        esc(&short_id(&id.to_string())),
        markdown::line(&goal),
        info.plan_id,
        esc(&short_id(&info.plan_id.to_string())),
        if ended {
            String::new()
        } else {
            format!("/executions/{id}/events")
        },
        if ended { " data-ended=\"1\"" } else { "" },
        crate::results::section(&web, &me, id).await,
        id
    );
    Ok(Html(page("Execution", &body)).into_response())
}

/// The step statuses of an execution, for the graph.
pub(crate) fn statuses(snapshot: &orca_store::ExecutionSnapshot) -> BTreeMap<StepId, String> {
    snapshot
        .tasks
        .iter()
        .map(|t| (t.value.step_id().clone(), t.value.status().to_string()))
        .collect()
}
