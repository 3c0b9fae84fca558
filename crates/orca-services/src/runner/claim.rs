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
//! The drive reads as the leader's does (`loop_event.rs`): a turn (`claimer_turn`), then the
//! next `LoopEvent`, handled (`claimer_handle`). What differs in the code both share — ready
//! tasks tried in a random order, starts written beside the loop — is the run's
//! `Mode::Claiming`.
//!
//! [`ExecutionStore::acquire_shared_lease`]: orca_store::ExecutionStore::acquire_shared_lease

use std::sync::Arc;
use std::time::Duration;

use orca_core::{ExecutionId, ExecutionStage, StepId, TaskStatus};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fence::TaskHeartbeat;
use super::loop_event::{LoopEvent, Turn};
use super::open::Verified;
use super::report::terminal_outcome;
use super::state::{Claiming, Mode, Run, Slot};
use crate::error::Result;
use crate::{RunEvent, Runner, ServiceError};

/// How often a claiming worker looks for running tasks whose lease expired.
const EXPIRY_CHECK: Duration = Duration::from_secs(1);

/// How often the attempts a worker stopped without their leases are tried to be recorded.
const FENCED_RETRY: Duration = Duration::from_secs(1);

/// How long a worker goes on trying to record them (the store unreachable that long: they
/// stay running under its token, and expire unless one of its later drives renews them).
const FENCED_PATIENCE: Duration = Duration::from_secs(600);

/// How long a claiming worker waits for a notification before it looks at what the other
/// workers did anyway.
const NOTIFY_FALLBACK: Duration = Duration::from_secs(1);

/// What a claiming worker's loop keeps between turns about the other workers' progress.
#[derive(Default)]
struct Others {
    /// They changed tasks since this worker last read them (a notification, a refused claim,
    /// or the fallback).
    changed: bool,
    /// When running tasks whose lease expired were last looked for.
    expiry_checked: Option<Instant>,
}

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

/// How often a claiming worker looks whether its hold on the execution is still there (a
/// look at its own connection, no round trip).
const HOLD_CHECK: Duration = Duration::from_millis(50);

/// Resolves once `store` tells that `hold` is gone.
async fn hold_lost(store: &dyn orca_store::Store, hold: &orca_store::Lease) {
    while store.lease_held(hold) {
        tokio::time::sleep(HOLD_CHECK).await;
    }
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
        let mode = Mode::Claiming(Claiming::new(wake));
        let mut run = Run::new(id, plan, deps, execution, snap.tasks, mode);
        let every = (self.config.lease_timeout / 3).max(Duration::from_millis(100));
        let heartbeat = TaskHeartbeat::start(store.clone(), self.config.holder.clone(), every);
        let outcome = tokio::select! {
            outcome = self.claim(&mut run, cancel) => outcome,
            () = heartbeat.lost() => Err(ServiceError::TaskLeasesLost {
                execution: id,
                since: heartbeat.since_renewed(),
            }),
            // A leader may take the execution once the hold is gone (and recover every
            // running task): this worker's attempts stop first.
            () = hold_lost(store.as_ref(), &shared) => Err(ServiceError::HoldLost { execution: id }),
        };
        if outcome.is_err() {
            // The agents first (their processes killed), then what was being written.
            run.calls.cancel();
            let fenced: Vec<StepId> = run
                .where_slot(|s| matches!(s, Slot::InFlight { .. }))
                .into_iter()
                .filter_map(|i| run.plan.content().steps.get(i).map(|s| s.id.clone()))
                .collect();
            self.stop_calls(&mut run).await;
            drop(heartbeat);
            let why = match &outcome {
                Err(ServiceError::TaskLeasesLost { .. }) => Some(
                    "could not renew its task leases and stopped the attempt before they ran out",
                ),
                Err(ServiceError::HoldLost { .. }) => Some(
                    "lost its hold on the execution (its database connection was cut) and stopped the attempt",
                ),
                _ => None,
            };
            if let Some(why) = why {
                self.record_fenced(id, &fenced, why, cancel).await;
            }
        }
        drop(shared);
        if matches!(outcome, Ok(ClaimOutcome::ForLeader)) {
            // What the leader that follows checks first (see `Runner::verified`).
            self.hand_over(Verified {
                id,
                plan: run.plan,
                deps: run.deps,
            });
        }
        outcome
    }

    /// The attempts a drive stopped when it could not renew their leases, recorded as
    /// interrupted once the store answers again (tried every [`FENCED_RETRY`], for at most
    /// [`FENCED_PATIENCE`]): left running under this worker's token, a later drive's
    /// heartbeat would renew leases nobody runs under. One another worker took over since
    /// is not this worker's to record.
    async fn record_fenced(
        &self,
        id: ExecutionId,
        steps: &[StepId],
        why: &str,
        cancel: &CancellationToken,
    ) {
        if steps.is_empty() {
            return;
        }
        let note = format!(
            "interrupted: pid {} on {} {why}",
            self.config.holder.pid, self.config.holder.host
        );
        let token = self.config.holder.token.as_str();
        let give_up = Instant::now() + FENCED_PATIENCE;
        while Instant::now() < give_up && !cancel.is_cancelled() {
            match self
                .executions
                .interrupt_held(id, steps, &note, Some(token))
                .await
            {
                Ok(_) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "recording the attempts stopped without their leases")
                }
            }
            tokio::select! {
                () = tokio::time::sleep(FENCED_RETRY) => {}
                () = cancel.cancelled() => {}
            }
        }
    }

    /// A claiming worker's loop: a turn, then the next event, handled; until nothing is left
    /// for a claimer.
    async fn claim(&self, run: &mut Run, cancel: &CancellationToken) -> Result<ClaimOutcome> {
        let mut others = Others::default();
        loop {
            match self.claimer_turn(run, &mut others).await? {
                Turn::Over(outcome) => return Ok(outcome),
                Turn::Again => continue,
                Turn::Wait => {}
            }
            let quiet_at = Instant::now() + NOTIFY_FALLBACK;
            let event = run.next_event(cancel, quiet_at).await;
            if let Some(outcome) = self.claimer_handle(run, &mut others, event).await? {
                return Ok(outcome);
            }
            self.take_recorded(run).await?;
        }
    }

    /// What the worker can take over, conclude or start now, before it waits.
    async fn claimer_turn(&self, run: &mut Run, others: &mut Others) -> Result<Turn<ClaimOutcome>> {
        // What other workers changed matters only when this worker can start something:
        // with every slot taken, the notifications of a busy execution (one per transition
        // of every worker) would cost a read each and change nothing.
        if others.changed && run.agents_running() < self.config.concurrency.max(1) {
            run.catch_up(&self.executions, self.config.watch_interval)
                .await?;
            others.changed = false;
        }
        self.take_over_expired(run, others).await?;
        if terminal_outcome(&run.execution).is_some() || run.execution.decision().is_some() {
            Self::drain_calls(run).await;
            return Ok(Turn::Over(ClaimOutcome::ForLeader));
        }
        self.launch_ready(run).await?;
        let waiting = run.retries_pending() || run.waiting_for_locks();
        if run.joins.is_empty() && !run.mode.writing_starts() && !waiting {
            return self.nothing_of_ours_in_flight(run).await;
        }
        Ok(Turn::Wait)
    }

    /// Tasks whose holder stopped its heartbeat: recorded as abandoned, run again. Looked for
    /// once per [`EXPIRY_CHECK`], not per turn: a lease runs for many seconds.
    async fn take_over_expired(&self, run: &mut Run, others: &mut Others) -> Result<()> {
        if others
            .expiry_checked
            .is_some_and(|at| at.elapsed() < EXPIRY_CHECK)
        {
            return Ok(());
        }
        others.expiry_checked = Some(Instant::now());
        let expired = self.executions.store().expired_tasks(run.id).await?;
        if expired.is_empty() {
            return Ok(());
        }
        let note = "its worker stopped renewing the task's lease: taken over";
        let taken = self
            .executions
            .recover_steps(run.id, note, Some(&expired))
            .await?;
        run.refresh_all(&self.executions).await?;
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
        Ok(())
    }

    /// Nothing of this worker's in flight: what does the store say now? More to claim (go
    /// round), other workers' tasks still running (wait for them), or nothing left for a
    /// claimer (the leader's turn).
    async fn nothing_of_ours_in_flight(&self, run: &mut Run) -> Result<Turn<ClaimOutcome>> {
        run.catch_up(&self.executions, self.config.watch_interval)
            .await?;
        let others_running = run
            .tasks
            .iter()
            .any(|t| t.value.status() == TaskStatus::Running);
        if !run.ready().is_empty() {
            return Ok(Turn::Again);
        }
        if !others_running {
            return Ok(Turn::Over(ClaimOutcome::ForLeader));
        }
        Ok(Turn::Wait)
    }

    /// Takes in one event; `Some` when it ends the drive.
    async fn claimer_handle(
        &self,
        run: &mut Run,
        others: &mut Others,
        event: LoopEvent,
    ) -> Result<Option<ClaimOutcome>> {
        match event {
            LoopEvent::Cancelled => {
                let steps = self.interrupt_in_flight(run).await?;
                return Ok(Some(ClaimOutcome::Interrupted { steps }));
            }
            LoopEvent::AgentReturned { index, usage } => run.agent_returned(index, usage),
            LoopEvent::ReplyRecorded(joined) => self.on_joined(run, joined).await?,
            // Refused when another worker claimed the task first: what changed is worth
            // reading.
            LoopEvent::StartWritten(written) => {
                others.changed |= self.on_start_written(run, written)?
            }
            // Another worker's task changed, or no notification came for a while: something
            // may be ready now.
            LoopEvent::TasksChanged | LoopEvent::Quiet => others.changed = true,
            LoopEvent::RetryDue => run.retries_due(),
            // The turn that follows tries the lock again.
            LoopEvent::LockPoll => {}
        }
        Ok(None)
    }
}
