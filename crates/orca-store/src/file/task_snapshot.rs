//! An execution's tasks as one file (ADR 0056): `executions/{exec_id}/tasks.json`, every task
//! of the execution with its revision, written durably (temp file, fsync, rename, directory
//! fsync) when the execution is created and when its write-ahead log is compacted — never per
//! transition. Between the two, a task's newer revisions are in the write-ahead log alone
//! ([`super::wal`]), and a reader merges the two exactly as it merged a task file with the log.
//!
//! ```text
//! {"tasks": [
//! {"revision":1,"status":"pending","format_version":1,"step_id":"a"},
//! {"revision":3,"status":"completed",…,"step_id":"b",…}
//! ]}
//! ```
//!
//! Executions written before this layout keep a file per task under `tasks/`: they are read as
//! they are, and their next compaction writes the snapshot and removes the per-task files.
//!
//! One record a line. A reader parses the snapshot once per version of the file (its
//! [`Stamp`]) and keeps each task's text, so a task update reads one task's record however many
//! tasks the execution has; compaction writes the log's newer records into it as text (the
//! revision put first), decoding only the records it keeps, to check them.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};

use orca_core::{ExecutionId, PlanId, StepId, Task};

use super::codec::{corrupt, decode, io_err, read_bounded, with_revision};
use super::listing::Stamp;
use super::{Inner, wal};
use crate::error::StoreError;
use crate::port::{Revision, Versioned};

/// The snapshot's name in an execution's directory.
pub(super) const SNAPSHOT: &str = "tasks.json";

/// How many executions' parsed snapshots a process keeps (emptied when full: a run touches one
/// execution, a listing each once).
const CACHED_SNAPSHOTS: usize = 64;

/// A parsed snapshot: each task's record (its document with `"revision"`), by step.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    /// Why the whole file cannot be used (not JSON, not a snapshot): every task then reads as
    /// this error (the write-ahead log may still hold its record).
    broken: Option<String>,
    records: HashMap<StepId, Record>,
    /// The steps in the file's order.
    order: Vec<StepId>,
}

impl Parsed {
    fn parse(bytes: &[u8]) -> Self {
        let value: serde_json::Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => {
                return Self::broken(format!(
                    "not valid JSON ({e}): the file is corrupt or truncated"
                ));
            }
        };
        let Some(tasks) = value
            .as_object()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.get("tasks"))
            .and_then(serde_json::Value::as_array)
        else {
            return Self::broken("not an orca task snapshot (an object of `tasks` alone)".into());
        };
        let mut parsed = Self::default();
        for (i, record) in tasks.iter().enumerate() {
            let step = record
                .get("step_id")
                .and_then(serde_json::Value::as_str)
                .and_then(|s| s.parse::<StepId>().ok());
            let Some(step) = step else {
                return Self::broken(format!("task record {i} has no valid `step_id`"));
            };
            let revision = record
                .get("revision")
                .and_then(serde_json::Value::as_u64)
                .filter(|r| *r >= 1)
                .map(Revision);
            let text = Arc::from(record.to_string());
            if parsed
                .records
                .insert(step.clone(), Record { revision, text })
                .is_some()
            {
                return Self::broken(format!("task {step} is recorded twice"));
            }
            parsed.order.push(step);
        }
        parsed
    }

    /// A task's record as the snapshot holds it (with its `"revision"`).
    fn text(&self, step: &StepId) -> Option<Arc<str>> {
        self.records.get(step).map(|r| Arc::clone(&r.text))
    }

    /// A task's revision in a usable snapshot (`None`: the snapshot or the record is not).
    fn revision(&self, step: &StepId) -> Option<Revision> {
        match &self.broken {
            Some(_) => None,
            None => self.records.get(step).and_then(|r| r.revision),
        }
    }

    fn broken(why: String) -> Self {
        Self {
            broken: Some(why),
            ..Self::default()
        }
    }

    /// One task as the snapshot holds it (the inner error: the log may hold a newer record).
    fn task(&self, path: &Path, step: &StepId) -> wal::FileTask {
        if let Some(why) = &self.broken {
            return Err(corrupt(path, why.clone()));
        }
        let text = &self
            .records
            .get(step)
            .ok_or_else(|| corrupt(path, format!("holds no record of task {step}")))?
            .text;
        decode(path, text.as_bytes(), Task::from_json).and_then(|task| {
            if task.value.step_id() == step {
                Ok(task)
            } else {
                Err(corrupt(
                    path,
                    format!("the record of {step} holds task {}", task.value.step_id()),
                ))
            }
        })
    }
}

/// One task's record in the snapshot: its text, and its revision if the record has a valid one
/// (one without is named as corrupt when the record is decoded).
#[derive(Debug)]
struct Record {
    revision: Option<Revision>,
    text: Arc<str>,
}

/// Steps' records as stored, before the write-ahead log is merged.
#[derive(Debug)]
pub(super) struct Stored {
    /// Read from a file per task (the layout before the snapshot), not from the snapshot.
    pub(super) legacy: bool,
    pub(super) tasks: Vec<(StepId, wal::FileTask)>,
}

/// Encodes a snapshot of `tasks` (each already a redacted document) at their revisions.
pub(super) fn encode_snapshot(
    path: &Path,
    tasks: impl IntoIterator<Item = (serde_json::Value, Revision)>,
) -> Result<Vec<u8>, StoreError> {
    let mut records = Vec::new();
    for (doc, revision) in tasks {
        let serde_json::Value::Object(fields) = doc else {
            return Err(StoreError::backend(
                format!("encoding {}", path.display()),
                "a task must be a JSON object",
            ));
        };
        records.push(with_revision(fields, revision).to_string());
    }
    Ok(encode_records(records))
}

/// The snapshot's bytes from its records' texts (each a JSON object, `"revision"` first): one
/// record a line, so a snapshot reads (and diffs) task by task.
fn encode_records(records: impl IntoIterator<Item = impl AsRef<str>>) -> Vec<u8> {
    let mut bytes = b"{\"tasks\": [".to_vec();
    for (i, record) in records.into_iter().enumerate() {
        bytes.extend_from_slice(if i == 0 { b"\n" } else { b",\n" });
        bytes.extend_from_slice(record.as_ref().as_bytes());
    }
    bytes.extend_from_slice(b"\n]}\n");
    bytes
}

/// A log record's document (a task without `"revision"`, as the writer wrote it) as a snapshot
/// record at `revision`, without building it into a tree: `None` if it is not an object, or
/// already holds a `"revision"` (a forged line: its own would win).
fn record_at(doc: &str, revision: Revision) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Fields {
        revision: Option<serde::de::IgnoredAny>,
    }
    let fields: Fields = serde_json::from_str(doc).ok()?;
    let rest = doc.trim_start().strip_prefix('{')?;
    if fields.revision.is_some() {
        return None;
    }
    let sep = if rest.trim_start().starts_with('}') {
        ""
    } else {
        ","
    };
    Some(format!("{{\"revision\":{}{sep}{rest}", revision.0))
}

impl Inner {
    pub(super) fn snapshot_file(&self, plan: PlanId, id: ExecutionId) -> PathBuf {
        self.exec_sub(plan, id).join(SNAPSHOT)
    }

    /// The snapshot as parsed, from this process's cache while the file is unchanged.
    /// `Ok(None)`: there is no snapshot (an execution of the per-task layout, or one whose
    /// snapshot was removed).
    fn parsed_snapshot(
        &self,
        plan: PlanId,
        id: ExecutionId,
    ) -> Result<Option<Arc<Parsed>>, StoreError> {
        let path = self.snapshot_file(plan, id);
        let stamp = match fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => Stamp::of(&m),
            Ok(_) => return Err(corrupt(&path, "not a regular file")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(format!("reading {}", path.display()))(e)),
        };
        let cached = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .filter(|(s, _)| *s == stamp)
            .map(|(_, p)| Arc::clone(p));
        if let Some(parsed) = cached {
            return Ok(Some(parsed));
        }
        let Some(bytes) = read_bounded(&path, crate::bounded::MAX_LOG)? else {
            return Ok(None);
        };
        let parsed = Arc::new(Parsed::parse(&bytes));
        // Cached under the stamp read before the bytes: a file replaced in between is read
        // again next time (its stamp differs). A long-lived process (`orca serve`) reads many
        // executions: the cache keeps the last few dozen read, not every one.
        let mut cache = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= CACHED_SNAPSHOTS && !cache.contains_key(&id) {
            cache.clear();
        }
        cache.insert(id, (stamp, Arc::clone(&parsed)));
        Ok(Some(parsed))
    }

    /// A step's current task read from the snapshot's record or the log's, whichever is
    /// current, decoding only that one. `None`: read both and merge (no snapshot, a stored
    /// record without a usable revision or not a task, or a revision the log also holds).
    pub(super) fn current_task(
        &self,
        plan: PlanId,
        id: ExecutionId,
        step: &StepId,
    ) -> Result<Option<Versioned<Task>>, StoreError> {
        let Some(parsed) = self.parsed_snapshot(plan, id)? else {
            return Ok(None);
        };
        let Some(stored) = parsed.revision(step) else {
            return Ok(None);
        };
        match self.with_wal(plan, id, |index| index.against(step, stored))? {
            wal::Current::Stored => Ok(parsed.task(&self.snapshot_file(plan, id), step).ok()),
            wal::Current::Logged(revision, text) => {
                wal::decode_logged(&self.wal_file(plan, id), step, &text, revision).map(Some)
            }
            wal::Current::Compare => Ok(None),
        }
    }

    /// Each step's record as stored (before the log is merged): from the snapshot, or from
    /// the per-task files of an execution written before it. Missing altogether or unreadable
    /// → the outer error; a record that is not a task of its step → the inner one.
    pub(super) fn stored_tasks(
        &self,
        plan: PlanId,
        id: ExecutionId,
        steps: &[StepId],
    ) -> Result<Stored, StoreError> {
        if let Some(parsed) = self.parsed_snapshot(plan, id)? {
            let path = self.snapshot_file(plan, id);
            let tasks = steps
                .iter()
                .map(|s| (s.clone(), parsed.task(&path, s)))
                .collect();
            return Ok(Stored {
                legacy: false,
                tasks,
            });
        }
        if !self.tasks_dir(plan, id).is_dir() {
            return Err(corrupt(
                &self.snapshot_file(plan, id),
                "the execution's task records are missing",
            ));
        }
        let tasks = steps
            .iter()
            .map(|s| Ok((s.clone(), self.read_task_file(plan, id, s)?)))
            .collect::<Result<_, StoreError>>()?;
        Ok(Stored {
            legacy: true,
            tasks,
        })
    }

    /// A task file of the per-task layout as it is on disk.
    fn read_task_file(
        &self,
        plan: PlanId,
        id: ExecutionId,
        step: &StepId,
    ) -> Result<wal::FileTask, StoreError> {
        let path = self.task_file(plan, id, step);
        let bytes = super::codec::read_opt(&path)?
            .ok_or_else(|| corrupt(&path, "the task record is missing"))?;
        Ok(decode(&path, &bytes, Task::from_json).and_then(|task| {
            if task.value.step_id() == step {
                Ok(task)
            } else {
                Err(corrupt(
                    &path,
                    format!("holds task {}, not {step}", task.value.step_id()),
                ))
            }
        }))
    }

    /// Writes the snapshot durably (temp file, fsync, rename, directory fsync).
    pub(super) fn write_snapshot(
        &self,
        plan: PlanId,
        id: ExecutionId,
        tasks: impl IntoIterator<Item = (serde_json::Value, Revision)>,
    ) -> Result<(), StoreError> {
        let path = self.snapshot_file(plan, id);
        let bytes = encode_snapshot(&path, tasks)?;
        self.write_atomic(&path, &bytes)
    }

    /// Compaction's part: every step's newest record (the log's where it is newer) written as
    /// the snapshot, then the per-task files of the older layout removed. `Ok(false)`: a step
    /// has no usable record anywhere (the evidence is kept as it is, nothing written).
    pub(super) fn compact_snapshot(
        &self,
        plan: PlanId,
        id: ExecutionId,
        latest: &[(StepId, Revision, Arc<str>)],
    ) -> Result<bool, StoreError> {
        let facts = self.header_facts(plan, id)?;
        let mut steps: Vec<(&StepId, u64)> = facts.steps.iter().map(|(s, i)| (s, *i)).collect();
        steps.sort_by_key(|(_, i)| *i);
        let steps: Vec<StepId> = steps.into_iter().map(|(s, _)| s.clone()).collect();
        // The snapshot's records are kept as text: a task the log is ahead of is never
        // decoded; one it is not is decoded to be checked, and written as it was.
        let parsed = self.parsed_snapshot(plan, id)?;
        let mut legacy_tasks = match parsed {
            Some(_) => None,
            None => Some(
                self.stored_tasks(plan, id, &steps)?
                    .tasks
                    .into_iter()
                    .collect::<HashMap<_, _>>(),
            ),
        };
        let legacy = legacy_tasks.is_some();
        let logged: HashMap<&StepId, (Revision, &Arc<str>)> =
            latest.iter().map(|(s, r, t)| (s, (*r, t))).collect();
        let wal_path = self.wal_file(plan, id);
        let path = self.snapshot_file(plan, id);
        let from_log = |(rev, text): (Revision, &Arc<str>)| {
            record_at(text, rev).ok_or_else(|| {
                corrupt(
                    &wal_path,
                    format!("a record of revision {rev} is not a task"),
                )
            })
        };
        let mut changed = legacy;
        let mut records = Vec::with_capacity(steps.len());
        for step in &steps {
            let stored: Option<(Revision, Option<Arc<str>>)> = match (&parsed, &mut legacy_tasks) {
                (Some(parsed), _) => parsed.revision(step).map(|r| (r, parsed.text(step))),
                (None, Some(tasks)) => tasks
                    .get(step)
                    .and_then(|t| t.as_ref().ok())
                    .map(|t| (t.revision, None)),
                (None, None) => None,
            };
            let newer = logged
                .get(step)
                .copied()
                .filter(|(rev, _)| stored.as_ref().is_none_or(|(s, _)| s < rev));
            if let Some(newer) = newer {
                changed = true;
                records.push(from_log(newer)?);
                continue;
            }
            // Checked as the snapshot's record (or the older layout's file) is read.
            let file = match (&parsed, &mut legacy_tasks) {
                (Some(parsed), _) => parsed.task(&path, step),
                (None, Some(tasks)) => tasks.remove(step).unwrap_or_else(|| {
                    Err(corrupt(&path, format!("holds no record of task {step}")))
                }),
                (None, None) => Err(corrupt(&path, format!("holds no record of task {step}"))),
            };
            match (file, stored) {
                (Ok(_), Some((_, Some(text)))) => records.push(text.to_string()),
                (Ok(task), _) => {
                    let doc = serde_json::to_value(&task.value)
                        .map_err(|e| StoreError::backend("encoding a task", e))?;
                    let serde_json::Value::Object(fields) = doc else {
                        return Err(StoreError::backend("encoding a task", "not a JSON object"));
                    };
                    records.push(with_revision(fields, task.revision).to_string());
                }
                (Err(e), _) => match logged.get(step).copied() {
                    // An unusable record the log has any record of: the log's.
                    Some(logged) => {
                        changed = true;
                        records.push(from_log(logged)?);
                    }
                    None => {
                        tracing::warn!(error = %e, "write-ahead log not compacted");
                        return Ok(false);
                    }
                },
            }
        }
        if changed {
            self.write_atomic(&path, &encode_records(&records))?;
        }
        if legacy {
            let dir = self.tasks_dir(plan, id);
            fs::remove_dir_all(&dir).map_err(io_err(format!("removing {}", dir.display())))?;
            super::atomic::sync_dir(&self.exec_sub(plan, id))?;
        }
        Ok(true)
    }
}
