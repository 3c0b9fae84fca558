//! `DispatchService`: sends a task or a read-only question to a specialist, through the gate
//! that grants its tools.

use orca_core::{
    AgentAnswer, AgentId, AgentInfo, ErrorCode, Reply, Role, SessionId, TaskFailure, TaskRequest,
    TaskResult,
};
use tracing::instrument;

use crate::tools::{
    AuditScope, CallMode, Gate, ProcessSink, StepOwner, ToolContext, ask_specialist,
};

/// Dispatches work to agents.
#[derive(Debug, Clone)]
pub struct DispatchService {
    ctx: ToolContext,
}

impl DispatchService {
    /// A dispatcher over the tool context (agents, hitl, planning, store).
    #[must_use]
    pub const fn new(ctx: ToolContext) -> Self {
        Self { ctx }
    }

    /// The tool context.
    #[must_use]
    pub const fn context(&self) -> &ToolContext {
        &self.ctx
    }

    /// The profile of an agent, if available.
    #[must_use]
    pub fn agent(&self, id: &AgentId) -> Option<AgentInfo> {
        self.ctx.agents.agents().into_iter().find(|a| &a.id == id)
    }

    /// Dispatches a task to its step's agent with its context. Tool calls are audited under
    /// `scope`. An unknown agent is a `unknown_agent` failure, not an error.
    #[instrument(skip(self, request), fields(agent = %request.agent, step = %request.step.id, attempt = request.attempt))]
    pub async fn dispatch_task(
        &self,
        request: TaskRequest,
        scope: Option<AuditScope>,
    ) -> Reply<TaskResult> {
        self.dispatch_task_owned(request, scope, None, Vec::new())
            .await
    }

    /// [`Self::dispatch_task`], reporting the process groups the attempt starts to `sink`.
    pub async fn dispatch_task_owned(
        &self,
        request: TaskRequest,
        scope: Option<AuditScope>,
        sink: Option<ProcessSink>,
        held_fds: Vec<i32>,
    ) -> Reply<TaskResult> {
        let Some(info) = self
            .agent(&request.agent)
            .filter(|a| a.role == Role::Specialist)
        else {
            return Reply::new(TaskResult::Failure(TaskFailure::new(
                ErrorCode::UnknownAgent,
                format!("no specialist agent `{}` is available", request.agent),
            )));
        };
        let mut gate = Gate::new(self.ctx.clone(), &info, CallMode::Task, scope);
        if let Some(sink) = sink {
            gate = gate.for_step(StepOwner {
                identity: request.identity(),
                sink,
                held_fds,
            });
        }
        self.ctx.agents.run_task(request, &gate).await
    }

    /// Asks a specialist a read-only question (write tools withheld), optionally continuing a
    /// session.
    #[instrument(skip(self, question))]
    pub async fn ask(
        &self,
        agent: AgentId,
        question: String,
        session: Option<SessionId>,
        budget: orca_core::Budget,
    ) -> Reply<Result<AgentAnswer, TaskFailure>> {
        let Some(info) = self.agent(&agent).filter(|a| a.role == Role::Specialist) else {
            return Reply::new(Err(TaskFailure::new(
                ErrorCode::UnknownAgent,
                format!("no specialist agent `{agent}` is available"),
            )));
        };
        ask_specialist(&self.ctx, &info, None, agent, question, session, budget).await
    }
}
