//! The write-ahead log of an execution (ADR 0015): `executions/{exec_id}/tasks.wal.jsonl`,
//! one JSON line per durable write, in the order they were made durable:
//! `{"step": …, "revision": N, "task": {…}}` (a task transition),
//! `{"audit": {…}}` (an entry of the execution's audit log), or both in one line (a
//! transition and the entry that records it: [`crate::ExecutionStore::update_task_with_audit`]).
//! Writing it is [`super::wal_write`]; this module reads it.
//!
//! A record is acknowledged once its line is on disk (group-committed: one write and one
//! `fdatasync` for every record queued at that moment). The task file and the audit log file
//! are then written *without* an fsync: they are readable copies, the log is what makes the
//! write durable. A reader (any process) reads the task file first, then the log, and takes
//! the newest revision, the file on a tie: so a writer killed between its append and its
//! rename, or a task file lost by a power failure, is repaired from the log, and an edit of
//! the log at a revision the task file already has changes nothing. Likewise the audit log as
//! read is its file's complete lines followed by the log's entries past them.
//!
//! A torn last line (no newline: an append that never returned) is ignored by readers and cut
//! by the next append. A complete line that is not a record is corruption, named by file.
//! A task file older than the log whose content differs from the log's record of the same
//! revision was changed behind orca's back: reported, never repaired.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::{Arc, PoisonError};

use orca_core::{ExecutionId, PlanId, StepId, Task};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::Inner;
use super::audit_log::read_log_lines;
use super::codec::{corrupt, io_err};
use crate::audit::AuditEntry;
use crate::error::StoreError;
use crate::port::{AuditLogId, Revision, Versioned};

/// One line of the log, as written: a task record, an audit entry, or both.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Line<T, A, S = StepId> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) step: Option<S>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) revision: Option<Revision>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) task: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) audit: Option<A>,
}

/// How many of a step's newest records a reader keeps: the newest (what is read when the file
/// is behind) and the one before (what a file one revision behind must hold: a writer that died
/// between its append and its rename). A file further behind is simply superseded.
const KEEP_REVISIONS: usize = 2;

/// Which record of a step is current ([`Index::against`]).
pub(super) enum Current {
    /// The stored one: the log holds nothing newer.
    Stored,
    /// The log's newest, at this revision: the log does not hold the stored revision.
    Logged(Revision, Arc<str>),
    /// The log's newest, once the log's record of the stored revision was compared with it.
    Compare,
}

/// What the log holds for one step.
#[derive(Debug, Default)]
struct StepLog {
    /// The task document (redacted, without `revision`) at its newest revisions in the log.
    revisions: BTreeMap<Revision, Arc<str>>,
}

/// Bytes kept of the end of what was read, to recognise the same file again (see `tail`).
const TAIL: usize = 256;

/// What this process has read of one execution's log: how far, and the records by step.
#[derive(Debug, Default)]
pub(super) struct Index {
    ino: u64,
    offset: u64,
    /// The last bytes read (up to [`TAIL`], ending at `offset`). A log deleted and written anew
    /// may get the old one's inode number back (ext4 reuses them) and be longer: the inode and
    /// the length alone then let reading go on at the old offset, in the middle of a line of
    /// another file. The bytes before the offset must still be these, or all is read again.
    tail: Vec<u8>,
    steps: HashMap<StepId, StepLog>,
    /// Every audit entry in the log, by seq (the log is emptied when compacted, so this is
    /// bounded by its size). The first record of a seq wins: a later copy (a forged or
    /// reordered line) is not read; entries past the audit file's end must chain (checked by
    /// the writer that copies them, and by `verify`).
    audit: BTreeMap<u64, AuditEntry>,
}

impl Index {
    /// Reads what was appended since the last refresh (all of it if the log was replaced).
    fn refresh(&mut self, path: &Path) -> Result<(), StoreError> {
        let file = match crate::bounded::open_no_follow(path) {
            Ok(Some(f)) => f,
            Ok(None) => {
                *self = Self::default();
                return Ok(());
            }
            Err(e) => return Err(io_err(format!("opening {}", path.display()))(e)),
        };
        self.refresh_from(&file, path)
    }

    /// [`Self::refresh`] from the log already open (and locked) as `file`.
    fn refresh_from(&mut self, file: &File, path: &Path) -> Result<(), StoreError> {
        let meta = file
            .metadata()
            .map_err(io_err(format!("reading {}", path.display())))?;
        if !meta.is_file() {
            return Err(corrupt(path, "not a regular file"));
        }
        if meta.ino() != self.ino || meta.len() < self.offset || !self.same_tail(file) {
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
            let bad = |why: String| corrupt(path, format!("the line at byte {at} {why}"));
            // The task kept as its text (as written): never built into a tree to be written
            // out again.
            let record: Line<Box<RawValue>, AuditEntry> =
                serde_json::from_slice(line).map_err(|e| bad(format!("is not a record ({e})")))?;
            let task = match (record.step, record.revision, record.task) {
                (Some(step), Some(revision), Some(task)) => {
                    Some((step, revision, Arc::from(task.get())))
                }
                (None, None, None) if record.audit.is_some() => None,
                _ => {
                    return Err(bad(
                        "is neither a whole task record nor an audit entry".into()
                    ));
                }
            };
            self.add(task, record.audit);
            at += line.len() as u64 + 1;
        }
        self.advance(&buf[..=end]);
        Ok(())
    }

    /// Takes in what this process has just appended at `from` (under the log's lock), without
    /// reading it back: only if this index has read the file, `ino`, exactly up to `from`;
    /// otherwise the next refresh reads it (a reader got there first, or the index was behind).
    pub(super) fn ingest(
        &mut self,
        ino: u64,
        from: u64,
        bytes: &[u8],
        records: impl IntoIterator<Item = (Option<(StepId, Revision, Arc<str>)>, Option<AuditEntry>)>,
    ) {
        if self.ino != ino || self.offset != from || !bytes.ends_with(b"\n") {
            return;
        }
        for (task, audit) in records {
            self.add(task, audit);
        }
        self.advance(bytes);
    }

    /// One record read (or written): the step's newest revisions, the audit entry by seq.
    fn add(&mut self, task: Option<(StepId, Revision, Arc<str>)>, audit: Option<AuditEntry>) {
        if let Some((step, revision, text)) = task {
            let revisions = &mut self.steps.entry(step).or_default().revisions;
            revisions.insert(revision, text);
            if revisions.len() > KEEP_REVISIONS {
                revisions.pop_first();
            }
        }
        if let Some(entry) = audit {
            self.audit.entry(entry.seq).or_insert(entry);
        }
    }

    /// Moves past `read` (whole lines just taken in), keeping its last bytes as the tail.
    fn advance(&mut self, read: &[u8]) {
        self.offset += read.len() as u64;
        let keep = TAIL.min(read.len());
        if keep < TAIL {
            // Less than TAIL read this time: the earlier tail's end goes first.
            let old = self.tail.len().saturating_sub(TAIL - keep);
            self.tail.drain(..old);
        } else {
            self.tail.clear();
        }
        self.tail.extend_from_slice(&read[read.len() - keep..]);
    }

    /// Whether `file` still holds, just before `offset`, the bytes last read there.
    fn same_tail(&self, file: &File) -> bool {
        if self.tail.is_empty() {
            return true;
        }
        let mut now = vec![0; self.tail.len()];
        let from = self.offset.saturating_sub(self.tail.len() as u64);
        file.read_exact_at(&mut now, from).is_ok() && now == self.tail
    }
}

impl Index {
    /// How far the log has been read: the end of its last complete line.
    pub(super) const fn offset(&self) -> u64 {
        self.offset
    }

    /// The log's audit entries from sequence number `next` on, in order.
    pub(super) fn audit_from(&self, next: u64) -> impl Iterator<Item = &AuditEntry> {
        self.audit.range(next..).map(|(_, e)| e)
    }

    /// The log's copy of audit entry `seq`, if it holds one.
    pub(super) fn audit_at(&self, seq: u64) -> Option<&AuditEntry> {
        self.audit.get(&seq)
    }

    /// The newest record of each step (what compaction writes).
    pub(super) fn latest(&self) -> Vec<(StepId, Revision, Arc<str>)> {
        self.steps
            .iter()
            .filter_map(|(step, log)| {
                let (rev, text) = log.revisions.last_key_value()?;
                Some((step.clone(), *rev, Arc::clone(text)))
            })
            .collect()
    }

    /// Which record of a step is current, given the snapshot's at `stored` (as `merge` decides
    /// it, without reading either record).
    pub(super) fn against(&self, step: &StepId, stored: Revision) -> Current {
        let Some((log, (&latest, text))) = self
            .steps
            .get(step)
            .and_then(|log| Some((log, log.revisions.last_key_value()?)))
        else {
            return Current::Stored;
        };
        if latest <= stored {
            Current::Stored
        } else if log.revisions.contains_key(&stored) {
            Current::Compare
        } else {
            Current::Logged(latest, Arc::clone(text))
        }
    }

    /// Whether the log holds any audit entry.
    pub(super) fn has_audit(&self) -> bool {
        !self.audit.is_empty()
    }
}

/// A task file as read: its bytes, or why they could not be used.
pub(super) type FileTask = Result<Versioned<Task>, StoreError>;

impl Inner {
    /// Runs `f` on this process's view of an execution's log, brought up to date first.
    pub(super) fn with_wal<T>(
        &self,
        plan: PlanId,
        id: ExecutionId,
        f: impl FnOnce(&Index) -> T,
    ) -> Result<T, StoreError> {
        self.with_index(plan, id, None, f)
    }

    /// [`Self::with_wal`] with the log already open as `file` (the writer's, under its lock):
    /// brought up to date without opening it again.
    pub(super) fn with_open_wal<T>(
        &self,
        plan: PlanId,
        id: ExecutionId,
        file: &File,
        f: impl FnOnce(&Index) -> T,
    ) -> Result<T, StoreError> {
        self.with_index(plan, id, Some(file), f)
    }

    /// Hands what this process just appended to its view of the log (see [`Index::ingest`]).
    pub(super) fn ingest_written(
        &self,
        id: ExecutionId,
        ino: u64,
        from: u64,
        bytes: &[u8],
        records: impl IntoIterator<Item = (Option<(StepId, Revision, Arc<str>)>, Option<AuditEntry>)>,
    ) {
        if let Some(index) = self
            .wal_index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&id)
        {
            index.ingest(ino, from, bytes, records);
        }
    }

    fn with_index<T>(
        &self,
        plan: PlanId,
        id: ExecutionId,
        file: Option<&File>,
        f: impl FnOnce(&Index) -> T,
    ) -> Result<T, StoreError> {
        let path = self.wal_file(plan, id);
        let mut indexes = self
            .wal_index
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let index = indexes.entry(id).or_default();
        match file {
            Some(file) => index.refresh_from(file, &path)?,
            None => index.refresh(&path)?,
        }
        Ok(f(index))
    }

    /// The current task of each step: its stored record (read before the log: the snapshot,
    /// or a task file of the older layout) merged with the log.
    pub(super) fn merge_tasks(
        &self,
        plan: PlanId,
        id: ExecutionId,
        stored: super::task_snapshot::Stored,
    ) -> Result<Vec<Versioned<Task>>, StoreError> {
        let wal_path = self.wal_file(plan, id);
        let snapshot = self.snapshot_file(plan, id);
        let legacy = stored.legacy;
        self.with_wal(plan, id, |index| {
            stored
                .tasks
                .into_iter()
                .map(|(step, file)| {
                    let path = if legacy {
                        self.task_file(plan, id, &step)
                    } else {
                        snapshot.clone()
                    };
                    merge(&path, &wal_path, &step, file, index.steps.get(&step))
                })
                .collect()
        })?
    }

    /// The lines of an audit log as read: its file's complete lines, then (an execution's log
    /// not sealed) the write-ahead log's entries past them, i.e. entries made durable whose
    /// copy in the file was not written (a writer killed in between) or lost (a power
    /// failure). A sealed log is its file alone: sealing made the file whole and durable.
    pub(super) fn audit_lines(&self, log: AuditLogId) -> Result<Vec<String>, StoreError> {
        let path = self.audit_file(log);
        let mut lines = read_log_lines(&path)?;
        if let AuditLogId::Execution {
            plan_id,
            execution_id,
        } = log
            && !super::layout::seal_file(&path).exists()
        {
            let next = lines.len() as u64;
            let tail = self.with_wal(plan_id, execution_id, |index| {
                index
                    .audit_from(next)
                    .map(serde_json::to_string)
                    .collect::<Result<Vec<_>, _>>()
            })?;
            lines.extend(tail.map_err(|e| StoreError::backend("encoding an audit entry", e))?);
        }
        Ok(lines)
    }
}

/// The current task of one step: the stored record unless the log holds a newer revision.
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
            // Behind the log: the log holds the task's transitions since the snapshot was
            // written. If it also holds the stored revision, the two must be the same record.
            if let Some(same) = log.and_then(|l| l.revisions.get(&f.revision)) {
                let logged: serde_json::Value = serde_json::from_str(same)
                    .map_err(|e| corrupt(wal_path, format!("a task record: {e}")))?;
                let stored = serde_json::to_value(&f.value)
                    .map_err(|e| StoreError::backend("encoding a task", e))?;
                if logged != stored {
                    return Err(corrupt(
                        path,
                        format!(
                            "its record of task {step} differs from the write-ahead log's record of revision {}: changed behind orca's back",
                            f.revision
                        ),
                    ));
                }
            }
        }
        Err(StoreError::Corrupt { .. }) => {}
        Err(_) => return file,
    }
    let task = decode_logged(wal_path, step, text, latest)?;
    if file.is_err() {
        tracing::warn!(path = %path.display(), "unreadable task file: using its write-ahead log record");
    }
    Ok(task)
}

/// A step's record in the log, decoded: it must be a task of that step.
pub(super) fn decode_logged(
    wal_path: &Path,
    step: &StepId,
    text: &str,
    revision: Revision,
) -> Result<Versioned<Task>, StoreError> {
    let value = Task::from_json(text).map_err(|e| corrupt(wal_path, e.to_string()))?;
    if value.step_id() != step {
        return Err(corrupt(
            wal_path,
            format!("a record of step {step} holds task {}", value.step_id()),
        ));
    }
    Ok(Versioned { value, revision })
}
