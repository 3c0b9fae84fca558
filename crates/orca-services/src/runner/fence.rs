//! A claiming worker's task leases: renewed by its heartbeat, and fenced by its own clock.
//!
//! Another worker takes a running task over once its lease expired in the store (ADR 0026).
//! A worker that cannot renew — the database unreachable, its connection cut — does not learn
//! that from the store; left alone, its attempt would go on while the takeover runs the task
//! again. So the heartbeat keeps, on this process's monotonic clock, when its last renewal
//! that succeeded was sent (the lease then runs at least a lease from that instant), and
//! once [`FENCE_AT`] of a lease has passed since without one, it says the leases are lost:
//! the drive stops its attempts (their processes are killed) while the leases still hold.

use std::sync::Arc;
use std::time::Duration;

use orca_core::Holder;
use orca_store::Store;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// The share of a lease after which a worker that could not renew stops its attempts: five
/// sixths, leaving the last sixth (5 s of the default 30 s) to kill them.
const FENCE_AT: (u32, u32) = (5, 6);

/// When a worker without a renewal stops its attempts, measured from the last renewal sent.
pub(crate) fn fence_after(lease: Duration) -> Duration {
    lease * FENCE_AT.0 / FENCE_AT.1
}

/// The heartbeat of one claiming drive; aborted when dropped.
pub(super) struct TaskHeartbeat {
    handle: JoinHandle<()>,
    lost: CancellationToken,
    /// When the last renewal that succeeded was sent.
    renewed: Arc<std::sync::Mutex<Instant>>,
}

impl TaskHeartbeat {
    /// Renews `holder`'s task leases every `every`; with a store whose tasks have leases, also
    /// fences (see the module).
    pub(super) fn start(store: Arc<dyn Store>, holder: Holder, every: Duration) -> Self {
        let lost = CancellationToken::new();
        // No task of this drive was claimed before it started: its leases run from later.
        let renewed = Arc::new(std::sync::Mutex::new(Instant::now()));
        let fence = store.task_lease().map(fence_after);
        let (token, last) = (lost.clone(), Arc::clone(&renewed));
        let handle = tokio::spawn(async move {
            let read = || {
                *last
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            };
            let mut next = Instant::now() + every;
            loop {
                let deadline = fence.map(|f| read() + f);
                tokio::time::sleep_until(deadline.map_or(next, |d| d.min(next))).await;
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    token.cancel();
                    return;
                }
                if Instant::now() < next {
                    continue;
                }
                let sent = Instant::now();
                next = sent + every;
                let renewal = store.renew_task_leases(&holder);
                // A renewal that hangs (a connection cut without a reset) is given up at the
                // fence: waiting for it must not carry the attempts past their leases.
                let outcome = match deadline {
                    Some(d) => tokio::time::timeout_at(d, renewal).await.ok(),
                    None => Some(renewal.await),
                };
                match outcome {
                    Some(Ok(())) => {
                        *last
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = sent;
                    }
                    Some(Err(e)) => warn!(error = %e, "renewing task leases"),
                    None => warn!("renewing task leases: no answer before the leases run out"),
                }
            }
        });
        Self {
            handle,
            lost,
            renewed,
        }
    }

    /// Resolves once the leases must be taken as lost.
    pub(super) async fn lost(&self) {
        self.lost.cancelled().await;
    }

    /// How long ago the last renewal that succeeded was sent.
    pub(super) fn since_renewed(&self) -> Duration {
        self.renewed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .elapsed()
    }
}

impl Drop for TaskHeartbeat {
    fn drop(&mut self) {
        self.handle.abort();
    }
}
