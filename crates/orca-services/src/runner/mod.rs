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

mod claim;
mod config;
mod decide;
mod launch;
mod mirror;
mod replies;
mod report;
mod state;

pub use claim::ClaimOutcome;
pub use config::{Backoff, FailurePolicy, RunConfig, own_host, this_process};
pub use report::{Observer, Quiet, RunEvent, RunOutcome, RunReport, terminal_outcome};
use state::{Run, Slot, retryable};

use std::sync::Arc;
use std::time::Duration;

use orca_core::{ApprovedPlan, ErrorCode, ExecutionId, StepId, Task, TaskStatus, Usage, schedule};
use orca_store::Versioned;
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, instrument};

use crate::dispatch::DispatchService;
use crate::error::{Result, ServiceError};
use crate::execution::ExecutionService;
use crate::hitl::Hitl;
use crate::orca_service::OrcaService;

/// What opening an execution found.
enum Opened {
    /// It had ended already.
    Ended(RunOutcome),
    /// It runs: its approved plan, and the steps whose abandoned attempts were recovered.
    Running {
        plan: Box<ApprovedPlan>,
        /// The plan's dependency indices, when a claiming drive computed them already.
        deps: Option<Vec<Vec<usize>>>,
        recovered: Vec<StepId>,
        /// The execution as it stands now, when opening did not change its tasks (the
        /// tasks read at the start and the header begun): not read again.
        snapshot: Option<Box<orca_store::ExecutionSnapshot>>,
    },
}

/// What a claiming drive hands to the leader run that follows it in the same runner (see
/// [`Runner::verified`]): the plan it checked, for the execution it drove, with its dependency
/// indices. (Not its view of the tasks: the leader reads every task again, so a task's state
/// edited behind orca's back during the drive is still compared with the log at the open.)
struct Verified {
    id: ExecutionId,
    plan: ApprovedPlan,
    deps: Vec<Vec<usize>>,
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
    /// The approved plan a claiming drive of this runner checked (loaded, its approval
    /// verified, its digest compared with the execution's), handed to the leader run that
    /// follows it here (see [`ClaimOutcome::ForLeader`]) instead of being loaded and checked
    /// again moments later: the plan is immutable once approved, and this is the copy that
    /// passed. Taken once; any other run loads its plan.
    verified: Arc<std::sync::Mutex<Option<Verified>>>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Runner {
    /// A runner over `orca`'s services (its human is `orca`'s), reporting to `observer`.
    #[must_use]
    pub fn new(orca: &crate::Orca, config: RunConfig, observer: Arc<dyn Observer>) -> Self {
        Self {
            executions: orca.executions.clone(),
            dispatch: orca.dispatch.clone(),
            orca: orca.relay.clone(),
            hitl: orca.tools.hitl.clone(),
            observer,
            config,
            verified: Arc::default(),
        }
    }

    /// What a claiming drive of this runner handed over for `id`, if any (taken).
    fn take_verified(&self, id: ExecutionId) -> Option<Verified> {
        let mut verified = self
            .verified
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        verified.take().filter(|v| v.id == id)
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
        let report = self.run_leased(id, &lease, cancel).await;
        // On every path, errors included: the heartbeat lets go of the lease before the run
        // returns, so the execution can be resumed at once (also in this process).
        heartbeat.stop().await;
        drop(lease);
        report
    }

    async fn run_leased(
        &self,
        id: ExecutionId,
        lease: &orca_store::Lease,
        cancel: CancellationToken,
    ) -> Result<RunReport> {
        let (plan, deps, recovered, snapshot) = match self.open(id, lease).await? {
            Opened::Ended(outcome) => {
                return Ok(RunReport {
                    execution_id: id,
                    outcome,
                    usage: Usage::default(),
                });
            }
            Opened::Running {
                plan,
                deps,
                recovered,
                snapshot,
            } => (*plan, deps, recovered, snapshot),
        };
        let snap = match snapshot {
            Some(snap) => *snap,
            None => self.executions.get(id).await?,
        };
        let mut slots: Vec<Slot> = std::iter::repeat_with(Slot::default)
            .take(snap.tasks.len())
            .collect();
        for i in recovered.iter().filter_map(|s| plan.content().position(s)) {
            if let Some(slot) = slots.get_mut(i) {
                *slot = Slot::RetryNow { guidance: None };
            }
        }
        let deps =
            deps.unwrap_or_else(|| orca_core::graph::dependency_indices(&plan.content().steps));
        let mut run = Run {
            id,
            plan,
            deps,
            execution: Arc::new(snap.execution.value),
            tasks: mirror::TaskMirror::new(snap.tasks),
            joins: JoinSet::new(),
            starts: JoinSet::new(),
            calls: CancellationToken::new(),
            slots,
            usage: Usage::default(),
            started: Instant::now(),
            last_refresh: Instant::now(),
            stop_after_drain: None,
            claiming: false,
            returns: state::Returns::default(),
        };
        let outcome = self.drive(&mut run, &cancel).await;
        if outcome.is_err() {
            // Agent calls stop; replies already in are written whole before the lease goes,
            // and their processes are gone before their locks are.
            Self::drain_calls(&mut run).await;
            self.dispatch.context().agents.settle().await;
            run.end_in_flight();
        }
        let outcome = outcome?;
        if outcome.stage().is_terminal() {
            let log = ExecutionService::log(run.plan.id(), id);
            self.executions.store().seal(log).await?;
        }
        Ok(RunReport {
            execution_id: id,
            outcome,
            usage: run.usage,
        })
    }

    /// Opens an execution under its lease (ADR 0013, 0010): its record must verify and agree
    /// with its state, its plan be the approved one; a dead runner's processes are ended, the
    /// execution is begun (or resumed) and abandoned attempts recovered. Used by [`Self::run`]
    /// and, for workers claiming tasks one by one, by [`Self::begin_for_claims`].
    async fn open(&self, id: ExecutionId, lease: &orca_store::Lease) -> Result<Opened> {
        let store = self.executions.store().clone();
        let snap = self.executions.get(id).await?;
        if let Some(outcome) = terminal_outcome(&snap.execution.value) {
            return Ok(Opened::Ended(outcome));
        }
        let plan_id = snap.execution.value.info().plan_id;
        // The record first (ADR 0013): the log must verify and the state files agree with it.
        let log = ExecutionService::log(plan_id, id);
        // One read (where the backend can) for the chain's check and the entries.
        let (report, entries) = store.verified_entries(log).await?;
        let problem = match report {
            orca_store::VerifyReport::Tampered { seq, problem } => Some(format!(
                "its audit log was tampered with: entry {seq}: {problem}"
            )),
            orca_store::VerifyReport::Intact { .. } => None,
        };
        let problem = problem.or_else(|| {
            crate::integrity::against_log(&snap, &entries)
                .into_iter()
                .next()
                .map(|f| f.to_string())
        });
        if let Some(problem) = problem {
            // Recorded where the execution's own log cannot be trusted: the plan's run register.
            self.executions
                .record_run_refused(plan_id, json!({ "execution_id": id, "problem": problem }))
                .await;
            return Err(ServiceError::Tampered(format!(
                "refused to run execution {id}: {problem}"
            )));
        }
        let (plan, deps) = match self.take_verified(id) {
            Some(v) if v.plan.id() == plan_id => (v.plan, Some(v.deps)),
            _ => (self.executions.planning().approved(plan_id).await?, None),
        };
        if plan.digest() != &snap.execution.value.info().plan_digest {
            return Err(ServiceError::PlanTampered(plan_id));
        }
        if entries.is_empty() {
            // The process that created it died before its first entry (see `against_log`).
            self.executions
                .record_created_late(&snap.execution.value, plan.digest(), snap.tasks.len())
                .await?;
        }
        // Whatever the dead runner's steps started dies before anything runs again.
        crate::takeover::end_dead_runner_processes(
            &self.executions,
            &snap,
            self.dispatch.context().agents.as_ref(),
            id,
            &self.config.holder.host,
        )
        .await?;
        let begun = self
            .executions
            .begin(id, &self.config.holder, lease.took_over())
            .await?;
        let note = lease.took_over().map_or_else(
            || "the attempt was in flight when its runner stopped".to_owned(),
            |l| {
                format!(
                    "the process running it (pid {} on {}) is gone",
                    l.holder.pid, l.holder.host
                )
            },
        );
        // Under the lease nobody else writes the tasks: the ones read above are current.
        let recovered = self
            .executions
            .recover_among(&begun.value, running(&snap.tasks), &note, None)
            .await?;
        if !recovered.is_empty() {
            info!(execution = %id, steps = ?recovered, "recovered abandoned attempts");
            self.observer.event(&RunEvent::Recovered {
                steps: recovered.clone(),
            });
        }
        let snapshot = recovered.is_empty().then(|| {
            Box::new(orca_store::ExecutionSnapshot {
                execution: begun,
                tasks: snap.tasks,
            })
        });
        Ok(Opened::Running {
            plan: Box::new(plan),
            deps,
            recovered,
            snapshot,
        })
    }

    /// Re-reads the execution header: stops and decisions made by other processes. Cheap —
    /// the runner keeps its own task records current from its own writes, so it never re-reads
    /// every task on every event (that would make a run of N tasks cost O(N²)).
    async fn refresh(&self, run: &mut Run) -> Result<()> {
        run.execution = Arc::new(self.executions.header(run.id).await?.value);
        run.last_refresh = Instant::now();
        Ok(())
    }

    /// Re-reads everything, after a conflict showed that another writer changed a task.
    async fn refresh_all(&self, run: &mut Run) -> Result<()> {
        let snap = self.executions.get(run.id).await?;
        run.execution = Arc::new(snap.execution.value);
        run.tasks.replace(snap.tasks);
        run.last_refresh = Instant::now();
        Ok(())
    }

    fn store_task(run: &mut Run, index: usize, task: Versioned<Task>) {
        run.tasks.set(index, task);
    }

    /// The one definition of automatic retries: after `counted` attempts of the step at
    /// `index` failed with `code`, whether it is retried without asking anyone, and after how
    /// long ([`Backoff::delay`]). `None`: no attempt left, or a retry cannot help.
    fn retry_in(&self, run: &Run, index: usize, code: ErrorCode, counted: u32) -> Option<Duration> {
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

    async fn drive(&self, run: &mut Run, cancel: &CancellationToken) -> Result<RunOutcome> {
        loop {
            // Someone else may have stopped the run, or answered the pending decision: looked
            // at once per watch interval, by the wait below when it comes due (the header holds
            // every step id, so reading it per event would make a run of N tasks cost O(N²));
            // our own header changes refresh it at once, and so does having nothing in flight.
            // Here only when events kept the wait from ever coming due: read at the first event
            // after a quiet spell, the header used to delay every layer's first reply.
            if run.last_refresh.elapsed() >= self.config.watch_interval * 2 {
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
            debug_assert!(
                run.slot_problems().is_empty(),
                "slot invariants: {:?}",
                run.slot_problems()
            );
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
                    self.executions.record_failed(run.id, &reason).await?;
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
                            self.executions.record_interrupted(&run.execution, &self.config.actor, &self.config.holder, &[]).await?;
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
                if !run.retries_pending() && !run.waiting_for_locks() {
                    let ready = run.ready();
                    if ready.is_empty() {
                        return self.finish(run).await;
                    }
                    // Ready but nothing launched (e.g. the lock was released meanwhile): go round.
                    continue;
                }
            }

            let next_retry = run.next_retry();
            let lock_poll = run.waiting_for_locks();
            tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    let steps = self.interrupt_in_flight(run).await?;
                    self.executions.record_interrupted(&run.execution, &self.config.actor, &self.config.holder, &steps).await?;
                    return Ok(RunOutcome::Interrupted { steps });
                }
                Some((index, usage)) = run.returns.rx.recv() => run.agent_returned(index, usage),
                Some(joined) = run.joins.join_next(), if !run.joins.is_empty() => {
                    self.on_joined(run, joined).await?;
                }
                () = sleep_until_opt(next_retry), if next_retry.is_some() => run.retries_due(),
                () = tokio::time::sleep(Duration::from_millis(50)), if lock_poll => {}
                // The header, once per watch interval, read while nothing else is due; also
                // the backstop: nothing can leave the loop waiting forever.
                () = tokio::time::sleep_until(run.last_refresh + self.config.watch_interval) => {
                    self.refresh(run).await?;
                }
            }
        }
    }

    async fn finish(&self, run: &mut Run) -> Result<RunOutcome> {
        let tasks = run.values();
        if tasks.iter().all(|t| t.status() == TaskStatus::Completed) {
            // Hook (ADR 0017): the step worktrees go; the execution's branch stays.
            crate::isolated::end(&self.dispatch, run.id, orca_core::WorkspaceEnd::Completed).await;
            // Judged on the tasks as this run knows them: under its lease nobody else
            // writes them, so they are the stored ones (not read again).
            self.executions
                .record_completed(run.id, &tasks, &run.usage)
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
        self.executions.record_failed(run.id, &reason).await?;
        Ok(RunOutcome::Failed { reason })
    }
}

/// The running tasks of `tasks` (those a run that opens recovers).
fn running(tasks: &[Versioned<Task>]) -> Vec<Versioned<Task>> {
    tasks
        .iter()
        .filter(|t| matches!(t.value, Task::Running(_)))
        .cloned()
        .collect()
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
