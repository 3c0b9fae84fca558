//! Ending an execution in ONE transaction: its terminal header, the entry that records the
//! ending and the log's seal (`ExecutionStore::end_execution`). Written apart, a worker killed
//! after the header and before the seal left an ended execution whose log was neither ended
//! nor sealed — which `audit verify` rightly takes for a deleted seal, and nobody repaired.
//!
//! Lock order, the same as every other writer's, so an ending cannot deadlock with them: the
//! execution's row (task writes hold it `FOR SHARE` and wait), the log's chainer lock (no
//! chaining meanwhile), the log's row (stagings and appends wait). The ending entry is staged
//! and chained with whatever other writers staged before it, last; the seal covers them all.

use orca_core::Execution;
use orca_store::audit::NewAuditEntry;
use orca_store::common;
use orca_store::{Revision, StoreError, Transitioned};

use crate::audit::{LINES, LOCK_LOG, SET_SEAL, chain_and_seal, parsed};
use crate::codec::{encode, log_key};
use crate::group::NEW_LOG;
use crate::{PgStore, chain, db};

const STAGE_ONE: &str = "INSERT INTO audit_staged (log_key, entry) VALUES ($1, $2)";

impl PgStore {
    /// See the module.
    pub(crate) async fn end(
        &self,
        execution: &Execution,
        expected: Revision,
        entry: &NewAuditEntry,
    ) -> Result<Transitioned, StoreError> {
        let log = common::ending_log(execution)?;
        let id = execution.id();
        let what = common::exec_what(id);
        let log_key = log_key(log);
        let log_id = encode(&log, &log.to_string())?;
        let staged_entry = chain::staged_text(self, log, entry)?;
        let ending = format!("ending {what}");
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(db(ending.clone()))?;
        // An ending always changes the stage: workers and watchers are woken on commit.
        let next = crate::executions::write_header(self, &tx, execution, expected).await?;
        let (class, lock_id) = chain::lock_keys(&log_key);
        tx.execute(chain::LOCK, &[&class, &lock_id])
            .await
            .map_err(db(ending.clone()))?;
        tx.execute(NEW_LOG, &[&log_key, &log_id])
            .await
            .map_err(db(format!("creating the {log}")))?;
        let sealed: Option<String> = tx
            .query_one(LOCK_LOG, &[&log_key])
            .await
            .and_then(|r| r.try_get(0))
            .map_err(db(format!("locking the {log}")))?;
        if sealed.is_some() {
            // Dropped uncommitted: nothing of the above is written.
            return Err(StoreError::Immutable(format!(
                "the {log} is sealed already: {what} cannot end again"
            )));
        }
        tx.execute(STAGE_ONE, &[&log_key, &staged_entry])
            .await
            .map_err(db(format!("writing the ending entry of the {log}")))?;
        let rows = tx
            .query(LINES, &[&log_key])
            .await
            .map_err(db(format!("reading the {log}")))?;
        let staged = tx
            .query(chain::STAGED, &[&log_key])
            .await
            .map_err(db(format!("reading the staged entries of the {log}")))?;
        let entries = parsed(&log_key, log, &rows)?;
        let staged = chain::staged_rows(&staged, log)?;
        let (_, text, mut entries) = chain_and_seal(
            self,
            &tx,
            log,
            &log_key,
            entries,
            &staged,
            chain::INSERT,
            chain::UNSTAGE,
        )
        .await?;
        tx.execute(SET_SEAL, &[&log_key, &text])
            .await
            .map_err(db(format!("sealing the {log}")))?;
        tx.commit()
            .await
            .map_err(db(format!("committing {ending}")))?;
        // Staged last, under the locks: the ending entry is the log's last.
        let entry = entries
            .pop()
            .ok_or_else(|| StoreError::backend(ending, "no entry written"))?;
        Ok(Transitioned {
            revision: next,
            entry,
        })
    }
}
