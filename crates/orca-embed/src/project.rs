//! A project on the file store, with the embedder's agents.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use orca_agents::{Agents, LoopSettings, Profile, WorkspaceTools};
use orca_core::{
    AgentPort, Budget, ExecutionId, PlanContent, PlanId, StepId, TaskStatus, ToolHost,
};
use orca_services::{ExecutionService, NoHuman, Observer, Orca, Quiet, RunConfig, RunOutcome};
use orca_store::{AuditStore as _, FileStore, VerifyReport};
use tokio_util::sync::CancellationToken;

use crate::Error;

/// How a [`Project`] is set up; [`ProjectBuilder::open`] opens it.
#[derive(Debug)]
pub struct ProjectBuilder {
    root: PathBuf,
    agents: Vec<Profile>,
    observer: Reporter,
    loop_settings: LoopSettings,
}

/// Where progress goes (an [`Observer`] need not be `Debug`).
#[derive(Clone)]
struct Reporter(Arc<dyn Observer>);

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

impl ProjectBuilder {
    /// Adds an agent (next to the built-in `shell` agent, which is always there).
    #[must_use]
    pub fn agent(mut self, profile: Profile) -> Self {
        self.agents.push(profile);
        self
    }

    /// Reports progress (steps started, finished, retried) to `observer` (default: nothing).
    #[must_use]
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Reporter(observer);
        self
    }

    /// How model-backed agents loop: turns, retries, repairs (default: orca's defaults).
    #[must_use]
    pub fn loop_settings(mut self, settings: LoopSettings) -> Self {
        self.loop_settings = settings;
        self
    }

    /// Opens the project: creates the directory and its `.orca/` if needed.
    ///
    /// # Errors
    ///
    /// The directory cannot be created, the store cannot be opened, or an agent profile is
    /// not usable (a duplicate id, a bad backend).
    pub fn open(self) -> Result<Project, Error> {
        let io = |source| Error::Io {
            path: self.root.display().to_string(),
            source,
        };
        std::fs::create_dir_all(&self.root).map_err(io)?;
        let granted: Vec<String> = self
            .agents
            .iter()
            .flat_map(|p| p.workspace_tools.iter().cloned())
            .collect();
        let agents: Arc<dyn AgentPort> =
            Arc::new(Agents::new(&self.root, self.agents, self.loop_settings)?);
        let workspace: Arc<dyn ToolHost> =
            Arc::new(WorkspaceTools::new(&self.root, &granted).map_err(io)?);
        let store = Arc::new(FileStore::open(&self.root)?);
        let orca = Orca::new(
            store.clone(),
            agents,
            Arc::new(NoHuman),
            Some(workspace),
            Budget::UNLIMITED,
        );
        Ok(Project {
            root: self.root,
            store,
            orca,
            observer: self.observer,
        })
    }
}

/// One step's end, as [`Project::run`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepResult {
    step: StepId,
    status: TaskStatus,
    summary: Option<String>,
}

impl StepResult {
    /// The step.
    #[must_use]
    pub const fn step(&self) -> &StepId {
        &self.step
    }

    /// How its task ended (`completed`, `failed`, `skipped`…).
    #[must_use]
    pub const fn status(&self) -> TaskStatus {
        self.status
    }

    /// What its agent reported, when it succeeded.
    #[must_use]
    pub fn summary(&self) -> Option<&str> {
        self.summary.as_deref()
    }
}

/// How a run of a plan ended: its outcome, each step, and whether its audit log verifies.
#[derive(Debug, Clone)]
pub struct Finished {
    execution: ExecutionId,
    outcome: RunOutcome,
    steps: Vec<StepResult>,
    audit: VerifyReport,
}

impl Finished {
    /// The execution (`orca exec show` takes it).
    #[must_use]
    pub const fn execution(&self) -> ExecutionId {
        self.execution
    }

    /// How the run ended.
    #[must_use]
    pub const fn outcome(&self) -> &RunOutcome {
        &self.outcome
    }

    /// Whether every step completed.
    #[must_use]
    pub fn completed(&self) -> bool {
        self.outcome == RunOutcome::Completed
    }

    /// Each step, in plan order.
    #[must_use]
    pub fn steps(&self) -> &[StepResult] {
        &self.steps
    }

    /// Whether the execution's audit log verified after the run (every entry, and its seal).
    #[must_use]
    pub const fn verified(&self) -> bool {
        matches!(self.audit, VerifyReport::Intact { .. })
    }

    /// The audit log's verification in full.
    #[must_use]
    pub const fn audit(&self) -> &VerifyReport {
        &self.audit
    }
}

/// A project on the file store, with the embedder's agents.
#[derive(Debug)]
pub struct Project {
    root: PathBuf,
    store: Arc<FileStore>,
    orca: Orca,
    observer: Reporter,
}

impl Project {
    /// Sets up a project in `root` (its records go under `root/.orca/`).
    #[must_use]
    pub fn builder(root: impl Into<PathBuf>) -> ProjectBuilder {
        ProjectBuilder {
            root: root.into(),
            agents: Vec::new(),
            observer: Reporter(Arc::new(Quiet)),
            loop_settings: LoopSettings::default(),
        }
    }

    /// The project's directory.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Records `content` as a proposal waiting for approval.
    ///
    /// # Errors
    ///
    /// The plan does not validate (every problem named), or the store failed.
    pub async fn propose(&self, content: PlanContent) -> Result<PlanId, Error> {
        let proposal = self.orca.planning().create_proposal(content, None).await?;
        Ok(proposal.id())
    }

    /// Approves the proposal `plan` as `approver` (recorded in its audit log). This is the
    /// human's decision: your program makes it, never a model.
    ///
    /// # Errors
    ///
    /// No such plan, or it is not a proposal.
    pub async fn approve(&self, plan: PlanId, approver: &str) -> Result<(), Error> {
        self.orca.planning().approve(plan, approver, None).await?;
        Ok(())
    }

    /// Runs the approved `plan` once, to its end, in this process: a new execution, each
    /// ready step dispatched to its agent, retried by the plan's rules; a step that finally
    /// fails ends the run (there is no person to ask; use [`Project::services`] for that).
    ///
    /// # Errors
    ///
    /// The plan is not approved, or the store failed.
    pub async fn run(&self, plan: PlanId) -> Result<Finished, Error> {
        let (_, execution) = self.orca.executions().create(plan).await?;
        let report = self
            .orca
            .runner(RunConfig::for_this_process(), self.observer.0.clone())
            .run(execution, CancellationToken::new())
            .await?;
        let snapshot = self.orca.executions().get(execution).await?;
        let steps = snapshot
            .tasks
            .iter()
            .map(|t| StepResult {
                step: t.value.step_id().clone(),
                status: t.value.status(),
                summary: t.value.success().map(|s| s.summary.clone()),
            })
            .collect();
        let audit = self
            .store
            .verify(ExecutionService::log(plan, execution))
            .await?;
        Ok(Finished {
            execution,
            outcome: report.outcome,
            steps,
            audit,
        })
    }

    /// Every service, for what the three calls above do not cover (drafts, decisions,
    /// resuming, replanning).
    #[must_use]
    pub const fn services(&self) -> &Orca {
        &self.orca
    }
}
