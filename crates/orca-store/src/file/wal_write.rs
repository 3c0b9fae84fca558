//! Writing an execution's write-ahead log (see [`super::wal`] for its format and how it is
//! read; ADR 0015): task transitions, audit entries, or both in one record, group-committed
//! (one `write` and one `fdatasync` per batch); the task files and the audit log file are
//! written after it, without an fsync; compaction folds the log into them and empties it.
//!
//! Locks, always taken in this order: the header's `exec.lock` (shared by task updates,
//! exclusive for compaction), a task's lock, the log's `flock`, the audit log's `flock`. The
//! writer of a batch holds the log's `flock` (and, if the batch holds audit entries, the audit
//! log's) from reading the chain head until both files are written, so no other process
//! interleaves and the audit file is a complete copy whenever nobody holds them — except after
//! a crash between the two writes, which the next writer (or a reader, or the seal) repairs
//! from the log.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::{Arc, PoisonError};

use orca_core::{ExecutionId, PlanId, StepId, Task};
use time::OffsetDateTime;

use super::Inner;
use super::atomic::{LockMode, with_lock_file, with_lock_mode, with_task_lock};
use super::audit_log::{last_entry, open_log};
use super::codec::{io_err, redacted_document};
use super::layout::seal_file;
use super::wal::Line;
use crate::audit::{self, AuditEntry, NewAuditEntry};
use crate::common;
use crate::error::StoreError;
use crate::port::{AuditLogId, Revision};

/// The log is compacted into the task files once it is this large.
pub(super) const COMPACT_AT: u64 = 8 << 20;

/// How often a writer retries opening the log when compaction replaced it under its lock.
const REOPEN_TRIES: usize = 64;

/// One durable write queued for an execution's log.
#[derive(Debug)]
pub(super) struct WalRequest {
    /// A task transition: the step, its new revision, the redacted document.
    task: Option<(StepId, Revision, serde_json::Value)>,
    /// An audit entry (redacted), appended to the execution's log.
    audit: Option<NewAuditEntry>,
}

/// What a queued write became.
#[derive(Debug, Clone)]
pub(super) struct WalResponse {
    /// The log's length after the batch.
    len: u64,
    /// The audit entry as appended.
    entry: Option<AuditEntry>,
}

impl Inner {
    /// A task transition, with or without its audit entry: compare-and-swap on the revision,
    /// ONE record appended to the log (durable when this returns), then the task file replaced
    /// without an fsync (the audit file's copy of the entry is written before it).
    pub(super) fn update_task(
        &self,
        execution: ExecutionId,
        task: &Task,
        expected: Revision,
        audit: Option<(PlanId, NewAuditEntry)>,
    ) -> Result<(Revision, Option<AuditEntry>), StoreError> {
        let plan = self.locate(execution)?;
        if let Some((claimed, _)) = &audit
            && *claimed != plan
        {
            return Err(StoreError::Invalid(format!(
                "execution {execution} belongs to plan {plan}, not {claimed}"
            )));
        }
        let audit = audit.map(|(_, entry)| NewAuditEntry {
            data: self.redactor.redact_json(entry.data),
            ..entry
        });
        // The header's lock, shared: task updates run in parallel, but never while the
        // header is being replaced (e.g. made terminal) or the log compacted.
        let exec_lock = self.exec_sub(plan, execution).join("exec.lock");
        let (next, response) = with_lock_file(&exec_lock, LockMode::Shared, |header_lock| {
            let facts = self.header_facts(plan, execution)?;
            let slot = facts.steps.get(task.step_id()).copied();
            common::check_task_update(execution, facts.stage, slot.is_some(), task)?;
            // Names the task in errors; where byte locks are missing, its lock file's name.
            let path = self
                .exec_sub(plan, execution)
                .join(format!("{}.json", task.step_id()));
            // The task's own lock: one writer of a task at a time, in any process.
            with_task_lock(header_lock, &exec_lock, slot.unwrap_or(0), &path, || {
                let stored = self.read_task(plan, execution, task.step_id())?;
                let next = common::compare_and_next(
                    || common::task_what(execution, task),
                    expected,
                    stored.revision,
                )?;
                let doc = redacted_document(task, &path, &self.redactor)?;
                let request = WalRequest {
                    task: Some((task.step_id().clone(), next, doc)),
                    audit,
                };
                // Durable in the log, which is the task's record until the next compaction
                // writes it into the snapshot: no copy per transition (ADR 0056).
                let response = self.wal_submit(plan, execution, request)?;
                Ok((next, response))
            })
        })?;
        if response.len >= COMPACT_AT {
            self.compact_wal(plan, execution)?;
        }
        Ok((next, response.entry))
    }

    /// Appends an entry to an execution's audit log through its write-ahead log (one durable
    /// order for the execution's transitions and entries).
    pub(super) fn append_execution_entry(
        &self,
        plan: PlanId,
        execution: ExecutionId,
        entry: NewAuditEntry,
    ) -> Result<AuditEntry, StoreError> {
        let request = WalRequest {
            task: None,
            audit: Some(entry),
        };
        let response = self.wal_submit(plan, execution, request)?;
        response.entry.ok_or_else(|| {
            StoreError::backend(
                "appending to an audit log",
                std::io::Error::other("the batch returned no entry"),
            )
        })
    }

    /// Queues one record; returns once it is on disk (group commit, see the module).
    fn wal_submit(
        &self,
        plan: PlanId,
        id: ExecutionId,
        request: WalRequest,
    ) -> Result<WalResponse, StoreError> {
        self.wal_queues.submit(
            (plan, id),
            request,
            "appending to a write-ahead log",
            |batch| self.write_batch(plan, id, batch),
        )
    }

    /// Writes a batch: its audit entries chained after the audit log's head, every record in
    /// one write and one `fdatasync` of the log, then the entries' copy in the audit file.
    /// All or nothing: on failure the log is cut back and nothing is acknowledged.
    fn write_batch(
        &self,
        plan: PlanId,
        id: ExecutionId,
        batch: Vec<WalRequest>,
    ) -> Result<Vec<WalResponse>, StoreError> {
        let wal_path = self.wal_file(plan, id);
        let mut wal = open_locked(&wal_path)?;
        // This process's view of the log, brought up to date through the open file: if it
        // has read to the file's end, the file ends with a whole line (no torn tail to cut).
        let meta = wal
            .metadata()
            .map_err(io_err(format!("reading {}", wal_path.display())))?;
        let (len, ino) = (meta.len(), meta.ino());
        let read_to = self.with_open_wal(plan, id, &wal, super::wal::Index::offset)?;
        let before = if read_to == len {
            len
        } else {
            cut_torn_tail(&wal, &wal_path)?
        };
        let log = AuditLogId::Execution {
            plan_id: plan,
            execution_id: id,
        };
        let audit_path = self.audit_file(log);
        let mut audit_file = None;
        let mut head = None;
        if batch.iter().any(|r| r.audit.is_some()) {
            let mut file = open_log(&audit_path)?;
            if seal_file(&audit_path).exists() {
                return Err(StoreError::Immutable(format!("the {log} is sealed")));
            }
            head = self.audit_head(plan, id, &mut file, &audit_path, Some(&wal))?;
            audit_file = Some(file);
        }
        let at = OffsetDateTime::now_utc();
        let mut bytes = Vec::new();
        let mut audit_bytes = Vec::new();
        let mut entries = Vec::with_capacity(batch.len());
        let mut records = Vec::with_capacity(batch.len());
        for request in batch {
            let entry = request.audit.map(|new| {
                let entry = audit::next_entry(head.as_ref(), new, at);
                head = Some(entry.clone());
                entry
            });
            // The task's text, written once: into the line, and as this process's index of
            // the log keeps it (so the log is not read back after it is written).
            let task = match request.task {
                Some((step, revision, doc)) => {
                    let raw = serde_json::value::to_raw_value(&doc)
                        .map_err(|e| StoreError::backend("encoding a write-ahead record", e))?;
                    Some((step, revision, raw))
                }
                None => None,
            };
            let line = Line {
                step: task.as_ref().map(|(step, _, _)| step),
                revision: task.as_ref().map(|(_, revision, _)| *revision),
                task: task.as_ref().map(|(_, _, raw)| &**raw),
                audit: entry.as_ref(),
            };
            serde_json::to_writer(&mut bytes, &line)
                .map_err(|e| StoreError::backend("encoding a write-ahead record", e))?;
            bytes.push(b'\n');
            if let Some(entry) = &entry {
                serde_json::to_writer(&mut audit_bytes, entry).map_err(|e| {
                    StoreError::backend(format!("encoding an entry of the {log}"), e)
                })?;
                audit_bytes.push(b'\n');
            }
            records.push((
                task.map(|(step, revision, raw)| (step, revision, Arc::from(raw.get()))),
                entry.clone(),
            ));
            entries.push(entry);
        }
        if let Err(e) = wal.write_all(&bytes).and_then(|()| wal.sync_data()) {
            let _ = wal.set_len(before).and_then(|()| wal.sync_data());
            return Err(io_err(format!("appending to {}", wal_path.display()))(e));
        }
        // Durable: this process's view of the log takes it in as written.
        self.ingest_written(id, ino, before, &bytes, records);
        // The audit file's copy: written before anyone can take the audit log's lock,
        // repaired from the log by the next writer if this process dies first.
        let copied = match audit_file {
            Some(mut file) => file.write_all(&audit_bytes).map_err(|e| {
                tracing::warn!(path = %audit_path.display(), error = %e, "audit entries not copied; the write-ahead log holds them");
            }).is_ok(),
            None => false,
        };
        // The head this process expects the file to reach (only once the file does).
        if copied && let Some(last) = &head {
            self.heads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(log, (last.seq, last.hash.clone()));
        }
        let len = before + bytes.len() as u64;
        Ok(entries
            .into_iter()
            .map(|entry| WalResponse { len, entry })
            .collect())
    }

    /// The head of an execution's audit log, with the audit file (open and locked) brought up
    /// to its write-ahead log first: entries the log holds past the file's end are appended to
    /// the file (a writer died between the two writes, or a power failure cut the file's
    /// unsynced tail). A file that ends before the log's entries begin, or disagrees with the
    /// log's copy of its last entry, was cut or rewritten: [`StoreError::Tampered`].
    pub(super) fn audit_head(
        &self,
        plan: PlanId,
        id: ExecutionId,
        file: &mut File,
        path: &Path,
        wal: Option<&File>,
    ) -> Result<Option<AuditEntry>, StoreError> {
        let log = AuditLogId::Execution {
            plan_id: plan,
            execution_id: id,
        };
        let stored_last = last_entry(file, path)?;
        // First the file against what this process wrote: in a live process the file cannot
        // lose what was written to it, so a file shorter than that was cut behind orca's back
        // (ADR 0013) and is not repaired. After a restart (a crash, a power failure), the
        // write-ahead log repairs it.
        self.check_head(log, path, stored_last.as_ref())?;
        let next = stored_last.as_ref().map_or(0, |e| e.seq + 1);
        let compare = |index: &super::wal::Index| {
            let disagrees = stored_last.as_ref().is_some_and(|last| {
                index
                    .audit_at(last.seq)
                    .is_some_and(|logged| logged.hash != last.hash)
            });
            (
                disagrees,
                index.audit_from(next).cloned().collect::<Vec<_>>(),
            )
        };
        let (disagrees, missing) = match wal {
            Some(wal) => self.with_open_wal(plan, id, wal, compare)?,
            None => self.with_wal(plan, id, compare)?,
        };
        let tampered = |message: String| StoreError::Tampered {
            path: path.to_path_buf(),
            message,
        };
        if disagrees {
            return Err(tampered(format!(
                "entry {} differs from the write-ahead log's copy: the log was rewritten; nothing was appended",
                next.saturating_sub(1)
            )));
        }
        if !missing.is_empty() {
            // The entries to restore must continue the file's chain, one after the other.
            let mut prev = stored_last
                .as_ref()
                .map_or_else(audit::zero_digest, |e| e.hash.clone());
            for (expected, entry) in (next..).zip(&missing) {
                if entry.seq != expected
                    || entry.prev != prev
                    || audit::entry_hash(entry) != entry.hash
                {
                    return Err(tampered(format!(
                        "entry {expected} is missing from the log, and the write-ahead log's entry {} does not continue its chain: entries were cut or forged; nothing was appended",
                        entry.seq
                    )));
                }
                prev = entry.hash.clone();
            }
            let mut bytes = Vec::new();
            for entry in &missing {
                serde_json::to_writer(&mut bytes, entry).map_err(|e| {
                    StoreError::backend(format!("encoding an entry of the {log}"), e)
                })?;
                bytes.push(b'\n');
            }
            file.write_all(&bytes)
                .map_err(io_err(format!("appending to {}", path.display())))?;
            tracing::warn!(path = %path.display(), entries = missing.len(), "restored audit entries from the write-ahead log");
        }
        Ok(missing.last().cloned().or(stored_last))
    }

    /// Folds the log into the task files and the audit file (see the module), if it exists:
    /// every task file the log is ahead of is rewritten, the task files it names and the audit
    /// file are fsynced, then the log is replaced by an empty file (a new inode, so readers
    /// holding an offset into the old one start over). Under the header's lock held
    /// exclusively (no task update runs) and the log's lock (no append runs).
    pub(super) fn compact_wal(&self, plan: PlanId, id: ExecutionId) -> Result<(), StoreError> {
        let wal_path = self.wal_file(plan, id);
        if !wal_path.exists() {
            return Ok(());
        }
        let lock = self.exec_sub(plan, id).join("exec.lock");
        with_lock_mode(&lock, LockMode::Exclusive, || {
            let _wal = open_locked(&wal_path)?;
            let (latest, has_audit) =
                self.with_wal(plan, id, |index| (index.latest(), index.has_audit()))?;
            // A missing snapshot is not recreated: it was durable since creation, so someone
            // removed it (and reading the execution says so). A task with no usable record
            // anywhere leaves everything as it is (the evidence).
            if !self.compact_snapshot(plan, id, &latest)? {
                return Ok(());
            }
            if has_audit {
                let log = AuditLogId::Execution {
                    plan_id: plan,
                    execution_id: id,
                };
                let path = self.audit_file(log);
                let mut file = open_log(&path)?;
                match self.audit_head(plan, id, &mut file, &path, None) {
                    Ok(_) => file
                        .sync_data()
                        .map_err(io_err(format!("syncing {}", path.display())))?,
                    // The audit file and the log disagree: both are kept as they are (the
                    // evidence), and the runner's check of the log refuses the run.
                    Err(e @ StoreError::Tampered { .. }) => {
                        tracing::warn!(error = %e, "write-ahead log not compacted");
                        return Ok(());
                    }
                    Err(e) => return Err(e),
                }
            }
            // A new, empty log (a new inode: readers holding an offset start over).
            self.write_atomic(&wal_path, b"")?;
            tracing::debug!(execution = %id, tasks = latest.len(), "compacted the write-ahead log");
            Ok(())
        })
    }
}

/// Opens (creating) the log and takes its `flock`; if compaction replaced the file meanwhile
/// (the lock is on an unlinked inode), opens the new one.
fn open_locked(path: &Path) -> Result<File, StoreError> {
    for _ in 0..REOPEN_TRIES {
        let file = open_log(path)?;
        let held = file
            .metadata()
            .map_err(io_err(format!("reading {}", path.display())))?
            .ino();
        if std::fs::metadata(path).is_ok_and(|m| m.ino() == held) {
            return Ok(file);
        }
    }
    Err(StoreError::backend(
        format!("locking {}", path.display()),
        std::io::Error::other("the file kept being replaced"),
    ))
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
