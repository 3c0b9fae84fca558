//! Reading plans, execution headers and tasks, and finding an execution's plan by its id.

use std::fs;
use std::io;
use std::sync::{Arc, PoisonError};

use orca_core::{Execution, ExecutionId, Plan, PlanId, StepId, Task};

use super::Inner;
use super::codec::{corrupt, decode, read_opt};
use super::listing::Stamp;
use crate::common;
use crate::error::StoreError;
use crate::port::{ExecutionSnapshot, Versioned};

#[derive(Debug, Clone)]
pub(super) struct HeaderFacts {
    pub(super) stage: orca_core::ExecutionStage,
    /// Each step and its place in the plan (the byte of `exec.lock` its writers lock).
    pub(super) steps: Arc<std::collections::HashMap<StepId, u64>>,
}

impl Inner {
    pub(super) fn read_plan(&self, id: PlanId) -> Result<Versioned<Plan>, StoreError> {
        let path = self.plan_file(id);
        let bytes = read_opt(&path)?.ok_or_else(|| StoreError::NotFound {
            what: format!("plan {id}"),
        })?;
        let plan = decode(&path, &bytes, Plan::from_json)?;
        if plan.value.id() != id {
            return Err(corrupt(
                &path,
                format!("holds plan {}, not {id}", plan.value.id()),
            ));
        }
        Ok(plan)
    }

    pub(super) fn read_header_at(
        &self,
        plan: PlanId,
        id: ExecutionId,
    ) -> Result<Option<Versioned<Execution>>, StoreError> {
        let path = self.exec_file(plan, id);
        let Some(bytes) = read_opt(&path)? else {
            return Ok(None);
        };
        let header = decode(&path, &bytes, Execution::from_json)?;
        if header.value.id() != id || header.value.info().plan_id != plan {
            return Err(corrupt(
                &path,
                format!(
                    "holds execution {} of plan {}",
                    header.value.id(),
                    header.value.info().plan_id
                ),
            ));
        }
        Ok(Some(header))
    }

    /// Finds which plan an execution belongs to: the in-process map, the index, then a scan.
    /// Every answer is checked against the header file, the source of truth.
    pub(super) fn locate(&self, id: ExecutionId) -> Result<PlanId, StoreError> {
        let cached = self
            .plan_of
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .copied();
        let indexed = || -> Option<PlanId> {
            let bytes = fs::read(self.index_file(id)).ok()?;
            String::from_utf8(bytes).ok()?.trim().parse().ok()
        };
        // The index file is read only when the cached plan is not (or no longer) right.
        let found = |candidate: PlanId| self.exec_file(candidate, id).is_file();
        if let Some(plan) = cached.filter(|p| found(*p)) {
            return Ok(plan);
        }
        if let Some(plan) = indexed().filter(|p| found(*p)) {
            self.remember(id, plan);
            return Ok(plan);
        }
        for plan in self.plan_dirs()? {
            if self.exec_file(plan, id).is_file() {
                self.remember(id, plan);
                return Ok(plan);
            }
        }
        Err(StoreError::NotFound {
            what: common::exec_what(id),
        })
    }

    pub(super) fn remember(&self, id: ExecutionId, plan: PlanId) {
        self.plan_of
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, plan);
    }

    /// The stage and steps of an execution, from the in-process cache if the header file has
    /// not changed since (same stamp), else from the file.
    pub(super) fn header_facts(
        &self,
        plan: PlanId,
        id: ExecutionId,
    ) -> Result<HeaderFacts, StoreError> {
        let path = self.exec_file(plan, id);
        let stamp = match fs::metadata(&path) {
            Ok(m) => Stamp::of(&m),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound {
                    what: common::exec_what(id),
                });
            }
            Err(e) => {
                return Err(StoreError::backend(
                    format!("reading {}", path.display()),
                    e,
                ));
            }
        };
        let mut cache = self
            .header_facts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((cached, facts)) = cache.get(&id)
            && *cached == stamp
        {
            return Ok(facts.clone());
        }
        drop(cache);
        let header = self
            .read_header_at(plan, id)?
            .ok_or_else(|| StoreError::NotFound {
                what: common::exec_what(id),
            })?;
        let facts = HeaderFacts {
            stage: header.value.stage(),
            steps: Arc::new(
                (0u64..)
                    .zip(&header.value.info().steps)
                    .map(|(i, s)| (s.clone(), i))
                    .collect(),
            ),
        };
        cache = self
            .header_facts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        cache.insert(id, (stamp, facts.clone()));
        Ok(facts)
    }

    pub(super) fn read_header(
        &self,
        id: ExecutionId,
    ) -> Result<(PlanId, Versioned<Execution>), StoreError> {
        let plan = self.locate(id)?;
        let header = self
            .read_header_at(plan, id)?
            .ok_or_else(|| StoreError::NotFound {
                what: common::exec_what(id),
            })?;
        Ok((plan, header))
    }

    /// The current task of a step: its stored record merged with the execution's write-ahead
    /// log.
    pub(super) fn read_task(
        &self,
        plan: PlanId,
        id: ExecutionId,
        step: &StepId,
    ) -> Result<Versioned<Task>, StoreError> {
        self.consistently(plan, id, || {
            // The snapshot's revision and the log's are enough to know which record is
            // current: only that one is decoded.
            if let Some(task) = self.current_task(plan, id, step)? {
                return Ok(vec![task]);
            }
            let stored = self.stored_tasks(plan, id, std::slice::from_ref(step))?;
            self.merge_tasks(plan, id, stored)
        })?
        .pop()
        .ok_or_else(|| StoreError::NotFound {
            what: format!("task {step} of {id}"),
        })
    }

    /// An execution with every task: the stored records first, then the log, once.
    pub(super) fn snapshot(
        &self,
        plan: PlanId,
        header: Versioned<Execution>,
    ) -> Result<ExecutionSnapshot, StoreError> {
        let id = header.value.id();
        let tasks = self.consistently(plan, id, || {
            let stored = self.stored_tasks(plan, id, &header.value.info().steps)?;
            self.merge_tasks(plan, id, stored)
        })?;
        Ok(ExecutionSnapshot {
            execution: header,
            tasks,
        })
    }

    /// Runs a read of the snapshot and then the log again if a compaction replaced the log
    /// in between: the old snapshot with the new, emptied log would be the execution as it
    /// was created (a reader takes no lock; compaction writes the snapshot, then empties the
    /// log as a new file).
    fn consistently<T>(
        &self,
        plan: PlanId,
        id: ExecutionId,
        read: impl Fn() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        use std::os::unix::fs::MetadataExt;
        let wal = self.wal_file(plan, id);
        let identity = || fs::symlink_metadata(&wal).ok().map(|m| m.ino());
        for _ in 0..COMPACTION_RETRIES {
            let before = identity();
            let value = read()?;
            if identity() == before {
                return Ok(value);
            }
        }
        read()
    }
}

/// How often a read starts over when compactions keep replacing the log under it.
const COMPACTION_RETRIES: usize = 8;
