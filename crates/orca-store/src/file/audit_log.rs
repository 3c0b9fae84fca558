//! The audit logs on disk: JSON lines appended under a `flock`, one fsync per group-committed
//! batch, torn tails ignored by readers and cut by the next append; seals.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::PoisonError;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::Inner;
use super::atomic::{ensure_dir, sync_dir};
use super::codec::{corrupt, io_err, read_bounded, read_opt};
use super::layout::seal_file;
use crate::audit::{self, AuditEntry, NewAuditEntry, Seal};
use crate::error::StoreError;
use crate::perms;
use crate::port::AuditLogId;

// ----- audit files -----

/// The complete lines of a log. A last line without its newline is a torn append (the process
/// died mid-write, before the append was acknowledged): it is left out, and truncated away by
/// the next append.
pub(super) fn read_log_lines(path: &Path) -> Result<Vec<String>, StoreError> {
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
pub(super) struct SealFile {
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

pub(super) fn read_seal(path: &Path) -> Result<Option<Seal>, StoreError> {
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

pub(super) fn parse_entries(path: &Path, lines: &[String]) -> Result<Vec<AuditEntry>, StoreError> {
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
pub(super) fn last_entry(file: &mut File, path: &Path) -> Result<Option<AuditEntry>, StoreError> {
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

pub(super) fn truncate_torn(file: &File, path: &Path, at: u64) -> Result<(), StoreError> {
    tracing::warn!(path = %path.display(), at, "truncating a torn last line (an unacknowledged append)");
    file.set_len(at)
        .and_then(|()| file.sync_data())
        .map_err(io_err(format!("truncating {}", path.display())))
}

pub(super) fn open_log(path: &Path) -> Result<File, StoreError> {
    // Usually the log exists: one open, no checks of its directory.
    match perms::open(perms::options().read(true).append(true), path) {
        Ok(file) => {
            file.lock()
                .map_err(io_err(format!("locking {}", path.display())))?;
            return Ok(file);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(format!("opening {}", path.display()))(e)),
    }
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
    /// same log (group commit). Returns once the entry is on disk. An execution's entries go
    /// through its write-ahead log (`wal_write.rs`), in one order with its task transitions.
    pub(super) fn append(
        &self,
        log: AuditLogId,
        entry: NewAuditEntry,
    ) -> Result<AuditEntry, StoreError> {
        if let AuditLogId::Execution {
            plan_id,
            execution_id,
        } = log
        {
            return self.append_execution_entry(plan_id, execution_id, entry);
        }
        self.log_queues
            .submit(log, entry, "appending to an audit log", |batch| {
                self.append_batch(log, batch)
            })
    }

    /// Appends entries in order with one write and one fsync: all or nothing (on failure the
    /// log is cut back to its length before). Plan logs and run registers only.
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
    pub(super) fn check_head(
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

    pub(super) fn seal(&self, log: AuditLogId) -> Result<Seal, StoreError> {
        let path = self.audit_file(log);
        let seal_path = seal_file(&path);
        if let AuditLogId::Execution {
            plan_id,
            execution_id,
        } = log
            && !seal_path.exists()
            && self.exec_file(plan_id, execution_id).is_file()
        {
            // The execution has ended: its write-ahead log is folded into the task snapshot and
            // emptied (one file each, ADR 0056), so an ended execution's tasks are whole in its
            // snapshot. Before the audit file's lock: compaction takes it itself.
            self.compact_wal(plan_id, execution_id)?;
        }
        let mut file = open_log(&path)?;
        if let Some(seal) = read_seal(&seal_path)? {
            return Ok(seal);
        }
        if let AuditLogId::Execution {
            plan_id,
            execution_id,
        } = log
        {
            // What is sealed is the file: first every entry its write-ahead log holds past
            // it, made durable in the file itself (the log is emptied by the next compaction).
            self.audit_head(plan_id, execution_id, &mut file, &path, None)?;
            file.sync_data()
                .map_err(io_err(format!("syncing {}", path.display())))?;
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
}
