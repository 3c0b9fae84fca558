//! Loop scenarios with the scripted backend: the real loop, replayed model turns.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::path::Path;

use common::{TestTools, fast_settings, task};
use orca_agents::{Agents, BackendSpec, Profile, WorkspaceTools};
use orca_core::{
    AgentId, AgentPort, Budget, ErrorCode, PlanId, PlanRefStage, PlannerRequest, PlannerResponse,
    QuestionRequest, Role, TaskResult,
};
use serde_json::{Value, json};

fn script(dir: &Path, turns: Value) -> BackendSpec {
    let path = dir.join(format!("script-{}.json", fastrand::u32(..)));
    std::fs::write(&path, json!({"turns": turns}).to_string()).unwrap();
    BackendSpec::Scripted { path }
}

fn agents(dir: &Path, id: &str, role: Role, turns: Value, limits: Budget) -> Agents {
    let profile = Profile {
        id: AgentId::parse(id).unwrap(),
        role,
        description: "test".into(),
        backend: script(dir, turns),
        prompt: "prompt".into(),
        workspace_tools: vec![],
        limits,
    };
    Agents::new(dir, [profile], fast_settings(2)).unwrap()
}

fn submit(args: Value) -> Value {
    json!({"tool_calls": [{"name": "submit_result", "arguments": args}], "usage": {"input_tokens": 100, "output_tokens": 10}})
}

fn lookup() -> Value {
    json!({"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}], "usage": {"input_tokens": 100, "output_tokens": 10}})
}

async fn run(
    turns: Value,
    limits: Budget,
    budget: Budget,
) -> (orca_core::Reply<TaskResult>, TestTools) {
    let dir = tempfile::tempdir().unwrap();
    let a = agents(dir.path(), "coder", Role::Specialist, turns, limits);
    let tools = TestTools::new();
    let reply = a.run_task(task("coder", budget), &tools).await;
    (reply, tools)
}

#[track_caller]
fn failure_code(outcome: &TaskResult) -> ErrorCode {
    match outcome {
        TaskResult::Failure(f) => f.code,
        other => panic!("expected failure, got {other:?}"),
    }
}

#[tokio::test]
async fn tool_then_result_then_submit() {
    let (reply, tools) = run(
        json!([
            lookup(),
            submit(json!({"status": "success", "summary": "found k!", "relevant_files": ["a.rs"]}))
        ]),
        Budget::UNLIMITED,
        Budget::UNLIMITED,
    )
    .await;
    let TaskResult::Success(s) = &reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    assert_eq!(s.summary, "found k!");
    assert_eq!(s.relevant_files, ["a.rs"]);
    assert_eq!(tools.names(), ["lookup"]);
    assert_eq!(
        (
            reply.usage.turns,
            reply.usage.input_tokens,
            reply.usage.output_tokens
        ),
        (2, 200, 20)
    );
}

#[tokio::test]
async fn endless_tool_calls_hit_the_turn_limit() {
    // Each call different: the same call again and again would stall first.
    let turns: Vec<Value> = (0..10)
        .map(|i| json!({"tool_calls": [{"name": "lookup", "arguments": {"key": format!("k{i}")}}], "usage": {"input_tokens": 100, "output_tokens": 10}}))
        .collect();
    let (reply, tools) = run(
        json!(turns),
        Budget {
            max_turns: Some(3),
            ..Budget::UNLIMITED
        },
        Budget::UNLIMITED,
    )
    .await;
    assert_eq!(failure_code(&reply.outcome), ErrorCode::BudgetExceeded);
    assert_eq!(reply.usage.turns, 3);
    assert_eq!(tools.names().len(), 3);
}

#[tokio::test]
async fn invalid_submit_is_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let spec = script(
        dir.path(),
        json!([
            submit(json!({"status": "success"})),
            submit(json!({"status": "done", "summary": "x"})),
            submit(json!({"status": "success", "summary": "fixed"}))
        ]),
    );
    let BackendSpec::Scripted { path } = &spec else {
        unreachable!()
    };
    let backend = std::sync::Arc::new(orca_llm::ScriptedBackend::from_file(path).unwrap());
    let profile = Profile {
        id: AgentId::parse("coder").unwrap(),
        role: Role::Specialist,
        description: "t".into(),
        backend: BackendSpec::Custom(backend.clone()),
        prompt: "p".into(),
        workspace_tools: vec![],
        limits: Budget::UNLIMITED,
    };
    let a = Agents::new(dir.path(), [profile], fast_settings(0)).unwrap();
    let reply = a
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await;
    assert!(
        matches!(&reply.outcome, TaskResult::Success(s) if s.summary == "fixed"),
        "{:?}",
        reply.outcome
    );
    // The model was told the exact error each time.
    let requests = backend.requests();
    let second = serde_json::to_string(&requests[1].messages).unwrap();
    assert!(second.contains("missing field `summary`"), "{second}");
    let third = serde_json::to_string(&requests[2].messages).unwrap();
    assert!(third.contains("unknown variant `done`"), "{third}");
}

#[tokio::test]
async fn repeated_invalid_submit_fails() {
    let bad = submit(json!({"status": "success"}));
    let (reply, _) = run(
        json!([bad, bad, bad, bad]),
        Budget::UNLIMITED,
        Budget::UNLIMITED,
    )
    .await;
    let TaskResult::Failure(f) = &reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    assert_eq!(f.code, ErrorCode::ParseError);
    assert!(f.cause.as_deref().unwrap().contains("summary"), "{f:?}");
    assert_eq!(reply.usage.turns, 3, "one try and two repairs");
}

#[tokio::test]
async fn token_budget_exceeded_fails_closed() {
    let (reply, _) = run(
        json!([
            lookup(),
            lookup(),
            submit(json!({"status": "success", "summary": "late"}))
        ]),
        Budget::UNLIMITED,
        Budget {
            max_tokens: Some(150),
            ..Budget::UNLIMITED
        },
    )
    .await;
    let TaskResult::Failure(f) = &reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    assert_eq!(f.code, ErrorCode::BudgetExceeded);
    assert!(f.message.contains("token budget exceeded"), "{}", f.message);
}

#[tokio::test]
async fn forbidden_tool_is_refused_and_the_loop_continues() {
    let dir = tempfile::tempdir().unwrap();
    let a = agents(
        dir.path(),
        "reviewer",
        Role::Specialist,
        json!([
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "x.txt", "content": "pwned"}}]},
            submit(json!({"status": "failure", "code": "tool_refused", "message": "cannot write"}))
        ]),
        Budget::UNLIMITED,
    );
    let granted = vec!["read_file".to_owned()];
    let tools = WorkspaceTools::new(dir.path(), &granted).unwrap();
    let reply = a
        .run_task(task("reviewer", Budget::UNLIMITED), &tools)
        .await;
    assert_eq!(failure_code(&reply.outcome), ErrorCode::ToolRefused);
    assert!(!dir.path().join("x.txt").exists());
}

#[tokio::test]
async fn retries_transient_errors_but_not_quota() {
    let (reply, _) = run(
        json!([{"error": {"kind": "rate_limited", "retry_after_ms": 5}}, {"error": {"kind": "server"}}, submit(json!({"status": "success", "summary": "ok"}))]),
        Budget::UNLIMITED,
        Budget::UNLIMITED,
    )
    .await;
    assert!(
        matches!(&reply.outcome, TaskResult::Success(_)),
        "{:?}",
        reply.outcome
    );
    let (reply, _) = run(
        json!([{"error": {"kind": "quota", "message": "no credit"}}, submit(json!({"status": "success", "summary": "ok"}))]),
        Budget::UNLIMITED,
        Budget::UNLIMITED,
    )
    .await;
    let TaskResult::Failure(f) = &reply.outcome else {
        panic!()
    };
    assert!(f.message.contains("no credit"));
}

#[tokio::test]
async fn planner_and_questions() {
    let dir = tempfile::tempdir().unwrap();
    let plan_id = PlanId::new();
    let a = agents(
        dir.path(),
        "planner",
        Role::Planner,
        json!([submit(
            json!({"type": "plan", "plan_id": plan_id.to_string(), "stage": "proposal"})
        )]),
        Budget::UNLIMITED,
    );
    let reply = a
        .plan(
            PlannerRequest {
                message: "build it".into(),
                plan_id: None,
                session: None,
                budget: Budget::UNLIMITED,
            },
            &TestTools::new(),
        )
        .await;
    assert_eq!(
        reply.outcome,
        PlannerResponse::Plan {
            plan_id,
            stage: PlanRefStage::Proposal,
            message: None
        }
    );

    let a = agents(
        dir.path(),
        "researcher",
        Role::Specialist,
        json!([submit(json!({"answer": "42"}))]),
        Budget::UNLIMITED,
    );
    let reply = a
        .ask(
            QuestionRequest {
                agent: AgentId::parse("researcher").unwrap(),
                question: "why?".into(),
                session: None,
                budget: Budget::UNLIMITED,
            },
            &TestTools::new(),
        )
        .await;
    assert_eq!(reply.outcome.unwrap().answer, "42");
    // Without a planner profile, plan() fails cleanly.
    let reply = Agents::shell_only(dir.path())
        .plan(
            PlannerRequest {
                message: "x".into(),
                plan_id: None,
                session: None,
                budget: Budget::UNLIMITED,
            },
            &TestTools::new(),
        )
        .await;
    assert!(
        matches!(reply.outcome, PlannerResponse::Failure(f) if f.code == ErrorCode::UnknownAgent)
    );
}

#[tokio::test]
async fn task_timeout_is_a_timeout_failure() {
    // A script that never submits, with a retry delay longer than the timeout.
    let dir = tempfile::tempdir().unwrap();
    let a = agents(
        dir.path(),
        "coder",
        Role::Specialist,
        json!([{"error": {"kind": "overloaded", "retry_after_ms": 60000}}]),
        Budget::UNLIMITED,
    );
    let mut req = task("coder", Budget::UNLIMITED);
    req.timeout = Some(std::time::Duration::from_millis(100));
    let reply = a.run_task(req, &TestTools::new()).await;
    assert_eq!(failure_code(&reply.outcome), ErrorCode::Timeout);
}

/// A step that times out keeps the usage the model already reported: two answered turns, then
/// a third that never comes back before the timeout. The reply (what the attempt's audit entry
/// records) counts the two turns, not zeros.
#[tokio::test]
async fn a_timed_out_task_keeps_the_usage_already_reported() {
    let dir = tempfile::tempdir().unwrap();
    let a = agents(
        dir.path(),
        "coder",
        Role::Specialist,
        json!([
            {"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}}], "usage": {"input_tokens": 100, "output_tokens": 10}},
            {"tool_calls": [{"name": "lookup", "arguments": {"key": "b"}}], "usage": {"input_tokens": 150, "output_tokens": 20}},
            {"error": {"kind": "overloaded", "retry_after_ms": 60000}},
        ]),
        Budget::UNLIMITED,
    );
    let mut req = task("coder", Budget::UNLIMITED);
    req.timeout = Some(std::time::Duration::from_millis(300));
    let reply = a.run_task(req, &TestTools::new()).await;
    println!(
        "timed out: {:?}; usage kept: {:?}",
        reply.outcome, reply.usage
    );
    assert_eq!(failure_code(&reply.outcome), ErrorCode::Timeout);
    assert!(
        matches!(&reply.outcome, TaskResult::Failure(f) if f.message.contains("agent `coder` timed out")),
        "{:?}",
        reply.outcome
    );
    assert_eq!(reply.usage.turns, 2);
    assert_eq!(reply.usage.input_tokens, 250);
    assert_eq!(reply.usage.output_tokens, 30);
}

#[test]
fn invalid_scripts_are_rejected_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    std::fs::write(&path, r#"{"turns": [{"txt": "typo"}]}"#).unwrap();
    let profile = Profile {
        id: AgentId::parse("coder").unwrap(),
        role: Role::Specialist,
        description: "t".into(),
        backend: BackendSpec::Scripted { path: path.clone() },
        prompt: String::new(),
        workspace_tools: vec![],
        limits: Budget::UNLIMITED,
    };
    let err = Agents::new(dir.path(), [profile], fast_settings(0))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad.json") && err.contains("unknown field `txt`"),
        "{err}"
    );
}

#[tokio::test]
async fn wall_time_budget_fails_closed() {
    // The provider asks for a long wait; the 1 s wall-time budget ends the call first.
    let (reply, _) = run(
        json!([{"error": {"kind": "rate_limited", "retry_after_ms": 60000}}]),
        Budget::UNLIMITED,
        Budget {
            max_wall_secs: Some(1),
            ..Budget::UNLIMITED
        },
    )
    .await;
    let TaskResult::Failure(f) = &reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    assert_eq!(f.code, ErrorCode::BudgetExceeded);
    assert!(f.message.contains("time budget exceeded"), "{}", f.message);
}
