//! One durable write is ONE call: a task transition alone (`orca_write`, migration 0002:
//! compare-and-swap on its revision) here, one statement and one commit; a transition with its
//! audit entry, or an entry alone, through that log's queue (`group`, group commit; the entry
//! chained by the database, `chained`). This module prepares a transition's parameters and
//! reads the answers' refusals.

use orca_core::{ExecutionId, ExecutionStage, Task};
use orca_store::audit::AuditEntry;
use orca_store::common;
use orca_store::{Revision, StoreError};
use tokio_postgres::types::ToSql;

use crate::codec::{self, corrupt, db_revision, encode, encode_redacted, tag};
use crate::{PgStore, db};

pub(crate) const WRITE: &str = "SELECT orca_write($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
                                $12, $13, $14, $15, $16)";
/// A task transition ready to write: its document encoded (redacted) and its next revision.
pub(crate) struct Prepared {
    pub(crate) execution: ExecutionId,
    step: String,
    what: String,
    expected: Revision,
    pub(crate) next: Revision,
    status: String,
    doc: String,
    /// A claim (to running) skips a row another claim holds: it is theirs.
    skip: bool,
    /// The lease of a claim: its token and holder.
    lease: Option<(String, String)>,
}

impl Prepared {
    pub(crate) fn new(
        store: &PgStore,
        execution: ExecutionId,
        task: &Task,
        expected: Revision,
    ) -> Result<Self, StoreError> {
        let what = common::task_what(execution, task);
        let next = common::next_revision(&what, expected)?;
        let doc = encode_redacted(task, &what, &store.inner.redactor)?;
        let lease = match task {
            Task::Running(r) => Some((r.holder.token.clone(), encode(&r.holder, "a task holder")?)),
            _ => None,
        };
        Ok(Self {
            execution,
            step: task.step_id().to_string(),
            what,
            expected,
            next,
            status: tag(&task.status()),
            doc,
            skip: matches!(task, Task::Running(_)),
            lease,
        })
    }
}

/// The transition's 11 parameters of an `orca_write` (or `orca_write_chained`) call, owned
/// (all null for an entry alone).
pub(crate) struct TaskParams {
    exec: Option<String>,
    step: Option<String>,
    expected: Option<i64>,
    next: Option<i64>,
    status: Option<String>,
    doc: Option<String>,
    stages: Vec<String>,
    skip: bool,
    token: Option<String>,
    holder: Option<String>,
    lease_secs: f64,
}

impl TaskParams {
    pub(crate) fn new(store: &PgStore, task: Option<&Prepared>) -> Self {
        Self {
            exec: task.map(|t| t.execution.to_string()),
            step: task.map(|t| t.step.clone()),
            expected: task.map(|t| db_revision(t.expected)),
            next: task.map(|t| db_revision(t.next)),
            status: task.map(|t| t.status.clone()),
            doc: task.map(|t| t.doc.clone()),
            stages: open_stages(),
            skip: task.is_some_and(|t| t.skip),
            token: task.and_then(|t| t.lease.as_ref().map(|(tok, _)| tok.clone())),
            holder: task.and_then(|t| t.lease.as_ref().map(|(_, h)| h.clone())),
            lease_secs: store.inner.task_lease.as_secs_f64(),
        }
    }

    pub(crate) fn refs(&self) -> [&(dyn ToSql + Sync); 11] {
        [
            &self.exec,
            &self.step,
            &self.expected,
            &self.next,
            &self.status,
            &self.doc,
            &self.stages,
            &self.skip,
            &self.token,
            &self.holder,
            &self.lease_secs,
        ]
    }
}

/// The 16 parameters of one `orca_write` call of a transition alone (its entry's five null),
/// owned.
pub(crate) struct Params {
    task: TaskParams,
    none: Option<String>,
    none_seq: Option<i64>,
}

impl Params {
    pub(crate) fn new(store: &PgStore, task: Option<&Prepared>) -> Self {
        Self {
            task: TaskParams::new(store, task),
            none: None,
            none_seq: None,
        }
    }

    pub(crate) fn refs(&self) -> [&(dyn ToSql + Sync); 16] {
        let [a, b, c, d, e, f, g, h, i, j, k] = self.task.refs();
        let (text, seq) = (&self.none, &self.none_seq);
        [a, b, c, d, e, f, g, h, i, j, k, text, seq, text, seq, text]
    }
}

pub(crate) fn parse_entry(key: &str, seq: i64, line: &str) -> Result<AuditEntry, StoreError> {
    serde_json::from_str(line).map_err(|e| {
        corrupt(
            "audit_entries",
            &format!("{key} #{seq}"),
            format!("not an audit entry: {e}"),
        )
    })
}

/// The stages in which a task may change (the same rule as `common::check_task_update`).
fn open_stages() -> Vec<String> {
    [
        ExecutionStage::Pending,
        ExecutionStage::Running,
        ExecutionStage::Completed,
        ExecutionStage::Failed,
        ExecutionStage::Stopped,
    ]
    .into_iter()
    .filter(|s| !s.is_terminal())
    .map(|s| tag(&s))
    .collect()
}

/// Writes a task transition alone: one statement, one commit. Returns its new revision.
pub(crate) async fn write_task(store: &PgStore, task: &Prepared) -> Result<Revision, StoreError> {
    let mut conn = store.conn().await?;
    let stmt = conn
        .prepared(WRITE)
        .await
        .map_err(db("preparing a write"))?;
    let params = Params::new(store, Some(task));
    let row = conn
        .query_one(&stmt, &params.refs())
        .await
        .map_err(|e| StoreError::backend("writing to the postgres store", e))?;
    let answer: String = row.get(0);
    if answer == "ok" {
        Ok(task.next)
    } else {
        Err(refused(Some(task), &answer))
    }
}

/// The error of a write the statement refused.
pub(crate) fn refused(task: Option<&Prepared>, answer: &str) -> StoreError {
    let Some(t) = task else {
        return StoreError::backend("writing to the postgres store", answer.to_owned());
    };
    let key = t.execution.to_string();
    match answer.split_once(':') {
        Some(("conflict", found)) => match found.parse::<i64>() {
            Ok(n) => match codec::revision_of("tasks", &key, n) {
                Ok(found) => common::conflict(t.what.clone(), t.expected, found),
                Err(e) => e,
            },
            Err(_) => corrupt("tasks", &key, format!("bad revision {found:?}")),
        },
        Some(("missing", "execution")) => StoreError::NotFound {
            what: common::exec_what(t.execution),
        },
        Some(("missing", _)) => StoreError::NotFound {
            what: t.what.clone(),
        },
        Some(("stage", stage)) => StoreError::Immutable(format!(
            "execution {} is {stage}: task {} cannot change",
            t.execution, t.step
        )),
        // Another worker's claim of this task is committing right now.
        _ if answer == "busy" => StoreError::Conflict {
            what: t.what.clone(),
            expected: t.expected,
            found: t.expected,
        },
        _ => StoreError::backend("writing to the postgres store", answer.to_owned()),
    }
}
