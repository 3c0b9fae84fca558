//! Scheduling helpers over an execution's tasks: which steps are ready, which must be skipped.
//! Pure functions; the runner in `orca-services` decides when to call them.

use std::collections::BTreeSet;

use crate::error::TransitionError;
use crate::execution::{Task, TaskStatus};
use crate::graph;
use crate::id::StepId;
use crate::plan::PlanContent;

/// Indices of pending tasks whose dependencies have all completed, in plan order.
/// `tasks` are in plan order.
#[must_use]
pub fn ready(plan: &PlanContent, tasks: &[Task]) -> Vec<usize> {
    let deps = graph::dependency_indices(&plan.steps);
    ready_with(&deps, |i| tasks.get(i).map(Task::status))
}

/// [`ready`] for a caller that keeps the dependency indices
/// ([`graph::dependency_indices`]) and the task statuses itself (the runner): nothing is
/// recomputed or copied. `status(i)` is the status of the task at plan position `i`.
#[must_use]
pub fn ready_with(deps: &[Vec<usize>], status: impl Fn(usize) -> Option<TaskStatus>) -> Vec<usize> {
    deps.iter()
        .enumerate()
        .filter(|(i, ds)| {
            status(*i) == Some(TaskStatus::Pending)
                && ds.iter().all(|d| status(*d) == Some(TaskStatus::Completed))
        })
        .map(|(i, _)| i)
        .collect()
}

/// Indices of pending tasks that can never run because a step they depend on (directly or
/// not) is in `abandoned` or was skipped, in plan order.
#[must_use]
pub fn to_skip(plan: &PlanContent, tasks: &[Task], abandoned: &BTreeSet<StepId>) -> Vec<usize> {
    let mut out = BTreeSet::new();
    for (i, (step, task)) in plan.steps.iter().zip(tasks).enumerate() {
        if abandoned.contains(&step.id) || task.status() == TaskStatus::Skipped {
            out.extend(graph::transitive_dependents(&plan.steps, i));
        }
    }
    out.into_iter()
        .filter(|&i| {
            tasks
                .get(i)
                .is_some_and(|t| t.status() == TaskStatus::Pending)
        })
        .collect()
}

/// Checks that the task of `step` may start now: every step it depends on has completed.
/// Returns the step's index. Call it before [`crate::PendingTask::start`] when the task was not
/// picked from [`ready`].
///
/// # Errors
///
/// [`TransitionError::UnknownStep`] if the step is not in the plan,
/// [`TransitionError::DependencyNotCompleted`] naming the first dependency not completed.
pub fn check_start(
    plan: &PlanContent,
    tasks: &[Task],
    step: &StepId,
) -> Result<usize, TransitionError> {
    let index = plan
        .position(step)
        .ok_or_else(|| TransitionError::UnknownStep(step.clone()))?;
    let deps = graph::dependency_indices(&plan.steps);
    check_start_with(plan, &deps, (index, step), |i| {
        tasks.get(i).map(Task::status)
    })?;
    Ok(index)
}

/// [`check_start`] for a caller that keeps the dependency indices and the task statuses itself
/// (see [`ready_with`]): `step`, at plan position `index`, may start now.
///
/// # Errors
///
/// [`TransitionError::DependencyNotCompleted`] naming the first dependency not completed.
pub fn check_start_with(
    plan: &PlanContent,
    deps: &[Vec<usize>],
    (index, step): (usize, &StepId),
    status: impl Fn(usize) -> Option<TaskStatus>,
) -> Result<(), TransitionError> {
    for &d in deps.get(index).map(Vec::as_slice).unwrap_or_default() {
        if status(d) != Some(TaskStatus::Completed) {
            return Err(TransitionError::DependencyNotCompleted {
                step: step.clone(),
                dependency: plan
                    .steps
                    .get(d)
                    .map_or_else(|| step.clone(), |s| s.id.clone()),
            });
        }
    }
    Ok(())
}

/// Checks that the task of `step` may be skipped: it is downstream of an abandoned or skipped
/// step ([`to_skip`] lists it). Returns the step's index.
///
/// # Errors
///
/// [`TransitionError::UnknownStep`] if the step is not in the plan,
/// [`TransitionError::NothingAbandoned`] otherwise.
pub fn check_skip(
    plan: &PlanContent,
    tasks: &[Task],
    abandoned: &BTreeSet<StepId>,
    step: &StepId,
) -> Result<usize, TransitionError> {
    let index = plan
        .position(step)
        .ok_or_else(|| TransitionError::UnknownStep(step.clone()))?;
    if to_skip(plan, tasks, abandoned).contains(&index) {
        Ok(index)
    } else {
        Err(TransitionError::NothingAbandoned(step.clone()))
    }
}

/// Counts of tasks by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Pending.
    pub pending: usize,
    /// Running.
    pub running: usize,
    /// Completed.
    pub completed: usize,
    /// Failed.
    pub failed: usize,
    /// Skipped.
    pub skipped: usize,
}

impl Progress {
    /// Counts `tasks`.
    #[must_use]
    pub fn of(tasks: &[Task]) -> Self {
        let mut p = Self::default();
        for t in tasks {
            match t.status() {
                TaskStatus::Pending => p.pending += 1,
                TaskStatus::Running => p.running += 1,
                TaskStatus::Completed => p.completed += 1,
                TaskStatus::Failed => p.failed += 1,
                TaskStatus::Skipped => p.skipped += 1,
            }
        }
        p
    }

    /// All tasks.
    #[must_use]
    pub const fn total(&self) -> usize {
        self.pending + self.running + self.completed + self.failed + self.skipped
    }
}
