//! The runner's mirror of the stored tasks: the records in plan order, and what finding the
//! ready ones needs kept beside them, so that the runner can ask "which tasks are ready?" on
//! every turn of its loop without walking every dependency of every pending task again.
//!
//! Asked after every start and every reply, the plain question ([`schedule::ready_with`])
//! costs a look at each dependency of each pending task: on a wide DAG (200 tasks each
//! waiting for the 200 before) that was the largest share of a claiming worker's CPU. Here
//! each task keeps how many of its dependencies (in the order of the plan's dependency
//! indices) it has seen completed; a completed task stays completed, so the count only
//! grows, and each dependency is looked at about once per run. Should a completed record
//! ever be replaced by one that is not (nothing in orca does that; a record edited behind
//! orca's back might), every count starts again.
//!
//! [`schedule::ready_with`]: orca_core::schedule::ready_with

use orca_core::{Task, TaskStatus};
use orca_store::Versioned;

/// The stored task records of one execution, in plan order (read through `Deref`; changed
/// only through [`TaskMirror::set`] and [`TaskMirror::replace`], which keep the rest true).
#[derive(Debug, Default)]
pub(super) struct TaskMirror {
    tasks: Vec<Versioned<Task>>,
    /// Each record's status, a byte each (what `ready` reads in its loop).
    status: Vec<TaskStatus>,
    /// Per task: how many of its dependencies, from the first, were seen completed.
    met: Vec<usize>,
}

impl TaskMirror {
    pub(super) fn new(tasks: Vec<Versioned<Task>>) -> Self {
        let mut mirror = Self::default();
        mirror.replace(tasks);
        mirror
    }

    /// Every record at once (what a full read of the execution returned).
    pub(super) fn replace(&mut self, tasks: Vec<Versioned<Task>>) {
        self.status = tasks.iter().map(|t| t.value.status()).collect();
        self.met = vec![0; tasks.len()];
        self.tasks = tasks;
    }

    /// The record at `index` (ignored past the end, as the plan has no such step).
    pub(super) fn set(&mut self, index: usize, task: Versioned<Task>) {
        let (Some(slot), Some(status)) = (self.tasks.get_mut(index), self.status.get_mut(index))
        else {
            return;
        };
        let now = task.value.status();
        if *status == TaskStatus::Completed && now != TaskStatus::Completed {
            // Counts rest on completed tasks staying completed.
            self.met.iter_mut().for_each(|m| *m = 0);
        }
        *status = now;
        *slot = task;
    }

    /// Pending tasks whose dependencies (`deps`, by plan position) all completed, in plan
    /// order: what [`orca_core::schedule::ready_with`] returns for these records.
    pub(super) fn ready(&mut self, deps: &[Vec<usize>]) -> Vec<usize> {
        let mut out = Vec::new();
        for (i, ds) in deps.iter().enumerate() {
            let (Some(TaskStatus::Pending), Some(met)) = (self.status.get(i), self.met.get_mut(i))
            else {
                continue;
            };
            while ds
                .get(*met)
                .is_some_and(|d| self.status.get(*d) == Some(&TaskStatus::Completed))
            {
                *met += 1;
            }
            if *met >= ds.len() {
                out.push(i);
            }
        }
        out
    }
}

impl std::ops::Deref for TaskMirror {
    type Target = [Versioned<Task>];

    fn deref(&self) -> &Self::Target {
        &self.tasks
    }
}

impl<'a> IntoIterator for &'a TaskMirror {
    type Item = &'a Versioned<Task>;
    type IntoIter = std::slice::Iter<'a, Versioned<Task>>;

    fn into_iter(self) -> Self::IntoIter {
        self.tasks.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orca_core::{
        ErrorCode, Holder, PendingTask, PlanId, StepId, TaskContext, TaskFailure, TaskSuccess,
    };
    use proptest::prelude::*;

    /// A record of `status` for step `s{i}`, reached through the domain's own transitions
    /// (only the status matters to `ready`).
    fn record(i: usize, status: TaskStatus, revision: u64) -> Versioned<Task> {
        let step = StepId::parse(&format!("s{i}")).unwrap_or_else(|_| unreachable!());
        let at = time::OffsetDateTime::UNIX_EPOCH;
        let pending = PendingTask::new(step.clone());
        let running = || {
            let context = TaskContext {
                plan_id: PlanId::new(),
                plan_goal: String::new(),
                step_id: step.clone(),
                step_index: i,
                total_steps: i + 1,
                dependencies: Vec::new(),
                relevant_files: Vec::new(),
                previous_attempts: Vec::new(),
                omitted: 0,
            };
            let holder = Holder {
                pid: 1,
                host: "h".to_owned(),
                token: "t".to_owned(),
            };
            PendingTask::new(step.clone()).start(context, holder, at)
        };
        let task: Task = match status {
            TaskStatus::Pending => pending.into(),
            TaskStatus::Running => running().into(),
            TaskStatus::Completed => running().complete(TaskSuccess::default(), at).into(),
            TaskStatus::Failed => running()
                .fail(TaskFailure::new(ErrorCode::Validation, "no"), at)
                .into(),
            TaskStatus::Skipped => pending.skip("upstream", at).into(),
        };
        assert_eq!(task.status(), status);
        Versioned {
            value: task,
            revision: orca_store::Revision(revision),
        }
    }

    proptest! {
        /// Whatever records are set, in whatever order (a completed one replaced by one that
        /// is not included), the mirror's ready tasks are the plain question's.
        #[test]
        fn ready_is_ready_with(
            deps in (1usize..24).prop_flat_map(|n| proptest::collection::vec(
                proptest::collection::vec(0..n + 2, 0..6), n)),
            sets in proptest::collection::vec((0usize..26, 0usize..5), 0..120),
        ) {
            let statuses = [
                TaskStatus::Pending, TaskStatus::Running, TaskStatus::Completed,
                TaskStatus::Failed, TaskStatus::Skipped,
            ];
            let n = deps.len();
            let mut mirror = TaskMirror::new((0..n).map(|i| record(i, TaskStatus::Pending, 1)).collect());
            for (k, (index, s)) in sets.into_iter().enumerate() {
                mirror.set(index, record(index, statuses[s], k as u64 + 2));
                let plain = orca_core::schedule::ready_with(&deps, |i| {
                    mirror.get(i).map(|t| t.value.status())
                });
                prop_assert_eq!(mirror.ready(&deps), plain);
            }
        }
    }
}
