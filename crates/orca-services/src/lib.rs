//! # orca-services
//!
//! The service layer: [`PlanningService`] (drafts, builder operations, submit, the human's
//! approval decisions), [`ExecutionService`] (executions and tasks, compare-and-swap on every
//! change), [`DispatchService`] (tasks and read-only questions to specialists),
//! [`hitl::Hitl`] (the port a UI implements), [`OrcaService`] (the relay: every user message
//! goes to the planner), the [`Runner`] that drives an execution to its end, and the
//! [`Worker`] that drives the executions of a shared store beside other workers.
//!
//! Everything here is generic over the storage port ([`orca_store::Store`]) and the agent port
//! ([`orca_core::AgentPort`]) as trait objects: no concrete store or backend is named, and
//! nothing here speaks HTTP. [`Orca`] wires the services together for a binary.
#![forbid(unsafe_code)]

pub mod acceptance;
pub mod approval;
mod budgets;
pub mod changes;
mod checks;
pub mod dispatch;
mod ending;
pub mod error;
pub mod events;
pub mod execution;
pub mod fork;
pub mod hitl;
pub mod integrity;
mod isolated;
pub mod locks;
pub mod orca_service;
pub mod planning;
pub mod policy;
pub mod runner;
pub mod short_ids;
pub mod status;
mod takeover;
pub mod timeline;
pub mod tools;
pub mod transitions;
pub mod worker;

use std::sync::Arc;

use orca_core::{AgentId, AgentPort, Budget, ToolHost};
use orca_store::Store;

pub use dispatch::DispatchService;
pub use error::{Result, ServiceError};
pub use execution::{Claim, ExecutionService, PreparedStart, StartWait};
pub use hitl::{Hitl, NoHuman, ScriptedHitl};
pub use locks::LockHolder;
pub use orca_service::{ApprovalOutcome, OrcaService};
pub use planning::{DraftEdit, PlanningService};
pub use runner::{
    Backoff, ClaimOutcome, FailurePolicy, Observer, Quiet, RunConfig, RunEvent, RunOutcome,
    RunReport, Runner, own_host, this_process,
};
pub use tools::{CallMode, Gate, ProcessSink, StepOwner, ToolContext};
pub use transitions::{AppliedPolicy, StartedAttempt};
pub use worker::{
    ClaimMode, DriveOutcome, Notifications, Worker, WorkerConfig, WorkerEvent, WorkerTally,
};

/// The services wired together over one store, one agent port and one human.
#[derive(Debug, Clone)]
pub struct Orca {
    planning: PlanningService,
    executions: ExecutionService,
    dispatch: DispatchService,
    relay: OrcaService,
    tools: ToolContext,
}

impl Orca {
    /// Wires the services. `workspace` provides the workspace tools (`read_file`…) agents may
    /// be granted; `planner_budget` limits each planner call.
    #[must_use]
    pub fn new(
        store: Arc<dyn Store>,
        agents: Arc<dyn AgentPort>,
        hitl: Arc<dyn Hitl>,
        workspace: Option<Arc<dyn ToolHost>>,
        planner_budget: Budget,
    ) -> Self {
        let known: std::collections::BTreeSet<AgentId> =
            agents.agents().into_iter().map(|a| a.id).collect();
        let planning = PlanningService::new(store.clone(), known);
        let executions = ExecutionService::new(store.clone(), planning.clone());
        let tools = ToolContext {
            store,
            planning: planning.clone(),
            agents,
            hitl,
            workspace,
        };
        Self {
            planning,
            executions,
            dispatch: DispatchService::new(tools.clone()),
            relay: OrcaService::new(tools.clone(), planner_budget),
            tools,
        }
    }

    /// Gives steps with `isolation = "worktree"` their own git worktrees (ADR 0017); `None`
    /// (outside a git repository) runs them in place.
    #[must_use]
    pub fn with_workspaces(
        mut self,
        workspaces: Option<Arc<dyn orca_core::StepWorkspaces>>,
    ) -> Self {
        self.dispatch = self.dispatch.with_workspaces(workspaces);
        self
    }

    /// Decides plans under an approval policy (`None`: one approval by the user's key).
    #[must_use]
    pub fn with_approval_policy(
        mut self,
        policy: Option<Arc<crate::policy::PolicyContext>>,
    ) -> Self {
        let planning = self.planning.clone().with_policy(policy);
        self.executions = self.executions.with_planning(planning.clone());
        self.tools.planning = planning.clone();
        self.dispatch = self.dispatch.with_planning(planning.clone());
        self.relay = self.relay.with_planning(planning.clone());
        self.planning = planning;
        self
    }

    /// Records what each step attempt changes (its diff); `None` records nothing.
    #[must_use]
    pub fn with_changes(mut self, changes: Option<Arc<dyn orca_core::StepChanges>>) -> Self {
        self.dispatch = self.dispatch.with_changes(changes);
        self
    }

    /// Plans: drafts, proposals, approvals.
    #[must_use]
    pub const fn planning(&self) -> &PlanningService {
        &self.planning
    }

    /// Executions and their tasks.
    #[must_use]
    pub const fn executions(&self) -> &ExecutionService {
        &self.executions
    }

    /// Dispatch of one step to its agent.
    #[must_use]
    pub const fn dispatch(&self) -> &DispatchService {
        &self.dispatch
    }

    /// The relay: a person's messages to the planner, the approval loop, replanning.
    #[must_use]
    pub const fn relay(&self) -> &OrcaService {
        &self.relay
    }

    /// What the tools (and the tool gate) need: the store, the agents, the human.
    #[must_use]
    pub const fn tools(&self) -> &ToolContext {
        &self.tools
    }

    /// A runner with this configuration, reporting progress to `observer`.
    #[must_use]
    pub fn runner(&self, config: RunConfig, observer: Arc<dyn runner::Observer>) -> Runner {
        Runner::new(self, config, observer)
    }
}
