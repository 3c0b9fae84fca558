//! The runner: drives one execution to its end.
//!
//! Event-driven: the moment a task ends, the next ready tasks start (up to the concurrency
//! limit); there is no scheduling tick. Tasks sharing a lock never run at once, also across
//! executions and processes (the store's resource locks). Failed attempts are retried with
//! exponential backoff and jitter; after the last attempt the deviation decision is asked
//! (Retry / Replan / Stop) or an unattended policy applies (stop, or skip the dependents and
//! finish the independent branches). Waiting for a human is durable: with no human to answer,
//! the run returns [`RunOutcome::AwaitingDecision`] and a later `decide` + `resume` continues it.
//!
//! Delivery to agents is **at least once**: if the process dies while an agent call is in
//! flight, `resume` records that attempt as abandoned and runs the step again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use orca_core::{
    ApprovedPlan, AttemptOutcome, Budget, ContextLimits, Decision, DecisionRequest, ErrorCode,
    Execution, ExecutionId, ExecutionStage, Holder, PlanId, PlanRefStage, PlannerResponse, Reply,
    StepId, Task, TaskFailure, TaskRequest, TaskResult, TaskStatus, Usage, hitl::HumanAnswer,
    schedule,
};
use orca_store::audit::NewAuditEntry;
use orca_store::{ResourceGuard, StoreError, Versioned};
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, instrument, warn};

use crate::dispatch::DispatchService;
use crate::error::{Result, ServiceError};
use crate::execution::ExecutionService;
use crate::hitl::{Hitl, decision_question};
use crate::relay::{ApprovalOutcome, OrcaService};
use crate::tools::AuditScope;

/// What happens when a step finally fails and no human is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Ask the human (Retry / Replan / Stop). With no human available the decision stays
    /// pending and the run returns [`RunOutcome::AwaitingDecision`].
    #[default]
    Ask,
    /// End the execution as failed (running tasks finish first).
    Stop,
    /// Skip the failed step's dependents, finish the independent branches, end failed.
    Skip,
}

/// Exponential backoff with jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The delay before the second attempt.
    pub base: Duration,
    /// The longest delay.
    pub max: Duration,
    /// Random spread, as a fraction of the delay (0.0–1.0).
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(500),
            max: Duration::from_secs(30),
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// The delay after `failed_attempts` attempts (1 = after the first).
    #[must_use]
    pub fn delay(&self, failed_attempts: u32) -> Duration {
        let exp = failed_attempts.saturating_sub(1).min(20);
        let raw = self.base.saturating_mul(1u32 << exp).min(self.max);
        let spread = self.jitter.clamp(0.0, 1.0);
        let factor = 1.0 + spread * (fastrand::f64() * 2.0 - 1.0);
        raw.mul_f64(factor.max(0.0)).min(self.max)
    }
}

/// How a run behaves.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Tasks in flight at once.
    pub concurrency: usize,
    /// Attempts per step unless the step says otherwise.
    pub max_attempts: u32,
    /// Delay between automatic retries.
    pub backoff: Backoff,
    /// Wall-clock limit per attempt unless the step says otherwise.
    pub task_timeout: Option<Duration>,
    /// What happens after a step's last attempt.
    pub on_failure: FailurePolicy,
    /// Limits per task.
    pub task_budget: Budget,
    /// Limits for the whole execution (tokens, cost, turns summed; wall time since start).
    pub execution_budget: Budget,
    /// Bounds on each task's context.
    pub context_limits: ContextLimits,
    /// Who the decisions are recorded as made by.
    pub actor: String,
    /// How often to look for a stop or decision made by another process while tasks run.
    pub watch_interval: Duration,
    /// Who holds the execution (this process).
    pub holder: Holder,
    /// How long a driver's lease counts as live without a renewal (readers on other hosts
    /// use it; on the lease's own host a dead holder is seen at once). Renewed every third.
    pub lease_timeout: Duration,
    /// The isolation of writing steps when neither they nor their plan name one (ADR 0017).
    pub isolation: Option<orca_core::Isolation>,
}

impl RunConfig {
    /// Defaults for a holder.
    #[must_use]
    pub fn new(holder: Holder) -> Self {
        Self {
            concurrency: 4,
            max_attempts: 2,
            backoff: Backoff::default(),
            task_timeout: None,
            on_failure: FailurePolicy::Ask,
            task_budget: Budget::UNLIMITED,
            execution_budget: Budget::UNLIMITED,
            context_limits: ContextLimits::default(),
            actor: "user".to_owned(),
            watch_interval: Duration::from_millis(200),
            holder,
            lease_timeout: Duration::from_secs(30),
            isolation: None,
        }
    }
}

/// How a run ended (for now).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunOutcome {
    /// Every task completed.
    Completed,
    /// Ended with work not done.
    Failed {
        /// Why.
        reason: String,
    },
    /// Stopped by a person.
    Stopped {
        /// Why, if given.
        reason: Option<String>,
    },
    /// Stopped by Ctrl-C or `exec stop` (the run was cancelled): the attempts in flight were
    /// ended and recorded as interrupted; the execution stays running, and `resume` continues
    /// it without re-running completed steps.
    Interrupted {
        /// The steps whose attempts were interrupted.
        steps: Vec<StepId>,
    },
    /// Waiting for a human decision nobody could make now (answer with `decide`, then resume).
    AwaitingDecision {
        /// What is asked.
        request: DecisionRequest,
    },
    /// The human chose Replan: this execution ended failed; a new plan supersedes its plan.
    Replanned {
        /// The new plan.
        plan_id: PlanId,
        /// The new plan's execution, if it was approved.
        execution_id: Option<ExecutionId>,
    },
}

impl RunOutcome {
    /// The stage the execution is in after this outcome.
    #[must_use]
    pub const fn stage(&self) -> ExecutionStage {
        match self {
            Self::Completed => ExecutionStage::Completed,
            Self::Failed { .. } | Self::Replanned { .. } => ExecutionStage::Failed,
            Self::Stopped { .. } => ExecutionStage::Stopped,
            Self::AwaitingDecision { .. } | Self::Interrupted { .. } => ExecutionStage::Running,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// The execution.
    pub execution_id: ExecutionId,
    /// How it ended.
    pub outcome: RunOutcome,
    /// Agent usage during this run.
    pub usage: Usage,
}

/// Progress, for a UI.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunEvent {
    /// The run took over from a dead process; these attempts were abandoned.
    Recovered {
        /// The steps whose attempts were abandoned.
        steps: Vec<StepId>,
    },
    /// An attempt started.
    TaskStarted {
        /// The step.
        step: StepId,
        /// Its agent.
        agent: String,
        /// The attempt.
        attempt: u32,
    },
    /// A step completed.
    TaskCompleted {
        /// The step.
        step: StepId,
        /// Its summary.
        summary: String,
    },
    /// An attempt failed.
    TaskFailed {
        /// The step.
        step: StepId,
        /// The failure.
        failure: TaskFailure,
        /// When it will be retried automatically, if it will.
        retry_in: Option<Duration>,
    },
    /// A step was skipped.
    TaskSkipped {
        /// The step.
        step: StepId,
    },
    /// A human decision is needed.
    DecisionNeeded {
        /// What is asked.
        request: DecisionRequest,
    },
}

/// Receives progress events.
pub trait Observer: Send + Sync {
    /// Called for each event, in order.
    fn event(&self, event: &RunEvent);
}

/// Ignores events.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Observer for Quiet {
    fn event(&self, _event: &RunEvent) {}
}

/// Drives executions.
#[derive(Clone)]
pub struct Runner {
    executions: ExecutionService,
    dispatch: DispatchService,
    orca: OrcaService,
    hitl: Arc<dyn Hitl>,
    observer: Arc<dyn Observer>,
    config: RunConfig,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

struct InFlight {
    /// Released when the reply is in.
    _locks: Option<ResourceGuard>,
}

/// What an agent's task hands back: unless the call was cancelled, the reply and how writing
/// it to the store went (the write happens in the agent's task, so the replies of parallel
/// tasks are written in parallel).
type Joined = Option<(Recording, Result<Versioned<Task>>)>;

/// A task start that is written, with its audit entries.
struct Started {
    task: Versioned<Task>,
    /// `task.attempt.started`: the parent of what the agent logs.
    attempt_seq: u64,
}

/// An agent reply about to be written.
struct Recording {
    index: usize,
    step: StepId,
    /// The running task the reply is for.
    task: Versioned<Task>,
    /// Attempts counted before this one ended.
    running_attempts: u32,
    outcome: TaskResult,
    usage: Usage,
    /// The audit entry of the attempt's start.
    parent: u64,
}

impl Recording {
    /// Writes the attempt's audit entry, then the task's new state: a state file never holds
    /// a result the log does not (ADR 0013; the completed entry carries the result's digest).
    /// If the state cannot be written after the entry was, that is logged too.
    async fn write(
        &self,
        executions: &ExecutionService,
        execution: ExecutionId,
        log: orca_store::AuditLogId,
    ) -> Result<Versioned<Task>> {
        let (kind, data) = match &self.outcome {
            TaskResult::Success(success) => (
                "task.attempt.completed",
                json!({ "step_id": self.step, "usage": self.usage, "summary": success.summary,
                        crate::integrity::RESULT_DIGEST: crate::integrity::result_digest(success) }),
            ),
            TaskResult::Failure(failure) => (
                "task.attempt.failed",
                json!({ "step_id": self.step, "failure": failure, "usage": self.usage }),
            ),
            TaskResult::Interruption(interruption) => (
                "task.attempt.interrupted",
                json!({ "step_id": self.step, "interruption": interruption }),
            ),
        };
        let store = executions.store();
        store
            .append(
                log,
                NewAuditEntry::new(kind, data).with_parent(Some(self.parent)),
            )
            .await?;
        let task = self.task.clone();
        let done = match &self.outcome {
            TaskResult::Success(success) => {
                executions
                    .complete_task(execution, task, success.clone())
                    .await
            }
            TaskResult::Failure(failure) => {
                executions.fail_task(execution, task, failure.clone()).await
            }
            TaskResult::Interruption(interruption) => {
                executions
                    .interrupt_task(execution, task, interruption.clone())
                    .await
            }
        };
        if let Err(e) = &done {
            let _ = store
                .append(
                    log,
                    NewAuditEntry::new(
                        "task.attempt.unrecorded",
                        json!({ "step_id": self.step, "error": e.to_string() }),
                    )
                    .with_parent(Some(self.parent)),
                )
                .await;
        }
        done
    }
}

struct Run {
    id: ExecutionId,
    plan: ApprovedPlan,
    /// The plan's dependency indices, computed once.
    deps: Vec<Vec<usize>>,
    execution: Execution,
    tasks: Vec<Versioned<Task>>,
    in_flight: HashMap<usize, InFlight>,
    joins: JoinSet<Joined>,
    /// Cancels the agent calls in `joins` (never their writes: a reply that is in gets written
    /// whole, task and audit entry).
    calls: CancellationToken,
    retry_at: BTreeMap<usize, Instant>,
    retry_now: BTreeMap<usize, Option<String>>,
    abandoned: BTreeSet<StepId>,
    blocked_on_locks: bool,
    usage: Usage,
    started: Instant,
    /// When the execution header was last read.
    last_refresh: Instant,
    stop_after_drain: Option<String>,
}

impl Run {
    fn values(&self) -> Vec<Task> {
        self.tasks.iter().map(|t| t.value.clone()).collect()
    }

    /// Pending tasks whose dependencies all completed, in plan order, without copying tasks.
    fn ready(&self) -> Vec<usize> {
        let done = |i: &usize| {
            self.tasks
                .get(*i)
                .is_some_and(|t| t.value.status() == TaskStatus::Completed)
        };
        self.tasks
            .iter()
            .enumerate()
            .filter(|(i, t)| {
                t.value.status() == TaskStatus::Pending
                    && self.deps.get(*i).is_some_and(|ds| ds.iter().all(done))
            })
            .map(|(i, _)| i)
            .collect()
    }

    fn log_scope(&self, parent: Option<u64>) -> AuditScope {
        AuditScope {
            log: ExecutionService::log(self.plan.id(), self.id),
            parent,
        }
    }
}

impl Runner {
    /// A runner.
    #[must_use]
    pub fn new(
        executions: ExecutionService,
        dispatch: DispatchService,
        orca: OrcaService,
        hitl: Arc<dyn Hitl>,
        observer: Arc<dyn Observer>,
        config: RunConfig,
    ) -> Self {
        Self {
            executions,
            dispatch,
            orca,
            hitl,
            observer,
            config,
        }
    }

    /// The configuration.
    #[must_use]
    pub const fn config(&self) -> &RunConfig {
        &self.config
    }

    /// Drives an execution until it ends, waits for a decision nobody can make now, or is
    /// cancelled (which stops it). Takes the execution's lease first: if a live process
    /// holds it, this fails with [`StoreError::LeaseHeld`]; a dead holder's lease is taken over
    /// and its in-flight attempts are recorded as abandoned.
    #[instrument(skip(self, cancel))]
    pub async fn run(&self, id: ExecutionId, cancel: CancellationToken) -> Result<RunReport> {
        let store = self.executions.store().clone();
        let lease = Arc::new(store.acquire_lease(id, &self.config.holder).await?);
        let heartbeat = crate::takeover::heartbeat(
            store.clone(),
            Arc::clone(&lease),
            self.config.lease_timeout / 3,
        );
        let snap = self.executions.get(id).await?;
        if let Some(outcome) = terminal_outcome(&snap.execution.value) {
            heartbeat.stop().await;
            return Ok(RunReport {
                execution_id: id,
                outcome,
                usage: Usage::default(),
            });
        }
        let plan_id = snap.execution.value.info().plan_id;
        // The record first (ADR 0013): the log must verify and the state files agree with it.
        let log = ExecutionService::log(plan_id, id);
        let problem = match store.verify(log).await? {
            orca_store::VerifyReport::Tampered { seq, problem } => Some(format!(
                "its audit log was tampered with: entry {seq}: {problem}"
            )),
            orca_store::VerifyReport::Intact { .. } => None,
        };
        let entries = match problem {
            Some(_) => Vec::new(),
            None => store.entries(log).await?,
        };
        let problem = problem.or_else(|| {
            crate::integrity::against_log(&snap, &entries)
                .into_iter()
                .next()
                .map(|f| f.to_string())
        });
        if let Some(problem) = problem {
            // Recorded where the execution's own log cannot be trusted: the plan's run register.
            let _ = store
                .append(
                    orca_store::AuditLogId::Runs { plan_id },
                    NewAuditEntry::new(
                        "run.refused",
                        json!({ "execution_id": id, "problem": problem }),
                    ),
                )
                .await;
            return Err(ServiceError::Tampered(format!(
                "refused to run execution {id}: {problem}"
            )));
        }
        let plan = self.executions.planning().approved(plan_id).await?;
        if plan.digest() != &snap.execution.value.info().plan_digest {
            return Err(ServiceError::PlanTampered(plan_id));
        }
        if entries.is_empty() {
            // The process that created it died before its first entry (see `against_log`).
            self.executions
                .audit(
                    &snap.execution.value,
                    "execution.created",
                    None,
                    json!({ "plan_id": plan_id, "plan_digest": plan.digest(),
                            "steps": snap.tasks.len(), "recovered": true }),
                )
                .await?;
        }
        // Whatever the dead runner's steps started dies before anything runs again.
        crate::takeover::end_dead_runner_processes(
            &self.executions,
            self.dispatch.context().agents.as_ref(),
            id,
            &self.config.holder.host,
        )
        .await?;
        let was_pending = snap.execution.value.stage() == ExecutionStage::Pending;
        let started = self.executions.start(id).await?;
        if was_pending {
            self.executions
                .audit(
                    &started.value,
                    "execution.started",
                    Some(0),
                    json!({ "holder": self.config.holder }),
                )
                .await?;
        } else {
            self.executions
                .audit(
                    &started.value,
                    "execution.resumed",
                    Some(0),
                    json!({ "holder": self.config.holder, "took_over": lease.took_over() }),
                )
                .await?;
        }
        let note = lease.took_over().map_or_else(
            || "the attempt was in flight when its runner stopped".to_owned(),
            |l| {
                format!(
                    "the process running it (pid {} on {}) is gone",
                    l.holder.pid, l.holder.host
                )
            },
        );
        let recovered = self.executions.recover(id, &note).await?;
        if !recovered.is_empty() {
            info!(execution = %id, steps = ?recovered, "recovered abandoned attempts");
            self.observer.event(&RunEvent::Recovered {
                steps: recovered.clone(),
            });
        }
        let snap = self.executions.get(id).await?;
        let retry_now = recovered
            .iter()
            .filter_map(|s| plan.content().position(s))
            .map(|i| (i, None))
            .collect();
        let deps = orca_core::graph::dependency_indices(&plan.content().steps);
        let mut run = Run {
            id,
            plan,
            deps,
            execution: snap.execution.value,
            tasks: snap.tasks,
            in_flight: HashMap::new(),
            joins: JoinSet::new(),
            calls: CancellationToken::new(),
            retry_at: BTreeMap::new(),
            retry_now,
            abandoned: BTreeSet::new(),
            blocked_on_locks: false,
            usage: Usage::default(),
            started: Instant::now(),
            last_refresh: Instant::now(),
            stop_after_drain: None,
        };
        let outcome = self.drive(&mut run, &cancel).await;
        if outcome.is_err() {
            // Agent calls stop; replies already in are written whole before the lease goes,
            // and their processes are gone before their locks are.
            Self::drain_calls(&mut run).await;
            self.dispatch.context().agents.settle().await;
            run.in_flight.clear();
        }
        let outcome = outcome?;
        if outcome.stage().is_terminal() {
            let log = ExecutionService::log(run.plan.id(), id);
            store.seal(log).await?;
        }
        heartbeat.stop().await;
        drop(lease);
        Ok(RunReport {
            execution_id: id,
            outcome,
            usage: run.usage,
        })
    }

    /// Re-reads the execution header: stops and decisions made by other processes. Cheap —
    /// the runner keeps its own task records current from its own writes, so it never re-reads
    /// every task on every event (that would make a run of N tasks cost O(N²)).
    async fn refresh(&self, run: &mut Run) -> Result<()> {
        run.execution = self.executions.header(run.id).await?.value;
        run.last_refresh = Instant::now();
        Ok(())
    }

    /// Re-reads everything, after a conflict showed that another writer changed a task.
    async fn refresh_all(&self, run: &mut Run) -> Result<()> {
        let snap = self.executions.get(run.id).await?;
        run.execution = snap.execution.value;
        run.tasks = snap.tasks;
        run.last_refresh = Instant::now();
        Ok(())
    }

    fn store_task(run: &mut Run, index: usize, task: Versioned<Task>) {
        if let Some(slot) = run.tasks.get_mut(index) {
            *slot = task;
        }
    }

    fn max_attempts(&self, run: &Run, index: usize) -> u32 {
        run.plan
            .content()
            .steps
            .get(index)
            .and_then(|s| s.max_attempts)
            .unwrap_or(self.config.max_attempts)
            .max(1)
    }

    async fn drive(&self, run: &mut Run, cancel: &CancellationToken) -> Result<RunOutcome> {
        loop {
            // Someone else may have stopped the run, or answered the pending decision: look at
            // most once per watch interval (the header holds every step id, so reading it per
            // event would make a run of N tasks cost O(N²)); our own header changes refresh it
            // at once, and so does having nothing in flight (below).
            if run.last_refresh.elapsed() >= self.config.watch_interval {
                self.refresh(run).await?;
            }
            if let Some(outcome) = terminal_outcome(&run.execution) {
                self.cancel_in_flight(run, "the execution was stopped")
                    .await?;
                return Ok(outcome);
            }
            if let Some(pending) = run.execution.decision()
                && pending.answer.is_some()
                && run.joins.is_empty()
                && let Some((request, answered)) = self.executions.take_answered(run.id).await?
            {
                if let Some(outcome) = self
                    .apply_decision(run, &request, answered.decision, &answered.by)
                    .await?
                {
                    return Ok(outcome);
                }
                // The decision is off the header now.
                self.refresh(run).await?;
                continue;
            }
            self.reconcile_failed(run).await?;
            let waiting_decision = run.execution.decision().is_some();

            if !waiting_decision && run.stop_after_drain.is_none() {
                self.launch_ready(run).await?;
            }

            if run.joins.is_empty() {
                // Nothing in flight: before concluding anything, read the latest header.
                self.refresh(run).await?;
                if let Some(outcome) = terminal_outcome(&run.execution) {
                    return Ok(outcome);
                }
                if let Some(reason) = run.stop_after_drain.take() {
                    self.executions.fail(run.id, &reason, None).await?;
                    self.audit(run, "execution.failed", json!({ "reason": reason }))
                        .await?;
                    return Ok(RunOutcome::Failed { reason });
                }
                if let Some(pending) = run.execution.decision().cloned() {
                    if pending.answer.is_some() {
                        continue;
                    }
                    let answer = tokio::select! {
                        answer = self.ask_human(run, &pending.request) => answer?,
                        // Ctrl-C at the prompt: nothing is in flight; the decision stays
                        // pending, the execution resumable.
                        () = cancel.cancelled() => {
                            self.audit(run, "execution.interrupted", json!({ "by": self.config.actor, "holder": self.config.holder, "steps": [] })).await?;
                            return Ok(RunOutcome::Interrupted { steps: Vec::new() });
                        }
                    };
                    match answer {
                        Some(decision) => {
                            self.executions
                                .decide(run.id, decision, &self.config.actor)
                                .await?;
                            self.refresh(run).await?;
                            continue;
                        }
                        None => {
                            return Ok(RunOutcome::AwaitingDecision {
                                request: pending.request,
                            });
                        }
                    }
                }
                if run.retry_at.is_empty() && run.retry_now.is_empty() && !run.blocked_on_locks {
                    let ready = run.ready();
                    if ready.is_empty() {
                        return self.finish(run).await;
                    }
                    // Ready but nothing launched (e.g. the lock was released meanwhile): go round.
                    continue;
                }
            }

            let next_retry = run.retry_at.values().min().copied();
            let lock_poll = run.blocked_on_locks;
            tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    let steps = self.interrupt_in_flight(run).await?;
                    self.audit(run, "execution.interrupted", json!({ "by": self.config.actor, "holder": self.config.holder, "steps": steps })).await?;
                    return Ok(RunOutcome::Interrupted { steps });
                }
                Some(joined) = run.joins.join_next(), if !run.joins.is_empty() => {
                    match joined {
                        Ok(Some((recording, written))) => {
                            self.on_recorded(run, recording, written).await?;
                        }
                        Ok(None) => {}
                        Err(e) if e.is_cancelled() => {}
                        Err(e) => warn!(error = %e, "an agent call panicked"),
                    }
                }
                () = sleep_until_opt(next_retry), if next_retry.is_some() => {
                    let now = Instant::now();
                    let due: Vec<usize> = run.retry_at.iter().filter(|(_, t)| **t <= now).map(|(i, _)| *i).collect();
                    for i in due {
                        run.retry_at.remove(&i);
                        run.retry_now.insert(i, None);
                    }
                }
                () = tokio::time::sleep(Duration::from_millis(50)), if lock_poll => {}
                // Also the backstop: nothing can leave the loop waiting forever.
                () = tokio::time::sleep(self.config.watch_interval) => {}
            }
        }
    }

    async fn audit(&self, run: &Run, kind: &str, data: serde_json::Value) -> Result<u64> {
        Ok(self
            .executions
            .audit(&run.execution, kind, Some(0), data)
            .await?
            .seq)
    }

    /// Starts ready tasks (and due retries) up to the concurrency: decides them one by one,
    /// writes their starts concurrently (the file store's group commit turns N starts into a
    /// few fsyncs), then hands each to its agent.
    async fn launch_ready(&self, run: &mut Run) -> Result<()> {
        run.blocked_on_locks = false;
        let mut candidates: Vec<(usize, Option<String>)> =
            run.ready().into_iter().map(|i| (i, None)).collect();
        for (i, g) in &run.retry_now {
            if run.tasks.get(*i).map(|t| t.value.status()) == Some(TaskStatus::Failed) {
                candidates.push((*i, g.clone()));
            }
        }
        candidates.sort_by_key(|(i, _)| *i);
        candidates.dedup_by_key(|(i, _)| *i);

        // 1. Decide, in plan order, without writing.
        let mut decided: Vec<(usize, Option<ResourceGuard>)> = Vec::new();
        let mut starts: Vec<crate::PreparedStart> = Vec::new();
        for (index, guidance) in candidates {
            if run.joins.len() + decided.len() >= self.config.concurrency.max(1) {
                break;
            }
            if run.in_flight.contains_key(&index) {
                continue;
            }
            let Some(step) = run.plan.content().steps.get(index) else {
                continue;
            };
            let locks = if step.locks.is_empty() {
                None
            } else {
                match self
                    .executions
                    .store()
                    .try_lock_resources(&step.locks, &self.config.holder)
                    .await?
                {
                    Some(guard) => Some(guard),
                    None => {
                        run.blocked_on_locks = true;
                        continue;
                    }
                }
            };
            let claim = crate::execution::Claim {
                plan: &run.plan,
                execution: &run.execution,
                tasks: &run.tasks,
                deps: &run.deps,
            };
            let start = self.executions.prepare_start(
                &claim,
                index,
                &self.config.holder,
                guidance,
                &self.config.context_limits,
            )?;
            decided.push((index, locks));
            starts.push(start);
        }
        if decided.is_empty() {
            return Ok(());
        }

        // 2. Write the starts and their audit entries, all at once.
        let log = ExecutionService::log(run.plan.id(), run.id);
        let mut writes = JoinSet::new();
        for (slot, ((index, _), start)) in decided.iter().zip(starts).enumerate() {
            let Some(step) = run.plan.content().steps.get(*index) else {
                continue;
            };
            let (step_id, agent) = (step.id.clone(), step.agent.clone());
            let executions = self.executions.clone();
            writes.spawn(async move {
                let started = executions.commit_start(start).await?;
                let attempt = match &started.value {
                    Task::Running(r) => r.attempt,
                    _ => 0,
                };
                // One entry per attempt: it is the agent call too, and what the agent logs
                // (model calls, tool calls) hangs under it.
                let attempt_seq = executions
                    .store()
                    .append(
                        log,
                        NewAuditEntry::new(
                            "task.attempt.started",
                            json!({ "step_id": step_id, "agent": agent, "attempt": attempt }),
                        )
                        .with_parent(Some(0)),
                    )
                    .await?
                    .seq;
                Ok::<_, ServiceError>((
                    slot,
                    Started {
                        task: started,
                        attempt_seq,
                    },
                ))
            });
        }
        let mut written: Vec<Option<Started>> = (0..decided.len()).map(|_| None).collect();
        let mut first_error = None;
        while let Some(joined) = writes.join_next().await {
            match joined {
                Ok(Ok((slot, started))) => {
                    if let Some(w) = written.get_mut(slot) {
                        *w = Some(started);
                    }
                }
                Ok(Err(ServiceError::Store(StoreError::Conflict { .. }))) => {}
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    first_error.get_or_insert(ServiceError::Store(StoreError::backend(
                        "writing a task start",
                        e,
                    )));
                }
            }
        }
        if let Some(e) = first_error {
            // Tasks whose start was written are recovered as interrupted attempts on resume.
            return Err(e);
        }

        // 3. Hand each started task to its agent, in plan order.
        let mut conflicted = false;
        for ((index, locks), outcome) in decided.into_iter().zip(written) {
            let Some(started) = outcome else {
                // Someone else changed the task meanwhile.
                conflicted = true;
                continue;
            };
            self.dispatch_started(run, index, locks, started);
        }
        if conflicted {
            self.refresh_all(run).await?;
        }
        Ok(())
    }

    /// Spawns the agent call of a task whose start is written.
    fn dispatch_started(
        &self,
        run: &mut Run,
        index: usize,
        locks: Option<ResourceGuard>,
        started: Started,
    ) {
        let Started {
            task: started,
            attempt_seq,
        } = started;
        let Some(step) = run.plan.content().steps.get(index).cloned() else {
            return;
        };
        run.retry_now.remove(&index);
        let Task::Running(running) = &started.value else {
            return;
        };
        let attempt = running.attempt;
        let context = running.context.clone();
        if let Some(slot) = run.tasks.get_mut(index) {
            slot.clone_from(&started);
        }
        self.observer.event(&RunEvent::TaskStarted {
            step: step.id.clone(),
            agent: step.agent.to_string(),
            attempt,
        });
        let elapsed = run.started.elapsed().as_secs();
        // Hook (ADR 0017): the plan's approved budgets join the configured ones.
        let limits = crate::budgets::StepLimits::new(
            &self.config.task_budget,
            &self.config.execution_budget,
            run.plan.content(),
            &step,
        );
        let budget = limits.request(&run.usage, elapsed);
        let timeout = step
            .timeout_secs
            .map(Duration::from_secs)
            .or(self.config.task_timeout);
        let timeout = match limits.step.max_wall_secs.map(Duration::from_secs) {
            Some(wall) => Some(timeout.map_or(wall, |t| t.min(wall))),
            None => timeout,
        };
        // Hook (ADR 0017): the step carries its effective isolation (its own, else the
        // plan's default for writing steps) for the dispatcher.
        let mut step = step;
        step.isolation = Some(orca_core::Isolation::of(
            &step,
            run.plan.content(),
            self.config.isolation,
        ));
        let request = TaskRequest {
            agent: step.agent.clone(),
            execution_id: run.id,
            plan_id: run.plan.id(),
            step,
            attempt,
            context,
            budget,
            timeout,
            workdir: None,
        };
        let exhausted = limits.exhausted(&run.usage, elapsed);
        let spent_before = run.usage;
        let run_started = run.started;
        let dispatch = self.dispatch.clone();
        let scope = run.log_scope(Some(attempt_seq));
        let held_fds = locks.as_ref().map(|l| l.fds().to_vec()).unwrap_or_default();
        run.in_flight.insert(index, InFlight { _locks: locks });
        let executions = self.executions.clone();
        let (id, log) = (run.id, ExecutionService::log(run.plan.id(), run.id));
        let calls = run.calls.clone();
        let step_id = request.step.id.clone();
        let agents = self.dispatch.context().agents.clone();
        run.joins.spawn(async move {
            let mut started = started;
            let attempt_started = Instant::now();
            let reply = if let Some(why) = exhausted {
                Reply::new(TaskResult::Failure(TaskFailure::new(
                    ErrorCode::BudgetExceeded,
                    why,
                )))
            } else {
                let agents = agents.clone();
                let call = move |sink| async move {
                    let call =
                        dispatch.dispatch_task_owned(request, Some(scope), Some(sink), held_fds);
                    match timeout {
                        Some(limit) => match tokio::time::timeout(limit, call).await {
                            Ok(reply) => reply,
                            Err(_) => {
                                // Its processes are being ended: wait for them before the
                                // reply (and the locks) are let go.
                                agents.settle().await;
                                Reply::new(TaskResult::Failure(TaskFailure::new(
                                    ErrorCode::Timeout,
                                    format!("the attempt took longer than {}s", limit.as_secs()),
                                )))
                            }
                        },
                        None => call.await,
                    }
                };
                crate::takeover::call_recording_groups(call, &executions, id, &mut started, &calls)
                    .await?
            };
            // Hook (ADR 0017): an overrun names the budget (the step's or the plan's).
            let outcome = limits.check(
                &step_id,
                reply.outcome,
                &reply.usage,
                attempt_started.elapsed().as_secs(),
                &spent_before,
                run_started.elapsed().as_secs(),
            );
            let recording = Recording {
                index,
                step: step_id,
                running_attempts: started.value.counted_attempts(),
                task: started,
                outcome,
                usage: reply.usage,
                parent: attempt_seq,
            };
            let written = recording.write(&executions, id, log).await;
            Some((recording, written))
        });
    }

    /// Takes in a reply its agent's task has written (or failed to write).
    async fn on_recorded(
        &self,
        run: &mut Run,
        recording: Recording,
        written: Result<Versioned<Task>>,
    ) -> Result<()> {
        run.in_flight.remove(&recording.index);
        run.usage.add(&recording.usage);
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
                self.refresh_all(run).await
            }
            Err(e) => Err(e),
        }
    }

    /// Updates the runner's view after a reply was written: events, retries.
    fn apply_recording(&self, run: &mut Run, recording: Recording, task: Versioned<Task>) {
        let Recording {
            index,
            step,
            running_attempts,
            outcome,
            ..
        } = recording;
        Self::store_task(run, index, task);
        match outcome {
            TaskResult::Success(success) => {
                self.observer.event(&RunEvent::TaskCompleted {
                    step,
                    summary: success.summary,
                });
            }
            TaskResult::Failure(failure) => {
                let retry_in = (retryable(failure.code)
                    && running_attempts < self.max_attempts(run, index))
                .then(|| self.config.backoff.delay(running_attempts));
                if let Some(delay) = retry_in {
                    run.retry_at.insert(index, Instant::now() + delay);
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

    /// Finds failed tasks nobody is handling: retries those with attempts left (also after a
    /// crash lost the backoff timer), and asks about the first one that needs a decision —
    /// one decision at a time, so a second final failure waits for the first to be answered.
    async fn reconcile_failed(&self, run: &mut Run) -> Result<()> {
        if run.execution.decision().is_some() || run.stop_after_drain.is_some() {
            return Ok(());
        }
        let mut needs_decision = Vec::new();
        for (index, task) in run.tasks.iter().enumerate() {
            let Task::Failed(failed) = &task.value else {
                continue;
            };
            if run.in_flight.contains_key(&index)
                || run.retry_at.contains_key(&index)
                || run.retry_now.contains_key(&index)
                || run.abandoned.contains(&failed.step_id)
            {
                continue;
            }
            if failed.was_abandoned() {
                run.retry_now.insert(index, None);
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
                    if retryable(failure.code) && counted < self.max_attempts(run, index) {
                        run.retry_now.insert(index, None);
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
        let changed = !needs_decision.is_empty();
        for (index, request) in needs_decision {
            self.deviation(run, index, request).await?;
            if self.config.on_failure == FailurePolicy::Ask {
                break;
            }
        }
        if changed {
            self.refresh(run).await?;
        }
        Ok(())
    }

    async fn deviation(&self, run: &mut Run, index: usize, request: DecisionRequest) -> Result<()> {
        match self.config.on_failure {
            FailurePolicy::Ask => {
                self.executions
                    .await_decision(run.id, request.clone())
                    .await?;
                self.audit(run, "decision.requested", json!({ "request": request }))
                    .await?;
                self.observer.event(&RunEvent::DecisionNeeded { request });
            }
            FailurePolicy::Stop => {
                let reason = format!("step `{}` failed; policy: stop", request.step_id());
                self.audit(
                    run,
                    "policy.applied",
                    json!({ "policy": "stop", "request": request }),
                )
                .await?;
                run.stop_after_drain = Some(reason);
            }
            FailurePolicy::Skip => {
                self.audit(
                    run,
                    "policy.applied",
                    json!({ "policy": "skip", "request": request }),
                )
                .await?;
                run.abandoned.insert(request.step_id().clone());
                self.skip_dependents(run).await?;
                let _ = index;
            }
        }
        Ok(())
    }

    async fn skip_dependents(&self, run: &mut Run) -> Result<()> {
        let to_skip = schedule::to_skip(run.plan.content(), &run.values(), &run.abandoned);
        for i in to_skip {
            let Some(task) = run.tasks.get(i).cloned() else {
                continue;
            };
            let step = task.value.step_id().clone();
            let skipped = self
                .executions
                .skip_task(run.id, task, "an upstream step failed and was abandoned")
                .await?;
            Self::store_task(run, i, skipped);
            self.audit(run, "task.skipped", json!({ "step_id": step }))
                .await?;
            self.observer.event(&RunEvent::TaskSkipped { step });
        }
        Ok(())
    }

    async fn ask_human(&self, run: &Run, request: &DecisionRequest) -> Result<Option<Decision>> {
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

    async fn apply_decision(
        &self,
        run: &mut Run,
        request: &DecisionRequest,
        decision: Decision,
        by: &str,
    ) -> Result<Option<RunOutcome>> {
        let index = run.plan.content().position(request.step_id());
        self.audit(
            run,
            "decision.applied",
            json!({ "decision": decision, "by": by }),
        )
        .await?;
        match decision {
            Decision::Retry { guidance } => {
                if let Some(i) = index {
                    run.retry_now.insert(i, guidance);
                }
                Ok(None)
            }
            Decision::Answer { text } => {
                if let Some(i) = index {
                    run.retry_now
                        .insert(i, Some(format!("the human answered: {text}")));
                }
                Ok(None)
            }
            Decision::Stop => {
                let reason = format!("stopped after step `{}` failed", request.step_id());
                self.executions
                    .stop(run.id, by, Some(reason.clone()))
                    .await?;
                self.audit(
                    run,
                    "execution.stopped",
                    json!({ "by": by, "reason": reason }),
                )
                .await?;
                Ok(Some(RunOutcome::Stopped {
                    reason: Some(reason),
                }))
            }
            Decision::Replan { guidance } => self.replan(run, request, guidance).await.map(Some),
        }
    }

    async fn replan(
        &self,
        run: &mut Run,
        request: &DecisionRequest,
        guidance: Option<String>,
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
        let (new_plan, reply) = self.orca.replan(&run.plan, &report).await?;
        self.audit(
            run,
            "execution.replanned",
            json!({ "new_plan": new_plan, "planner": reply.outcome }),
        )
        .await?;
        let reason = format!("replanned as {new_plan}");
        self.executions
            .fail(run.id, &reason, Some(new_plan))
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

    /// Stops the run for now: cancels the agent calls in flight, waits for their processes to
    /// end (SIGTERM, grace, SIGKILL), records their attempts as interrupted (retried by the
    /// next run), and only then lets their locks go.
    async fn interrupt_in_flight(&self, run: &mut Run) -> Result<Vec<StepId>> {
        Self::drain_calls(run).await;
        self.dispatch.context().agents.settle().await;
        let steps: Vec<StepId> = run
            .in_flight
            .keys()
            .filter_map(|i| run.plan.content().steps.get(*i).map(|s| s.id.clone()))
            .collect();
        let note = format!(
            "interrupted: the run was stopped by {} (pid {} on {}); resume runs it again",
            self.config.actor, self.config.holder.pid, self.config.holder.host
        );
        let interrupted =
            crate::takeover::interrupt_attempts(&self.executions, run.id, &steps, &note).await?;
        run.in_flight.clear();
        Ok(interrupted)
    }

    /// Cancels the agent calls in flight and waits for their tasks (a reply already in is
    /// still written whole) and their processes, then marks what is still running as failed.
    async fn cancel_in_flight(&self, run: &mut Run, why: &str) -> Result<()> {
        Self::drain_calls(run).await;
        self.dispatch.context().agents.settle().await;
        let flights: Vec<usize> = run.in_flight.keys().copied().collect();
        run.in_flight.clear();
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

    /// Cancels the agent calls and waits for their tasks to end; replies that were written are
    /// taken into the runner's view (task and usage).
    async fn drain_calls(run: &mut Run) {
        run.calls.cancel();
        while let Some(joined) = run.joins.join_next().await {
            if let Ok(Some((recording, Ok(task)))) = joined {
                run.usage.add(&recording.usage);
                Self::store_task(run, recording.index, task);
            }
        }
        run.calls = CancellationToken::new();
    }

    async fn finish(&self, run: &mut Run) -> Result<RunOutcome> {
        let tasks = run.values();
        if tasks.iter().all(|t| t.status() == TaskStatus::Completed) {
            // Hook (ADR 0017): the step worktrees go; the execution's branch stays.
            crate::isolated::end(&self.dispatch, run.id, orca_core::WorkspaceEnd::Completed).await;
            self.executions.complete(run.id).await?;
            self.audit(run, "execution.completed", json!({ "usage": run.usage }))
                .await?;
            return Ok(RunOutcome::Completed);
        }
        let p = schedule::Progress::of(&tasks);
        let reason = format!(
            "{} of {} steps completed; {} failed, {} skipped",
            p.completed,
            p.total(),
            p.failed,
            p.skipped
        );
        self.executions.fail(run.id, &reason, None).await?;
        self.audit(run, "execution.failed", json!({ "reason": reason }))
            .await?;
        Ok(RunOutcome::Failed { reason })
    }
}

/// Whether an automatic retry may help.
const fn retryable(code: ErrorCode) -> bool {
    !matches!(
        code,
        ErrorCode::BudgetExceeded
            | ErrorCode::MergeConflict
            | ErrorCode::UnknownAgent
            | ErrorCode::Validation
            | ErrorCode::Cancelled
    )
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// The outcome of an execution that has ended, if it has.
#[must_use]
pub fn terminal_outcome(execution: &Execution) -> Option<RunOutcome> {
    match execution {
        Execution::Completed(_) => Some(RunOutcome::Completed),
        Execution::Failed(f) => Some(match f.replanned_as {
            Some(plan_id) => RunOutcome::Replanned {
                plan_id,
                execution_id: None,
            },
            None => RunOutcome::Failed {
                reason: f.reason.clone(),
            },
        }),
        Execution::Stopped(s) => Some(RunOutcome::Stopped {
            reason: s.reason.clone(),
        }),
        Execution::Pending(_) | Execution::Running(_) => None,
    }
}
