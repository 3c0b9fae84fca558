//! The MCP server: its tools. Each is the service call the command line makes; none approves
//! (approval: [`crate::approval`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orca_core::{Decision, Execution, ExecutionStage, Plan, PlanContent, PlanRefStage, PlanStage};
use orca_core::{ErrorCode, ExecutionId, PlannerResponse, StepId};
pub(crate) use orca_services::error::error_chain;
use orca_services::{ExecutionService, Orca, ServiceError};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{InputResponses, RequestState};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, tool, tool_router};
use serde_json::{Value, json};

use crate::approval::PendingApproval;
use crate::host::{Host, Settings};
use crate::params::{
    AnswerDeviation, CreatePlan, DeviationChoice, ExecutionFilter, ExecutionRef, NoArgs, PlanRef,
    PlanRequest, StepRef, Watch,
};
use crate::view;

/// How long a decision waits for the driver that asked it to exit before leaving the run to it.
const HANDOVER: Duration = Duration::from_secs(20);

/// The longest `execution_watch` waits for something new.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// orca's MCP server over one project.
#[derive(Clone)]
pub struct OrcaMcp {
    pub(crate) inner: Arc<Inner>,
    tool_router: ToolRouter<Self>,
}

pub(crate) struct Inner {
    pub(crate) orca: Orca,
    pub(crate) host: Arc<dyn Host>,
    pub(crate) settings: Settings,
    /// Plans shown to a human in an approval round that waits for its retry (ADR 0019).
    pub(crate) pending: Mutex<HashMap<String, PendingApproval>>,
}

impl std::fmt::Debug for OrcaMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrcaMcp")
            .field("root", &self.inner.settings.root)
            .finish_non_exhaustive()
    }
}

/// A tool's answer: JSON, or an error the model sees.
pub(crate) type ToolResult = Result<CallToolResult, ErrorData>;

impl OrcaMcp {
    /// A server over `orca`'s services; `host` starts drivers, `settings` say how to talk to
    /// people.
    #[must_use]
    pub fn new(orca: Orca, host: Arc<dyn Host>, settings: Settings) -> Self {
        Self {
            inner: Arc::new(Inner {
                orca,
                host,
                settings,
                pending: Mutex::new(HashMap::new()),
            }),
            tool_router: Self::tool_router(),
        }
    }

    pub(crate) fn router(&self) -> &ToolRouter<Self> {
        &self.tool_router
    }

    /// A successful answer, redacted.
    pub(crate) fn ok(&self, value: Value) -> ToolResult {
        let value = self.inner.settings.redactor.redact_strings(value);
        // The object itself (`structuredContent`, checked against the tool's output schema by
        // the client), and the same JSON as text for clients that read only text.
        let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| "null".to_owned());
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        if value.is_object() {
            result.structured_content = Some(value);
        }
        Ok(result)
    }

    /// A refusal or failure the model reads (a tool error, not a protocol error), redacted.
    pub(crate) fn fail(&self, message: impl AsRef<str>) -> ToolResult {
        let text = self.inner.settings.redactor.redact(message.as_ref());
        Ok(CallToolResult::error(vec![ContentBlock::text(text)]))
    }

    pub(crate) fn service_error(&self, e: &ServiceError) -> ToolResult {
        self.fail(error_chain(e))
    }

    /// What a human does to approve `plan`: the command, and the inbox if there is one.
    pub(crate) fn human_approval(&self, plan: &str) -> Value {
        let mut value = self.human_approval_elsewhere(plan);
        value["or"] = json!(
            "the plan_ask_human tool, which asks the human in your host's UI (MCP elicitation) when the host supports it"
        );
        value
    }

    /// The same without `plan_ask_human`: for its own answer when the host cannot ask.
    pub(crate) fn human_approval_elsewhere(&self, plan: &str) -> Value {
        let s = &self.inner.settings;
        json!({
            "who": "a human; no tool of this server approves a plan",
            "command": s.approve_command(plan),
            "inbox": s.inbox_url,
        })
    }

    fn created(&self, plan: &Plan, message: Option<String>) -> ToolResult {
        let id = plan.id().to_string();
        self.ok(json!({
            "plan_id": id,
            "stage": plan.stage(),
            "steps": plan.content().steps.len(),
            "message": message,
            "plan": plan,
            "approval": self.human_approval(&id),
        }))
    }
}

macro_rules! tri {
    ($self:ident, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return $self.service_error(&e),
        }
    };
}

#[tool_router]
impl OrcaMcp {
    #[tool(
        description = "Create a plan proposal from a plan document (the JSON format `orca plan schema` prints). The proposal does not run until a human approves it; the answer says how.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false),
        output_schema = crate::schemas::object(&[("plan_id", "string"), ("stage", "string"), ("steps", "integer"), ("plan", "object"), ("approval", "object")])
    )]
    async fn plan_create(&self, Parameters(args): Parameters<CreatePlan>) -> ToolResult {
        let text = match &args.document {
            Value::String(s) => s.clone(),
            Value::Object(_) => args.document.to_string(),
            _ => return self.fail("document: expected a JSON object (or that object as a string)"),
        };
        let content = match PlanContent::from_json(&text) {
            Ok(c) => c,
            Err(e) => return self.fail(format!("document: {e}")),
        };
        let proposal = tri!(
            self,
            self.inner
                .orca
                .planning()
                .create_proposal(content, None)
                .await
        );
        self.created(&Plan::Proposal(proposal), None)
    }

    #[tool(
        description = "Ask orca's planner (a model configured in .orca/config.toml) to build a plan for a request. It answers in words or creates a plan proposal, which a human must approve.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false),
        output_schema = crate::schemas::object(&[])
    )]
    async fn plan_from_request(&self, Parameters(args): Parameters<PlanRequest>) -> ToolResult {
        if args.request.trim().is_empty() {
            return self.fail("request: empty");
        }
        let reply = tri!(self, self.inner.orca.relay().invoke(&args.request).await);
        match reply.outcome {
            PlannerResponse::Answer { text } => self.ok(json!({ "answer": text })),
            PlannerResponse::Plan {
                plan_id, message, stage,
            } => {
                let plan = tri!(self, self.inner.orca.planning().plan(plan_id).await);
                self.inner.host.planned(&plan).await;
                if stage == PlanRefStage::Draft {
                    return self.ok(json!({
                        "plan_id": plan_id, "stage": "draft", "message": message,
                        "note": "the planner left a draft; it cannot be approved or run until it is submitted",
                    }));
                }
                self.created(&plan, message)
            }
            PlannerResponse::Failure(f) if f.code == ErrorCode::BackendUnavailable => self.fail(
                format!(
                    "the planner cannot run: {f} (configure the planner's model in .orca/config.toml, or create the plan from a document with plan_create)"
                ),
            ),
            PlannerResponse::Failure(f) => self.fail(format!("the planner failed: {f}")),
        }
    }

    #[tool(description = "List the plans, newest first: id, goal, stage, steps, executions.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = crate::schemas::object(&[("plans", "array"), ("unreadable", "array")]))]
    async fn plan_list(&self, Parameters(NoArgs {}): Parameters<NoArgs>) -> ToolResult {
        let listing = tri!(self, self.inner.orca.planning().list().await);
        // Each item versioned, as every other document orca hands out.
        let plans: Vec<Value> = listing
            .items
            .iter()
            .map(|p| {
                let mut v = json!({ "format_version": 1 });
                if let (Some(obj), Value::Object(fields)) = (v.as_object_mut(), json!(p)) {
                    obj.extend(fields);
                }
                v
            })
            .collect();
        self.ok(json!({ "plans": plans, "unreadable": problems(&listing.problems) }))
    }

    #[tool(description = "Show one plan: its steps, stage, digest and approval.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = crate::schemas::object(&[("plan", "object")]))]
    async fn plan_show(&self, Parameters(args): Parameters<PlanRef>) -> ToolResult {
        let p = &self.inner.orca.planning();
        let id = tri!(self, p.resolve(&args.plan).await);
        let plan = tri!(self, p.plan(id).await);
        let mut value = json!({ "plan": plan });
        if plan.stage() == PlanStage::Proposal {
            value["approval"] = self.human_approval(&id.to_string());
        }
        if let Some(tally) = p.policy_tally(&plan) {
            value["approval_policy"] = json!({
                "needs": orca_services::policy::summaries(&tally),
                "tally": tally,
            });
        }
        self.ok(value)
    }

    #[tool(
        description = "Ask the human to approve or decline a plan proposal, in your host's UI (MCP elicitation). Only the human answers; you cannot. Without elicitation support it returns the command the human runs.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false),
        output_schema = crate::schemas::object(&[])
    )]
    async fn plan_ask_human(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<PlanRef>,
        RequestState(state): RequestState,
        InputResponses(responses): InputResponses,
    ) -> Result<CallToolResponse, ErrorData> {
        crate::approval::ask_human(self, &context, &args.plan, state, responses).await
    }

    #[tool(
        description = "Run an approved plan. The run is driven by a separate orca process (it goes on if this session ends); the answer gives the execution id to watch.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false),
        output_schema = crate::schemas::object(&[("execution_id", "string"), ("plan_id", "string"), ("driver_pid", "integer")])
    )]
    async fn plan_run(&self, Parameters(args): Parameters<PlanRef>) -> ToolResult {
        let orca = &self.inner.orca;
        let id = tri!(self, orca.planning().resolve(&args.plan).await);
        let plan = tri!(self, orca.planning().plan(id).await);
        match plan.stage() {
            PlanStage::Approved => {}
            PlanStage::Proposal => {
                return self.fail(format!(
                    "plan {id} is a proposal: a human must approve it first ({}{})",
                    self.inner.settings.approve_command(&id.to_string()),
                    self.inner
                        .settings
                        .inbox_url
                        .as_ref()
                        .map(|u| format!(", or the inbox at {u}"))
                        .unwrap_or_default()
                ));
            }
            other => return self.fail(format!("plan {id} is {other}; only an approved plan runs")),
        }
        let (_, exec) = tri!(self, orca.executions().create(id).await);
        match self.inner.host.launch(exec) {
            Ok(l) => self.ok(json!({
                "execution_id": exec,
                "plan_id": id,
                "driver_pid": l.pid,
                "next": "execution_watch with this execution id",
            })),
            Err(e) => self.fail(format!(
                "execution {exec} was created but its driver did not start: {e} (resume it: orca exec resume {exec})"
            )),
        }
    }

    #[tool(description = "List executions, newest first (optionally of one plan).",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = crate::schemas::object(&[("executions", "array"), ("unreadable", "array")]))]
    async fn execution_list(&self, Parameters(args): Parameters<ExecutionFilter>) -> ToolResult {
        let orca = &self.inner.orca;
        let plan = match args.plan {
            Some(p) => Some(tri!(self, orca.planning().resolve(&p).await)),
            None => None,
        };
        let listing = tri!(self, orca.executions().list(plan).await);
        self.ok(json!({ "executions": listing.items, "unreadable": problems(&listing.problems) }))
    }

    #[tool(
        description = "Show one execution: every task record, the pending decision, and who drives it.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = crate::schemas::object(&[("execution_id", "string"), ("status", "string"), ("tasks", "array")])
    )]
    async fn execution_show(&self, Parameters(args): Parameters<ExecutionRef>) -> ToolResult {
        let orca = &self.inner.orca;
        let id = tri!(self, orca.executions().resolve(&args.execution).await);
        let snap = tri!(self, orca.executions().get(id).await);
        let mut value = view::snapshot(&snap);
        value["status"] = json!(self.status(&snap.execution.value).await.as_str());
        value["driver"] = json!(self.driver(&snap.execution.value).await);
        value["decision"] = json!(view::pending_decision(&snap.execution.value));
        self.ok(value)
    }

    #[tool(
        description = "Watch an execution: its status, each task's status, the pending decision, and the audit events since `cursor` (pass back `next_cursor`). Waits up to `wait_seconds` (max 30) for something new.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = crate::schemas::object(&[("execution_id", "string"), ("stage", "string"), ("status", "string"), ("ended", "boolean"), ("tasks", "array"), ("events", "array"), ("next_cursor", "integer")])
    )]
    async fn execution_watch(&self, Parameters(args): Parameters<Watch>) -> ToolResult {
        let orca = &self.inner.orca;
        let id = tri!(self, orca.executions().resolve(&args.execution).await);
        let cursor = args.cursor.unwrap_or(0);
        let wait = Duration::from_secs(args.wait_seconds.unwrap_or(0)).min(MAX_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let snap = tri!(self, orca.executions().get(id).await);
            let info = snap.execution.value.info();
            let log = ExecutionService::log(info.plan_id, info.id);
            let entries = tri!(
                self,
                orca.executions()
                    .store()
                    .entries(log)
                    .await
                    .map_err(ServiceError::from)
            );
            let (events, next) = view::events_since(&entries, cursor);
            let stage = snap.execution.value.stage();
            let decision = view::pending_decision(&snap.execution.value);
            if !events.is_empty() || stage.is_terminal() || tokio::time::Instant::now() >= deadline
            {
                let tasks: Vec<Value> = snap
                    .tasks
                    .iter()
                    .map(|t| view::task_brief(&t.value))
                    .collect();
                return self.ok(json!({
                    "execution_id": id,
                    "plan_id": info.plan_id,
                    "stage": stage,
                    "status": self.status(&snap.execution.value).await.as_str(),
                    "ended": stage.is_terminal(),
                    "driver": self.driver(&snap.execution.value).await,
                    "decision": decision,
                    "tasks": tasks,
                    "events": events,
                    "next_cursor": next,
                }));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    #[tool(
        description = "Read a step's output in an execution: its result and every attempt (secrets redacted).",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = crate::schemas::object(&[])
    )]
    async fn step_output(&self, Parameters(args): Parameters<StepRef>) -> ToolResult {
        let orca = &self.inner.orca;
        let id = tri!(self, orca.executions().resolve(&args.execution).await);
        let step: StepId = match args.step.parse() {
            Ok(s) => s,
            Err(e) => return self.fail(format!("step: {e}")),
        };
        let task = tri!(self, orca.executions().task(id, &step).await);
        self.ok(json!({ "execution_id": id, "task": task.value }))
    }

    #[tool(
        description = "Read what a step changed in an execution (its last attempt): the files, lines added and removed, and the unified diff (in a git repository; at most 256 KiB, secrets redacted). Reading only: accepting an execution's result is a human's decision (`orca exec accept`), which no tool makes.",
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false),
        output_schema = crate::schemas::object(&[])
    )]
    async fn step_diff(&self, Parameters(args): Parameters<StepRef>) -> ToolResult {
        const MAX_PATCH: usize = 256 * 1024;
        let orca = &self.inner.orca;
        let id = tri!(self, orca.executions().resolve(&args.execution).await);
        let step: StepId = match args.step.parse() {
            Ok(s) => s,
            Err(e) => return self.fail(format!("step: {e}")),
        };
        // An unknown step is an error naming it.
        tri!(self, orca.executions().task(id, &step).await);
        let recorded = tri!(
            self,
            orca_services::changes::recorded(orca.executions(), id).await
        );
        let Some(last) = recorded.iter().rev().find(|r| r.step == step) else {
            return self.ok(json!({ "execution_id": id, "step": step, "recorded": false,
                "message": "no changes were recorded for this step (it has not run, or ran before orca recorded diffs)" }));
        };
        let mut value = json!({ "execution_id": id, "recorded": true,
                                "changes": orca_services::changes::to_json(last) });
        match (last.trees(), orca.dispatch().changes()) {
            (Some((before, after)), Some(changes)) => match changes.patch(before, after).await {
                Ok(mut patch) => {
                    if patch.len() > MAX_PATCH {
                        let mut cut = MAX_PATCH;
                        while !patch.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        patch.truncate(cut);
                        value["truncated"] = json!(true);
                    }
                    value["patch"] = json!(patch);
                }
                Err(e) => value["patch_error"] = json!(e.to_string()),
            },
            (None, _) => {
                value["message"] = json!(
                    "the project is not in a git repository: only the list of changed files was recorded"
                );
            }
            (Some(_), None) => {}
        }
        self.ok(value)
    }

    #[tool(
        description = "Answer the decision an execution waits for after a step failed: `retry` (optionally with guidance) or `stop`. The run then goes on in a separate orca process.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false),
        output_schema = crate::schemas::object(&[])
    )]
    async fn decision_answer(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<AnswerDeviation>,
    ) -> ToolResult {
        let orca = &self.inner.orca;
        let id = tri!(self, orca.executions().resolve(&args.execution).await);
        let header = tri!(self, orca.executions().header(id).await);
        let Execution::Running(running) = &header.value else {
            return self.fail(format!(
                "execution {id} is {}; there is no decision to make",
                header.value.stage()
            ));
        };
        let Some(pending) = &running.decision else {
            return self.fail(format!("execution {id} waits for no decision"));
        };
        if pending.answer.is_some() {
            return self.fail(format!(
                "the decision of execution {id} is already answered"
            ));
        }
        let decision = match args.action {
            DeviationChoice::Retry => Decision::Retry {
                guidance: args.guidance,
            },
            DeviationChoice::Stop => Decision::Stop,
        };
        let by = crate::approval::actor("mcp", &context);
        tri!(self, orca.executions().decide(id, decision, &by).await);
        let launched = match self.continue_run(id).await {
            Ok(pid) => pid,
            Err(e) => {
                return self.fail(format!(
                    "the decision is recorded, but no driver started: {e} (resume it: orca exec resume {id})"
                ));
            }
        };
        self.ok(json!({
            "execution_id": id,
            "recorded": args.action,
            "by": by,
            "driver_pid": launched,
            "next": "execution_watch",
        }))
    }
}

impl OrcaMcp {
    /// After a decision: a live driver applies it (it may be one still running other steps);
    /// when there is none — or the one that asked is exiting — a new driver is started. Waits
    /// a bounded time for an exiting driver to let go of the lease.
    async fn continue_run(&self, id: ExecutionId) -> Result<Option<u32>, String> {
        let deadline = tokio::time::Instant::now() + HANDOVER;
        loop {
            let header = self
                .inner
                .orca
                .executions()
                .header(id)
                .await
                .map_err(|e| error_chain(&e))?;
            let Execution::Running(running) = &header.value else {
                return Ok(None);
            };
            let untaken = running
                .decision
                .as_ref()
                .is_some_and(|d| d.answer.is_some());
            let driver = self.driver(&header.value).await;
            let live = driver.as_ref().is_some_and(|d| d["state"] == "running");
            if !live {
                return self.inner.host.launch(id).map(|l| Some(l.pid));
            }
            if !untaken || tokio::time::Instant::now() >= deadline {
                // The live driver took the answer (or holds the run and will).
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// An execution's status, in the words of every surface (`orca_services::status`).
    pub(crate) async fn status(&self, execution: &Execution) -> orca_services::status::Status {
        use orca_services::acceptance::{ResultState, state};
        let stage = execution.stage();
        let driven = if stage.is_terminal() {
            None
        } else {
            let driver = self.driver(execution).await;
            Some(driver.as_ref().is_some_and(|d| d["state"] == "running"))
        };
        let orca = &self.inner.orca;
        let awaiting = stage == ExecutionStage::Completed
            && matches!(
                state(
                    orca.executions(),
                    orca.dispatch().workspaces().map(|w| &**w),
                    execution.id()
                )
                .await,
                Ok(ResultState::Awaiting { .. })
            );
        orca_services::status::Status::of(
            stage,
            execution.decision().is_some_and(|d| d.answer.is_none()),
            driven,
            awaiting,
        )
    }

    /// Who drives an execution now.
    pub(crate) async fn driver(&self, execution: &Execution) -> Option<Value> {
        let id = execution.id();
        let stage: ExecutionStage = execution.stage();
        let lease = self
            .inner
            .orca
            .executions()
            .store()
            .lease(id)
            .await
            .ok()
            .flatten();
        self.inner.host.driver(id, stage, lease.as_ref())
    }
}

fn problems(problems: &[orca_store::ListingProblem]) -> Vec<Value> {
    problems
        .iter()
        .map(|p| json!({ "location": p.location, "message": p.message }))
        .collect()
}
