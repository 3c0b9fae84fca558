//! The tool surface offered to agents, the role grants, and the one place where every tool
//! call is checked and audited: [`Gate`].
//!
//! There is no tool that approves a plan or starts an execution: those belong to the human and
//! the service layer.

use orca_core::AuditKind;
use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use orca_core::{
    AgentId, AgentInfo, AgentPort, Budget, ExecutionId, PlanId, QuestionRequest, Role, SessionId,
    Step, StepId, StepPatch, ToolCall, ToolError, ToolHost, ToolSpec,
};
use orca_store::audit::NewAuditEntry;
use orca_store::{AuditLogId, Store};
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::{debug, warn};

use crate::hitl::Hitl;
use crate::planning::{DraftEdit, PlanningService};

/// Tool names (as in the seeds).
pub mod names {
    /// Relay → orchestration.
    pub const INVOKE: &str = "orca_invoke";
    /// A question to the human.
    pub const ASK_USER: &str = "orca_ask_user";
    /// A read-only question to a specialist.
    pub const ASK_AGENT: &str = "orca_ask_agent";
    /// List plans.
    pub const PLANS_LIST: &str = "orca_plans_list";
    /// Get a plan.
    pub const PLANS_GET: &str = "orca_plans_get";
    /// Create a draft.
    pub const PLAN_CREATE_DRAFT: &str = "orca_plan_create_draft";
    /// Set a draft's goal and summary.
    pub const PLAN_SET_GOAL: &str = "orca_plan_set_goal";
    /// Set a draft's assumptions.
    pub const PLAN_SET_ASSUMPTIONS: &str = "orca_plan_set_assumptions";
    /// Set a draft's risks.
    pub const PLAN_SET_RISKS: &str = "orca_plan_set_risks";
    /// Set a draft's verification.
    pub const PLAN_SET_VERIFICATION: &str = "orca_plan_set_verification";
    /// Add a step.
    pub const PLAN_ADD_STEP: &str = "orca_plan_add_step";
    /// Update a step.
    pub const PLAN_UPDATE_STEP: &str = "orca_plan_update_step";
    /// Remove a step.
    pub const PLAN_REMOVE_STEP: &str = "orca_plan_remove_step";
    /// Submit a draft.
    pub const PLAN_SUBMIT: &str = "orca_plan_submit";
    /// List executions.
    pub const EXECUTIONS_LIST: &str = "orca_executions_list";
    /// Get an execution.
    pub const EXECUTION_GET: &str = "orca_execution_get";
}

/// Workspace tools that change files or run commands: never offered for read-only questions.
pub const WRITE_TOOLS: &[&str] = &["write_file", "edit_file", "run_command"];
/// Workspace tools that only read.
pub const READ_TOOLS: &[&str] = &["read_file", "list_files", "search_text"];

fn strings_schema(what: &str) -> Value {
    json!({ "type": "array", "items": { "type": "string" }, "minItems": 1, "description": what })
}

fn plan_id_schema() -> Value {
    json!({ "type": "string", "description": "the plan id (plan_…) returned by orca_plan_create_draft" })
}

fn step_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["id", "agent", "description"],
        "properties": {
            "id": { "type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$" },
            "agent": { "type": "string", "description": "an available agent id" },
            "description": { "type": "string" },
            "command": { "type": "string", "description": "for the shell agent: the command to run" },
            "depends_on": { "type": "array", "items": { "type": "string" },
                "description": "omit: after the previous step; []: no dependencies; a list: these steps" },
            "locks": { "type": "array", "items": { "type": "string" },
                "description": "named resources; steps sharing a lock never run at once" },
            "writes": { "type": "array", "items": { "type": "string" },
                "description": "paths this step writes, relative to the project (`*`, `**` allowed), e.g. [\"src/api/**\", \"Cargo.toml\"]; steps that can run at once may not overlap unless they share a lock" },
            "assumptions": { "type": "array", "items": { "type": "string" } },
            "risks": { "type": "array", "items": { "type": "string" } },
            "verification": { "type": "array", "items": { "type": "string" } },
            "max_attempts": { "type": "integer", "minimum": 1 },
            "timeout_secs": { "type": "integer", "minimum": 1 },
            "env": { "type": "array", "items": { "type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$" },
                "description": "NAMES of environment variables the step needs (e.g. GITHUB_TOKEN), never values; the human approves them with the plan" }
        }
    })
}

fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters,
    }
}

/// Every orca tool with its schema.
#[must_use]
pub fn definitions() -> Vec<ToolSpec> {
    use names::*;
    let obj = |props: Value, required: &[&str]| json!({ "type": "object", "additionalProperties": false, "required": required, "properties": props });
    vec![
        spec(
            INVOKE,
            "Send the user's message to the orchestration system (the planner) and return its reply.",
            obj(json!({ "message": { "type": "string" } }), &["message"]),
        ),
        spec(
            ASK_USER,
            "Ask the human a question and wait for the answer. Use sparingly, for decisions only they can make.",
            obj(json!({ "question": { "type": "string" } }), &["question"]),
        ),
        spec(
            ASK_AGENT,
            "Ask a specialist a read-only question (it cannot change files). Pass session_id to continue a conversation.",
            obj(
                json!({ "agent": { "type": "string" }, "question": { "type": "string" }, "session_id": { "type": "string" } }),
                &["agent", "question"],
            ),
        ),
        spec(
            PLANS_LIST,
            "List existing plans, newest first (id, goal, stage, steps, executions).",
            obj(json!({}), &[]),
        ),
        spec(
            PLANS_GET,
            "Get a plan's full content and stage.",
            obj(json!({ "plan_id": plan_id_schema() }), &["plan_id"]),
        ),
        spec(
            PLAN_CREATE_DRAFT,
            "Create a new draft plan; returns its plan_id, which every other plan tool takes.",
            obj(
                json!({ "goal": { "type": "string" }, "summary": { "type": "string" } }),
                &["goal"],
            ),
        ),
        spec(
            PLAN_SET_GOAL,
            "Set a draft's goal and (optionally) summary.",
            obj(
                json!({ "plan_id": plan_id_schema(), "goal": { "type": "string" }, "summary": { "type": "string" } }),
                &["plan_id", "goal"],
            ),
        ),
        spec(
            PLAN_SET_ASSUMPTIONS,
            "Replace a draft's assumptions (at least one).",
            obj(
                json!({ "plan_id": plan_id_schema(), "items": strings_schema("the assumptions") }),
                &["plan_id", "items"],
            ),
        ),
        spec(
            PLAN_SET_RISKS,
            "Replace a draft's risks (at least one).",
            obj(
                json!({ "plan_id": plan_id_schema(), "items": strings_schema("the risks") }),
                &["plan_id", "items"],
            ),
        ),
        spec(
            PLAN_SET_VERIFICATION,
            "Replace how the result will be verified (at least one).",
            obj(
                json!({ "plan_id": plan_id_schema(), "items": strings_schema("the verification steps") }),
                &["plan_id", "items"],
            ),
        ),
        spec(
            PLAN_ADD_STEP,
            "Add a step to a draft, at a 0-based position or at the end.",
            obj(
                json!({ "plan_id": plan_id_schema(), "step": step_schema(), "position": { "type": "integer", "minimum": 0 } }),
                &["plan_id", "step"],
            ),
        ),
        spec(
            PLAN_UPDATE_STEP,
            "Change fields of a draft's step; fields left out stay as they are.",
            obj(
                json!({ "plan_id": plan_id_schema(), "step_id": { "type": "string" }, "changes": { "type": "object" } }),
                &["plan_id", "step_id", "changes"],
            ),
        ),
        spec(
            PLAN_REMOVE_STEP,
            "Remove a step from a draft.",
            obj(
                json!({ "plan_id": plan_id_schema(), "step_id": { "type": "string" } }),
                &["plan_id", "step_id"],
            ),
        ),
        spec(
            PLAN_SUBMIT,
            "Validate the draft and submit it for the human's approval. On problems, every problem is returned and the draft stays editable.",
            obj(json!({ "plan_id": plan_id_schema() }), &["plan_id"]),
        ),
        spec(
            EXECUTIONS_LIST,
            "List executions (optionally of one plan), newest first.",
            obj(json!({ "plan_id": plan_id_schema() }), &[]),
        ),
        spec(
            EXECUTION_GET,
            "Get an execution with its tasks' statuses and summaries.",
            obj(
                json!({ "execution_id": { "type": "string" } }),
                &["execution_id"],
            ),
        ),
    ]
}

/// What an agent call is for; it narrows the grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallMode {
    /// The relay forwarding a message.
    Relay,
    /// The planner handling a message.
    Planning,
    /// A specialist carrying out a step.
    Task,
    /// A specialist answering a read-only question.
    Question,
}

/// The tools an agent is granted for a call: the role's orca tools plus the workspace tools its
/// profile grants, minus the write tools for read-only questions.
#[must_use]
pub fn grants(info: &AgentInfo, mode: CallMode) -> BTreeSet<String> {
    use names::*;
    let mut out: BTreeSet<String> = BTreeSet::new();
    let mut add = |names: &[&str]| out.extend(names.iter().map(|s| (*s).to_owned()));
    match (info.role, mode) {
        (Role::Relay, _) | (_, CallMode::Relay) => add(&[INVOKE]),
        (Role::Planner, _) | (_, CallMode::Planning) => {
            add(&[
                ASK_AGENT,
                ASK_USER,
                PLANS_LIST,
                PLANS_GET,
                EXECUTIONS_LIST,
                EXECUTION_GET,
            ]);
            add(&[
                PLAN_CREATE_DRAFT,
                PLAN_SET_GOAL,
                PLAN_SET_ASSUMPTIONS,
                PLAN_SET_RISKS,
                PLAN_SET_VERIFICATION,
                PLAN_ADD_STEP,
                PLAN_UPDATE_STEP,
                PLAN_REMOVE_STEP,
                PLAN_SUBMIT,
            ]);
            // Research is read-only, whatever the profile says.
            for t in &info.workspace_tools {
                if READ_TOOLS.contains(&t.as_str()) {
                    out.insert(t.clone());
                }
            }
        }
        (Role::Specialist, CallMode::Task) => {
            add(&[ASK_AGENT, ASK_USER, PLANS_GET]);
            out.extend(info.workspace_tools.iter().cloned());
        }
        (Role::Specialist, CallMode::Question) => {
            add(&[PLANS_GET]);
            out.extend(
                info.workspace_tools
                    .iter()
                    .filter(|t| !WRITE_TOOLS.contains(&t.as_str()))
                    .cloned(),
            );
        }
    }
    out
}

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
    ctx: ToolContext,
    agent: AgentId,
    granted: BTreeSet<String>,
    scope: Option<AuditScope>,
    depth: u8,
    step: Option<StepOwner>,
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

/// How deep `orca_ask_agent` may nest.
const MAX_DEPTH: u8 = 2;

impl Gate {
    /// A gate for one call of `info`'s agent in `mode`.
    #[must_use]
    pub fn new(
        ctx: ToolContext,
        info: &AgentInfo,
        mode: CallMode,
        scope: Option<AuditScope>,
    ) -> Self {
        Self {
            ctx,
            agent: info.id.clone(),
            granted: grants(info, mode),
            scope,
            depth: 0,
            step: None,
        }
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

    async fn audit(&self, kind: AuditKind, data: Value) {
        if let Some(scope) = self.scope
            && let Err(e) = self
                .ctx
                .store
                .append(
                    scope.log,
                    NewAuditEntry::new(kind, data).with_parent(scope.parent),
                )
                .await
        {
            warn!(error = %e, "cannot write the audit entry of a tool call");
        }
    }

    async fn dispatch(&self, call: &ToolCall) -> Result<Value, ToolError> {
        use names::*;
        let args = &call.arguments;
        let p = &self.ctx.planning;
        match call.name.as_str() {
            PLANS_LIST => {
                let listing = p.list().await.map_err(tool_err)?;
                Ok(json!(listing.items))
            }
            PLANS_GET => {
                let id: PlanId = arg(args, "plan_id")?;
                Ok(json!(p.plan(id).await.map_err(tool_err)?))
            }
            PLAN_CREATE_DRAFT => {
                let goal: String = arg(args, "goal")?;
                let summary: Option<String> = opt_arg(args, "summary")?;
                let draft = p.create_draft(Some(goal), None).await.map_err(tool_err)?;
                if summary.is_some() {
                    p.edit(draft.id(), DraftEdit::SetSummary(summary))
                        .await
                        .map_err(tool_err)?;
                }
                Ok(json!({ "plan_id": draft.id(), "stage": "draft" }))
            }
            PLAN_SET_GOAL => {
                let id: PlanId = arg(args, "plan_id")?;
                p.edit(id, DraftEdit::SetGoal(arg(args, "goal")?))
                    .await
                    .map_err(tool_err)?;
                if let Some(summary) = opt_arg::<String>(args, "summary")? {
                    p.edit(id, DraftEdit::SetSummary(Some(summary)))
                        .await
                        .map_err(tool_err)?;
                }
                Ok(json!({ "ok": true }))
            }
            PLAN_SET_ASSUMPTIONS | PLAN_SET_RISKS | PLAN_SET_VERIFICATION => {
                let id: PlanId = arg(args, "plan_id")?;
                let items: Vec<String> = arg(args, "items")?;
                let edit = match call.name.as_str() {
                    PLAN_SET_ASSUMPTIONS => DraftEdit::SetAssumptions(items),
                    PLAN_SET_RISKS => DraftEdit::SetRisks(items),
                    _ => DraftEdit::SetVerification(items),
                };
                p.edit(id, edit).await.map_err(tool_err)?;
                Ok(json!({ "ok": true }))
            }
            PLAN_ADD_STEP => {
                let id: PlanId = arg(args, "plan_id")?;
                let step: Step = arg(args, "step")?;
                let position: Option<usize> = opt_arg(args, "position")?;
                let draft = p
                    .edit(
                        id,
                        DraftEdit::AddStep {
                            step: Box::new(step),
                            position,
                        },
                    )
                    .await
                    .map_err(tool_err)?;
                Ok(json!({ "ok": true, "steps": draft.content().steps.len() }))
            }
            PLAN_UPDATE_STEP => {
                let id: PlanId = arg(args, "plan_id")?;
                let step: StepId = arg(args, "step_id")?;
                let patch: StepPatch = arg(args, "changes")?;
                p.edit(
                    id,
                    DraftEdit::UpdateStep {
                        id: step,
                        patch: Box::new(patch),
                    },
                )
                .await
                .map_err(tool_err)?;
                Ok(json!({ "ok": true }))
            }
            PLAN_REMOVE_STEP => {
                let id: PlanId = arg(args, "plan_id")?;
                let step: StepId = arg(args, "step_id")?;
                p.edit(id, DraftEdit::RemoveStep(step))
                    .await
                    .map_err(tool_err)?;
                Ok(json!({ "ok": true }))
            }
            PLAN_SUBMIT => {
                let id: PlanId = arg(args, "plan_id")?;
                let proposal = p.submit(id).await.map_err(tool_err)?;
                Ok(json!({ "plan_id": proposal.id(), "stage": "proposal",
                    "note": "submitted: the human will now approve, request changes or reject it" }))
            }
            EXECUTIONS_LIST => {
                let plan: Option<PlanId> = opt_arg(args, "plan_id")?;
                let listing = self
                    .ctx
                    .store
                    .list_executions(plan)
                    .await
                    .map_err(|e| ToolError::new(e.to_string()))?;
                Ok(json!(listing.items))
            }
            EXECUTION_GET => {
                let id: ExecutionId = arg(args, "execution_id")?;
                let snap = self
                    .ctx
                    .store
                    .execution(id)
                    .await
                    .map_err(|e| ToolError::new(e.to_string()))?;
                let tasks: Vec<Value> = snap
                    .tasks
                    .iter()
                    .map(|t| {
                        json!({ "step_id": t.value.step_id(), "status": t.value.status(),
                        "summary": t.value.success().map(|s| s.summary.clone()) })
                    })
                    .collect();
                Ok(
                    json!({ "execution_id": id, "stage": snap.execution.value.stage(), "tasks": tasks }),
                )
            }
            ASK_USER => {
                let question: String = arg(args, "question")?;
                match self.ctx.hitl.ask_text(&self.agent, &question).await {
                    Some(answer) => Ok(json!({ "answer": answer })),
                    None => Err(ToolError::new(
                        "no human is available to answer now; proceed with stated assumptions or return an interruption with your question",
                    )),
                }
            }
            ASK_AGENT => {
                let agent: AgentId = arg(args, "agent")?;
                let question: String = arg(args, "question")?;
                let session: Option<SessionId> = opt_arg(args, "session_id")?;
                self.ask_agent(agent, question, session).await
            }
            INVOKE => {
                let message: String = arg(args, "message")?;
                let reply = crate::relay::ask_planner(
                    &self.ctx,
                    message,
                    None,
                    Budget::UNLIMITED,
                    self.scope,
                )
                .await
                .map_err(tool_err)?;
                Ok(json!(reply.outcome))
            }
            other => match &self.ctx.workspace {
                Some(ws) => ws.call_for(call, self).await,
                None => Err(ToolError::new(format!("tool `{other}` is not available"))),
            },
        }
    }

    async fn ask_agent(
        &self,
        agent: AgentId,
        question: String,
        session: Option<SessionId>,
    ) -> Result<Value, ToolError> {
        if self.depth >= MAX_DEPTH {
            return Err(ToolError::new(
                "questions may not nest this deep; answer with what you know",
            ));
        }
        let info = self
            .ctx
            .agents
            .agents()
            .into_iter()
            .find(|a| a.id == agent && a.role == Role::Specialist)
            .ok_or_else(|| ToolError::new(format!("unknown specialist `{agent}`")))?;
        let mut nested = Self::new(self.ctx.clone(), &info, CallMode::Question, self.scope);
        nested.depth = self.depth + 1;
        let reply = self
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
    }
}

fn tool_err(e: crate::ServiceError) -> ToolError {
    ToolError::new(e.to_string())
}

fn arg<T: for<'de> Deserialize<'de>>(args: &Value, name: &str) -> Result<T, ToolError> {
    let v = args
        .get(name)
        .ok_or_else(|| ToolError::new(format!("missing argument `{name}`")))?;
    serde_json::from_value(v.clone()).map_err(|e| ToolError::new(format!("argument `{name}`: {e}")))
}

fn opt_arg<T: for<'de> Deserialize<'de>>(args: &Value, name: &str) -> Result<Option<T>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| ToolError::new(format!("argument `{name}`: {e}"))),
    }
}

#[async_trait]
impl ToolHost for Gate {
    fn specs(&self) -> Vec<ToolSpec> {
        let mut out: Vec<ToolSpec> = definitions()
            .into_iter()
            .filter(|s| self.granted.contains(&s.name))
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
                json!({ "agent": self.agent, "tool": call.name, "arguments": call.arguments }),
            )
            .await;
            return Err(ToolError::new(format!(
                "tool `{}` is not granted to agent `{}`; use only the tools you were given",
                call.name, self.agent
            )));
        }
        debug!(agent = %self.agent, tool = %call.name, "tool call");
        let result = self.dispatch(call).await;
        if let Err(e) = &result
            && e.refused
        {
            // A confinement rule refused it (a path into orca's records, a hard link…).
            warn!(agent = %self.agent, tool = %call.name, reason = %e.message, "refused a tool call");
            self.audit(
                AuditKind::ToolRefused,
                json!({ "agent": self.agent, "tool": call.name, "arguments": call.arguments,
                    "reason": e.message }),
            )
            .await;
            return result;
        }
        self.audit(
            AuditKind::ToolCall,
            json!({ "agent": self.agent, "tool": call.name, "arguments": call.arguments,
                "ok": result.is_ok(), "error": result.as_ref().err().map(|e| e.message.clone()) }),
        )
        .await;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(role: Role, tools: &[&str]) -> AgentInfo {
        AgentInfo {
            id: AgentId::parse("x").unwrap(),
            role,
            description: String::new(),
            backend: "test".to_owned(),
            model: None,
            workspace_tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        }
    }

    #[track_caller]
    fn check(role: Role, profile: &[&str], mode: CallMode, expected: &[&str]) {
        let got: Vec<String> = grants(&info(role, profile), mode).into_iter().collect();
        let mut expected: Vec<String> = expected.iter().map(|s| (*s).to_owned()).collect();
        expected.sort();
        assert_eq!(got, expected);
    }

    #[test]
    fn role_grants() {
        use names::*;
        let all = [
            "read_file",
            "write_file",
            "edit_file",
            "run_command",
            "list_files",
            "search_text",
        ];
        // The relay only forwards.
        check(Role::Relay, &all, CallMode::Relay, &[INVOKE]);
        // The planner researches read-only and builds plans; it never gets write tools.
        check(
            Role::Planner,
            &all,
            CallMode::Planning,
            &[
                ASK_AGENT,
                ASK_USER,
                PLANS_LIST,
                PLANS_GET,
                EXECUTIONS_LIST,
                EXECUTION_GET,
                PLAN_CREATE_DRAFT,
                PLAN_SET_GOAL,
                PLAN_SET_ASSUMPTIONS,
                PLAN_SET_RISKS,
                PLAN_SET_VERIFICATION,
                PLAN_ADD_STEP,
                PLAN_UPDATE_STEP,
                PLAN_REMOVE_STEP,
                PLAN_SUBMIT,
                "list_files",
                "read_file",
                "search_text",
            ],
        );
        // A specialist doing a task gets its profile's tools.
        check(
            Role::Specialist,
            &["read_file", "write_file"],
            CallMode::Task,
            &[ASK_AGENT, ASK_USER, PLANS_GET, "read_file", "write_file"],
        );
        // A question is read-only, even for the coder.
        check(
            Role::Specialist,
            &["read_file", "write_file", "edit_file", "run_command"],
            CallMode::Question,
            &[PLANS_GET, "read_file"],
        );
    }

    #[test]
    fn no_tool_approves_or_starts_anything() {
        for spec in definitions() {
            for word in ["approve", "reject", "execute", "run", "start"] {
                assert!(!spec.name.contains(word), "{} must not exist", spec.name);
            }
        }
    }

    #[test]
    fn every_schema_is_an_object_schema() {
        for spec in definitions() {
            assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
            assert!(spec.parameters["properties"].is_object(), "{}", spec.name);
        }
    }
}
