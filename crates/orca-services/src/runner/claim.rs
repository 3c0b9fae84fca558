//! Tasks claimed one by one (ADR 0026): several workers run the ready tasks of ONE execution
//! at once. Each holds a shared hold on the execution ([`ExecutionStore::acquire_shared_lease`])
//! while it claims and runs tasks, so the exclusive lease of a leader ([`Runner::run`]) and
//! claims never overlap. A claim is the ordinary start (compare-and-swap on the task, written
//! with its `task.attempt.started` entry; the postgres store skips a row another claim holds),
//! and the task's lease is renewed by this worker's heartbeat; a running task whose lease
//! expired is taken over (its attempt recorded as abandoned) and run again.
//!
//! What needs the whole execution — beginning it, a failure's decision or policy, the end and
//! the seal — stays with the leader: a claiming drive returns [`ClaimOutcome::ForLeader`] when
//! nothing is left that it may claim and no other worker's task runs, and the caller runs the
//! leader ([`Runner::run`]), which finds the record as the claimers left it.
//!
//! [`ExecutionStore::acquire_shared_lease`]: orca_store::ExecutionStore::acquire_shared_lease

use std::sync::Arc;
use std::time::Duration;

use orca_core::{ExecutionId, ExecutionStage, StepId, TaskStatus, Usage};
use orca_store::Revision;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::report::terminal_outcome;
use super::sleep_until_opt;
use super::state::{self, Run, Slot};
use crate::error::Result;
use crate::{RunEvent, Runner, ServiceError};

/// How often a claiming worker looks for running tasks whose lease expired.
const EXPIRY_CHECK: Duration = Duration::from_secs(1);

/// How a claiming drive ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClaimOutcome {
    /// Nothing left that a claimer may do now and no other worker's task is running: what
    /// remains (the end and the seal, a failure's decision, a pending start) is the leader's.
    ForLeader,
    /// A leader holds the execution's lease: nothing was claimed.
    Led,
    /// Cancelled: the attempts in flight were recorded as interrupted.
    Interrupted {
        /// Their steps.
        steps: Vec<StepId>,
    },
}

impl Runner {
    /// Opens a pending execution for claiming workers: what [`Self::run`] does first (the
    /// record checked, the execution begun), under the exclusive lease, which then goes.
    ///
    /// # Errors
    ///
    /// [`StoreError::LeaseHeld`] if another process holds the lease; what [`Self::run`] refuses.
    pub async fn begin_for_claims(&self, id: ExecutionId) -> Result<()> {
        let store = self.executions.store().clone();
        let lease = store.acquire_lease(id, &self.config.holder).await?;
        let opened = self.open(id, &lease).await;
        drop(lease);
        opened.map(|_| ())
    }

    /// Claims and runs ready tasks of a running execution beside other workers, until nothing
    /// is left for a claimer (see [`ClaimOutcome`]). `wake` is notified by the caller when the
    /// execution's tasks change in the store (LISTEN/NOTIFY); it is also looked at every
    /// second without one.
    ///
    /// # Errors
    ///
    /// Store errors; a plan that is not the approved one.
    pub async fn run_claims(
        &self,
        id: ExecutionId,
        cancel: &CancellationToken,
        wake: Arc<Notify>,
    ) -> Result<ClaimOutcome> {
        let store = self.executions.store().clone();
        let Some(shared) = store.acquire_shared_lease(id, &self.config.holder).await? else {
            return Ok(ClaimOutcome::Led);
        };
        let snap = self.executions.get(id).await?;
        let execution = snap.execution.value;
        if execution.stage() != ExecutionStage::Running || execution.decision().is_some() {
            return Ok(ClaimOutcome::ForLeader);
        }
        // A plan runs only as approved (ADR 0013), for claimers as for leaders.
        let plan = self
            .executions
            .planning()
            .approved(execution.info().plan_id)
            .await?;
        if plan.digest() != &execution.info().plan_digest {
            return Err(ServiceError::PlanTampered(plan.id()));
        }
        let deps = orca_core::graph::dependency_indices(&plan.content().steps);
        let mut run = Run {
            id,
            plan,
            deps,
            execution: Arc::new(execution),
            slots: std::iter::repeat_with(Slot::default)
                .take(snap.tasks.len())
                .collect(),
            tasks: super::mirror::TaskMirror::new(snap.tasks),
            joins: JoinSet::new(),
            starts: JoinSet::new(),
            calls: CancellationToken::new(),
            usage: Usage::default(),
            started: Instant::now(),
            last_refresh: Instant::now(),
            stop_after_drain: None,
            claiming: true,
            returns: state::Returns::default(),
        };
        let heartbeat = self.task_heartbeat();
        let outcome = self.claim_loop(&mut run, cancel, &wake).await;
        if outcome.is_err() {
            Self::drain_calls(&mut run).await;
            self.dispatch.context().agents.settle().await;
            run.end_in_flight();
        }
        heartbeat.abort();
        drop(shared);
        if matches!(outcome, Ok(ClaimOutcome::ForLeader)) {
            // What the leader that follows checks first (see `Runner::verified`).
            *self
                .verified
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(super::Verified {
                id,
                plan: run.plan,
                deps: run.deps,
            });
        }
        outcome
    }

    /// Re-reads only the tasks other workers changed, and the header at most once per watch
    /// interval (as a leader does: stops and decisions are rare; tasks change all the time).
    pub(super) async fn catch_up(&self, run: &mut Run) -> Result<()> {
        let known: Vec<Revision> = run.tasks.iter().map(|t| t.revision).collect();
        let changed = self
            .executions
            .store()
            .changed_tasks(run.id, &known)
            .await?;
        for (i, task) in changed {
            Self::store_task(run, i, task);
        }
        if run.last_refresh.elapsed() >= self.config.watch_interval {
            self.refresh(run).await?;
        }
        Ok(())
    }

    /// Renews this worker's task leases, every third of the lease timeout.
    fn task_heartbeat(&self) -> tokio::task::JoinHandle<()> {
        let store = self.executions.store().clone();
        let holder = self.config.holder.clone();
        let every = (self.config.lease_timeout / 3).max(Duration::from_millis(100));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = store.renew_task_leases(&holder).await {
                    warn!(error = %e, "renewing task leases");
                }
            }
        })
    }

    async fn claim_loop(
        &self,
        run: &mut Run,
        cancel: &CancellationToken,
        wake: &Notify,
    ) -> Result<ClaimOutcome> {
        let store = self.executions.store().clone();
        let mut stale = false;
        let mut expiry_checked: Option<Instant> = None;
        loop {
            // What other workers changed matters only when this worker can start something:
            // with every slot taken, the notifications of a busy execution (one per transition
            // of every worker) would cost a read each and change nothing.
            if stale && run.agents_running() < self.config.concurrency.max(1) {
                self.catch_up(run).await?;
                stale = false;
            }
            // Tasks whose holder stopped its heartbeat: recorded as abandoned, run again.
            // Looked for once per EXPIRY_CHECK, not per event: a lease runs for many seconds.
            let expired = if expiry_checked.is_none_or(|at| at.elapsed() >= EXPIRY_CHECK) {
                expiry_checked = Some(Instant::now());
                store.expired_tasks(run.id).await?
            } else {
                Vec::new()
            };
            if !expired.is_empty() {
                let note = "its worker stopped renewing the task's lease: taken over";
                let taken = self
                    .executions
                    .recover_steps(run.id, note, Some(&expired))
                    .await?;
                self.refresh_all(run).await?;
                let at: Vec<usize> = taken
                    .iter()
                    .filter_map(|s| run.plan.content().position(s))
                    .collect();
                for i in at {
                    run.set(i, Slot::RetryNow { guidance: None });
                }
                if !taken.is_empty() {
                    self.observer.event(&RunEvent::Recovered { steps: taken });
                }
            }
            if terminal_outcome(&run.execution).is_some() || run.execution.decision().is_some() {
                Self::drain_calls(run).await;
                return Ok(ClaimOutcome::ForLeader);
            }
            self.launch_ready(run).await?;
            let waiting = run.retries_pending() || run.waiting_for_locks();
            if run.joins.is_empty() && run.starts.is_empty() && !waiting {
                // Nothing of ours in flight: what does the store say now?
                self.catch_up(run).await?;
                let others_running = run
                    .tasks
                    .iter()
                    .any(|t| t.value.status() == TaskStatus::Running);
                if !run.ready().is_empty() {
                    continue;
                }
                if !others_running {
                    return Ok(ClaimOutcome::ForLeader);
                }
            }
            let (next_retry, lock_poll) = (run.next_retry(), run.waiting_for_locks());
            tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    let steps = self.interrupt_in_flight(run).await?;
                    return Ok(ClaimOutcome::Interrupted { steps });
                }
                Some((index, usage)) = run.returns.rx.recv() => run.agent_returned(index, usage),
                Some(joined) = run.joins.join_next(), if !run.joins.is_empty() => {
                    self.on_joined(run, joined).await?;
                }
                Some(written) = run.starts.join_next(), if !run.starts.is_empty() => {
                    // Claimed by another worker first: what changed is worth reading.
                    stale |= self.on_start_written(run, written)?;
                }
                // Another worker's task changed: something may be ready now.
                () = wake.notified() => stale = true,
                () = sleep_until_opt(next_retry), if next_retry.is_some() => run.retries_due(),
                () = tokio::time::sleep(Duration::from_millis(50)), if lock_poll => {}
                // The fallback when no notification comes.
                () = tokio::time::sleep(Duration::from_secs(1)) => stale = true,
            }
        }
    }
}
