//! The one place `orca-mcp` approves a plan: after an MCP elicitation that showed the plan and
//! its digest was accepted (ADR 0019). The model's tool call only opens the question; the
//! answer comes from the host's UI, and is audited as `mcp-elicitation:<client name>
//! (unverified client)`: orca cannot tell a human's click from a host that answers by itself,
//! and the name is the one the host reported. The approval binds the digest shown: content
//! changed meanwhile is not approved. The user can turn this path off (`[approval]
//! mcp_elicitation = false`, or `orca mcp --no-elicitation`).

use std::time::Duration;

use orca_core::{Digest, ExecutionId, Plan, PlanStage};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResponse, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, InputRequest, InputRequests, InputRequiredResult, InputResponses,
    ProtocolVersion,
};
use rmcp::service::{ElicitationError, ElicitationMode, RequestContext, RoleServer};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::host::Elicitation;
use crate::server::{OrcaMcp, ToolResult};

/// How long the human has to answer in the host's UI.
const ANSWER_TIME: Duration = Duration::from_secs(15 * 60);

/// The form the host shows the human.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct HumanAnswer {
    /// Approve this plan, exactly as shown, to run as it is.
    pub approve: bool,
}

rmcp::elicit_safe!(HumanAnswer);

/// `who:<client name>`, the client's name reduced to a short, plain token.
#[must_use]
pub fn actor(who: &str, context: &RequestContext<RoleServer>) -> String {
    let name = context
        .client_info()
        .map(|info| info.name)
        .unwrap_or_default();
    format!("{who}:{}", client_token(&name))
}

/// The actor of an approval through elicitation: the host's name as it reported it, marked
/// unverified (`mcp-elicitation:<name> (unverified client)`).
#[must_use]
pub fn elicitation_actor(context: &RequestContext<RoleServer>) -> String {
    format!(
        "{} (unverified client)",
        actor(
            orca_services::approval::MCP_ELICITATION.trim_end_matches(':'),
            context
        )
    )
}

fn client_token(name: &str) -> String {
    let token: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
        .take(64)
        .collect();
    if token.is_empty() {
        "unknown-client".to_owned()
    } else {
        token
    }
}

/// The key of the one input request of an approval round (protocol 2026-07-28).
const APPROVAL_INPUT: &str = "approval";

/// The most approval rounds waiting for a retry at once (older ones are forgotten).
const MAX_PENDING: usize = 64;

/// A plan shown to the human in a multi-round request, kept server-side: the client echoes only
/// an opaque, unguessable handle (`requestState`), never the plan or the answer's meaning.
#[derive(Debug, Clone)]
pub(crate) struct PendingApproval {
    shown: Plan,
    /// The digest of the content shown: the approval binds it.
    digest: Digest,
    by: String,
}

/// What the human answered.
enum Answer {
    Approve,
    NotApproved,
    Unavailable(String),
}

/// `plan_ask_human`: asks the human through the host and records their answer. On protocol
/// 2026-07-28 and later (no server-to-client requests) the question is an `input_required`
/// round and the answer comes with the retried call (`state`, `responses`).
pub(crate) async fn ask_human(
    server: &OrcaMcp,
    context: &RequestContext<RoleServer>,
    plan: &str,
    state: Option<String>,
    responses: Option<InputResponses>,
) -> Result<CallToolResponse, ErrorData> {
    if let Some(state) = state {
        return answered_round(server, &state, responses.as_ref())
            .await
            .map(CallToolResponse::Complete);
    }
    let planning = &server.inner.orca.planning();
    let id = match planning.resolve(plan).await {
        Ok(id) => id,
        Err(e) => return complete(server.service_error(&e)),
    };
    let shown = match planning.plan(id).await {
        Ok(p) => p,
        Err(e) => return complete(server.service_error(&e)),
    };
    if shown.stage() != PlanStage::Proposal {
        return complete(server.fail(format!(
            "plan {id} is {}; only a proposal waits for approval",
            shown.stage()
        )));
    }
    let instead = server.human_approval_elsewhere(&id.to_string());
    if let Elicitation::Off(why) = &server.inner.settings.elicitation {
        return complete(server.ok(json!({
            "plan_id": id,
            "approved": false,
            "why": format!(
                "{why}: the human approves with `{}`{}",
                server.inner.settings.approve_command(&id.to_string()),
                server
                    .inner
                    .settings
                    .inbox_url
                    .as_ref()
                    .map(|u| format!(" or in the web inbox ({u})"))
                    .unwrap_or_else(|| " or in the web inbox (orca serve)".to_owned())
            ),
            "human": instead,
        })));
    }
    let rounds = context
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
    let form = if rounds {
        context
            .client_capabilities()
            .and_then(|c| c.elicitation)
            .is_some_and(|e| e.form.is_some() || e.url.is_none())
    } else {
        context
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
    };
    if !form {
        return complete(server.ok(json!({
            "plan_id": id,
            "approved": false,
            "why": "your host does not support MCP elicitation, so orca cannot ask the human here",
            "human": instead,
        })));
    }
    let by = elicitation_actor(context);
    let digest = shown.content().digest();
    let planning = server.inner.orca.planning();
    let effect = match planning.policy_tally(&shown) {
        Some(tally) => format!(
            "Approving signs one approval with your key, as your approver name in the team's approval policy; the plan runs once the policy is satisfied ({})",
            orca_services::policy::summaries(&tally)
        ),
        None => format!(
            "Approving records your approval as {by}, signed with your key, and lets the plan run exactly as shown"
        ),
    };
    let message = server.inner.settings.redactor.redact(&format!(
        "orca asks YOU (not the agent) to approve plan {id}.\n\n{}\nDigest: {digest}\n\n\
         {effect} (content with this digest; if it changes before you answer, nothing is \
         approved).",
        server.inner.host.describe_plan(&shown)
    ));
    let pending = PendingApproval { shown, digest, by };
    if rounds {
        return ask_in_rounds(server, message, pending);
    }
    let answer = match context
        .peer
        .elicit_with_timeout::<HumanAnswer>(message, Some(ANSWER_TIME))
        .await
    {
        Ok(Some(HumanAnswer { approve: true })) => Answer::Approve,
        Ok(Some(HumanAnswer { approve: false }) | None)
        | Err(ElicitationError::UserDeclined | ElicitationError::UserCancelled) => {
            Answer::NotApproved
        }
        Err(e) => Answer::Unavailable(e.to_string()),
    };
    complete(record(server, &pending, answer).await)
}

fn complete(result: ToolResult) -> Result<CallToolResponse, ErrorData> {
    result.map(CallToolResponse::Complete)
}

/// First round on protocol 2026-07-28: the elicitation goes back as an input request; the plan
/// shown is remembered under a fresh handle.
fn ask_in_rounds(
    server: &OrcaMcp,
    message: String,
    pending: PendingApproval,
) -> Result<CallToolResponse, ErrorData> {
    let schema = ElicitationSchema::from_type::<HumanAnswer>()
        .map_err(|e| ErrorData::internal_error(format!("the approval form: {e}"), None))?;
    // A v7 UUID's 74 random bits: the handle cannot be guessed.
    let handle = format!("approval-{}", ExecutionId::new().uuid().simple());
    {
        let mut waiting = server
            .inner
            .pending
            .lock()
            .map_err(|_| ErrorData::internal_error("approval state poisoned", None))?;
        if waiting.len() >= MAX_PENDING {
            waiting.clear();
        }
        waiting.insert(handle.clone(), pending);
    }
    let mut requests = InputRequests::new();
    requests.insert(
        APPROVAL_INPUT.to_owned(),
        InputRequest::Elicitation(ElicitRequest::new(
            ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: schema,
            },
        )),
    );
    Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
        Some(requests),
        Some(handle),
    )))
}

/// The retried call of a round: the human's answer to the plan remembered under `state`.
async fn answered_round(
    server: &OrcaMcp,
    state: &str,
    responses: Option<&InputResponses>,
) -> ToolResult {
    let pending = server
        .inner
        .pending
        .lock()
        .ok()
        .and_then(|mut waiting| waiting.remove(state));
    let Some(pending) = pending else {
        return server.fail(
            "this approval request is unknown or already answered; call plan_ask_human again",
        );
    };
    let answer = match responses
        .and_then(|r| r.get(APPROVAL_INPUT))
        .map(|v| serde_json::from_value::<ElicitResult>(v.clone()))
    {
        Some(Ok(result)) => match result.action {
            ElicitationAction::Accept
                if result
                    .content
                    .as_ref()
                    .and_then(|c| c.get("approve"))
                    .and_then(serde_json::Value::as_bool)
                    == Some(true) =>
            {
                Answer::Approve
            }
            _ => Answer::NotApproved,
        },
        Some(Err(e)) => Answer::Unavailable(format!("unreadable answer: {e}")),
        None => Answer::Unavailable("the host sent no answer".to_owned()),
    };
    record(server, &pending, answer).await
}

/// Approves only on the human's yes, and only the plan that was shown.
async fn record(server: &OrcaMcp, pending: &PendingApproval, answer: Answer) -> ToolResult {
    let planning = &server.inner.orca.planning();
    let id = pending.shown.id();
    match answer {
        Answer::Approve => {}
        Answer::NotApproved => {
            return server.ok(json!({
                "plan_id": id,
                "approved": false,
                "why": "the human did not approve it; it stays a proposal",
            }));
        }
        Answer::Unavailable(why) => {
            return server.ok(json!({
                "plan_id": id,
                "approved": false,
                "why": format!("the host could not ask the human: {why}"),
                "human": server.human_approval_elsewhere(&id.to_string()),
            }));
        }
    }
    // What the human approved is what was shown: a plan changed meanwhile is not approved.
    match planning.plan(id).await {
        Ok(now) if same_plan(&now, &pending.shown) => {}
        Ok(_) => {
            return server.fail(format!(
                "plan {id} changed while the human was deciding; nothing was approved: ask again"
            ));
        }
        Err(e) => return server.service_error(&e),
    }
    // The digest shown is bound: the check and the write are one compare-and-swap.
    match planning
        .approve_shown(id, &pending.by, None, &pending.digest)
        .await
    {
        Ok(approved) => server.ok(json!({
            "plan_id": id,
            "approved": true,
            "by": pending.by,
            "digest": approved.digest().to_string(),
            "next": "plan_run",
        })),
        // Under an approval policy: this server user's approval is recorded, signed with their
        // key as one approver; the plan waits for the others.
        Err(orca_services::ServiceError::AwaitingApprovals { needs, .. }) => server.ok(json!({
            "plan_id": id,
            "approved": false,
            "recorded": true,
            "why": format!(
                "the human's approval is recorded as one approver's (signed with the key of the user running this MCP server); the approval policy needs more before the plan can run: {needs}"
            ),
            "approval_policy": { "needs": needs },
        })),
        Err(e) => server.service_error(&e),
    }
}

fn same_plan(a: &Plan, b: &Plan) -> bool {
    a.stage() == b.stage() && serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn client_names_become_plain_tokens() {
        assert_eq!(super::client_token("claude-code"), "claude-code");
        assert_eq!(
            super::client_token("evil name\n; rm -rf"),
            "evilname;rm-rf".replace(';', "")
        );
        assert_eq!(super::client_token(""), "unknown-client");
        assert_eq!(super::client_token(&"x".repeat(500)).len(), 64);
    }
}
