//! Where everything lives under `.orca/` (the layout of ADR 0007), and the names of files.

use std::path::{Path, PathBuf};

use orca_core::{ExecutionId, PlanId};

use super::Inner;
use crate::port::AuditLogId;

pub(super) fn seal_file(audit: &Path) -> PathBuf {
    audit.with_extension("seal.json")
}

pub(super) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Inner {
    pub(super) fn plans_dir(&self) -> PathBuf {
        self.root.join("plans")
    }
    pub(super) fn plan_file(&self, id: PlanId) -> PathBuf {
        self.plans_dir().join(format!("{id}.json"))
    }
    pub(super) fn plan_dir(&self, id: PlanId) -> PathBuf {
        self.plans_dir().join(id.to_string())
    }
    pub(super) fn exec_dir(&self, plan: PlanId) -> PathBuf {
        self.plan_dir(plan).join("executions")
    }
    pub(super) fn exec_file(&self, plan: PlanId, id: ExecutionId) -> PathBuf {
        self.exec_dir(plan).join(format!("{id}.json"))
    }
    pub(super) fn exec_sub(&self, plan: PlanId, id: ExecutionId) -> PathBuf {
        self.exec_dir(plan).join(id.to_string())
    }
    pub(super) fn tasks_dir(&self, plan: PlanId, id: ExecutionId) -> PathBuf {
        self.exec_sub(plan, id).join("tasks")
    }
    pub(super) fn task_file(
        &self,
        plan: PlanId,
        id: ExecutionId,
        step: &orca_core::StepId,
    ) -> PathBuf {
        self.tasks_dir(plan, id).join(format!("{step}.json"))
    }
    pub(super) fn lease_file(&self, plan: PlanId, id: ExecutionId) -> PathBuf {
        self.exec_dir(plan).join(format!("{id}.lease"))
    }
    pub(super) fn index_file(&self, id: ExecutionId) -> PathBuf {
        self.root.join("executions").join(id.to_string())
    }
    pub(super) fn audit_file(&self, log: AuditLogId) -> PathBuf {
        match log {
            AuditLogId::Plan { plan_id } => self.plan_dir(plan_id).join("plan.audit.jsonl"),
            AuditLogId::Runs { plan_id } => self.plan_dir(plan_id).join("runs.audit.jsonl"),
            AuditLogId::Execution {
                plan_id,
                execution_id,
            } => self
                .exec_dir(plan_id)
                .join(format!("{execution_id}.audit.jsonl")),
        }
    }
    pub(super) fn cache_file(&self) -> PathBuf {
        self.root.join("cache").join("plan-list.json")
    }
    pub(super) fn wal_file(&self, plan: PlanId, id: ExecutionId) -> PathBuf {
        self.exec_sub(plan, id).join("tasks.wal.jsonl")
    }
}

/// The id in a directory entry's name, `{id}{suffix}`: `None` for names that are not (temp
/// files, which start with a dot, included). The one place names are parsed into ids.
pub(super) fn parse_name<T: std::str::FromStr>(name: &std::ffi::OsStr, suffix: &str) -> Option<T> {
    name.to_str()
        .and_then(|n| n.strip_suffix(suffix))
        .filter(|n| !n.starts_with('.'))
        .and_then(|n| n.parse().ok())
}
