//! The port's traits ([`PlanStore`], [`ExecutionStore`], [`AuditStore`]) on [`FileStore`]:
//! each method runs one blocking operation of [`Inner`] off the async runtime.

use std::sync::Arc;

use async_trait::async_trait;
use orca_core::{Execution, ExecutionId, Holder, Plan, PlanId, StepId, Task};
use time::OffsetDateTime;

use super::atomic::{ensure_dir, with_lock};
use super::audit_log::{parse_entries, read_seal};
use super::codec::{encode, encode_redacted, redacted_document};
use super::layout::seal_file;
use super::lease::{LeaseFileGuard, LeaseRecord, renew_lease_file};
use super::{FileStore, Inner};
use crate::audit::{AuditEntry, NewAuditEntry, Seal, VerifyReport};
use crate::common;
use crate::error::StoreError;
use crate::port::{
    AuditLogId, AuditStore, ExecutionSnapshot, ExecutionStore, ExecutionSummary, Lease, LeaseInfo,
    Listing, PlanStore, PlanSummary, ResourceGuard, Revision, TaskTransition, Transitioned,
    Versioned,
};
use crate::signing::Authority;

#[async_trait]
impl PlanStore for FileStore {
    async fn create_plan(&self, plan: &Plan) -> Result<Revision, StoreError> {
        let plan = plan.clone();
        self.run(move |inner| {
            let path = inner.plan_file(plan.id());
            let bytes = encode(&plan, Revision::FIRST, &path)?;
            inner.create_atomic(&path, &bytes, || common::plan_what(&plan))?;
            Ok(Revision::FIRST)
        })
        .await
    }

    async fn plan(&self, id: PlanId) -> Result<Versioned<Plan>, StoreError> {
        self.run(move |inner| inner.read_plan(id)).await
    }

    async fn update_plan(&self, plan: &Plan, expected: Revision) -> Result<Revision, StoreError> {
        let plan = plan.clone();
        self.run(move |inner| {
            let id = plan.id();
            if !inner.plan_file(id).is_file() {
                return Err(StoreError::NotFound {
                    what: common::plan_what(&plan),
                });
            }
            ensure_dir(&inner.plan_dir(id))?;
            with_lock(&inner.plan_dir(id).join("plan.lock"), || {
                let stored = inner.read_plan(id)?;
                let next = common::compare_and_next(
                    || common::plan_what(&plan),
                    expected,
                    stored.revision,
                )?;
                common::check_plan_update(&stored.value, &plan)?;
                let path = inner.plan_file(id);
                inner.write_atomic(&path, &encode(&plan, next, &path)?)?;
                Ok(next)
            })
        })
        .await
    }

    async fn list_plans(&self) -> Result<Listing<PlanSummary>, StoreError> {
        self.run(Inner::list_plans).await
    }
}

#[async_trait]
impl ExecutionStore for FileStore {
    fn stored_form(&self, document: serde_json::Value) -> serde_json::Value {
        self.inner
            .redactor
            .redact_document(document, crate::redaction::STRUCTURAL_KEYS)
    }

    async fn create_execution(
        &self,
        execution: &Execution,
        tasks: &[Task],
    ) -> Result<(), StoreError> {
        common::check_new_execution(execution, tasks)?;
        let execution = execution.clone();
        let tasks = tasks.to_vec();
        self.run(move |inner| {
            let id = execution.id();
            let plan = execution.info().plan_id;
            if !inner.plan_file(plan).is_file() {
                return Err(StoreError::NotFound {
                    what: format!("plan {plan}"),
                });
            }
            let header_path = inner.exec_file(plan, id);
            if header_path.exists() {
                return Err(StoreError::AlreadyExists {
                    what: common::exec_what(id),
                });
            }
            // The tasks first (one snapshot file, durable), the header last: an execution
            // exists once its header does.
            ensure_dir(&inner.exec_sub(plan, id))?;
            let path = inner.snapshot_file(plan, id);
            let docs = tasks
                .iter()
                .map(|t| {
                    Ok((
                        redacted_document(t, &path, &inner.redactor)?,
                        Revision::FIRST,
                    ))
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            inner.write_snapshot(plan, id, docs)?;
            let bytes =
                encode_redacted(&execution, Revision::FIRST, &header_path, &inner.redactor)?;
            inner.create_atomic(&header_path, &bytes, || common::exec_what(id))?;
            inner.write_atomic(&inner.index_file(id), plan.to_string().as_bytes())?;
            inner.remember(id, plan);
            Ok(())
        })
        .await
    }

    async fn execution(&self, id: ExecutionId) -> Result<ExecutionSnapshot, StoreError> {
        self.run(move |inner| {
            let (plan, header) = inner.read_header(id)?;
            inner.snapshot(plan, header)
        })
        .await
    }

    async fn execution_header(&self, id: ExecutionId) -> Result<Versioned<Execution>, StoreError> {
        self.run(move |inner| inner.read_header(id).map(|(_, header)| header))
            .await
    }

    async fn task(&self, id: ExecutionId, step: &StepId) -> Result<Versioned<Task>, StoreError> {
        let step = step.clone();
        self.run(move |inner| {
            let (plan, header) = inner.read_header(id)?;
            if !header.value.info().steps.contains(&step) {
                return Err(StoreError::NotFound {
                    what: format!("task {step} of {id}"),
                });
            }
            inner.read_task(plan, id, &step)
        })
        .await
    }

    async fn update_execution(
        &self,
        execution: &Execution,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        let execution = execution.clone();
        self.run(move |inner| {
            let id = execution.id();
            let (plan, _) = inner.read_header(id)?;
            with_lock(&inner.exec_sub(plan, id).join("exec.lock"), || {
                let stored =
                    inner
                        .read_header_at(plan, id)?
                        .ok_or_else(|| StoreError::NotFound {
                            what: common::exec_what(id),
                        })?;
                let next =
                    common::compare_and_next(|| common::exec_what(id), expected, stored.revision)?;
                common::check_execution_update(&stored.value, &execution)?;
                let path = inner.exec_file(plan, id);
                let bytes = encode_redacted(&execution, next, &path, &inner.redactor)?;
                inner.write_atomic(&path, &bytes)?;
                Ok(next)
            })
        })
        .await
    }

    async fn update_task(
        &self,
        execution: ExecutionId,
        task: &Task,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        let task = task.clone();
        self.run(move |inner| Ok(inner.update_task(execution, &task, expected, None)?.0))
            .await
    }

    async fn update_task_with_audit(
        &self,
        _audit: &dyn AuditStore,
        transition: TaskTransition,
    ) -> Result<Transitioned, StoreError> {
        self.run(move |inner| {
            let TaskTransition {
                plan_id,
                execution_id,
                task,
                expected,
                entry,
                ..
            } = transition;
            let (revision, entry) =
                inner.update_task(execution_id, &task, expected, Some((plan_id, entry)))?;
            let entry = entry.ok_or_else(|| {
                StoreError::backend(
                    "appending to an audit log",
                    std::io::Error::other("the batch returned no entry"),
                )
            })?;
            Ok(Transitioned { revision, entry })
        })
        .await
    }

    async fn list_executions(
        &self,
        plan: Option<PlanId>,
    ) -> Result<Listing<ExecutionSummary>, StoreError> {
        self.run(move |inner| {
            let mut items = Vec::new();
            let mut problems = Vec::new();
            match plan {
                Some(p) => inner.executions_of(p, &mut items, &mut problems),
                None => {
                    for p in inner.plan_dirs()? {
                        inner.executions_of(p, &mut items, &mut problems);
                    }
                }
            }
            common::sort_executions(&mut items);
            Ok(Listing { items, problems })
        })
        .await
    }

    async fn acquire_lease(
        &self,
        execution: ExecutionId,
        holder: &Holder,
    ) -> Result<Lease, StoreError> {
        let holder = holder.clone();
        self.run(move |inner| inner.acquire_lease(execution, &holder))
            .await
    }

    async fn lease(&self, execution: ExecutionId) -> Result<Option<LeaseInfo>, StoreError> {
        self.run(move |inner| {
            let plan = inner.locate(execution)?;
            inner.lease_of(plan, execution)
        })
        .await
    }

    async fn renew_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let Some(guard) = lease.backend_guard().downcast_ref::<LeaseFileGuard>() else {
            return Ok(());
        };
        let file = Arc::clone(&guard.file);
        let record = LeaseRecord {
            format_version: orca_core::FormatVersion,
            holder: lease.info().holder.clone(),
            acquired_at: lease.info().acquired_at,
            renewed_at: Some(OffsetDateTime::now_utc()),
        };
        self.run(move |_| renew_lease_file(&file, &record)).await
    }

    async fn try_lock_resources(
        &self,
        names: &[String],
        _holder: &Holder,
    ) -> Result<Option<ResourceGuard>, StoreError> {
        let names = names.to_vec();
        self.run(move |inner| inner.try_lock_resources(&names))
            .await
    }
}

#[async_trait]
impl AuditStore for FileStore {
    async fn append(
        &self,
        log: AuditLogId,
        entry: NewAuditEntry,
    ) -> Result<AuditEntry, StoreError> {
        self.run(move |inner| {
            let entry = NewAuditEntry {
                data: inner.redactor.redact_json(entry.data),
                ..entry
            };
            inner.append(log, entry)
        })
        .await
    }

    async fn seal(&self, log: AuditLogId) -> Result<Seal, StoreError> {
        self.run(move |inner| inner.seal(log)).await
    }

    async fn entries(&self, log: AuditLogId) -> Result<Vec<AuditEntry>, StoreError> {
        self.run(move |inner| parse_entries(&inner.audit_file(log), &inner.audit_lines(log)?))
            .await
    }

    async fn verify(&self, log: AuditLogId) -> Result<VerifyReport, StoreError> {
        self.run(move |inner| {
            let lines = inner.audit_lines(log)?;
            let seal = read_seal(&seal_file(&inner.audit_file(log)))?;
            Ok(crate::verify::verify_log(
                log,
                &lines,
                seal.as_ref(),
                &inner.authority,
            ))
        })
        .await
    }

    async fn audit_logs(&self) -> Result<Vec<AuditLogId>, StoreError> {
        self.run(Inner::audit_logs).await
    }

    fn authority(&self) -> Authority {
        self.inner.authority.clone()
    }
}
