//! The write-ahead log of an execution's task transitions (ADR 0015):
//! `executions/{exec_id}/tasks.wal.jsonl`, one JSON line per transition,
//! `{"step": …, "revision": N, "task": {…}}`.
//!
//! A task update appends its record (group-committed: one write and one `fdatasync` for every
//! transition queued at that moment, see [`super::group_commit`]) and is acknowledged once the
//! record is on disk; it then replaces the task file *without* an fsync. The task file is a
//! readable copy, the log is what makes the transition durable. A reader (any process) reads
//! the task file first, then the log, and takes the newest revision, the file on a tie: so a
//! writer killed between its append and its rename, or a task file lost by a power failure, is
//! repaired from the log, and an edit of the log at a revision the task file already has
//! changes nothing.
//!
//! A torn last line (no newline: an append that never returned) is ignored by readers and cut
//! by the next append. A complete line that is not a record is corruption, named by file.
//! A task file older than the log whose content differs from the log's record of the same
//! revision was changed behind orca's back: reported, never repaired.
//!
//! Compaction (when the log passes [`COMPACT_AT`] bytes, and when a lease is taken) writes
//! every task file the log is ahead of, fsyncs every task file the log names and their
//! directory, then replaces the log by an empty file (a new inode, so readers holding an
//! offset into the old one start over). It runs under the header's lock held exclusively,
//! which every task update holds shared.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::{Arc, PoisonError};

use orca_core::{ExecutionId, PlanId, StepId, Task};
use serde::{Deserialize, Serialize};

use super::Inner;
use super::atomic::{LockMode, ensure_dir, sync_dir, with_lock, with_lock_mode};
use super::codec::{corrupt, decode, encode, io_err, read_opt, redacted_document};
use crate::common;
use crate::error::StoreError;
use crate::perms;
use crate::port::{Revision, Versioned};

/// The log is compacted into the task files once it is this large.
pub(super) const COMPACT_AT: u64 = 8 << 20;

/// One line of the log, as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<T> {
    step: StepId,
    revision: Revision,
    task: T,
}

/// How many of a step's newest records a reader keeps: the newest (what is read when the file
/// is behind) and the one before (what a file one revision behind must hold: a writer that died
/// between its append and its rename). A file further behind is simply superseded.
const KEEP_REVISIONS: usize = 2;

/// What the log holds for one step.
#[derive(Debug, Default)]
struct StepLog {
    /// The task document (redacted, without `revision`) at its newest revisions in the log.
    revisions: BTreeMap<Revision, Arc<str>>,
}

/// What this process has read of one execution's log: how far, and the records by step.
#[derive(Debug, Default)]
pub(super) struct Index {
    ino: u64,
    offset: u64,
    steps: HashMap<StepId, StepLog>,
}

impl Index {
    /// Reads what was appended since the last refresh (all of it if the log was replaced).
    fn refresh(&mut self, path: &Path) -> Result<(), StoreError> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                *self = Self::default();
                return Ok(());
            }
            Err(e) => return Err(io_err(format!("opening {}", path.display()))(e)),
        };
        let meta = file
            .metadata()
            .map_err(io_err(format!("reading {}", path.display())))?;
        if !meta.is_file() {
            return Err(corrupt(path, "not a regular file"));
        }
        if meta.ino() != self.ino || meta.len() < self.offset {
            *self = Self {
                ino: meta.ino(),
                ..Self::default()
            };
        }
        if meta.len() == self.offset {
            return Ok(());
        }
        if meta.len() > crate::bounded::MAX_LOG {
            return Err(corrupt(
                path,
                "the write-ahead log is larger than orca reads",
            ));
        }
        let mut buf = vec![0; usize::try_from(meta.len() - self.offset).unwrap_or(0)];
        file.read_exact_at(&mut buf, self.offset)
            .map_err(io_err(format!("reading {}", path.display())))?;
        // Only complete lines: a torn tail is an append that never returned.
        let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
            return Ok(());
        };
        let mut at = self.offset;
        for line in buf[..end].split(|b| *b == b'\n') {
            let record: Line<serde_json::Value> = serde_json::from_slice(line).map_err(|e| {
                corrupt(
                    path,
                    format!("the line at byte {at} is not a task record ({e})"),
                )
            })?;
            let revisions = &mut self.steps.entry(record.step).or_default().revisions;
            revisions.insert(record.revision, Arc::from(record.task.to_string()));
            if revisions.len() > KEEP_REVISIONS {
                revisions.pop_first();
            }
            at += line.len() as u64 + 1;
        }
        self.offset += end as u64 + 1;
        Ok(())
    }
}

/// A task file as read: its bytes, or why they could not be used.
pub(super) type FileTask = Result<Versioned<Task>, StoreError>;

impl Inner {
    /// A task transition: compare-and-swap on the revision, the record appended to the log
    /// (durable when this returns), then the task file replaced without an fsync.
    pub(super) fn update_task(
        &self,
        execution: ExecutionId,
        task: &Task,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        let plan = self.locate(execution)?;
        // The header's lock, shared: task updates run in parallel, but never while the
        // header is being replaced (e.g. made terminal) or the log compacted.
        let exec_lock = self.exec_sub(plan, execution).join("exec.lock");
        let (next, log_len) = with_lock_mode(&exec_lock, LockMode::Shared, || {
            let facts = self.header_facts(plan, execution)?;
            let has_step = facts.steps.contains(task.step_id());
            common::check_task_update(execution, facts.stage, has_step, task)?;
            let path = self.task_file(plan, execution, task.step_id());
            with_lock(&path.with_extension("lock"), || {
                let what = || common::task_what(execution, task);
                let stored = self.read_task(plan, execution, task.step_id())?;
                if stored.revision != expected {
                    return Err(common::conflict(what(), expected, stored.revision));
                }
                let next = common::next_revision(&what(), stored.revision)?;
                let doc = redacted_document(task, &path, &self.redactor)?;
                let log_len = self.wal_append(plan, execution, task.step_id(), next, &doc)?;
                // Durable in the log; the file is its readable copy (see the module). A copy
                // that cannot be written (a full disk) is stale until the next read or
                // compaction repairs it, but the transition happened: it is not an error.
                if let Err(e) = self.write_copy(&path, &doc, next) {
                    tracing::warn!(error = %e, "task file not updated; its log record stands");
                }
                Ok((next, log_len))
            })
        })?;
        if log_len >= COMPACT_AT {
            self.compact_wal(plan, execution)?;
        }
        Ok(next)
    }

    /// Replaces a task file without an fsync (the log holds the transition).
    fn write_copy(
        &self,
        path: &Path,
        doc: &serde_json::Value,
        revision: Revision,
    ) -> Result<(), StoreError> {
        let tmp = self.write_tmp(path, &encode(doc, revision, path)?, false)?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io_err(format!("renaming into {}", path.display()))(e)
        })
    }

    /// Runs `f` on this process's view of an execution's log, brought up to date first.
    fn with_wal<T>(
        &self,
        plan: PlanId,
        id: ExecutionId,
        f: impl FnOnce(&Index) -> T,
    ) -> Result<T, StoreError> {
        let path = self.wal_file(plan, id);
        let mut indexes = self
            .wal_index
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let index = indexes.entry(id).or_default();
        index.refresh(&path)?;
        Ok(f(index))
    }

    /// The current task of each step: its file (read before the log) merged with the log.
    pub(super) fn merge_tasks(
        &self,
        plan: PlanId,
        id: ExecutionId,
        files: Vec<(StepId, FileTask)>,
    ) -> Result<Vec<Versioned<Task>>, StoreError> {
        let wal_path = self.wal_file(plan, id);
        self.with_wal(plan, id, |index| {
            files
                .into_iter()
                .map(|(step, file)| {
                    let path = self.task_file(plan, id, &step);
                    merge(&path, &wal_path, &step, file, index.steps.get(&step))
                })
                .collect()
        })?
    }

    /// Appends one record to an execution's log, durably, group-committed with the records of
    /// concurrent updates. Returns the log's length after the batch.
    pub(super) fn wal_append(
        &self,
        plan: PlanId,
        id: ExecutionId,
        step: &StepId,
        revision: Revision,
        task: &serde_json::Value,
    ) -> Result<u64, StoreError> {
        let mut line = serde_json::to_vec(&Line {
            step: step.clone(),
            revision,
            task,
        })
        .map_err(|e| StoreError::backend("encoding a task record", e))?;
        line.push(b'\n');
        let path = self.wal_file(plan, id);
        self.wal_queues.submit(
            id,
            line,
            "appending to a write-ahead log",
            |batch: Vec<Vec<u8>>| {
                let len = append_lines(&path, &batch)?;
                Ok(vec![len; batch.len()])
            },
        )
    }

    /// Folds the log into the task files (see the module's documentation), if it exists.
    /// Takes the header's lock exclusively: no task update runs meanwhile.
    pub(super) fn compact_wal(&self, plan: PlanId, id: ExecutionId) -> Result<(), StoreError> {
        let wal_path = self.wal_file(plan, id);
        if !wal_path.exists() {
            return Ok(());
        }
        let lock = self.exec_sub(plan, id).join("exec.lock");
        with_lock_mode(&lock, LockMode::Exclusive, || {
            let latest: Vec<(StepId, Revision, Arc<str>)> = self.with_wal(plan, id, |index| {
                index
                    .steps
                    .iter()
                    .filter_map(|(step, log)| {
                        let (rev, text) = log.revisions.last_key_value()?;
                        Some((step.clone(), *rev, Arc::clone(text)))
                    })
                    .collect()
            })?;
            for (step, revision, text) in &latest {
                let path = self.task_file(plan, id, step);
                // A missing task file is not recreated: its name was durable since creation,
                // so someone removed it (and reading the execution says so).
                let bytes =
                    read_opt(&path)?.ok_or_else(|| corrupt(&path, "the task record is missing"))?;
                let behind = decode(&path, &bytes, Task::from_json)
                    .ok()
                    .is_none_or(|file| file.revision < *revision);
                if behind {
                    let doc: serde_json::Value = serde_json::from_str(text)
                        .map_err(|e| corrupt(&wal_path, format!("a task record: {e}")))?;
                    let tmp = self.write_tmp(&path, &encode(&doc, *revision, &path)?, true)?;
                    std::fs::rename(&tmp, &path)
                        .map_err(io_err(format!("renaming into {}", path.display())))?;
                } else {
                    File::open(&path)
                        .and_then(|f| f.sync_data())
                        .map_err(io_err(format!("syncing {}", path.display())))?;
                }
            }
            sync_dir(&self.tasks_dir(plan, id))?;
            // A new, empty log (a new inode: readers holding an offset start over).
            self.write_atomic(&wal_path, b"")?;
            tracing::debug!(execution = %id, tasks = latest.len(), "compacted the write-ahead log");
            Ok(())
        })
    }
}

/// Appends a batch of lines with one write and one `fdatasync`, under the log's `flock`,
/// cutting a torn tail first. All or nothing: on failure the log is cut back.
fn append_lines(path: &Path, batch: &[Vec<u8>]) -> Result<u64, StoreError> {
    if let Some(dir) = path.parent() {
        ensure_dir(dir)?;
    }
    let existed = path.exists();
    let mut file = perms::open(perms::options().read(true).append(true).create(true), path)
        .map_err(io_err(format!("opening {}", path.display())))?;
    if !existed && let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    file.lock()
        .map_err(io_err(format!("locking {}", path.display())))?;
    let before = cut_torn_tail(&file, path)?;
    let bytes: Vec<u8> = batch.concat();
    if let Err(e) = file.write_all(&bytes).and_then(|()| file.sync_data()) {
        let _ = file.set_len(before).and_then(|()| file.sync_data());
        return Err(io_err(format!("appending to {}", path.display()))(e));
    }
    Ok(before + bytes.len() as u64)
}

/// Cuts a last line without its newline (an append that never returned); returns the length.
fn cut_torn_tail(file: &File, path: &Path) -> Result<u64, StoreError> {
    let len = file
        .metadata()
        .map_err(io_err(format!("reading {}", path.display())))?
        .len();
    let mut end = len;
    let mut chunk = vec![0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let part = &mut chunk[..usize::try_from(end - start).unwrap_or(0)];
        file.read_exact_at(part, start)
            .map_err(io_err(format!("reading {}", path.display())))?;
        if let Some(nl) = part.iter().rposition(|b| *b == b'\n') {
            end = start + nl as u64 + 1;
            break;
        }
        end = start;
    }
    if end < len {
        tracing::warn!(path = %path.display(), at = end, "cutting a torn record (an unacknowledged append)");
        file.set_len(end)
            .and_then(|()| file.sync_data())
            .map_err(io_err(format!("truncating {}", path.display())))?;
    }
    Ok(end)
}

/// The current task of one step: the task file unless the log holds a newer revision.
fn merge(
    path: &Path,
    wal_path: &Path,
    step: &StepId,
    file: FileTask,
    log: Option<&StepLog>,
) -> Result<Versioned<Task>, StoreError> {
    let Some((&latest, text)) = log.and_then(|l| l.revisions.last_key_value()) else {
        return file;
    };
    match &file {
        Ok(f) if f.revision >= latest => return file,
        Ok(f) => {
            // Behind the log: only a writer that died between its append and its rename (or a
            // lost unsynced write) leaves that, and then the file is the log's older record.
            if let Some(same) = log.and_then(|l| l.revisions.get(&f.revision)) {
                let logged: serde_json::Value = serde_json::from_str(same)
                    .map_err(|e| corrupt(wal_path, format!("a task record: {e}")))?;
                let stored = serde_json::to_value(&f.value)
                    .map_err(|e| StoreError::backend("encoding a task", e))?;
                if logged != stored {
                    return Err(corrupt(
                        path,
                        format!(
                            "differs from the write-ahead log's record of revision {}: changed behind orca's back",
                            f.revision
                        ),
                    ));
                }
            }
        }
        Err(StoreError::Corrupt { .. }) => {}
        Err(_) => return file,
    }
    let task = decode_record(wal_path, text, latest)?;
    if task.value.step_id() != step {
        return Err(corrupt(
            wal_path,
            format!(
                "a record of step {step} holds task {}",
                task.value.step_id()
            ),
        ));
    }
    if file.is_err() {
        tracing::warn!(path = %path.display(), "unreadable task file: using its write-ahead log record");
    }
    Ok(task)
}

fn decode_record(
    wal_path: &Path,
    text: &str,
    revision: Revision,
) -> Result<Versioned<Task>, StoreError> {
    let value = Task::from_json(text).map_err(|e| corrupt(wal_path, e.to_string()))?;
    Ok(Versioned { value, revision })
}
