//! The leader's drive: under the execution's exclusive lease ([`Runner::run`]), one loop takes
//! the execution to its end. Each time round it takes a turn (`leader_turn`: the execution
//! ended elsewhere, a human's answer to apply, failures to decide, ready tasks to start, or
//! nothing in flight and something to conclude), then waits for the next [`LoopEvent`] and
//! handles it (`leader_handle`).

use orca_core::{PendingDecision, TaskStatus, Usage, schedule};
use tokio_util::sync::CancellationToken;

use super::loop_event::{LoopEvent, Turn};
use super::open::Opened;
use super::report::terminal_outcome;
use super::state::{Mode, Run, Slot};
use crate::error::Result;
use crate::execution::ExecutionService;
use crate::{RunOutcome, RunReport, Runner};

impl Runner {
    /// Opens the execution (its lease held by the caller), drives it as its leader, and seals
    /// its log if it ended.
    pub(super) async fn lead(
        &self,
        id: orca_core::ExecutionId,
        lease: &orca_store::Lease,
        cancel: CancellationToken,
    ) -> Result<RunReport> {
        let (plan, deps, recovered, snapshot) = match self.open(id, lease).await? {
            Opened::Ended(outcome) => {
                // Its ending may have been written by a run that stopped before the seal (a
                // store that writes them apart, a seal that failed): sealed now (idempotent).
                self.executions.seal_if_ended(id).await?;
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
        let recovered: Vec<usize> = recovered
            .iter()
            .filter_map(|s| plan.content().position(s))
            .collect();
        let deps =
            deps.unwrap_or_else(|| orca_core::graph::dependency_indices(&plan.content().steps));
        let (execution, tasks) = (snap.execution.value, snap.tasks);
        let mut run = Run::new(id, plan, deps, execution, tasks, Mode::Leader);
        for i in recovered {
            run.set(i, Slot::RetryNow { guidance: None });
        }
        let outcome = self.drive(&mut run, &cancel).await;
        if outcome.is_err() {
            self.stop_calls(&mut run).await;
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

    /// The leader's loop: a turn, then the next event, handled; until the drive is over.
    async fn drive(&self, run: &mut Run, cancel: &CancellationToken) -> Result<RunOutcome> {
        loop {
            match self.leader_turn(run, cancel).await? {
                Turn::Over(outcome) => return Ok(outcome),
                Turn::Again => continue,
                Turn::Wait => {}
            }
            // The header, once per watch interval, read while nothing else is due.
            let quiet_at = run.last_refresh + self.config.watch_interval;
            let event = run.next_event(cancel, quiet_at).await;
            if let Some(outcome) = self.leader_handle(run, event).await? {
                return Ok(outcome);
            }
            self.take_recorded(run).await?;
        }
    }

    /// What the leader can conclude or start now, before it waits.
    async fn leader_turn(
        &self,
        run: &mut Run,
        cancel: &CancellationToken,
    ) -> Result<Turn<RunOutcome>> {
        // Someone else may have stopped the run, or answered the pending decision: looked
        // at once per watch interval, by the wait when it comes due (the header holds every
        // step id, so reading it per event would make a run of N tasks cost O(N²)); our own
        // header changes refresh it at once, and so does having nothing in flight. Here only
        // when events kept the wait from ever coming due: read at the first event after a
        // quiet spell, the header used to delay every layer's first reply.
        if run.last_refresh.elapsed() >= self.config.watch_interval * 2 {
            run.refresh(&self.executions).await?;
        }
        if let Some(outcome) = terminal_outcome(&run.execution) {
            self.cancel_in_flight(run, "the execution was stopped")
                .await?;
            return Ok(Turn::Over(outcome));
        }
        if let Some(turn) = self.apply_answer(run).await? {
            return Ok(turn);
        }
        debug_assert!(
            run.slot_problems().is_empty(),
            "slot invariants: {:?}",
            run.slot_problems()
        );
        self.reconcile_failed(run).await?;
        if run.execution.decision().is_none() && run.stop_after_drain.is_none() {
            self.launch_ready(run).await?;
        }
        if run.joins.is_empty() {
            return self.nothing_in_flight(run, cancel).await;
        }
        Ok(Turn::Wait)
    }

    /// A human's answer to the pending decision (given here, in another process or on the
    /// web), applied once no call is in flight: taken off the header, then applied.
    async fn apply_answer(&self, run: &mut Run) -> Result<Option<Turn<RunOutcome>>> {
        let answered = run
            .execution
            .decision()
            .is_some_and(|pending| pending.answer.is_some());
        if !answered || !run.joins.is_empty() {
            return Ok(None);
        }
        let Some((request, answered)) = self.executions.take_answered(run.id).await? else {
            return Ok(None);
        };
        if let Some(outcome) = self
            .apply_decision(run, &request, answered.decision, &answered.by)
            .await?
        {
            return Ok(Some(Turn::Over(outcome)));
        }
        // The decision is off the header now.
        run.refresh(&self.executions).await?;
        Ok(Some(Turn::Again))
    }

    /// Nothing in flight: before concluding anything, the latest header. The run ends (stopped
    /// elsewhere, its failure policy's stop, every task done), a human is asked, or the loop
    /// waits for a retry or a lock.
    async fn nothing_in_flight(
        &self,
        run: &mut Run,
        cancel: &CancellationToken,
    ) -> Result<Turn<RunOutcome>> {
        run.refresh(&self.executions).await?;
        if let Some(outcome) = terminal_outcome(&run.execution) {
            return Ok(Turn::Over(outcome));
        }
        if let Some(reason) = run.stop_after_drain.take() {
            self.executions.record_failed(run.id, &reason).await?;
            return Ok(Turn::Over(RunOutcome::Failed { reason }));
        }
        if let Some(pending) = run.execution.decision().cloned() {
            if pending.answer.is_some() {
                return Ok(Turn::Again);
            }
            return self.ask(run, pending, cancel).await;
        }
        if run.retries_pending() || run.waiting_for_locks() {
            return Ok(Turn::Wait);
        }
        if run.ready().is_empty() {
            return Ok(Turn::Over(self.finish(run).await?));
        }
        // Ready but nothing launched (e.g. the lock was released meanwhile): go round.
        Ok(Turn::Again)
    }

    /// Asks this runner's human the pending decision; with nobody to answer, the run waits
    /// for a decision made later (`decide`, then `resume`).
    async fn ask(
        &self,
        run: &mut Run,
        pending: PendingDecision,
        cancel: &CancellationToken,
    ) -> Result<Turn<RunOutcome>> {
        let answer = tokio::select! {
            answer = self.ask_human(run, &pending.request) => answer?,
            // Ctrl-C at the prompt: nothing is in flight; the decision stays pending, the
            // execution resumable.
            () = cancel.cancelled() => {
                self.executions
                    .record_interrupted(&run.execution, &self.config.actor, &self.config.holder, &[])
                    .await?;
                return Ok(Turn::Over(RunOutcome::Interrupted { steps: Vec::new() }));
            }
        };
        match answer {
            Some(decision) => {
                self.executions
                    .decide(run.id, decision, &self.config.actor)
                    .await?;
                run.refresh(&self.executions).await?;
                Ok(Turn::Again)
            }
            None => Ok(Turn::Over(RunOutcome::AwaitingDecision {
                request: pending.request,
            })),
        }
    }

    /// Takes in one event; `Some` when it ends the drive.
    async fn leader_handle(&self, run: &mut Run, event: LoopEvent) -> Result<Option<RunOutcome>> {
        match event {
            LoopEvent::Cancelled => {
                let steps = self.interrupt_in_flight(run).await?;
                self.executions
                    .record_interrupted(
                        &run.execution,
                        &self.config.actor,
                        &self.config.holder,
                        &steps,
                    )
                    .await?;
                return Ok(Some(RunOutcome::Interrupted { steps }));
            }
            LoopEvent::AgentReturned { index, usage } => run.agent_returned(index, usage),
            LoopEvent::ReplyRecorded(joined) => self.on_joined(run, joined).await?,
            LoopEvent::RetryDue => run.retries_due(),
            // The turn that follows tries the lock again.
            LoopEvent::LockPoll => {}
            LoopEvent::Quiet => run.refresh(&self.executions).await?,
            // A claiming worker's only: a leader waits for the starts it writes, and hears of
            // no other worker (its mode has neither).
            LoopEvent::StartWritten(_) | LoopEvent::TasksChanged => {}
        }
        Ok(None)
    }

    /// Nothing in flight and nothing left to start: the execution ends, completed if every
    /// task completed, else failed.
    async fn finish(&self, run: &mut Run) -> Result<RunOutcome> {
        let tasks = run.values();
        if tasks.iter().all(|t| t.status() == TaskStatus::Completed) {
            // The plan's checks, on the integrated result: a failure fails the execution and
            // keeps its worktrees for inspection.
            if let Some(reason) = self.judge_plan(run).await {
                crate::isolated::end(&self.dispatch, run.id, orca_core::WorkspaceEnd::Kept).await;
                self.executions.record_failed(run.id, &reason).await?;
                return Ok(RunOutcome::Failed { reason });
            }
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

    /// Runs the plan's checks (if any) where the integrated result is: the execution's
    /// integration worktree when a step of it ran in one, else the project. `Some(reason)`
    /// when one did not pass.
    async fn judge_plan(&self, run: &Run) -> Option<String> {
        let content = run.plan.content();
        if content.checks.is_empty() {
            return None;
        }
        let mut workdir = None;
        if orca_core::isolation::any_worktree(content, self.config.isolation)
            && let Some(ws) = self.dispatch.workspaces()
        {
            match ws.integrated(run.id).await {
                Ok(dir) => workdir = dir,
                Err(e) => {
                    return Some(format!(
                        "the plan's checks could not run: cannot check out the integrated result ({e})"
                    ));
                }
            }
        }
        crate::checks::judge_plan(
            self.dispatch.context(),
            &self.executions,
            &run.execution,
            &content.checks,
            workdir,
        )
        .await
    }
}
