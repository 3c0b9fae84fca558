//! The runner's view of one execution while it drives it ([`Run`]): the stored task records (a
//! mirror of the store, kept current from the runner's own writes, re-read only when another
//! writer changed them) and, per task, ONE [`Slot`] saying what the runner is doing with it.
//! Nothing else holds per-task runtime state. Who drives it — the leader or a worker claiming
//! tasks beside others — is its [`Mode`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use orca_core::{
    ApprovedPlan, ErrorCode, Execution, ExecutionId, StepId, Task, TaskResult, TaskStatus, Usage,
};
use orca_store::{ResourceGuard, Revision, Versioned};
use tokio::sync::Notify;
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::mirror::TaskMirror;
use crate::error::Result;
use crate::tools::AuditScope;
use crate::{ExecutionService, StartedAttempt};

/// What the runner is doing with one task (by plan position). What the task *is* (pending,
/// running, failed…) is its stored record; the slot is what the runner does about it.
#[derive(Debug, Default)]
pub(super) enum Slot {
    /// Nothing: what happens next follows from the stored task (a pending task starts when
    /// ready; a failed one is looked at by `reconcile_failed`).
    #[default]
    Idle,
    /// Wants to start (ready, or a retry) but a resource lock is held elsewhere; the wait was
    /// reported once. Keeps the guidance of a retry.
    WaitingForLock {
        /// Guidance for the retry, if it is one.
        guidance: Option<String>,
    },
    /// Its start is being written, and the loop goes on meanwhile (a claiming worker, ADR 0038):
    /// the step's locks travel with the write and come back with it. `retry` is
    /// what the slot was, to go back to if another worker claimed the task first: a retry
    /// (with its guidance) or, when `None`, idle.
    Starting {
        /// `Some(guidance)` if the start is a retry's.
        retry: Option<Option<String>>,
    },
    /// Its attempt is in flight; the step's locks are held until the reply is in.
    InFlight {
        /// Released when the slot changes.
        _locks: Option<ResourceGuard>,
    },
    /// Failed with attempts left: retried automatically at this time.
    RetryAt(Instant),
    /// To start again at once (a due retry, a human's Retry or Answer, a recovered attempt).
    RetryNow {
        /// Guidance for the next attempt.
        guidance: Option<String>,
    },
    /// Failed and given up on (policy skip): never retried; its dependents are skipped.
    Abandoned,
}

impl Slot {
    /// The slot's state, for invariants and tests.
    pub(super) const fn name(&self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::WaitingForLock { .. } => "waiting_for_lock",
            Self::Starting { .. } => "starting",
            Self::InFlight { .. } => "in_flight",
            Self::RetryAt(_) => "retry_at",
            Self::RetryNow { .. } => "retry_now",
            Self::Abandoned => "abandoned",
        }
    }
}

/// A start written without the loop waiting for it (a claiming worker): the task's position,
/// the step's locks, and how the write went.
pub(super) type StartWritten = (usize, Option<ResourceGuard>, Result<StartedAttempt>);

/// What an agent's task hands back: unless the call was cancelled, the reply and how writing
/// it to the store went (the write happens in the agent's task, so the replies of parallel
/// tasks are written in parallel).
pub(super) type Joined = Option<(Recording, Result<Versioned<Task>>)>;

/// An agent reply about to be written.
pub(super) struct Recording {
    pub(super) index: usize,
    pub(super) step: StepId,
    /// The running task the reply is for.
    pub(super) task: Versioned<Task>,
    /// Attempts counted before this one ended.
    pub(super) running_attempts: u32,
    pub(super) outcome: TaskResult,
    pub(super) usage: Usage,
    /// The audit entry of the attempt's start.
    pub(super) parent: u64,
}

/// Agents whose call returned while their reply is still being written (ADR 0038):
/// the slot stays [`Slot::InFlight`] (its locks held, its attempt in flight for every other
/// rule) until the reply is in, but it no longer counts against the concurrency, and its usage
/// is counted at once — so the next ready task's claim is written while the reply is, instead
/// of after it, and budgets still see everything spent.
pub(super) struct Returns {
    tx: tokio::sync::mpsc::UnboundedSender<(usize, Usage)>,
    pub(super) rx: tokio::sync::mpsc::UnboundedReceiver<(usize, Usage)>,
    /// Positions whose agent returned (a subset of the in-flight slots).
    returned: std::collections::HashSet<usize>,
}

impl Default for Returns {
    fn default() -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Self {
            tx,
            rx,
            returned: std::collections::HashSet::new(),
        }
    }
}

impl Returns {
    /// What an agent's task uses to say its call returned.
    pub(super) fn sender(&self) -> tokio::sync::mpsc::UnboundedSender<(usize, Usage)> {
        self.tx.clone()
    }
}

/// Who drives a [`Run`]: what differs between the leader and a worker claiming tasks beside
/// others is chosen by this type, not by a flag.
pub(super) enum Mode {
    /// The one driver under the execution's exclusive lease ([`Runner::run`], `lead.rs`). It
    /// goes through the ready tasks in plan order and waits for the starts it writes (written
    /// together, so a group-committing store takes them in one round).
    ///
    /// [`Runner::run`]: crate::Runner::run
    Leader,
    /// A worker claiming tasks beside others (ADR 0026; [`Runner::run_claims`], `claim.rs`).
    ///
    /// [`Runner::run_claims`]: crate::Runner::run_claims
    Claiming(Claiming),
}

/// What a claiming worker's run has that a leader's has not.
///
/// It looks at the ready tasks in a new random order each time, so that workers reach for
/// different tasks instead of all for the same ones (a rotation from one random place made
/// neighbours collide again and again). And it does not wait for the starts it writes
/// ([`Slot::Starting`]): an agent returning meanwhile gets its slot refilled at once, and the
/// starts of several slots share one group-commit round.
pub(super) struct Claiming {
    /// Starts being written while the loop goes on.
    pub(super) starts: JoinSet<StartWritten>,
    /// Notified by the caller when the execution's tasks change in the store (another worker's
    /// claim or reply: LISTEN/NOTIFY on PostgreSQL).
    pub(super) wake: Arc<Notify>,
}

impl Claiming {
    pub(super) fn new(wake: Arc<Notify>) -> Self {
        Self {
            starts: JoinSet::new(),
            wake,
        }
    }
}

impl Mode {
    /// Puts the tasks that want to start in the order this driver tries them: a leader's in
    /// plan order (as they come), a claiming worker's shuffled.
    pub(super) fn order<T>(&self, candidates: &mut [T]) {
        match self {
            Self::Leader => {}
            Self::Claiming(_) => fastrand::shuffle(candidates),
        }
    }

    /// Whether starts are being written beside the loop (a claiming worker's).
    pub(super) fn writing_starts(&self) -> bool {
        match self {
            Self::Leader => false,
            Self::Claiming(claiming) => !claiming.starts.is_empty(),
        }
    }

    /// The next start written beside the loop to end; `None` when none is being written.
    pub(super) async fn next_start_written(
        &mut self,
    ) -> Option<std::result::Result<StartWritten, JoinError>> {
        match self {
            Self::Leader => None,
            Self::Claiming(claiming) => claiming.starts.join_next().await,
        }
    }
}

pub(super) struct Run {
    pub(super) id: ExecutionId,
    pub(super) plan: ApprovedPlan,
    /// The plan's dependency indices, computed once.
    pub(super) deps: Vec<Vec<usize>>,
    /// The execution header, shared: every start and reply written beside the loop takes it
    /// along, and a clone of the header (its 800 step ids on the benchmark's plan) per task
    /// was ~2 % of a claiming worker's CPU.
    pub(super) execution: Arc<Execution>,
    /// The stored task records, in plan order.
    pub(super) tasks: TaskMirror,
    /// What the runner does with each task, in plan order.
    pub(super) slots: Vec<Slot>,
    pub(super) joins: JoinSet<Joined>,
    /// Cancels the agent calls in `joins` (never their writes: a reply that is in gets written
    /// whole, task and audit entry).
    pub(super) calls: CancellationToken,
    pub(super) usage: Usage,
    pub(super) started: Instant,
    /// When the execution header was last read.
    pub(super) last_refresh: Instant,
    pub(super) stop_after_drain: Option<String>,
    /// The leader, or a worker claiming tasks beside others.
    pub(super) mode: Mode,
    /// Agents returned, replies still being written.
    pub(super) returns: Returns,
    /// What each step that wants to start has waited for so far (by plan index).
    pub(super) waits: std::collections::BTreeMap<usize, crate::StartWait>,
    /// Where this run's last catch-up left off (`changed_tasks_since`).
    pub(super) change_cursor: Option<orca_store::ChangeCursor>,
}

impl Run {
    /// A run of `execution` with its stored `tasks`, every slot idle.
    pub(super) fn new(
        id: ExecutionId,
        plan: ApprovedPlan,
        deps: Vec<Vec<usize>>,
        execution: Execution,
        tasks: Vec<Versioned<Task>>,
        mode: Mode,
    ) -> Self {
        Self {
            id,
            plan,
            deps,
            execution: Arc::new(execution),
            slots: std::iter::repeat_with(Slot::default)
                .take(tasks.len())
                .collect(),
            tasks: TaskMirror::new(tasks),
            joins: JoinSet::new(),
            calls: CancellationToken::new(),
            usage: Usage::default(),
            started: Instant::now(),
            last_refresh: Instant::now(),
            stop_after_drain: None,
            mode,
            returns: Returns::default(),
            waits: std::collections::BTreeMap::new(),
            change_cursor: None,
        }
    }

    /// Re-reads the execution header: stops and decisions made by other processes. Cheap —
    /// the runner keeps its own task records current from its own writes, so it never re-reads
    /// every task on every event (that would make a run of N tasks cost O(N²)).
    pub(super) async fn refresh(&mut self, executions: &ExecutionService) -> Result<()> {
        self.execution = Arc::new(executions.header(self.id).await?.value);
        self.last_refresh = Instant::now();
        Ok(())
    }

    /// Re-reads everything, after a conflict showed that another writer changed a task.
    pub(super) async fn refresh_all(&mut self, executions: &ExecutionService) -> Result<()> {
        let snap = executions.get(self.id).await?;
        self.execution = Arc::new(snap.execution.value);
        self.tasks.replace(snap.tasks);
        self.last_refresh = Instant::now();
        Ok(())
    }

    /// Re-reads only the tasks other writers changed, and the header at most once per
    /// `watch_interval` (as a leader does: stops and decisions are rare; with claiming workers,
    /// tasks change all the time).
    pub(super) async fn catch_up(
        &mut self,
        executions: &ExecutionService,
        watch_interval: Duration,
    ) -> Result<()> {
        let known: Vec<Revision> = self.tasks.iter().map(|t| t.revision).collect();
        // Only what changed since this run last looked (where the store can tell): its own
        // writes and every look's answers are in `known`.
        let (changed, cursor) = executions
            .store()
            .changed_tasks_since(self.id, &known, self.change_cursor)
            .await?;
        self.change_cursor = cursor;
        for (i, task) in changed {
            self.tasks.set(i, task);
        }
        if self.last_refresh.elapsed() >= watch_interval {
            self.refresh(executions).await?;
        }
        Ok(())
    }

    pub(super) fn values(&self) -> Vec<Task> {
        self.tasks.iter().map(|t| t.value.clone()).collect()
    }

    /// Pending tasks whose dependencies all completed, in plan order
    /// ([`schedule::ready_with`], each dependency looked at about once per run: see
    /// [`super::mirror`]).
    pub(super) fn ready(&mut self) -> Vec<usize> {
        self.tasks.ready(&self.deps)
    }

    /// Whether the stored task at `index` has failed.
    pub(super) fn failed(&self, index: usize) -> bool {
        self.tasks.get(index).map(|t| t.value.status()) == Some(TaskStatus::Failed)
    }

    pub(super) fn slot(&self, index: usize) -> &Slot {
        self.slots.get(index).unwrap_or(&Slot::Idle)
    }

    /// Sets a task's slot; returns the slot it had.
    pub(super) fn set(&mut self, index: usize, slot: Slot) -> Slot {
        self.slots
            .get_mut(index)
            .map(|s| std::mem::replace(s, slot))
            .unwrap_or_default()
    }

    /// Positions whose slot matches.
    pub(super) fn where_slot(&self, pred: impl Fn(&Slot) -> bool) -> Vec<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| pred(s))
            .map(|(i, _)| i)
            .collect()
    }

    /// Steps given up on (their dependents are skipped).
    pub(super) fn abandoned(&self) -> BTreeSet<StepId> {
        self.where_slot(|s| matches!(s, Slot::Abandoned))
            .into_iter()
            .filter_map(|i| self.plan.content().steps.get(i).map(|s| s.id.clone()))
            .collect()
    }

    /// Whether some retry is still to come (scheduled or due).
    pub(super) fn retries_pending(&self) -> bool {
        self.slots
            .iter()
            .any(|s| matches!(s, Slot::RetryAt(_) | Slot::RetryNow { .. }))
    }

    /// Whether a step waits for a lock (the loop polls for it).
    pub(super) fn waiting_for_locks(&self) -> bool {
        self.slots
            .iter()
            .any(|s| matches!(s, Slot::WaitingForLock { .. }))
    }

    /// Retries whose time has come start now.
    pub(super) fn retries_due(&mut self) {
        let now = Instant::now();
        for i in self.where_slot(|s| matches!(s, Slot::RetryAt(t) if *t <= now)) {
            self.set(i, Slot::RetryNow { guidance: None });
        }
    }

    /// The earliest scheduled retry.
    pub(super) fn next_retry(&self) -> Option<Instant> {
        self.slots
            .iter()
            .filter_map(|s| match s {
                Slot::RetryAt(at) => Some(*at),
                _ => None,
            })
            .min()
    }

    /// An agent's call returned (its reply is being written): counted as spent, and its slot no
    /// longer counts against the concurrency. A late word for a slot no longer in flight is
    /// ignored.
    pub(super) fn agent_returned(&mut self, index: usize, usage: Usage) {
        if matches!(self.slot(index), Slot::InFlight { .. }) && self.returns.returned.insert(index)
        {
            self.usage.add(&usage);
        }
    }

    /// Takes in every "returned" word already sent (each is sent before its reply is written,
    /// so draining before a joined reply is handled sees that reply's word).
    pub(super) fn take_returns(&mut self) {
        while let Ok((index, usage)) = self.returns.rx.try_recv() {
            self.agent_returned(index, usage);
        }
    }

    /// Whether the usage of the reply at `index` was already counted when its agent returned
    /// (and forgets it).
    pub(super) fn usage_counted(&mut self, index: usize) -> bool {
        self.returns.returned.remove(&index)
    }

    /// Agent calls running or about to (their start being written): in-flight slots whose
    /// agent has not returned, and starting ones.
    pub(super) fn agents_running(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::InFlight { .. } | Slot::Starting { .. }))
            .count()
            .saturating_sub(self.returns.returned.len())
    }

    /// Every slot whose attempt is in flight becomes idle (its locks are let go); returns
    /// their positions.
    pub(super) fn end_in_flight(&mut self) -> Vec<usize> {
        self.returns.returned.clear();
        let flights = self.where_slot(|s| matches!(s, Slot::InFlight { .. }));
        for i in &flights {
            self.set(*i, Slot::Idle);
        }
        flights
    }

    /// A start that was not written (another worker claimed the task first, or the write
    /// failed): the slot goes back to what it was.
    pub(super) fn start_refused(&mut self, index: usize) {
        if let Slot::Starting { retry } = self.slot(index) {
            let back = match retry.clone() {
                Some(guidance) => Slot::RetryNow { guidance },
                None => Slot::Idle,
            };
            self.set(index, back);
        }
    }

    pub(super) fn log_scope(&self, parent: Option<u64>) -> AuditScope {
        AuditScope {
            log: ExecutionService::log(self.plan.id(), self.id),
            parent,
        }
    }

    /// The slot invariants against the stored records, as problems (none when they hold): a
    /// task in flight is running (or was failed by a stop from another process meanwhile: its
    /// reply is still to come); a task to retry or given up on has failed; a task waiting for
    /// a lock is pending or failed. So no task is both in flight and done.
    pub(super) fn slot_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (i, (slot, task)) in self.slots.iter().zip(&self.tasks).enumerate() {
            let status = task.value.status();
            let ok = match slot {
                Slot::Idle => true,
                Slot::WaitingForLock { .. } => {
                    matches!(status, TaskStatus::Pending | TaskStatus::Failed)
                }
                Slot::InFlight { .. } => {
                    matches!(status, TaskStatus::Running | TaskStatus::Failed)
                }
                // Running: another worker's claim of it, seen before our start's refusal.
                Slot::Starting { .. } => matches!(
                    status,
                    TaskStatus::Pending | TaskStatus::Failed | TaskStatus::Running
                ),
                Slot::RetryAt(_) | Slot::RetryNow { .. } | Slot::Abandoned => {
                    status == TaskStatus::Failed
                }
            };
            if !ok {
                problems.push(format!(
                    "task {i} is {status} but its slot is {}",
                    slot.name()
                ));
            }
        }
        problems
    }
}

/// Whether an automatic retry may help.
pub(super) const fn retryable(code: ErrorCode) -> bool {
    !matches!(
        code,
        ErrorCode::BudgetExceeded
            | ErrorCode::MergeConflict
            | ErrorCode::UnknownAgent
            | ErrorCode::Validation
            | ErrorCode::Cancelled
    )
}
