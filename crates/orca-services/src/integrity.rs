//! An execution's state files checked against each other and against its audit log
//! (ADR 0013).
//!
//! The state files (the header and one file per task) are the runner's working copy; the
//! hash-chained, sealed log is the record. A state that cannot happen (the header `completed`
//! while a task still runs) or that says something the log does not (a completed task whose
//! result is not the one the log recorded, a log that does not begin with this execution's
//! creation) is reported, located, and refused by `resume`.

use orca_core::AuditKind;
use orca_core::{
    Digest, Execution, ExecutionId, ExecutionStage, StepId, Task, TaskStatus, TaskSuccess,
};
use orca_store::audit::AuditEntry;
use orca_store::{ExecutionSnapshot, Store};
use serde_json::Value;

use crate::error::Result;
use crate::execution::ExecutionService;

/// The key of the result digest in a `task.attempt.completed` entry.
pub const RESULT_DIGEST: &str = "result_digest";

/// The key saying what the result digest covers: [`STORED`], the result as the store keeps it
/// (secrets redacted). Entries written before it existed lack it: their digest covers the
/// result before redaction (see [`against_log`]).
pub const RESULT_DIGEST_OF: &str = "result_digest_of";

/// The value of [`RESULT_DIGEST_OF`]: the digest covers the stored (redacted) result.
pub const STORED: &str = "stored";

/// The digest of a task's result as read from the store (its stored form).
#[must_use]
pub fn result_digest(result: &TaskSuccess) -> Digest {
    Digest::of_canonical(result).unwrap_or_else(|_| Digest::of_bytes(b""))
}

/// The digest of a task's result as `store` will keep it: over its stored form (secrets
/// redacted, ADR 0011), so an untouched record always checks and no record holds a digest of
/// an unredacted value (an offline guessing oracle for short secrets).
#[must_use]
pub fn stored_result_digest(store: &dyn Store, result: &TaskSuccess) -> Digest {
    match serde_json::to_value(result) {
        Ok(value) => Digest::of_canonical_value(&store.stored_form(value)),
        Err(_) => Digest::of_bytes(b""),
    }
}

/// Whether a stored result was changed by redaction (it holds the redaction marker).
fn was_redacted(result: &TaskSuccess) -> bool {
    serde_json::to_string(result).is_ok_and(|t| t.contains(orca_core::redact::REDACTED))
}

/// A completed attempt recorded before result digests covered the stored form, whose stored
/// result was redacted: its digest (of the result before redaction) cannot be checked against
/// what is stored. Named by `audit verify` as old-format; never reported as tampering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OldFormat {
    /// The task.
    pub step: StepId,
    /// The `task.attempt.completed` entry.
    pub entry: u64,
}

/// The completed tasks whose log entry is old-format (see [`OldFormat`]).
#[must_use]
pub fn old_format(snapshot: &ExecutionSnapshot, entries: &[AuditEntry]) -> Vec<OldFormat> {
    let last = last_completed(entries);
    snapshot
        .task_values()
        .iter()
        .filter_map(|task| {
            let Task::Completed(done) = task else {
                return None;
            };
            let logged = last.get(done.step_id.as_str())?;
            unverifiable_old_digest(logged, &done.result).then(|| OldFormat {
                step: done.step_id.clone(),
                entry: logged.seq,
            })
        })
        .collect()
}

/// An old entry (no [`RESULT_DIGEST_OF`]) whose digest does not match a stored result that
/// redaction changed: the digest was taken before redaction.
fn unverifiable_old_digest(logged: &AuditEntry, stored: &TaskSuccess) -> bool {
    let old = logged.data.get(RESULT_DIGEST_OF).is_none();
    let recorded = logged
        .data
        .get(RESULT_DIGEST)
        .and_then(Value::as_str)
        .and_then(|d| d.parse::<Digest>().ok());
    old && recorded.is_some_and(|r| r != result_digest(stored)) && was_redacted(stored)
}

/// Each step's last completed attempt, in one pass (a search per task made the check of an
/// 800-task execution cost ~10 ms).
fn last_completed(entries: &[AuditEntry]) -> std::collections::HashMap<&str, &AuditEntry> {
    let mut last = std::collections::HashMap::new();
    for e in entries
        .iter()
        .filter(|e| e.kind == AuditKind::TaskAttemptCompleted)
    {
        if let Some(step) = e.data.get("step_id").and_then(Value::as_str) {
            last.insert(step, e);
        }
    }
    last
}

/// Which record a finding is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The execution header (its state file).
    Header,
    /// A task's state file.
    Task(StepId),
    /// The execution's audit log.
    Log,
}

/// One disagreement, located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The record at fault.
    pub place: Place,
    /// The log entry involved, if any.
    pub entry: Option<u64>,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.place {
            Place::Header => f.write_str("the execution header: ")?,
            Place::Task(step) => write!(f, "the state of task `{step}`: ")?,
            Place::Log => f.write_str("the audit log: ")?,
        }
        if let Some(e) = self.entry {
            write!(f, "entry {e}: ")?;
        }
        f.write_str(&self.problem)
    }
}

fn finding(place: Place, entry: Option<u64>, problem: impl Into<String>) -> Finding {
    Finding {
        place,
        entry,
        problem: problem.into(),
    }
}

/// A header and tasks that describe a state the state machine cannot reach.
#[must_use]
pub fn impossible_state(execution: &Execution, tasks: &[Task]) -> Option<Finding> {
    let stage = execution.stage();
    let first = |ok: fn(TaskStatus) -> bool| tasks.iter().find(|t| !ok(t.status()));
    let bad = match stage {
        ExecutionStage::Pending => first(|s| s == TaskStatus::Pending),
        ExecutionStage::Completed => first(|s| s == TaskStatus::Completed),
        ExecutionStage::Failed | ExecutionStage::Stopped => first(|s| s != TaskStatus::Running),
        _ => None,
    }?;
    Some(finding(
        Place::Header,
        None,
        format!(
            "the header says {stage} while task `{}` is {}: no run reaches this state",
            bad.step_id(),
            bad.status()
        ),
    ))
}

/// The state files checked against the log's entries.
#[must_use]
pub fn against_log(snapshot: &ExecutionSnapshot, entries: &[AuditEntry]) -> Vec<Finding> {
    let execution = &snapshot.execution.value;
    let info = execution.info();
    let mut out = Vec::new();
    let tasks = snapshot.task_values();
    if let Some(f) = impossible_state(execution, &tasks) {
        out.push(f);
    }
    let first = entries.first();
    let created = first.filter(|e| {
        e.kind == AuditKind::ExecutionCreated
            && e.data.get("plan_id").and_then(Value::as_str) == Some(&info.plan_id.to_string())
            && e.data.get("plan_digest").and_then(Value::as_str)
                == Some(&info.plan_digest.to_string())
    });
    // A crash between creating the execution and its first entry leaves a pending execution
    // with an empty log: nothing has happened yet, and the runner writes the entry first.
    let untouched = first.is_none()
        && execution.stage() == ExecutionStage::Pending
        && tasks.iter().all(|t| t.status() == TaskStatus::Pending);
    if created.is_none() && !untouched {
        out.push(finding(
            Place::Log,
            Some(0),
            if first.is_none() {
                "the log is empty, but the execution exists (it was truncated or deleted)"
                    .to_owned()
            } else {
                "the log does not begin with this execution's creation (it was truncated and restarted, or belongs to another execution)".to_owned()
            },
        ));
    }
    let last_completed = last_completed(entries);
    // A completed task never changes again: a completion the log records whose task is not
    // completed was rolled back behind orca's back (e.g. the task records of a file store's
    // write-ahead log cut), and running on would do that step's work twice.
    for task in &tasks {
        if task.status() != TaskStatus::Completed
            && let Some(logged) = last_completed.get(task.step_id().as_str())
        {
            out.push(finding(
                Place::Task(task.step_id().clone()),
                Some(logged.seq),
                format!(
                    "the log records its completion at entry {}, but its stored state is {} (rolled back)",
                    logged.seq,
                    task.status()
                ),
            ));
        }
    }
    for task in &tasks {
        let Task::Completed(done) = task else {
            continue;
        };
        let logged = last_completed.get(done.step_id.as_str()).copied();
        let Some(logged) = logged else {
            out.push(finding(
                Place::Task(done.step_id.clone()),
                None,
                "completed in its stored state (state file or database row), but the log records no completed attempt",
            ));
            continue;
        };
        let recorded = logged
            .data
            .get(RESULT_DIGEST)
            .and_then(Value::as_str)
            .and_then(|d| d.parse::<Digest>().ok());
        // A digest recorded before digests covered the stored form cannot be checked against
        // a result redaction changed: `old_format` names it, it is not tampering.
        if let Some(recorded) = recorded
            && recorded != result_digest(&done.result)
            && !unverifiable_old_digest(logged, &done.result)
        {
            out.push(finding(
                Place::Task(done.step_id.clone()),
                Some(logged.seq),
                format!(
                    "its result is not the one the log recorded at entry {} (its state file or database row was changed)",
                    logged.seq
                ),
            ));
        }
    }
    out
}

/// Reads an execution and its log and checks them against each other.
///
/// # Errors
///
/// Store failures (an unreadable file is an error naming it).
pub async fn check_execution(store: &dyn Store, id: ExecutionId) -> Result<Vec<Finding>> {
    let mut snapshot = store.execution(id).await?;
    let info = snapshot.execution.value.info();
    let log = ExecutionService::log(info.plan_id, info.id);
    // A log whose entries do not verify (an unparseable line included) is the first finding.
    // Who signed its seal is `audit verify`'s question (a reader may not hold the key).
    if let orca_store::VerifyReport::Tampered { seq, problem } = store.verify(log).await?
        && !problem.starts_with("seal:")
    {
        return Ok(vec![finding(Place::Log, Some(seq), problem)]);
    }
    // The records and the log are two reads: a run writing meanwhile (another process, a
    // worker on a shared store) can put a task's completion in the log after its record was
    // read, which would read as a completion rolled back. A finding counts only if the
    // records read again after the log are the ones checked; otherwise the check is made
    // again on the newer records (a few times: a rollback behind orca's back stays put).
    let mut findings = Vec::new();
    for _ in 0..RECHECKS {
        let entries = store.entries(log).await?;
        findings = against_log(&snapshot, &entries);
        if findings.is_empty() {
            return Ok(findings);
        }
        let again = store.execution(id).await?;
        if same_records(&again, &snapshot) {
            return Ok(findings);
        }
        snapshot = again;
    }
    Ok(findings)
}

/// How many times an execution's check is made again on records that changed while it read.
const RECHECKS: usize = 5;

/// Whether two reads of an execution's records found the same revisions.
fn same_records(a: &orca_store::ExecutionSnapshot, b: &orca_store::ExecutionSnapshot) -> bool {
    a.execution.revision == b.execution.revision
        && a.tasks.len() == b.tasks.len()
        && a.tasks
            .iter()
            .zip(&b.tasks)
            .all(|(x, y)| x.revision == y.revision)
}
