//! `ExecutionService`: executions of approved plans and their tasks.
//!
//! Every change is a compare-and-swap on a revision (the execution header or one task), so two
//! processes can never both claim a task: the loser gets [`orca_store::StoreError::Conflict`].

use std::sync::Arc;

use orca_core::{
    ApprovedPlan, AuditKind, ContextLimits, Decision, DecisionRequest, Execution, ExecutionId,
    ExecutionStage, Holder, PendingExecution, PlanId, RunningExecution, RunningTask, StepId, Task,
    TaskFailure, TaskResult, TaskStatus, TransitionError, UNDER_EXECUTION, build_context_with,
    schedule,
};
use orca_store::audit::NewAuditEntry;
use orca_store::{
    AuditLogId, ExecutionSnapshot, ExecutionSummary, ExpiredTask, Listing, Revision, Store,
    StoreError, Versioned,
};
use serde_json::{Value, json};
use time::OffsetDateTime;
use tracing::instrument;

use crate::error::{Result, ServiceError};
use crate::planning::{PlanningService, resolve_prefix};

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// What a task claim is checked against: the plan, the execution header, its tasks in plan
/// order, and the plan's dependency graph ([`orca_core::graph::dependency_indices`]).
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The approved plan.
    pub plan: &'a ApprovedPlan,
    /// The execution header.
    pub execution: &'a Execution,
    /// The tasks, in plan order.
    pub tasks: &'a [Versioned<Task>],
    /// The dependency indices of every step.
    pub deps: &'a [Vec<usize>],
}

/// A task start checked and built by [`ExecutionService::prepare_start`], not yet written.
#[derive(Debug, Clone)]
pub struct PreparedStart {
    execution: ExecutionId,
    pub(crate) task: Task,
    pub(crate) expected: Revision,
    pub(crate) wait: StartWait,
}

/// What a step waited for before it started, recorded in its `task.attempt.started` entry
/// (`ready_at`, `lock_wait`): the runner saw it ready to run (its dependencies done, or its
/// retry due) at `ready_at`, and found a resource lock it needs held by someone else from the
/// first time of `lock_wait` until it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartWait {
    /// When the runner first saw the step ready to start.
    pub ready_at: Option<OffsetDateTime>,
    /// Since when it waited for its locks, and which.
    pub lock_wait: Option<(OffsetDateTime, Vec<String>)>,
}

impl PreparedStart {
    /// The start, with what the step waited for before it.
    #[must_use]
    pub fn with_wait(mut self, wait: StartWait) -> Self {
        self.wait = wait;
        self
    }

    /// The running task to write.
    #[must_use]
    pub const fn task(&self) -> &Task {
        &self.task
    }

    /// The revision the task was read at.
    #[must_use]
    pub const fn expected(&self) -> Revision {
        self.expected
    }
}

/// Executions: how runs of approved plans went.
#[derive(Clone)]
pub struct ExecutionService {
    store: Arc<dyn Store>,
    planning: PlanningService,
}

impl std::fmt::Debug for ExecutionService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutionService").finish_non_exhaustive()
    }
}

/// How many times a header update is retried after a CAS conflict (the runner and a
/// `decide` / `stop` from another process may race).
pub(crate) const HEADER_RETRIES: usize = 20;

impl ExecutionService {
    /// The same service deciding plans with `planning` (its approval policy).
    #[must_use]
    pub(crate) fn with_planning(mut self, planning: crate::planning::PlanningService) -> Self {
        self.planning = planning;
        self
    }

    /// A service over a store.
    #[must_use]
    pub fn new(store: Arc<dyn Store>, planning: PlanningService) -> Self {
        Self { store, planning }
    }

    /// The audit log of an execution.
    #[must_use]
    pub const fn log(plan_id: PlanId, execution_id: ExecutionId) -> AuditLogId {
        AuditLogId::Execution {
            plan_id,
            execution_id,
        }
    }

    /// Creates an execution of an approved plan (and only of one whose content still matches
    /// its approval digest).
    #[instrument(skip(self))]
    pub async fn create(&self, plan_id: PlanId) -> Result<(ApprovedPlan, ExecutionId)> {
        let plan = self.planning.approved(plan_id).await?;
        let (pending, tasks) = PendingExecution::new(ExecutionId::new(), &plan, now());
        let execution = Execution::Pending(pending);
        self.store.create_execution(&execution, &tasks).await?;
        self.append(
            &execution,
            AuditKind::ExecutionCreated,
            None,
            json!({ "plan_id": plan_id, "plan_digest": plan.digest(), "steps": tasks.len() }),
        )
        .await?;
        // The plan's run register names every execution, so a deleted one is found.
        self.store
            .append(
                AuditLogId::Runs { plan_id },
                NewAuditEntry::new(
                    AuditKind::ExecutionCreated,
                    json!({ "execution_id": execution.id(), "plan_digest": plan.digest() }),
                ),
            )
            .await?;
        Ok((plan, execution.id()))
    }

    /// An execution with its tasks.
    pub async fn get(&self, id: ExecutionId) -> Result<ExecutionSnapshot> {
        Ok(self.store.execution(id).await?)
    }

    /// Executions, newest first.
    pub async fn list(&self, plan: Option<PlanId>) -> Result<Listing<ExecutionSummary>> {
        Ok(self.store.list_executions(plan).await?)
    }

    /// The execution header only (cheap: no task records).
    pub async fn header(&self, id: ExecutionId) -> Result<Versioned<Execution>> {
        Ok(self.store.execution_header(id).await?)
    }

    /// Resolves a full execution id or a unique prefix of one.
    pub async fn resolve(&self, text: &str) -> Result<ExecutionId> {
        if let Ok(id) = text.parse::<ExecutionId>() {
            return Ok(id);
        }
        crate::planning::check_prefix(text, ExecutionId::PREFIX, "execution")?;
        let listing = self.list(None).await?;
        let ids = listing.items.into_iter().map(|s| s.execution_id);
        resolve_prefix(text, ExecutionId::PREFIX, "execution", ids).map_err(|e| {
            crate::planning::unreadable_match(e, text, ExecutionId::PREFIX, &listing.problems)
        })
    }

    /// Applies `change` to the execution header with CAS, re-reading and retrying on conflict.
    /// `change` returns `Ok(None)` to leave the header as it is.
    pub async fn update_header<F>(
        &self,
        id: ExecutionId,
        mut change: F,
    ) -> Result<Versioned<Execution>>
    where
        F: FnMut(Execution) -> Result<Option<Execution>> + Send,
    {
        let mut last_conflict = None;
        for _ in 0..HEADER_RETRIES {
            let Versioned { value, revision } = self.store.execution_header(id).await?;
            let Some(next) = change(value.clone())? else {
                return Ok(Versioned { value, revision });
            };
            match self.store.update_execution(&next, revision).await {
                Ok(revision) => {
                    return Ok(Versioned {
                        value: next,
                        revision,
                    });
                }
                Err(e @ StoreError::Conflict { .. }) => last_conflict = Some(e),
                Err(e) => return Err(e.into()),
            }
        }
        tracing::warn!(execution = %id, error = ?last_conflict, "the header kept changing concurrently");
        Err(ServiceError::Contended { execution: id })
    }

    /// Starts a pending execution (no-op if already running).
    pub async fn start(&self, id: ExecutionId) -> Result<Versioned<Execution>> {
        self.update_header(id, Self::started).await
    }

    /// The header a start writes over `e`: `None` if it runs already.
    pub(crate) fn started(e: Execution) -> Result<Option<Execution>> {
        match e {
            Execution::Pending(p) => Ok(Some(Execution::Running(p.start(now())))),
            Execution::Running(_) => Ok(None),
            other => Err(terminal(&other, "it cannot start again")),
        }
    }

    /// Claims a task: a pending task whose dependencies completed, or a failed one (retry),
    /// moves to running with its context, by CAS on the task's revision.
    ///
    /// # Errors
    ///
    /// The execution is not running, the step is unknown, a dependency has not completed, the
    /// task is not pending/failed, or another claimant won ([`StoreError::Conflict`]).
    pub async fn start_task(
        &self,
        plan: &ApprovedPlan,
        snapshot: &ExecutionSnapshot,
        step: &StepId,
        holder: &Holder,
        guidance: Option<String>,
        limits: &ContextLimits,
    ) -> Result<Versioned<Task>> {
        let index = plan
            .content()
            .position(step)
            .ok_or_else(|| TransitionError::UnknownStep(step.clone()))?;
        let deps = orca_core::graph::dependency_indices(&plan.content().steps);
        let claim = Claim {
            plan,
            execution: &snapshot.execution.value,
            tasks: &snapshot.tasks,
            deps: &deps,
        };
        let start = self.prepare_start(&claim, index, holder, guidance, limits)?;
        self.commit_start(start).await
    }

    /// The first half of [`Self::start_task`], for a caller that keeps the plan's graph and
    /// the tasks (in plan order) itself, like the runner: checks the start and builds the
    /// running task (with its context) without writing anything; [`Self::commit_start`] writes
    /// it. Nothing is recomputed or copied per task, so claiming stays O(1) in the size of the
    /// plan (plus the bounded context), and a caller can commit several starts at once.
    ///
    /// # Errors
    ///
    /// As [`Self::start_task`], except conflicts (those come from the commit).
    pub fn prepare_start(
        &self,
        claim: &Claim<'_>,
        index: usize,
        holder: &Holder,
        guidance: Option<String>,
        limits: &ContextLimits,
    ) -> Result<PreparedStart> {
        let Claim {
            plan,
            execution,
            tasks,
            deps,
        } = *claim;
        if execution.stage() != ExecutionStage::Running {
            return Err(terminal(
                execution,
                "tasks can only start while it is running",
            ));
        }
        let step = &plan
            .content()
            .steps
            .get(index)
            .ok_or(TransitionError::NoStepAt(index))?
            .id;
        schedule::check_start_with(plan.content(), deps, (index, step), |i| {
            tasks.get(i).map(|t| t.value.status())
        })?;
        let current = tasks
            .get(index)
            .filter(|t| t.value.step_id() == step)
            .ok_or(TransitionError::TaskMismatch)?;
        // Guidance goes on the failed attempt before the context is built, so it is threaded.
        let mut task = current.value.clone();
        if let Task::Failed(f) = &mut task
            && guidance.is_some()
        {
            f.set_guidance(guidance);
        }
        let context = build_context_with(
            plan.id(),
            plan.content(),
            deps,
            index,
            |i| {
                if i == index {
                    Some(&task)
                } else {
                    tasks.get(i).map(|t| &t.value)
                }
            },
            limits,
        )
        .ok_or_else(|| TransitionError::UnknownStep(step.clone()))?;
        let running: RunningTask = match task {
            Task::Pending(p) => p.start(context, holder.clone(), now()),
            Task::Failed(f) => f.retry(None, context, holder.clone(), now()),
            other => {
                return Err(TransitionError::TaskStatus {
                    step: step.clone(),
                    status: other.status(),
                    expected: "only pending or failed tasks can start",
                }
                .into());
            }
        };
        Ok(PreparedStart {
            execution: execution.id(),
            task: Task::Running(running),
            expected: current.revision,
            wait: StartWait::default(),
        })
    }

    /// Writes a start prepared by [`Self::prepare_start`] (compare-and-swap on the task).
    ///
    /// # Errors
    ///
    /// A conflict if the task changed since it was read; store errors.
    pub async fn commit_start(&self, start: PreparedStart) -> Result<Versioned<Task>> {
        let PreparedStart {
            execution,
            task,
            expected,
            wait: _,
        } = start;
        let revision = self.store.update_task(execution, &task, expected).await?;
        Ok(Versioned {
            value: task,
            revision,
        })
    }

    /// The running task `task` as its attempt's `outcome` leaves it.
    pub(crate) fn finished(task: Task, outcome: &TaskResult) -> Result<Task> {
        let running = Self::running(task)?;
        Ok(match outcome {
            TaskResult::Success(s) => Task::Completed(running.complete(s.clone(), now())),
            TaskResult::Failure(f) => Task::Failed(running.fail(f.clone(), now())),
            TaskResult::Interruption(i) => Task::Failed(running.interrupt(i.clone(), now())),
        })
    }

    fn running(task: Task) -> Result<RunningTask> {
        match task {
            Task::Running(running) => Ok(running),
            other => Err(TransitionError::TaskStatus {
                step: other.step_id().clone(),
                status: other.status(),
                expected: "only a running task can finish",
            }
            .into()),
        }
    }

    async fn finish_task(
        &self,
        execution: ExecutionId,
        task: Versioned<Task>,
        finish: impl FnOnce(RunningTask) -> Task,
    ) -> Result<Versioned<Task>> {
        let Versioned { value, revision } = task;
        let next = finish(Self::running(value)?);
        let revision = self.store.update_task(execution, &next, revision).await?;
        Ok(Versioned {
            value: next,
            revision,
        })
    }

    /// A running task failed.
    pub async fn fail_task(
        &self,
        execution: ExecutionId,
        task: Versioned<Task>,
        failure: TaskFailure,
    ) -> Result<Versioned<Task>> {
        self.finish_task(execution, task, |r| Task::Failed(r.fail(failure, now())))
            .await
    }

    /// Recovery: every running task was abandoned by a process that is gone (the caller holds
    /// the lease); each is recorded as an abandoned attempt and becomes failed (`interrupted`),
    /// ready to be retried. Returns the steps recovered.
    pub async fn recover(&self, id: ExecutionId, note: &str) -> Result<Vec<StepId>> {
        self.recover_steps(id, note, None).await
    }

    /// [`Self::recover`] of the running tasks among `only` (all when `None`), each only while
    /// it is still at the revision given: a task that changed meanwhile (its holder finished
    /// it after all; another worker took it over and claimed it again) is left as it is.
    pub async fn recover_steps(
        &self,
        id: ExecutionId,
        note: &str,
        only: Option<&[ExpiredTask]>,
    ) -> Result<Vec<StepId>> {
        let snap = self.get(id).await?;
        self.recover_among(&snap.execution.value, snap.tasks, note, only)
            .await
    }

    /// [`Self::recover_steps`] of `tasks`, the execution's tasks as last read (by a runner
    /// under the execution's lease, which nobody else writes under).
    pub(crate) async fn recover_among(
        &self,
        execution: &Execution,
        tasks: Vec<Versioned<Task>>,
        note: &str,
        only: Option<&[ExpiredTask]>,
    ) -> Result<Vec<StepId>> {
        let mut recovered = Vec::new();
        for t in tasks {
            if let Task::Running(r) = t.value {
                let seen = |e: &ExpiredTask| e.step == r.step_id && e.revision == t.revision;
                if only.is_some_and(|o| !o.iter().any(seen)) {
                    continue;
                }
                let step = r.step_id.clone();
                let attempt = r.attempt;
                let holder = r.holder.clone();
                let next = Task::Failed(r.abandon(note, now()));
                let entry = NewAuditEntry::new(
                    AuditKind::TaskAttemptAbandoned,
                    json!({ "step_id": step, "attempt": attempt, "holder": holder, "note": note }),
                )
                .with_parent(UNDER_EXECUTION);
                let abandoned = Versioned {
                    value: next,
                    revision: t.revision,
                };
                match self
                    .transition(
                        execution,
                        abandoned,
                        entry,
                        orca_store::WriteOrder::StateFirst,
                    )
                    .await
                {
                    Ok(_) => {}
                    // Another worker took this task over first (task-claiming workers).
                    Err(ServiceError::Store(StoreError::Conflict { .. })) if only.is_some() => {
                        continue;
                    }
                    Err(e) => return Err(e),
                }
                recovered.push(step);
            }
        }
        Ok(recovered)
    }

    /// The header completing a running execution makes (every task completed), judged on
    /// `tasks`: the execution's tasks as its runner knows them under the execution's lease
    /// (nobody else writes them then), not read again. `None`: it has completed already.
    pub(crate) fn completed(e: Execution, tasks: &[Task]) -> Result<Option<Execution>> {
        match e {
            Execution::Running(r) => r
                .complete(tasks, now())
                .map(|c| Some(Execution::Completed(c)))
                .map_err(|f| ServiceError::Transition(f.error)),
            Execution::Completed(_) => Ok(None),
            other => Err(terminal(&other, "it cannot complete")),
        }
    }

    /// Ends a running execution as failed.
    pub async fn fail(
        &self,
        id: ExecutionId,
        reason: &str,
        replanned_as: Option<PlanId>,
    ) -> Result<Versioned<Execution>> {
        self.update_header(id, |e| Self::failed(e, reason, replanned_as))
            .await
    }

    /// The header failing `e` makes; `None` if it has failed or stopped already.
    pub(crate) fn failed(
        e: Execution,
        reason: &str,
        replanned_as: Option<PlanId>,
    ) -> Result<Option<Execution>> {
        match e {
            Execution::Running(r) => {
                Ok(Some(Execution::Failed(r.fail(reason, replanned_as, now()))))
            }
            Execution::Pending(p) => Ok(Some(Execution::Failed(p.start(now()).fail(
                reason,
                replanned_as,
                now(),
            )))),
            Execution::Failed(_) | Execution::Stopped(_) => Ok(None),
            other => Err(terminal(&other, "it cannot fail")),
        }
    }

    /// Stops an execution (pending or running; a no-op if it already ended stopped or failed),
    /// without an audit entry: see [`Self::stop`] and [`Self::stop_by_decision`].
    #[instrument(skip(self, reason))]
    pub(crate) async fn stop_state(
        &self,
        id: ExecutionId,
        by: &str,
        reason: Option<String>,
    ) -> Result<Versioned<Execution>> {
        // Running tasks are marked cancelled first (a terminal execution's tasks are final);
        // their runner, in this or another process, sees the change and drops its agent calls.
        let snap = self.get(id).await?;
        if !snap.execution.value.stage().is_terminal() {
            for t in snap.tasks {
                if t.value.status() == TaskStatus::Running {
                    let failure = TaskFailure::new(
                        orca_core::ErrorCode::Cancelled,
                        format!("stopped by {by}"),
                    );
                    match self.fail_task(id, t, failure).await {
                        Ok(_) | Err(ServiceError::Store(StoreError::Conflict { .. })) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        let result = self
            .update_header(id, |e| match e {
                Execution::Pending(p) => {
                    Ok(Some(Execution::Stopped(p.stop(by, reason.clone(), now()))))
                }
                Execution::Running(r) => {
                    Ok(Some(Execution::Stopped(r.stop(by, reason.clone(), now()))))
                }
                Execution::Stopped(_) => Ok(None),
                other => Err(terminal(&other, "it has already ended")),
            })
            .await?;
        Ok(result)
    }

    /// Seals the execution's log if the execution has ended (idempotent). For a stop made
    /// while no process drives the execution: nobody else will seal it.
    pub async fn seal_if_ended(&self, id: ExecutionId) -> Result<bool> {
        let header = self.header(id).await?.value;
        if !header.stage().is_terminal() {
            return Ok(false);
        }
        let info = header.info();
        self.store.seal(Self::log(info.plan_id, info.id)).await?;
        Ok(true)
    }

    /// Records that the run waits for a human decision (durably).
    pub async fn await_decision(
        &self,
        id: ExecutionId,
        request: DecisionRequest,
    ) -> Result<Versioned<Execution>> {
        self.update_header(id, |e| match e {
            Execution::Running(r) => {
                if r.decision.as_ref().is_some_and(|d| d.request == request) {
                    return Ok(None);
                }
                r.await_decision(request.clone(), now())
                    .map(|r| Some(Execution::Running(r)))
                    .map_err(|f| ServiceError::Transition(f.error))
            }
            other => Err(terminal(
                &other,
                "only a running execution waits for decisions",
            )),
        })
        .await
    }

    /// Records a human's answer to the pending decision (from any process). The runner, or the
    /// next `resume`, applies it.
    #[instrument(skip(self))]
    pub async fn decide(
        &self,
        id: ExecutionId,
        decision: Decision,
        by: &str,
    ) -> Result<Versioned<Execution>> {
        let updated = self
            .update_header(id, |e| match e {
                Execution::Running(r) => r
                    .answer_decision(decision.clone(), by, now())
                    .map(|r| Some(Execution::Running(r)))
                    .map_err(|f| ServiceError::Transition(f.error)),
                other => Err(terminal(&other, "there is no decision to make")),
            })
            .await?;
        self.append(
            &updated.value,
            AuditKind::DecisionAnswered,
            UNDER_EXECUTION,
            json!({ "decision": decision, "by": by }),
        )
        .await?;
        Ok(updated)
    }

    /// Takes an answered decision off a running execution, to apply it.
    pub async fn take_answered(
        &self,
        id: ExecutionId,
    ) -> Result<Option<(DecisionRequest, orca_core::AnsweredDecision)>> {
        let mut taken = None;
        self.update_header(id, |e| match e {
            Execution::Running(r) => {
                let (r, answered): (RunningExecution, _) = r.take_answered();
                taken = answered;
                Ok(taken.as_ref().map(|_| Execution::Running(r)))
            }
            _ => Ok(None),
        })
        .await?;
        Ok(taken)
    }

    /// The store's revision of a task, for callers that hold a stale copy.
    pub async fn task(&self, id: ExecutionId, step: &StepId) -> Result<Versioned<Task>> {
        Ok(self.store.task(id, step).await?)
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The planning service.
    #[must_use]
    pub const fn planning(&self) -> &PlanningService {
        &self.planning
    }
}

pub(crate) fn terminal(execution: &Execution, why: &'static str) -> ServiceError {
    ServiceError::ExecutionStage {
        execution: execution.id(),
        stage: execution.stage(),
        why,
    }
}

/// An execution with every task record, as JSON: the execution's own fields, its
/// `execution_id` and its `tasks` (the shape of `orca exec show --json` and of the MCP
/// `execution_show` answer).
#[must_use]
pub fn snapshot_json(snap: &ExecutionSnapshot) -> Value {
    let mut value = json!(snap.execution.value);
    let tasks: Vec<Value> = snap.tasks.iter().map(|t| json!(t.value)).collect();
    if let Some(obj) = value.as_object_mut() {
        obj.insert("execution_id".to_owned(), json!(snap.execution.value.id()));
        obj.insert("tasks".to_owned(), Value::Array(tasks));
    }
    value
}
