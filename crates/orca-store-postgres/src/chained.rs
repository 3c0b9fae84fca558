//! A round of audit writes chained by the database (ADR 0060): every queued item of one log is
//! sent as a template (`orca_store::entry_template`) in ONE transaction of pipelined
//! `orca_write_chained` calls; each call locks the log's row, fills in `seq` and `prev` after
//! the head and hashes. A write cannot lose a race for the head, so nothing is staged; the
//! writers of one log in different processes take turns holding its row until they commit.
//! Each answer's hash is checked against this process's own arithmetic before it is believed.

use std::collections::VecDeque;

use orca_core::Digest;
use orca_store::audit::{AuditEntry, NewAuditEntry};
use orca_store::entry_template::Template;
use orca_store::{AuditLogId, StoreError};
use time::OffsetDateTime;
use tokio_postgres::types::ToSql;

use crate::PgStore;
use crate::chain::describe;
use crate::codec::corrupt;
use crate::group::{ATTEMPTS, Done, Refs, Request, Round, abandoned, fail_all, new_log, round};
use crate::pool::Conn;
use crate::write::{Prepared, TaskParams, refused};

/// One chained write: a transition (optional) and its entry's template.
pub(crate) const CHAINED: &str = "SELECT orca_write_chained($1, $2, $3, $4, $5, $6, $7, $8, $9, \
                                  $10, $11, $12, $13, $14)";

/// The parameters of one `orca_write_chained` call, owned.
struct Call {
    task: TaskParams,
    log: String,
    hash_head: String,
    line_body: String,
}

impl Call {
    fn refs(&self) -> Refs<'_> {
        let mut refs = self.task.refs().to_vec();
        refs.extend([
            &self.log as &(dyn ToSql + Sync),
            &self.hash_head,
            &self.line_body,
        ]);
        refs
    }
}

/// What one call answered.
enum Answer {
    /// Written: the entry as chained.
    Written(AuditEntry),
    /// Nothing written: the log is missing (create it, then write again).
    NoLog,
    /// Nothing written: the log holds staged entries to chain first (then write again).
    Staged,
    /// Refused: nothing written, and the request fails with this.
    Refused(StoreError),
}

/// Writes `pending` (this turn's requests, in order), answering each.
pub(crate) async fn lead(
    store: &PgStore,
    conn: &mut Conn<'_>,
    log: AuditLogId,
    key: &str,
    mut pending: VecDeque<Request>,
) {
    let stmt = match conn.prepared(CHAINED).await {
        Ok(s) => s,
        Err(e) => return fail_all(&mut pending, "preparing a write", &describe(&e)),
    };
    for _ in 0..ATTEMPTS {
        if pending.is_empty() {
            return;
        }
        let at = OffsetDateTime::now_utc();
        let mut templates: Vec<Template> = Vec::new();
        let mut calls: Vec<Call> = Vec::new();
        let mut owners: Vec<(usize, usize)> = Vec::new();
        for (r, req) in pending.iter().enumerate() {
            for (i, item) in req.items.iter().enumerate() {
                let entry = NewAuditEntry {
                    data: store.inner.redactor.redact_json(item.entry.data.clone()),
                    ..item.entry.clone()
                };
                let template = match Template::new(entry, at) {
                    Ok(t) => t,
                    Err(e) => return fail_all(&mut pending, "encoding an entry", &e.to_string()),
                };
                calls.push(Call {
                    task: TaskParams::new(store, item.task.as_ref()),
                    log: key.to_owned(),
                    hash_head: template.hash_head.clone(),
                    line_body: template.line_body.clone(),
                });
                templates.push(template);
                owners.push((r, i));
            }
        }
        let refs: Vec<Refs<'_>> = calls.iter().map(Call::refs).collect();
        let all_single = owners.iter().all(|(_, i)| *i == 0);
        // Items are independent here (each is chained after whatever the log's head is): the
        // round commits unless a request of several items was refused part-way.
        let commit = |answers: &[String]| {
            answers
                .iter()
                .zip(&owners)
                .all(|(a, (r, _))| a.starts_with("ok:") || pending[*r].items.len() == 1)
        };
        let (answers, committed) = match round(conn, &stmt, &refs, all_single, &commit).await {
            // A deadlock or a serialization failure: nothing written, write it again.
            Round::Retry => continue,
            Round::Failed(context, message) => {
                return fail_all(&mut pending, &context, &message);
            }
            Round::Answered { answers, committed } => (answers, committed),
        };
        let mut read: Vec<Vec<Answer>> = pending.iter().map(|_| Vec::new()).collect();
        for ((answer, (r, i)), template) in answers.iter().zip(&owners).zip(&templates) {
            let task = pending[*r].items.get(*i).and_then(|it| it.task.as_ref());
            read[*r].push(parse(log, key, answer, template, task));
        }
        let mut again = VecDeque::new();
        let (mut chain_first, mut create) = (false, false);
        for (req, answers) in pending.drain(..).zip(read) {
            if let Some((i, Answer::Refused(_))) = answers
                .iter()
                .enumerate()
                .find(|(_, a)| matches!(a, Answer::Refused(_)))
            {
                let error = answers
                    .into_iter()
                    .nth(i)
                    .and_then(|a| match a {
                        Answer::Refused(e) => Some(e),
                        _ => None,
                    })
                    .unwrap_or_else(abandoned);
                let _ = req.reply.send(Err((i, error)));
                continue;
            }
            let whole = committed && answers.iter().all(|a| matches!(a, Answer::Written(_)));
            if !whole {
                // Nothing of it was written (rolled back, or every item to be written again).
                chain_first |= answers.iter().any(|a| matches!(a, Answer::Staged));
                create |= answers.iter().any(|a| matches!(a, Answer::NoLog));
                again.push_back(req);
                continue;
            }
            let done: Vec<Done> = req
                .items
                .iter()
                .zip(answers)
                .filter_map(|(item, a)| match a {
                    Answer::Written(entry) => Some((item.task.as_ref().map(|t| t.next), entry)),
                    _ => None,
                })
                .collect();
            let _ = req.reply.send(Ok(done));
        }
        pending = again;
        if create && let Err(e) = new_log(conn, log, key).await {
            return fail_all(&mut pending, "creating a log", &e.to_string());
        }
        if chain_first && let Err(e) = crate::chain::chain(conn, log, key, &[]).await {
            return fail_all(
                &mut pending,
                "chaining staged audit entries",
                &e.to_string(),
            );
        }
    }
    fail_all(
        &mut pending,
        "writing to the postgres store",
        &format!("the {log} could not be written: gave up after {ATTEMPTS} attempts"),
    );
}

/// Text whose sha256 the database must compute as orca does for it to chain entries: quotes,
/// escapes and characters of one to four bytes in UTF-8.
const PROBE: &str = "{\"orca\":\"é ✓ 😀 \\\" \\n\"}";

/// Whether the database hashes entry text as orca does (its `convert_to(…, 'UTF8')` gives the
/// bytes orca hashes): checked once when a store connects; a database that does not (or
/// cannot hold the probe) gets its entries staged and chained by orca instead.
pub(crate) async fn hashes_as_orca(conn: &tokio_postgres::Client) -> bool {
    let expected = Digest::of_bytes(PROBE.as_bytes()).hex();
    match conn
        .query_one(
            "SELECT encode(sha256(convert_to($1, 'UTF8')), 'hex')",
            &[&PROBE],
        )
        .await
        .and_then(|row| row.try_get::<_, String>(0))
    {
        Ok(found) => found == expected,
        Err(_) => false,
    }
}

/// Reads one call's answer.
fn parse(
    log: AuditLogId,
    key: &str,
    answer: &str,
    template: &Template,
    task: Option<&Prepared>,
) -> Answer {
    match answer {
        "no_log" => return Answer::NoLog,
        "staged" => return Answer::Staged,
        "sealed" => return Answer::Refused(StoreError::Immutable(format!("the {log} is sealed"))),
        _ => {}
    }
    let Some(rest) = answer.strip_prefix("ok:") else {
        return Answer::Refused(refused(task, answer));
    };
    let mut parts = rest.splitn(3, ':');
    let (seq, prev, hash) = (parts.next(), parts.next(), parts.next());
    let digest = |hex: Option<&str>| hex.and_then(|h| format!("sha256:{h}").parse::<Digest>().ok());
    let entry = seq
        .and_then(|s| s.parse::<u64>().ok())
        .zip(digest(prev).zip(digest(hash)))
        .and_then(|(seq, (prev, hash))| template.entry(seq, prev, hash));
    match entry {
        Some(entry) => Answer::Written(entry),
        None => Answer::Refused(corrupt(
            "audit_entries",
            key,
            format!(
                "the database chained an entry of the {log} whose hash is not the entry's \
                 ({answer})"
            ),
        )),
    }
}
