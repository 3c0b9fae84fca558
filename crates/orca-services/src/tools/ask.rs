//! The handlers of the tools that ask someone: the human (`orca_ask_user`), a specialist
//! (`orca_ask_agent`, read-only, nesting at most [`MAX_DEPTH`] deep) and the planner
//! (`orca_invoke`, the relay's one tool).

use orca_core::{AgentId, Budget, QuestionRequest, Role, SessionId, ToolError};
use serde_json::{Value, json};

use super::args::{arg, opt_arg, tool_err};
use super::gate::Gate;
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
                "no human is available to answer now; proceed with stated assumptions or return an interruption with your question",
            )),
        }
    })
}

pub(super) fn invoke<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move {
        let message: String = arg(args, "message")?;
        let reply = crate::relay::ask_planner(&g.ctx, message, None, Budget::UNLIMITED, g.scope)
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
        let mut nested = Gate::new(g.ctx.clone(), &info, CallMode::Question, g.scope);
        nested.depth = g.depth + 1;
        let reply = g
            .ctx
            .agents
            .ask(
                QuestionRequest {
                    agent,
                    question,
                    session,
                    budget: Budget::UNLIMITED,
                },
                &nested,
            )
            .await;
        match reply.outcome {
            Ok(answer) => Ok(json!(answer)),
            Err(failure) => Err(ToolError::new(failure.to_string())),
        }
    })
}
