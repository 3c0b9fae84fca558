//! [`AuditStore`] on PostgreSQL: one row per entry, the exact line orca hashed; the log row
//! is locked while appending, so the chain has one head; seals are signed like the file
//! store's.

use async_trait::async_trait;
use orca_store::audit::{AuditEntry, NewAuditEntry, Seal, VerifyReport};
use orca_store::{AuditLogId, AuditStore, Authority, StoreError};
use time::OffsetDateTime;

use crate::codec::{corrupt, encode, log_key};
use crate::{PgStore, db};

use crate::write::parse_entry;

fn parse_seal(key: &str, text: &str) -> Result<Seal, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt("audit_logs", key, format!("not a seal: {e}")))
}

/// Creates the log's row if missing and locks it for this transaction; returns its seal.
async fn lock_log(
    tx: &tokio_postgres::Transaction<'_>,
    log: AuditLogId,
    key: &str,
) -> Result<Option<Seal>, StoreError> {
    let id = encode(&log, &log.to_string())?;
    tx.execute(
        "INSERT INTO audit_logs (log_key, log_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        &[&key, &id],
    )
    .await
    .map_err(db(format!("creating the {log}")))?;
    let row = tx
        .query_one(
            "SELECT seal FROM audit_logs WHERE log_key = $1 FOR UPDATE",
            &[&key],
        )
        .await
        .map_err(db(format!("locking the {log}")))?;
    let seal: Option<String> = row.get(0);
    seal.map(|s| parse_seal(key, &s)).transpose()
}

async fn lines(
    client: &impl tokio_postgres::GenericClient,
    log: AuditLogId,
    key: &str,
) -> Result<Vec<(i64, String)>, StoreError> {
    Ok(client
        .query(
            "SELECT seq, line FROM audit_entries WHERE log_key = $1 ORDER BY seq",
            &[&key],
        )
        .await
        .map_err(db(format!("reading the {log}")))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
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
        let mut conn = self.conn().await?;
        let tx = conn
            .transaction()
            .await
            .map_err(db(format!("sealing the {log}")))?;
        if let Some(seal) = lock_log(&tx, log, &key).await? {
            return Ok(seal);
        }
        let mut entries = Vec::new();
        for (seq, line) in lines(&tx, log, &key).await? {
            entries.push(parse_entry(&key, seq, &line)?);
        }
        let seal = orca_store::verify::signed_seal(
            log,
            &entries,
            OffsetDateTime::now_utc(),
            &self.inner.authority,
        );
        let text = encode(&seal, &format!("the seal of the {log}"))?;
        tx.execute(
            "UPDATE audit_logs SET seal = $2 WHERE log_key = $1",
            &[&key, &text],
        )
        .await
        .map_err(db(format!("sealing the {log}")))?;
        tx.commit()
            .await
            .map_err(db(format!("committing the seal of the {log}")))?;
        Ok(seal)
    }

    async fn entries(&self, log: AuditLogId) -> Result<Vec<AuditEntry>, StoreError> {
        let key = log_key(log);
        let conn = self.conn().await?;
        lines(&*conn, log, &key)
            .await?
            .iter()
            .map(|(seq, line)| parse_entry(&key, *seq, line))
            .collect()
    }

    async fn verify(&self, log: AuditLogId) -> Result<VerifyReport, StoreError> {
        let key = log_key(log);
        let mut conn = self.conn().await?;
        let tx = conn
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(db(format!("verifying the {log}")))?;
        let seal: Option<String> = tx
            .query_opt("SELECT seal FROM audit_logs WHERE log_key = $1", &[&key])
            .await
            .map_err(db(format!("reading the seal of the {log}")))?
            .and_then(|r| r.get(0));
        let lines: Vec<String> = lines(&tx, log, &key)
            .await?
            .into_iter()
            .map(|(_, l)| l)
            .collect();
        tx.commit()
            .await
            .map_err(db(format!("verifying the {log}")))?;
        let seal = seal.map(|s| parse_seal(&key, &s)).transpose()?;
        Ok(orca_store::verify::verify_log(
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
