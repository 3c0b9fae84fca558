//! Moving a store between PostgreSQL and the file layout as it is stored: documents with
//! their revisions, audit logs line for line with their seals (so the chain and signatures
//! verify the same on either side). Used by `orca store export` / `import`.

use orca_core::Plan;
use orca_store::audit::Seal;
use orca_store::common;
use orca_store::{AuditLogId, ExecutionSnapshot, StoreError, Versioned};

use crate::codec::{db_revision, encode, encode_redacted, log_key, tag};
use crate::{PgStore, db};

/// An audit log as stored: its exact lines, in order, and its seal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawLog {
    /// Which log.
    pub log: AuditLogId,
    /// The JSON lines, as hashed.
    pub lines: Vec<String>,
    /// Its seal, if sealed.
    pub seal: Option<Seal>,
}

impl PgStore {
    /// A log's stored lines and seal, untouched — after what a writer staged and did not live
    /// to chain is chained (as every reader does): an export holds every entry written.
    ///
    /// # Errors
    ///
    /// The database cannot be read, or the seal is not one.
    pub async fn raw_log(&self, log: AuditLogId) -> Result<RawLog, StoreError> {
        let key = log_key(log);
        crate::chain::chain_leftovers(self, log, &key).await?;
        let conn = self.conn().await?;
        let seal: Option<String> = conn
            .query_opt("SELECT seal FROM audit_logs WHERE log_key = $1", &[&key])
            .await
            .map_err(db(format!("reading the seal of the {log}")))?
            .and_then(|r| r.get(0));
        let lines = conn
            .query(
                "SELECT line FROM audit_entries WHERE log_key = $1 ORDER BY seq",
                &[&key],
            )
            .await
            .map_err(db(format!("reading the {log}")))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let seal = seal
            .map(|s| {
                serde_json::from_str(&s).map_err(|e| {
                    crate::codec::corrupt("audit_logs", &key, format!("not a seal: {e}"))
                })
            })
            .transpose()?;
        Ok(RawLog { log, lines, seal })
    }

    /// Stores a plan at its revision. `false`: a plan with this id is already stored
    /// (nothing is changed).
    ///
    /// # Errors
    ///
    /// The database cannot be written.
    pub async fn import_plan(&self, plan: &Versioned<Plan>) -> Result<bool, StoreError> {
        let what = common::plan_what(&plan.value);
        let doc = encode(&plan.value, &what)?;
        let conn = self.conn().await?;
        let n = conn
            .execute(
                "INSERT INTO plans (id, revision, doc) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                &[
                    &plan.value.id().to_string(),
                    &db_revision(plan.revision),
                    &doc,
                ],
            )
            .await
            .map_err(db(format!("importing {what}")))?;
        Ok(n == 1)
    }

    /// Stores an execution and its tasks at their revisions (its plan must be stored).
    /// `false`: already stored (nothing is changed).
    ///
    /// # Errors
    ///
    /// The plan is missing, or the database cannot be written.
    pub async fn import_execution(&self, snap: &ExecutionSnapshot) -> Result<bool, StoreError> {
        let e = &snap.execution.value;
        let id = e.id();
        let key = id.to_string();
        let what = common::exec_what(id);
        let redactor = &self.inner.redactor;
        let header = encode_redacted(e, &what, redactor)?;
        let mut conn = self.conn().await?;
        let tx = conn
            .transaction()
            .await
            .map_err(db(format!("importing {what}")))?;
        let plan_id = e.info().plan_id.to_string();
        if tx
            .query_opt("SELECT 1 FROM plans WHERE id = $1", &[&plan_id])
            .await
            .map_err(db(format!("reading plan {plan_id}")))?
            .is_none()
        {
            return Err(StoreError::NotFound {
                what: format!("plan {plan_id} (of {what})"),
            });
        }
        let n = tx
            .execute(
                "INSERT INTO executions (id, plan_id, revision, stage, doc)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                &[
                    &key,
                    &plan_id,
                    &db_revision(snap.execution.revision),
                    &tag(&e.stage()),
                    &header,
                ],
            )
            .await
            .map_err(db(format!("importing {what}")))?;
        if n == 0 {
            return Ok(false);
        }
        for (i, t) in snap.tasks.iter().enumerate() {
            let twhat = common::task_what(id, &t.value);
            let doc = encode_redacted(&t.value, &twhat, redactor)?;
            tx.execute(
                "INSERT INTO tasks (execution_id, step_id, ord, revision, status, doc)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &key,
                    &t.value.step_id().to_string(),
                    &i32::try_from(i).unwrap_or(i32::MAX),
                    &db_revision(t.revision),
                    &tag(&t.value.status()),
                    &doc,
                ],
            )
            .await
            .map_err(db(format!("importing {twhat}")))?;
        }
        tx.commit()
            .await
            .map_err(db(format!("committing {what}")))?;
        Ok(true)
    }

    /// Stores a log line for line with its seal. `false`: the log already has entries or a
    /// seal here (nothing is changed).
    ///
    /// # Errors
    ///
    /// The database cannot be written.
    pub async fn import_log(&self, raw: &RawLog) -> Result<bool, StoreError> {
        let log = raw.log;
        let key = log_key(log);
        let id = encode(&log, &log.to_string())?;
        let seal = raw
            .seal
            .as_ref()
            .map(|s| encode(s, &format!("the seal of the {log}")))
            .transpose()?;
        let mut conn = self.conn().await?;
        let tx = conn
            .transaction()
            .await
            .map_err(db(format!("importing the {log}")))?;
        tx.execute(
            "INSERT INTO audit_logs (log_key, log_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&key, &id],
        )
        .await
        .map_err(db(format!("importing the {log}")))?;
        let row = tx
            .query_one(
                "SELECT seal IS NOT NULL OR EXISTS (SELECT 1 FROM audit_entries WHERE log_key = $1)
                 FROM audit_logs WHERE log_key = $1 FOR UPDATE",
                &[&key],
            )
            .await
            .map_err(db(format!("importing the {log}")))?;
        let present: bool = row.get(0);
        if present {
            return Ok(false);
        }
        for (i, line) in raw.lines.iter().enumerate() {
            let seq = i64::try_from(i).unwrap_or(i64::MAX);
            tx.execute(
                "INSERT INTO audit_entries (log_key, seq, line) VALUES ($1, $2, $3)",
                &[&key, &seq, line],
            )
            .await
            .map_err(db(format!("importing entry {i} of the {log}")))?;
        }
        tx.execute(
            "UPDATE audit_logs SET seal = $2 WHERE log_key = $1",
            &[&key, &seal],
        )
        .await
        .map_err(db(format!("importing the seal of the {log}")))?;
        tx.commit()
            .await
            .map_err(db(format!("committing the {log}")))?;
        Ok(true)
    }
}
