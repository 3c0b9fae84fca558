//! Who a step's processes belong to: the identity a step process is given in its environment,
//! and the process groups a running attempt records so that whoever takes the execution over
//! can end them (ADR 0010).

use serde::{Deserialize, Serialize};

use crate::id::{ExecutionId, PlanId, StepId};

/// A process group a step started: its id and its leader's start time (clock ticks since boot,
/// `/proc/<pid>/stat` field 22), so a reused pid is never mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessGroup {
    /// The process group id (the leader's pid).
    pub pgid: i32,
    /// The leader's start time, in clock ticks since boot.
    pub start_time: u64,
}

/// The identity of one attempt of one step: what its processes are told in `ORCA_*`
/// variables so a side-effecting step can deduplicate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepIdentity {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The plan.
    pub plan_id: PlanId,
    /// The step.
    pub step_id: StepId,
    /// The attempt (1-based).
    pub attempt: u32,
}

impl StepIdentity {
    /// A key stable across the attempts of this step in this execution, and different for any
    /// other step or execution.
    #[must_use]
    pub fn idempotency_key(&self) -> String {
        format!("{}.{}", self.execution_id, self.step_id)
    }

    /// The variables every process of this attempt gets: `ORCA_EXECUTION_ID`, `ORCA_PLAN_ID`,
    /// `ORCA_TASK_ID` (and its older name `ORCA_STEP_ID`), `ORCA_ATTEMPT`,
    /// `ORCA_IDEMPOTENCY_KEY`.
    #[must_use]
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "ORCA_EXECUTION_ID".to_owned(),
                self.execution_id.to_string(),
            ),
            ("ORCA_PLAN_ID".to_owned(), self.plan_id.to_string()),
            ("ORCA_TASK_ID".to_owned(), self.step_id.to_string()),
            ("ORCA_STEP_ID".to_owned(), self.step_id.to_string()),
            ("ORCA_ATTEMPT".to_owned(), self.attempt.to_string()),
            ("ORCA_IDEMPOTENCY_KEY".to_owned(), self.idempotency_key()),
        ]
    }
}

/// What ending a recorded process group found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReapOutcome {
    /// Members were alive; they were ended (SIGTERM, grace, SIGKILL) and are gone.
    Killed,
    /// Nothing of the group was alive.
    Gone,
    /// The pid now belongs to another process (its start time differs): left alone.
    PidReused,
    /// Members were still alive after SIGKILL (uninterruptible sleep): reported, not hidden.
    Survived,
    /// The group is on another host (or this platform cannot end it): left alone.
    Unreachable,
}
