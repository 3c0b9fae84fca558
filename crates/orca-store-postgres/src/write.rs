//! Every task transition and audit append is ONE statement (`orca_write`, migration 0002):
//! one round trip and one commit, prepared once per connection (ADR 0026). A transition and
//! its audit entry can go together in that one transaction.
//!
//! An entry is hashed here, after the chain head this store last saw of its log (kept per log
//! in [`Heads`]); the statement checks that head is still the log's head and refuses
//! otherwise, so the head is re-read and the entry hashed again. Two writers appending after
//! the same head race on the entries' primary key: the loser writes nothing and tries again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use orca_core::{ExecutionId, ExecutionStage, Task};
use orca_store::audit::{self, AuditEntry, NewAuditEntry};
use orca_store::common;
use orca_store::{AuditLogId, Revision, StoreError};
use time::OffsetDateTime;
use tokio_postgres::error::SqlState;

use crate::codec::{self, corrupt, db_revision, encode, encode_redacted, log_key, tag};
use crate::pool::Conn;
use crate::{PgStore, db};

const WRITE: &str = "SELECT orca_write($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
                     $14, $15, $16)";
const HEAD: &str =
    "SELECT seq, line FROM audit_entries WHERE log_key = $1 ORDER BY seq DESC LIMIT 1";
const NEW_LOG: &str =
    "INSERT INTO audit_logs (log_key, log_id) VALUES ($1, $2) ON CONFLICT DO NOTHING";

/// How often a write is tried again when its log moved on meanwhile (other writers).
const ATTEMPTS: usize = 200;
/// Logs whose head is remembered (an unbounded worker sees many executions).
const HEADS_KEPT: usize = 4096;

/// What this store knows of a log's head: `None` unknown (read it), `Some(None)` empty.
type Known = Option<Option<(AuditEntry, String)>>;

/// Per log: the last entry this store saw, with its exact stored line, behind an async lock
/// that this store's writers of that log take in turn (so writers in one process never race
/// each other for the head: only other processes can move it).
#[derive(Debug, Default)]
pub(crate) struct Heads {
    by_log: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Known>>>>,
}

impl Heads {
    fn slot(&self, key: &str) -> Arc<tokio::sync::Mutex<Known>> {
        let mut map = self.by_log.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= HEADS_KEPT && !map.contains_key(key) {
            map.clear();
        }
        Arc::clone(map.entry(key.to_owned()).or_default())
    }
}

/// A task transition to write (compare-and-swap on `expected`).
pub(crate) struct TaskWrite<'a> {
    pub(crate) execution: ExecutionId,
    pub(crate) task: &'a Task,
    pub(crate) expected: Revision,
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

async fn head(
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

/// Writes a task transition, an audit entry, or both in one transaction. Returns the task's
/// new revision (if one was written) and the entry (if one was appended).
pub(crate) async fn write(
    store: &PgStore,
    task: Option<TaskWrite<'_>>,
    log: Option<(AuditLogId, NewAuditEntry)>,
) -> Result<(Option<Revision>, Option<AuditEntry>), StoreError> {
    // The task part, fixed across attempts.
    let task_part = match &task {
        Some(t) => {
            let what = common::task_what(t.execution, t.task);
            let next = common::next_revision(&what, t.expected)?;
            let doc = encode_redacted(t.task, &what, &store.inner.redactor)?;
            let lease = match t.task {
                Task::Running(r) => {
                    Some((r.holder.token.clone(), encode(&r.holder, "a task holder")?))
                }
                _ => None,
            };
            Some((t, what, next, doc, lease))
        }
        None => None,
    };
    let log = log.map(|(id, entry)| {
        let entry = NewAuditEntry {
            data: store.inner.redactor.redact_json(entry.data),
            ..entry
        };
        (id, log_key(id), entry)
    });
    let stages = open_stages();
    let lease_secs = store.inner.task_lease.as_secs_f64();
    // This process's writers of one log go one at a time (see `Heads`).
    let slot = log.as_ref().map(|(_, key, _)| store.inner.heads.slot(key));
    let mut known = match &slot {
        Some(s) => Some(s.lock().await),
        None => None,
    };
    let mut conn = store.conn().await?;
    let stmt = conn
        .prepared(WRITE)
        .await
        .map_err(db("preparing a write"))?;
    for _ in 0..ATTEMPTS {
        // The entry, hashed after the head we know of its log.
        let mut appended = None;
        if let (Some((id, key, entry)), Some(known)) = (&log, known.as_deref_mut()) {
            let known = match known {
                Some(h) => h.clone(),
                None => {
                    let h = head(&mut conn, *id, key).await?;
                    *known = Some(h.clone());
                    h
                }
            };
            let next = audit::next_entry(
                known.as_ref().map(|(e, _)| e),
                entry.clone(),
                OffsetDateTime::now_utc(),
            );
            let line = encode(&next, &format!("an entry of the {id}"))?;
            let seq = i64::try_from(next.seq)
                .map_err(|_| StoreError::Invalid(format!("the {id} is full")))?;
            let prev_seq = known.as_ref().and_then(|(e, _)| i64::try_from(e.seq).ok());
            let prev_line = known.map(|(_, l)| l);
            appended = Some((next, line, seq, prev_seq, prev_line));
        }
        let (exec, step, expected, next, status, doc, skip, token, holder) = match &task_part {
            Some((t, _, next, doc, lease)) => (
                Some(t.execution.to_string()),
                Some(t.task.step_id().to_string()),
                Some(db_revision(t.expected)),
                Some(db_revision(*next)),
                Some(tag(&t.task.status())),
                Some(doc.as_str()),
                // A claim (to running) skips a row another claim holds: it is theirs.
                matches!(t.task, Task::Running(_)),
                lease.as_ref().map(|(tok, _)| tok.as_str()),
                lease.as_ref().map(|(_, h)| h.as_str()),
            ),
            None => (None, None, None, None, None, None, false, None, None),
        };
        let (log_key, prev_seq, prev_line, seq, line) = match (&log, &appended) {
            (Some((_, key, _)), Some((_, line, seq, prev_seq, prev_line))) => (
                Some(key.as_str()),
                *prev_seq,
                prev_line.as_deref(),
                Some(*seq),
                Some(line.as_str()),
            ),
            _ => (None, None, None, None, None),
        };
        let result = conn
            .query_one(
                &stmt,
                &[
                    &exec,
                    &step,
                    &expected,
                    &next,
                    &status,
                    &doc,
                    &stages,
                    &skip,
                    &token,
                    &holder,
                    &lease_secs,
                    &log_key,
                    &prev_seq,
                    &prev_line,
                    &seq,
                    &line,
                ],
            )
            .await;
        let answer: String = match result {
            Ok(row) => row.get(0),
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                // Another process appended after the same head first: nothing of ours was
                // written. Read the head again.
                forget(known.as_deref_mut());
                continue;
            }
            Err(e) => {
                // The write may or may not have happened (a cut connection): re-read.
                forget(known.as_deref_mut());
                return Err(StoreError::backend("writing to the postgres store", e));
            }
        };
        match answer.as_str() {
            "ok" => {
                let entry = match (known.as_deref_mut(), appended) {
                    (Some(known), Some((entry, line, ..))) => {
                        *known = Some(Some((entry.clone(), line)));
                        Some(entry)
                    }
                    _ => None,
                };
                return Ok((task_part.map(|(_, _, next, ..)| next), entry));
            }
            head if head.starts_with("head:") => {
                // The log moved on (another process appended): its head came back with the
                // refusal.
                let now = match head.split_once(':').map(|(_, rest)| rest) {
                    Some("") => Some(None),
                    Some(rest) => rest.split_once(':').and_then(|(seq, line)| {
                        let seq: i64 = seq.parse().ok()?;
                        let key = log.as_ref().map_or("", |(_, k, _)| k.as_str());
                        parse_entry(key, seq, line)
                            .ok()
                            .map(|e| Some((e, line.to_owned())))
                    }),
                    None => None,
                };
                if let Some(k) = known.as_deref_mut() {
                    *k = now;
                }
            }
            "no_log" => {
                if let Some((id, key, _)) = &log {
                    let log_id = encode(id, &id.to_string())?;
                    let new_log = conn
                        .prepared(NEW_LOG)
                        .await
                        .map_err(db(format!("creating the {id}")))?;
                    conn.execute(&new_log, &[key, &log_id])
                        .await
                        .map_err(db(format!("creating the {id}")))?;
                    forget(known.as_deref_mut());
                }
            }
            "sealed" => {
                let id = log
                    .as_ref()
                    .map_or_else(String::new, |(id, ..)| id.to_string());
                return Err(StoreError::Immutable(format!("the {id} is sealed")));
            }
            other => return Err(refused(&task_part, other)),
        }
    }
    Err(StoreError::backend(
        "writing to the postgres store",
        format!("the audit log kept moving on: gave up after {ATTEMPTS} attempts"),
    ))
}

fn forget(known: Option<&mut Known>) {
    if let Some(k) = known {
        *k = None;
    }
}

type TaskPart<'a, 'b> = Option<(
    &'a TaskWrite<'b>,
    String,
    Revision,
    String,
    Option<(String, String)>,
)>;

/// The error of a task write the statement refused.
fn refused(task: &TaskPart<'_, '_>, answer: &str) -> StoreError {
    let Some((t, what, ..)) = task else {
        return StoreError::backend("writing to the postgres store", answer.to_owned());
    };
    let key = t.execution.to_string();
    match answer.split_once(':') {
        Some(("conflict", found)) => match found.parse::<i64>() {
            Ok(n) => match codec::revision_of("tasks", &key, n) {
                Ok(found) => common::conflict(what.clone(), t.expected, found),
                Err(e) => e,
            },
            Err(_) => corrupt("tasks", &key, format!("bad revision {found:?}")),
        },
        Some(("missing", "execution")) => StoreError::NotFound {
            what: common::exec_what(t.execution),
        },
        Some(("missing", _)) => StoreError::NotFound { what: what.clone() },
        Some(("stage", stage)) => StoreError::Immutable(format!(
            "execution {} is {stage}: task {} cannot change",
            t.execution,
            t.task.step_id()
        )),
        // Another worker's claim of this task is committing right now.
        _ if answer == "busy" => StoreError::Conflict {
            what: what.clone(),
            expected: t.expected,
            found: t.expected,
        },
        _ => StoreError::backend("writing to the postgres store", answer.to_owned()),
    }
}
