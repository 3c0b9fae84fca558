//! Forking an execution (`orca exec retry`): a NEW execution of the same approved plan that
//! reuses the recorded results of the source's completed steps — all of them, or only those
//! that neither are the `from` step nor depend on it — and leaves the rest pending for the
//! runner. The source is never changed.
//!
//! Everything is written through the one writer (`transitions.rs`), exactly as a run writes
//! it, so every check of the record holds (`integrity::against_log`, `audit verify`): the
//! execution is created (only if the plan's approval still holds), `execution.forked` names the
//! source, the step and the reused steps, the execution starts, and each reused step gets an
//! attempt (`task.attempt.started`, then `task.attempt.completed` with the recorded result and
//! its digest, then the task record), dependencies first; last, `execution.retried` in the
//! plan's run register links the source to the fork. A crash in between leaves a resumable
//! execution.

use std::collections::BTreeSet;

use orca_core::{
    ContextLimits, ExecutionId, Holder, PlanId, StepId, Task, TaskResult, Usage, graph,
};

use crate::error::{Result, ServiceError};
use crate::execution::{Claim, ExecutionService};

/// What a fork reused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fork {
    /// The new execution.
    pub execution_id: ExecutionId,
    /// Its plan (the source's).
    pub plan_id: PlanId,
    /// Steps whose recorded results were reused, in plan order.
    pub reused: Vec<StepId>,
    /// Steps left to run, in plan order.
    pub to_run: Vec<StepId>,
}

/// The steps of the source to reuse: completed ones, minus `from` and every step that depends
/// on it, directly or not.
fn reusable(
    plan: &orca_core::PlanContent,
    tasks: &[Task],
    from: Option<&StepId>,
) -> Result<BTreeSet<usize>> {
    let deps = graph::dependency_indices(&plan.steps);
    let mut excluded = vec![false; plan.steps.len()];
    if let Some(from) = from {
        let start = plan.position(from).ok_or_else(|| {
            ServiceError::BadInput(format!(
                "the plan has no step `{from}`; its steps: {}",
                plan.steps
                    .iter()
                    .map(|s| s.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        excluded[start] = true;
        // Dependents: repeat until nothing changes (plans are small; no order needed).
        let mut changed = true;
        while changed {
            changed = false;
            for (i, d) in deps.iter().enumerate() {
                if !excluded[i] && d.iter().any(|&j| excluded[j]) {
                    excluded[i] = true;
                    changed = true;
                }
            }
        }
    }
    Ok(plan
        .steps
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            !excluded[*i]
                && tasks
                    .iter()
                    .any(|t| t.step_id() == &s.id && matches!(t, Task::Completed(_)))
        })
        .map(|(i, _)| i)
        .collect())
}

impl ExecutionService {
    /// Forks `source` from `from` (see the module docs), as `by`; `holder` is recorded on the
    /// reused attempts.
    ///
    /// # Errors
    ///
    /// The plan is no longer approved (`ApprovalRefused`), `from` is not a step of the plan,
    /// or a store failure.
    pub async fn fork(
        &self,
        source: ExecutionId,
        from: Option<&StepId>,
        by: &str,
        holder: Holder,
    ) -> Result<Fork> {
        let src = self.get(source).await?;
        let plan_id = src.execution.value.info().plan_id;
        let plan = self.planning().approved(plan_id).await?;
        let source_tasks = src.task_values();
        let reuse = reusable(plan.content(), &source_tasks, from)?;
        let steps = &plan.content().steps;
        let reused: Vec<StepId> = reuse.iter().map(|&i| steps[i].id.clone()).collect();
        let (_, id) = self.create(plan_id).await?;
        let header = self.header(id).await?;
        self.record_forked(&header.value, source, from, &reused, by)
            .await?;
        if !reuse.is_empty() {
            self.begin(id, &holder, None).await?;
            let deps = graph::dependency_indices(steps);
            // Dependencies first: a reused step's dependencies are reused too.
            let order = graph::topological_order(&deps).unwrap_or_default();
            for i in order.into_iter().filter(|i| reuse.contains(i)) {
                let step = &steps[i];
                let Some(Task::Completed(done)) =
                    source_tasks.iter().find(|t| t.step_id() == &step.id)
                else {
                    continue;
                };
                let snap = self.get(id).await?;
                let claim = Claim {
                    plan: &plan,
                    execution: &snap.execution.value,
                    tasks: &snap.tasks,
                    deps: &deps,
                };
                let start =
                    self.prepare_start(&claim, i, &holder, None, &ContextLimits::default())?;
                let attempt = self
                    .record_attempt_started(&snap.execution.value, start, &step.id, &step.agent)
                    .await?;
                self.record_reply(
                    &snap.execution.value,
                    attempt.task,
                    &TaskResult::Success(done.result.clone()),
                    &Usage::default(),
                    attempt.attempt_seq,
                )
                .await?;
            }
        }
        self.record_retried(plan_id, source, id, from, by).await?;
        let to_run = steps
            .iter()
            .enumerate()
            .filter(|(i, _)| !reuse.contains(i))
            .map(|(_, s)| s.id.clone())
            .collect();
        Ok(Fork {
            execution_id: id,
            plan_id,
            reused,
            to_run,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orca_core::{AgentId, PlanContent, Step, TaskContext, TaskSuccess};
    use time::OffsetDateTime;

    fn id(s: &str) -> StepId {
        StepId::parse(s).unwrap()
    }

    fn plan() -> PlanContent {
        let step = |s: &str, after: &[&str]| {
            let mut st = Step::new(id(s), AgentId::parse("shell").unwrap(), s);
            st.depends_on = Some(after.iter().map(|a| id(a)).collect());
            st
        };
        PlanContent {
            steps: vec![
                step("a", &[]),
                step("b", &["a"]),
                step("c", &["b"]),
                step("d", &["a"]),
            ],
            ..PlanContent::default()
        }
    }

    fn task(s: &str, done: bool) -> Task {
        let pending = orca_core::PendingTask::new(id(s));
        if !done {
            return Task::Pending(pending);
        }
        let context = TaskContext {
            plan_id: PlanId::new(),
            plan_goal: String::new(),
            step_id: id(s),
            step_index: 0,
            total_steps: 4,
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
        let now = OffsetDateTime::UNIX_EPOCH;
        Task::Completed(
            pending
                .start(context, holder, now)
                .complete(TaskSuccess::with_summary("x"), now),
        )
    }

    #[test]
    fn reuses_completed_steps_except_from_and_its_dependents() {
        let plan = plan();
        // a, b and d completed; c (after b) did not.
        let tasks = vec![
            task("a", true),
            task("b", true),
            task("c", false),
            task("d", true),
        ];
        assert_eq!(reusable(&plan, &tasks, None).unwrap(), [0, 1, 3].into());
        assert_eq!(
            reusable(&plan, &tasks, Some(&id("b"))).unwrap(),
            [0, 3].into()
        );
        assert!(reusable(&plan, &tasks, Some(&id("a"))).unwrap().is_empty());
        assert!(reusable(&plan, &tasks, Some(&id("zz"))).is_err());
    }
}
