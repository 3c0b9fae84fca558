//! `DispatchService`: sends a task or a read-only question to a specialist, through the gate
//! that grants its tools.

use orca_core::{
    AgentAnswer, AgentId, AgentInfo, ErrorCode, Reply, Role, SessionId, TaskFailure, TaskRequest,
    TaskResult,
};
use std::sync::Arc;

use orca_core::{StepChanges, StepWorkspaces};
use tracing::instrument;

use crate::tools::{
    AuditScope, CallMode, Gate, ProcessSink, StepOwner, ToolContext, ask_specialist,
};

/// Dispatches work to agents.
#[derive(Debug, Clone)]
pub struct DispatchService {
    ctx: ToolContext,
    /// Worktrees for isolated steps, if the project is in a git repository (ADR 0017).
    workspaces: Option<Arc<dyn StepWorkspaces>>,
    /// Records what each attempt changed (its `step.changes` entry), if the binary wires it.
    changes: Option<Arc<dyn StepChanges>>,
    /// In-place attempts of this process, to say when one's diff may hold another's changes.
    in_place: Arc<crate::changes::InPlace>,
}

impl DispatchService {
    /// The same service deciding plans with `planning` (its approval policy).
    #[must_use]
    pub(crate) fn with_planning(mut self, planning: crate::planning::PlanningService) -> Self {
        self.ctx.planning = planning;
        self
    }

    /// A dispatcher over the tool context (agents, hitl, planning, store).
    #[must_use]
    pub fn new(ctx: ToolContext) -> Self {
        Self {
            ctx,
            workspaces: None,
            changes: None,
            in_place: Arc::new(crate::changes::InPlace::default()),
        }
    }

    /// Gives isolated steps their own worktrees (builder style).
    #[must_use]
    pub fn with_workspaces(mut self, workspaces: Option<Arc<dyn StepWorkspaces>>) -> Self {
        self.workspaces = workspaces;
        self
    }

    /// Records what each attempt changes (builder style).
    #[must_use]
    pub fn with_changes(mut self, changes: Option<Arc<dyn StepChanges>>) -> Self {
        self.changes = changes;
        self
    }

    /// The recorder of what attempts change, if any.
    #[must_use]
    pub fn changes(&self) -> Option<&Arc<dyn StepChanges>> {
        self.changes.as_ref()
    }

    /// The worktrees of isolated steps, if any.
    #[must_use]
    pub fn workspaces(&self) -> Option<&Arc<dyn StepWorkspaces>> {
        self.workspaces.as_ref()
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
    #[instrument(skip(self, request, scope), fields(agent = %request.agent, step = %request.step.id, attempt = request.attempt))]
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
        mut request: TaskRequest,
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
        // Hook (ADR 0017): an isolated step runs in a fresh worktree of its own.
        let isolated = self
            .workspaces
            .as_ref()
            .filter(|_| crate::isolated::wanted(&request));
        let ctx = match isolated {
            Some(ws) => match crate::isolated::prepare(ws, &self.ctx, &mut request).await {
                Ok(ctx) => ctx,
                Err(failure) => return Reply::new(TaskResult::Failure(failure)),
            },
            None => self.ctx.clone(),
        };
        let mut gate = Gate::new(ctx, &info, CallMode::Task, scope);
        if let Some(sink) = sink {
            gate = gate.for_step(StepOwner {
                identity: request.identity(),
                sink,
                held_fds,
            });
        }
        let workdir = isolated.and(request.workdir.clone());
        let before = match &self.changes {
            Some(c) => {
                crate::changes::before(&**c, &self.in_place, &request, workdir.as_deref()).await
            }
            None => None,
        };
        let reply = self.ctx.agents.run_task(request.clone(), &gate).await;
        if let (Some(c), Some(before)) = (&self.changes, before) {
            crate::changes::record(
                &**c,
                &self.in_place,
                &gate,
                &request,
                workdir.as_deref(),
                before,
            )
            .await;
        }
        // A success counts once the step's checks pass in its workspace, before it is merged.
        let reply = crate::checks::judge_step(&self.ctx, &request, &gate, reply).await;
        match isolated {
            // Hook (ADR 0017): a success counts once it is merged.
            Some(ws) => crate::isolated::integrate(ws, &request, reply).await,
            None => reply,
        }
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
