//! `orca worker --claim task` (ADR 0026): workers claim the ready tasks of any running
//! execution one by one, several workers in one execution at once; what needs the whole
//! execution (its start checks, a failure's decision, the end and the seal) is left to one
//! leader, the ordinary runner (`--claim execution`, ADR 0022).

use std::collections::HashMap;
use std::sync::Arc;

use clap::ValueEnum;
use orca_core::ExecutionId;
use orca_services::{ClaimOutcome, Runner, ServiceError};
use orca_store::StoreError;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// What a worker claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ClaimMode {
    /// Ready tasks of any running execution, one by one (several workers per execution).
    Task,
    /// Whole executions: one leader drives each (its tasks in parallel).
    Execution,
}

/// Per execution this worker claims tasks in: what wakes its drive when a task changes.
#[derive(Debug, Default)]
pub(crate) struct Wakes {
    by_execution: HashMap<ExecutionId, Arc<Notify>>,
}

impl Wakes {
    pub(crate) fn of(&mut self, id: ExecutionId) -> Arc<Notify> {
        Arc::clone(self.by_execution.entry(id).or_default())
    }

    pub(crate) fn remove(&mut self, id: ExecutionId) {
        self.by_execution.remove(&id);
    }

    /// Wakes the drive of the execution a notification names; whether one was woken.
    pub(crate) fn wake(&self, payload: &str) -> bool {
        let Ok(id) = payload.parse::<ExecutionId>() else {
            return false;
        };
        self.by_execution.get(&id).is_some_and(|n| {
            n.notify_one();
            true
        })
    }
}

/// Claims tasks of `id` beside other workers, then leads it to its end if it is left to a
/// leader; the words say how it went.
pub(crate) async fn drive(
    runner: &Runner,
    id: ExecutionId,
    pending: bool,
    cancel: &CancellationToken,
    wake: Arc<Notify>,
) -> Result<&'static str, ServiceError> {
    if pending {
        match runner.begin_for_claims(id).await {
            // Another worker is beginning it: its claims start once it has.
            Ok(()) | Err(ServiceError::Store(StoreError::LeaseHeld { .. })) => {}
            Err(e) => return Err(e),
        }
    }
    match runner.run_claims(id, cancel, wake).await? {
        ClaimOutcome::ForLeader => {
            let report = runner.run(id, cancel.clone()).await?;
            Ok(crate::worker::outcome_text(&report.outcome))
        }
        ClaimOutcome::Led => Ok("led by another worker"),
        ClaimOutcome::Interrupted { .. } => Ok("interrupted"),
        _ => Ok("ended"),
    }
}
