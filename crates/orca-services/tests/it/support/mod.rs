//! A scripted agent port and helpers shared by the service tests.
#![allow(dead_code, reason = "each test file uses a different part")]
#![allow(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    reason = "test support"
)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use orca_core::{
    AgentAnswer, AgentId, AgentInfo, AgentPort, Budget, ErrorCode, Holder, PlanId, PlanRefStage,
    PlannerRequest, PlannerResponse, QuestionRequest, Reply, Role, Step, StepId, TaskFailure,
    TaskInterruption, TaskRequest, TaskResult, TaskSuccess, ToolCall, ToolHost, Usage,
};
use orca_services::{Hitl, Orca, RunConfig};
use orca_store::Store;
use serde_json::{Value, json};

/// One scripted attempt of a step.
#[derive(Debug, Clone)]
pub(crate) enum Act {
    Succeed(&'static str),
    Fail(&'static str),
    Interrupt(&'static str),
    /// Sleeps, then succeeds.
    Slow(Duration),
    /// Hangs until dropped (cancelled).
    Hang,
    /// Calls a tool and reports its result as the summary.
    CallTool(&'static str, Value),
    /// Succeeds but reports this many tokens used.
    Spend(u64),
}

/// What the planner does on one call.
#[derive(Debug, Clone)]
pub(crate) enum PlannerAct {
    Answer(&'static str),
    /// Builds a plan with the plan tools (into the request's plan if it has one, else a new
    /// draft) and submits it.
    Build(Vec<Step>),
    /// Adds a step to the request's draft and submits.
    Revise(Box<Step>),
}

#[derive(Default)]
pub(crate) struct Scripts {
    pub(crate) steps: HashMap<StepId, VecDeque<Act>>,
    pub(crate) planner: VecDeque<PlannerAct>,
}

/// An agent port that follows scripts and records what it was asked.
pub(crate) struct ScriptedAgents {
    infos: Vec<AgentInfo>,
    pub(crate) scripts: Mutex<Scripts>,
    pub(crate) requests: Mutex<Vec<TaskRequest>>,
    running: AtomicUsize,
    pub(crate) max_running: AtomicUsize,
    /// `(step, succeeded)` in the order calls ended.
    pub(crate) ended: Mutex<Vec<(StepId, bool)>>,
    /// Running count per lock name, and the max seen.
    lock_running: Mutex<BTreeMap<String, (usize, usize)>>,
}

pub(crate) fn id(s: &str) -> StepId {
    StepId::parse(s).unwrap()
}

pub(crate) fn agent(s: &str) -> AgentId {
    AgentId::parse(s).unwrap()
}

fn info(id: &str, role: Role, tools: &[&str]) -> AgentInfo {
    AgentInfo {
        id: agent(id),
        role,
        description: format!("the {id}"),
        backend: "scripted".to_owned(),
        model: None,
        workspace_tools: tools.iter().map(|s| (*s).to_owned()).collect(),
    }
}

impl ScriptedAgents {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            infos: vec![
                info("planner", Role::Planner, &["read_file"]),
                info("coder", Role::Specialist, &["read_file", "write_file"]),
                info("tester", Role::Specialist, &["read_file", "run_command"]),
                info("shell", Role::Specialist, &[]),
            ],
            scripts: Mutex::default(),
            requests: Mutex::default(),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            ended: Mutex::default(),
            lock_running: Mutex::default(),
        })
    }

    /// Agents with no planner configured.
    pub(crate) fn without_planner() -> Arc<Self> {
        let mut agents = Arc::into_inner(Self::new()).unwrap();
        agents.infos.retain(|a| a.role != Role::Planner);
        Arc::new(agents)
    }

    pub(crate) fn script(&self, step: &str, acts: impl IntoIterator<Item = Act>) {
        self.scripts
            .lock()
            .unwrap()
            .steps
            .insert(id(step), acts.into_iter().collect());
    }

    pub(crate) fn plan(&self, acts: impl IntoIterator<Item = PlannerAct>) {
        self.scripts.lock().unwrap().planner.extend(acts);
    }

    pub(crate) fn requests_for(&self, step: &str) -> Vec<TaskRequest> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.step.id.as_str() == step)
            .cloned()
            .collect()
    }

    pub(crate) fn max_concurrent_on(&self, lock: &str) -> usize {
        self.lock_running
            .lock()
            .unwrap()
            .get(lock)
            .map_or(0, |(_, m)| *m)
    }

    fn enter(&self, locks: &[String]) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let mut l = self.lock_running.lock().unwrap();
        for name in locks {
            let e = l.entry(name.clone()).or_default();
            e.0 += 1;
            e.1 = e.1.max(e.0);
        }
    }

    fn leave(&self, locks: &[String]) {
        self.running.fetch_sub(1, Ordering::SeqCst);
        let mut l = self.lock_running.lock().unwrap();
        for name in locks {
            if let Some(e) = l.get_mut(name) {
                e.0 -= 1;
            }
        }
    }
}

struct Leave<'a>(&'a ScriptedAgents, Vec<String>);
impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.leave(&self.1);
    }
}

async fn call(tools: &dyn ToolHost, name: &str, arguments: Value) -> Result<Value, String> {
    tools
        .call(&ToolCall {
            id: "t".into(),
            name: name.into(),
            arguments,
        })
        .await
        .map_err(|e| e.message)
}

#[async_trait]
impl AgentPort for ScriptedAgents {
    fn agents(&self) -> Vec<AgentInfo> {
        self.infos.clone()
    }

    async fn run_task(&self, request: TaskRequest, tools: &dyn ToolHost) -> Reply<TaskResult> {
        self.requests.lock().unwrap().push(request.clone());
        let act = self
            .scripts
            .lock()
            .unwrap()
            .steps
            .get_mut(&request.step.id)
            .and_then(VecDeque::pop_front)
            .unwrap_or(Act::Succeed("done"));
        self.enter(&request.step.locks);
        let _leave = Leave(self, request.step.locks.clone());
        let summary = |s: &str| format!("{}: {s}", request.step.id);
        let outcome = match act {
            Act::Succeed(s) => TaskResult::Success(TaskSuccess {
                summary: summary(s),
                relevant_files: vec![format!("src/{}.rs", request.step.id)],
                ..TaskSuccess::default()
            }),
            Act::Fail(m) => TaskResult::Failure(TaskFailure::new(ErrorCode::TaskFailed, m)),
            Act::Interrupt(q) => TaskResult::Interruption(TaskInterruption {
                reason: "needs input".into(),
                question: Some(q.into()),
            }),
            Act::Slow(d) => {
                tokio::time::sleep(d).await;
                TaskResult::Success(TaskSuccess::with_summary(summary("slow done")))
            }
            Act::Hang => {
                std::future::pending::<()>().await;
                unreachable!()
            }
            Act::CallTool(name, args) => match call(tools, name, args).await {
                Ok(v) => TaskResult::Success(TaskSuccess::with_summary(format!("tool ok: {v}"))),
                Err(e) => TaskResult::Failure(TaskFailure::new(ErrorCode::ToolRefused, e)),
            },
            Act::Spend(tokens) => {
                return Reply {
                    outcome: TaskResult::Success(TaskSuccess::with_summary(summary("spent"))),
                    usage: Usage {
                        input_tokens: tokens,
                        turns: 1,
                        ..Usage::default()
                    },
                    session: None,
                };
            }
        };
        self.ended.lock().unwrap().push((
            request.step.id.clone(),
            matches!(outcome, TaskResult::Success(_)),
        ));
        Reply::new(outcome)
    }

    async fn ask(
        &self,
        request: QuestionRequest,
        _tools: &dyn ToolHost,
    ) -> Reply<Result<AgentAnswer, TaskFailure>> {
        Reply::new(Ok(AgentAnswer {
            answer: format!("{} says: 42", request.agent),
            session_id: None,
        }))
    }

    async fn plan(&self, request: PlannerRequest, tools: &dyn ToolHost) -> Reply<PlannerResponse> {
        let act = self.scripts.lock().unwrap().planner.pop_front();
        let outcome = match act {
            None => PlannerResponse::Failure(TaskFailure::new(ErrorCode::AgentError, "no script")),
            Some(PlannerAct::Answer(text)) => PlannerResponse::Answer {
                text: text.to_owned(),
            },
            Some(PlannerAct::Build(steps)) => {
                match build(tools, request.plan_id, &request.message, steps).await {
                    Ok(plan_id) => PlannerResponse::Plan {
                        plan_id,
                        stage: PlanRefStage::Proposal,
                        message: None,
                    },
                    Err(e) => PlannerResponse::Failure(TaskFailure::new(ErrorCode::Validation, e)),
                }
            }
            Some(PlannerAct::Revise(step)) => {
                let step = *step;
                let plan_id = request.plan_id.unwrap();
                let r = async {
                    call(
                        tools,
                        "orca_plan_add_step",
                        json!({ "plan_id": plan_id, "step": step }),
                    )
                    .await?;
                    call(tools, "orca_plan_submit", json!({ "plan_id": plan_id })).await
                }
                .await;
                match r {
                    Ok(_) => PlannerResponse::Plan {
                        plan_id,
                        stage: PlanRefStage::Proposal,
                        message: None,
                    },
                    Err(e) => PlannerResponse::Failure(TaskFailure::new(ErrorCode::Validation, e)),
                }
            }
        };
        Reply::new(outcome)
    }
}

async fn build(
    tools: &dyn ToolHost,
    existing: Option<PlanId>,
    message: &str,
    steps: Vec<Step>,
) -> Result<PlanId, String> {
    let plan_id = match existing {
        Some(p) => p,
        None => {
            let v = call(tools, "orca_plan_create_draft", json!({ "goal": message })).await?;
            serde_json::from_value(v["plan_id"].clone()).map_err(|e| e.to_string())?
        }
    };
    call(
        tools,
        "orca_plan_set_assumptions",
        json!({ "plan_id": plan_id, "items": ["a"] }),
    )
    .await?;
    call(
        tools,
        "orca_plan_set_risks",
        json!({ "plan_id": plan_id, "items": ["r"] }),
    )
    .await?;
    call(
        tools,
        "orca_plan_set_verification",
        json!({ "plan_id": plan_id, "items": ["v"] }),
    )
    .await?;
    for step in steps {
        call(
            tools,
            "orca_plan_add_step",
            json!({ "plan_id": plan_id, "step": step }),
        )
        .await?;
    }
    call(tools, "orca_plan_submit", json!({ "plan_id": plan_id })).await?;
    Ok(plan_id)
}

pub(crate) fn holder() -> Holder {
    Holder {
        pid: std::process::id(),
        host: "test".into(),
        token: uuid_token(),
    }
}

fn uuid_token() -> String {
    format!("{:x}", fastrand_u64())
}

fn fastrand_u64() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64)
}

/// Fast retries for tests.
pub(crate) fn config() -> RunConfig {
    let mut c = RunConfig::new(holder());
    c.backoff.base = Duration::from_millis(5);
    c.backoff.max = Duration::from_millis(20);
    c.watch_interval = Duration::from_millis(20);
    c.concurrency = 4;
    c
}

pub(crate) fn orca(
    store: Arc<dyn Store>,
    agents: Arc<ScriptedAgents>,
    hitl: Arc<dyn Hitl>,
) -> Orca {
    Orca::new(store, agents, hitl, None, Budget::UNLIMITED)
}

pub(crate) fn step(name: &str, agent_name: &str) -> Step {
    Step::new(id(name), agent(agent_name), format!("do {name}"))
}

pub(crate) fn content(steps: Vec<Step>) -> orca_core::PlanContent {
    orca_core::PlanContent {
        goal: "test goal".into(),
        summary: None,
        steps,
        assumptions: vec!["a".into()],
        risks: vec!["r".into()],
        verification: vec!["v".into()],
        checks: Vec::new(),
        isolation: None,
        budget: None,
    }
}

/// A plan of `steps`, proposed and approved.
pub(crate) async fn approved_plan(o: &Orca, steps: Vec<Step>) -> orca_core::PlanId {
    let p = o
        .planning()
        .create_proposal(content(steps), None)
        .await
        .unwrap();
    o.planning().approve(p.id(), "tester", None).await.unwrap();
    p.id()
}

/// A new database of the throwaway PostgreSQL server shared by this test process, and a store
/// on it (permissive, redacting credential shapes): its URL, for tests that reach behind the
/// store, and the store.
pub(crate) async fn postgres_store() -> (String, orca_store_postgres::PgStore) {
    let server = orca_testkit::postgres::Throwaway::shared().unwrap_or_else(|e| panic!("{e}"));
    let url = server.create_database().await.unwrap();
    let store = orca_store_postgres::PgStore::connect(
        &url,
        orca_store::Authority::permissive(),
        orca_core::redact::Redactor::new(),
    )
    .await
    .unwrap();
    (url, store)
}
