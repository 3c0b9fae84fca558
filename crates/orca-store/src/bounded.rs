//! Bounded reads of regular files only: a record or plan file that is a symbolic link, a device
//! (`/dev/zero`), a FIFO or a directory is refused — a link is never followed, a FIFO never
//! waited on — and no read takes more than a limit.

use std::fs::File;
use std::io::{self, Read as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// Opens `path` for reading without following a symbolic link (in its last component) and
/// without waiting on a FIFO; `Ok(None)` if it does not exist.
///
/// # Errors
///
/// `InvalidInput` for a symbolic link; other I/O errors as they come.
pub fn open_no_follow(path: &Path) -> io::Result<Option<File>> {
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a symbolic link: orca never follows one among its records",
        )),
        Err(e) => Err(e),
    }
}

/// The largest document (plan, header, task, seal) orca reads: 64 MiB.
pub const MAX_DOCUMENT: u64 = 64 << 20;

/// The largest audit log orca reads whole: 4 GiB.
pub const MAX_LOG: u64 = 4 << 30;

/// Reads a regular file of at most `max` bytes; `Ok(None)` if it does not exist.
///
/// # Errors
///
/// `InvalidInput` for something that is not a regular file or is larger than `max` (the
/// message says which); other I/O errors as they come.
pub fn read_regular(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let Some(file) = open_no_follow(path)? else {
        return Ok(None);
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a device, FIFO, socket or directory is never read)",
        ));
    }
    if meta.len() > max {
        return Err(too_large(max));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large(max));
    }
    Ok(Some(bytes))
}

fn too_large(max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("larger than {} MiB: not an orca file", max >> 20),
    )
}

/// Reads a regular UTF-8 text file of at most `max` bytes.
///
/// # Errors
///
/// Missing, not a regular file, too large, or not UTF-8.
pub fn read_text(path: &Path, max: u64) -> io::Result<String> {
    let bytes = read_regular(path, max)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
    String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Removes temp files (`.NAME.PID.N.tmp`) in `dir` (and beneath it, if `recursive`) left by a
/// process that is gone (a crash or a full disk between writing a temp file and renaming it).
/// A live writer's temp files are left alone. Returns how many were removed.
pub(crate) fn clean_stale_temps(dir: &Path, recursive: bool) -> usize {
    let mut removed = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                if recursive {
                    stack.push(path);
                }
                continue;
            }
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(stem) = name.strip_suffix(".tmp").filter(|_| name.starts_with('.')) else {
                continue;
            };
            // `.{file}.{pid}.{n}`: the pid is the second-to-last dot-separated part.
            let mut parts = stem.rsplit('.');
            let pid = parts.nth(1).and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| !process_alive(p)) && std::fs::remove_file(&path).is_ok() {
                tracing::warn!(path = %path.display(), "removed a temp file left by a process that is gone");
                removed += 1;
            }
        }
    }
    removed
}

/// Whether a process with this pid exists (on this host).
fn process_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    Path::new("/proc").join(pid.to_string()).exists()
}
