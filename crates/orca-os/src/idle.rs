//! Signs of life of a child run besides its output: whether any file under a directory was
//! modified since a moment. [`crate::process::run_captured_watched`] asks it when a run has
//! been silent for its idle limit, before it ends the run as idle.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// When a silent run is ended: nothing on stdout or stderr and no file under `tree` modified
/// for `after`.
#[derive(Debug, Clone, Copy)]
pub struct IdleLimit<'a> {
    /// How long a run may show no sign of life.
    pub after: Duration,
    /// The directory whose files count as signs of life (a changed file, a created or
    /// removed one); `None`: only output counts.
    pub tree: Option<&'a Path>,
}

/// Entries looked at before the scan gives up and answers "changed" (a tree too large to
/// scan is not a reason to end a run).
const MAX_ENTRIES: usize = 200_000;

/// Whether anything under `root` (itself included, symlinks not followed) was modified after
/// `since`. Unreadable entries are skipped; a tree larger than [`MAX_ENTRIES`] counts as
/// changed.
#[must_use]
pub fn modified_since(root: &Path, since: SystemTime) -> bool {
    let newer = |p: &Path| {
        std::fs::symlink_metadata(p)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t > since)
    };
    let mut stack: Vec<PathBuf> = vec![root.to_path_buf()];
    let mut looked = 0usize;
    while let Some(dir) = stack.pop() {
        if newer(&dir) {
            return true;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            looked += 1;
            if looked > MAX_ENTRIES {
                return true;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(entry.path());
            } else if entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t > since)
            {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_created_or_removed_file_is_a_change() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/f"), "1").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let t = SystemTime::now();
        assert!(!modified_since(dir.path(), t), "nothing changed yet");
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(dir.path().join("a/b/f"), "2").unwrap();
        assert!(modified_since(dir.path(), t), "a written file");
        let t = SystemTime::now();
        std::thread::sleep(Duration::from_millis(20));
        std::fs::remove_file(dir.path().join("a/b/f")).unwrap();
        assert!(modified_since(dir.path(), t), "a removed file");
    }
}
