//! A worker (`orca worker`; ADR 0022, 0026): drives the executions of a shared store as they
//! become ready, on any host, beside other workers.
//!
//! What it claims is its [`ClaimMode`]. Claiming whole executions, it leads each one it
//! takes: it takes the execution's lease (a free one, or one whose holder died) and drives it
//! with the ordinary [`Runner`]; a takeover re-runs only the attempts the dead holder left
//! running. Claiming tasks, several workers run the ready tasks of one execution at once
//! ([`Runner::run_claims`]), and what needs the whole execution — beginning it, a failure's
//! decision, the end and the seal — is left to one leader: the worker whose claims found
//! nothing left leads the rest ([`Worker::drive`]).
//!
//! A worker wakes on the store's [`Notifications`] (LISTEN/NOTIFY on PostgreSQL) and polls
//! as a fallback ([`Worker::run`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use orca_core::{ExecutionId, ExecutionStage, StepId};
use orca_store::{Store, StoreError};
use tokio::sync::{Notify, mpsc};
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::{Result, ServiceError};
use crate::runner::{ClaimOutcome, RunReport, Runner};

/// What a worker claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimMode {
    /// Ready tasks of any running execution, one by one: several workers share one execution
    /// (ADR 0026).
    Task,
    /// Whole executions: one leader drives each, its tasks in parallel (ADR 0022).
    Execution,
}

/// How a worker behaves.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// What it claims.
    pub claim: ClaimMode,
    /// Executions driven at once.
    pub executions: usize,
    /// How long it waits for a notification before it looks at the store anyway.
    pub poll: Duration,
    /// Stop once nothing is left to drive (no execution ready, none in flight): for scripts
    /// and tests.
    pub until_idle: bool,
}

impl WorkerConfig {
    /// Defaults for a worker claiming `claim`: four executions at once, a look every two
    /// seconds without a notification, never idle.
    #[must_use]
    pub const fn new(claim: ClaimMode) -> Self {
        Self {
            claim,
            executions: 4,
            poll: Duration::from_secs(2),
            until_idle: false,
        }
    }
}

/// How a worker's drive of one execution ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DriveOutcome {
    /// This worker led the execution (after claiming tasks of it, when it claims tasks): how
    /// the run went.
    Led(RunReport),
    /// Another worker leads the execution: nothing was claimed.
    LedElsewhere,
    /// Cancelled while claiming tasks: the attempts in flight were recorded as interrupted.
    Interrupted {
        /// Their steps.
        steps: Vec<StepId>,
    },
}

/// Where a worker hears that the store changed (LISTEN/NOTIFY on PostgreSQL): each message
/// is the id of an execution that changed. Without it, the worker polls.
#[async_trait]
pub trait Notifications: Send + Sync {
    /// Starts listening (again, after the connection ended); `None`: poll only.
    async fn listen(&self) -> Option<mpsc::Receiver<String>>;
}

/// What a worker tells whoever runs it.
#[derive(Debug)]
#[non_exhaustive]
pub enum WorkerEvent<'a> {
    /// It listens (or polls) and is about to look for work.
    Started,
    /// A drive of this execution starts.
    Driving {
        /// The execution.
        execution: ExecutionId,
    },
    /// A drive ended without an outcome (another worker led it first, or the store failed).
    NotDriven {
        /// The execution.
        execution: ExecutionId,
    },
    /// A drive ended. (Drives still going when the worker stops are counted, not reported.)
    Drove {
        /// The execution.
        execution: ExecutionId,
        /// How the drive ended.
        outcome: &'a DriveOutcome,
    },
}

/// What a worker did, once it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerTally {
    /// Drives that ended without an error.
    pub driven: usize,
    /// Looks at the store that failed (the database restarting, say).
    pub store_errors: usize,
}

/// A worker: the store it finds executions in, how it makes the runner of each drive, and
/// its [`WorkerConfig`].
#[derive(Clone)]
pub struct Worker {
    store: Arc<dyn Store>,
    runners: Arc<dyn Fn() -> Runner + Send + Sync>,
    config: WorkerConfig,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The drives a worker has going: each execution's wake, notified when its tasks change.
type Drives = HashMap<ExecutionId, Arc<Notify>>;

/// What a drive's task hands back.
type Joined = std::result::Result<(ExecutionId, Result<DriveOutcome>), JoinError>;

impl Worker {
    /// A worker over `orca`'s store. `runners` makes the runner of each drive (over `orca`'s
    /// services, each with a holder and an observer of its own).
    #[must_use]
    pub fn new(
        orca: &crate::Orca,
        config: WorkerConfig,
        runners: impl Fn() -> Runner + Send + Sync + 'static,
    ) -> Self {
        Self {
            store: orca.executions.store().clone(),
            runners: Arc::new(runners),
            config,
        }
    }

    /// The configuration.
    #[must_use]
    pub const fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Drives one execution as this worker claims it, with a runner of its own. Claiming
    /// executions: leads it ([`Runner::run`]). Claiming tasks: begins it first if it was
    /// `pending` (unless another worker is beginning it), claims its ready tasks beside other
    /// workers (`wake` notified when its tasks change in the store) and, when nothing is left
    /// for a claimer, leads what remains.
    ///
    /// # Errors
    ///
    /// What the runner returns: [`StoreError::LeaseHeld`] if another process leads it.
    pub async fn drive(
        &self,
        id: ExecutionId,
        pending: bool,
        cancel: &CancellationToken,
        wake: Arc<Notify>,
    ) -> Result<DriveOutcome> {
        let runner = (self.runners)();
        if self.config.claim == ClaimMode::Execution {
            return runner.run(id, cancel.clone()).await.map(DriveOutcome::Led);
        }
        if pending {
            match runner.begin_for_claims(id).await {
                // Another worker is beginning it: its claims start once it has.
                Ok(()) | Err(ServiceError::Store(StoreError::LeaseHeld { .. })) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(match runner.run_claims(id, cancel, wake).await? {
            ClaimOutcome::ForLeader => DriveOutcome::Led(runner.run(id, cancel.clone()).await?),
            ClaimOutcome::Led => DriveOutcome::LedElsewhere,
            ClaimOutcome::Interrupted { steps } => DriveOutcome::Interrupted { steps },
        })
    }

    /// Drives the executions of the store as they become ready, up to
    /// [`WorkerConfig::executions`] at once, until `cancel` (or, with
    /// [`WorkerConfig::until_idle`], until nothing is left to drive); then cancels the drives
    /// still going and waits for them. Tells `report` what it does.
    pub async fn run(
        &self,
        notifications: &dyn Notifications,
        cancel: &CancellationToken,
        report: impl Fn(&WorkerEvent<'_>),
    ) -> WorkerTally {
        let stop = cancel.child_token();
        let mut wake = notifications.listen().await;
        report(&WorkerEvent::Started);
        let mut drives = Drives::new();
        let mut joins: JoinSet<(ExecutionId, Result<DriveOutcome>)> = JoinSet::new();
        let mut tally = WorkerTally::default();
        let mut relist = true;
        let mut ready = 0usize;
        loop {
            if stop.is_cancelled() {
                break;
            }
            if relist && drives.len() < self.config.executions {
                ready = self
                    .start_ready(&mut drives, &mut joins, &stop, &mut tally, &report)
                    .await;
            }
            if self.config.until_idle && drives.is_empty() && ready == 0 {
                break;
            }
            relist = true;
            tokio::select! {
                Some(done) = joins.join_next() => {
                    Self::drive_ended(&mut drives, done, &mut tally, &report);
                }
                payload = next_notification(&mut wake) => match payload {
                    // A task of an execution this worker claims in: its drive looks again.
                    Some(p) => relist = !wake_drive(&drives, &p),
                    // The notification connection ended (a database restart): listen again.
                    None => wake = notifications.listen().await,
                },
                () = tokio::time::sleep(self.config.poll) => {
                    if wake.is_none() {
                        wake = notifications.listen().await;
                    }
                }
                () = stop.cancelled() => break,
            }
        }
        stop.cancel();
        while let Some(done) = joins.join_next().await {
            if let Ok((_, Ok(_))) = done {
                tally.driven += 1;
            }
        }
        tally
    }

    /// Looks at the store for executions to drive: not ended, not waiting for a decision, not
    /// led by a live process, not driven here already. Starts a drive of each while there is
    /// room; returns how many were ready (also those left for want of room).
    async fn start_ready(
        &self,
        drives: &mut Drives,
        joins: &mut JoinSet<(ExecutionId, Result<DriveOutcome>)>,
        stop: &CancellationToken,
        tally: &mut WorkerTally,
        report: &impl Fn(&WorkerEvent<'_>),
    ) -> usize {
        let list = match self.store.list_executions(None).await {
            Ok(list) => list,
            Err(e) => {
                // The database restarting, say: try again at the next wake. (A dropped
                // notification connection is listened to again by the loop.)
                warn!(error = %e, "listing executions");
                tally.store_errors += 1;
                return 0;
            }
        };
        let mut ready = 0usize;
        for s in list.items {
            if s.stage.is_terminal() || s.awaiting_decision || drives.contains_key(&s.execution_id)
            {
                continue;
            }
            match self.store.lease(s.execution_id).await {
                Ok(Some(l)) if !l.stale => continue,
                Ok(_) => {}
                Err(e) => {
                    warn!(error = %e, "reading a lease");
                    continue;
                }
            }
            ready += 1;
            if drives.len() >= self.config.executions {
                continue;
            }
            let id = s.execution_id;
            let wake = Arc::clone(drives.entry(id).or_default());
            let (worker, token) = (self.clone(), stop.child_token());
            let pending = s.stage == ExecutionStage::Pending;
            report(&WorkerEvent::Driving { execution: id });
            joins.spawn(async move { (id, worker.drive(id, pending, &token, wake).await) });
        }
        ready
    }

    /// A drive's task ended: counted and reported, or logged if it failed.
    fn drive_ended(
        drives: &mut Drives,
        done: Joined,
        tally: &mut WorkerTally,
        report: &impl Fn(&WorkerEvent<'_>),
    ) {
        let Ok((id, result)) = done else {
            return;
        };
        drives.remove(&id);
        match result {
            Ok(outcome) => {
                tally.driven += 1;
                report(&WorkerEvent::Drove {
                    execution: id,
                    outcome: &outcome,
                });
            }
            // Another worker took it first (LeaseHeld), or the store failed.
            Err(e) => {
                info!(execution = %id, error = %e, "not driven");
                report(&WorkerEvent::NotDriven { execution: id });
            }
        }
    }
}

/// Wakes the drive of the execution a notification names; whether one was woken.
fn wake_drive(drives: &Drives, payload: &str) -> bool {
    let Ok(id) = payload.parse::<ExecutionId>() else {
        return false;
    };
    drives.get(&id).is_some_and(|n| {
        n.notify_one();
        true
    })
}

/// The next notification's payload; `None` when the connection ended.
async fn next_notification(rx: &mut Option<mpsc::Receiver<String>>) -> Option<String> {
    match rx {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}
