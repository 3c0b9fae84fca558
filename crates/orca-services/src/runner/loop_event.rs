//! What wakes a drive. Both loops — the leader's (`lead.rs`) and a claiming worker's
//! (`claim.rs`) — read the same way:
//!
//! ```text
//! loop {
//!     turn:   conclude what can be concluded, start what can start   → Over | Again | Wait
//!     wait:   the next LoopEvent                                      (Run::next_event)
//!     handle: take it in                                              → Over | go round
//! }
//! ```
//!
//! The loop never sleeps on a schedule: it wakes for an event. Its only timers are a retry's
//! backoff, polling for a lock held by another process, and a quiet spell (a light watch for
//! what other processes changed).

use std::time::Duration;

use orca_core::Usage;
use tokio::task::JoinError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::state::{Claiming, Joined, Mode, Run, StartWritten};

/// How often a step waiting for a lock held by another process tries it again.
const LOCK_POLL: Duration = Duration::from_millis(50);

/// What woke a drive: the one thing its loop handles next.
#[expect(
    clippy::large_enum_variant,
    reason = "one event at a time, moved once into its handler: boxing a reply would cost an \
              allocation per task"
)]
pub(super) enum LoopEvent {
    /// The drive was cancelled (Ctrl-C, `exec stop`, a worker stopping).
    Cancelled,
    /// An agent's call returned; its reply is still being written (ADR 0038): the slot stops
    /// counting against the concurrency, and the usage is counted at once.
    AgentReturned {
        /// The task's position.
        index: usize,
        /// What the call spent.
        usage: Usage,
    },
    /// An agent's task ended: its reply recorded (or the write failed), or its call cancelled.
    ReplyRecorded(Result<Joined, JoinError>),
    /// A start written beside the loop is in, or was refused (a claiming worker's only).
    StartWritten(Result<StartWritten, JoinError>),
    /// Another worker changed a task of the execution (a claiming worker's only).
    TasksChanged,
    /// A scheduled retry is due.
    RetryDue,
    /// A step waits for a lock held elsewhere: time to try it again.
    LockPoll,
    /// Nothing else came until the drive's quiet deadline: the leader reads the header (once
    /// per watch interval), a claiming worker looks at what the others did (the fallback when
    /// no notification comes). Also the backstop: nothing leaves a loop waiting forever.
    Quiet,
}

/// What a turn of a loop concluded.
pub(super) enum Turn<T> {
    /// Wait for the next event.
    Wait,
    /// Take another turn at once: something changed that the turn looks at.
    Again,
    /// The drive is over.
    Over(T),
}

impl Run {
    /// Waits for the next event, the first of these that is ready in this order: a cancel, an
    /// agent returning, a reply recorded, a start written, the tasks changing, a retry due, a
    /// lock to try again, and `quiet_at`.
    pub(super) async fn next_event(
        &mut self,
        cancel: &CancellationToken,
        quiet_at: Instant,
    ) -> LoopEvent {
        let next_retry = self.next_retry();
        let lock_poll = self.waiting_for_locks();
        let (starts, tasks_changed) = match &mut self.mode {
            Mode::Leader => (None, None),
            Mode::Claiming(Claiming { starts, wake }) => (
                (!starts.is_empty()).then_some(starts),
                Some(wake.notified()),
            ),
        };
        let start_written = async move {
            match starts {
                Some(starts) => starts.join_next().await,
                None => std::future::pending().await,
            }
        };
        let tasks_changed = async move {
            match tasks_changed {
                Some(notified) => notified.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = cancel.cancelled() => LoopEvent::Cancelled,
            Some((index, usage)) = self.returns.rx.recv() => {
                LoopEvent::AgentReturned { index, usage }
            }
            Some(joined) = self.joins.join_next(), if !self.joins.is_empty() => {
                LoopEvent::ReplyRecorded(joined)
            }
            Some(written) = start_written => LoopEvent::StartWritten(written),
            () = tasks_changed => LoopEvent::TasksChanged,
            () = sleep_until(next_retry), if next_retry.is_some() => LoopEvent::RetryDue,
            () = tokio::time::sleep(LOCK_POLL), if lock_poll => LoopEvent::LockPoll,
            () = tokio::time::sleep_until(quiet_at) => LoopEvent::Quiet,
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
