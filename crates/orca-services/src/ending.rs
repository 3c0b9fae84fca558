//! Ending an execution: its terminal header, the entry that records the ending and the log's
//! seal, as ONE store write where the store can ([`orca_store::ExecutionStore::end_execution`]).
//! Written one after the other, a process killed between the header and the seal left an
//! ended execution whose log was neither ended nor sealed, which `audit verify` must report as
//! a deleted seal.

use orca_core::{AuditKind, Execution, ExecutionId, UNDER_EXECUTION};
use orca_store::StoreError;
use orca_store::Versioned;
use orca_store::audit::NewAuditEntry;
use serde_json::Value;

use crate::error::{Result, ServiceError};
use crate::execution::{ExecutionService, HEADER_RETRIES};

impl ExecutionService {
    /// Ends execution `id` with the header `change` makes of the stored one, `kind`'s entry
    /// (`data`) and the seal, retried like [`ExecutionService::update_header`] on a concurrent
    /// change of the header. `None` from `change`: it has ended already, and nothing is written.
    pub(crate) async fn end_header<F>(
        &self,
        id: ExecutionId,
        mut change: F,
        kind: AuditKind,
        data: &Value,
    ) -> Result<Versioned<Execution>>
    where
        F: FnMut(Execution) -> Result<Option<Execution>> + Send,
    {
        let mut last_conflict = None;
        for _ in 0..HEADER_RETRIES {
            let Versioned { value, revision } = self.store().execution_header(id).await?;
            let Some(next) = change(value.clone())? else {
                return Ok(Versioned { value, revision });
            };
            let entry = NewAuditEntry::new(kind, data.clone()).with_parent(UNDER_EXECUTION);
            let store = self.store();
            let written = store.end_execution(&**store, &next, revision, entry).await;
            match self.refused_if_tampered(&next, written).await {
                Ok(t) => {
                    return Ok(Versioned {
                        value: next,
                        revision: t.revision,
                    });
                }
                Err(e @ StoreError::Conflict { .. }) => last_conflict = Some(e),
                Err(e) => return Err(e.into()),
            }
        }
        tracing::warn!(execution = %id, error = ?last_conflict, "the header kept changing concurrently");
        Err(ServiceError::Contended { execution: id })
    }
}
