//! Deciding after a final failure: retries with attempts left, the human's decision or the
//! unattended policy, and applying a decision (Retry, Answer, Stop, Replan).

use std::time::Duration;

use orca_core::{
    AttemptOutcome, Decision, DecisionRequest, ErrorCode, HumanAnswer, PlanRefStage,
    PlannerResponse, Task, schedule,
};
use tracing::warn;

use super::state::{Run, Slot, retryable};
use crate::error::Result;
use crate::hitl::decision_question;
use crate::{
    AppliedPolicy, ApprovalOutcome, FailurePolicy, RunEvent, RunOutcome, Runner, ServiceError,
};

impl Runner {
    /// Finds failed tasks nobody is handling: retries those with attempts left (also after a
    /// crash lost the backoff timer), and asks about the first one that needs a decision —
    /// one decision at a time, so a second final failure waits for the first to be answered.
    pub(super) async fn reconcile_failed(&self, run: &mut Run) -> Result<()> {
        if run.execution.decision().is_some() || run.stop_after_drain.is_some() {
            return Ok(());
        }
        let mut needs_decision = Vec::new();
        let mut retry_now = Vec::new();
        for (index, task) in run.tasks.iter().enumerate() {
            let Task::Failed(failed) = &task.value else {
                continue;
            };
            if !matches!(run.slot(index), Slot::Idle) {
                continue;
            }
            if failed.was_abandoned() {
                retry_now.push(index);
                continue;
            }
            let request = match failed.attempts.last().map(|a| &a.outcome) {
                Some(AttemptOutcome::Interrupted { interruption }) => {
                    DecisionRequest::Interruption {
                        step_id: failed.step_id.clone(),
                        reason: interruption.reason.clone(),
                        question: interruption.question.clone(),
                    }
                }
                _ => {
                    let failure = failed.last_failure();
                    let counted = task.value.counted_attempts();
                    // Attempts left (also after a crash lost the backoff timer): at once.
                    if self.retry_in(run, index, failure.code, counted).is_some() {
                        retry_now.push(index);
                        continue;
                    }
                    DecisionRequest::Deviation {
                        step_id: failed.step_id.clone(),
                        attempts: counted,
                        failure,
                    }
                }
            };
            needs_decision.push((index, request));
        }
        for index in retry_now {
            run.set(index, Slot::RetryNow { guidance: None });
        }
        let changed = !needs_decision.is_empty();
        for (index, request) in needs_decision {
            self.deviation(run, index, request).await?;
            if self.config.on_failure == FailurePolicy::Ask {
                break;
            }
        }
        if changed {
            run.refresh(&self.executions).await?;
        }
        Ok(())
    }

    /// The one definition of automatic retries: after `counted` attempts of the step at
    /// `index` failed with `code`, whether it is retried without asking anyone, and after how
    /// long ([`Backoff::delay`]). `None`: no attempt left, or a retry cannot help.
    ///
    /// [`Backoff::delay`]: crate::Backoff::delay
    pub(super) fn retry_in(
        &self,
        run: &Run,
        index: usize,
        code: ErrorCode,
        counted: u32,
    ) -> Option<Duration> {
        let max = run
            .plan
            .content()
            .steps
            .get(index)
            .and_then(|s| s.max_attempts)
            .unwrap_or(self.config.max_attempts)
            .max(1);
        (retryable(code) && counted < max).then(|| {
            self.config
                .backoff
                .delay(counted.saturating_sub(1), fastrand::f64())
        })
    }

    pub(super) async fn deviation(
        &self,
        run: &mut Run,
        index: usize,
        request: DecisionRequest,
    ) -> Result<()> {
        match self.config.on_failure {
            FailurePolicy::Ask => {
                self.executions.request_decision(run.id, &request).await?;
                self.observer.event(&RunEvent::DecisionNeeded { request });
            }
            FailurePolicy::Stop => {
                let reason = format!("step `{}` failed; policy: stop", request.step_id());
                self.executions
                    .record_policy(&run.execution, AppliedPolicy::Stop, &request)
                    .await?;
                run.stop_after_drain = Some(reason);
            }
            FailurePolicy::Skip => {
                self.executions
                    .record_policy(&run.execution, AppliedPolicy::Skip, &request)
                    .await?;
                if let Some(i) = run.plan.content().position(request.step_id()) {
                    run.set(i, Slot::Abandoned);
                }
                self.skip_dependents(run).await?;
                let _ = index;
            }
        }
        Ok(())
    }

    pub(super) async fn skip_dependents(&self, run: &mut Run) -> Result<()> {
        let to_skip = schedule::to_skip(run.plan.content(), &run.values(), &run.abandoned());
        for i in to_skip {
            let Some(task) = run.tasks.get(i).cloned() else {
                continue;
            };
            let step = task.value.step_id().clone();
            let skipped = self
                .executions
                .record_skip(
                    &run.execution,
                    task,
                    "an upstream step failed and was abandoned",
                )
                .await?;
            run.tasks.set(i, skipped);
            self.observer.event(&RunEvent::TaskSkipped { step });
        }
        Ok(())
    }

    pub(super) async fn ask_human(
        &self,
        run: &Run,
        request: &DecisionRequest,
    ) -> Result<Option<Decision>> {
        let question = decision_question(request);
        for _ in 0..3 {
            let Some(answer): Option<HumanAnswer> = self.hitl.decide(&question).await else {
                return Ok(None);
            };
            match Decision::from_answer(request, &answer) {
                Ok(decision) => return Ok(Some(decision)),
                Err(e) => {
                    warn!(execution = %run.id, error = %e, "the answer matched no option; asking again")
                }
            }
        }
        Ok(None)
    }

    pub(super) async fn apply_decision(
        &self,
        run: &mut Run,
        request: &DecisionRequest,
        decision: Decision,
        by: &str,
    ) -> Result<Option<RunOutcome>> {
        let index = run.plan.content().position(request.step_id());
        if let Decision::Replan { guidance } = decision {
            // Recorded as applied only once a plan came of it (see `replan`).
            return self.replan(run, request, guidance, by).await.map(Some);
        }
        self.executions
            .record_decision_applied(&run.execution, &decision, by)
            .await?;
        match decision {
            Decision::Retry { guidance } => {
                if let Some(i) = index {
                    run.set(i, Slot::RetryNow { guidance });
                }
                Ok(None)
            }
            Decision::Answer { text } => {
                if let Some(i) = index {
                    let guidance = Some(format!("the human answered: {text}"));
                    run.set(i, Slot::RetryNow { guidance });
                }
                Ok(None)
            }
            Decision::Stop => {
                let reason = format!("stopped after step `{}` failed", request.step_id());
                self.executions
                    .stop_by_decision(run.id, by, &reason)
                    .await?;
                Ok(Some(RunOutcome::Stopped {
                    reason: Some(reason),
                }))
            }
            Decision::Replan { .. } => Ok(None),
        }
    }

    pub(super) async fn replan(
        &self,
        run: &mut Run,
        request: &DecisionRequest,
        guidance: Option<String>,
        by: &str,
    ) -> Result<RunOutcome> {
        use std::fmt::Write as _;
        let mut report = String::new();
        if let DecisionRequest::Deviation {
            step_id,
            attempts,
            failure,
        } = request
        {
            let _ = writeln!(
                report,
                "Failed step: {step_id} after {attempts} attempt(s): {failure}"
            );
        }
        let _ = writeln!(report, "Completed steps:");
        for (step, task) in run.plan.content().steps.iter().zip(&run.tasks) {
            if let Some(s) = task.value.success() {
                let _ = writeln!(report, "- {} ({}): {}", step.id, step.agent, s.summary);
            }
        }
        if let Some(g) = &guidance {
            let _ = writeln!(report, "The human's guidance: {g}");
        }
        let (new_plan, reply) = match self.orca.replan(&run.plan, &report).await {
            Ok((plan, reply)) if matches!(reply.outcome, PlannerResponse::Plan { .. }) => {
                (plan, reply)
            }
            Ok((plan, reply)) => {
                let answer = match &reply.outcome {
                    PlannerResponse::Failure(f) => format!("it failed: {f}"),
                    PlannerResponse::Answer { text } => {
                        format!("it answered without a plan: {text}")
                    }
                    PlannerResponse::Plan { .. } => String::new(),
                };
                let cause =
                    format!("the planner built no plan ({answer}); draft {plan} was left unused");
                return Err(self.replan_failed(run, request, cause).await);
            }
            Err(e) => {
                let cause = crate::error::chain(&e);
                return Err(self.replan_failed(run, request, cause).await);
            }
        };
        self.executions
            .record_decision_applied(&run.execution, &Decision::Replan { guidance }, by)
            .await?;
        self.executions
            .record_replanned(&run.execution, new_plan, &reply.outcome)
            .await?;
        let proposal = matches!(
            reply.outcome,
            PlannerResponse::Plan {
                stage: PlanRefStage::Proposal,
                ..
            }
        );
        let mut execution_id = None;
        if proposal
            && let ApprovalOutcome::Approved(plan) = self
                .orca
                .approval_loop(new_plan, self.hitl.as_ref(), &self.config.actor)
                .await?
        {
            execution_id = Some(self.executions.create(plan.id()).await?.1);
        }
        Ok(RunOutcome::Replanned {
            plan_id: new_plan,
            execution_id,
        })
    }

    /// A Replan that produced no usable plan: the execution is not ended and the decision is
    /// open again (the answer was taken off the header to be applied), so retry, stop or a later
    /// replan still work. Returns the error the run ends with.
    pub(super) async fn replan_failed(
        &self,
        run: &mut Run,
        request: &DecisionRequest,
        cause: String,
    ) -> ServiceError {
        warn!(execution = %run.id, %cause, "replan failed; the decision is open again");
        let reopened = async {
            self.executions
                .reopen_decision(run.id, request, &cause)
                .await?;
            run.refresh(&self.executions).await
        }
        .await;
        match reopened {
            Ok(()) => ServiceError::ReplanFailed {
                execution: run.id,
                cause,
            },
            Err(e) => e,
        }
    }
}
