//! [`ExecutionStore`] on PostgreSQL: headers and tasks (leases and resource locks are in
//! `locks`).

use std::collections::HashMap;

use async_trait::async_trait;
use orca_core::{Execution, ExecutionId, Holder, PlanId, StepId, Task};
use orca_store::AuditStore;
use orca_store::audit::NewAuditEntry;
use orca_store::common;
use orca_store::{
    ChangeCursor, ExecutionSnapshot, ExecutionStore, ExecutionSummary, ExpiredTask, Lease,
    LeaseInfo, Listing, ListingProblem, ResourceGuard, Revision, StoreError, TaskTransition,
    Transitioned, Versioned,
};

use crate::codec::{self, db_revision, decode, encode_redacted, tag};
use crate::group::Item;
use crate::write::Prepared;
use crate::{PgStore, db};

/// The header (step NULL) then its tasks in plan order, in one statement.
const SNAPSHOT: &str = "SELECT NULL::text, revision, doc, -1 AS ord FROM executions WHERE id = $1
     UNION ALL
     SELECT t.step_id, t.revision, t.doc, t.ord FROM tasks t
      WHERE t.execution_id = $1 AND EXISTS (SELECT 1 FROM executions WHERE id = $1)
     ORDER BY 4";

#[async_trait]
impl ExecutionStore for PgStore {
    fn stored_form(&self, document: serde_json::Value) -> serde_json::Value {
        self.inner
            .redactor
            .redact_document(document, orca_store::redaction::STRUCTURAL_KEYS)
    }

    async fn create_execution(
        &self,
        execution: &Execution,
        tasks: &[Task],
    ) -> Result<(), StoreError> {
        common::check_new_execution(execution, tasks)?;
        let id = execution.id();
        let what = common::exec_what(id);
        let key = id.to_string();
        let plan_id = execution.info().plan_id;
        let redactor = &self.inner.redactor;
        let header = encode_redacted(execution, &what, redactor)?;
        let mut steps = Vec::with_capacity(tasks.len());
        let mut ords = Vec::with_capacity(tasks.len());
        let mut statuses = Vec::with_capacity(tasks.len());
        let mut docs = Vec::with_capacity(tasks.len());
        for (i, t) in tasks.iter().enumerate() {
            steps.push(t.step_id().to_string());
            ords.push(i32::try_from(i).unwrap_or(i32::MAX));
            statuses.push(tag(&t.status()));
            docs.push(encode_redacted(t, &common::task_what(id, t), redactor)?);
        }
        let mut conn = self.conn().await?;
        let tx = conn
            .transaction()
            .await
            .map_err(db(format!("creating {what}")))?;
        let plan_exists = tx
            .query_opt(
                "SELECT 1 FROM plans WHERE id = $1 FOR SHARE",
                &[&plan_id.to_string()],
            )
            .await
            .map_err(db(format!("reading plan {plan_id}")))?
            .is_some();
        if !plan_exists {
            return Err(StoreError::NotFound {
                what: format!("plan {plan_id}"),
            });
        }
        let n = tx
            .execute(
                "INSERT INTO executions (id, plan_id, revision, stage, doc)
                 VALUES ($1, $2, 1, $3, $4) ON CONFLICT DO NOTHING",
                &[
                    &key,
                    &plan_id.to_string(),
                    &tag(&execution.stage()),
                    &header,
                ],
            )
            .await
            .map_err(db(format!("storing {what}")))?;
        if n == 0 {
            return Err(StoreError::AlreadyExists { what });
        }
        tx.execute(
            "INSERT INTO tasks (execution_id, step_id, ord, revision, status, doc)
             SELECT $1, s, o, 1, st, d
             FROM unnest($2::text[], $3::int4[], $4::text[], $5::text[]) AS t(s, o, st, d)",
            &[&key, &steps, &ords, &statuses, &docs],
        )
        .await
        .map_err(db(format!("storing the tasks of {what}")))?;
        tx.execute("SELECT pg_notify('orca_executions', $1)", &[&key])
            .await
            .map_err(db(format!("notifying the creation of {what}")))?;
        tx.commit()
            .await
            .map_err(db(format!("committing {what}")))?;
        Ok(())
    }

    async fn execution(&self, id: ExecutionId) -> Result<ExecutionSnapshot, StoreError> {
        let key = id.to_string();
        let what = common::exec_what(id);
        // One statement: one consistent snapshot of the header and its tasks, one round trip.
        let rows = self
            .conn()
            .await?
            .query_prepared(SNAPSHOT, &[&key])
            .await
            .map_err(db(format!("reading {what}")))?;
        let mut rows = rows.iter();
        let header = rows
            .next()
            .filter(|r| r.get::<_, Option<String>>(0).is_none())
            .ok_or_else(|| StoreError::NotFound { what: what.clone() })?;
        let execution = decode(
            "executions",
            &key,
            header.get(2),
            header.get(1),
            Execution::from_json,
        )?;
        let mut tasks = Vec::new();
        for r in rows {
            let step: Option<String> = r.get(0);
            let step = step.unwrap_or_default();
            tasks.push(decode(
                "tasks",
                &format!("{key}/{step}"),
                r.get(2),
                r.get(1),
                Task::from_json,
            )?);
        }
        Ok(ExecutionSnapshot { execution, tasks })
    }

    async fn execution_header(&self, id: ExecutionId) -> Result<Versioned<Execution>, StoreError> {
        let key = id.to_string();
        let mut conn = self.conn().await?;
        let stmt = conn
            .prepared("SELECT revision, doc FROM executions WHERE id = $1")
            .await
            .map_err(db(format!("reading execution {id}")))?;
        let row = conn
            .query_opt(&stmt, &[&key])
            .await
            .map_err(db(format!("reading execution {id}")))?
            .ok_or_else(|| StoreError::NotFound {
                what: common::exec_what(id),
            })?;
        decode(
            "executions",
            &key,
            row.get(1),
            row.get(0),
            Execution::from_json,
        )
    }

    async fn task(&self, id: ExecutionId, step: &StepId) -> Result<Versioned<Task>, StoreError> {
        let key = id.to_string();
        let mut conn = self.conn().await?;
        let stmt = conn
            .prepared("SELECT revision, doc FROM tasks WHERE execution_id = $1 AND step_id = $2")
            .await
            .map_err(db(format!("reading task {step} of {id}")))?;
        let row = conn
            .query_opt(&stmt, &[&key, &step.to_string()])
            .await
            .map_err(db(format!("reading task {step} of {id}")))?;
        let Some(row) = row else {
            return Err(StoreError::NotFound {
                what: format!("task {step} of {id}"),
            });
        };
        decode(
            "tasks",
            &format!("{key}/{step}"),
            row.get(1),
            row.get(0),
            Task::from_json,
        )
    }

    async fn changed_tasks(
        &self,
        id: ExecutionId,
        known: &[Revision],
    ) -> Result<Vec<(usize, Versioned<Task>)>, StoreError> {
        Ok(crate::catch_up::changed_since(self, id, known, None)
            .await?
            .0)
    }

    async fn changed_tasks_since(
        &self,
        id: ExecutionId,
        known: &[Revision],
        since: Option<ChangeCursor>,
    ) -> Result<(Vec<(usize, Versioned<Task>)>, Option<ChangeCursor>), StoreError> {
        crate::catch_up::changed_since(self, id, known, since).await
    }

    async fn update_execution(
        &self,
        execution: &Execution,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        let what = common::exec_what(execution.id());
        let mut conn = self.conn().await?;
        let tx = conn
            .transaction()
            .await
            .map_err(db(format!("updating {what}")))?;
        let next = write_header(self, &tx, execution, expected).await?;
        tx.commit()
            .await
            .map_err(db(format!("committing {what}")))?;
        Ok(next)
    }

    async fn update_task(
        &self,
        execution: ExecutionId,
        task: &Task,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        let task = Prepared::new(self, execution, task, expected)?;
        crate::write::write_task(self, &task).await
    }

    /// One statement, one commit (`orca_write`, ADR 0026): both or neither, whatever the order;
    /// grouped with the other writes of the execution's log in flight (`group`).
    async fn update_task_with_audit(
        &self,
        audit: &dyn AuditStore,
        transition: TaskTransition,
    ) -> Result<Transitioned, StoreError> {
        self.update_tasks_with_audit(audit, vec![transition])
            .await
            .map_err(|f| f.error)?
            .pop()
            .ok_or_else(|| StoreError::backend("writing a task and its entry", "nothing written"))
    }

    async fn end_execution(
        &self,
        _audit: &dyn AuditStore,
        execution: &Execution,
        expected: Revision,
        entry: NewAuditEntry,
    ) -> Result<Transitioned, StoreError> {
        // This store is its own audit store: one transaction (see `ending`).
        self.end(execution, expected, &entry).await
    }

    fn lease_held(&self, lease: &Lease) -> bool {
        crate::locks::lease_held(lease)
    }

    async fn renew_task_leases(&self, holder: &Holder) -> Result<(), StoreError> {
        crate::locks::renew_task_leases(self, holder).await
    }

    fn task_lease(&self) -> Option<std::time::Duration> {
        Some(self.inner.task_lease)
    }

    async fn expired_tasks(&self, execution: ExecutionId) -> Result<Vec<ExpiredTask>, StoreError> {
        crate::locks::expired_tasks(self, execution).await
    }

    async fn list_executions(
        &self,
        plan: Option<PlanId>,
    ) -> Result<Listing<ExecutionSummary>, StoreError> {
        let conn = self.conn().await?;
        let plan_key = plan.map(|p| p.to_string());
        let completed: HashMap<String, i64> = conn
            .query(
                "SELECT t.execution_id, count(*) FILTER (WHERE t.status = 'completed')
                 FROM tasks t JOIN executions e ON e.id = t.execution_id
                 WHERE $1::text IS NULL OR e.plan_id = $1
                 GROUP BY t.execution_id",
                &[&plan_key],
            )
            .await
            .map_err(db("counting completed tasks"))?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let rows = conn
            .query(
                "SELECT id, revision, doc FROM executions WHERE $1::text IS NULL OR plan_id = $1",
                &[&plan_key],
            )
            .await
            .map_err(db("listing executions"))?;
        let mut items = Vec::with_capacity(rows.len());
        let mut problems = Vec::new();
        for row in &rows {
            let key: String = row.get(0);
            match decode(
                "executions",
                &key,
                row.get(2),
                row.get(1),
                Execution::from_json,
            ) {
                Ok(e) => {
                    let mut summary = common::execution_summary(&e.value, []);
                    summary.completed = completed
                        .get(&key)
                        .and_then(|n| usize::try_from(*n).ok())
                        .unwrap_or(0);
                    items.push(summary);
                }
                Err(e) => problems.push(ListingProblem {
                    location: codec::location("executions", &key).display().to_string(),
                    message: e.to_string(),
                }),
            }
        }
        common::sort_executions(&mut items);
        Ok(Listing { items, problems })
    }

    async fn acquire_lease(
        &self,
        execution: ExecutionId,
        holder: &Holder,
    ) -> Result<Lease, StoreError> {
        crate::locks::acquire_lease(self, execution, holder).await
    }

    async fn acquire_shared_lease(
        &self,
        execution: ExecutionId,
        holder: &Holder,
    ) -> Result<Option<Lease>, StoreError> {
        crate::locks::acquire_shared_lease(self, execution, holder).await
    }

    async fn lease(&self, execution: ExecutionId) -> Result<Option<LeaseInfo>, StoreError> {
        crate::locks::lease(self, execution).await
    }

    async fn renew_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        crate::locks::renew_lease(lease).await
    }

    async fn try_lock_resources(
        &self,
        names: &[String],
        holder: &Holder,
    ) -> Result<Option<ResourceGuard>, StoreError> {
        crate::locks::try_lock_resources(self, names, holder).await
    }
}

impl PgStore {
    /// Several task transitions, each with its entry, in order, as ONE transaction (grouped
    /// with the other writes of the log in flight): all or nothing — a refusal of any one writes
    /// nothing and names it in [`BatchFailed::index`]. Transitions of several executions are
    /// written one execution after the other. [`ExecutionStore::update_task_with_audit`] is
    /// the batch of one.
    ///
    /// # Errors
    ///
    /// The transition refused or failed, with what was written before it.
    pub async fn update_tasks_with_audit(
        &self,
        audit: &dyn AuditStore,
        transitions: Vec<TaskTransition>,
    ) -> Result<Vec<Transitioned>, BatchFailed> {
        let Some(log) = transitions.first().map(TaskTransition::log) else {
            return Ok(Vec::new());
        };
        if transitions.iter().any(|t| t.log() != log) {
            // Several executions: one write each, in order (the port's default).
            let mut written = Vec::with_capacity(transitions.len());
            for (index, t) in transitions.into_iter().enumerate() {
                match Box::pin(self.update_tasks_with_audit(audit, vec![t])).await {
                    Ok(mut t) => written.append(&mut t),
                    Err(f) => {
                        return Err(BatchFailed {
                            written,
                            index,
                            error: f.error,
                        });
                    }
                }
            }
            return Ok(written);
        }
        let mut items = Vec::with_capacity(transitions.len());
        for (index, t) in transitions.into_iter().enumerate() {
            let task =
                Prepared::new(self, t.execution_id, &t.task, t.expected).map_err(|error| {
                    BatchFailed {
                        written: Vec::new(),
                        index,
                        error,
                    }
                })?;
            items.push(Item {
                task: Some(task),
                entry: t.entry,
            });
        }
        let done = crate::group::write(self, log, items)
            .await
            .map_err(|(index, error)| BatchFailed {
                written: Vec::new(),
                index,
                error,
            })?;
        done.into_iter()
            .enumerate()
            .map(|(index, (revision, entry))| match revision {
                Some(revision) => Ok(Transitioned { revision, entry }),
                None => Err(BatchFailed {
                    written: Vec::new(),
                    index,
                    error: StoreError::backend("writing a task and its entry", "no revision"),
                }),
            })
            .collect()
    }
}

/// Why [`PgStore::update_tasks_with_audit`] did not write every transition.
#[derive(Debug)]
pub struct BatchFailed {
    /// The transitions written before the failure, in order (always empty for a backend that
    /// writes the batch as one write: all or nothing).
    pub written: Vec<Transitioned>,
    /// The position in the batch of the transition that was refused or failed.
    pub index: usize,
    /// Why.
    pub error: StoreError,
}

impl std::fmt::Display for BatchFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "transition {} of the batch ({} written before it): {}",
            self.index,
            self.written.len(),
            self.error
        )
    }
}

impl std::error::Error for BatchFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Replaces `execution`'s header in `tx` if the stored one is at `expected` (its row locked
/// `FOR UPDATE`, the update checked as every store checks it), and wakes workers and watchers
/// when its stage changes (on commit). Returns the new revision; `tx` is not committed here.
pub(crate) async fn write_header(
    store: &PgStore,
    tx: &tokio_postgres::Transaction<'_>,
    execution: &Execution,
    expected: Revision,
) -> Result<Revision, StoreError> {
    let id = execution.id();
    let key = id.to_string();
    let what = common::exec_what(id);
    let doc = encode_redacted(execution, &what, &store.inner.redactor)?;
    let (stored, next) = codec::locked_at(
        tx,
        "executions",
        &key,
        &what,
        expected,
        Execution::from_json,
    )
    .await?;
    common::check_execution_update(&stored.value, execution)?;
    tx.execute(
        "UPDATE executions SET revision = $2, stage = $3, doc = $4 WHERE id = $1",
        &[&key, &db_revision(next), &tag(&execution.stage()), &doc],
    )
    .await
    .map_err(db(format!("writing {what}")))?;
    if stored.value.stage() != execution.stage() {
        // Wakes workers and watchers (LISTEN orca_executions); delivered on commit.
        tx.execute("SELECT pg_notify('orca_executions', $1)", &[&key])
            .await
            .map_err(db(format!("notifying the change of {what}")))?;
    }
    Ok(next)
}
