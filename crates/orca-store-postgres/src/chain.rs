//! Staged audit entries, chained in batches (migration 0004, ADR 0055).
//!
//! A writer of a log that lost the race for its head (another process appended after the head
//! it hashed from) does not hash again and race again: it STAGES its entries — each with its
//! task transition, in one `orca_stage` call that checks the transition like `orca_write` and
//! cannot lose to another writer — and commits. Then it CHAINS: under the log's transaction
//! advisory lock (one chainer per log at a time), it reads the head and every entry staged so
//! far, hashes them after the head in staging order, inserts them (each remembering its staged
//! row) and deletes them from the stage, in one transaction and one commit. A writer whose
//! entries another chainer took reads them back by their staged ids. So N writers of one log
//! cost N commits of their own (which PostgreSQL groups, as they do not wait on each other)
//! and a few chaining commits, not N² lost rounds.
//!
//! Since ADR 0060 a store stages only when told to (or when its database hashes differently
//! from orca); entries chained by the database (`chained`) go on beside this: a chain insert
//! that collides with one on the entries' key rolls back and is done again after reading the
//! new head; a chainer that keeps colliding locks the log's row (appends wait) for its next
//! try. A seal
//! takes the same advisory lock and chains what is staged before sealing (`audit`).

use std::collections::HashMap;

use orca_store::audit::{self, AuditEntry, NewAuditEntry};
use orca_store::{AuditLogId, StoreError};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use crate::PgStore;
use crate::codec::{corrupt, encode};
use crate::group::{Item, Refused};
use crate::pool::Conn;
use crate::write::{Params, Prepared, parse_entry, refused};

/// One staging: a transition (optional) and its entry, not yet hashed.
pub(crate) const STAGE: &str = "SELECT orca_stage($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
                                 $12, $13)";
/// One chainer per log: the advisory lock of the log's key, for the transaction.
pub(crate) const LOCK: &str = "SELECT pg_advisory_xact_lock($1, $2)";
/// Every entry staged for a log, in staging order.
pub(crate) const STAGED: &str = "SELECT id, entry FROM audit_staged WHERE log_key = $1 ORDER BY id";
const HEAD: &str =
    "SELECT seq, line FROM audit_entries WHERE log_key = $1 ORDER BY seq DESC LIMIT 1";
/// Entries chained from the given staged rows.
const CHAINED: &str = "SELECT staged_id, seq, line FROM audit_entries \
     WHERE log_key = $1 AND staged_id = ANY($2::int8[])";
/// The log's row, locked: appends (`FOR SHARE`) wait until this transaction ends.
const LOCK_ROW: &str = "SELECT 1 FROM audit_logs WHERE log_key = $1 FOR UPDATE";
pub(crate) const INSERT: &str = "INSERT INTO audit_entries (log_key, seq, line, staged_id) \
     SELECT $1, s, l, i FROM unnest($2::int8[], $3::text[], $4::int8[]) AS t(s, l, i)";
pub(crate) const UNSTAGE: &str = "DELETE FROM audit_staged WHERE id = ANY($1::int8[])";

/// The advisory lock's first key: "orca" (the two-key form never meets the one-key locks of
/// leases and resources).
const LOCK_CLASS: i32 = 0x6f72_6361;
/// Chain attempts that collide with appends before the log's row is locked.
const COLLISIONS_BEFORE_LOCK: usize = 3;
/// A bound against a loop that never ends (a locked chain cannot collide).
const CHAIN_ATTEMPTS: usize = 1000;

/// A staged entry as stored: the entry and the time it was written.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Staged {
    #[serde(with = "time::serde::rfc3339")]
    at: OffsetDateTime,
    entry: NewAuditEntry,
}

/// The parameters of one `orca_stage` call, owned.
pub(crate) struct StageParams {
    task: Params,
    log: String,
    entry: String,
}

impl StageParams {
    /// The call staging `entry` (redacted here) after `task`'s transition.
    pub(crate) fn new(
        store: &PgStore,
        log: AuditLogId,
        key: &str,
        task: Option<&Prepared>,
        entry: &NewAuditEntry,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            task: Params::new(store, task),
            log: key.to_owned(),
            entry: staged_text(store, log, entry)?,
        })
    }

    pub(crate) fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        let mut refs: Vec<&(dyn ToSql + Sync)> = self.task.refs()[..11].to_vec();
        refs.push(&self.log);
        refs.push(&self.entry);
        refs
    }
}

/// `entry` (redacted here) as a staged row holds it, stamped now.
pub(crate) fn staged_text(
    store: &PgStore,
    log: AuditLogId,
    entry: &NewAuditEntry,
) -> Result<String, StoreError> {
    let staged = Staged {
        at: OffsetDateTime::now_utc(),
        entry: NewAuditEntry {
            data: store.inner.redactor.redact_json(entry.data.clone()),
            ..entry.clone()
        },
    };
    encode(&staged, &format!("an entry of the {log}"))
}

/// The `(id, entry)` of each staged row read by [`STAGED`].
pub(crate) fn staged_rows(
    rows: &[tokio_postgres::Row],
    log: AuditLogId,
) -> Result<Vec<(i64, String)>, StoreError> {
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<Vec<(i64, String)>, tokio_postgres::Error>>()
        .map_err(crate::db(format!(
            "reading the staged entries of the {log}"
        )))
}

/// The advisory lock keys of a log.
pub(crate) fn lock_keys(key: &str) -> (i32, i32) {
    use sha2::Digest as _;
    let d = sha2::Sha256::digest(key.as_bytes());
    (LOCK_CLASS, i32::from_be_bytes([d[0], d[1], d[2], d[3]]))
}

/// The staged id of an answer `ok:<id>`.
pub(crate) fn staged_id(answer: &str) -> Option<i64> {
    answer.strip_prefix("ok:").and_then(|id| id.parse().ok())
}

/// Hashes `staged` rows (`id`, text) after `head`, in order: each chained entry, its line and
/// its staged id.
pub(crate) fn hash_after(
    log: AuditLogId,
    key: &str,
    head: Option<&AuditEntry>,
    staged: &[(i64, String)],
) -> Result<Vec<(AuditEntry, String, i64)>, StoreError> {
    let mut prev = head.cloned();
    let mut out = Vec::with_capacity(staged.len());
    for (id, text) in staged {
        let s: Staged = serde_json::from_str(text).map_err(|e| {
            corrupt(
                "audit_staged",
                &format!("{key} #{id}"),
                format!("not a staged entry: {e}"),
            )
        })?;
        let next = audit::next_entry(prev.as_ref(), s.entry, s.at);
        let line = encode(&next, &format!("an entry of the {log}"))?;
        prev = Some(next.clone());
        out.push((next, line, *id));
    }
    Ok(out)
}

/// The columns of an insert of chained entries: sequence numbers, lines, staged ids.
pub(crate) type Columns = (Vec<i64>, Vec<String>, Vec<i64>);

/// The columns of an insert of `chained` entries.
pub(crate) fn insert_columns(
    log: AuditLogId,
    chained: &[(AuditEntry, String, i64)],
) -> Result<Columns, StoreError> {
    let mut seqs = Vec::with_capacity(chained.len());
    for (e, _, _) in chained {
        seqs.push(
            i64::try_from(e.seq)
                .map_err(|_| StoreError::backend("appending", format!("the {log} is full")))?,
        );
    }
    Ok((
        seqs,
        chained.iter().map(|(_, l, _)| l.clone()).collect(),
        chained.iter().map(|(_, _, i)| *i).collect(),
    ))
}

/// What a chaining found: the entries of `own` staged ids.
pub(crate) struct Chained {
    pub(crate) own: HashMap<i64, AuditEntry>,
}

/// Chains everything staged for `log` (see the module), and returns the entries of the `own`
/// staged ids, whoever chained them.
pub(crate) async fn chain(
    conn: &mut Conn<'_>,
    log: AuditLogId,
    key: &str,
    own: &[i64],
) -> Result<Chained, StoreError> {
    let (class, id) = lock_keys(key);
    let own_ids: Vec<i64> = own.to_vec();
    let context = format!("chaining the staged entries of the {log}");
    let failed = |e: tokio_postgres::Error| StoreError::backend(context.clone(), describe(&e));
    let mut statements = Vec::with_capacity(7);
    for sql in [LOCK, LOCK_ROW, HEAD, STAGED, CHAINED, INSERT, UNSTAGE] {
        statements.push(conn.prepared(sql).await.map_err(failed)?);
    }
    let [
        lock,
        lock_row,
        head_stmt,
        staged_stmt,
        chained_stmt,
        insert,
        unstage,
    ] = &statements[..]
    else {
        return Err(StoreError::backend(context, "statements missing"));
    };
    let mut collisions = 0;
    for _ in 0..CHAIN_ATTEMPTS {
        let tx = conn.transaction().await.map_err(failed)?;
        tx.execute(lock, &[&class, &id]).await.map_err(failed)?;
        if collisions >= COLLISIONS_BEFORE_LOCK {
            tx.execute(lock_row, &[&key]).await.map_err(failed)?;
        }
        // After the lock: these statements' snapshots see every chaining committed before.
        let (head, staged, chained) = futures_util::future::join3(
            tx.query_opt(head_stmt, &[&key]),
            tx.query(staged_stmt, &[&key]),
            tx.query(chained_stmt, &[&key, &own_ids]),
        )
        .await;
        let head = head
            .map_err(failed)?
            .map(|r| -> Result<_, StoreError> {
                let line: String = r.try_get(1).map_err(failed)?;
                let e = parse_entry(key, r.try_get(0).map_err(failed)?, &line)?;
                Ok((e, line))
            })
            .transpose()?;
        let staged = staged
            .map_err(failed)?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<Vec<(i64, String)>, tokio_postgres::Error>>()
            .map_err(failed)?;
        let mut found = HashMap::new();
        for r in chained.map_err(failed)? {
            let staged_id: i64 = r.try_get(0).map_err(failed)?;
            let line: String = r.try_get(2).map_err(failed)?;
            found.insert(
                staged_id,
                parse_entry(key, r.try_get(1).map_err(failed)?, &line)?,
            );
        }
        if staged.is_empty() {
            // Nothing to write: every entry of ours was chained by someone else.
            tx.rollback().await.map_err(failed)?;
            return finish(log, own, found);
        }
        let hashed = hash_after(log, key, head.as_ref().map(|(e, _)| e), &staged)?;
        let (seqs, lines, ids) = insert_columns(log, &hashed)?;
        let (inserted, unstaged) = futures_util::future::join(
            tx.execute(insert, &[&key, &seqs, &lines, &ids]),
            tx.execute(unstage, &[&ids]),
        )
        .await;
        match inserted.and(unstaged) {
            Ok(_) => {}
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                // An append took the next number first: again, after it.
                collisions += 1;
                continue;
            }
            Err(e) => return Err(failed(e)),
        }
        tx.commit().await.map_err(failed)?;
        for (entry, _, staged_id) in hashed {
            found.insert(staged_id, entry);
        }
        return finish(log, own, found);
    }
    Err(StoreError::backend(
        context,
        format!("gave up after {CHAIN_ATTEMPTS} attempts"),
    ))
}

fn finish(
    log: AuditLogId,
    own: &[i64],
    mut found: HashMap<i64, AuditEntry>,
) -> Result<Chained, StoreError> {
    let mut mine = HashMap::with_capacity(own.len());
    for id in own {
        let entry = found.remove(id).ok_or_else(|| {
            corrupt(
                "audit_staged",
                &log.to_string(),
                format!("staged entry {id} is neither staged nor chained"),
            )
        })?;
        mine.insert(*id, entry);
    }
    Ok(Chained { own: mine })
}

/// The error with its causes (the driver's own message is only "db error").
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

/// Chains what a crashed writer staged and never chained, if anything is staged for `log`:
/// readers of a log see every entry written.
pub(crate) async fn chain_leftovers(
    store: &PgStore,
    log: AuditLogId,
    key: &str,
) -> Result<(), StoreError> {
    let mut conn = store.conn().await?;
    let rows = conn
        .query_prepared(
            "SELECT EXISTS (SELECT 1 FROM audit_staged WHERE log_key = $1)",
            &[&key],
        )
        .await
        .map_err(|e| StoreError::backend(format!("reading the {log}"), describe(&e)))?;
    let any = rows
        .first()
        .and_then(|r| r.try_get::<_, bool>(0).ok())
        .unwrap_or(false);
    if any {
        chain(&mut conn, log, key, &[]).await?;
    }
    Ok(())
}

/// Stages every item of `requests` (each all or nothing; a request with a refused item stages
/// nothing) in one transaction: each request's staged ids, or the item refused and why.
pub(crate) async fn stage(
    conn: &mut Conn<'_>,
    store: &PgStore,
    log: AuditLogId,
    key: &str,
    requests: &[&[Item]],
) -> Result<Vec<Result<Vec<i64>, Refused>>, StoreError> {
    let context = format!("staging entries of the {log}");
    let failed = |e: tokio_postgres::Error| StoreError::backend(context.clone(), describe(&e));
    let stmt = conn.prepared(STAGE).await.map_err(failed)?;
    let mut refused: Vec<Option<Refused>> = requests.iter().map(|_| None).collect();
    for _ in 0..CHAIN_ATTEMPTS {
        let mut calls = Vec::new();
        for (r, items) in requests.iter().enumerate() {
            if refused[r].is_some() {
                continue;
            }
            for (i, item) in items.iter().enumerate() {
                let params = StageParams::new(store, log, key, item.task.as_ref(), &item.entry)?;
                calls.push((r, i, params));
            }
        }
        let tx = conn.transaction().await.map_err(failed)?;
        let refs: Vec<Vec<&(dyn ToSql + Sync)>> = calls.iter().map(|(_, _, p)| p.refs()).collect();
        // Sent together (the client pipelines requests polled together), answered in order.
        let results =
            futures_util::future::join_all(refs.iter().map(|p| tx.query_one(&stmt, &p[..]))).await;
        let mut answers = Vec::with_capacity(results.len());
        let mut again = false;
        for r in results {
            match r.and_then(|row| row.try_get::<_, String>(0)) {
                Ok(a) => answers.push(a),
                // The transaction is aborted (dropping it rolls it back): the calls after this
                // one only answer "current transaction is aborted". The first error says why.
                Err(e) if retryable(&e) => {
                    again = true;
                    break;
                }
                Err(e) => return Err(failed(e)),
            }
        }
        if again {
            continue;
        }
        let (mut no_log, mut undo) = (false, false);
        for ((r, i, _), answer) in calls.iter().zip(&answers) {
            if staged_id(answer).is_some() {
                continue;
            }
            if answer == "no_log" {
                no_log = true;
            } else if refused[*r].is_none() {
                let task = requests[*r].get(*i).and_then(|item| item.task.as_ref());
                refused[*r] = Some((*i, refusal(log, task, answer)));
                // Its other items may be staged: the round is undone and done again without it.
                undo |= requests[*r].len() > 1;
            }
        }
        if no_log || undo {
            tx.rollback().await.map_err(failed)?;
            if no_log {
                crate::group::new_log(conn, log, key).await?;
            }
            continue;
        }
        tx.commit().await.map_err(|e| {
            StoreError::backend(
                format!("committing staged entries of the {log} (they may or may not be written)"),
                describe(&e),
            )
        })?;
        let mut ids: Vec<Vec<i64>> = requests.iter().map(|_| Vec::new()).collect();
        for ((r, _, _), answer) in calls.iter().zip(&answers) {
            if let Some(id) = staged_id(answer) {
                ids[*r].push(id);
            }
        }
        return Ok(refused
            .into_iter()
            .zip(ids)
            .map(|(refused, ids)| refused.map_or(Ok(ids), Err))
            .collect());
    }
    Err(StoreError::backend(
        context,
        format!("gave up after {CHAIN_ATTEMPTS} attempts"),
    ))
}

/// Why a staging was refused, as the store's error.
fn refusal(log: AuditLogId, task: Option<&Prepared>, answer: &str) -> StoreError {
    if answer == "sealed" {
        StoreError::Immutable(format!("the {log} is sealed"))
    } else {
        refused(task, answer)
    }
}

/// A deadlock with another writer or a serialization failure: nothing was written, again.
pub(crate) fn retryable(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::UNIQUE_VIOLATION
            || *c == SqlState::T_R_DEADLOCK_DETECTED
            || *c == SqlState::T_R_SERIALIZATION_FAILURE
    )
}
