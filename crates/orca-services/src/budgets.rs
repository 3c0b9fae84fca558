//! Budgets approved with the plan (ADR 0017): a step's `budget` and the plan's `budget` are
//! combined with the runner's configured limits (the tighter wins), and an overrun is named —
//! which budget, and by how much — in the `budget_exceeded` failure that goes to the human.

use orca_core::{Budget, ErrorCode, PlanContent, Step, StepId, TaskFailure, TaskResult, Usage};

/// The limits one attempt of a step runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StepLimits {
    /// The step's own budget (the plan's `steps[].budget` ∧ the runner's per-task budget).
    pub step: Budget,
    /// The execution's budget (the plan's `budget` ∧ the runner's execution budget).
    pub plan: Budget,
}

impl StepLimits {
    pub(crate) fn new(task: &Budget, execution: &Budget, plan: &PlanContent, step: &Step) -> Self {
        Self {
            step: step.budget.map_or(*task, |b| task.min(&b)),
            plan: plan.budget.map_or(*execution, |b| execution.min(&b)),
        }
    }

    /// The budget handed to the agent: the step's, within what is left of the plan's.
    pub(crate) fn request(&self, spent: &Usage, elapsed_secs: u64) -> Budget {
        self.step.min(&self.plan.remaining(spent, elapsed_secs))
    }

    /// Why the attempt may not even start: the plan's budget is already spent.
    pub(crate) fn exhausted(&self, spent: &Usage, elapsed_secs: u64) -> Option<String> {
        self.plan
            .exceeded(spent, elapsed_secs)
            .map(|why| format!("the plan's budget: {why}"))
    }

    /// Names the budget an attempt crossed: the step's (its own usage, its own wall time), else
    /// the plan's (everything spent before it plus its usage, the execution's wall time).
    /// A success that crossed the step's budget becomes a `budget_exceeded` failure; an agent's
    /// own `budget_exceeded` failure gets the name of the budget it ran into.
    pub(crate) fn check(
        &self,
        step: &StepId,
        outcome: TaskResult,
        usage: &Usage,
        attempt_secs: u64,
        spent_before: &Usage,
        run_secs: u64,
    ) -> TaskResult {
        let mut total = *spent_before;
        total.add(usage);
        let named = self
            .step
            .exceeded(usage, attempt_secs)
            .map(|why| format!("step `{step}`'s budget: {why}"))
            .or_else(|| {
                self.plan
                    .exceeded(&total, run_secs)
                    .map(|why| format!("the plan's budget: {why}"))
            });
        let step_overrun = self.step.exceeded(usage, attempt_secs).is_some();
        match (outcome, named) {
            // A success over its step's budget fails closed. A success that only takes the
            // plan's total over keeps its result: the next step is refused before it starts.
            (TaskResult::Success(_), Some(why)) if step_overrun => {
                TaskResult::Failure(TaskFailure::new(ErrorCode::BudgetExceeded, why))
            }
            (TaskResult::Failure(mut f), Some(why)) if f.code == ErrorCode::BudgetExceeded => {
                f.message = why;
                TaskResult::Failure(f)
            }
            // The attempt was cut at the step's wall-time budget (the runner's timeout is
            // never longer than it).
            (TaskResult::Failure(f), None)
                if f.code == ErrorCode::Timeout
                    && self.step.max_wall_secs.is_some_and(|m| attempt_secs >= m) =>
            {
                let max = self.step.max_wall_secs.unwrap_or_default();
                TaskResult::Failure(TaskFailure::new(
                    ErrorCode::BudgetExceeded,
                    format!(
                        "step `{step}`'s budget: time budget exceeded: {attempt_secs}s >= {max}s"
                    ),
                ))
            }
            (outcome, _) => outcome,
        }
    }
}
