//! Execution leases (a `flock`ed record file, ADR 0007/0010) and resource locks.

use std::fs::{File, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use orca_core::{ExecutionId, Holder, PlanId};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::Inner;
use super::atomic::ensure_dir;
use super::codec::{corrupt, io_err};
use crate::error::StoreError;
use crate::perms;
use crate::port::{Lease, LeaseInfo, ResourceGuard};

/// What a lease file records.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LeaseRecord {
    pub(super) format_version: orca_core::FormatVersion,
    pub(super) holder: Holder,
    #[serde(with = "time::serde::rfc3339")]
    pub(super) acquired_at: OffsetDateTime,
    /// The holder's last heartbeat.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub(super) renewed_at: Option<OffsetDateTime>,
}

pub(super) struct LeaseFileGuard {
    pub(super) file: Arc<File>,
}

impl Drop for LeaseFileGuard {
    fn drop(&mut self) {
        // A clean release leaves an empty file: the next holder takes over nothing. The kernel
        // drops the flock when the file is closed (or the process dies).
        let _ = self.file.set_len(0);
    }
}

impl Inner {
    pub(super) fn lease_of(
        &self,
        plan: PlanId,
        id: ExecutionId,
    ) -> Result<Option<LeaseInfo>, StoreError> {
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

    pub(super) fn acquire_lease(
        &self,
        id: ExecutionId,
        holder: &Holder,
    ) -> Result<Lease, StoreError> {
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
        // The lock is ours. The new holder starts from task files that hold everything the
        // write-ahead log does (a dead writer's last records included).
        self.compact_wal(plan, id)?;
        // A holder still named in the file died without releasing.
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

    pub(super) fn try_lock_resources(
        &self,
        names: &[String],
    ) -> Result<Option<ResourceGuard>, StoreError> {
        let dir = self.root.join("locks");
        ensure_dir(&dir)?;
        let mut unique: Vec<String> = names.to_vec();
        unique.sort();
        unique.dedup();
        let mut held = Vec::with_capacity(unique.len());
        for name in &unique {
            let path = dir.join(lock_file_name(name));
            // Held through a read-only descriptor: the step's processes inherit it (so the
            // lock lasts as long as they do, ADR 0010) and must not write through it.
            let read_only = || perms::open(perms::options().read(true), &path);
            let file = match read_only() {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => perms::open(
                    perms::options().create(true).truncate(false).write(true),
                    &path,
                )
                .and_then(|created| {
                    drop(created);
                    read_only()
                }),
                other => other,
            }
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
pub(super) fn lock_file_name(name: &str) -> String {
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
pub(super) fn renew_lease_file(file: &File, record: &LeaseRecord) -> Result<(), StoreError> {
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

pub(super) fn read_lease_record(
    mut file: &File,
    path: &Path,
) -> Result<Option<LeaseRecord>, StoreError> {
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
