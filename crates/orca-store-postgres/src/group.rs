//! Group commit per audit log (ADR 0036). Writers of one log in this process do not
//! take turns one round trip and one commit each: a write joins the log's queue; whoever takes
//! the log's turn writes EVERY queued request in ONE transaction (one `orca_write` call per
//! item, pipelined: sent together, answered together) and one commit, then answers each.
//!
//! Entries are hashed here, in queue order, after the head this store last saw of the log; each
//! call checks that head is still the log's head. A refused item writes nothing, so every item
//! after it (hashed after it) is refused by its head check: the requests before the refused
//! one commit, the refused request gets its own error, the rest are hashed again and written
//! in the next round. A request of several items ([`write`] with a batch) is all or nothing: a
//! refusal inside it rolls the round back, fails that request alone and writes the others
//! again. Another process appending after the same head makes our insert collide on the
//! entries' primary key: the whole round rolls back and is written again after re-reading the
//! head. A cut connection fails every request of the round (it may or may not have committed:
//! the head is re-read). A turn that lost a round stages its requests and chains them instead
//! (`chain`, ADR 0055): it cannot lose again, and N processes on one log cost N commits and a
//! few chainings, not N² lost rounds (12-14 calls per transition with 16 workers before). The
//! next turn tries an optimistic round again (staging for a second after a loss measured
//! slower at every worker count: two commits per write where one would often have done).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use orca_store::audit::{self, AuditEntry, NewAuditEntry};
use orca_store::{AuditLogId, Revision, StoreError};
use time::OffsetDateTime;
use tokio::sync::oneshot;

use crate::chain::{describe, retryable};
use crate::codec::{encode, log_key};
use crate::pool::Conn;
use crate::write::{self, APPEND, EntryPart, Params, Prepared, parse_entry, refused};
use crate::{PgStore, db};

/// Creates a log's row if it is missing.
pub(crate) const NEW_LOG: &str =
    "INSERT INTO audit_logs (log_key, log_id) VALUES ($1, $2) ON CONFLICT DO NOTHING";

/// How many rounds one turn tries at most before giving up on the requests left: a bound
/// against a loop that never ends (a turn that lost a round stages, and staging cannot lose).
const ATTEMPTS: usize = 100_000;
/// Logs whose head is remembered (an unbounded worker sees many executions).
const HEADS_KEPT: usize = 4096;
/// What this store knows of a log's head: `None` unknown (read it), `Some(None)` empty.
type Known = Option<Option<(AuditEntry, String)>>;

/// One write of a request: a transition (optional) and its entry.
pub(crate) struct Item {
    pub(crate) task: Option<Prepared>,
    pub(crate) entry: NewAuditEntry,
}

/// What an item wrote: the task's new revision (if it had a transition) and its entry.
pub(crate) type Done = (Option<Revision>, AuditEntry);

/// Why a request was not written: the index of the item refused, and why.
pub(crate) type Refused = (usize, StoreError);

type Reply = Result<Vec<Done>, Refused>;

struct Request {
    items: Vec<Item>,
    reply: oneshot::Sender<Reply>,
}

/// Stages `pending` and chains it (`chain`), answering each request. A failure after the
/// staging committed leaves the transitions written and their entries staged: the next chaining
/// of the log (any writer's, a seal's, a reader's) chains them.
async fn staged(
    store: &PgStore,
    conn: &mut Conn<'_>,
    log: AuditLogId,
    key: &str,
    known: &mut Known,
    mut pending: VecDeque<Request>,
) {
    *known = None;
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
    if let Some(c) = &chained {
        *known = Some(c.head.clone());
    }
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
    turn: tokio::sync::Mutex<Known>,
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
        if map.len() >= HEADS_KEPT && !map.contains_key(key) {
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
            mut known = slot.turn.lock() => {
                if let Ok(got) = answer.try_recv() {
                    return got;
                }
                // Writers that began at the same moment (the starts of one launch, spawned
                // together) queue first: one round for them all, not one alone and the rest next.
                tokio::task::yield_now().await;
                let queued = std::mem::take(
                    &mut *slot.queue.lock().unwrap_or_else(PoisonError::into_inner),
                );
                lead(store, log, &key, &mut known, queued.into()).await;
            }
        }
    }
}

fn abandoned() -> StoreError {
    StoreError::backend(
        "writing to the postgres store",
        "the write was abandoned mid-way (it may or may not have been written)",
    )
}

/// A failure of the whole round, told to each of its requests.
fn fail_all(pending: &mut VecDeque<Request>, context: &str, message: &str) {
    for r in pending.drain(..) {
        let _ = r.reply.send(Err((
            0,
            StoreError::backend(context.to_owned(), message.to_owned()),
        )));
    }
}

/// One hashed item of a round.
struct Hashed {
    entry: AuditEntry,
    line: String,
    seq: i64,
}

/// Writes `pending` (this turn's requests, in order), answering each.
async fn lead(
    store: &PgStore,
    log: AuditLogId,
    key: &str,
    known: &mut Known,
    mut pending: VecDeque<Request>,
) {
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
    let stmt = match conn.prepared(APPEND).await {
        Ok(s) => s,
        Err(e) => return fail_all(&mut pending, "preparing a write", &describe(&e)),
    };
    let mut lost = 0;
    for _ in 0..ATTEMPTS {
        if pending.is_empty() {
            return;
        }
        if lost > 0 || store.stage_first() {
            return staged(store, &mut conn, log, key, known, pending).await;
        }
        // Optimistic: hashed after the head this store last saw, no lock, no read (one round
        // trip for one write); a round lost to another process is staged instead.
        // Taken out: a turn cancelled mid-way leaves the head unknown (read again).
        let start = match known.take() {
            Some(h) => h,
            None => match write::head(&mut conn, log, key).await {
                Ok(h) => h,
                Err(e) => {
                    return fail_all(&mut pending, "reading a log's head", &e.to_string());
                }
            },
        };
        let (hashed, owners, params) =
            match prepare_round(store, log, key, &pending, start.as_ref()) {
                Ok(p) => p,
                Err((context, message)) => {
                    return fail_all(&mut pending, &context, &message);
                }
            };
        let outcome = round(&mut conn, &stmt, &params, &owners).await;
        let (answers, committed) = match outcome {
            Round::Retry => {
                lost += 1;
                continue;
            }
            Round::Failed(context, message) => return fail_all(&mut pending, &context, &message),
            Round::Answered { answers, committed } => (answers, committed),
        };
        let Some(f) = answers.iter().position(|a| a != "ok") else {
            // All written.
            if let Some(last) = hashed.last() {
                *known = Some(Some((last.entry.clone(), last.line.clone())));
            }
            let mut hashed = hashed.into_iter();
            for req in pending.drain(..) {
                let done = req
                    .items
                    .iter()
                    .map(|item| {
                        let h = hashed.next();
                        (item.task.as_ref().map(|t| t.next), h.map(|h| h.entry))
                    })
                    .map(|(rev, e)| e.map(|e| (rev, e)))
                    .collect::<Option<Vec<Done>>>();
                let _ = req.reply.send(done.ok_or_else(|| (0, abandoned())));
            }
            return;
        };
        let (r, i) = owners[f];
        let answer = answers[f].as_str();
        if committed {
            // The requests before `r` are written; `r` and the rest wrote nothing (each item
            // after a refused one fails its head check).
            *known = Some(if f == 0 {
                start
            } else {
                hashed.get(f - 1).map(|h| (h.entry.clone(), h.line.clone()))
            });
            let mut hashed = hashed.into_iter();
            for req in pending.drain(..r) {
                let done: Vec<Done> = req
                    .items
                    .iter()
                    .filter_map(|item| {
                        hashed
                            .next()
                            .map(|h| (item.task.as_ref().map(|t| t.next), h.entry))
                    })
                    .collect();
                let _ = req.reply.send(Ok(done));
            }
        } else {
            // A refusal inside a request of several items: the round was rolled back.
            *known = Some(start);
        }
        // `r`'s place in `pending` now.
        let r = if committed { 0 } else { r };
        match answer.split_once(':').map_or(answer, |(k, _)| k) {
            "head" => {
                lost += 1;
                *known = if committed {
                    parse_head(key, answer)
                } else {
                    None
                };
            }
            // Entries are staged: this round's are staged after them.
            "staged" => lost += 1,
            "no_log" => {
                if let Err(e) = new_log(&mut conn, log, key).await {
                    return fail_all(&mut pending, "creating a log", &e.to_string());
                }
                *known = None;
            }
            "sealed" => {
                if let Some(req) = pending.remove(r) {
                    let _ = req.reply.send(Err((
                        i,
                        StoreError::Immutable(format!("the {log} is sealed")),
                    )));
                }
            }
            _ => {
                if let Some(req) = pending.remove(r) {
                    let error = refused(req.items.get(i).and_then(|it| it.task.as_ref()), answer);
                    let _ = req.reply.send(Err((i, error)));
                }
            }
        }
    }
    fail_all(
        &mut pending,
        "writing to the postgres store",
        &format!("the {log} kept moving on: gave up after {ATTEMPTS} attempts"),
    );
}

/// A round ready to send: the hashed items, their owners (request, item), each call's
/// parameters.
type ReadyRound = (Vec<Hashed>, Vec<(usize, usize)>, Vec<Params>);

/// Hashes every queued item in queue order after `start`, and the parameters of each call.
fn prepare_round(
    store: &PgStore,
    log: AuditLogId,
    key: &str,
    pending: &VecDeque<Request>,
    start: Option<&(AuditEntry, String)>,
) -> Result<ReadyRound, (String, String)> {
    let mut hashed: Vec<Hashed> = Vec::new();
    let mut owners: Vec<(usize, usize)> = Vec::new();
    let mut prev = start.map(|(e, _)| e.clone());
    for (r, req) in pending.iter().enumerate() {
        for (i, item) in req.items.iter().enumerate() {
            let entry = NewAuditEntry {
                data: store.inner.redactor.redact_json(item.entry.data.clone()),
                ..item.entry.clone()
            };
            let next = audit::next_entry(prev.as_ref(), entry, OffsetDateTime::now_utc());
            let line = encode(&next, &format!("an entry of the {log}"))
                .map_err(|e| ("encoding an entry".to_owned(), e.to_string()))?;
            let seq = i64::try_from(next.seq)
                .map_err(|_| ("appending".to_owned(), format!("the {log} is full")))?;
            prev = Some(next.clone());
            hashed.push(Hashed {
                entry: next,
                line,
                seq,
            });
            owners.push((r, i));
        }
    }
    let params = hashed
        .iter()
        .enumerate()
        .map(|(n, h)| {
            let (prev_seq, prev_line) = if n == 0 {
                (
                    start.and_then(|(e, _)| i64::try_from(e.seq).ok()),
                    start.map(|(_, l)| l.as_str()),
                )
            } else {
                (Some(hashed[n - 1].seq), Some(hashed[n - 1].line.as_str()))
            };
            let (r, i) = owners[n];
            Params::new(
                store,
                pending[r].items[i].task.as_ref(),
                Some(EntryPart {
                    key,
                    prev_seq,
                    prev_line,
                    seq: h.seq,
                    line: &h.line,
                }),
            )
        })
        .collect();
    Ok((hashed, owners, params))
}

/// How a round went.
enum Round {
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

/// Writes one round: one statement (one item), or one transaction of pipelined calls.
async fn round(
    conn: &mut Conn<'_>,
    stmt: &tokio_postgres::Statement,
    params: &[Params],
    owners: &[(usize, usize)],
) -> Round {
    if let [one] = params {
        return match conn.query_one(stmt, &one.refs()).await {
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
    if owners.iter().all(|(_, i)| *i == 0) {
        return pipelined(conn, stmt, params).await;
    }
    let tx = match conn.transaction().await {
        Ok(tx) => tx,
        Err(e) => return failed(&e),
    };
    in_transaction(tx, stmt, params, owners).await
}

/// A round whose requests are one item each, in ONE round trip: `BEGIN`, the calls and
/// `COMMIT` sent together. Committing whatever the calls answered is right here: the items
/// before the first refusal are written (they are whole requests), the refused one and every
/// one after it wrote nothing (each after it fails its head check). A call that fails aborts
/// the transaction, and the `COMMIT` then rolls it back. (A round holding a request of several
/// items cannot commit blindly — a refusal inside it must undo its earlier items — and takes
/// [`in_transaction`].)
async fn pipelined(
    conn: &mut Conn<'_>,
    stmt: &tokio_postgres::Statement,
    params: &[Params],
) -> Round {
    let refs: Vec<_> = params.iter().map(Params::refs).collect();
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

/// The calls of a round in `tx` (pipelined), then its commit — or its rollback if a request of
/// several items was refused part-way.
async fn in_transaction(
    tx: tokio_postgres::Transaction<'_>,
    stmt: &tokio_postgres::Statement,
    params: &[Params],
    owners: &[(usize, usize)],
) -> Round {
    let refs: Vec<_> = params.iter().map(Params::refs).collect();
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
    let commit = answers
        .iter()
        .position(|a| a != "ok")
        .is_none_or(|f| owners.get(f).is_some_and(|(_, i)| *i == 0));
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

/// The head a refusal `head:<seq>:<line>` (or `head:` for an empty log) came back with.
fn parse_head(key: &str, answer: &str) -> Known {
    match answer.split_once(':').map(|(_, rest)| rest) {
        Some("") => Some(None),
        Some(rest) => rest.split_once(':').and_then(|(seq, line)| {
            let seq: i64 = seq.parse().ok()?;
            parse_entry(key, seq, line)
                .ok()
                .map(|e| Some((e, line.to_owned())))
        }),
        None => None,
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
