//! A failed Replan is not silent: with no planner configured, or a planner answer
//! that is not a plan, the run ends with a clear error, the execution is NOT sealed nor failed,
//! no plan is left behind when there is no planner, and the decision is open again: retry,
//! stop or a later replan still work.
#![expect(clippy::unwrap_used, reason = "tests")]
#![expect(clippy::print_stderr, reason = "tests print the counts they check")]

use crate::support;

use std::sync::Arc;

use orca_core::{Decision, ExecutionStage, PlanId};
use orca_services::{Orca, Quiet, RunOutcome, ScriptedHitl, ServiceError};
use orca_store::{AuditLogId, Store};
use support::*;
use tokio_util::sync::CancellationToken;

/// Runs until the replan fails; checks what must hold after a failed replan; returns the cause.
async fn failed_replan(
    o: &Orca,
    store: &Arc<dyn Store>,
    plan: PlanId,
) -> (orca_core::ExecutionId, String) {
    let (_, exec) = o.executions().create(plan).await.unwrap();
    let err = o
        .runner(config(), Arc::new(Quiet))
        .run(exec, CancellationToken::new())
        .await
        .unwrap_err();
    let ServiceError::ReplanFailed { execution, cause } = &err else {
        panic!("expected ReplanFailed, got {err:?}");
    };
    assert_eq!(*execution, exec);
    let header = o.executions().header(exec).await.unwrap().value;
    assert_eq!(
        header.stage(),
        ExecutionStage::Running,
        "the execution was ended"
    );
    let pending = header.decision().expect("the decision is not open");
    assert!(
        pending.answer.is_none(),
        "the decision stays answered: {pending:?}"
    );
    let log = AuditLogId::Execution {
        plan_id: plan,
        execution_id: exec,
    };
    let kinds: Vec<String> = store
        .entries(log)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    let sealed = kinds.iter().filter(|k| k.contains("seal")).count();
    let applied = kinds.iter().filter(|k| *k == "decision.applied").count();
    let failed = kinds.iter().filter(|k| *k == "replan.failed").count();
    eprintln!(
        "after a failed replan: seal entries {sealed}, decision.applied {applied}, replan.failed {failed}"
    );
    assert_eq!((sealed, applied, failed), (0, 0, 1), "{kinds:?}");
    assert!(store.verify(log).await.unwrap().is_intact());
    (exec, cause.clone())
}

#[tokio::test]
async fn replan_without_a_planner_reopens_the_decision_and_retry_still_works() {
    let store: Arc<dyn Store> = Arc::new(orca_store::MemoryStore::new());
    let agents = ScriptedAgents::without_planner();
    agents.script(
        "build",
        [Act::Fail("e1"), Act::Fail("e2"), Act::Succeed("ok")],
    );
    let hitl = Arc::new(ScriptedHitl::new([("replan", None)]));
    let o = orca(store.clone(), agents, hitl);
    let plan = approved_plan(&o, vec![step("build", "coder")]).await;
    let (exec, cause) = failed_replan(&o, &store, plan).await;
    assert!(cause.contains("no planner agent is configured"), "{cause}");
    let plans = o.planning().list().await.unwrap().items.len();
    eprintln!("plans after the failed replan: {plans}");
    assert_eq!(plans, 1, "an empty draft was left behind");
    // The decision is open: answer retry and resume.
    o.executions()
        .decide(exec, Decision::Retry { guidance: None }, "tester")
        .await
        .unwrap();
    let report = o
        .runner(config(), Arc::new(Quiet))
        .run(exec, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
}

#[tokio::test]
async fn replan_with_an_answer_that_is_not_a_plan_keeps_the_decision_and_a_later_replan_works() {
    let store: Arc<dyn Store> = Arc::new(orca_store::MemoryStore::new());
    let agents = ScriptedAgents::new();
    agents.script("build", [Act::Fail("e1"), Act::Fail("e2")]);
    agents.plan([
        PlannerAct::Answer("i have no idea"),
        PlannerAct::Build(vec![step("fix", "coder")]),
    ]);
    let hitl = Arc::new(ScriptedHitl::new([("replan", None), ("approve", None)]));
    let o = orca(store.clone(), agents, hitl);
    let plan = approved_plan(&o, vec![step("build", "coder")]).await;
    let (exec, cause) = failed_replan(&o, &store, plan).await;
    assert!(cause.contains("i have no idea"), "{cause}");
    // A later replan works.
    o.executions()
        .decide(exec, Decision::Replan { guidance: None }, "tester")
        .await
        .unwrap();
    let report = o
        .runner(config(), Arc::new(Quiet))
        .run(exec, CancellationToken::new())
        .await
        .unwrap();
    assert!(
        matches!(
            report.outcome,
            RunOutcome::Replanned {
                execution_id: Some(_),
                ..
            }
        ),
        "{report:?}"
    );
}

#[tokio::test]
async fn stop_still_works_after_a_failed_replan() {
    let store: Arc<dyn Store> = Arc::new(orca_store::MemoryStore::new());
    let agents = ScriptedAgents::without_planner();
    agents.script("build", [Act::Fail("e1"), Act::Fail("e2")]);
    let hitl = Arc::new(ScriptedHitl::new([("replan", None)]));
    let o = orca(store.clone(), agents, hitl);
    let plan = approved_plan(&o, vec![step("build", "coder")]).await;
    let (exec, _) = failed_replan(&o, &store, plan).await;
    o.executions()
        .decide(exec, Decision::Stop, "tester")
        .await
        .unwrap();
    let report = o
        .runner(config(), Arc::new(Quiet))
        .run(exec, CancellationToken::new())
        .await
        .unwrap();
    assert!(
        matches!(report.outcome, RunOutcome::Stopped { .. }),
        "{report:?}"
    );
}
