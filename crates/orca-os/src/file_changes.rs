//! What a step attempt changed, outside a git repository: the list of files whose content
//! changed, from a digest of every file of the project before and after the attempt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use orca_core::changes::compare_files;
use orca_core::{ChangedFile, Digest, ExecutionId, Snapshot, StepChanges, StepId, WorkspaceError};

/// Outside a git repository: a step's changes as the list of files whose content changed
/// (`.orca/` and `.git/` left out; symbolic links compared by target, never followed; a file
/// over 64 MiB by its size and change time).
#[derive(Debug, Clone)]
pub struct FileChanges {
    root: PathBuf,
}

impl FileChanges {
    /// The recorder for the project at `root`.
    #[must_use]
    pub const fn new(root: PathBuf) -> Self {
        Self { root }
    }
}

/// Files larger than this are compared by size and change time, not read.
const READ_AT_MOST: u64 = 64 * 1024 * 1024;

/// A file's content digest (its size and change time past [`READ_AT_MOST`]).
fn fingerprint(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt as _;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.len() > READ_AT_MOST => {
            format!("large:{}:{}.{}", m.len(), m.ctime(), m.ctime_nsec())
        }
        _ => std::fs::read(path)
            .map(|b| Digest::of_bytes(&b).hex())
            .unwrap_or_else(|e| format!("unreadable:{e}")),
    }
}

fn walk(root: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(rel) = path.strip_prefix(root) else {
                continue;
            };
            let rel = rel.to_string_lossy().into_owned();
            if rel == ".orca" || rel == ".git" {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                todo.push(path);
            } else if kind.is_symlink() {
                let target = std::fs::read_link(&path).unwrap_or_default();
                files.insert(rel, format!("link:{}", target.to_string_lossy()));
            } else if kind.is_file() {
                files.insert(rel, fingerprint(&path));
            }
        }
    }
    files
}

#[async_trait]
impl StepChanges for FileChanges {
    fn in_repository(&self) -> bool {
        false
    }

    async fn snapshot(
        &self,
        _execution: ExecutionId,
        _step: &StepId,
        _attempt: u32,
        workdir: Option<&Path>,
    ) -> Result<Snapshot, WorkspaceError> {
        let root = workdir.unwrap_or(&self.root).to_path_buf();
        tokio::task::spawn_blocking(move || walk(&root))
            .await
            .map(Snapshot::Files)
            .map_err(|e| WorkspaceError::Git(format!("cannot list the project's files: {e}")))
    }

    async fn compare(
        &self,
        _execution: ExecutionId,
        _step: &StepId,
        _attempt: u32,
        before: Snapshot,
        after: Snapshot,
    ) -> Result<(Vec<ChangedFile>, Option<(String, String)>), WorkspaceError> {
        match (before, after) {
            (Snapshot::Files(b), Snapshot::Files(a)) => Ok((compare_files(&b, &a), None)),
            _ => Err(WorkspaceError::Git(
                "a snapshot outside a repository is a list of files".to_owned(),
            )),
        }
    }

    async fn patch(&self, _before: &str, _after: &str) -> Result<String, WorkspaceError> {
        Err(WorkspaceError::NotARepository(self.root.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_skips_orca_and_git_and_reads_links_without_following_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".orca")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join(".orca/state.json"), "x").unwrap();
        std::fs::write(root.join(".git/HEAD"), "x").unwrap();
        std::fs::write(root.join("src/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();
        let files = walk(root);
        let names: Vec<&str> = files.keys().map(String::as_str).collect();
        assert_eq!(names, ["link", "src/a.txt"]);
        assert_eq!(files["link"], "link:/etc/passwd");
        std::fs::write(root.join("src/a.txt"), "b").unwrap();
        let changed = compare_files(&files, &walk(root));
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].path, "src/a.txt");
    }
}
