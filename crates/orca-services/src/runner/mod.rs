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
//!
//! The runner only schedules: every transition it causes is written by the
//! [`ExecutionService`] (`transitions.rs`).
//!
//! ## Reading order
//!
//! - [`Runner::run`] (here) takes the execution's lease and hands it to the leader.
//! - `open.rs`: opening an execution — its record verified, its plan the approved one, a dead
//!   runner's processes ended, abandoned attempts recovered.
//! - `lead.rs`: the leader's loop — a turn, then the next `LoopEvent` (`loop_event.rs`),
//!   handled by a named method — until the execution ends.
//! - `claim.rs`: the same loop for a worker claiming tasks beside others
//!   ([`Runner::run_claims`], ADR 0026); `fence.rs`: its task leases' heartbeat, which stops
//!   its attempts when it could not renew them for most of a lease.
//! - What both loops call: `launch.rs` (starting ready tasks), `replies.rs` (taking in
//!   replies, ending calls in flight), `decide.rs` (after a final failure: retry, the human's
//!   decision or the policy).
//! - The runner's view: `state.rs` (`Run`, one `Slot` per task, the `Mode`: leader or
//!   claiming), `mirror.rs` (the stored tasks and which are ready).

mod claim;
mod config;
mod decide;
mod fence;
mod launch;
mod lead;
mod loop_event;
mod mirror;
mod open;
mod replies;
mod report;
mod state;

pub use claim::ClaimOutcome;
pub use config::{Backoff, FailurePolicy, RunConfig, own_host, this_process};
pub use report::{Observer, Quiet, RunEvent, RunOutcome, RunReport, terminal_outcome};

use std::sync::Arc;

use orca_core::ExecutionId;
use tokio_util::sync::CancellationToken;
use tracing::instrument;

use crate::dispatch::DispatchService;
use crate::error::Result;
use crate::execution::ExecutionService;
use crate::hitl::Hitl;
use crate::orca_service::OrcaService;
use open::Verified;

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
        let report = self.lead(id, &lease, cancel).await;
        // On every path, errors included: the heartbeat lets go of the lease before the run
        // returns, so the execution can be resumed at once (also in this process).
        heartbeat.stop().await;
        drop(lease);
        report
    }
}
