//! Model test of the scheduler's state machine (ADR 0014): random plans with resource locks,
//! random agent outcomes (some slow, so attempts overlap), random failure policies and human
//! decisions. Inside the runner every loop checks the slot invariants (a `debug_assert`: no
//! task is both in flight and done, a retry or an abandoned step has failed, a lock wait is for
//! a pending or failed task); here, after each run, every transition of every task is counted
//! in the audit log against the stored records: each must be audited exactly once. The number
//! of missing and duplicated entries is printed (it must be 0).
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use orca_core::strategy;
use orca_core::{
    ApprovedPlan, AttemptOutcome, AuditKind, ExecutionStage, PlanContent, Task, TaskStatus,
};
use orca_services::{ExecutionService, FailurePolicy, Quiet, ScriptedHitl};
use orca_store::Store;
use proptest::prelude::*;
use support::*;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
struct Case {
    plan: ApprovedPlan,
    /// Per step: the outcome of each attempt.
    outcomes: Vec<Vec<u8>>,
    /// Per step: which of the two locks it takes (bit 0: `db`, bit 1: `net`).
    locks: Vec<u8>,
    policy: u8,
    decisions: Vec<u8>,
    concurrency: usize,
}

fn case() -> impl Strategy<Value = Case> {
    strategy::approved_plan(8).prop_flat_map(|plan| {
        let n = plan.content().steps.len();
        (
            Just(plan),
            prop::collection::vec(prop::collection::vec(0u8..12, 0..4), n),
            prop::collection::vec(0u8..4, n),
            0u8..3,
            prop::collection::vec(0u8..3, 0..4),
            1usize..4,
        )
            .prop_map(
                |(plan, outcomes, locks, policy, decisions, concurrency)| Case {
                    plan,
                    outcomes,
                    locks,
                    policy,
                    decisions,
                    concurrency,
                },
            )
    })
}

static MISSING_OR_DUPLICATED: AtomicUsize = AtomicUsize::new(0);
static TRANSITIONS: AtomicUsize = AtomicUsize::new(0);

fn with_locks(content: &PlanContent, locks: &[u8]) -> PlanContent {
    let mut content = content.clone();
    for (step, bits) in content.steps.iter_mut().zip(locks) {
        step.locks = [(1u8, "db"), (2, "net")]
            .iter()
            .filter(|(bit, _)| bits & bit != 0)
            .map(|(_, name)| (*name).to_owned())
            .collect();
    }
    content
}

async fn check(case: Case) {
    let store: Arc<dyn Store> = Arc::new(orca_store::MemoryStore::new());
    let agents = ScriptedAgents::new();
    for (step, outcomes) in case.plan.content().steps.iter().zip(&case.outcomes) {
        agents.script(
            step.id.as_str(),
            outcomes.iter().map(|o| match o {
                0..=4 => Act::Succeed("ok"),
                5..=6 => Act::Slow(Duration::from_millis(15)),
                7..=9 => Act::Fail("boom"),
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
    let o = orca(
        store.clone(),
        agents.clone(),
        Arc::new(ScriptedHitl::new(decisions)),
    );
    let content = with_locks(case.plan.content(), &case.locks);
    let proposal = o.planning().create_proposal(content, None).await.unwrap();
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
    o.runner(config, Arc::new(Quiet))
        .run(exec, CancellationToken::new())
        .await
        .unwrap();
    let snap = o.executions().get(exec).await.unwrap();
    let tasks: Vec<Task> = snap.task_values();
    let stage = snap.execution.value.stage();
    assert!(tasks.iter().all(|t| t.status() != TaskStatus::Running));
    for lock in ["db", "net"] {
        assert!(
            agents.max_concurrent_on(lock) <= 1,
            "lock {lock} overlapped"
        );
    }

    // Count the audit entries of each transition, per step, and compare with the records.
    let entries = store
        .entries(ExecutionService::log(plan.id(), exec))
        .await
        .unwrap();
    let mut seen: BTreeMap<(String, AuditKind), usize> = BTreeMap::new();
    for e in &entries {
        let Some(kind) = AuditKind::parse(&e.kind) else {
            continue;
        };
        let step = e
            .data
            .get("step_id")
            .and_then(|s| s.as_str())
            .unwrap_or("")
            .to_owned();
        *seen.entry((step, kind)).or_default() += 1;
    }
    let mut expected: BTreeMap<(String, AuditKind), usize> = BTreeMap::new();
    let mut expect = |step: &str, kind: AuditKind, n: usize| {
        if n > 0 {
            *expected.entry((step.to_owned(), kind)).or_default() += n;
        }
    };
    for t in &tasks {
        let step = t.step_id().as_str();
        let attempts = t.attempts();
        let count =
            |f: fn(&AttemptOutcome) -> bool| attempts.iter().filter(|a| f(&a.outcome)).count();
        expect(step, AuditKind::TaskAttemptStarted, attempts.len());
        expect(
            step,
            AuditKind::TaskAttemptCompleted,
            count(|o| matches!(o, AttemptOutcome::Succeeded)),
        );
        expect(
            step,
            AuditKind::TaskAttemptFailed,
            count(|o| matches!(o, AttemptOutcome::Failed { .. })),
        );
        expect(
            step,
            AuditKind::TaskAttemptInterrupted,
            count(|o| matches!(o, AttemptOutcome::Interrupted { .. })),
        );
        expect(
            step,
            AuditKind::TaskSkipped,
            usize::from(t.status() == TaskStatus::Skipped),
        );
    }
    expect("", AuditKind::ExecutionCreated, 1);
    expect("", AuditKind::ExecutionStarted, 1);
    expect(
        "",
        AuditKind::ExecutionCompleted,
        usize::from(stage == ExecutionStage::Completed),
    );
    expect(
        "",
        AuditKind::ExecutionFailed,
        usize::from(stage == ExecutionStage::Failed),
    );
    expect(
        "",
        AuditKind::ExecutionStopped,
        usize::from(stage == ExecutionStage::Stopped),
    );
    // Decisions: each asked one was answered and applied, except one still open.
    let open = usize::from(snap.execution.value.decision().is_some());
    let count_kind = |k: AuditKind| {
        seen.iter()
            .filter(|((_, kind), _)| *kind == k)
            .map(|(_, n)| n)
            .sum::<usize>()
    };
    let applied = count_kind(AuditKind::DecisionApplied);
    let requested = count_kind(AuditKind::DecisionRequested);
    let answered = count_kind(AuditKind::DecisionAnswered);
    let mut off = requested.abs_diff(applied + open) + answered.abs_diff(applied);
    for (key, n) in &expected {
        off += n.abs_diff(seen.get(key).copied().unwrap_or(0));
        TRANSITIONS.fetch_add(*n, Ordering::Relaxed);
    }
    for (key, n) in &seen {
        if !expected.contains_key(key)
            && !matches!(
                key.1,
                AuditKind::DecisionRequested
                    | AuditKind::DecisionAnswered
                    | AuditKind::DecisionApplied
                    | AuditKind::PolicyApplied
            )
        {
            off += n;
        }
    }
    MISSING_OR_DUPLICATED.fetch_add(off, Ordering::Relaxed);
    assert_eq!(
        off, 0,
        "audit entries off by {off}: expected {expected:?}, seen {seen:?}"
    );
    for log in store.audit_logs().await.unwrap() {
        assert!(store.verify(log).await.unwrap().is_intact());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_transition_is_audited_exactly_once(case in case()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(check(case));
    }
}

#[test]
fn zz_report_counts() {
    // Printed for the record; the proptest above asserts 0 per case.
    eprintln!(
        "slots model: {} transitions checked so far, {} audit entries missing or duplicated",
        TRANSITIONS.load(Ordering::Relaxed),
        MISSING_OR_DUPLICATED.load(Ordering::Relaxed)
    );
}
