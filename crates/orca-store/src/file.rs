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
//! .orca/plans/{plan_id}/executions/{exec_id}/tasks/{step}.json one task + "revision"
//! .orca/plans/{plan_id}/executions/{exec_id}/tasks/{step}.lock CAS lock of the task
//! .orca/executions/{exec_id}                                   index: the plan id (a hint)
//! .orca/locks/{name}-{hash}.lock                               resource locks
//! .orca/cache/plan-list.json                                   listing cache (validated)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use async_trait::async_trait;
use orca_core::redact::Redactor;
use orca_core::{DocumentError, Execution, ExecutionId, Holder, Plan, PlanId, Task};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::audit::{self, AuditEntry, NewAuditEntry, Seal, VerifyReport};
use crate::common;
use crate::error::StoreError;
use crate::perms;
use crate::port::{
    AuditLogId, AuditStore, ExecutionSnapshot, ExecutionStore, ExecutionSummary, Lease, LeaseInfo,
    Listing, ListingProblem, PlanStore, PlanSummary, ResourceGuard, Revision, Versioned,
};
use crate::redaction;
use crate::signing::Authority;

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
    /// Audit appends waiting for their log, per log (group commit, see [`Inner::append`]).
    log_queues: Mutex<HashMap<AuditLogId, Arc<LogQueue>>>,
    /// The last entry this process appended to each log (sequence, hash): an append that
    /// finds the log shorter or different stops (ADR 0013).
    heads: Mutex<HashMap<AuditLogId, (u64, orca_core::Digest)>>,
    /// Who signs seals and whose signatures count.
    authority: Authority,
}

/// The appends waiting for one audit log. Concurrent appenders queue here; the first one that
/// finds nobody writing becomes the writer and commits everything queued with one write and
/// one fsync, so N concurrent appends cost about two fsyncs instead of N.
#[derive(Debug, Default)]
struct LogQueue {
    state: Mutex<QueueState>,
    written: Condvar,
}

#[derive(Debug, Default)]
struct QueueState {
    next_ticket: u64,
    pending: Vec<(u64, NewAuditEntry)>,
    results: HashMap<u64, Result<AuditEntry, StoreError>>,
    writing: bool,
}

#[derive(Debug, Clone)]
struct HeaderFacts {
    stage: orca_core::ExecutionStage,
    steps: Arc<std::collections::HashSet<orca_core::StepId>>,
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> StoreError {
    let context = context.into();
    move |e| StoreError::backend(context, e)
}

fn corrupt(path: &Path, message: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        path: path.to_path_buf(),
        message: message.into(),
    }
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
                log_queues: Mutex::new(HashMap::new()),
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

    /// The path of a task record.
    #[must_use]
    pub fn task_path(&self, plan: PlanId, id: ExecutionId, step: &orca_core::StepId) -> PathBuf {
        self.inner.task_file(plan, id, step)
    }

    /// The path of an audit log's JSON lines.
    #[must_use]
    pub fn audit_path(&self, log: AuditLogId) -> PathBuf {
        self.inner.audit_file(log)
    }

    /// The path of an audit log's seal.
    #[must_use]
    pub fn seal_path(&self, log: AuditLogId) -> PathBuf {
        seal_file(&self.inner.audit_file(log))
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

fn seal_file(audit: &Path) -> PathBuf {
    audit.with_extension("seal.json")
}

/// What a lease file records.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseRecord {
    format_version: orca_core::FormatVersion,
    holder: Holder,
    #[serde(with = "time::serde::rfc3339")]
    acquired_at: OffsetDateTime,
    /// The holder's last heartbeat.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    renewed_at: Option<OffsetDateTime>,
}

/// The cached summary of one plan and what it was computed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct CachedPlan {
    stamp: Stamp,
    executions_stamp: Option<Stamp>,
    summary: PlanSummary,
}

/// Identity of a file's content as far as `stat` can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
    ctime: i64,
    ctime_nsec: i64,
}

impl Stamp {
    fn of(meta: &fs::Metadata) -> Self {
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
struct PlanListCache {
    format_version: orca_core::FormatVersion,
    plans: BTreeMap<String, CachedPlan>,
}

struct LeaseFileGuard {
    file: Arc<File>,
}

impl Drop for LeaseFileGuard {
    fn drop(&mut self) {
        // A clean release leaves an empty file: the next holder takes over nothing. The kernel
        // drops the flock when the file is closed (or the process dies).
        let _ = self.file.set_len(0);
    }
}

/// Encodes a document: `"revision"` first, then the document's own fields.
fn encode<T: Serialize>(value: &T, revision: Revision, path: &Path) -> Result<Vec<u8>, StoreError> {
    let doc = serde_json::to_value(value)
        .map_err(|e| StoreError::backend(format!("encoding {}", path.display()), e))?;
    let serde_json::Value::Object(fields) = doc else {
        return Err(StoreError::backend(
            format!("encoding {}", path.display()),
            "a document must be a JSON object",
        ));
    };
    let mut map = serde_json::Map::with_capacity(fields.len() + 1);
    map.insert("revision".into(), revision.0.into());
    map.extend(fields);
    let mut bytes = serde_json::to_vec_pretty(&serde_json::Value::Object(map))
        .map_err(|e| StoreError::backend(format!("encoding {}", path.display()), e))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// [`encode`] after redacting every string of the document (see [`Redactor::redact_strings`]).
fn encode_redacted<T: Serialize>(
    value: &T,
    revision: Revision,
    path: &Path,
    redactor: &Redactor,
) -> Result<Vec<u8>, StoreError> {
    let doc = serde_json::to_value(value)
        .map_err(|e| StoreError::backend(format!("encoding {}", path.display()), e))?;
    encode(
        &redactor.redact_document(doc, redaction::STRUCTURAL_KEYS),
        revision,
        path,
    )
}

/// Decodes a document written by [`encode`]: the store strips `"revision"`, the domain type
/// reads the rest strictly (format version first).
fn decode<T>(
    path: &Path,
    bytes: &[u8],
    parse: fn(&str) -> Result<T, DocumentError>,
) -> Result<Versioned<T>, StoreError> {
    let mut value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        corrupt(
            path,
            format!("not valid JSON ({e}): the file is corrupt or truncated"),
        )
    })?;
    let Some(map) = value.as_object_mut() else {
        return Err(corrupt(path, "not an orca document (not a JSON object)"));
    };
    let revision = map.remove("revision");
    let text = value.to_string();
    let doc = parse(&text).map_err(|e| corrupt(path, e.to_string()))?;
    let revision = revision
        .as_ref()
        .and_then(serde_json::Value::as_u64)
        .filter(|r| *r >= 1)
        .ok_or_else(|| {
            corrupt(
                path,
                "missing or invalid `revision`: not written by the orca store",
            )
        })?;
    Ok(Versioned {
        value: doc,
        revision: Revision(revision),
    })
}

fn read_opt(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    read_bounded(path, crate::bounded::MAX_DOCUMENT)
}

fn read_bounded(path: &Path, max: u64) -> Result<Option<Vec<u8>>, StoreError> {
    match crate::bounded::read_regular(path, max) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => Err(corrupt(path, e.to_string())),
        Err(e) => Err(StoreError::backend(
            format!("reading {}", path.display()),
            e,
        )),
    }
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(format!("syncing directory {}", dir.display())))
}

/// Creates a directory (and missing parents) durably: each new directory's parent is synced.
fn ensure_dir(dir: &Path) -> Result<(), StoreError> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        ensure_dir(parent)?;
    }
    match perms::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => {
            return Err(StoreError::backend(
                format!("creating {}", dir.display()),
                e,
            ));
        }
    }
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// How a lock file is held.
#[derive(Debug, Clone, Copy)]
enum LockMode {
    Exclusive,
    Shared,
}

/// Runs `f` holding an exclusive `flock` on `lock` (created if needed).
fn with_lock<T>(lock: &Path, f: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
    with_lock_mode(lock, LockMode::Exclusive, f)
}

fn with_lock_mode<T>(
    lock: &Path,
    mode: LockMode,
    f: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let file = perms::open(
        perms::options().create(true).truncate(false).write(true),
        lock,
    )
    .map_err(io_err(format!("opening {}", lock.display())))?;
    match mode {
        LockMode::Exclusive => file.lock(),
        LockMode::Shared => file.lock_shared(),
    }
    .map_err(io_err(format!("locking {}", lock.display())))?;
    let result = f();
    drop(file);
    result
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Inner {
    fn plans_dir(&self) -> PathBuf {
        self.root.join("plans")
    }
    fn plan_file(&self, id: PlanId) -> PathBuf {
        self.plans_dir().join(format!("{id}.json"))
    }
    fn plan_dir(&self, id: PlanId) -> PathBuf {
        self.plans_dir().join(id.to_string())
    }
    fn exec_dir(&self, plan: PlanId) -> PathBuf {
        self.plan_dir(plan).join("executions")
    }
    fn exec_file(&self, plan: PlanId, id: ExecutionId) -> PathBuf {
        self.exec_dir(plan).join(format!("{id}.json"))
    }
    fn exec_sub(&self, plan: PlanId, id: ExecutionId) -> PathBuf {
        self.exec_dir(plan).join(id.to_string())
    }
    fn tasks_dir(&self, plan: PlanId, id: ExecutionId) -> PathBuf {
        self.exec_sub(plan, id).join("tasks")
    }
    fn task_file(&self, plan: PlanId, id: ExecutionId, step: &orca_core::StepId) -> PathBuf {
        self.tasks_dir(plan, id).join(format!("{step}.json"))
    }
    fn lease_file(&self, plan: PlanId, id: ExecutionId) -> PathBuf {
        self.exec_dir(plan).join(format!("{id}.lease"))
    }
    fn index_file(&self, id: ExecutionId) -> PathBuf {
        self.root.join("executions").join(id.to_string())
    }
    fn audit_file(&self, log: AuditLogId) -> PathBuf {
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
    fn cache_file(&self) -> PathBuf {
        self.root.join("cache").join("plan-list.json")
    }

    fn tmp_path(&self, path: &Path) -> PathBuf {
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let name = format!(".{}.{}.{n}.tmp", file_name(path), std::process::id());
        path.with_file_name(name)
    }

    /// Writes a temp file in the target's directory and syncs its data; returns its path.
    fn write_tmp(&self, path: &Path, bytes: &[u8], sync: bool) -> Result<PathBuf, StoreError> {
        let tmp = self.tmp_path(path);
        let result = (|| {
            let mut f = perms::open(perms::options().write(true).create_new(true), &tmp)?;
            f.write_all(bytes)?;
            if sync {
                f.sync_data()?;
            }
            Ok(())
        })();
        result.map_err(|e: io::Error| {
            let _ = fs::remove_file(&tmp);
            StoreError::backend(format!("writing {}", path.display()), e)
        })?;
        Ok(tmp)
    }

    /// Atomic, durable replace: temp file, fsync, rename, fsync the directory.
    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
        let tmp = self.write_tmp(path, bytes, true)?;
        fs::rename(&tmp, path).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            StoreError::backend(format!("renaming into {}", path.display()), e)
        })?;
        if let Some(dir) = path.parent() {
            sync_dir(dir)?;
        }
        Ok(())
    }

    /// Atomic, durable create that never replaces: temp file, fsync, hard link to the final
    /// name (fails if it exists), unlink the temp, fsync the directory.
    fn create_atomic(
        &self,
        path: &Path,
        bytes: &[u8],
        what: impl FnOnce() -> String,
    ) -> Result<(), StoreError> {
        let tmp = self.write_tmp(path, bytes, true)?;
        let linked = fs::hard_link(&tmp, path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(StoreError::AlreadyExists { what: what() });
            }
            Err(e) => {
                return Err(StoreError::backend(
                    format!("creating {}", path.display()),
                    e,
                ));
            }
        }
        if let Some(dir) = path.parent() {
            sync_dir(dir)?;
        }
        Ok(())
    }

    fn read_plan(&self, id: PlanId) -> Result<Versioned<Plan>, StoreError> {
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

    fn read_header_at(
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
    fn locate(&self, id: ExecutionId) -> Result<PlanId, StoreError> {
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
        for candidate in [cached, indexed()].into_iter().flatten() {
            if self.exec_file(candidate, id).is_file() {
                self.remember(id, candidate);
                return Ok(candidate);
            }
        }
        let plans = self.plans_dir();
        let entries =
            fs::read_dir(&plans).map_err(io_err(format!("reading {}", plans.display())))?;
        for entry in entries.flatten() {
            let Some(plan) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<PlanId>().ok())
            else {
                continue;
            };
            if self.exec_file(plan, id).is_file() {
                self.remember(id, plan);
                return Ok(plan);
            }
        }
        Err(StoreError::NotFound {
            what: common::exec_what(id),
        })
    }

    fn remember(&self, id: ExecutionId, plan: PlanId) {
        self.plan_of
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, plan);
    }

    /// The stage and steps of an execution, from the in-process cache if the header file has
    /// not changed since (same stamp), else from the file.
    fn header_facts(&self, plan: PlanId, id: ExecutionId) -> Result<HeaderFacts, StoreError> {
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
            steps: Arc::new(header.value.info().steps.iter().cloned().collect()),
        };
        cache = self
            .header_facts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        cache.insert(id, (stamp, facts.clone()));
        Ok(facts)
    }

    fn read_header(&self, id: ExecutionId) -> Result<(PlanId, Versioned<Execution>), StoreError> {
        let plan = self.locate(id)?;
        let header = self
            .read_header_at(plan, id)?
            .ok_or_else(|| StoreError::NotFound {
                what: common::exec_what(id),
            })?;
        Ok((plan, header))
    }

    fn read_task(
        &self,
        plan: PlanId,
        id: ExecutionId,
        step: &orca_core::StepId,
    ) -> Result<Versioned<Task>, StoreError> {
        let path = self.task_file(plan, id, step);
        let bytes = read_opt(&path)?.ok_or_else(|| corrupt(&path, "the task record is missing"))?;
        let task = decode(&path, &bytes, Task::from_json)?;
        if task.value.step_id() != step {
            return Err(corrupt(
                &path,
                format!("holds task {}, not {step}", task.value.step_id()),
            ));
        }
        Ok(task)
    }

    fn snapshot(
        &self,
        plan: PlanId,
        header: Versioned<Execution>,
    ) -> Result<ExecutionSnapshot, StoreError> {
        let id = header.value.id();
        let tasks = header
            .value
            .info()
            .steps
            .iter()
            .map(|s| self.read_task(plan, id, s))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ExecutionSnapshot {
            execution: header,
            tasks,
        })
    }

    fn executions_of(
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
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .filter(|n| !n.starts_with('.'))
                .and_then(|n| n.parse::<ExecutionId>().ok())
            else {
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

    fn count_executions(&self, plan: PlanId) -> usize {
        fs::read_dir(self.exec_dir(plan))
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_str()
                            .and_then(|n| n.strip_suffix(".json"))
                            .is_some_and(|n| n.parse::<ExecutionId>().is_ok())
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    fn list_plans(&self) -> Result<Listing<PlanSummary>, StoreError> {
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
    fn write_cache(&self, path: &Path, cache: &PlanListCache) {
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

    fn lease_of(&self, plan: PlanId, id: ExecutionId) -> Result<Option<LeaseInfo>, StoreError> {
        let path = self.lease_file(plan, id);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(StoreError::backend(
                    format!("opening {}", path.display()),
                    e,
                ));
            }
        };
        let Some(record) = read_lease_record(&file, &path)? else {
            return Ok(None);
        };
        let stale = match file.try_lock_shared() {
            Ok(()) => true,
            Err(TryLockError::WouldBlock) => false,
            Err(TryLockError::Error(e)) => {
                return Err(StoreError::backend(
                    format!("locking {}", path.display()),
                    e,
                ));
            }
        };
        Ok(Some(LeaseInfo {
            holder: record.holder,
            acquired_at: record.acquired_at,
            stale,
            renewed_at: record.renewed_at,
        }))
    }

    fn acquire_lease(&self, id: ExecutionId, holder: &Holder) -> Result<Lease, StoreError> {
        let (plan, _) = self.read_header(id)?;
        // Whoever drives an execution first clears temp files a dead writer left in its
        // directories (a crash or a full disk between writing a temp file and renaming it).
        for dir in [
            self.plan_dir(plan),
            self.exec_dir(plan),
            self.exec_sub(plan, id),
            self.tasks_dir(plan, id),
        ] {
            crate::bounded::clean_stale_temps(&dir, false);
        }
        let path = self.lease_file(plan, id);
        let mut file = perms::open(
            perms::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
            &path,
        )
        .map_err(io_err(format!("opening {}", path.display())))?;
        // A `lease()` query holds a shared lock for an instant, and a releasing holder empties
        // the file just before closing it: retry briefly before reporting the lease as held.
        let mut attempt = 0;
        let locked = loop {
            match file.try_lock() {
                Err(TryLockError::WouldBlock) if attempt < 5 => {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                other => break other,
            }
        };
        match locked {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = read_lease_record(&file, &path)
                    .ok()
                    .flatten()
                    .map(|r| r.holder)
                    .unwrap_or_else(|| Holder {
                        pid: 0,
                        host: "unknown".into(),
                        token: String::new(),
                    });
                return Err(StoreError::LeaseHeld {
                    execution: id,
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => {
                return Err(StoreError::backend(
                    format!("locking {}", path.display()),
                    e,
                ));
            }
        }
        // The lock is ours. A holder still named in the file died without releasing.
        let took_over = read_lease_record(&file, &path)
            .ok()
            .flatten()
            .map(|r| LeaseInfo {
                holder: r.holder,
                acquired_at: r.acquired_at,
                stale: true,
                renewed_at: r.renewed_at,
            });
        if let Some(old) = &took_over {
            tracing::warn!(execution = %id, pid = old.holder.pid, host = %old.holder.host, "taking over a stale lease");
        }
        let record = LeaseRecord {
            format_version: orca_core::FormatVersion,
            holder: holder.clone(),
            acquired_at: OffsetDateTime::now_utc(),
            renewed_at: None,
        };
        let bytes = serde_json::to_vec_pretty(&record)
            .map_err(|e| StoreError::backend("encoding a lease", e))?;
        (|| {
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            file.write_all(&bytes)?;
            file.sync_data()
        })()
        .map_err(io_err(format!("writing {}", path.display())))?;
        let info = LeaseInfo {
            holder: record.holder,
            acquired_at: record.acquired_at,
            stale: false,
            renewed_at: None,
        };
        Ok(Lease::new(
            id,
            info,
            Box::new(LeaseFileGuard {
                file: Arc::new(file),
            }),
            took_over,
        ))
    }

    fn try_lock_resources(&self, names: &[String]) -> Result<Option<ResourceGuard>, StoreError> {
        let dir = self.root.join("locks");
        ensure_dir(&dir)?;
        let mut unique: Vec<String> = names.to_vec();
        unique.sort();
        unique.dedup();
        let mut held = Vec::with_capacity(unique.len());
        for name in &unique {
            let path = dir.join(lock_file_name(name));
            let file = perms::open(
                perms::options().create(true).truncate(false).write(true),
                &path,
            )
            .map_err(io_err(format!("opening {}", path.display())))?;
            match file.try_lock() {
                Ok(()) => held.push(file),
                Err(TryLockError::WouldBlock) => return Ok(None),
                Err(TryLockError::Error(e)) => {
                    return Err(StoreError::backend(
                        format!("locking {}", path.display()),
                        e,
                    ));
                }
            }
        }
        let fds = held.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
        Ok(Some(
            ResourceGuard::new(unique, Box::new(held)).with_fds(fds),
        ))
    }
}

/// `.orca/locks/` file name of a resource: a readable prefix plus a hash of the exact name, so
/// any name maps to a safe, distinct file.
fn lock_file_name(name: &str) -> String {
    let readable: String = name
        .chars()
        .take(40)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let hash = orca_core::Digest::of_bytes(name.as_bytes()).hex();
    format!("{readable}-{}.lock", &hash[..16])
}

/// Rewrites a held lease's record in place: one positioned write of the whole record, padded
/// with spaces to the old length (JSON allows trailing white space), so a reader sees the old
/// record or the new one.
fn renew_lease_file(file: &File, record: &LeaseRecord) -> Result<(), StoreError> {
    use std::os::unix::fs::FileExt as _;
    let mut bytes = serde_json::to_vec_pretty(record)
        .map_err(|e| StoreError::backend("encoding a lease", e))?;
    let old = file.metadata().map(|m| m.len()).unwrap_or(0);
    let old = usize::try_from(old).unwrap_or(0);
    if bytes.len() < old {
        bytes.resize(old, b' ');
    }
    file.write_all_at(&bytes, 0)
        .and_then(|()| file.sync_data())
        .map_err(|e| StoreError::backend("renewing a lease", e))
}

fn read_lease_record(mut file: &File, path: &Path) -> Result<Option<LeaseRecord>, StoreError> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_string(&mut text))
        .map_err(io_err(format!("reading {}", path.display())))?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| corrupt(path, format!("not a lease record: {e}")))
}

fn problem(path: &Path, e: &StoreError) -> ListingProblem {
    let message = match e {
        StoreError::Corrupt { message, .. } => message.clone(),
        other => other.to_string(),
    };
    ListingProblem {
        location: path.display().to_string(),
        message,
    }
}

// ----- audit files -----

/// The complete lines of a log. A last line without its newline is a torn append (the process
/// died mid-write, before the append was acknowledged): it is left out, and truncated away by
/// the next append.
fn read_log_lines(path: &Path) -> Result<Vec<String>, StoreError> {
    let Some(bytes) = read_bounded(path, crate::bounded::MAX_LOG)? else {
        return Ok(Vec::new());
    };
    let complete = match bytes.iter().rposition(|b| *b == b'\n') {
        Some(end) => &bytes[..=end],
        None => &bytes[..0],
    };
    if complete.len() < bytes.len() {
        tracing::warn!(path = %path.display(), "ignoring a torn last line (an unacknowledged append)");
    }
    let text =
        std::str::from_utf8(complete).map_err(|e| corrupt(path, format!("not UTF-8: {e}")))?;
    Ok(text.lines().map(str::to_owned).collect())
}

/// A seal as stored: the [`Seal`] with a format version.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SealFile {
    format_version: orca_core::FormatVersion,
    entries: u64,
    merkle_root: orca_core::Digest,
    #[serde(with = "time::serde::rfc3339")]
    at: OffsetDateTime,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    log: Option<AuditLogId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signature: Option<crate::signing::SignatureRecord>,
}

fn read_seal(path: &Path) -> Result<Option<Seal>, StoreError> {
    let Some(bytes) = read_opt(path)? else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&bytes).map_err(|e| corrupt(path, format!("not UTF-8: {e}")))?;
    let file: SealFile = orca_core::format::read_document(text, "seal")
        .map_err(|e| corrupt(path, format!("not a seal: {e}")))?;
    Ok(Some(Seal {
        entries: file.entries,
        merkle_root: file.merkle_root,
        at: file.at,
        log: file.log,
        signature: file.signature,
    }))
}

fn parse_entries(path: &Path, lines: &[String]) -> Result<Vec<AuditEntry>, StoreError> {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| corrupt(path, format!("line {}: not an audit entry: {e}", i + 1)))
        })
        .collect()
}

/// Reads the last complete entry of an open log, truncating a torn tail first.
fn last_entry(file: &mut File, path: &Path) -> Result<Option<AuditEntry>, StoreError> {
    let len = file
        .metadata()
        .map_err(io_err(format!("reading {}", path.display())))?
        .len();
    if len == 0 {
        return Ok(None);
    }
    // Read backwards in growing chunks until the tail holds a full line before the end.
    let mut chunk = 8192u64;
    loop {
        let start = len.saturating_sub(chunk);
        let mut buf = vec![0u8; usize::try_from(len - start).unwrap_or(usize::MAX)];
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.read_exact(&mut buf))
            .map_err(io_err(format!("reading {}", path.display())))?;
        let Some(last_nl) = buf.iter().rposition(|b| *b == b'\n') else {
            if start == 0 {
                // Only a torn first line.
                truncate_torn(file, path, 0)?;
                return Ok(None);
            }
            chunk *= 4;
            continue;
        };
        if last_nl + 1 < buf.len() {
            truncate_torn(file, path, start + last_nl as u64 + 1)?;
            // Re-read from the new end.
            return last_entry(file, path);
        }
        let body = &buf[..last_nl];
        let line_start = match body.iter().rposition(|b| *b == b'\n') {
            Some(p) => p + 1,
            None if start == 0 => 0,
            None => {
                chunk *= 4;
                continue;
            }
        };
        let entry = serde_json::from_slice(&body[line_start..])
            .map_err(|e| corrupt(path, format!("last line: not an audit entry: {e}")))?;
        return Ok(Some(entry));
    }
}

fn truncate_torn(file: &File, path: &Path, at: u64) -> Result<(), StoreError> {
    tracing::warn!(path = %path.display(), at, "truncating a torn last line (an unacknowledged append)");
    file.set_len(at)
        .and_then(|()| file.sync_data())
        .map_err(io_err(format!("truncating {}", path.display())))
}

/// The same error again, for every append of a failed group commit.
fn replicate(e: &StoreError) -> StoreError {
    match e {
        StoreError::Immutable(m) => StoreError::Immutable(m.clone()),
        StoreError::Invalid(m) => StoreError::Invalid(m.clone()),
        StoreError::Tampered { path, message } => StoreError::Tampered {
            path: path.clone(),
            message: message.clone(),
        },
        StoreError::Corrupt { path, message } => StoreError::Corrupt {
            path: path.clone(),
            message: message.clone(),
        },
        StoreError::Backend { context, source } => {
            let kind = source
                .downcast_ref::<io::Error>()
                .map_or(io::ErrorKind::Other, io::Error::kind);
            StoreError::backend(context.clone(), io::Error::new(kind, source.to_string()))
        }
        other => StoreError::backend(
            "appending to an audit log",
            io::Error::other(other.to_string()),
        ),
    }
}

fn open_log(path: &Path) -> Result<File, StoreError> {
    if let Some(dir) = path.parent() {
        ensure_dir(dir)?;
    }
    let existed = path.exists();
    let file = perms::open(perms::options().read(true).append(true).create(true), path)
        .map_err(io_err(format!("opening {}", path.display())))?;
    if !existed && let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    file.lock()
        .map_err(io_err(format!("locking {}", path.display())))?;
    Ok(file)
}

impl Inner {
    /// Appends one entry, durably, sharing the write and fsync with concurrent appends to the
    /// same log (group commit). Returns once the entry is on disk.
    fn append(&self, log: AuditLogId, entry: NewAuditEntry) -> Result<AuditEntry, StoreError> {
        let queue = Arc::clone(
            self.log_queues
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(log)
                .or_default(),
        );
        let result = {
            let mut state = queue.state.lock().unwrap_or_else(PoisonError::into_inner);
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            state.pending.push((ticket, entry));
            loop {
                if let Some(result) = state.results.remove(&ticket) {
                    break result;
                }
                if state.writing {
                    state = queue
                        .written
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                    continue;
                }
                // Nobody is writing: write everything queued, ours included.
                state.writing = true;
                let batch = std::mem::take(&mut state.pending);
                drop(state);
                let tickets: Vec<u64> = batch.iter().map(|(t, _)| *t).collect();
                let entries = batch.into_iter().map(|(_, e)| e).collect();
                // A panic must not leave `writing` set (every later append would wait forever).
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.append_batch(log, entries)
                }))
                .unwrap_or_else(|_| {
                    Err(StoreError::backend(
                        "appending to an audit log",
                        io::Error::other("the writer panicked"),
                    ))
                });
                state = queue.state.lock().unwrap_or_else(PoisonError::into_inner);
                match outcome {
                    Ok(entries) => state
                        .results
                        .extend(tickets.into_iter().zip(entries.into_iter().map(Ok))),
                    Err(e) => {
                        for t in tickets {
                            state.results.insert(t, Err(replicate(&e)));
                        }
                    }
                }
                state.writing = false;
                queue.written.notify_all();
            }
        };
        // Forget the queue when nobody else holds it (new holders take it under the map lock).
        let mut queues = self
            .log_queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if Arc::strong_count(&queue) == 2 {
            queues.remove(&log);
        }
        result
    }

    /// Appends entries in order with one write and one fsync: all or nothing (on failure the
    /// log is cut back to its length before).
    fn append_batch(
        &self,
        log: AuditLogId,
        batch: Vec<NewAuditEntry>,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let path = self.audit_file(log);
        let mut file = open_log(&path)?;
        if seal_file(&path).exists() {
            return Err(StoreError::Immutable(format!("the {log} is sealed")));
        }
        let stored_last = last_entry(&mut file, &path)?;
        self.check_head(log, &path, stored_last.as_ref())?;
        let at = OffsetDateTime::now_utc();
        let mut entries: Vec<AuditEntry> = Vec::with_capacity(batch.len());
        let mut bytes = Vec::new();
        for new in batch {
            let entry = audit::next_entry(entries.last().or(stored_last.as_ref()), new, at);
            serde_json::to_writer(&mut bytes, &entry)
                .map_err(|e| StoreError::backend(format!("encoding an entry of the {log}"), e))?;
            bytes.push(b'\n');
            entries.push(entry);
        }
        let before = file
            .metadata()
            .map_err(io_err(format!("reading {}", path.display())))?
            .len();
        if let Err(e) = file.write_all(&bytes).and_then(|()| file.sync_data()) {
            // Best effort: what did reach the file was never acknowledged.
            let _ = file.set_len(before).and_then(|()| file.sync_data());
            return Err(StoreError::backend(
                format!("appending to {}", path.display()),
                e,
            ));
        }
        if let Some(last) = entries.last() {
            self.heads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(log, (last.seq, last.hash.clone()));
        }
        Ok(entries)
    }

    /// An append must find the chain head this process left (or a later one, written by
    /// another process): a log that is shorter, or holds a different entry at that position,
    /// was truncated or rewritten behind orca's back, and is not silently restarted.
    fn check_head(
        &self,
        log: AuditLogId,
        path: &Path,
        stored_last: Option<&AuditEntry>,
    ) -> Result<(), StoreError> {
        let heads = self.heads.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((seq, hash)) = heads.get(&log) else {
            return Ok(());
        };
        let ok = stored_last.is_some_and(|l| l.seq > *seq || (l.seq == *seq && &l.hash == hash));
        if ok {
            return Ok(());
        }
        Err(StoreError::Tampered {
            path: path.to_path_buf(),
            message: format!(
                "entry {seq} was the last entry written, but the log now ends {}: it was truncated or rewritten; nothing was appended",
                stored_last.map_or_else(|| "empty".to_owned(), |l| format!("at entry {}", l.seq))
            ),
        })
    }

    fn seal(&self, log: AuditLogId) -> Result<Seal, StoreError> {
        let path = self.audit_file(log);
        let _file = open_log(&path)?;
        let seal_path = seal_file(&path);
        if let Some(seal) = read_seal(&seal_path)? {
            return Ok(seal);
        }
        let entries = parse_entries(&path, &read_log_lines(&path)?)?;
        let seal =
            crate::verify::signed_seal(log, &entries, OffsetDateTime::now_utc(), &self.authority);
        let file = SealFile {
            format_version: orca_core::FormatVersion,
            entries: seal.entries,
            merkle_root: seal.merkle_root.clone(),
            at: seal.at,
            log: seal.log,
            signature: seal.signature.clone(),
        };
        let mut bytes = serde_json::to_vec_pretty(&file)
            .map_err(|e| StoreError::backend("encoding a seal", e))?;
        bytes.push(b'\n');
        self.write_atomic(&seal_path, &bytes)?;
        Ok(seal)
    }

    fn audit_logs(&self) -> Result<Vec<AuditLogId>, StoreError> {
        let mut out = Vec::new();
        let plans = self.plans_dir();
        let entries =
            fs::read_dir(&plans).map_err(io_err(format!("reading {}", plans.display())))?;
        for entry in entries.flatten() {
            let Some(plan_id) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<PlanId>().ok())
            else {
                continue;
            };
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
                if let Some(execution_id) = e
                    .file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".audit.jsonl"))
                    .and_then(|n| n.parse::<ExecutionId>().ok())
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
                if stored.revision != expected {
                    return Err(common::conflict(
                        common::plan_what(&plan),
                        expected,
                        stored.revision,
                    ));
                }
                common::check_plan_update(&stored.value, &plan)?;
                let next = common::next_revision(&common::plan_what(&plan), stored.revision)?;
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
            // Tasks first (synced, renamed, one directory sync), the header last: an execution
            // exists once its header does.
            let tasks_dir = inner.tasks_dir(plan, id);
            ensure_dir(&tasks_dir)?;
            let mut pending = Vec::with_capacity(tasks.len());
            for task in &tasks {
                let path = inner.task_file(plan, id, task.step_id());
                let bytes = encode_redacted(task, Revision::FIRST, &path, &inner.redactor)?;
                let tmp = inner.write_tmp(&path, &bytes, true)?;
                pending.push((tmp, path));
            }
            for (tmp, path) in pending {
                fs::rename(&tmp, &path)
                    .map_err(io_err(format!("renaming into {}", path.display())))?;
            }
            sync_dir(&tasks_dir)?;
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

    async fn task(
        &self,
        id: ExecutionId,
        step: &orca_core::StepId,
    ) -> Result<Versioned<Task>, StoreError> {
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
                if stored.revision != expected {
                    return Err(common::conflict(
                        common::exec_what(id),
                        expected,
                        stored.revision,
                    ));
                }
                common::check_execution_update(&stored.value, &execution)?;
                let next = common::next_revision(&common::exec_what(id), stored.revision)?;
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
        self.run(move |inner| {
            let plan = inner.locate(execution)?;
            // The header's lock, shared: task updates run in parallel, but never while the
            // header is being replaced (e.g. made terminal).
            let exec_lock = inner.exec_sub(plan, execution).join("exec.lock");
            with_lock_mode(&exec_lock, LockMode::Shared, || {
                let facts = inner.header_facts(plan, execution)?;
                let has_step = facts.steps.contains(task.step_id());
                common::check_task_update(execution, facts.stage, has_step, &task)?;
                let path = inner.task_file(plan, execution, task.step_id());
                with_lock(&path.with_extension("lock"), || {
                    let stored = inner.read_task(plan, execution, task.step_id())?;
                    if stored.revision != expected {
                        return Err(common::conflict(
                            common::task_what(execution, &task),
                            expected,
                            stored.revision,
                        ));
                    }
                    let next = common::next_revision(
                        &common::task_what(execution, &task),
                        stored.revision,
                    )?;
                    let bytes = encode_redacted(&task, next, &path, &inner.redactor)?;
                    inner.write_atomic(&path, &bytes)?;
                    Ok(next)
                })
            })
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
                    let dir = inner.plans_dir();
                    let entries =
                        fs::read_dir(&dir).map_err(io_err(format!("reading {}", dir.display())))?;
                    for entry in entries.flatten() {
                        if let Some(p) = entry
                            .file_name()
                            .to_str()
                            .and_then(|n| n.parse::<PlanId>().ok())
                        {
                            inner.executions_of(p, &mut items, &mut problems);
                        }
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
        self.run(move |inner| {
            let path = inner.audit_file(log);
            parse_entries(&path, &read_log_lines(&path)?)
        })
        .await
    }

    async fn verify(&self, log: AuditLogId) -> Result<VerifyReport, StoreError> {
        self.run(move |inner| {
            let path = inner.audit_file(log);
            let lines = read_log_lines(&path)?;
            let seal = read_seal(&seal_file(&path))?;
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
