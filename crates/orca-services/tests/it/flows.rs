//! The service flows (plan, approve, run, decide, resume), on every store backend (memory, file, postgres).
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use orca_core::{
    AttemptOutcome, Decision, DecisionRequest, ErrorCode, Execution, ExecutionStage, Plan,
    PlanStage, PlannerResponse, Task, TaskStatus,
};
use orca_services::{
    ApprovalOutcome, FailurePolicy, NoHuman, Quiet, RunOutcome, ScriptedHitl, ServiceError,
};
use orca_store::{AuditLogId, Store};
use serde_json::json;
use support::*;
use tokio_util::sync::CancellationToken;

/// A store of each backend; the tempdir lives as long as the store is used.
struct Backend {
    store: Arc<dyn Store>,
    _dir: Option<tempfile::TempDir>,
}

async fn memory() -> Backend {
    Backend {
        store: Arc::new(orca_store::MemoryStore::new()),
        _dir: None,
    }
}

async fn file() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let store = orca_store::FileStore::open(dir.path()).unwrap();
    Backend {
        store: Arc::new(store),
        _dir: Some(dir),
    }
}

/// A store on a new database of the throwaway PostgreSQL server shared by this test process.
async fn postgres() -> Backend {
    let (_, store) = crate::support::postgres_store().await;
    Backend {
        store: Arc::new(store),
        _dir: None,
    }
}

async fn tasks(o: &orca_services::Orca, id: orca_core::ExecutionId) -> Vec<Task> {
    o.executions().get(id).await.unwrap().task_values()
}

async fn verify_all(store: &Arc<dyn Store>) {
    for log in store.audit_logs().await.unwrap() {
        let report = store.verify(log).await.unwrap();
        assert!(report.is_intact(), "{log}: {report:?}");
    }
}

macro_rules! flows {
    ($($backend:ident),*) => {$(
        mod $backend {
            use super::*;

            async fn backend() -> Backend { super::$backend().await }

            #[tokio::test]
            async fn planner_answers() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.plan([PlannerAct::Answer("you have no plans")]);
                let o = orca(b.store.clone(), agents, Arc::new(NoHuman));
                let reply = o.relay().invoke("list my plans").await.unwrap();
                assert_eq!(reply.outcome, PlannerResponse::Answer { text: "you have no plans".into() });
            }

            #[tokio::test]
            async fn plan_approve_run_completed() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.plan([PlannerAct::Build(vec![step("build", "coder"), step("test", "tester")])]);
                let hitl = Arc::new(ScriptedHitl::new([("approve", Some("looks good"))]));
                let o = orca(b.store.clone(), agents.clone(), hitl.clone());
                let reply = o.relay().invoke("add a feature").await.unwrap();
                let PlannerResponse::Plan { plan_id, .. } = reply.outcome else { panic!("{reply:?}") };
                let ApprovalOutcome::Approved(plan) = o.relay().approval_loop(plan_id, hitl.as_ref(), "alice").await.unwrap() else { panic!() };
                assert!(plan.is_intact());
                let (_, exec) = o.executions().create(plan_id).await.unwrap();
                let report = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert_eq!(report.outcome, RunOutcome::Completed);
                // Context threading: `test` saw `build`'s summary and files, not more.
                let test_req = &agents.requests_for("test")[0];
                assert_eq!(test_req.context.dependencies.len(), 1);
                assert_eq!(test_req.context.dependencies[0].summary, "build: done");
                assert_eq!(test_req.context.relevant_files, vec!["src/build.rs".to_owned()]);
                assert_eq!(test_req.context.step_index, 1);
                assert_eq!(test_req.context.total_steps, 2);
                // Sealed and verifying; the plan log records the approval with its digest.
                verify_all(&b.store).await;
                let entries = b.store.entries(AuditLogId::Plan { plan_id }).await.unwrap();
                let approved = entries.iter().find(|e| e.kind == "plan.approved").unwrap();
                assert_eq!(approved.data["digest"], json!(plan.digest()));
                let exec_entries = b.store.entries(orca_services::ExecutionService::log(plan_id, exec)).await.unwrap();
                let kinds: Vec<&str> = exec_entries.iter().map(|e| e.kind.as_str()).collect();
                assert!(kinds.contains(&"task.attempt.started") && kinds.contains(&"task.attempt.completed") && kinds.contains(&"execution.completed"), "{kinds:?}");
                // Causal chain: the attempt hangs under the execution's start, its end under it.
                let attempt = exec_entries.iter().find(|e| e.kind == "task.attempt.started").unwrap();
                assert_eq!(attempt.parent, Some(0));
                let done = exec_entries.iter().find(|e| e.kind == "task.attempt.completed").unwrap();
                assert_eq!(done.parent, Some(attempt.seq));
            }

            #[tokio::test]
            async fn request_changes_then_revise_then_approve() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.plan([PlannerAct::Build(vec![step("build", "coder")]), PlannerAct::Revise(Box::new(step("test", "tester")))]);
                let hitl = Arc::new(ScriptedHitl::new([("request_changes", Some("add tests")), ("Approve", None)]));
                let o = orca(b.store.clone(), agents, hitl.clone());
                let PlannerResponse::Plan { plan_id, .. } = o.relay().invoke("feature").await.unwrap().outcome else { panic!() };
                let outcome = o.relay().approval_loop(plan_id, hitl.as_ref(), "alice").await.unwrap();
                let ApprovalOutcome::Approved(plan) = outcome else { panic!("{outcome:?}") };
                assert_eq!(plan.content().steps.len(), 2);
                assert_eq!(Plan::Approved(*plan).latest_feedback(), Some("add tests"));
                assert_eq!(hitl.asked().len(), 2);
            }

            #[tokio::test]
            async fn reject() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.plan([PlannerAct::Build(vec![step("build", "coder")])]);
                let hitl = Arc::new(ScriptedHitl::new([("reject", Some("not now"))]));
                let o = orca(b.store.clone(), agents, hitl.clone());
                let PlannerResponse::Plan { plan_id, .. } = o.relay().invoke("x").await.unwrap().outcome else { panic!() };
                assert!(matches!(o.relay().approval_loop(plan_id, hitl.as_ref(), "a").await.unwrap(), ApprovalOutcome::Rejected(_)));
                assert_eq!(o.planning().plan(plan_id).await.unwrap().stage(), PlanStage::Rejected);
                // A rejected plan cannot be executed.
                assert!(matches!(o.executions().create(plan_id).await, Err(ServiceError::PlanStage { .. })));
            }

            #[tokio::test]
            async fn fail_then_automatic_retry_succeeds() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("build", [Act::Fail("flaky"), Act::Succeed("ok")]);
                let o = orca(b.store.clone(), agents.clone(), Arc::new(NoHuman));
                let plan = approved_plan(&o, vec![step("build", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let report = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert_eq!(report.outcome, RunOutcome::Completed);
                let reqs = agents.requests_for("build");
                assert_eq!(reqs.len(), 2);
                assert_eq!(reqs[1].attempt, 2);
                assert_eq!(reqs[1].context.previous_attempts.len(), 1);
                assert!(reqs[1].context.previous_attempts[0].error.contains("flaky"));
            }

            #[tokio::test]
            async fn fail_then_human_retry_with_guidance() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("build", [Act::Fail("e1"), Act::Fail("e2"), Act::Succeed("ok")]);
                let hitl = Arc::new(ScriptedHitl::new([("retry", Some("use the other port"))]));
                let o = orca(b.store.clone(), agents.clone(), hitl.clone());
                let plan = approved_plan(&o, vec![step("build", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let report = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert_eq!(report.outcome, RunOutcome::Completed);
                let reqs = agents.requests_for("build");
                assert_eq!(reqs.len(), 3);
                let last = &reqs[2].context.previous_attempts;
                assert_eq!(last.last().unwrap().guidance.as_deref(), Some("use the other port"));
                assert_eq!(hitl.asked()[0].touchpoint, orca_core::Touchpoint::Deviation);
                verify_all(&b.store).await;
            }

            #[tokio::test]
            async fn fail_then_replan_runs_the_new_plan() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("build", [Act::Fail("e1"), Act::Fail("e2")]);
                agents.plan([PlannerAct::Build(vec![step("fix", "coder")])]);
                let hitl = Arc::new(ScriptedHitl::new([("replan", Some("try another way")), ("approve", None)]));
                let o = orca(b.store.clone(), agents.clone(), hitl.clone());
                let plan = approved_plan(&o, vec![step("prep", "coder"), step("build", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let report = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                let RunOutcome::Replanned { plan_id: new_plan, execution_id: Some(new_exec) } = report.outcome else { panic!("{report:?}") };
                let new = o.planning().plan(new_plan).await.unwrap();
                assert_eq!(new.supersedes(), Some(plan));
                assert_eq!(new.stage(), PlanStage::Approved);
                let old = o.executions().get(exec).await.unwrap().execution.value;
                let Execution::Failed(f) = old else { panic!() };
                assert_eq!(f.replanned_as, Some(new_plan));
                let report = o.runner(config(), Arc::new(Quiet)).run(new_exec, CancellationToken::new()).await.unwrap();
                assert_eq!(report.outcome, RunOutcome::Completed);
                verify_all(&b.store).await;
            }

            #[tokio::test]
            async fn two_final_failures_are_decided_one_at_a_time() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("a", [Act::Fail("a1"), Act::Fail("a2"), Act::Succeed("ok")]);
                agents.script("b", [Act::Fail("b1"), Act::Fail("b2"), Act::Succeed("ok")]);
                let hitl = Arc::new(ScriptedHitl::new([("retry", Some("ga")), ("retry", Some("gb"))]));
                let o = orca(b.store.clone(), agents.clone(), hitl.clone());
                let root = |n: &str| step(n, "coder").with_depends_on([]);
                let plan = approved_plan(&o, vec![root("a"), root("b")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let report = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert_eq!(report.outcome, RunOutcome::Completed);
                assert_eq!(hitl.asked().len(), 2);
                verify_all(&b.store).await;
            }

            #[tokio::test]
            async fn fail_then_stop() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("build", [Act::Fail("e1"), Act::Fail("e2")]);
                let hitl = Arc::new(ScriptedHitl::new([("stop", None)]));
                let o = orca(b.store.clone(), agents, hitl);
                let plan = approved_plan(&o, vec![step("build", "coder"), step("after", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let report = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert!(matches!(report.outcome, RunOutcome::Stopped { .. }));
                let t = tasks(&o, exec).await;
                assert_eq!(t[0].status(), TaskStatus::Failed);
                assert_eq!(t[1].status(), TaskStatus::Pending);
                verify_all(&b.store).await;
            }

            #[tokio::test]
            async fn skip_policy_finishes_independent_branches() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("a", [Act::Fail("e1"), Act::Fail("e2")]);
                let o = orca(b.store.clone(), agents, Arc::new(NoHuman));
                let plan = approved_plan(&o, vec![
                    step("a", "coder").with_depends_on([]),
                    step("a2", "coder").with_depends_on([id("a")]),
                    step("a3", "coder").with_depends_on([id("a2")]),
                    step("b", "coder").with_depends_on([]),
                    step("b2", "coder").with_depends_on([id("b")]),
                ]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let mut c = config();
                c.on_failure = FailurePolicy::Skip;
                let report = o.runner(c, Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert!(matches!(report.outcome, RunOutcome::Failed { .. }), "{report:?}");
                let st: Vec<TaskStatus> = tasks(&o, exec).await.iter().map(Task::status).collect();
                assert_eq!(st, [TaskStatus::Failed, TaskStatus::Skipped, TaskStatus::Skipped, TaskStatus::Completed, TaskStatus::Completed]);
            }

            #[tokio::test]
            async fn stop_policy_ends_failed() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("a", [Act::Fail("e1"), Act::Fail("e2")]);
                let o = orca(b.store.clone(), agents, Arc::new(NoHuman));
                let plan = approved_plan(&o, vec![step("a", "coder"), step("b", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let mut c = config();
                c.on_failure = FailurePolicy::Stop;
                let report = o.runner(c, Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert!(matches!(report.outcome, RunOutcome::Failed { .. }));
                assert_eq!(tasks(&o, exec).await[1].status(), TaskStatus::Pending);
            }

            #[tokio::test]
            async fn interruption_question_answered_then_retried() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("build", [Act::Interrupt("which database?"), Act::Succeed("ok")]);
                let hitl = Arc::new(ScriptedHitl::new([("answer", Some("postgres"))]));
                let o = orca(b.store.clone(), agents.clone(), hitl.clone());
                let plan = approved_plan(&o, vec![step("build", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let report = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert_eq!(report.outcome, RunOutcome::Completed);
                assert_eq!(hitl.asked()[0].touchpoint, orca_core::Touchpoint::Interruption);
                let reqs = agents.requests_for("build");
                let prev = &reqs[1].context.previous_attempts[0];
                assert!(prev.error.contains("which database?"));
                assert!(prev.guidance.as_deref().unwrap().contains("postgres"));
            }

            #[tokio::test]
            async fn waiting_for_a_human_is_durable_and_decide_continues() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("build", [Act::Fail("e1"), Act::Fail("e2"), Act::Succeed("ok")]);
                let o = orca(b.store.clone(), agents.clone(), Arc::new(NoHuman));
                let plan = approved_plan(&o, vec![step("build", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let report = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                let RunOutcome::AwaitingDecision { request } = report.outcome else { panic!("{report:?}") };
                assert!(matches!(request, DecisionRequest::Deviation { .. }));
                // "Another process": fresh services over the same store.
                let o2 = orca(b.store.clone(), agents.clone(), Arc::new(NoHuman));
                let snap = o2.executions().get(exec).await.unwrap();
                assert!(snap.execution.value.decision().is_some());
                // A wrong answer is refused and changes nothing.
                assert!(o2.executions().decide(exec, Decision::Answer { text: "x".into() }, "bob").await.is_err());
                o2.executions().decide(exec, Decision::Retry { guidance: Some("g".into()) }, "bob").await.unwrap();
                let report = o2.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert_eq!(report.outcome, RunOutcome::Completed);
                verify_all(&b.store).await;
            }

            #[tokio::test]
            async fn cancellation_before_start() {
                let b = backend().await;
                let o = orca(b.store.clone(), ScriptedAgents::new(), Arc::new(NoHuman));
                let plan = approved_plan(&o, vec![step("a", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                o.executions().stop(exec, "alice", Some("not today".into())).await.unwrap();
                let report = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert_eq!(report.outcome, RunOutcome::Stopped { reason: Some("not today".into()) });
                assert_eq!(tasks(&o, exec).await[0].status(), TaskStatus::Pending);
            }

            #[tokio::test]
            async fn cancellation_mid_run_reaches_the_agent_call() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("a", [Act::Hang]);
                let o = orca(b.store.clone(), agents.clone(), Arc::new(NoHuman));
                let plan = approved_plan(&o, vec![step("a", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let cancel = CancellationToken::new();
                let runner = o.runner(config(), Arc::new(Quiet));
                let handle = tokio::spawn({ let cancel = cancel.clone(); async move { runner.run(exec, cancel).await } });
                wait_for(|| agents.max_running.load(std::sync::atomic::Ordering::SeqCst) == 1).await;
                cancel.cancel();
                cancel.cancel(); // repeated: harmless
                let report = handle.await.unwrap().unwrap();
                // Cancelling interrupts: the attempt is recorded interrupted (abandoned, not
                // counted), the execution stays resumable.
                assert_eq!(report.outcome, RunOutcome::Interrupted { steps: vec![orca_core::StepId::parse("a").unwrap()] });
                let t = tasks(&o, exec).await;
                let Task::Failed(f) = &t[0] else { panic!("{t:?}") };
                assert!(f.was_abandoned(), "{f:?}");
                assert_eq!(o.executions().header(exec).await.unwrap().value.stage(), orca_core::ExecutionStage::Running);
                // Cancelling for good (`exec cancel`) is a stop: a no-op twice, and running
                // again reports the outcome.
                o.executions().stop(exec, "alice", None).await.unwrap();
                o.executions().stop(exec, "alice", None).await.unwrap();
                let again = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert!(matches!(again.outcome, RunOutcome::Stopped { .. }));
                verify_all(&b.store).await;
            }

            /// Ctrl-C while the human is being asked for a decision: the run is interrupted,
            /// the decision stays pending, the execution resumable.
            #[tokio::test]
            async fn cancellation_at_the_decision_prompt_interrupts() {
                struct Silent;
                #[async_trait::async_trait]
                impl orca_services::Hitl for Silent {
                    async fn decide(&self, _: &orca_core::TwoQuestion) -> Option<orca_core::HumanAnswer> {
                        std::future::pending().await
                    }
                    async fn ask_text(&self, _: &orca_core::AgentId, _: &str) -> Option<String> {
                        None
                    }
                }
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("a", [Act::Fail("no"), Act::Fail("no")]);
                let o = orca(b.store.clone(), agents.clone(), Arc::new(Silent));
                let plan = approved_plan(&o, vec![step("a", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let cancel = CancellationToken::new();
                let runner = o.runner(config(), Arc::new(Quiet));
                let handle = tokio::spawn({ let cancel = cancel.clone(); async move { runner.run(exec, cancel).await } });
                wait_for(|| agents.requests_for("a").len() == 2).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                cancel.cancel();
                let report = tokio::time::timeout(Duration::from_secs(10), handle).await.unwrap().unwrap().unwrap();
                assert_eq!(report.outcome, RunOutcome::Interrupted { steps: vec![] });
                let header = o.executions().header(exec).await.unwrap().value;
                assert!(header.decision().is_some(), "the decision stays pending");
                assert_eq!(header.stage(), orca_core::ExecutionStage::Running);
                verify_all(&b.store).await;
            }

            #[tokio::test]
            async fn stop_from_another_service_instance_cancels_in_flight_calls() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("a", [Act::Hang]);
                let o = orca(b.store.clone(), agents.clone(), Arc::new(NoHuman));
                let plan = approved_plan(&o, vec![step("a", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let runner = o.runner(config(), Arc::new(Quiet));
                let handle = tokio::spawn(async move { runner.run(exec, CancellationToken::new()).await });
                wait_for(|| agents.max_running.load(std::sync::atomic::Ordering::SeqCst) == 1).await;
                let other = orca(b.store.clone(), ScriptedAgents::new(), Arc::new(NoHuman));
                other.executions().stop(exec, "bob", Some("enough".into())).await.unwrap();
                let report = tokio::time::timeout(Duration::from_secs(10), handle).await.unwrap().unwrap().unwrap();
                assert_eq!(report.outcome, RunOutcome::Stopped { reason: Some("enough".into()) });
            }

            #[tokio::test]
            async fn cancellation_after_completion_changes_nothing() {
                let b = backend().await;
                let o = orca(b.store.clone(), ScriptedAgents::new(), Arc::new(NoHuman));
                let plan = approved_plan(&o, vec![step("a", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let report = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert_eq!(report.outcome, RunOutcome::Completed);
                assert!(o.executions().stop(exec, "alice", None).await.is_err());
                assert_eq!(o.executions().get(exec).await.unwrap().execution.value.stage(), ExecutionStage::Completed);
            }

            #[tokio::test]
            async fn crash_then_resume_reruns_the_abandoned_attempt() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("b", [Act::Hang, Act::Succeed("second time")]);
                let o = orca(b.store.clone(), agents.clone(), Arc::new(NoHuman));
                let plan = approved_plan(&o, vec![step("a", "coder"), step("b", "coder"), step("c", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let runner = o.runner(config(), Arc::new(Quiet));
                let handle = tokio::spawn(async move { runner.run(exec, CancellationToken::new()).await });
                wait_for(|| agents.requests_for("b").len() == 1).await;
                handle.abort(); // the "process" dies: no cleanup runs
                let _ = handle.await;
                assert_eq!(tasks(&o, exec).await[1].status(), TaskStatus::Running);
                let report = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert_eq!(report.outcome, RunOutcome::Completed);
                let t = tasks(&o, exec).await;
                let Task::Completed(done) = &t[1] else { panic!() };
                assert!(matches!(done.attempts[0].outcome, AttemptOutcome::Abandoned { .. }));
                assert_eq!(agents.requests_for("a").len(), 1, "completed work is not redone");
                verify_all(&b.store).await;
            }

            #[tokio::test]
            async fn a_live_lease_holder_excludes_a_second_runner() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("a", [Act::Slow(Duration::from_millis(300))]);
                let o = orca(b.store.clone(), agents.clone(), Arc::new(NoHuman));
                let plan = approved_plan(&o, vec![step("a", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let runner = o.runner(config(), Arc::new(Quiet));
                let handle = tokio::spawn(async move { runner.run(exec, CancellationToken::new()).await });
                wait_for(|| agents.requests_for("a").len() == 1).await;
                let second = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await;
                assert!(matches!(second, Err(ServiceError::Store(orca_store::StoreError::LeaseHeld { .. }))), "{second:?}");
                assert_eq!(handle.await.unwrap().unwrap().outcome, RunOutcome::Completed);
                assert_eq!(agents.requests_for("a").len(), 1);
            }

            #[tokio::test]
            async fn locks_serialize_within_and_across_executions() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                for s in ["a", "b", "c"] {
                    agents.script(s, [Act::Slow(Duration::from_millis(40))]);
                }
                let o = orca(b.store.clone(), agents.clone(), Arc::new(NoHuman));
                let locked = |n: &str| step(n, "coder").with_depends_on([]).with_locks(["db"]);
                let plan = approved_plan(&o, vec![locked("a"), locked("b"), locked("c")]).await;
                let (_, e1) = o.executions().create(plan).await.unwrap();
                let (_, e2) = o.executions().create(plan).await.unwrap();
                let r1 = o.runner(config(), Arc::new(Quiet));
                let r2 = o.runner(config(), Arc::new(Quiet));
                let (x, y) = tokio::join!(r1.run(e1, CancellationToken::new()), r2.run(e2, CancellationToken::new()));
                assert_eq!(x.unwrap().outcome, RunOutcome::Completed);
                assert_eq!(y.unwrap().outcome, RunOutcome::Completed);
                assert_eq!(agents.max_concurrent_on("db"), 1);
            }

            #[tokio::test]
            async fn dag_branches_run_in_parallel() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                for s in ["a", "b", "c", "d"] {
                    agents.script(s, [Act::Slow(Duration::from_millis(100))]);
                }
                let o = orca(b.store.clone(), agents.clone(), Arc::new(NoHuman));
                let root = |n: &str| step(n, "coder").with_depends_on([]);
                let plan = approved_plan(&o, vec![root("a"), root("b"), root("c"), root("d"), step("join", "coder").with_depends_on([id("a"), id("b"), id("c"), id("d")])]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let report = o.runner(config(), Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert_eq!(report.outcome, RunOutcome::Completed);
                assert_eq!(agents.max_running.load(std::sync::atomic::Ordering::SeqCst), 4);
                assert_eq!(agents.requests_for("join")[0].context.dependencies.len(), 4);
            }

            #[tokio::test]
            async fn budget_exceeded_is_a_failure_for_the_deviation_decision() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("a", [Act::Spend(5_000)]);
                let o = orca(b.store.clone(), agents, Arc::new(NoHuman));
                let plan = approved_plan(&o, vec![step("a", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let mut c = config();
                c.task_budget.max_tokens = Some(1_000);
                let report = o.runner(c, Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                let RunOutcome::AwaitingDecision { request: DecisionRequest::Deviation { failure, attempts, .. } } = report.outcome else { panic!("{report:?}") };
                assert_eq!(failure.code, ErrorCode::BudgetExceeded);
                assert_eq!(attempts, 1, "budget failures are not retried automatically");
            }

            #[tokio::test]
            async fn an_exhausted_execution_budget_fails_closed() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("a", [Act::Spend(5_000)]);
                let o = orca(b.store.clone(), agents.clone(), Arc::new(NoHuman));
                let plan = approved_plan(&o, vec![step("a", "coder"), step("b", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let mut c = config();
                c.execution_budget.max_tokens = Some(1_000);
                let report = o.runner(c, Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                let RunOutcome::AwaitingDecision { request: DecisionRequest::Deviation { step_id, failure, .. } } = report.outcome else { panic!("{report:?}") };
                assert_eq!(step_id.as_str(), "b");
                assert_eq!(failure.code, ErrorCode::BudgetExceeded);
                assert!(agents.requests_for("b").is_empty(), "the agent is never called once the budget is spent");
            }

            #[tokio::test]
            async fn forbidden_tool_call_is_refused_and_audited() {
                let b = backend().await;
                let agents = ScriptedAgents::new();
                agents.script("a", [Act::CallTool("orca_plan_submit", json!({ "plan_id": "plan_x" }))]);
                let o = orca(b.store.clone(), agents, Arc::new(NoHuman));
                let plan = approved_plan(&o, vec![step("a", "coder")]).await;
                let (_, exec) = o.executions().create(plan).await.unwrap();
                let mut c = config();
                c.on_failure = FailurePolicy::Stop;
                c.max_attempts = 1;
                let report = o.runner(c, Arc::new(Quiet)).run(exec, CancellationToken::new()).await.unwrap();
                assert!(matches!(report.outcome, RunOutcome::Failed { .. }), "{report:?}");
                let entries = b.store.entries(orca_services::ExecutionService::log(plan, exec)).await.unwrap();
                let refused = entries.iter().find(|e| e.kind == "tool.refused").unwrap();
                assert_eq!(refused.data["tool"], "orca_plan_submit");
                // Under the attempt (which is the agent call).
                let call = entries.iter().find(|e| e.kind == "task.attempt.started").unwrap();
                assert_eq!(refused.parent, Some(call.seq));
            }

            #[tokio::test]
            async fn submit_reports_every_problem_and_keeps_the_draft() {
                let b = backend().await;
                let o = orca(b.store.clone(), ScriptedAgents::new(), Arc::new(NoHuman));
                let draft = o.planning().create_draft(None, None).await.unwrap();
                let err = o.planning().submit(draft.id()).await.unwrap_err();
                let ServiceError::Invalid(problems) = err else { panic!() };
                assert_eq!(problems.len(), 5, "{problems:?}");
                assert_eq!(o.planning().plan(draft.id()).await.unwrap().stage(), PlanStage::Draft);
            }
        }
    )*};
}

flows!(memory, file, postgres);

async fn wait_for(mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not reached in 5 s");
}
