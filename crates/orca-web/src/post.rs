//! The actions (POST): approve / request changes / reject a plan, run an approved plan, and
//! decide a step (retry / replan / stop / answer). Each redeems its single-use action token,
//! then makes the same service call as the command line, recorded as `web:<token name>`.

use std::sync::Arc;

use axum::Extension;
use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use orca_core::{Decision, Digest, Execution, ExecutionId, Plan, PlanId};
use serde::Deserialize;

use crate::html::{esc, nonce_field, page};
use crate::pages::{Reply, error_response, service_error, status_page};
use crate::state::Web;
use crate::tokens::TokenName;
use crate::views;

/// A form's optional text, `None` when left blank.
pub(crate) fn given(text: Option<String>) -> Option<String> {
    text.filter(|t| !t.trim().is_empty())
}

fn refused(message: &str) -> Response {
    status_page(StatusCode::CONFLICT, "Refused", message)
}

fn parse_plan(id: &str) -> Result<PlanId, Response> {
    id.parse().map_err(|e| {
        status_page(
            StatusCode::NOT_FOUND,
            "Not found",
            &format!("plan {id}: {e}"),
        )
    })
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

/// Spends an action token (one-shot, bound to this person and this action); a refusal is a 409.
pub(crate) fn redeem(web: &Web, me: &TokenName, nonce: &str, action: &str) -> Result<(), Response> {
    web.actions
        .redeem(nonce, me, action)
        .map_err(|r| refused(&r.to_string()))
}

/// After a plan decision failed: if someone else decided first, say who; content changed
/// since the page was shown is refused as a conflict.
pub(crate) async fn plan_conflict(
    web: &Web,
    id: PlanId,
    e: orca_services::ServiceError,
) -> Response {
    if matches!(e, orca_services::ServiceError::ContentChanged { .. }) {
        return status_page(StatusCode::CONFLICT, "Changed since shown", &e.to_string());
    }
    // Under an approval policy: this approval is recorded, others are still needed.
    if matches!(e, orca_services::ServiceError::AwaitingApprovals { .. }) {
        return status_page(StatusCode::OK, "Approval recorded", &e.to_string());
    }
    match web.orca.planning().plan(id).await {
        Ok(plan) if !matches!(plan, Plan::Proposal(_)) => refused(&format!(
            "plan {id} was already decided: {}",
            views::plan_decided_by(&plan).unwrap_or_else(|| plan.stage().to_string())
        )),
        _ => error_response(&e.into()),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct ApproveForm {
    nonce: String,
    confirm: Option<String>,
    /// The digest of the content the confirmation page showed: the approval binds it.
    digest: Option<String>,
    note: Option<String>,
    /// Under an approval policy: the approver's signed approval (`orca policy vote`).
    vote: Option<String>,
}

/// The action an approve form's token is issued for: the plan and the digest of the content
/// its page showed (a token cannot approve other content).
pub(crate) fn approve_action(id: PlanId, digest: &Digest) -> String {
    format!("plan:{id}:approve:{digest}")
}

pub(crate) async fn approve(
    State(web): State<Arc<Web>>,
    Extension(me): Extension<TokenName>,
    Path(id): Path<String>,
    Form(f): Form<ApproveForm>,
) -> Reply {
    let id = parse_plan(&id)?;
    if f.confirm.as_deref() != Some("yes") {
        return Err(status_page(
            StatusCode::BAD_REQUEST,
            "Not confirmed",
            "an approval needs the confirmation step: open the plan and press Approve…",
        ));
    }
    let Some(shown) = f.digest.as_deref().map(str::parse::<Digest>) else {
        return Err(status_page(
            StatusCode::BAD_REQUEST,
            "Not confirmed",
            "the form does not say which content it approves (no digest): open the plan and press Approve…",
        ));
    };
    let shown = shown.map_err(|e| {
        status_page(
            StatusCode::BAD_REQUEST,
            "Bad form",
            &format!("the form's digest: {e}"),
        )
    })?;
    redeem(&web, &me, &f.nonce, &approve_action(id, &shown))?;
    // Under a policy the approver's own signature is recorded; this server signs nothing.
    if web.orca.planning().policy().is_some() {
        return crate::signed_approval::record(&web, &me, id, &shown, f.vote.as_deref()).await;
    }
    let note = given(f.note);
    match web
        .orca
        .planning()
        .approve_shown(id, &me.actor(), note, &shown)
        .await
    {
        Ok(approved) => {
            let run = web.actions.issue(&me, &format!("plan:{id}:run"));
            let body = format!(
                "<h1>Approved</h1><p class=\"msg ok\" id=\"result\">approved plan {id} as {} (digest <code>{}</code>), signed with {}</p>\
<form class=\"act\" method=\"post\" action=\"/plans/{id}/run\">{}<button type=\"submit\" id=\"run\">Run it now</button></form> \
<a href=\"/plans/{id}\">Back to the plan</a> · <a href=\"/inbox\">Inbox</a>",
                esc(&me.actor()),
                esc(&approved.digest().to_string()),
                esc(&web.settings.signer),
                nonce_field(&run)
            );
            Ok(Html(page("Approved", &body)).into_response())
        }
        Err(e) => Err(plan_conflict(&web, id, e).await),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct RejectForm {
    nonce: String,
    reason: Option<String>,
}

pub(crate) async fn reject(
    State(web): State<Arc<Web>>,
    Extension(me): Extension<TokenName>,
    Path(id): Path<String>,
    Form(f): Form<RejectForm>,
) -> Reply {
    let id = parse_plan(&id)?;
    redeem(&web, &me, &f.nonce, &format!("plan:{id}:reject"))?;
    let reason = given(f.reason);
    // Recorded as the token, never as the server user (an approver, perhaps): a rejection in
    // the web is not an approver's signed act.
    match web
        .orca
        .planning()
        .reject_for(id, &me.actor(), reason)
        .await
    {
        Ok(_) => Ok(status_page(
            StatusCode::OK,
            "Rejected",
            &format!("rejected plan {id} as {}", me.actor()),
        )),
        Err(e) => Err(plan_conflict(&web, id, e).await),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChangesForm {
    nonce: String,
    feedback: String,
}

pub(crate) async fn request_changes(
    State(web): State<Arc<Web>>,
    Extension(me): Extension<TokenName>,
    Path(id): Path<String>,
    Form(f): Form<ChangesForm>,
) -> Reply {
    let id = parse_plan(&id)?;
    if f.feedback.trim().is_empty() {
        return Err(status_page(
            StatusCode::BAD_REQUEST,
            "Feedback needed",
            "feedback is empty: say what should change",
        ));
    }
    redeem(&web, &me, &f.nonce, &format!("plan:{id}:changes"))?;
    match web
        .orca
        .planning()
        .request_changes(id, &me.actor(), &f.feedback)
        .await
    {
        Ok(_) => Ok(status_page(
            StatusCode::OK,
            "Changes requested",
            &format!(
                "plan {id} is a draft again with your feedback; the planner revises it (`orca ask`)"
            ),
        )),
        Err(e) => Err(plan_conflict(&web, id, e).await),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct RunForm {
    nonce: String,
}

pub(crate) async fn run(
    State(web): State<Arc<Web>>,
    Extension(me): Extension<TokenName>,
    Path(id): Path<String>,
    Form(f): Form<RunForm>,
) -> Reply {
    let id = parse_plan(&id)?;
    redeem(&web, &me, &f.nonce, &format!("plan:{id}:run"))?;
    let (_, exec) = web
        .orca
        .executions()
        .create(id)
        .await
        .map_err(service_error)?;
    if let Err(message) = web.runs.continue_run(exec) {
        return Err(status_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Not started",
            &format!(
                "execution {exec} was created but cannot be started here: {message}; run `orca exec resume {exec}`"
            ),
        ));
    }
    Ok(Redirect::to(&format!("/executions/{exec}")).into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct DecideForm {
    nonce: String,
    decision: String,
    guidance: Option<String>,
}

/// Who decided first, when a decision is refused.
async fn exec_conflict(web: &Web, id: ExecutionId, e: orca_services::ServiceError) -> Response {
    let Ok(view) = views::execution(&web.orca, web.store.as_ref(), id).await else {
        return error_response(&e.into());
    };
    let e_now = &view.snapshot.execution.value;
    let who = match e_now.decision().and_then(|d| d.answer.as_ref()) {
        Some(a) => Some(a.by.clone()),
        None => view.last_decision_by.clone(),
    };
    match (who, e_now) {
        (Some(by), _) => refused(&format!(
            "execution {id}: the decision was already made, by {by}"
        )),
        (None, Execution::Running(r)) if r.decision.is_none() => {
            refused(&format!("execution {id} is not waiting for a decision"))
        }
        (None, other) if other.stage().is_terminal() => {
            refused(&format!("execution {id} has ended ({})", other.stage()))
        }
        _ => error_response(&e.into()),
    }
}

pub(crate) async fn decide(
    State(web): State<Arc<Web>>,
    Extension(me): Extension<TokenName>,
    Path(id): Path<String>,
    Form(f): Form<DecideForm>,
) -> Reply {
    let id = parse_exec(&id)?;
    let guidance = given(f.guidance);
    let decision = match f.decision.as_str() {
        "retry" => Decision::Retry { guidance },
        "replan" => Decision::Replan { guidance },
        "stop" => Decision::Stop,
        "answer" => match guidance {
            Some(text) => Decision::Answer { text },
            None => {
                return Err(status_page(
                    StatusCode::BAD_REQUEST,
                    "Answer needed",
                    "`answer` needs the answer in the text field",
                ));
            }
        },
        other => {
            return Err(status_page(
                StatusCode::BAD_REQUEST,
                "Unknown decision",
                &format!("decision `{other}`: expected retry, replan, stop or answer"),
            ));
        }
    };
    redeem(&web, &me, &f.nonce, &format!("exec:{id}:decide"))?;
    if let Err(e) = web
        .orca
        .executions()
        .decide(id, decision, &me.actor())
        .await
    {
        return Err(exec_conflict(&web, id, e).await);
    }
    // Always asked to continue: `exec resume` takes over from a driver that is gone (at once
    // on this host) and exits, changing nothing, when a live one holds the execution — which
    // then applies the decision itself.
    let driven = views::execution(&web.orca, web.store.as_ref(), id)
        .await
        .is_ok_and(|v| views::driven(&v));
    let note = match web.runs.continue_run(id) {
        Ok(()) if driven => "the process driving it applies it".to_owned(),
        Ok(()) => "the run continues here".to_owned(),
        Err(m) => format!("it could not be continued here ({m}); run `orca exec resume {id}`"),
    };
    let body = format!(
        "<h1>Decided</h1><p class=\"msg ok\" id=\"result\">recorded the decision `{}` for execution {id} as {}; {}</p><p><a href=\"/executions/{id}\">Follow the execution</a> · <a href=\"/inbox\">Inbox</a></p>",
        esc(&f.decision),
        esc(&me.actor()),
        esc(&note)
    );
    Ok(Html(page("Decided", &body)).into_response())
}
