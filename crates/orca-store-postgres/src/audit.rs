//! [`AuditStore`] on PostgreSQL: one row per entry, the exact line orca hashed; the log row
//! is locked while appending, so the chain has one head; seals are signed like the file
//! store's.

use async_trait::async_trait;
use orca_store::audit::{AuditEntry, NewAuditEntry, Seal, VerifyReport};
use orca_store::{AuditLogId, AuditStore, Authority, StoreError};
use time::OffsetDateTime;

use crate::chain;
use crate::codec::{corrupt, encode, log_key};
use crate::{PgStore, db};

use crate::group::NEW_LOG;
use crate::write::parse_entry;

fn parse_seal(key: &str, text: &str) -> Result<Seal, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt("audit_logs", key, format!("not a seal: {e}")))
}

pub(crate) const LOCK_LOG: &str = "SELECT seal FROM audit_logs WHERE log_key = $1 FOR UPDATE";
pub(crate) const LINES: &str =
    "SELECT seq, line FROM audit_entries WHERE log_key = $1 ORDER BY seq";
pub(crate) const SET_SEAL: &str = "UPDATE audit_logs SET seal = $2 WHERE log_key = $1";
/// The seal (the row marked `true` first; none if the log has no row) and every line in order,
/// in ONE statement: one snapshot, one round trip. Rows are told apart by the mark, not by
/// their numbers, so every entry row stored is read as a line, whatever its number.
const SEALED_LINES: &str = "SELECT true AS is_seal, NULL::int8 AS seq, seal AS text
       FROM audit_logs WHERE log_key = $1
     UNION ALL SELECT false, seq, line FROM audit_entries WHERE log_key = $1
     ORDER BY is_seal DESC, seq";

/// `(seq, text)` of each row of `rows`.
fn numbered(
    rows: &[tokio_postgres::Row],
    log: AuditLogId,
) -> Result<Vec<(i64, Option<String>)>, StoreError> {
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(db(format!("reading the {log}")))
}

/// The entries of `rows` (`seq`, `line`).
pub(crate) fn parsed(
    key: &str,
    log: AuditLogId,
    rows: &[tokio_postgres::Row],
) -> Result<Vec<AuditEntry>, StoreError> {
    numbered(rows, log)?
        .into_iter()
        .map(|(seq, line)| parse_entry(key, seq, line.as_deref().unwrap_or_default()))
        .collect()
}

/// Chains `staged` after `entries` (the log's, in order) and signs a seal over them all, in
/// the transaction open on `client`, which holds the log's chainer lock and row lock (nothing
/// is committed here). Returns the seal, its text and every entry of the log.
#[expect(
    clippy::too_many_arguments,
    reason = "one transaction's statements and its log"
)]
pub(crate) async fn chain_and_seal<C, S>(
    store: &PgStore,
    client: &C,
    log: AuditLogId,
    key: &str,
    mut entries: Vec<AuditEntry>,
    staged: &[(i64, String)],
    insert: &S,
    unstage: &S,
) -> Result<(Seal, String, Vec<AuditEntry>), StoreError>
where
    C: tokio_postgres::GenericClient + Sync,
    S: tokio_postgres::ToStatement + Sync + Send + ?Sized,
{
    if !staged.is_empty() {
        // Written by writers whose chaining has not happened yet: chained before the seal.
        let hashed = chain::hash_after(log, key, entries.last(), staged)?;
        let (seqs, lines, ids) = chain::insert_columns(log, &hashed)?;
        let (inserted, unstaged) = futures_util::future::join(
            client.execute(insert, &[&key, &seqs, &lines, &ids]),
            client.execute(unstage, &[&ids]),
        )
        .await;
        inserted
            .and(unstaged)
            .map_err(db(format!("chaining the staged entries of the {log}")))?;
        entries.extend(hashed.into_iter().map(|(e, _, _)| e));
    }
    let seal = orca_store::verify::signed_seal(
        log,
        &entries,
        OffsetDateTime::now_utc(),
        &store.inner.authority,
    );
    let text = encode(&seal, &format!("the seal of the {log}"))?;
    Ok((seal, text, entries))
}

#[async_trait]
impl AuditStore for PgStore {
    async fn append(
        &self,
        log: AuditLogId,
        entry: NewAuditEntry,
    ) -> Result<AuditEntry, StoreError> {
        let mut done =
            crate::group::write(self, log, vec![crate::group::Item { task: None, entry }])
                .await
                .map_err(|(_, e)| e)?;
        done.pop()
            .map(|(_, entry)| entry)
            .ok_or_else(|| StoreError::backend(format!("appending to the {log}"), "no entry"))
    }

    async fn seal(&self, log: AuditLogId) -> Result<Seal, StoreError> {
        let key = log_key(log);
        let id = encode(&log, &log.to_string())?;
        let sealing = format!("sealing the {log}");
        let mut conn = self.conn().await?;
        let mut statements = Vec::with_capacity(8);
        for sql in [
            NEW_LOG,
            LOCK_LOG,
            LINES,
            SET_SEAL,
            chain::LOCK,
            chain::STAGED,
            chain::INSERT,
            chain::UNSTAGE,
        ] {
            statements.push(conn.prepared(sql).await.map_err(db(sealing.clone()))?);
        }
        let [new_log, lock, lines, set, chainer, staged, insert, unstage] = &statements[..] else {
            return Err(StoreError::backend(sealing, "statements missing"));
        };
        let (class, lock_id) = chain::lock_keys(&key);
        // Pipelined, in one transaction begun by hand: the log's chainer lock (staged entries
        // are chained here, by nobody else), its row made if missing and locked (appends and
        // stagings wait), then its lines and what is staged. Dropped before the transaction is
        // closed (an error), the connection is closed rather than pooled.
        conn.set_dirty(true);
        let client: &tokio_postgres::Client = &conn;
        let lock_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&class, &lock_id];
        let log_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&key, &id];
        let key_param: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&key];
        // Sent in the order polled first: `join` and `join3` poll in order.
        let ((begun, chaining, made), (locked, rows, staged)) = futures_util::future::join(
            futures_util::future::join3(
                client.batch_execute("BEGIN"),
                client.execute(chainer, &lock_params),
                client.execute(new_log, &log_params),
            ),
            futures_util::future::join3(
                client.query_one(lock, &key_param),
                client.query(lines, &key_param),
                client.query(staged, &key_param),
            ),
        )
        .await;
        begun.map_err(db(sealing.clone()))?;
        chaining.map_err(db(sealing.clone()))?;
        made.map_err(db(format!("creating the {log}")))?;
        let seal: Option<String> = locked
            .and_then(|r| r.try_get(0))
            .map_err(db(format!("locking the {log}")))?;
        let rows = rows.map_err(db(format!("reading the {log}")))?;
        if let Some(seal) = seal {
            // Sealed already: nothing to write.
            client
                .batch_execute("ROLLBACK")
                .await
                .map_err(db(sealing.clone()))?;
            conn.set_dirty(false);
            return parse_seal(&key, &seal);
        }
        let entries = parsed(&key, log, &rows)?;
        let staged = staged.map_err(db(format!("reading the staged entries of the {log}")))?;
        let staged = chain::staged_rows(&staged, log)?;
        let (seal, text, _) =
            chain_and_seal(self, client, log, &key, entries, &staged, insert, unstage).await?;
        let (set, committed) = futures_util::future::join(
            client.execute(set, &[&key, &text]),
            client.batch_execute("COMMIT"),
        )
        .await;
        // An answered COMMIT closed the transaction (committed, or rolled back after a failure).
        conn.set_dirty(committed.is_err());
        set.map_err(db(sealing))?;
        committed.map_err(db(format!("committing the seal of the {log}")))?;
        Ok(seal)
    }

    async fn entries(&self, log: AuditLogId) -> Result<Vec<AuditEntry>, StoreError> {
        let key = log_key(log);
        // What a writer staged and did not live to chain is chained first: readers (a resumed
        // runner among them) see every entry written.
        chain::chain_leftovers(self, log, &key).await?;
        let rows = self
            .conn()
            .await?
            .query_prepared(LINES, &[&key])
            .await
            .map_err(db(format!("reading the {log}")))?;
        parsed(&key, log, &rows)
    }

    async fn verify(&self, log: AuditLogId) -> Result<VerifyReport, StoreError> {
        Ok(self.verified_entries(log).await?.0)
    }

    async fn verified_entries(
        &self,
        log: AuditLogId,
    ) -> Result<(VerifyReport, Vec<AuditEntry>), StoreError> {
        let key = log_key(log);
        let rows = self
            .conn()
            .await?
            .query_prepared(SEALED_LINES, &[&key])
            .await
            .map_err(db(format!("reading the {log}")))?;
        let mut seal = None;
        let mut lines = Vec::with_capacity(rows.len());
        for r in &rows {
            let read = |e| db(format!("reading the {log}"))(e);
            let is_seal: bool = r.try_get(0).map_err(read)?;
            let text: Option<String> = r.try_get(2).map_err(read)?;
            if is_seal {
                seal = text;
            } else {
                lines.push(text.unwrap_or_default());
            }
        }
        let seal = seal.map(|s| parse_seal(&key, &s)).transpose()?;
        Ok(orca_store::verify::verify_log_entries(
            log,
            &lines,
            seal.as_ref(),
            &self.inner.authority,
        ))
    }

    async fn audit_logs(&self) -> Result<Vec<AuditLogId>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .query(
                "SELECT log_key, log_id FROM audit_logs ORDER BY log_key",
                &[],
            )
            .await
            .map_err(db("listing audit logs"))?;
        let mut logs = Vec::with_capacity(rows.len());
        for r in &rows {
            let key: String = r.get(0);
            let text: String = r.get(1);
            logs.push(
                serde_json::from_str(&text)
                    .map_err(|e| corrupt("audit_logs", &key, format!("not a log id: {e}")))?,
            );
        }
        logs.sort();
        Ok(logs)
    }

    fn authority(&self) -> Authority {
        self.inner.authority.clone()
    }
}
