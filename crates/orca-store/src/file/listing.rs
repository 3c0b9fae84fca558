//! Listings: plans (with the validated listing cache), executions, and audit logs.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use orca_core::{ExecutionId, PlanId};
use serde::{Deserialize, Serialize};

use super::Inner;
use super::codec::{corrupt, io_err, problem};
use super::layout::parse_name;
use crate::common;
use crate::error::StoreError;
use crate::perms;
use crate::port::{AuditLogId, ExecutionSummary, Listing, ListingProblem, PlanSummary};

/// The cached summary of one plan and what it was computed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct CachedPlan {
    stamp: Stamp,
    executions_stamp: Option<Stamp>,
    summary: PlanSummary,
}

/// Identity of a file's content as far as `stat` can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Stamp {
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
    ctime: i64,
    ctime_nsec: i64,
}

impl Stamp {
    pub(super) fn of(meta: &fs::Metadata) -> Self {
        Self {
            ino: meta.ino(),
            size: meta.size(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
            ctime: meta.ctime(),
            ctime_nsec: meta.ctime_nsec(),
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PlanListCache {
    format_version: orca_core::FormatVersion,
    plans: BTreeMap<String, CachedPlan>,
}

impl Inner {
    pub(super) fn executions_of(
        &self,
        plan: PlanId,
        items: &mut Vec<ExecutionSummary>,
        problems: &mut Vec<ListingProblem>,
    ) {
        let dir = self.exec_dir(plan);
        let Ok(entries) = fs::read_dir(&dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = parse_name::<ExecutionId>(&name, ".json") else {
                continue;
            };
            let result = self
                .read_header_at(plan, id)
                .and_then(|h| h.ok_or_else(|| corrupt(&entry.path(), "vanished while listing")))
                .and_then(|h| self.snapshot(plan, h));
            match result {
                Ok(s) => items.push(common::execution_summary(
                    &s.execution.value,
                    s.tasks.iter().map(|t| &t.value),
                )),
                Err(e) => problems.push(problem(&entry.path(), &e)),
            }
        }
    }

    pub(super) fn count_executions(&self, plan: PlanId) -> usize {
        fs::read_dir(self.exec_dir(plan))
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| parse_name::<ExecutionId>(&e.file_name(), ".json").is_some())
                    .count()
            })
            .unwrap_or(0)
    }

    pub(super) fn list_plans(&self) -> Result<Listing<PlanSummary>, StoreError> {
        let cache_path = self.cache_file();
        // The cache is a hint: unreadable, foreign or old → start from nothing.
        let mut old: PlanListCache = fs::read(&cache_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let old_len = old.plans.len();
        let mut fresh = PlanListCache::default();
        let mut problems = Vec::new();
        let mut changed = false;
        let dir = self.plans_dir();
        // One readdir: plan files, and which plans have a directory (executions, logs).
        let mut files = Vec::new();
        let mut plan_dirs = std::collections::HashSet::new();
        let entries = fs::read_dir(&dir).map_err(io_err(format!("reading {}", dir.display())))?;
        for entry in entries {
            let entry = entry.map_err(io_err(format!("reading {}", dir.display())))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') {
                continue;
            }
            match name.strip_suffix(".json") {
                Some(stem) => files.push((stem.to_owned(), entry)),
                None => {
                    if let Ok(id) = name.parse::<PlanId>() {
                        plan_dirs.insert(id);
                    }
                }
            }
        }
        for (stem, entry) in files {
            let Ok(id) = stem.parse::<PlanId>() else {
                problems.push(ListingProblem {
                    location: entry.path().display().to_string(),
                    message: "not a plan file: its name is not a plan id".into(),
                });
                continue;
            };
            let stamp = match entry.metadata() {
                Ok(m) => Stamp::of(&m),
                Err(e) => {
                    problems.push(ListingProblem {
                        location: entry.path().display().to_string(),
                        message: e.to_string(),
                    });
                    continue;
                }
            };
            let executions_stamp = if plan_dirs.contains(&id) {
                fs::metadata(self.exec_dir(id)).ok().map(|m| Stamp::of(&m))
            } else {
                None
            };
            if let Some(hit) = old.plans.remove(&stem)
                && hit.stamp == stamp
                && hit.executions_stamp == executions_stamp
            {
                fresh.plans.insert(stem, hit);
                continue;
            }
            changed = true;
            match self.read_plan(id) {
                Ok(plan) => {
                    let summary = common::plan_summary(&plan.value, self.count_executions(id));
                    fresh.plans.insert(
                        stem,
                        CachedPlan {
                            stamp,
                            executions_stamp,
                            summary,
                        },
                    );
                }
                Err(e) => problems.push(problem(&entry.path(), &e)),
            }
        }
        if changed || fresh.plans.len() != old_len {
            self.write_cache(&cache_path, &fresh);
        }
        let mut items: Vec<PlanSummary> = fresh.plans.into_values().map(|c| c.summary).collect();
        common::sort_plans(&mut items);
        Ok(Listing { items, problems })
    }

    /// Best effort: a cache that cannot be written is only slower next time. Not fsynced: a
    /// torn or lost cache is detected (it does not parse, or stamps differ) and rebuilt.
    pub(super) fn write_cache(&self, path: &Path, cache: &PlanListCache) {
        let result = (|| {
            if let Some(dir) = path.parent() {
                perms::create_dir_all(dir).map_err(io_err("creating the cache directory"))?;
            }
            let bytes = serde_json::to_vec(cache)
                .map_err(|e| StoreError::backend("encoding the plan list cache", e))?;
            let tmp = self.write_tmp(path, &bytes, false)?;
            fs::rename(&tmp, path).map_err(io_err(format!("renaming into {}", path.display())))
        })();
        if let Err(e) = result {
            tracing::warn!(error = %e, "could not write the plan list cache");
        }
    }

    /// The plans that have a directory under `plans/` (executions, logs), in no order.
    pub(super) fn plan_dirs(&self) -> Result<Vec<PlanId>, StoreError> {
        let plans = self.plans_dir();
        let entries =
            fs::read_dir(&plans).map_err(io_err(format!("reading {}", plans.display())))?;
        Ok(entries
            .flatten()
            .filter_map(|entry| parse_name::<PlanId>(&entry.file_name(), ""))
            .collect())
    }

    pub(super) fn audit_logs(&self) -> Result<Vec<AuditLogId>, StoreError> {
        let mut out = Vec::new();
        for plan_id in self.plan_dirs()? {
            if self.audit_file(AuditLogId::Plan { plan_id }).is_file() {
                out.push(AuditLogId::Plan { plan_id });
            }
            if self.audit_file(AuditLogId::Runs { plan_id }).is_file() {
                out.push(AuditLogId::Runs { plan_id });
            }
            let Ok(execs) = fs::read_dir(self.exec_dir(plan_id)) else {
                continue;
            };
            for e in execs.flatten() {
                if let Some(execution_id) =
                    parse_name::<ExecutionId>(&e.file_name(), ".audit.jsonl")
                {
                    out.push(AuditLogId::Execution {
                        plan_id,
                        execution_id,
                    });
                }
            }
        }
        out.sort();
        Ok(out)
    }
}
