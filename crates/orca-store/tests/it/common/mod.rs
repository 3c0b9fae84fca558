//! Fixtures shared by the integration tests.

#![allow(dead_code, unreachable_pub, reason = "each test file uses a part")]
#![expect(
    clippy::unwrap_used,
    reason = "test fixtures: a failed assumption is a failed test"
)]

use std::collections::BTreeSet;

use orca_core::{
    AgentId, ApprovedPlan, ContextLimits, DraftPlan, ErrorCode, Execution, ExecutionId, Holder,
    PendingExecution, Plan, PlanId, Step, StepId, Task, TaskFailure, build_context,
};
use time::OffsetDateTime;

pub fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

pub fn draft(goal: &str) -> DraftPlan {
    let mut d = DraftPlan::new(PlanId::new(), now());
    d.set_goal(goal);
    d.set_assumptions(vec!["a POSIX shell".into()]);
    d.set_risks(vec!["none".into()]);
    d.set_verification(vec!["tests pass".into()]);
    d
}

pub fn approved(goal: &str, steps: usize) -> ApprovedPlan {
    let mut d = draft(goal);
    for i in 0..steps {
        let id = StepId::parse(&format!("s{i}")).unwrap();
        d.add_step(
            Step::new(id, AgentId::shell(), "step").with_command("true"),
            None,
        )
        .unwrap();
    }
    let agents: BTreeSet<AgentId> = [AgentId::shell()].into_iter().collect();
    d.submit(&agents, now())
        .unwrap()
        .approve("alice", None, now())
}

pub fn holder(tag: &str) -> Holder {
    Holder {
        pid: std::process::id(),
        host: "test-host".into(),
        token: format!("{tag}-{}", fastrand::u64(..)),
    }
}

pub fn new_execution(plan: &ApprovedPlan) -> (Execution, Vec<Task>) {
    let (pending, tasks) = PendingExecution::new(ExecutionId::new(), plan, now());
    (pending.into(), tasks)
}

/// The next state of a task in an endless pending → running → failed → running … cycle.
pub fn next_task(plan: &ApprovedPlan, tasks: &[Task], index: usize, holder: &Holder) -> Task {
    let ctx = || {
        build_context(
            plan.id(),
            plan.content(),
            index,
            tasks,
            &ContextLimits::default(),
        )
        .unwrap()
    };
    match tasks[index].clone() {
        Task::Pending(t) => t.start(ctx(), holder.clone(), now()).into(),
        Task::Running(t) => t
            .fail(TaskFailure::new(ErrorCode::AgentError, "boom"), now())
            .into(),
        Task::Failed(t) => t.retry(None, ctx(), holder.clone(), now()).into(),
        other => other,
    }
}

pub fn plan_of(p: &ApprovedPlan) -> Plan {
    p.clone().into()
}

/// A named test of a `harness = false` test binary (one that re-executes itself as a child).
pub type Test = fn(&tokio::runtime::Runtime);

/// Runs the tests whose name contains a command-line filter (every test without one), printing
/// as libtest does.
#[allow(clippy::print_stderr, reason = "a test harness reports on stderr")]
pub fn run_tests(rt: &tokio::runtime::Runtime, tests: &[(&str, Test)]) {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let mut ran = 0;
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        eprint!("test {name} ... ");
        test(rt);
        eprintln!("ok");
        ran += 1;
    }
    eprintln!("test result: ok. {ran} passed");
}
