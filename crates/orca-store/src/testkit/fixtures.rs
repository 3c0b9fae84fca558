//! Plans, executions and holders for store tests: small, valid, and new at every call.

#![expect(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    reason = "test support: a failed assumption is a failed test"
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

/// A stored plan of `steps` steps and its execution, started: the plan, the tasks as created,
/// the running header and the header's revision.
pub async fn running_execution(
    store: &dyn crate::Store,
    goal: &str,
    steps: usize,
) -> (
    ApprovedPlan,
    Vec<Task>,
    orca_core::RunningExecution,
    crate::Revision,
) {
    let plan = approved(goal, steps);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    let Execution::Pending(pending) = exec else {
        panic!("a new execution is pending");
    };
    let running = pending.start(now());
    let at = store
        .update_execution(&Execution::Running(running.clone()), crate::Revision::FIRST)
        .await
        .unwrap();
    (plan, tasks, running, at)
}
