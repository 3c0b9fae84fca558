//! The agent port: how the service layer talks to agents, whatever runs them.
//!
//! `orca-services` calls an [`AgentPort`]; `orca-agents` implements it (LLM backends,
//! command-line agents, the `shell` agent, scripted replies) and a test can implement it with a
//! few lines. Tools an agent may call are offered by a [`ToolHost`] the caller passes in, so the
//! grant check and the audit of every tool call happen in one place, on the caller's side.
//!
//! **Cancellation** is by dropping the future: implementations must stop their work when
//! dropped (kill child processes, abort requests).

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::check::{CheckRun, ChecksRequest};
use crate::context::TaskContext;
use crate::id::{AgentId, ExecutionId, PlanId, SessionId};
use crate::ownership::{ProcessGroup, ReapOutcome, StepIdentity};
use crate::plan::Step;
use crate::results::{AgentAnswer, Budget, PlannerResponse, TaskFailure, TaskResult, Usage};
use crate::tool_access::ToolAccess;

/// The role an agent plays; it decides which tools it is offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The relay the user talks to: forwards every message, nothing else.
    Relay,
    /// Researches (read-only), asks, and builds plans with the plan tools.
    Planner,
    /// Carries out steps.
    Specialist,
}

/// What the caller knows about an available agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentInfo {
    /// Its id.
    pub id: AgentId,
    /// Its role.
    pub role: Role,
    /// What it is good at (listed in the planner's prompt).
    pub description: String,
    /// The backend kind (`openai`, `anthropic`, `claude-code`, `shell`, `scripted`…).
    pub backend: String,
    /// The model, if the backend has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Workspace tools its profile grants (`read_file`, `write_file`, `run_command`…).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workspace_tools: Vec<String>,
}

/// A tool as offered to a model: its name, what it does, and the JSON schema of its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// The name the model calls.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// A tool call made by a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// The provider's call id (generated if the provider gave none).
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments.
    pub arguments: serde_json::Value,
}

/// A tool error the model sees as the tool's result (it is not fatal to the agent loop).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// What went wrong, for the model.
    pub message: String,
    /// The call was refused by a confinement rule (a path into orca's records, a hard link…),
    /// not merely failed: the gate audits it as `tool.refused`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
}

impl ToolError {
    /// A tool error with a message.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            refused: false,
        }
    }

    /// A refusal by a confinement rule, with the reason the model reads.
    #[must_use]
    pub fn refused(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            refused: true,
        }
    }
}

/// Offers tools and runs the calls an agent makes.
#[async_trait]
pub trait ToolHost: Send + Sync {
    /// The tools offered, with their schemas.
    fn specs(&self) -> Vec<ToolSpec>;

    /// Runs a call. Refused calls (a tool not granted) and failures come back as
    /// [`ToolError`] for the model to read.
    async fn call(&self, call: &ToolCall) -> Result<serde_json::Value, ToolError>;

    /// Runs a call on behalf of `caller` (the gate of one step's attempt): a tool that starts
    /// processes gives them `caller`'s [`StepIdentity`] and reports their groups to it. By
    /// default the same as [`ToolHost::call`].
    async fn call_for(
        &self,
        call: &ToolCall,
        caller: &dyn ToolHost,
    ) -> Result<serde_json::Value, ToolError> {
        let _ = caller;
        self.call(call).await
    }

    /// What the offered tool `name` may do (by default: the workspace tools' table), `None` if
    /// unknown. The agent loop runs a turn's calls concurrently only when they all only read.
    fn access(&self, name: &str) -> Option<ToolAccess> {
        crate::tool_access::workspace_access(name)
    }

    /// The step attempt these tools serve, if any: its processes get its identity.
    fn step_identity(&self) -> Option<StepIdentity> {
        None
    }

    /// Open file descriptors the attempt's processes inherit: the locks of its resources, so
    /// a lock stays held while any of its processes lives (ADR 0010). By default none.
    fn held_fds(&self) -> Vec<i32> {
        Vec::new()
    }

    /// A process group was started for this caller (the shell step, a `run_command`, a CLI
    /// agent): the caller records it durably so a runner taking over can end it. By default
    /// ignored.
    ///
    /// A shell command (`sh -c`) does not start its work until this returns: what it records
    /// is durable before the step does anything.
    async fn process_started(&self, group: ProcessGroup) {
        let _ = group;
    }

    /// The model answered with text in turn `turn` (1-based) of the conversation these tools
    /// serve, spending `usage` in that turn: the caller may record it (the gate of a step's
    /// attempt writes an `agent.answer` entry, bounded and redacted). By default ignored.
    async fn model_answered(&self, turn: u32, text: &str, usage: &Usage) {
        let _ = (turn, text, usage);
    }

    /// The model answered no text in turn `turn` (1-based): it only called tools, ending the
    /// turn for `finish` (`tool_calls`, `length`…) and spending `usage`. The caller may record
    /// it (the gate of a step's attempt writes an `agent.turn` entry). By default ignored.
    async fn model_turn(&self, turn: u32, finish: &str, usage: &Usage) {
        let _ = (turn, finish, usage);
    }

    /// The agent's own program ran one of its built-in tools (a command-line agent's shell,
    /// edit or search tool — not offered, gated nor run by these tools): the caller may record
    /// it (the gate of a step's attempt writes an `agent.tool` entry, bounded and redacted).
    /// By default ignored.
    async fn agent_tool_used(&self, used: &AgentToolUse) {
        let _ = used;
    }

    /// A check of the attempt these tools serve ran (see [`crate::check`]): the caller may
    /// record it (the gate of a step's attempt writes a `check.passed` or `check.failed`
    /// entry, bounded and redacted). By default ignored.
    async fn check_ran(&self, run: &CheckRun) {
        let _ = run;
    }
}

/// A tool a command-line agent ran itself, as its program reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentToolUse {
    /// The tool as the program names it (`Bash`, `command_execution`, `write`…).
    pub tool: String,
    /// Its input as the program reported it (a command, a path, the changes…).
    pub input: serde_json::Value,
    /// What it returned, or its error, if the program reported it.
    pub output: Option<String>,
    /// Whether it succeeded.
    pub ok: bool,
}

/// A [`ToolHost`] that offers nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTools;

#[async_trait]
impl ToolHost for NoTools {
    fn specs(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    async fn call(&self, call: &ToolCall) -> Result<serde_json::Value, ToolError> {
        Err(ToolError::new(format!(
            "tool `{}` is not available",
            call.name
        )))
    }
}

/// A step to carry out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRequest {
    /// The agent.
    pub agent: AgentId,
    /// The execution.
    pub execution_id: ExecutionId,
    /// The plan.
    pub plan_id: PlanId,
    /// The step, as approved.
    pub step: Step,
    /// This attempt's number (1-based).
    pub attempt: u32,
    /// What the step is told about the plan and earlier work.
    pub context: TaskContext,
    /// Limits for this call.
    pub budget: Budget,
    /// The wall-clock limit of this attempt.
    pub timeout: Option<Duration>,
    /// Where the attempt runs when it is not the project root: its own worktree (ADR 0017).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<std::path::PathBuf>,
}

impl TaskRequest {
    /// Who this attempt is, for its processes' environment.
    #[must_use]
    pub fn identity(&self) -> StepIdentity {
        StepIdentity {
            execution_id: self.execution_id,
            plan_id: self.plan_id,
            step_id: self.step.id.clone(),
            attempt: self.attempt,
        }
    }
}

/// A read-only question to a specialist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionRequest {
    /// The agent.
    pub agent: AgentId,
    /// The question.
    pub question: String,
    /// A session to continue.
    pub session: Option<SessionId>,
    /// Limits for this call.
    pub budget: Budget,
}

/// One user message for the planner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannerRequest {
    /// The message (or, for a replan, the failure report built by the service layer).
    pub message: String,
    /// The plan being worked on: the continuity token between the planner's turns.
    pub plan_id: Option<PlanId>,
    /// A session to continue.
    pub session: Option<SessionId>,
    /// Limits for this call.
    pub budget: Budget,
}

/// What an agent call produced, with what it spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<T> {
    /// The outcome.
    pub outcome: T,
    /// Usage, summed across turns.
    pub usage: Usage,
    /// The session, if the conversation can be continued.
    pub session: Option<SessionId>,
}

impl<T> Reply<T> {
    /// A reply with no usage and no session.
    #[must_use]
    pub fn new(outcome: T) -> Self {
        Self {
            outcome,
            usage: Usage::default(),
            session: None,
        }
    }
}

/// The port to agents. Object-safe; implementations are chosen by the binary.
#[async_trait]
pub trait AgentPort: Send + Sync {
    /// The agents available (built-in and configured).
    fn agents(&self) -> Vec<AgentInfo>;

    /// Carries out a step. Failures of the agent itself are reported as
    /// [`TaskResult::Failure`], never as a panic.
    async fn run_task(&self, request: TaskRequest, tools: &dyn ToolHost) -> Reply<TaskResult>;

    /// Asks a specialist a read-only question.
    async fn ask(
        &self,
        request: QuestionRequest,
        tools: &dyn ToolHost,
    ) -> Reply<Result<AgentAnswer, TaskFailure>>;

    /// Gives the planner a message; it answers or builds a plan with the plan tools.
    async fn plan(&self, request: PlannerRequest, tools: &dyn ToolHost) -> Reply<PlannerResponse>;

    /// Ends process groups a dead runner's attempts recorded (SIGTERM, a grace period,
    /// SIGKILL), checking each leader's start time so a reused pid is never hit; returns what
    /// was found for each, in order. By default nothing can be ended: every group is
    /// [`ReapOutcome::Unreachable`].
    async fn reap(&self, groups: &[ProcessGroup]) -> Vec<ReapOutcome> {
        groups.iter().map(|_| ReapOutcome::Unreachable).collect()
    }

    /// Runs `request`'s checks in order, each `sh -c` under the same sandbox and step
    /// environment a step's command gets (never more), in `request.workdir` or the project;
    /// stops at the first that does not pass and returns the runs so far. Processes are started
    /// for `tools` (their groups recorded, their runs reported with [`ToolHost::check_ran`]).
    ///
    /// By default no check can run: each comes back [`CheckVerdict::NotRun`](crate::CheckVerdict)
    /// (a port that cannot run commands fails closed: its work never passes unchecked).
    async fn run_checks(&self, request: &ChecksRequest, tools: &dyn ToolHost) -> Vec<CheckRun> {
        let _ = tools;
        request
            .checks
            .first()
            .map(|c| CheckRun::not_run(c, "this agent port cannot run checks"))
            .into_iter()
            .collect()
    }

    /// Waits until the processes of calls that were dropped (cancelled, timed out) are gone —
    /// their graceful termination runs in the background. A runner calls it before it releases
    /// the locks those calls held. By default there is nothing to wait for.
    async fn settle(&self) {}
}
