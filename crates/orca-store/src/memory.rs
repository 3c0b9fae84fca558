//! The in-memory backend: the same semantics as the file store (CAS, immutability, leases,
//! resource locks, audit), within one process. For tests and embedding.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use orca_core::{Execution, ExecutionId, Holder, Plan, PlanId, Task};
use time::OffsetDateTime;

use crate::audit::{self, AuditEntry, NewAuditEntry, Seal, VerifyReport};
use crate::common;
use crate::error::StoreError;
use crate::port::{
    AuditLogId, AuditStore, ExecutionSnapshot, ExecutionStore, ExecutionSummary, Lease, LeaseInfo,
    Listing, PlanStore, PlanSummary, ResourceGuard, Revision, Versioned,
};

/// The in-memory store. Cheap to clone: clones share the same data.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
    authority: crate::signing::Authority,
}

#[derive(Debug, Default)]
struct Inner {
    plans: HashMap<PlanId, Versioned<Plan>>,
    executions: HashMap<ExecutionId, MemExecution>,
    leases: HashMap<ExecutionId, LeaseSlot>,
    dead: HashSet<String>,
    resources: HashMap<String, u64>,
    logs: BTreeMap<AuditLogId, MemLog>,
    next_guard: u64,
}

#[derive(Debug)]
struct MemExecution {
    header: Versioned<Execution>,
    tasks: Vec<Versioned<Task>>,
}

#[derive(Debug)]
struct LeaseSlot {
    holder: Holder,
    acquired_at: OffsetDateTime,
    guard: u64,
}

#[derive(Debug, Default)]
struct MemLog {
    entries: Vec<AuditEntry>,
    seal: Option<Seal>,
}

struct LeaseGuard {
    inner: Arc<Mutex<Inner>>,
    execution: ExecutionId,
    guard: u64,
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner
            .leases
            .get(&self.execution)
            .is_some_and(|s| s.guard == self.guard)
        {
            inner.leases.remove(&self.execution);
        }
    }
}

struct ResourcesGuard {
    inner: Arc<Mutex<Inner>>,
    names: Vec<String>,
    guard: u64,
}

impl Drop for ResourcesGuard {
    fn drop(&mut self) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for name in &self.names {
            if inner.resources.get(name) == Some(&self.guard) {
                inner.resources.remove(name);
            }
        }
    }
}

impl MemoryStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The same store, signing seals with (and checking signatures against) `authority`.
    #[must_use]
    pub fn with_authority(mut self, authority: crate::signing::Authority) -> Self {
        self.authority = authority;
        self
    }

    /// Marks a holder's process as dead (for tests): its leases become stale and can be taken
    /// over, as the file store does when a process dies.
    pub fn mark_dead(&self, holder: &Holder) {
        self.lock().dead.insert(holder.token.clone());
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Inner {
    fn lease_info(&self, slot: &LeaseSlot) -> LeaseInfo {
        LeaseInfo {
            holder: slot.holder.clone(),
            acquired_at: slot.acquired_at,
            stale: self.dead.contains(&slot.holder.token),
            renewed_at: None,
        }
    }

    fn guard_id(&mut self) -> u64 {
        self.next_guard += 1;
        self.next_guard
    }
}

fn not_found(what: String) -> StoreError {
    StoreError::NotFound { what }
}

#[async_trait]
impl PlanStore for MemoryStore {
    async fn create_plan(&self, plan: &Plan) -> Result<Revision, StoreError> {
        let mut inner = self.lock();
        if inner.plans.contains_key(&plan.id()) {
            return Err(StoreError::AlreadyExists {
                what: common::plan_what(plan),
            });
        }
        inner.plans.insert(
            plan.id(),
            Versioned {
                value: plan.clone(),
                revision: Revision::FIRST,
            },
        );
        Ok(Revision::FIRST)
    }

    async fn plan(&self, id: PlanId) -> Result<Versioned<Plan>, StoreError> {
        self.lock()
            .plans
            .get(&id)
            .cloned()
            .ok_or_else(|| not_found(format!("plan {id}")))
    }

    async fn update_plan(&self, plan: &Plan, expected: Revision) -> Result<Revision, StoreError> {
        let mut inner = self.lock();
        let stored = inner
            .plans
            .get_mut(&plan.id())
            .ok_or_else(|| not_found(common::plan_what(plan)))?;
        let next = common::compare_and_next(|| common::plan_what(plan), expected, stored.revision)?;
        common::check_plan_update(&stored.value, plan)?;
        stored.revision = next;
        stored.value = plan.clone();
        Ok(stored.revision)
    }

    async fn list_plans(&self) -> Result<Listing<PlanSummary>, StoreError> {
        let inner = self.lock();
        let mut counts: HashMap<PlanId, usize> = HashMap::new();
        for e in inner.executions.values() {
            *counts.entry(e.header.value.info().plan_id).or_default() += 1;
        }
        let mut items: Vec<PlanSummary> = inner
            .plans
            .values()
            .map(|p| {
                common::plan_summary(&p.value, counts.get(&p.value.id()).copied().unwrap_or(0))
            })
            .collect();
        common::sort_plans(&mut items);
        Ok(Listing {
            items,
            problems: Vec::new(),
        })
    }
}

#[async_trait]
impl ExecutionStore for MemoryStore {
    async fn create_execution(
        &self,
        execution: &Execution,
        tasks: &[Task],
    ) -> Result<(), StoreError> {
        common::check_new_execution(execution, tasks)?;
        let mut inner = self.lock();
        let plan_id = execution.info().plan_id;
        if !inner.plans.contains_key(&plan_id) {
            return Err(not_found(format!("plan {plan_id}")));
        }
        if inner.executions.contains_key(&execution.id()) {
            return Err(StoreError::AlreadyExists {
                what: common::exec_what(execution.id()),
            });
        }
        let versioned = |value| Versioned {
            value,
            revision: Revision::FIRST,
        };
        inner.executions.insert(
            execution.id(),
            MemExecution {
                header: versioned(execution.clone()),
                tasks: tasks
                    .iter()
                    .cloned()
                    .map(|t| Versioned {
                        value: t,
                        revision: Revision::FIRST,
                    })
                    .collect(),
            },
        );
        Ok(())
    }

    async fn execution(&self, id: ExecutionId) -> Result<ExecutionSnapshot, StoreError> {
        let inner = self.lock();
        let e = inner
            .executions
            .get(&id)
            .ok_or_else(|| not_found(common::exec_what(id)))?;
        Ok(ExecutionSnapshot {
            execution: e.header.clone(),
            tasks: e.tasks.clone(),
        })
    }

    async fn execution_header(&self, id: ExecutionId) -> Result<Versioned<Execution>, StoreError> {
        let inner = self.lock();
        inner
            .executions
            .get(&id)
            .map(|e| e.header.clone())
            .ok_or_else(|| not_found(common::exec_what(id)))
    }

    async fn task(
        &self,
        id: ExecutionId,
        step: &orca_core::StepId,
    ) -> Result<Versioned<Task>, StoreError> {
        let inner = self.lock();
        let e = inner
            .executions
            .get(&id)
            .ok_or_else(|| not_found(common::exec_what(id)))?;
        e.tasks
            .iter()
            .find(|t| t.value.step_id() == step)
            .cloned()
            .ok_or_else(|| not_found(format!("task {step} of {id}")))
    }

    async fn update_execution(
        &self,
        execution: &Execution,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        let mut inner = self.lock();
        let stored = inner
            .executions
            .get_mut(&execution.id())
            .ok_or_else(|| not_found(common::exec_what(execution.id())))?;
        let header = &mut stored.header;
        let next = common::compare_and_next(
            || common::exec_what(execution.id()),
            expected,
            header.revision,
        )?;
        common::check_execution_update(&header.value, execution)?;
        header.value = execution.clone();
        header.revision = next;
        Ok(header.revision)
    }

    async fn update_task(
        &self,
        execution: ExecutionId,
        task: &Task,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        let mut inner = self.lock();
        let stored = inner
            .executions
            .get_mut(&execution)
            .ok_or_else(|| not_found(common::exec_what(execution)))?;
        let header = &stored.header.value;
        let has_step = header.info().steps.contains(task.step_id());
        common::check_task_update(execution, header.stage(), has_step, task)?;
        let slot = stored
            .tasks
            .iter_mut()
            .find(|t| t.value.step_id() == task.step_id())
            .ok_or_else(|| not_found(common::task_what(execution, task)))?;
        slot.revision = common::compare_and_next(
            || common::task_what(execution, task),
            expected,
            slot.revision,
        )?;
        slot.value = task.clone();
        Ok(slot.revision)
    }

    async fn list_executions(
        &self,
        plan: Option<PlanId>,
    ) -> Result<Listing<ExecutionSummary>, StoreError> {
        let inner = self.lock();
        let mut items: Vec<ExecutionSummary> = inner
            .executions
            .values()
            .filter(|e| plan.is_none_or(|p| e.header.value.info().plan_id == p))
            .map(|e| common::execution_summary(&e.header.value, e.tasks.iter().map(|t| &t.value)))
            .collect();
        common::sort_executions(&mut items);
        Ok(Listing {
            items,
            problems: Vec::new(),
        })
    }

    async fn acquire_lease(
        &self,
        execution: ExecutionId,
        holder: &Holder,
    ) -> Result<Lease, StoreError> {
        let mut inner = self.lock();
        if !inner.executions.contains_key(&execution) {
            return Err(not_found(common::exec_what(execution)));
        }
        let mut took_over = None;
        if let Some(slot) = inner.leases.get(&execution) {
            let info = inner.lease_info(slot);
            if !info.stale {
                return Err(StoreError::LeaseHeld {
                    execution,
                    holder: info.holder,
                });
            }
            took_over = Some(info);
        }
        let guard = inner.guard_id();
        let acquired_at = OffsetDateTime::now_utc();
        inner.leases.insert(
            execution,
            LeaseSlot {
                holder: holder.clone(),
                acquired_at,
                guard,
            },
        );
        let info = LeaseInfo {
            holder: holder.clone(),
            acquired_at,
            stale: false,
            renewed_at: None,
        };
        let guard = LeaseGuard {
            inner: Arc::clone(&self.inner),
            execution,
            guard,
        };
        Ok(Lease::new(execution, info, Box::new(guard), took_over))
    }

    async fn lease(&self, execution: ExecutionId) -> Result<Option<LeaseInfo>, StoreError> {
        let inner = self.lock();
        Ok(inner.leases.get(&execution).map(|s| inner.lease_info(s)))
    }

    async fn try_lock_resources(
        &self,
        names: &[String],
        _holder: &Holder,
    ) -> Result<Option<ResourceGuard>, StoreError> {
        let mut inner = self.lock();
        let mut unique: Vec<String> = names.to_vec();
        unique.sort();
        unique.dedup();
        if unique.iter().any(|n| inner.resources.contains_key(n)) {
            return Ok(None);
        }
        let guard = inner.guard_id();
        for name in &unique {
            inner.resources.insert(name.clone(), guard);
        }
        let held = ResourcesGuard {
            inner: Arc::clone(&self.inner),
            names: unique.clone(),
            guard,
        };
        Ok(Some(ResourceGuard::new(unique, Box::new(held))))
    }
}

#[async_trait]
impl AuditStore for MemoryStore {
    async fn append(
        &self,
        log: AuditLogId,
        entry: NewAuditEntry,
    ) -> Result<AuditEntry, StoreError> {
        let mut inner = self.lock();
        let stored = inner.logs.entry(log).or_default();
        if stored.seal.is_some() {
            return Err(StoreError::Immutable(format!("the {log} is sealed")));
        }
        let entry = audit::next_entry(stored.entries.last(), entry, OffsetDateTime::now_utc());
        stored.entries.push(entry.clone());
        Ok(entry)
    }

    async fn seal(&self, log: AuditLogId) -> Result<Seal, StoreError> {
        let mut inner = self.lock();
        let stored = inner.logs.entry(log).or_default();
        if let Some(seal) = &stored.seal {
            return Ok(seal.clone());
        }
        let seal = crate::verify::signed_seal(
            log,
            &stored.entries,
            OffsetDateTime::now_utc(),
            &self.authority,
        );
        stored.seal = Some(seal.clone());
        Ok(seal)
    }

    async fn entries(&self, log: AuditLogId) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(self
            .lock()
            .logs
            .get(&log)
            .map(|l| l.entries.clone())
            .unwrap_or_default())
    }

    async fn verify(&self, log: AuditLogId) -> Result<VerifyReport, StoreError> {
        let inner = self.lock();
        let Some(stored) = inner.logs.get(&log) else {
            return Ok(VerifyReport::Intact {
                entries: 0,
                sealed: false,
            });
        };
        let mut lines = Vec::with_capacity(stored.entries.len());
        for e in &stored.entries {
            lines.push(
                serde_json::to_string(e)
                    .map_err(|e| StoreError::backend(format!("encoding the {log}"), e))?,
            );
        }
        Ok(crate::verify::verify_log(
            log,
            &lines,
            stored.seal.as_ref(),
            &self.authority,
        ))
    }

    async fn audit_logs(&self) -> Result<Vec<AuditLogId>, StoreError> {
        Ok(self.lock().logs.keys().copied().collect())
    }

    fn authority(&self) -> crate::signing::Authority {
        self.authority.clone()
    }
}
