//! Rules every backend applies the same way: summaries, checks before writes, sorting. Public
//! so that backends in other crates (`orca-store-postgres`) apply exactly the same rules.

use orca_core::{Execution, ExecutionId, ExecutionStage, Plan, PlanStage, Task, TaskStatus};

use crate::error::StoreError;
use crate::port::{ExecutionSummary, PlanSummary, Revision};

pub fn plan_what(plan: &Plan) -> String {
    format!("plan {}", plan.id())
}

pub fn exec_what(id: ExecutionId) -> String {
    format!("execution {id}")
}

pub fn task_what(execution: ExecutionId, task: &Task) -> String {
    format!("task {} of {execution}", task.step_id())
}

/// The revision after `current`, refusing to wrap: a document at the last revision cannot
/// change again (nothing is written).
pub fn next_revision(what: &str, current: Revision) -> Result<Revision, StoreError> {
    current.checked_next().ok_or_else(|| {
        StoreError::Invalid(format!(
            "{what} is at revision {current}, the largest there is: it cannot change again"
        ))
    })
}

pub fn plan_summary(plan: &Plan, executions: usize) -> PlanSummary {
    PlanSummary {
        plan_id: plan.id(),
        goal: plan.content().goal.clone(),
        stage: plan.stage(),
        steps: plan.content().steps.len(),
        executions,
        created_at: plan.created_at(),
        supersedes: plan.supersedes(),
    }
}

pub fn execution_summary<'a>(
    execution: &Execution,
    tasks: impl IntoIterator<Item = &'a Task>,
) -> ExecutionSummary {
    let completed = tasks
        .into_iter()
        .filter(|t| t.status() == TaskStatus::Completed)
        .count();
    ExecutionSummary {
        execution_id: execution.id(),
        plan_id: execution.info().plan_id,
        stage: execution.stage(),
        completed,
        total: execution.info().steps.len(),
        awaiting_decision: execution.decision().is_some_and(|d| d.answer.is_none()),
        created_at: execution.info().created_at,
    }
}

/// Newest first: by creation time, then by id (UUIDv7 ids are time-ordered).
pub fn sort_plans(items: &mut [PlanSummary]) {
    items.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| b.plan_id.cmp(&a.plan_id))
    });
}

/// Newest first.
pub fn sort_executions(items: &mut [ExecutionSummary]) {
    items.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| b.execution_id.cmp(&a.execution_id))
    });
}

/// A plan may be replaced unless it is approved or rejected; its id cannot change.
pub fn check_plan_update(stored: &Plan, new: &Plan) -> Result<(), StoreError> {
    if matches!(stored.stage(), PlanStage::Approved | PlanStage::Rejected) {
        return Err(StoreError::Immutable(format!(
            "plan {} is {} and cannot change",
            stored.id(),
            stored.stage()
        )));
    }
    if stored.id() != new.id() {
        return Err(StoreError::Invalid(format!(
            "plan {} cannot be replaced by plan {}",
            stored.id(),
            new.id()
        )));
    }
    Ok(())
}

/// An execution header may be replaced unless terminal; ids, plan and steps cannot change.
pub fn check_execution_update(stored: &Execution, new: &Execution) -> Result<(), StoreError> {
    if stored.stage().is_terminal() {
        return Err(StoreError::Immutable(format!(
            "execution {} is {} and cannot change",
            stored.id(),
            stored.stage()
        )));
    }
    if stored.info() != new.info() {
        return Err(StoreError::Invalid(format!(
            "execution {}: the update changes its ids, plan or steps",
            stored.id()
        )));
    }
    Ok(())
}

/// The log an ending of `execution` seals; a header that has not ended is refused.
pub fn ending_log(execution: &Execution) -> Result<crate::AuditLogId, StoreError> {
    if !execution.stage().is_terminal() {
        return Err(StoreError::Invalid(format!(
            "execution {}: an ending needs a header that has ended, not one {}",
            execution.id(),
            execution.stage()
        )));
    }
    let info = execution.info();
    Ok(crate::AuditLogId::Execution {
        plan_id: info.plan_id,
        execution_id: info.id,
    })
}

/// Tasks of a terminal execution cannot change; the step must be one of the execution's.
pub fn check_task_update(
    execution: ExecutionId,
    stage: ExecutionStage,
    has_step: bool,
    task: &Task,
) -> Result<(), StoreError> {
    if stage.is_terminal() {
        return Err(StoreError::Immutable(format!(
            "execution {execution} is {stage}: task {} cannot change",
            task.step_id()
        )));
    }
    if !has_step {
        return Err(StoreError::NotFound {
            what: task_what(execution, task),
        });
    }
    Ok(())
}

/// The tasks given at creation are one per step, in plan order.
pub fn check_new_execution(execution: &Execution, tasks: &[Task]) -> Result<(), StoreError> {
    let steps = &execution.info().steps;
    if tasks.len() != steps.len() || tasks.iter().zip(steps).any(|(t, s)| t.step_id() != s) {
        return Err(StoreError::Invalid(format!(
            "execution {}: the tasks do not match its steps",
            execution.id()
        )));
    }
    Ok(())
}

/// Compare-and-swap: the revision after `stored` if it is still `expected`, else a conflict
/// naming `what` (nothing is written either way).
pub fn compare_and_next(
    what: impl Fn() -> String,
    expected: Revision,
    stored: Revision,
) -> Result<Revision, StoreError> {
    if stored != expected {
        return Err(conflict(what(), expected, stored));
    }
    next_revision(&what(), stored)
}

pub fn conflict(what: String, expected: Revision, found: Revision) -> StoreError {
    StoreError::Conflict {
        what,
        expected,
        found,
    }
}
