//! The one writer of durable transitions: each method here writes one transition of an
//! execution or a task **and** its audit entry, with a typed [`AuditKind`]. The runner only
//! schedules and calls these; the binary calls them too (`exec stop` / `exec cancel`, the
//! sandbox entry). No other code appends to an execution's log (see `docs/architecture.md`).
//!
//! A task's transitions (a start, a reply, a skip, an interruption, an abandoned attempt) go to
//! the store as ONE write with their entry ([`orca_store::ExecutionStore::update_task_with_audit`]:
//! one durable record of the file store's write-ahead log; ADR 0015). For a backend that
//! writes them apart, the order is part of the contract (ADR 0013, ADR 0014): an attempt's reply
//! is logged before its task state is written (a state file never holds a result the log does
//! not); every other transition writes its state first, then its entry.

use orca_core::{
    AuditKind, Decision, DecisionRequest, Execution, ExecutionId, Holder, PlanId, PlannerResponse,
    StepId, Task, TaskResult, UNDER_EXECUTION, Usage,
};
use orca_store::audit::NewAuditEntry;
use orca_store::{AuditLogId, StoreError, TaskTransition, Versioned, WriteOrder};
use serde_json::{Value, json};

use crate::error::Result;

fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}
use crate::execution::{ExecutionService, PreparedStart};

/// An unattended failure policy applied instead of asking a human.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppliedPolicy {
    /// The execution ends failed once running tasks finish.
    Stop,
    /// The failed step's dependents are skipped.
    Skip,
}

impl AppliedPolicy {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Skip => "skip",
        }
    }
}

/// A task start written with its `task.attempt.started` entry.
#[derive(Debug, Clone)]
pub struct StartedAttempt {
    /// The running task.
    pub task: Versioned<Task>,
    /// The seq of `task.attempt.started`: the parent of what the agent logs.
    pub attempt_seq: u64,
}

impl ExecutionService {
    /// Appends an entry to an execution's log.
    pub(crate) async fn append(
        &self,
        execution: &Execution,
        kind: AuditKind,
        parent: Option<u64>,
        data: Value,
    ) -> Result<u64> {
        let info = execution.info();
        let appended = self
            .store()
            .append(
                Self::log(info.plan_id, info.id),
                NewAuditEntry::new(kind, data).with_parent(parent),
            )
            .await;
        Ok(self.refused_if_tampered(execution, appended).await?.seq)
    }

    /// A write the store refused because the execution's log was cut or rewritten (nothing
    /// was written) is a refused run: recorded in the plan's run register, as the runner's
    /// own check of the log does.
    pub(crate) async fn refused_if_tampered<T>(
        &self,
        execution: &Execution,
        written: std::result::Result<T, StoreError>,
    ) -> std::result::Result<T, StoreError> {
        if let Err(e @ StoreError::Tampered { .. }) = &written {
            let info = execution.info();
            self.record_run_refused(
                info.plan_id,
                json!({ "execution_id": info.id, "problem": e.to_string() }),
            )
            .await;
        }
        written
    }

    /// A task's transition and its entry, as one write (see the module). Returns the task at
    /// its new revision and the entry's seq.
    pub(crate) async fn transition(
        &self,
        execution: &Execution,
        task: Versioned<Task>,
        entry: NewAuditEntry,
        order: WriteOrder,
    ) -> Result<(Versioned<Task>, u64)> {
        let info = execution.info();
        let store = self.store();
        let written = store
            .update_task_with_audit(
                &**store,
                TaskTransition {
                    plan_id: info.plan_id,
                    execution_id: info.id,
                    task: task.value.clone(),
                    expected: task.revision,
                    entry,
                    order,
                },
            )
            .await;
        let written = self.refused_if_tampered(execution, written).await?;
        Ok((
            Versioned {
                value: task.value,
                revision: written.revision,
            },
            written.entry.seq,
        ))
    }

    /// The first entry of an execution whose creator died before writing it.
    pub(crate) async fn record_created_late(
        &self,
        execution: &Execution,
        plan_digest: &orca_core::Digest,
        steps: usize,
    ) -> Result<()> {
        let plan_id = execution.info().plan_id;
        self.append(
            execution,
            AuditKind::ExecutionCreated,
            None,
            json!({ "plan_id": plan_id, "plan_digest": plan_digest, "steps": steps,
                    "recovered": true }),
        )
        .await?;
        Ok(())
    }

    /// A run was refused: recorded in the plan's run register (the execution's own log cannot
    /// be trusted). Best effort: the refusal must not be hidden by a failing register.
    pub(crate) async fn record_run_refused(&self, plan_id: PlanId, data: Value) {
        let _ = self
            .store()
            .append(
                AuditLogId::Runs { plan_id },
                NewAuditEntry::new(AuditKind::RunRefused, data),
            )
            .await;
    }

    /// A runner takes the execution: starts it if pending (`execution.started`), else
    /// `execution.resumed`.
    pub(crate) async fn begin(
        &self,
        id: ExecutionId,
        holder: &Holder,
        took_over: Option<&orca_store::LeaseInfo>,
    ) -> Result<Versioned<Execution>> {
        // Whether the header this start was decided on (the one written over) was pending.
        let mut was_pending = false;
        let started = self
            .update_header(id, |e| {
                was_pending = matches!(e, Execution::Pending(_));
                Self::started(e)
            })
            .await?;
        if was_pending {
            self.append(
                &started.value,
                AuditKind::ExecutionStarted,
                UNDER_EXECUTION,
                json!({ "holder": holder }),
            )
            .await?;
        } else {
            self.append(
                &started.value,
                AuditKind::ExecutionResumed,
                UNDER_EXECUTION,
                json!({ "holder": holder, "took_over": took_over }),
            )
            .await?;
        }
        Ok(started)
    }

    /// Writes a prepared start with its `task.attempt.started` entry, as one write (one entry
    /// per attempt: it is the agent call too, and what the agent logs hangs under it).
    pub async fn record_attempt_started(
        &self,
        execution: &Execution,
        start: PreparedStart,
        step: &StepId,
        agent: &orca_core::AgentId,
    ) -> Result<StartedAttempt> {
        let attempt = match &start.task {
            Task::Running(r) => r.attempt,
            _ => 0,
        };
        let mut data = json!({ "step_id": step, "agent": agent, "attempt": attempt });
        let rfc3339 = |t: time::OffsetDateTime| {
            t.format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default()
        };
        if let Some(ready) = start.wait.ready_at {
            data["ready_at"] = json!(rfc3339(ready));
        }
        if let Some((since, locks)) = &start.wait.lock_wait {
            data["lock_wait"] = json!({ "since": rfc3339(*since), "locks": locks });
        }
        let entry =
            NewAuditEntry::new(AuditKind::TaskAttemptStarted, data).with_parent(UNDER_EXECUTION);
        let claimed = Versioned {
            value: start.task,
            revision: start.expected,
        };
        let (task, attempt_seq) = self
            .transition(execution, claimed, entry, WriteOrder::StateFirst)
            .await?;
        Ok(StartedAttempt { task, attempt_seq })
    }

    /// An attempt's reply: its entry (under `parent`, the attempt's start) and the task's new
    /// state, as one write (entry first for a backend writing them apart). If it cannot be
    /// written (the task changed meanwhile: a stop from another process), the reply is logged
    /// in `task.attempt.unrecorded` (its kind and data, and the error).
    pub async fn record_reply(
        &self,
        execution: &Execution,
        task: Versioned<Task>,
        outcome: &TaskResult,
        usage: &Usage,
        parent: u64,
    ) -> Result<Versioned<Task>> {
        let step = task.value.step_id().clone();
        let (kind, data) = match outcome {
            TaskResult::Success(success) => (
                AuditKind::TaskAttemptCompleted,
                json!({ "step_id": step, "usage": usage, "summary": success.summary,
                        crate::integrity::RESULT_DIGEST:
                            crate::integrity::stored_result_digest(self.store().as_ref(), success),
                        crate::integrity::RESULT_DIGEST_OF: crate::integrity::STORED }),
            ),
            TaskResult::Failure(failure) => (
                AuditKind::TaskAttemptFailed,
                json!({ "step_id": step, "failure": failure, "usage": usage }),
            ),
            TaskResult::Interruption(interruption) => (
                AuditKind::TaskAttemptInterrupted,
                json!({ "step_id": step, "interruption": interruption }),
            ),
        };
        let value = Self::finished(task.value, outcome)?;
        let revision = task.revision;
        let entry = NewAuditEntry::new(kind, data.clone()).with_parent(Some(parent));
        let done = self
            .transition(
                execution,
                Versioned { value, revision },
                entry,
                WriteOrder::EntryFirst,
            )
            .await
            .map(|(task, _)| task);
        if let Err(e) = &done {
            // Nothing of the reply was recorded with the task (a backend writing the two
            // apart may have written the entry): the reply is kept in the log all the same.
            let _ = self
                .append(
                    execution,
                    AuditKind::TaskAttemptUnrecorded,
                    Some(parent),
                    json!({ "step_id": step, "error": e.to_string(), "kind": kind.as_str(),
                            "reply": data }),
                )
                .await;
        }
        done
    }

    /// Skips a pending task (an upstream step was abandoned), with `task.skipped`.
    pub async fn record_skip(
        &self,
        execution: &Execution,
        task: Versioned<Task>,
        reason: &str,
    ) -> Result<Versioned<Task>> {
        let step = task.value.step_id().clone();
        let Versioned { value, revision } = task;
        let Task::Pending(pending) = value else {
            return Err(orca_core::TransitionError::TaskStatus {
                step,
                status: value.status(),
                expected: "only a pending task can be skipped",
            }
            .into());
        };
        let next = Versioned {
            value: Task::Skipped(pending.skip(reason, now())),
            revision,
        };
        let entry = NewAuditEntry::new(AuditKind::TaskSkipped, json!({ "step_id": step }))
            .with_parent(UNDER_EXECUTION);
        let (skipped, _) = self
            .transition(execution, next, entry, WriteOrder::StateFirst)
            .await?;
        Ok(skipped)
    }

    /// The run waits for a human decision (durably), with `decision.requested`.
    pub async fn request_decision(
        &self,
        id: ExecutionId,
        request: &DecisionRequest,
    ) -> Result<Versioned<Execution>> {
        let updated = self.await_decision(id, request.clone()).await?;
        self.append(
            &updated.value,
            AuditKind::DecisionRequested,
            UNDER_EXECUTION,
            json!({ "request": request }),
        )
        .await?;
        Ok(updated)
    }

    /// A Replan produced no usable plan: the decision is open again, with `replan.failed`.
    pub async fn reopen_decision(
        &self,
        id: ExecutionId,
        request: &DecisionRequest,
        cause: &str,
    ) -> Result<Versioned<Execution>> {
        let updated = self.await_decision(id, request.clone()).await?;
        self.append(
            &updated.value,
            AuditKind::ReplanFailed,
            UNDER_EXECUTION,
            json!({ "request": request, "cause": cause }),
        )
        .await?;
        Ok(updated)
    }

    /// An unattended failure policy was applied instead of asking (`policy.applied`).
    pub async fn record_policy(
        &self,
        execution: &Execution,
        policy: AppliedPolicy,
        request: &DecisionRequest,
    ) -> Result<()> {
        self.append(
            execution,
            AuditKind::PolicyApplied,
            UNDER_EXECUTION,
            json!({ "policy": policy.as_str(), "request": request }),
        )
        .await?;
        Ok(())
    }

    /// The runner applies an answered decision (`decision.applied`).
    pub async fn record_decision_applied(
        &self,
        execution: &Execution,
        decision: &Decision,
        by: &str,
    ) -> Result<()> {
        self.append(
            execution,
            AuditKind::DecisionApplied,
            UNDER_EXECUTION,
            json!({ "decision": decision, "by": by }),
        )
        .await?;
        Ok(())
    }

    /// A human's Stop decision ends the execution (`execution.stopped`).
    pub async fn stop_by_decision(
        &self,
        id: ExecutionId,
        by: &str,
        reason: &str,
    ) -> Result<Versioned<Execution>> {
        let stopped = self.stop_state(id, by, Some(reason.to_owned())).await?;
        self.append(
            &stopped.value,
            AuditKind::ExecutionStopped,
            UNDER_EXECUTION,
            json!({ "by": by, "reason": reason }),
        )
        .await?;
        Ok(stopped)
    }

    /// `exec cancel`: stops an execution for good (pending or running; a no-op on one that
    /// already ended stopped), with `execution.stop_requested` (`final`). A runner in another
    /// process notices and cancels its in-flight agent calls.
    pub async fn stop(
        &self,
        id: ExecutionId,
        by: &str,
        reason: Option<String>,
    ) -> Result<Versioned<Execution>> {
        // The entry goes first: a runner in another process ends the run (and seals its log)
        // as soon as it sees the stopped state, so an entry written after the state could
        // find the log sealed. An execution that already ended gets no entry: `stop_state`
        // says why it cannot stop (or that it is stopped already).
        let header = self.header(id).await?;
        if !header.value.stage().is_terminal() {
            self.append(
                &header.value,
                AuditKind::ExecutionStopRequested,
                UNDER_EXECUTION,
                json!({ "by": by, "reason": reason, "final": true }),
            )
            .await?;
        }
        self.stop_state(id, by, reason.clone()).await
    }

    /// `exec stop`: the driving process (if any) was asked to stop; the execution stays
    /// resumable (`execution.stop_requested`).
    pub async fn record_stop_requested(
        &self,
        id: ExecutionId,
        by: &str,
        reason: Option<&str>,
        driver: Option<&Holder>,
    ) -> Result<Versioned<Execution>> {
        let header = self.header(id).await?;
        self.append(
            &header.value,
            AuditKind::ExecutionStopRequested,
            UNDER_EXECUTION,
            json!({ "by": by, "reason": reason, "driver": driver }),
        )
        .await?;
        Ok(header)
    }

    /// A fork (`exec retry`): which execution and step it comes from and which steps it
    /// reuses, first in the new execution's log.
    pub async fn record_forked(
        &self,
        execution: &Execution,
        source: ExecutionId,
        from: Option<&StepId>,
        reused: &[StepId],
        by: &str,
    ) -> Result<()> {
        self.append(
            execution,
            AuditKind::ExecutionForked,
            UNDER_EXECUTION,
            json!({ "from_execution": source, "from_step": from, "reused": reused, "by": by }),
        )
        .await?;
        Ok(())
    }

    /// The link the other way: the plan's run register says `source` was retried as `fork`
    /// (the source's own log may be sealed).
    pub async fn record_retried(
        &self,
        plan_id: PlanId,
        source: ExecutionId,
        fork: ExecutionId,
        from: Option<&StepId>,
        by: &str,
    ) -> Result<()> {
        self.store()
            .append(
                AuditLogId::Runs { plan_id },
                NewAuditEntry::new(
                    AuditKind::ExecutionRetried,
                    json!({ "execution_id": source, "as_execution": fork, "from_step": from,
                            "by": by }),
                ),
            )
            .await?;
        Ok(())
    }

    /// A person's decision on an execution's result (`execution.accepted`, signed, or
    /// `execution.discarded`), in the plan's run register (the execution's own log is
    /// sealed). Returns the entry's seq.
    pub(crate) async fn record_result_decision(
        &self,
        plan_id: PlanId,
        kind: AuditKind,
        data: Value,
    ) -> Result<u64> {
        let entry = self
            .store()
            .append(AuditLogId::Runs { plan_id }, NewAuditEntry::new(kind, data))
            .await?;
        Ok(entry.seq)
    }

    /// The sandbox a run's steps run under (written before each run of an unfinished
    /// execution).
    pub async fn record_sandbox(&self, execution: &Execution, data: Value) -> Result<()> {
        self.append(execution, AuditKind::Sandbox, None, data)
            .await?;
        Ok(())
    }

    /// One of the plan's checks ran on the integrated result (`check.passed` /
    /// `check.failed`, under the execution).
    pub async fn record_plan_check(
        &self,
        execution: &Execution,
        run: &orca_core::CheckRun,
    ) -> Result<()> {
        let kind = if run.passed() {
            AuditKind::CheckPassed
        } else {
            AuditKind::CheckFailed
        };
        let data = crate::checks::entry_data(run);
        self.append(execution, kind, UNDER_EXECUTION, data).await?;
        Ok(())
    }

    /// A Replan produced `new_plan`: the execution ends failed, replanned
    /// (`execution.replanned`, then the state).
    pub async fn record_replanned(
        &self,
        execution: &Execution,
        new_plan: PlanId,
        planner: &PlannerResponse,
    ) -> Result<Versioned<Execution>> {
        self.append(
            execution,
            AuditKind::ExecutionReplanned,
            UNDER_EXECUTION,
            json!({ "new_plan": new_plan, "planner": planner }),
        )
        .await?;
        let reason = format!("replanned as {new_plan}");
        self.fail(execution.id(), &reason, Some(new_plan)).await
    }

    /// Every task completed: the execution completes (`execution.completed`, and its log is
    /// sealed, in one write where the store can), judged on `tasks` as the runner holding the
    /// execution's lease knows them (see `ExecutionService::completed`).
    pub async fn record_completed(
        &self,
        id: ExecutionId,
        tasks: &[Task],
        usage: &Usage,
    ) -> Result<Versioned<Execution>> {
        self.end_header(
            id,
            |e| Self::completed(e, tasks),
            AuditKind::ExecutionCompleted,
            &json!({ "usage": usage }),
        )
        .await
    }

    /// The execution ends failed (`execution.failed`; its log sealed, as for a completion).
    pub async fn record_failed(
        &self,
        id: ExecutionId,
        reason: &str,
    ) -> Result<Versioned<Execution>> {
        self.end_header(
            id,
            |e| Self::failed(e, reason, None),
            AuditKind::ExecutionFailed,
            &json!({ "reason": reason }),
        )
        .await
    }

    /// The run was interrupted; the execution stays resumable (`execution.interrupted`).
    pub async fn record_interrupted(
        &self,
        execution: &Execution,
        by: &str,
        holder: &Holder,
        steps: &[StepId],
    ) -> Result<()> {
        self.append(
            execution,
            AuditKind::ExecutionInterrupted,
            UNDER_EXECUTION,
            json!({ "by": by, "holder": holder, "steps": steps }),
        )
        .await?;
        Ok(())
    }

    /// Records the attempts of `steps` that are still running as interrupted (abandoned: they
    /// do not count as attempts, and the next run retries them), with an entry each.
    pub async fn interrupt_attempts(
        &self,
        id: ExecutionId,
        steps: &[StepId],
        note: &str,
    ) -> Result<Vec<StepId>> {
        self.interrupt_held(id, steps, note, None).await
    }

    /// [`Self::interrupt_attempts`], of the attempts `token`'s holder started only (with
    /// `Some`): another worker's attempt of the same step, begun since, is left alone.
    pub(crate) async fn interrupt_held(
        &self,
        id: ExecutionId,
        steps: &[StepId],
        note: &str,
        token: Option<&str>,
    ) -> Result<Vec<StepId>> {
        let header = self.header(id).await?;
        let mut interrupted = Vec::new();
        for step in steps {
            let task = self.task(id, step).await?;
            let Task::Running(running) = task.value else {
                continue;
            };
            if token.is_some_and(|t| running.holder.token != t) {
                continue;
            }
            let attempt = running.attempt;
            let groups = running.processes.clone();
            let next = Versioned {
                value: Task::Failed(running.abandon(note, now())),
                revision: task.revision,
            };
            let entry = NewAuditEntry::new(
                AuditKind::TaskAttemptInterrupted,
                json!({ "step_id": step, "attempt": attempt, "note": note, "groups": groups }),
            )
            .with_parent(UNDER_EXECUTION);
            match self
                .transition(&header.value, next, entry, WriteOrder::StateFirst)
                .await
            {
                Ok(_) => {}
                Err(crate::ServiceError::Store(
                    StoreError::Conflict { .. } | StoreError::Immutable(_),
                )) => continue,
                Err(e) => return Err(e),
            }
            interrupted.push(step.clone());
        }
        Ok(interrupted)
    }

    /// A dead runner's step processes were ended (`takeover.processes_ended`).
    pub(crate) async fn record_processes_ended(
        &self,
        execution: &Execution,
        data: Value,
    ) -> Result<()> {
        self.append(
            execution,
            AuditKind::TakeoverProcessesEnded,
            UNDER_EXECUTION,
            data,
        )
        .await?;
        Ok(())
    }
}
