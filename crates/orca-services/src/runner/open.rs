//! Opening an execution, before anything runs (ADR 0013, 0010): its record must verify and
//! agree with its state, its plan be the approved one; a dead runner's processes are ended,
//! the execution is begun (or resumed) and the attempts its dead runner left are recovered as
//! abandoned. The leader opens every run it drives; a pending execution is opened once for
//! the workers that claim its tasks ([`Runner::begin_for_claims`]).

use orca_core::{ApprovedPlan, ExecutionId, StepId, Task};
use orca_store::Versioned;
use serde_json::json;
use tracing::info;

use super::report::{RunOutcome, terminal_outcome};
use crate::error::{Result, ServiceError};
use crate::execution::ExecutionService;
use crate::{RunEvent, Runner};

/// What opening an execution found.
pub(super) enum Opened {
    /// It had ended already.
    Ended(RunOutcome),
    /// It runs: its approved plan, and the steps whose abandoned attempts were recovered.
    Running {
        plan: Box<ApprovedPlan>,
        /// The plan's dependency indices, when a claiming drive computed them already.
        deps: Option<Vec<Vec<usize>>>,
        recovered: Vec<StepId>,
        /// The execution as it stands now, when opening did not change its tasks (the
        /// tasks read at the start and the header begun): not read again.
        snapshot: Option<Box<orca_store::ExecutionSnapshot>>,
    },
}

/// What a claiming drive hands to the leader run that follows it in the same runner (see
/// [`Runner::verified`]): the plan it checked, for the execution it drove, with its dependency
/// indices. (Not its view of the tasks: the leader reads every task again, so a task's state
/// edited behind orca's back during the drive is still compared with the log at the open.)
pub(super) struct Verified {
    pub(super) id: ExecutionId,
    pub(super) plan: ApprovedPlan,
    pub(super) deps: Vec<Vec<usize>>,
}

impl Runner {
    /// What a claiming drive of this runner handed over for `id`, if any (taken).
    pub(super) fn take_verified(&self, id: ExecutionId) -> Option<Verified> {
        let mut verified = self
            .verified
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        verified.take().filter(|v| v.id == id)
    }

    /// Hands what a claiming drive checked to the leader run that follows it in this runner.
    pub(super) fn hand_over(&self, verified: Verified) {
        *self
            .verified
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(verified);
    }

    /// Opens an execution under its lease (ADR 0013, 0010): its record must verify and agree
    /// with its state, its plan be the approved one; a dead runner's processes are ended, the
    /// execution is begun (or resumed) and abandoned attempts recovered. Used by [`Self::run`]
    /// and, for workers claiming tasks one by one, by [`Self::begin_for_claims`].
    pub(super) async fn open(&self, id: ExecutionId, lease: &orca_store::Lease) -> Result<Opened> {
        let store = self.executions.store().clone();
        let snap = self.executions.get(id).await?;
        if let Some(outcome) = terminal_outcome(&snap.execution.value) {
            return Ok(Opened::Ended(outcome));
        }
        let plan_id = snap.execution.value.info().plan_id;
        // The record first (ADR 0013): the log must verify and the state files agree with it.
        let log = ExecutionService::log(plan_id, id);
        // One read (where the backend can) for the chain's check and the entries.
        let (mut report, mut entries) = store.verified_entries(log).await?;
        if entries.is_empty() && just_created(&snap.execution.value) {
            // Its creator writes the first entry right after the record (a detached run hands
            // it to workers at once): give it that moment, or the entry would be written twice.
            for _ in 0..FIRST_ENTRY_WAITS {
                tokio::time::sleep(FIRST_ENTRY_STEP).await;
                (report, entries) = store.verified_entries(log).await?;
                if !entries.is_empty() {
                    break;
                }
            }
        }
        let problem = match report {
            orca_store::VerifyReport::Tampered { seq, problem } => Some(format!(
                "its audit log was tampered with: entry {seq}: {problem}"
            )),
            orca_store::VerifyReport::Intact { .. } => None,
        };
        let problem = problem.or_else(|| {
            crate::integrity::against_log(&snap, &entries)
                .into_iter()
                .next()
                .map(|f| f.to_string())
        });
        if let Some(problem) = problem {
            // Recorded where the execution's own log cannot be trusted: the plan's run register.
            self.executions
                .record_run_refused(plan_id, json!({ "execution_id": id, "problem": problem }))
                .await;
            return Err(ServiceError::Tampered(format!(
                "refused to run execution {id}: {problem}"
            )));
        }
        let (plan, deps) = match self.take_verified(id) {
            Some(v) if v.plan.id() == plan_id => (v.plan, Some(v.deps)),
            _ => (self.executions.planning().approved(plan_id).await?, None),
        };
        if plan.digest() != &snap.execution.value.info().plan_digest {
            return Err(ServiceError::PlanTampered(plan_id));
        }
        if entries.is_empty() {
            // The process that created it died before its first entry (see `against_log`).
            self.executions
                .record_created_late(&snap.execution.value, plan.digest(), snap.tasks.len())
                .await?;
        }
        // Whatever the dead runner's steps started dies before anything runs again.
        crate::takeover::end_dead_runner_processes(
            &self.executions,
            &snap,
            self.dispatch.context().agents.as_ref(),
            id,
            &self.config.holder.host,
        )
        .await?;
        let begun = self
            .executions
            .begin(id, &self.config.holder, lease.took_over())
            .await?;
        let note = lease.took_over().map_or_else(
            || "the attempt was in flight when its runner stopped".to_owned(),
            |l| {
                format!(
                    "the process running it (pid {} on {}) is gone",
                    l.holder.pid, l.holder.host
                )
            },
        );
        // Under the lease nobody else writes the tasks: the ones read above are current.
        let recovered = self
            .executions
            .recover_among(&begun.value, running(&snap.tasks), &note, None)
            .await?;
        if !recovered.is_empty() {
            info!(execution = %id, steps = ?recovered, "recovered abandoned attempts");
            self.observer.event(&RunEvent::Recovered {
                steps: recovered.clone(),
            });
        }
        let snapshot = recovered.is_empty().then(|| {
            Box::new(orca_store::ExecutionSnapshot {
                execution: begun,
                tasks: snap.tasks,
            })
        });
        Ok(Opened::Running {
            plan: Box::new(plan),
            deps,
            recovered,
            snapshot,
        })
    }
}

/// The running tasks of `tasks` (those a run that opens recovers).
fn running(tasks: &[Versioned<Task>]) -> Vec<Versioned<Task>> {
    tasks
        .iter()
        .filter(|t| matches!(t.value, Task::Running(_)))
        .cloned()
        .collect()
}

/// How long an execution counts as just created, its creator still about to write its first
/// entry.
const JUST_CREATED: time::Duration = time::Duration::seconds(10);
/// How often, and how many times, the first entry of a just-created execution is looked for.
const FIRST_ENTRY_STEP: std::time::Duration = std::time::Duration::from_millis(50);
const FIRST_ENTRY_WAITS: u32 = 40;

fn just_created(execution: &orca_core::Execution) -> bool {
    time::OffsetDateTime::now_utc() - execution.info().created_at < JUST_CREATED
}
