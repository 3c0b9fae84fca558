//! Taking in what agents hand back (each reply is written by the writer in its agent's
//! task), and ending the calls in flight when the run is stopped or interrupted.

use orca_core::{ErrorCode, StepId, Task, TaskFailure, TaskResult, TaskStatus};
use orca_store::{StoreError, Versioned};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::state::{Joined, Recording, Run, Slot};
use crate::error::Result;
use crate::{RunEvent, Runner, ServiceError};

impl Runner {
    /// Takes in what an agent's task ended with.
    pub(super) async fn on_joined(
        &self,
        run: &mut Run,
        joined: std::result::Result<Joined, tokio::task::JoinError>,
    ) -> Result<()> {
        match joined {
            Ok(Some((recording, written))) => self.on_recorded(run, recording, written).await,
            Ok(None) => Ok(()),
            Err(e) if e.is_cancelled() => Ok(()),
            Err(e) => {
                warn!(error = %e, "an agent call panicked");
                Ok(())
            }
        }
    }

    /// Takes in every reply already recorded, without waiting, so that the next turn starts
    /// everything they made ready in one write round. Taken one per turn, each dependent's
    /// start cost a group commit of its own: ~1 `fdatasync` a task on the file store where
    /// ~0.5 do (`runner_bench --overhead-only`).
    pub(super) async fn take_recorded(&self, run: &mut Run) -> Result<()> {
        while let Some(joined) = run.joins.try_join_next() {
            self.on_joined(run, joined).await?;
        }
        Ok(())
    }

    /// Takes in a reply its agent's task has written (or failed to write).
    pub(super) async fn on_recorded(
        &self,
        run: &mut Run,
        recording: Recording,
        written: Result<Versioned<Task>>,
    ) -> Result<()> {
        run.take_returns();
        if !run.usage_counted(recording.index) {
            run.usage.add(&recording.usage);
        }
        run.set(recording.index, Slot::Idle);
        match written {
            Ok(task) => {
                if matches!(recording.outcome, TaskResult::Success(_))
                    && let Some(why) = self
                        .config
                        .execution_budget
                        .exceeded(&run.usage, run.started.elapsed().as_secs())
                {
                    // Fail closed: nothing more runs; the human decides what to do.
                    warn!(execution = %run.id, "{why}");
                }
                self.apply_recording(run, recording, task);
                Ok(())
            }
            // Stopped, or the task was changed by another process meanwhile: the result is
            // dropped (it is in the agent's log entries) and the loop re-reads the state.
            Err(ServiceError::Store(
                e @ (StoreError::Conflict { .. } | StoreError::Immutable(_)),
            )) => {
                warn!(execution = %run.id, error = %e, "an agent result arrived for a task that changed meanwhile");
                run.refresh_all(&self.executions).await
            }
            Err(e) => Err(e),
        }
    }

    /// Updates the runner's view after a reply was written: events, retries.
    pub(super) fn apply_recording(
        &self,
        run: &mut Run,
        recording: Recording,
        task: Versioned<Task>,
    ) {
        let Recording {
            index,
            step,
            running_attempts,
            outcome,
            ..
        } = recording;
        run.tasks.set(index, task);
        match outcome {
            TaskResult::Success(success) => {
                self.observer.event(&RunEvent::TaskCompleted {
                    step,
                    summary: success.summary,
                });
            }
            TaskResult::Failure(failure) => {
                let retry_in = self.retry_in(run, index, failure.code, running_attempts);
                if let Some(delay) = retry_in {
                    run.set(index, Slot::RetryAt(Instant::now() + delay));
                }
                // Otherwise the decision is asked by `reconcile_failed`, one at a time.
                self.observer.event(&RunEvent::TaskFailed {
                    step,
                    failure,
                    retry_in,
                });
            }
            TaskResult::Interruption(interruption) => {
                self.observer.event(&RunEvent::TaskFailed {
                    step,
                    failure: TaskFailure::new(
                        ErrorCode::Interrupted,
                        interruption.question.unwrap_or(interruption.reason),
                    ),
                    retry_in: None,
                });
            }
        }
    }

    /// Stops the run for now: cancels the agent calls in flight, waits for their processes to
    /// end (SIGTERM, grace, SIGKILL), records their attempts as interrupted (retried by the
    /// next run), and only then lets their locks go.
    pub(super) async fn interrupt_in_flight(&self, run: &mut Run) -> Result<Vec<StepId>> {
        Self::drain_calls(run).await;
        self.dispatch.context().agents.settle().await;
        let steps: Vec<StepId> = run
            .where_slot(|s| matches!(s, Slot::InFlight { .. }))
            .into_iter()
            .filter_map(|i| run.plan.content().steps.get(i).map(|s| s.id.clone()))
            .collect();
        let note = format!(
            "interrupted: the run was stopped by {} (pid {} on {}); resume runs it again",
            self.config.actor, self.config.holder.pid, self.config.holder.host
        );
        let interrupted = self
            .executions
            .interrupt_attempts(run.id, &steps, &note)
            .await?;
        run.end_in_flight();
        Ok(interrupted)
    }

    /// Cancels the agent calls in flight and waits for their tasks (a reply already in is
    /// still written whole) and their processes, then marks what is still running as failed.
    pub(super) async fn cancel_in_flight(&self, run: &mut Run, why: &str) -> Result<()> {
        Self::drain_calls(run).await;
        self.dispatch.context().agents.settle().await;
        let flights = run.end_in_flight();
        for index in flights {
            let Some(step) = run.plan.content().steps.get(index).map(|s| s.id.clone()) else {
                continue;
            };
            let task = self.executions.task(run.id, &step).await?;
            if task.value.status() == TaskStatus::Running {
                let failure = TaskFailure::new(ErrorCode::Cancelled, why.to_owned());
                match self.executions.fail_task(run.id, task, failure).await {
                    Ok(_)
                    | Err(ServiceError::Store(
                        StoreError::Conflict { .. } | StoreError::Immutable(_),
                    )) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// After an error ends a drive: agent calls stop; replies already in are written whole
    /// before the lease goes, and their processes are gone before their locks are.
    pub(super) async fn stop_calls(&self, run: &mut Run) {
        Self::drain_calls(run).await;
        self.dispatch.context().agents.settle().await;
        run.end_in_flight();
    }

    /// Cancels the agent calls and waits for their tasks to end; replies that were written are
    /// taken into the runner's view (task and usage). Starts being written are waited for
    /// first ([`Self::settle_starts`]).
    pub(super) async fn drain_calls(run: &mut Run) {
        Self::settle_starts(run).await;
        run.calls.cancel();
        while let Some(joined) = run.joins.join_next().await {
            if let Ok(Some((recording, Ok(task)))) = joined {
                run.usage.add(&recording.usage);
                run.tasks.set(recording.index, task);
            }
        }
        run.calls = CancellationToken::new();
    }
}
