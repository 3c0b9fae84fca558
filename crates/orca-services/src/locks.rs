//! Who holds a resource lock, so a step waiting for one says for whom it waits ("waiting for
//! lock `site-out` held by exec_… step build"). The store's locks know no owner: the holder is
//! the running step whose plan names the lock, in this execution or another running one.

use orca_core::{ExecutionId, ExecutionStage, PlanContent, StepId, Task, TaskStatus};
use orca_store::Versioned;

use crate::error::Result;
use crate::execution::ExecutionService;

/// The step holding a resource lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    /// Its execution.
    pub execution: ExecutionId,
    /// The step.
    pub step: StepId,
}

/// The running step of `tasks` (in `plan` order) that names `resource` among its locks.
fn running_holder(
    execution: ExecutionId,
    plan: &PlanContent,
    tasks: &[Versioned<Task>],
    resource: &str,
) -> Option<LockHolder> {
    plan.steps
        .iter()
        .zip(tasks)
        .find(|(step, task)| {
            task.value.status() == TaskStatus::Running && step.locks.iter().any(|l| l == resource)
        })
        .map(|(step, _)| LockHolder {
            execution,
            step: step.id.clone(),
        })
}

/// Which lock of `locks` is held and by whom: first this run's own steps that hold locks
/// (`holding`: plan positions in flight or being started), then the
/// other running executions'. `None` when no holder is found (the lock was let go meanwhile,
/// or is held by something outside orca's records); the first lock is then named.
pub(crate) async fn find_holder(
    executions: &ExecutionService,
    own: (ExecutionId, &PlanContent, &[usize]),
    locks: &[String],
) -> Result<(String, Option<LockHolder>)> {
    let (own_id, own_plan, holding) = own;
    for resource in locks {
        let held = holding
            .iter()
            .filter_map(|i| own_plan.steps.get(*i))
            .find(|s| s.locks.iter().any(|l| l == resource));
        if let Some(step) = held {
            let holder = LockHolder {
                execution: own_id,
                step: step.id.clone(),
            };
            return Ok((resource.clone(), Some(holder)));
        }
    }
    let others = executions.list(None).await?.items;
    for summary in others {
        if summary.stage != ExecutionStage::Running || summary.execution_id == own_id {
            continue;
        }
        // Best effort: an execution that cannot be read now names no holder.
        let (Ok(snap), Ok(plan)) = (
            executions.get(summary.execution_id).await,
            executions.planning().plan(summary.plan_id).await,
        ) else {
            continue;
        };
        for resource in locks {
            if let Some(holder) =
                running_holder(summary.execution_id, plan.content(), &snap.tasks, resource)
            {
                return Ok((resource.clone(), Some(holder)));
            }
        }
    }
    Ok((locks.first().cloned().unwrap_or_default(), None))
}
