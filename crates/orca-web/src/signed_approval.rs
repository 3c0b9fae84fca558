//! Approving under an approval policy: the inbox records an approver's own signature, never
//! makes one. An access token bound to an approver (`orca serve --new-token NAME --approver
//! WHO`) shows the digest and the command the approver runs on their own machine, `orca policy
//! vote PLAN --digest …`, which signs with their key; the page takes what it prints. The server
//! records it only if it verifies with that approver's key in the policy, for this plan, this
//! digest and this policy; the server user's key signs nothing for anyone.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse};
use orca_core::policy::ApproverName;
use orca_core::{Digest, Plan, PlanId};
use orca_services::policy::{PolicyDecision, SignedVote, summaries};

use crate::html::{esc, nonce_field, page};
use crate::pages::{Reply, error_response, status_page};
use crate::state::Web;
use crate::svg::Links;
use crate::tokens::TokenName;

/// The approver `me` may approve as, or the page saying why it may not.
fn bound_approver(web: &Web, me: &TokenName) -> Result<ApproverName, axum::response::Response> {
    let bound = web.tokens.approver(me).map_err(|e| error_response(&e))?;
    let Some(name) = bound else {
        return Err(status_page(
            StatusCode::FORBIDDEN,
            "Not an approver's token",
            &format!(
                "plans here are approved under an approval policy, each approval signed by the approver's own key; the access token `{me}` is bound to no approver. Ask whoever runs this server for a token bound to your name: orca serve --new-token NAME --approver YOUR-NAME"
            ),
        ));
    };
    name.parse().map_err(|e: String| {
        status_page(
            StatusCode::FORBIDDEN,
            "Not an approver's token",
            &format!("the access token `{me}` is bound to {e}"),
        )
    })
}

/// The confirmation page under a policy: the digest, the command that signs it on the
/// approver's machine, and a field for what it prints.
pub(crate) fn confirm_page(web: &Arc<Web>, me: &TokenName, plan: &Plan, nonce: &str) -> Reply {
    let approver = bound_approver(web, me)?;
    let id = plan.id();
    let c = plan.content();
    let digest = c.digest();
    let (policy, tally) = match (
        web.orca.planning().policy(),
        web.orca.planning().policy_tally(plan),
    ) {
        (Some(ctx), Some(tally)) => (ctx.signed.digest.clone(), summaries(&tally)),
        _ => {
            return Err(status_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "No policy",
                "no approval policy is configured here",
            ));
        }
    };
    let command = format!("orca policy vote {id} --digest {digest}");
    let body = format!(
        "<h1>Approve this plan?</h1><div class=\"card\"><p><strong>{}</strong></p>\
<dl class=\"kv\"><dt>plan</dt><dd class=\"id\">{id}</dd><dt>steps</dt><dd>{}</dd><dt>digest</dt><dd><code id=\"digest\">{}</code></dd>\
<dt>approval policy</dt><dd><code>{}</code>: {}</dd><dt>you approve as</dt><dd id=\"approver\">{}</dd></dl>\
<p>An approval under the policy is signed by <strong>your own key</strong>, on your machine: this server never signs for you and never sees your key. \
Check the steps below, then run this where your signing key is (add <code>--note \"…\"</code> to record a note):</p>\
<pre id=\"command\">{}</pre>\
<p>It signs the digest above as {}; paste what it prints here. Only this exact content can then be approved: a signature over another digest, another plan, another policy or by another key is refused.</p>\
<form class=\"stack\" method=\"post\" action=\"/plans/{id}/approve\">{}<input type=\"hidden\" name=\"confirm\" value=\"yes\">\
<input type=\"hidden\" name=\"digest\" value=\"{}\">\
<label>Your signed approval (the output of <code>orca policy vote</code>)<textarea name=\"vote\" rows=\"4\" required spellcheck=\"false\"></textarea></label>\
<button type=\"submit\" id=\"confirm\">Record my signed approval</button> <a href=\"/plans/{id}\">Cancel</a></form></div>{}{}",
        crate::markdown::line(&c.goal),
        c.steps.len(),
        esc(&digest.to_string()),
        esc(&policy.to_string()),
        esc(&tally),
        esc(approver.as_str()),
        esc(&command),
        esc(approver.as_str()),
        nonce_field(nonce),
        esc(&digest.to_string()),
        crate::svg::dag(c, &BTreeMap::new(), Links::PlanRows),
        crate::pages::steps_table(plan),
    );
    Ok(Html(page("Approve", &body)).into_response())
}

/// Records the pasted signed approval of plan `id` (whose page showed `shown`) for the
/// approver `me` is bound to.
pub(crate) async fn record(
    web: &Arc<Web>,
    me: &TokenName,
    id: PlanId,
    shown: &Digest,
    vote: Option<&str>,
) -> Reply {
    let approver = bound_approver(web, me)?;
    let bad = |m: String| status_page(StatusCode::BAD_REQUEST, "Not recorded", &m);
    let text = vote.filter(|v| !v.trim().is_empty()).ok_or_else(|| {
        bad(format!(
            "paste the output of `orca policy vote {id} --digest {shown}`, run where your signing key is: this server does not sign approvals for anyone"
        ))
    })?;
    let vote = SignedVote::parse(text).map_err(|e| bad(format!("{e}; nothing was recorded")))?;
    if vote.digest != *shown {
        return Err(status_page(
            StatusCode::CONFLICT,
            "Not recorded",
            &format!(
                "this signed approval is over the digest {}, but the page showed {shown}; nothing was recorded",
                vote.digest
            ),
        ));
    }
    match web
        .orca
        .planning()
        .approve_with_vote(id, &vote, &approver)
        .await
    {
        Ok(PolicyDecision::Approved(approved, tally)) => {
            let run = web.actions.issue(me, &format!("plan:{id}:run"));
            let body = format!(
                "<h1>Approved</h1><p class=\"msg ok\" id=\"result\">approved plan {id} (digest <code>{}</code>): {}'s signed approval satisfies the policy ({})</p>\
<form class=\"act\" method=\"post\" action=\"/plans/{id}/run\">{}<button type=\"submit\" id=\"run\">Run it now</button></form> \
<a href=\"/plans/{id}\">Back to the plan</a> · <a href=\"/inbox\">Inbox</a>",
                esc(&approved.digest().to_string()),
                esc(approver.as_str()),
                esc(&summaries(&tally)),
                nonce_field(&run)
            );
            Ok(Html(page("Approved", &body)).into_response())
        }
        Ok(PolicyDecision::Pending(_, tally)) => Ok(status_page(
            StatusCode::OK,
            "Approval recorded",
            &format!(
                "{approver}'s signed approval of plan {id} is recorded; it is not approved yet: {}",
                summaries(&tally)
            ),
        )),
        Ok(_) => Ok(status_page(StatusCode::OK, "Recorded", "recorded")),
        Err(e) => Err(crate::post::plan_conflict(web, id, e).await),
    }
}
