//! Atomic, durable writes (temp file + fsync + rename/link + directory fsync), durable
//! directory creation, and `flock`ed sidecar locks.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::Inner;
use super::codec::io_err;
use super::layout::file_name;
use crate::error::StoreError;
use crate::perms;

pub(super) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(format!("syncing directory {}", dir.display())))
}

/// Creates a directory (and missing parents) durably: each new directory's parent is synced.
pub(super) fn ensure_dir(dir: &Path) -> Result<(), StoreError> {
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
pub(super) enum LockMode {
    Exclusive,
    Shared,
}

/// Runs `f` holding an exclusive `flock` on `lock` (created if needed).
pub(super) fn with_lock<T>(
    lock: &Path,
    f: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    with_lock_mode(lock, LockMode::Exclusive, f)
}

pub(super) fn with_lock_mode<T>(
    lock: &Path,
    mode: LockMode,
    f: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    with_lock_file(lock, mode, |_| f())
}

/// [`with_lock_mode`], handing `f` the open lock file (for [`with_task_lock`]).
pub(super) fn with_lock_file<T>(
    lock: &Path,
    mode: LockMode,
    f: impl FnOnce(&File) -> Result<T, StoreError>,
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
    let result = f(&file);
    drop(file);
    result
}

/// Runs `f` holding one task's lock, exclusive. On Linux that is byte `slot` (the step's place
/// in the plan) of the execution's header lock file, already open and `flock`ed shared as
/// `header_lock`: an open-file-description lock, which is independent of the `flock`, excludes
/// other descriptors in this process as in others, and goes when the descriptor is closed (so
/// a killed writer leaves nothing held). No lock file per task: creating one was an inode
/// allocation per task. Elsewhere, the task's own `.lock` file beside `task_file`.
pub(super) fn with_task_lock<T>(
    header_lock: &File,
    header_path: &Path,
    slot: u64,
    task_file: &Path,
    f: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let _ = task_file;
        lock_byte(header_lock, slot).map_err(io_err(format!(
            "locking byte {slot} of {}",
            header_path.display()
        )))?;
        let result = f();
        // Released at once, not only when the descriptor closes: the caller may hold the
        // header lock a little longer.
        let _ = unlock_byte(header_lock, slot);
        result
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = (header_lock, header_path, slot);
        with_lock(&task_file.with_extension("lock"), f)
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn byte_range(kind: libc::c_int, slot: u64) -> io::Result<libc::flock> {
    let start = libc::off_t::try_from(slot)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "lock slot out of range"))?;
    Ok(libc::flock {
        l_type: libc::c_short::try_from(kind)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "lock type out of range"))?,
        l_whence: libc::c_short::try_from(libc::SEEK_SET)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "whence out of range"))?,
        l_start: start,
        l_len: 1,
        l_pid: 0,
    })
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn lock_byte(file: &File, slot: u64) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, fcntl};
    let range = byte_range(libc::F_WRLCK, slot)?;
    loop {
        match fcntl(file, FcntlArg::F_OFD_SETLKW(&range)) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn unlock_byte(file: &File, slot: u64) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, fcntl};
    let range = byte_range(libc::F_UNLCK, slot)?;
    fcntl(file, FcntlArg::F_OFD_SETLK(&range))
        .map(|_| ())
        .map_err(io::Error::from)
}

impl Inner {
    pub(super) fn tmp_path(&self, path: &Path) -> PathBuf {
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let name = format!(".{}.{}.{n}.tmp", file_name(path), std::process::id());
        path.with_file_name(name)
    }

    /// Writes a temp file in the target's directory and syncs its data; returns its path.
    pub(super) fn write_tmp(
        &self,
        path: &Path,
        bytes: &[u8],
        sync: bool,
    ) -> Result<PathBuf, StoreError> {
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
    pub(super) fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
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
    pub(super) fn create_atomic(
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
}
