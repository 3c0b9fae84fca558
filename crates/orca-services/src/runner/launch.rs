//! Launching: which ready steps start now (concurrency, resource locks), writing their
//! starts through the writer, and handing each to its agent. The leader waits for the starts
//! it writes; a claiming worker writes them beside its loop (the run's [`Mode`]).

use std::time::Duration;

use orca_core::{ErrorCode, Reply, Task, TaskFailure, TaskRequest, TaskResult};
use orca_store::{ResourceGuard, StoreError};
use tokio::time::Instant;

use super::state::{Mode, Recording, Run, Slot, StartWritten};
use crate::error::Result;
use crate::{RunEvent, Runner, ServiceError, StartedAttempt};

/// How long after a step's timeout the runner itself gives up on the agent's reply.
const BACKSTOP_GRACE: Duration = Duration::from_secs(2);

/// A task decided to start now: its position, and the step's locks if it has any.
type Decided = (usize, Option<ResourceGuard>);

impl Runner {
    /// Starts ready tasks (and due retries) up to the concurrency: decides them one by one,
    /// writes their starts concurrently (the file store's group commit turns N starts into a
    /// few fsyncs), then hands each to its agent.
    pub(super) async fn launch_ready(&self, run: &mut Run) -> Result<()> {
        // Who wants to start: ready pending tasks, and failed ones to retry (due, or waiting
        // for a lock), with their guidance.
        let mut candidates: Vec<(usize, Option<String>)> = Vec::new();
        for (i, slot) in run.slots.iter().enumerate() {
            match slot {
                Slot::RetryNow { guidance } if run.failed(i) => {
                    candidates.push((i, guidance.clone()))
                }
                Slot::WaitingForLock { guidance } if run.failed(i) => {
                    candidates.push((i, guidance.clone()));
                }
                _ => {}
            }
        }
        for i in run.ready() {
            if matches!(run.slot(i), Slot::Idle | Slot::WaitingForLock { .. }) {
                candidates.push((i, None));
            }
        }
        candidates.sort_by_key(|(i, _)| *i);
        candidates.dedup_by_key(|(i, _)| *i);
        let now = time::OffsetDateTime::now_utc();
        for (i, _) in &candidates {
            run.waits.entry(*i).or_default().ready_at.get_or_insert(now);
        }
        run.mode.order(&mut candidates);
        // A wait for a step that no longer wants to start ends.
        for i in run.where_slot(|s| matches!(s, Slot::WaitingForLock { .. })) {
            if !candidates.iter().any(|(c, _)| *c == i) {
                run.set(i, Slot::Idle);
                run.waits.remove(&i);
            }
        }

        // 1. Decide, in that order, without writing.
        let mut decided: Vec<Decided> = Vec::new();
        let mut starts: Vec<crate::PreparedStart> = Vec::new();
        for (index, guidance) in candidates {
            if run.agents_running() + decided.len() >= self.config.concurrency.max(1) {
                break;
            }
            if matches!(run.slot(index), Slot::InFlight { .. }) {
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
                        let (step_id, locks) = (step.id.clone(), step.locks.clone());
                        let wait = run.waits.entry(index).or_default();
                        if wait.lock_wait.is_none() {
                            wait.lock_wait = Some((now, locks.clone()));
                        }
                        let was = run.set(index, Slot::WaitingForLock { guidance });
                        if !matches!(was, Slot::WaitingForLock { .. }) {
                            let holding: Vec<usize> = run
                                .where_slot(|s| matches!(s, Slot::InFlight { .. }))
                                .into_iter()
                                .chain(decided.iter().map(|(i, _)| *i))
                                .collect();
                            let own = (run.id, run.plan.content(), holding.as_slice());
                            let (resource, holder) =
                                crate::locks::find_holder(&self.executions, own, &locks).await?;
                            self.observer.event(&RunEvent::WaitingForLock {
                                step: step_id,
                                resource,
                                holder,
                            });
                        }
                        continue;
                    }
                }
            };
            if let Slot::WaitingForLock { guidance } = run.slot(index) {
                // The wait is over: the step starts now (the slot says so once it is in flight).
                let slot = if run.failed(index) {
                    Slot::RetryNow {
                        guidance: guidance.clone(),
                    }
                } else {
                    Slot::Idle
                };
                run.set(index, slot);
            }
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
            let wait = run.waits.remove(&index).unwrap_or_default();
            decided.push((index, locks));
            starts.push(start.with_wait(wait));
        }
        if decided.is_empty() {
            return Ok(());
        }
        match run.mode {
            Mode::Leader => self.write_starts(run, decided, starts).await,
            Mode::Claiming(_) => {
                self.write_starts_beside(run, decided, starts);
                Ok(())
            }
        }
    }

    /// The leader's starts: written together, then each handed to its agent.
    async fn write_starts(
        &self,
        run: &mut Run,
        decided: Vec<Decided>,
        starts: Vec<crate::PreparedStart>,
    ) -> Result<()> {
        // 2. Write the starts and their audit entries, all at once: polled together in this
        // task, every write joins its log's queue before the first one takes the turn, so a
        // group-committing store writes them in one round (spawned apart, the first one used
        // to go alone and the rest in a second round).
        let (executions, execution) = (&self.executions, &run.execution);
        let writes = decided.iter().zip(starts).map(|((index, _), start)| {
            let step = run.plan.content().steps.get(*index);
            let named = step.map(|s| (s.id.clone(), s.agent.clone()));
            async move {
                // Every decided index names a step (checked when it was decided).
                let Some((step_id, agent)) = named else {
                    return Ok(None);
                };
                executions
                    .record_attempt_started(execution, start, &step_id, &agent)
                    .await
                    .map(Some)
            }
        });
        let mut written: Vec<Option<StartedAttempt>> = Vec::with_capacity(decided.len());
        let mut first_error = None;
        for outcome in futures_util::future::join_all(writes).await {
            match outcome {
                Ok(started) => written.push(started),
                Err(ServiceError::Store(StoreError::Conflict { .. })) => written.push(None),
                Err(e) => {
                    written.push(None);
                    first_error.get_or_insert(e);
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
            // Only the tasks whose revision moved (and the header, at its pace): with claiming
            // workers a conflict is common, and re-reading every task each time was most of a
            // claim's cost.
            run.catch_up(&self.executions, self.config.watch_interval)
                .await?;
        }
        Ok(())
    }

    /// A claiming worker's starts: it goes on while they are written (see [`Mode::Claiming`]);
    /// each comes back as a [`LoopEvent::StartWritten`].
    ///
    /// [`LoopEvent::StartWritten`]: super::loop_event::LoopEvent::StartWritten
    fn write_starts_beside(
        &self,
        run: &mut Run,
        decided: Vec<Decided>,
        starts: Vec<crate::PreparedStart>,
    ) {
        for ((index, locks), start) in decided.into_iter().zip(starts) {
            let Some(step) = run.plan.content().steps.get(index) else {
                continue;
            };
            let (step_id, agent) = (step.id.clone(), step.agent.clone());
            let retry = match run.slot(index) {
                Slot::RetryNow { guidance } => Some(guidance.clone()),
                _ => None,
            };
            run.set(index, Slot::Starting { retry });
            let executions = self.executions.clone();
            let execution = run.execution.clone();
            // Always claiming: only a claiming run writes its starts beside the loop.
            let Mode::Claiming(claiming) = &mut run.mode else {
                continue;
            };
            claiming.starts.spawn(async move {
                let started = executions
                    .record_attempt_started(&execution, start, &step_id, &agent)
                    .await;
                (index, locks, started)
            });
        }
    }

    /// A start written while the loop went on (a claiming worker): its agent is called, or its
    /// slot goes back to what it was. `Ok(true)`: another worker claimed the task first (what
    /// the others changed is worth reading).
    pub(super) fn on_start_written(
        &self,
        run: &mut Run,
        joined: std::result::Result<StartWritten, tokio::task::JoinError>,
    ) -> Result<bool> {
        let (index, locks, written) = joined
            .map_err(|e| ServiceError::Store(StoreError::backend("writing a task start", e)))?;
        match written {
            Ok(started) => {
                self.dispatch_started(run, index, locks, started);
                Ok(false)
            }
            Err(ServiceError::Store(StoreError::Conflict { .. })) => {
                run.start_refused(index);
                Ok(true)
            }
            Err(e) => {
                run.start_refused(index);
                Err(e)
            }
        }
    }

    /// Waits for the starts being written; each written one becomes in flight without its agent
    /// being called (the loop is ending: it is interrupted, or left running for the leader or a
    /// takeover, as a cancelled call is).
    pub(super) async fn settle_starts(run: &mut Run) {
        while let Some(joined) = run.mode.next_start_written().await {
            let Ok((index, locks, written)) = joined else {
                continue;
            };
            match written {
                Ok(started) => {
                    run.tasks.set(index, started.task);
                    run.set(index, Slot::InFlight { _locks: locks });
                }
                Err(_) => run.start_refused(index),
            }
        }
    }

    /// Spawns the agent call of a task whose start is written.
    pub(super) fn dispatch_started(
        &self,
        run: &mut Run,
        index: usize,
        locks: Option<ResourceGuard>,
        started: StartedAttempt,
    ) {
        let StartedAttempt {
            task: started,
            attempt_seq,
        } = started;
        let Some(step) = run.plan.content().steps.get(index).cloned() else {
            return;
        };
        let Task::Running(running) = &started.value else {
            return;
        };
        let attempt = running.attempt;
        let context = running.context.clone();
        run.tasks.set(index, started.clone());
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
        // plan's or the config's default for writing steps) for the dispatcher; an isolated
        // one carries in `depends_on` the steps whose results its worktree starts from (its
        // direct dependencies, one run in place replaced by its own).
        let mut step = step;
        let isolation = orca_core::Isolation::of(&step, run.plan.content(), self.config.isolation);
        step.isolation = Some(isolation);
        if isolation == orca_core::Isolation::Worktree {
            step.depends_on = Some(orca_core::isolation::worktree_dependencies(
                run.plan.content(),
                index,
                self.config.isolation,
            ));
        }
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
        run.set(index, Slot::InFlight { _locks: locks });
        let executions = self.executions.clone();
        let (id, execution) = (run.id, run.execution.clone());
        let calls = run.calls.clone();
        let step_id = request.step.id.clone();
        let agents = self.dispatch.context().agents.clone();
        let returned = run.returns.sender();
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
                    // The agent ends its own attempt at `limit`, keeping the usage its model
                    // already reported; this backstop, a little later, only catches an agent
                    // that does not (its reply, and so its usage, is lost).
                    match timeout {
                        Some(limit) => match tokio::time::timeout(limit + BACKSTOP_GRACE, call)
                            .await
                        {
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
            // The call is over: the loop may start the next ready task while this reply is
            // written (the word goes before the write, so it is in before the reply is).
            let _ = returned.send((index, reply.usage));
            let recording = Recording {
                index,
                step: step_id,
                running_attempts: started.value.counted_attempts(),
                task: started,
                outcome,
                usage: reply.usage,
                parent: attempt_seq,
            };
            let written = executions
                .record_reply(
                    &execution,
                    recording.task.clone(),
                    &recording.outcome,
                    &recording.usage,
                    recording.parent,
                )
                .await;
            Some((recording, written))
        });
    }
}
