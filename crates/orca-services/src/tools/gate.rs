//! [`Gate`]: the one place every tool call is checked against the grants, dispatched through
//! the [table](super::table) and audited (with its result, and the model's answers between
//! calls: [`transcript`]); and what a gate needs ([`ToolContext`], the audit
//! scope, the step attempt it serves).

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use orca_core::tool_access::workspace_access;
use orca_core::{
    AgentId, AgentInfo, AgentPort, AuditKind, ToolAccess, ToolCall, ToolError, ToolHost, ToolSpec,
    Usage,
};
use orca_store::audit::NewAuditEntry;
use orca_store::{AuditLogId, Store};
use serde_json::Value;
use tracing::{debug, warn};

use super::grants::{CallMode, grants};
use super::plan_log::PlanTranscript;
use super::table::{TABLE, ToolDef, find};
use super::transcript;
use crate::hitl::Hitl;
use crate::planning::PlanningService;

/// Where a gate writes its audit entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditScope {
    /// The log.
    pub log: AuditLogId,
    /// The entry tool calls hang under (the agent call).
    pub parent: Option<u64>,
}

/// What the tool handlers need.
#[derive(Clone)]
pub struct ToolContext {
    /// The store (for audit and queries).
    pub store: Arc<dyn Store>,
    /// Plans.
    pub planning: PlanningService,
    /// Agents (for `orca_ask_agent`).
    pub agents: Arc<dyn AgentPort>,
    /// The human (for `orca_ask_user`).
    pub hitl: Arc<dyn Hitl>,
    /// Workspace tools (`read_file`…), if the binary provides them.
    pub workspace: Option<Arc<dyn ToolHost>>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext").finish_non_exhaustive()
    }
}

/// Receives the process groups a step's attempt starts, to record them durably; it answers on
/// the sender once the record is written (a shell command waits for that before it starts).
pub type ProcessSink =
    Arc<dyn Fn(orca_core::ProcessGroup, tokio::sync::oneshot::Sender<()>) + Send + Sync>;

/// The attempt a gate serves: its identity (for its processes' environment) and where the
/// process groups it starts are reported.
#[derive(Clone)]
pub struct StepOwner {
    /// Who the attempt is.
    pub identity: orca_core::StepIdentity,
    /// Told every process group the attempt starts.
    pub sink: ProcessSink,
    /// Descriptors of the attempt's resource locks, inherited by its processes.
    pub held_fds: Vec<i32>,
}

impl std::fmt::Debug for StepOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepOwner")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// The one place tool calls are checked and audited. Implements [`ToolHost`] for one agent call.
pub struct Gate {
    pub(super) ctx: ToolContext,
    pub(super) agent: AgentId,
    granted: BTreeSet<String>,
    pub(super) scope: Option<AuditScope>,
    /// How deep in nested `orca_ask_agent` questions this call is.
    pub(super) depth: u8,
    step: Option<StepOwner>,
    /// A planning call with no scope of its own: its conversation goes to its plan's log.
    plan_log: Option<PlanTranscript>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("agent", &self.agent)
            .field("granted", &self.granted)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// A gate for one call of `info`'s agent in `mode`.
    #[must_use]
    pub fn new(
        ctx: ToolContext,
        info: &AgentInfo,
        mode: CallMode,
        scope: Option<AuditScope>,
    ) -> Self {
        let mut granted = grants(info, mode);
        if !ctx.hitl.answers_agents() {
            granted.remove(super::table::names::ASK_USER);
        }
        Self {
            ctx,
            agent: info.id.clone(),
            granted,
            scope,
            depth: 0,
            step: None,
            plan_log: None,
        }
    }

    /// A planning call's gate that records the conversation in the log of `plan` (a revision,
    /// a replan), or of the first plan one of its tools names (a new request): see
    /// [`super::plan_log`]. Has no effect on a gate with a scope of its own.
    #[must_use]
    pub fn recording_planning(mut self, plan: Option<orca_core::PlanId>) -> Self {
        if self.scope.is_none() {
            self.plan_log = Some(PlanTranscript::new(plan));
        }
        self
    }

    /// What a planning conversation kept for a plan it never made (see [`PlanTranscript`]),
    /// taken once it ended.
    #[must_use]
    pub fn unbound_transcript(&self) -> Vec<NewAuditEntry> {
        self.plan_log
            .as_ref()
            .map(PlanTranscript::unbound)
            .unwrap_or_default()
    }

    /// The gate of one step attempt: processes get its identity, their groups go to its sink.
    #[must_use]
    pub fn for_step(mut self, owner: StepOwner) -> Self {
        self.step = Some(owner);
        self
    }

    /// The granted tool names.
    #[must_use]
    pub const fn granted(&self) -> &BTreeSet<String> {
        &self.granted
    }

    /// What a step attempt changed (`step.changes`), under the attempt.
    pub(crate) async fn record_changes(&self, data: Value) {
        self.audit(AuditKind::StepChanges, data).await;
    }

    async fn audit(&self, kind: AuditKind, data: Value) {
        let entry = NewAuditEntry::new(kind, data);
        let (log, entry) = match (self.scope, &self.plan_log) {
            (Some(scope), _) => (scope.log, entry.with_parent(scope.parent)),
            (None, Some(plan_log)) => match plan_log.route(entry) {
                Some(routed) => routed,
                None => return,
            },
            (None, None) => return,
        };
        if let Err(e) = self.ctx.store.append(log, entry).await {
            warn!(error = %e, "cannot write the audit entry of a tool call");
        }
    }

    /// A planning conversation's tool returned `result`: if it names the plan, what was kept
    /// until then is written to that plan's log.
    async fn planning_bound(&self, result: &Value) {
        let Some(plan_log) = &self.plan_log else {
            return;
        };
        let (kept, dropped) = plan_log.tool_answered(result);
        if dropped > 0 {
            warn!(
                dropped,
                "a planning conversation's first entries were not all kept"
            );
        }
        for entry in kept {
            let Some((log, entry)) = plan_log.route(entry) else {
                continue;
            };
            if let Err(e) = self.ctx.store.append(log, entry).await {
                warn!(error = %e, "cannot write the audit entry of a tool call");
            }
        }
    }

    async fn dispatch(&self, call: &ToolCall) -> Result<Value, ToolError> {
        match find(&call.name) {
            Some(tool) => (tool.handler)(self, &call.arguments).await,
            None => match &self.ctx.workspace {
                Some(ws) => ws.call_for(call, self).await,
                None => Err(ToolError::new(format!(
                    "tool `{}` is not available",
                    call.name
                ))),
            },
        }
    }
}

#[async_trait]
impl ToolHost for Gate {
    fn specs(&self) -> Vec<ToolSpec> {
        let mut out: Vec<ToolSpec> = TABLE
            .iter()
            .filter(|d| self.granted.contains(d.name))
            .map(ToolDef::spec)
            .collect();
        if let Some(ws) = &self.ctx.workspace {
            out.extend(
                ws.specs()
                    .into_iter()
                    .filter(|s| self.granted.contains(&s.name)),
            );
        }
        out
    }

    fn access(&self, name: &str) -> Option<ToolAccess> {
        match (find(name), &self.ctx.workspace) {
            (Some(tool), _) => Some(tool.access),
            (None, Some(ws)) => ws.access(name),
            (None, None) => workspace_access(name),
        }
    }

    fn step_identity(&self) -> Option<orca_core::StepIdentity> {
        self.step.as_ref().map(|s| s.identity.clone())
    }

    fn held_fds(&self) -> Vec<i32> {
        self.step
            .as_ref()
            .map(|s| s.held_fds.clone())
            .unwrap_or_default()
    }

    async fn process_started(&self, group: orca_core::ProcessGroup) {
        if let Some(step) = &self.step {
            let (recorded, wait) = tokio::sync::oneshot::channel();
            (step.sink)(group, recorded);
            // An answer, or the runner let go of the attempt (the command then never starts).
            let _ = wait.await;
        }
    }

    async fn call(&self, call: &ToolCall) -> Result<Value, ToolError> {
        if !self.granted.contains(&call.name) {
            warn!(agent = %self.agent, tool = %call.name, "refused a tool call the role was not granted");
            self.audit(
                AuditKind::ToolRefused,
                transcript::refused_data(&self.agent, call, None),
            )
            .await;
            // The fix is in the message: the tools it may call, and submit_result to finish.
            let given: Vec<&str> = self.granted.iter().map(String::as_str).collect();
            return Err(ToolError::new(format!(
                "tool `{}` is not granted to agent `{}`; do not call it again: call one of {} or finish with `submit_result`",
                call.name,
                self.agent,
                given.join(", ")
            )));
        }
        debug!(agent = %self.agent, tool = %call.name, "tool call");
        let result = self.dispatch(call).await;
        // Only the plan this conversation created binds it (a tool that merely names another
        // plan — reading or submitting it — must not send the conversation to that plan's log).
        if let Ok(value) = &result
            && call.name == super::table::names::PLAN_CREATE_DRAFT
        {
            self.planning_bound(value).await;
        }
        if let Err(e) = &result
            && e.refused
        {
            // A confinement rule refused it (a path into orca's records, a hard link…).
            warn!(agent = %self.agent, tool = %call.name, reason = %e.message, "refused a tool call");
            self.audit(
                AuditKind::ToolRefused,
                transcript::refused_data(&self.agent, call, Some(&e.message)),
            )
            .await;
            return result;
        }
        self.audit(
            AuditKind::ToolCall,
            transcript::tool_call_data(&self.agent, call, &result),
        )
        .await;
        result
    }

    async fn model_answered(&self, turn: u32, text: &str, usage: &Usage) {
        self.audit(
            AuditKind::AgentAnswer,
            transcript::answer_data(&self.agent, turn, text, usage),
        )
        .await;
    }

    async fn model_turn(&self, turn: u32, finish: &str, usage: &Usage) {
        self.audit(
            AuditKind::AgentTurn,
            serde_json::json!({
                "agent": self.agent,
                "turn": turn,
                "finish_reason": finish,
                "usage": usage,
            }),
        )
        .await;
    }

    async fn agent_tool_used(&self, used: &orca_core::AgentToolUse) {
        self.audit(
            AuditKind::AgentToolUsed,
            transcript::agent_tool_data(&self.agent, used),
        )
        .await;
    }

    async fn check_ran(&self, run: &orca_core::CheckRun) {
        let kind = if run.passed() {
            AuditKind::CheckPassed
        } else {
            AuditKind::CheckFailed
        };
        self.audit(kind, crate::checks::entry_data(run)).await;
    }
}
