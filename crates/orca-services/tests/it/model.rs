//! Model-based test: random plans, random agent outcomes and random human decisions never
//! break an invariant of the runner — on every store backend: memory, files, and a throwaway
//! PostgreSQL (one server per test run, a fresh database per case; fewer cases there, each
//! case costs a `CREATE DATABASE` and a migration).
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::sync::Arc;
use std::time::Instant;

use orca_core::strategy;
use orca_core::{ApprovedPlan, ExecutionStage, Task, TaskStatus, graph};
use orca_services::{FailurePolicy, Quiet, RunOutcome, ScriptedHitl};
use orca_store::Store;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use support::*;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
struct Case {
    plan: ApprovedPlan,
    /// Per step: the outcome of each attempt (true = succeed).
    outcomes: Vec<Vec<u8>>,
    policy: u8,
    decisions: Vec<u8>,
    concurrency: usize,
}

fn case() -> impl Strategy<Value = Case> {
    strategy::approved_plan(8).prop_flat_map(|plan| {
        let n = plan.content().steps.len();
        (
            Just(plan),
            prop::collection::vec(prop::collection::vec(0u8..10, 0..4), n),
            0u8..3,
            prop::collection::vec(0u8..3, 0..4),
            1usize..4,
        )
            .prop_map(|(plan, outcomes, policy, decisions, concurrency)| Case {
                plan,
                outcomes,
                policy,
                decisions,
                concurrency,
            })
    })
}

#[derive(Debug, Clone, Copy)]
enum Backend {
    Memory,
    File,
    Postgres,
}

/// A fresh store of `backend` (the tempdir, if any, lives as long as it is used).
async fn open(backend: Backend) -> (Arc<dyn Store>, Option<tempfile::TempDir>) {
    match backend {
        Backend::Memory => (Arc::new(orca_store::MemoryStore::new()), None),
        Backend::File => {
            let dir = tempfile::tempdir().unwrap();
            let store = orca_store::FileStore::open(dir.path()).unwrap();
            (Arc::new(store), Some(dir))
        }
        Backend::Postgres => {
            let (_, store) = crate::support::postgres_store().await;
            (Arc::new(store), None)
        }
    }
}

async fn check(case: Case, backend: Backend) {
    let (store, _dir) = open(backend).await;
    let agents = ScriptedAgents::new();
    for (step, outcomes) in case.plan.content().steps.iter().zip(&case.outcomes) {
        agents.script(
            step.id.as_str(),
            outcomes.iter().map(|o| match o {
                0..=5 => Act::Succeed("ok"),
                6..=8 => Act::Fail("boom"),
                _ => Act::Interrupt("what now?"),
            }),
        );
    }
    let decisions: Vec<(&'static str, Option<&'static str>)> = case
        .decisions
        .iter()
        .map(|d| match d {
            0 => ("retry", Some("try again")),
            1 => ("stop", None),
            _ => ("answer", Some("42")),
        })
        .collect();
    let hitl = Arc::new(ScriptedHitl::new(decisions));
    // The generated plans use `shell` and `coder`; the scripted port knows both.
    let o = orca(store.clone(), agents.clone(), hitl);
    let proposal = o
        .planning()
        .create_proposal(case.plan.content().clone(), None)
        .await
        .unwrap();
    let plan = o
        .planning()
        .approve(proposal.id(), "model", None)
        .await
        .unwrap();
    let (_, exec) = o.executions().create(plan.id()).await.unwrap();
    let mut config = config();
    config.concurrency = case.concurrency;
    config.on_failure = match case.policy {
        0 => FailurePolicy::Ask,
        1 => FailurePolicy::Stop,
        _ => FailurePolicy::Skip,
    };
    let report = o
        .runner(config, Arc::new(Quiet))
        .run(exec, CancellationToken::new())
        .await
        .unwrap();
    let snap = o.executions().get(exec).await.unwrap();
    let tasks: Vec<Task> = snap.task_values();
    let stage = snap.execution.value.stage();

    // The report agrees with the store.
    assert_eq!(report.outcome.stage(), stage, "{report:?}");
    // Nothing is left running.
    assert!(
        tasks.iter().all(|t| t.status() != TaskStatus::Running),
        "{tasks:?}"
    );
    // Completed iff every task completed.
    let all_done = tasks.iter().all(|t| t.status() == TaskStatus::Completed);
    assert_eq!(stage == ExecutionStage::Completed, all_done);
    // Only a waiting run is still `running`, and it has a pending decision.
    if stage == ExecutionStage::Running {
        assert!(matches!(
            report.outcome,
            RunOutcome::AwaitingDecision { .. }
        ));
        assert!(snap.execution.value.decision().is_some());
    }
    // No step started before all its dependencies had succeeded.
    let deps = graph::dependency_indices(&plan.content().steps);
    let ended = agents.ended.lock().unwrap().clone();
    let requests = agents.requests.lock().unwrap().clone();
    for r in &requests {
        let i = plan.content().position(&r.step.id).unwrap();
        for d in &deps[i] {
            let dep = &plan.content().steps[*d].id;
            assert!(
                ended.iter().any(|(s, ok)| s == dep && *ok),
                "{} ran before {dep} succeeded",
                r.step.id
            );
        }
    }
    // A step ran at most (attempts allowed) × (human retries + 1) times.
    let human = case.decisions.len() + 1;
    for step in &plan.content().steps {
        let runs = requests.iter().filter(|r| r.step.id == step.id).count();
        let limit = step.max_attempts.unwrap_or(2) as usize * human;
        assert!(
            runs <= limit,
            "{} ran {runs} times (limit {limit})",
            step.id
        );
    }
    // Skipped tasks have an abandoned ancestor.
    for (i, t) in tasks.iter().enumerate() {
        if t.status() == TaskStatus::Skipped {
            let anc = graph::ancestors(&deps, i);
            assert!(anc.iter().any(|a| tasks[*a].status() == TaskStatus::Failed));
        }
    }
    // The audit logs verify.
    for log in store.audit_logs().await.unwrap() {
        assert!(store.verify(log).await.unwrap().is_intact());
    }
}

/// Runs `cases` random cases on `backend` (failures are shrunk and saved in
/// `model.proptest-regressions`, which is replayed first), and prints what ran.
#[expect(clippy::print_stderr, reason = "tests print the counts they check")]
fn run(backend: Backend, cases: u32) {
    let config = ProptestConfig {
        cases,
        source_file: Some(file!()),
        ..ProptestConfig::default()
    };
    if matches!(backend, Backend::Postgres) {
        // Missing binaries fail here, once, with how to install them (not once per case).
        orca_testkit::postgres::Throwaway::shared().unwrap_or_else(|e| panic!("{e}"));
    }
    let mut runner = TestRunner::new(config);
    let started = Instant::now();
    let ran = std::sync::atomic::AtomicU32::new(0);
    let result = runner.run(&case(), |case| {
        ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(check(case, backend));
        Ok(())
    });
    let elapsed = started.elapsed();
    let ran = ran.into_inner();
    eprintln!(
        "model on {backend:?}: {ran} cases run ({cases} asked), {:.1} ms per case",
        elapsed.as_secs_f64() * 1000.0 / f64::from(ran.max(1))
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn the_runner_keeps_its_invariants_in_memory() {
    run(Backend::Memory, 48);
}

#[test]
fn the_runner_keeps_its_invariants_on_files() {
    run(Backend::File, 24);
}

#[test]
fn the_runner_keeps_its_invariants_on_postgres() {
    run(Backend::Postgres, 24);
}
