//! One durable write is ONE call of `orca_write` (migration 0002): a task transition
//! (compare-and-swap on its revision), an audit entry (appended after the head it was hashed
//! from), or both (ADR 0026). This module prepares a call's parameters and reads its answer;
//! writes that touch an audit log go through that log's queue (`group`, group commit), a
//! transition alone is one statement and one commit here.

use orca_core::{ExecutionId, ExecutionStage, Task};
use orca_store::audit::AuditEntry;
use orca_store::common;
use orca_store::{AuditLogId, Revision, StoreError};
use tokio_postgres::types::ToSql;

use crate::codec::{self, corrupt, db_revision, encode, encode_redacted, tag};
use crate::pool::Conn;
use crate::{PgStore, db};

pub(crate) const WRITE: &str = "SELECT orca_write($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
                                $12, $13, $14, $15, $16)";
/// An optimistic append (`group`): refused as `staged` while the log has staged entries not
/// yet chained, so an append never goes before them — a writer whose chaining failed (a cut
/// connection) and that wrote again must find its earlier entry first (ADR 0055).
pub(crate) const APPEND: &str = "SELECT CASE WHEN EXISTS \
     (SELECT 1 FROM audit_staged WHERE log_key = $12) THEN 'staged' ELSE orca_write($1, $2, $3, \
     $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) END";
const HEAD: &str =
    "SELECT seq, line FROM audit_entries WHERE log_key = $1 ORDER BY seq DESC LIMIT 1";

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

/// The entry part of a call: the log, the head it was hashed after, and the new line.
pub(crate) struct EntryPart<'a> {
    pub(crate) key: &'a str,
    pub(crate) prev_seq: Option<i64>,
    pub(crate) prev_line: Option<&'a str>,
    pub(crate) seq: i64,
    pub(crate) line: &'a str,
}

/// The 16 parameters of one `orca_write` call, owned.
pub(crate) struct Params {
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
    log: Option<String>,
    prev_seq: Option<i64>,
    prev_line: Option<String>,
    seq: Option<i64>,
    line: Option<String>,
}

impl Params {
    pub(crate) fn new(
        store: &PgStore,
        task: Option<&Prepared>,
        entry: Option<EntryPart<'_>>,
    ) -> Self {
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
            log: entry.as_ref().map(|e| e.key.to_owned()),
            prev_seq: entry.as_ref().and_then(|e| e.prev_seq),
            prev_line: entry.as_ref().and_then(|e| e.prev_line.map(str::to_owned)),
            seq: entry.as_ref().map(|e| e.seq),
            line: entry.as_ref().map(|e| e.line.to_owned()),
        }
    }

    pub(crate) fn refs(&self) -> [&(dyn ToSql + Sync); 16] {
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
            &self.log,
            &self.prev_seq,
            &self.prev_line,
            &self.seq,
            &self.line,
        ]
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

/// The head of a log as stored: its last entry and that entry's exact line.
pub(crate) async fn head(
    conn: &mut Conn<'_>,
    log: AuditLogId,
    key: &str,
) -> Result<Option<(AuditEntry, String)>, StoreError> {
    let stmt = conn
        .prepared(HEAD)
        .await
        .map_err(db(format!("reading the head of the {log}")))?;
    let row = conn
        .query_opt(&stmt, &[&key])
        .await
        .map_err(db(format!("reading the head of the {log}")))?;
    row.map(|r| {
        let line: String = r.get(1);
        parse_entry(key, r.get(0), &line).map(|e| (e, line))
    })
    .transpose()
}

/// Writes a task transition alone: one statement, one commit. Returns its new revision.
pub(crate) async fn write_task(store: &PgStore, task: &Prepared) -> Result<Revision, StoreError> {
    let mut conn = store.conn().await?;
    let stmt = conn
        .prepared(WRITE)
        .await
        .map_err(db("preparing a write"))?;
    let params = Params::new(store, Some(task), None);
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
