//! The handlers of the tools that ask someone: the human (`orca_ask_user`), a specialist
//! (`orca_ask_agent`, read-only, nesting at most [`MAX_DEPTH`] deep) and the planner
//! (`orca_invoke`, the relay's one tool).

use orca_core::{
    AgentAnswer, AgentId, AgentInfo, Budget, QuestionRequest, Reply, Role, SessionId, TaskFailure,
    ToolError,
};
use serde_json::{Value, json};

use super::args::{arg, opt_arg, tool_err};
use super::gate::{Gate, ToolContext};
use super::grants::CallMode;
use super::table::HandlerFuture;

/// How deep `orca_ask_agent` may nest.
const MAX_DEPTH: u8 = 2;

pub(super) fn ask_user<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move {
        let question: String = arg(args, "question")?;
        match g.ctx.hitl.ask_text(&g.agent, &question).await {
            Some(answer) => Ok(json!({ "answer": answer })),
            None => Err(ToolError::new(
                "no human is available to answer now: proceed with an assumption you state in your result, or stop and put the question in what you submit with `submit_result` (a step: {\"status\": \"interruption\", \"reason\": \"...\", \"question\": \"...\"}; the planner: {\"type\": \"answer\", \"text\": \"<your question>\"})",
            )),
        }
    })
}

pub(super) fn invoke<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move {
        let message: String = arg(args, "message")?;
        let reply =
            crate::orca_service::ask_planner(&g.ctx, message, None, Budget::UNLIMITED, g.scope)
                .await
                .map_err(tool_err)?;
        Ok(json!(reply.outcome))
    })
}

pub(super) fn ask_agent<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move {
        let agent: AgentId = arg(args, "agent")?;
        let question: String = arg(args, "question")?;
        let session: Option<SessionId> = opt_arg(args, "session_id")?;
        if g.depth >= MAX_DEPTH {
            return Err(ToolError::new(
                "questions may not nest this deep; answer with what you know",
            ));
        }
        let info = g
            .ctx
            .agents
            .agents()
            .into_iter()
            .find(|a| a.id == agent && a.role == Role::Specialist)
            .ok_or_else(|| ToolError::new(format!("unknown specialist `{agent}`")))?;
        let reply = ask_specialist(
            &g.ctx,
            &info,
            Some(g),
            agent,
            question,
            session,
            Budget::UNLIMITED,
        )
        .await;
        match reply.outcome {
            Ok(answer) => Ok(json!(answer)),
            Err(failure) => Err(ToolError::new(failure.to_string())),
        }
    })
}

/// Asks `info`'s specialist a read-only question through a question-mode gate (write tools
/// withheld): one question deeper than the gate `from` that asks, if a tool call asks, with its
/// audit scope.
pub(crate) async fn ask_specialist(
    ctx: &ToolContext,
    info: &AgentInfo,
    from: Option<&Gate>,
    agent: AgentId,
    question: String,
    session: Option<SessionId>,
    budget: Budget,
) -> Reply<Result<AgentAnswer, TaskFailure>> {
    let mut gate = Gate::new(
        ctx.clone(),
        info,
        CallMode::Question,
        from.and_then(|g| g.scope),
    );
    gate.depth = from.map_or(0, |g| g.depth + 1);
    ctx.agents
        .ask(
            QuestionRequest {
                agent,
                question,
                session,
                budget,
            },
            &gate,
        )
        .await
}
