//! The file backend: plain JSON files under `<project>/.orca/` (see
//! `adr/0007-store-layout-and-durability.md`).
//!
//! ```text
//! .orca/plans/{plan_id}.json                                   plan + "revision"
//! .orca/plans/{plan_id}/plan.lock                              CAS lock of the plan
//! .orca/plans/{plan_id}/plan.audit.jsonl (+ .seal.json)        plan lifecycle log
//! .orca/plans/{plan_id}/executions/{exec_id}.json              execution header + "revision"
//! .orca/plans/{plan_id}/executions/{exec_id}.audit.jsonl       causal chain (+ .seal.json)
//! .orca/plans/{plan_id}/executions/{exec_id}.lease             lease (flock held while leased)
//! .orca/plans/{plan_id}/executions/{exec_id}/exec.lock         CAS lock of the header
//! .orca/plans/{plan_id}/executions/{exec_id}/tasks.json         every task + "revision" (snapshot)
//! .orca/plans/{plan_id}/executions/{exec_id}/tasks.wal.jsonl    write-ahead log (tasks + audit)
//! .orca/executions/{exec_id}                                   index: the plan id (a hint)
//! .orca/locks/{name}-{hash}.lock                               resource locks
//! .orca/cache/plan-list.json                                   listing cache (validated)
//! ```

//!
//! Task transitions and the entries of an execution's audit log go through the execution's
//! write-ahead log first (see [`wal`], [`wal_write`] and `adr/0015-task-write-ahead-log.md`):
//! one group-committed append per batch, a transition and its entry in ONE record; the audit
//! file is then written without an fsync, and the log is compacted into the task snapshot
//! ([`task_snapshot`], ADR 0056: one file for all of an execution's tasks) and the audit file
//! when it grows or a lease is taken. Tasks are not copied to a file per transition.
//!
//! Modules, one concern each: [`layout`] (paths), [`atomic`] (temp + fsync + rename, locks),
//! [`codec`] (documents, errors), [`records`] (reading plans, headers and tasks), [`listing`]
//! (listings and their cache), [`lease`] (leases and resource locks), [`group_commit`] (one
//! writer per batch), [`audit_log`] (the audit files), [`wal`] (the write-ahead log: format,
//! reading), [`wal_write`] (writing it, compaction), [`task_snapshot`] (the execution's tasks
//! as one file) and [`port_impl`] (the port's traits).

mod atomic;
mod audit_log;
mod codec;
mod group_commit;
mod layout;
mod lease;
mod listing;
mod port_impl;
mod records;
mod task_snapshot;
mod wal;
mod wal_write;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use orca_core::redact::Redactor;
use orca_core::{ExecutionId, PlanId};

use crate::audit::{AuditEntry, NewAuditEntry};
use crate::error::StoreError;
use crate::perms;
use crate::port::AuditLogId;
use crate::signing::Authority;

use codec::{corrupt, io_err};
use group_commit::GroupCommit;
use listing::Stamp;
use records::HeaderFacts;

/// The name of the store directory under the project root.
pub const STORE_DIR: &str = ".orca";

/// The default, durable store: files under `<project>/.orca/`. Cheap to clone.
#[derive(Debug, Clone)]
pub struct FileStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// `<project>/.orca`.
    root: PathBuf,
    /// Applied to every execution header, task and audit entry before it is written.
    redactor: Redactor,
    tmp_counter: AtomicU64,
    /// Execution → plan, learned from the index or a scan. Checked on every use.
    plan_of: Mutex<HashMap<ExecutionId, PlanId>>,
    /// What a task update needs from its execution header (stage, steps), valid while the
    /// header file's stamp is unchanged: a task update stays O(task) however many steps the
    /// header lists.
    header_facts: Mutex<HashMap<ExecutionId, (Stamp, HeaderFacts)>>,
    /// Audit appends waiting for their log, per log (group commit).
    log_queues: GroupCommit<AuditLogId, NewAuditEntry, AuditEntry>,
    /// Task transitions and execution audit entries waiting for their execution's
    /// write-ahead log (group commit).
    wal_queues: GroupCommit<(PlanId, ExecutionId), wal_write::WalRequest, wal_write::WalResponse>,
    /// Each execution's task snapshot as parsed, valid while its file's stamp is unchanged.
    snapshots: Mutex<HashMap<ExecutionId, (Stamp, Arc<task_snapshot::Parsed>)>>,
    /// What this process has read of each execution's write-ahead log.
    wal_index: Mutex<HashMap<ExecutionId, wal::Index>>,
    /// The last entry this process appended to each log (sequence, hash): an append that
    /// finds the log shorter or different stops (ADR 0013).
    heads: Mutex<HashMap<AuditLogId, (u64, orca_core::Digest)>>,
    /// Who signs seals and whose signatures count.
    authority: Authority,
}

impl FileStore {
    /// Opens (creating `.orca/` if needed) the store of a project.
    ///
    /// # Errors
    ///
    /// The directory cannot be created.
    pub fn open(project_root: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(project_root, Authority::permissive())
    }

    /// Opens the store with an [`Authority`]: seals are signed with its key, and seals and
    /// approvals are checked against the keys it trusts (ADR 0013). Plans are written as
    /// approved (their digest covers their content). Temp files left by a process that is gone
    /// (a crash, a full disk) are removed.
    ///
    /// # Errors
    ///
    /// The directory cannot be created.
    pub fn open_with(
        project_root: impl AsRef<Path>,
        authority: Authority,
    ) -> Result<Self, StoreError> {
        Self::open_with_redactor(project_root, authority, Redactor::new())
    }

    /// [`FileStore::open_with`], redacting with `redactor`: it knows the exact values of the
    /// configured secrets, and is applied to every execution header, task and audit entry
    /// before it is written.
    ///
    /// # Errors
    ///
    /// The directory cannot be created, or a file stands where a directory should.
    pub fn open_with_redactor(
        project_root: impl AsRef<Path>,
        authority: Authority,
        redactor: Redactor,
    ) -> Result<Self, StoreError> {
        let root = project_root.as_ref().join(STORE_DIR);
        for dir in [root.clone(), root.join("plans"), root.join("executions")] {
            if dir.exists() && !dir.is_dir() {
                return Err(corrupt(
                    &dir,
                    "not a directory: the store's layout is damaged",
                ));
            }
            perms::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        }
        // Temp files of plan documents and the index live in these; the cost is one directory
        // read each (an execution's own directories are cleaned when it is driven).
        for dir in [root.clone(), root.join("plans"), root.join("executions")] {
            crate::bounded::clean_stale_temps(&dir, false);
        }
        Ok(Self {
            inner: Arc::new(Inner {
                root,
                redactor,
                tmp_counter: AtomicU64::new(0),
                plan_of: Mutex::new(HashMap::new()),
                header_facts: Mutex::new(HashMap::new()),
                log_queues: GroupCommit::default(),
                wal_queues: GroupCommit::default(),
                snapshots: Mutex::new(HashMap::new()),
                wal_index: Mutex::new(HashMap::new()),
                heads: Mutex::new(HashMap::new()),
                authority,
            }),
        })
    }

    /// Removes every temp file left by a dead writer anywhere under `.orca/` (a full walk:
    /// `orca init` does it; opening the store and driving an execution clean only their own
    /// directories). Returns how many were removed.
    pub fn clean_all_stale_temps(&self) -> usize {
        crate::bounded::clean_stale_temps(&self.inner.root, true)
    }

    /// The `.orca` directory.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The path of a plan document.
    #[must_use]
    pub fn plan_path(&self, id: PlanId) -> PathBuf {
        self.inner.plan_file(id)
    }

    /// The path of an execution header (the execution must belong to `plan`).
    #[must_use]
    pub fn execution_path(&self, plan: PlanId, id: ExecutionId) -> PathBuf {
        self.inner.exec_file(plan, id)
    }

    /// The path of an execution's task snapshot: every task's record (ADR 0056). Executions
    /// written before it keep a file per task in a `tasks/` directory beside it until their
    /// next compaction.
    #[must_use]
    pub fn tasks_path(&self, plan: PlanId, id: ExecutionId) -> PathBuf {
        self.inner.snapshot_file(plan, id)
    }

    /// The bytes of a task snapshot holding `tasks` as they are (already stored, so already
    /// redacted) at their revisions: what another store's execution becomes in files.
    ///
    /// # Errors
    ///
    /// A task cannot be encoded.
    pub fn encode_task_snapshot(
        tasks: &[(orca_core::Task, crate::port::Revision)],
    ) -> Result<Vec<u8>, StoreError> {
        let path = Path::new(task_snapshot::SNAPSHOT);
        let docs = tasks
            .iter()
            .map(|(t, r)| {
                serde_json::to_value(t)
                    .map(|doc| (doc, *r))
                    .map_err(|e| StoreError::backend("encoding a task", e))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        task_snapshot::encode_snapshot(path, docs)
    }

    /// The path of an audit log's JSON lines.
    #[must_use]
    pub fn audit_path(&self, log: AuditLogId) -> PathBuf {
        self.inner.audit_file(log)
    }

    /// The path of an audit log's seal.
    #[must_use]
    pub fn seal_path(&self, log: AuditLogId) -> PathBuf {
        layout::seal_file(&self.inner.audit_file(log))
    }

    async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| StoreError::backend("running a store operation", e))?
    }
}
