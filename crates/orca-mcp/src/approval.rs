//! The one place `orca-mcp` approves a plan: after a human accepted an MCP elicitation that
//! showed the plan (ADR 0019). The model's tool call only opens the question; the answer comes
//! from the host's UI, and is audited as `mcp-elicitation:<client name>`.

use std::time::Duration;

use orca_core::{Plan, PlanStage};
use rmcp::service::{ElicitationError, ElicitationMode, RequestContext, RoleServer};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

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
        .peer
        .peer_info()
        .map(|info| info.client_info.name.clone())
        .unwrap_or_default();
    format!("{who}:{}", client_token(&name))
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

/// `plan_ask_human`: asks the human through the host and records their answer.
pub(crate) async fn ask_human(
    server: &OrcaMcp,
    context: &RequestContext<RoleServer>,
    plan: &str,
) -> ToolResult {
    let planning = &server.inner.orca.planning;
    let id = match planning.resolve(plan).await {
        Ok(id) => id,
        Err(e) => return server.service_error(&e),
    };
    let shown = match planning.plan(id).await {
        Ok(p) => p,
        Err(e) => return server.service_error(&e),
    };
    if shown.stage() != PlanStage::Proposal {
        return server.fail(format!(
            "plan {id} is {}; only a proposal waits for approval",
            shown.stage()
        ));
    }
    let instead = server.human_approval(&id.to_string());
    if !server.inner.settings.elicitation {
        return server.ok(json!({
            "plan_id": id,
            "approved": false,
            "why": "approvals through the host are turned off (orca mcp --no-elicitation)",
            "human": instead,
        }));
    }
    if !context
        .peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        return server.ok(json!({
            "plan_id": id,
            "approved": false,
            "why": "your host does not support MCP elicitation, so orca cannot ask the human here",
            "human": instead,
        }));
    }
    let by = actor("mcp-elicitation", context);
    let message = server.inner.settings.redactor.redact(&format!(
        "orca asks YOU (not the agent) to approve plan {id}.\n\n{}\n\
         Approving records your approval as {by}, signed with your key, and lets the plan run as shown.",
        server.inner.host.describe_plan(&shown)
    ));
    let answer = context
        .peer
        .elicit_with_timeout::<HumanAnswer>(message, Some(ANSWER_TIME))
        .await;
    match answer {
        Ok(Some(HumanAnswer { approve: true })) => {}
        Ok(Some(HumanAnswer { approve: false }))
        | Ok(None)
        | Err(ElicitationError::UserDeclined | ElicitationError::UserCancelled) => {
            return server.ok(json!({
                "plan_id": id,
                "approved": false,
                "why": "the human did not approve it; it stays a proposal",
            }));
        }
        Err(e) => {
            return server.ok(json!({
                "plan_id": id,
                "approved": false,
                "why": format!("the host could not ask the human: {e}"),
                "human": instead,
            }));
        }
    }
    // What the human approved is what was shown: a plan changed meanwhile is not approved.
    match planning.plan(id).await {
        Ok(now) if same_plan(&now, &shown) => {}
        Ok(_) => {
            return server.fail(format!(
                "plan {id} changed while the human was deciding; nothing was approved: ask again"
            ));
        }
        Err(e) => return server.service_error(&e),
    }
    match planning.approve(id, &by, None).await {
        Ok(approved) => server.ok(json!({
            "plan_id": id,
            "approved": true,
            "by": by,
            "digest": approved.digest().to_string(),
            "next": "plan_run",
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
