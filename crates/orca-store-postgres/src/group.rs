//! Group commit per audit log (ADR 0036). Writers of one log in this process do not
//! take turns one round trip and one commit each: a write joins the log's queue; whoever takes
//! the log's turn writes EVERY queued request in ONE transaction (one call per item,
//! pipelined: sent together, answered together) and one commit, then answers each.
//!
//! The database chains each entry (`chained`, ADR 0060): a call locks the log's row, so a
//! round cannot lose a race for the head, and the writers of one log in other processes wait
//! for its commit. A request of several items ([`write`] with a batch) is all or nothing: a
//! refusal inside it rolls the round back, fails that request alone and writes the others
//! again. A cut connection fails every request of the round (it may or may not have
//! committed). A store told to stage (`PgStore::set_stage_first`; or whose database hashes
//! differently from orca, found when it connects) stages its entries and chains them here
//! instead (`chain`, ADR 0055).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use orca_store::audit::{AuditEntry, NewAuditEntry};
use orca_store::{AuditLogId, Revision, StoreError};
use tokio::sync::oneshot;
use tokio_postgres::types::ToSql;

use crate::chain::{describe, retryable};
use crate::codec::{encode, log_key};
use crate::pool::Conn;
use crate::write::Prepared;
use crate::{PgStore, db};

/// Creates a log's row if it is missing.
pub(crate) const NEW_LOG: &str =
    "INSERT INTO audit_logs (log_key, log_id) VALUES ($1, $2) ON CONFLICT DO NOTHING";

/// How many rounds one turn tries at most before giving up on the requests left: a bound
/// against a loop that never ends (a turn that lost a round stages, and staging cannot lose).
pub(crate) const ATTEMPTS: usize = 100_000;
/// Logs whose queue is kept (an unbounded worker sees many executions).
const QUEUES_KEPT: usize = 4096;

/// One write of a request: a transition (optional) and its entry.
pub(crate) struct Item {
    pub(crate) task: Option<Prepared>,
    pub(crate) entry: NewAuditEntry,
}

/// What an item wrote: the task's new revision (if it had a transition) and its entry.
pub(crate) type Done = (Option<Revision>, AuditEntry);

/// Why a request was not written: the index of the item refused, and why.
pub(crate) type Refused = (usize, StoreError);

pub(crate) type Reply = Result<Vec<Done>, Refused>;

pub(crate) struct Request {
    pub(crate) items: Vec<Item>,
    pub(crate) reply: oneshot::Sender<Reply>,
}

/// Stages `pending` and chains it (`chain`), answering each request. A failure after the
/// staging committed leaves the transitions written and their entries staged: the next chaining
/// of the log (any writer's, a seal's, a reader's) chains them.
async fn staged(
    store: &PgStore,
    conn: &mut Conn<'_>,
    log: AuditLogId,
    key: &str,
    mut pending: VecDeque<Request>,
) {
    let items: Vec<&[Item]> = pending.iter().map(|r| &r.items[..]).collect();
    let staged = match crate::chain::stage(conn, store, log, key, &items).await {
        Ok(s) => s,
        Err(e) => return fail_all(&mut pending, "staging audit entries", &e.to_string()),
    };
    let own: Vec<i64> = staged.iter().flatten().flatten().copied().collect();
    let chained = if own.is_empty() {
        None
    } else {
        match crate::chain::chain(conn, log, key, &own).await {
            Ok(c) => Some(c),
            Err(e) => {
                return fail_all(
                    &mut pending,
                    "chaining staged audit entries (the transitions are written; the entries \
                     are chained by the log's next write)",
                    &e.to_string(),
                );
            }
        }
    };
    for (req, staged) in pending.drain(..).zip(staged) {
        let answer = staged.and_then(|ids| {
            req.items
                .iter()
                .zip(ids)
                .map(|(item, id)| {
                    let entry = chained.as_ref().and_then(|c| c.own.get(&id)).cloned();
                    entry.map(|e| (item.task.as_ref().map(|t| t.next), e))
                })
                .collect::<Option<Vec<Done>>>()
                .ok_or_else(|| (0, abandoned()))
        });
        let _ = req.reply.send(answer);
    }
}

/// One log's queue and its turn (which holds the head this store last saw).
#[derive(Default)]
struct Slot {
    queue: Mutex<Vec<Request>>,
    turn: tokio::sync::Mutex<()>,
}

/// Per log: its queue and the last entry this store saw.
#[derive(Default)]
pub(crate) struct Heads {
    by_log: Mutex<HashMap<String, Arc<Slot>>>,
}

impl std::fmt::Debug for Heads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heads").finish_non_exhaustive()
    }
}

impl Heads {
    fn slot(&self, key: &str) -> Arc<Slot> {
        let mut map = self.by_log.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= QUEUES_KEPT && !map.contains_key(key) {
            // A slot still in use lives on with its writers; a new one for the same log only
            // races it like another process would (the head check and the primary key).
            map.clear();
        }
        Arc::clone(map.entry(key.to_owned()).or_default())
    }
}

/// Writes `items` (in order, all or nothing) to `log`, grouped with the other writes of that
/// log queued meanwhile in this store.
pub(crate) async fn write(store: &PgStore, log: AuditLogId, items: Vec<Item>) -> Reply {
    let key = log_key(log);
    let slot = store.inner.heads.slot(&key);
    let (reply, mut answer) = oneshot::channel();
    slot.queue
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Request { items, reply });
    loop {
        tokio::select! {
            biased;
            got = &mut answer => return got.unwrap_or_else(|_| Err((0, abandoned()))),
            _turn = slot.turn.lock() => {
                if let Ok(got) = answer.try_recv() {
                    return got;
                }
                // Writers that began at the same moment (the starts of one launch, spawned
                // together) queue first: one round for them all, not one alone and the rest next.
                tokio::task::yield_now().await;
                let queued = std::mem::take(
                    &mut *slot.queue.lock().unwrap_or_else(PoisonError::into_inner),
                );
                lead(store, log, &key, queued.into()).await;
            }
        }
    }
}

pub(crate) fn abandoned() -> StoreError {
    StoreError::backend(
        "writing to the postgres store",
        "the write was abandoned mid-way (it may or may not have been written)",
    )
}

/// A failure of the whole round, told to each of its requests.
pub(crate) fn fail_all(pending: &mut VecDeque<Request>, context: &str, message: &str) {
    for r in pending.drain(..) {
        let _ = r.reply.send(Err((
            0,
            StoreError::backend(context.to_owned(), message.to_owned()),
        )));
    }
}

/// Writes `pending` (this turn's requests, in order), answering each: chained by the
/// database (`chained`), or — a store told to, or a database whose hashing differs from
/// orca's — staged and chained here (`chain`).
async fn lead(store: &PgStore, log: AuditLogId, key: &str, mut pending: VecDeque<Request>) {
    let mut conn = match store.conn().await {
        Ok(c) => c,
        Err(e) => {
            return fail_all(
                &mut pending,
                "connecting to the postgres store",
                &e.to_string(),
            );
        }
    };
    if store.stage_first() {
        staged(store, &mut conn, log, key, pending).await;
    } else {
        crate::chained::lead(store, &mut conn, log, key, pending).await;
    }
}

/// How a round went.
pub(crate) enum Round {
    /// Nothing written; write the round again after re-reading the head (another process
    /// appended after the same head, or a deadlock with another writer).
    Retry,
    /// Failed (maybe written, maybe not: a cut connection): what was done, and the error.
    Failed(String, String),
    /// Each item's answer; `committed`: the items before the first refusal are written
    /// (false: a refusal inside a request of several items rolled the round back).
    Answered {
        answers: Vec<String>,
        committed: bool,
    },
}

fn failed(e: &tokio_postgres::Error) -> Round {
    if retryable(e) {
        Round::Retry
    } else {
        Round::Failed("writing to the postgres store".to_owned(), describe(e))
    }
}

/// One call's parameters, borrowed.
pub(crate) type Refs<'a> = Vec<&'a (dyn ToSql + Sync)>;

/// Writes one round: one statement (one item), or one transaction of pipelined calls. With
/// `all_single` (every request one item) whatever the calls answered is committed; else
/// `commit` decides from the answers, and a `false` rolls the round back.
pub(crate) async fn round(
    conn: &mut Conn<'_>,
    stmt: &tokio_postgres::Statement,
    refs: &[Refs<'_>],
    all_single: bool,
    commit: &(dyn Fn(&[String]) -> bool + Sync),
) -> Round {
    if let [one] = refs {
        return match conn.query_one(stmt, one).await {
            Ok(row) => match row.try_get::<_, String>(0) {
                Ok(a) => Round::Answered {
                    answers: vec![a],
                    committed: true,
                },
                Err(e) => failed(&e),
            },
            Err(e) => failed(&e),
        };
    }
    if all_single {
        return pipelined(conn, stmt, refs).await;
    }
    let tx = match conn.transaction().await {
        Ok(tx) => tx,
        Err(e) => return failed(&e),
    };
    in_transaction(tx, stmt, refs, commit).await
}

/// A round whose requests are one item each, in ONE round trip: `BEGIN`, the calls and
/// `COMMIT` sent together. Committing whatever the calls answered is right here: each refused
/// item wrote nothing, and every item is a whole request. A call that fails aborts the
/// transaction, and the `COMMIT` then rolls it back. (A round holding a request of several
/// items cannot commit blindly — a refusal inside it must undo its earlier items — and takes
/// [`in_transaction`].)
async fn pipelined(
    conn: &mut Conn<'_>,
    stmt: &tokio_postgres::Statement,
    refs: &[Refs<'_>],
) -> Round {
    conn.set_dirty(true);
    let client: &tokio_postgres::Client = conn;
    // Sent in the order polled first: `join3` and `join_all` poll in order.
    let (begun, results, committed) = futures_util::future::join3(
        client.batch_execute("BEGIN"),
        futures_util::future::join_all(refs.iter().map(|p| client.query_one(stmt, &p[..]))),
        client.batch_execute("COMMIT"),
    )
    .await;
    // A `COMMIT` that was answered closed the transaction (committed, or rolled back after a
    // failed call): the connection can be used again.
    conn.set_dirty(committed.is_err());
    if let Err(e) = begun {
        return failed(&e);
    }
    let mut answers = Vec::with_capacity(results.len());
    for r in results {
        match r.and_then(|row| row.try_get::<_, String>(0)) {
            Ok(a) => answers.push(a),
            // The transaction is aborted: its `COMMIT` rolled it back.
            Err(e) => return failed(&e),
        }
    }
    if let Err(e) = committed {
        return Round::Failed("committing to the postgres store".to_owned(), describe(&e));
    }
    Round::Answered {
        answers,
        committed: true,
    }
}

/// The calls of a round in `tx` (pipelined), then its commit — or its rollback if `commit`
/// says no.
async fn in_transaction(
    tx: tokio_postgres::Transaction<'_>,
    stmt: &tokio_postgres::Statement,
    refs: &[Refs<'_>],
    commit: &(dyn Fn(&[String]) -> bool + Sync),
) -> Round {
    // Sent together (the client pipelines requests polled together), answered in order.
    let results =
        futures_util::future::join_all(refs.iter().map(|p| tx.query_one(stmt, &p[..]))).await;
    let mut answers = Vec::with_capacity(results.len());
    for r in results {
        match r.and_then(|row| row.try_get::<_, String>(0)) {
            Ok(a) => answers.push(a),
            // The transaction is aborted: dropping it rolls it back.
            Err(e) => return failed(&e),
        }
    }
    let commit = commit(&answers);
    if commit {
        if let Err(e) = tx.commit().await {
            return Round::Failed("committing to the postgres store".to_owned(), describe(&e));
        }
    } else if let Err(e) = tx.rollback().await {
        return Round::Failed("rolling back a write".to_owned(), describe(&e));
    }
    Round::Answered {
        answers,
        committed: commit,
    }
}

pub(crate) async fn new_log(
    conn: &mut Conn<'_>,
    log: AuditLogId,
    key: &str,
) -> Result<(), StoreError> {
    let id = encode(&log, &log.to_string())?;
    let stmt = conn
        .prepared(NEW_LOG)
        .await
        .map_err(db(format!("creating the {log}")))?;
    conn.execute(&stmt, &[&key, &id])
        .await
        .map_err(db(format!("creating the {log}")))?;
    Ok(())
}
