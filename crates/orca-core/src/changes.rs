//! What a step attempt changed (its diff), and the port that records it.
//!
//! Before and after each attempt the directory it runs in is snapshotted: in a git repository
//! as a git tree (built in a temporary index, so the user's index, working tree and branches
//! are never touched), elsewhere as a list of files and their content digests. The two are
//! compared into a [`RecordedChanges`], which goes into the attempt's `step.changes` audit
//! entry; with trees, the full diff can be shown later from the repository.

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::id::{ExecutionId, StepId};
use crate::isolation::WorkspaceError;

/// How many changed files an entry lists at most (the rest are counted).
pub const MAX_LISTED_FILES: usize = 1000;

/// What the directory of an attempt held at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Snapshot {
    /// A git tree id (the repository's object store keeps it).
    Tree(String),
    /// Outside a git repository: each file's path (relative, `/`-separated) and a digest of
    /// its content.
    Files(BTreeMap<String, String>),
}

/// How one file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileChange {
    /// It was created.
    Added,
    /// Its content or mode changed.
    Modified,
    /// It was removed.
    Deleted,
}

impl FileChange {
    /// A one-letter mark, as `git diff --name-status` prints it.
    #[must_use]
    pub const fn mark(self) -> char {
        match self {
            Self::Added => 'A',
            Self::Modified => 'M',
            Self::Deleted => 'D',
        }
    }
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangedFile {
    /// Its path, relative to the repository's top (or the project outside a repository).
    pub path: String,
    /// How it changed.
    pub change: FileChange,
    /// Lines added (`None`: binary, or not counted outside a repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added: Option<u64>,
    /// Lines removed (`None`: binary, or not counted outside a repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<u64>,
}

/// What an attempt changed, as its `step.changes` entry records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedChanges {
    /// The step.
    pub step: StepId,
    /// The attempt (from 1).
    pub attempt: u32,
    /// Whether the attempt ran in a worktree of its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub worktree: bool,
    /// Other steps ran in place at the same time: what they changed may be in this diff too
    /// (a snapshot is of the whole working tree).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
    /// The tree before the attempt (`None` outside a git repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// The tree after the attempt (`None` outside a git repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// The changed files, sorted by path, at most [`MAX_LISTED_FILES`].
    pub files: Vec<ChangedFile>,
    /// How many more changed files there were than listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_files: u64,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
const fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RecordedChanges {
    /// Lines added and removed over every listed file.
    #[must_use]
    pub fn totals(&self) -> (u64, u64) {
        self.files.iter().fold((0, 0), |(a, r), f| {
            (
                a + f.added.unwrap_or_default(),
                r + f.removed.unwrap_or_default(),
            )
        })
    }

    /// Whether the diff can be shown (both trees are known).
    #[must_use]
    pub fn trees(&self) -> Option<(&str, &str)> {
        self.before.as_deref().zip(self.after.as_deref())
    }
}

/// The changed files between two file lists ([`Snapshot::Files`]), sorted by path.
#[must_use]
pub fn compare_files(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Vec<ChangedFile> {
    let mut files = Vec::new();
    for (path, digest) in before {
        let change = match after.get(path) {
            None => FileChange::Deleted,
            Some(d) if d != digest => FileChange::Modified,
            Some(_) => continue,
        };
        files.push(ChangedFile {
            path: path.clone(),
            change,
            added: None,
            removed: None,
        });
    }
    for path in after.keys().filter(|p| !before.contains_key(*p)) {
        files.push(ChangedFile {
            path: path.clone(),
            change: FileChange::Added,
            added: None,
            removed: None,
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// Records what step attempts change. Implemented with git in `orca-os`; the binary wires it.
#[async_trait]
pub trait StepChanges: Send + Sync + std::fmt::Debug {
    /// Whether changes are recorded as git trees (the project is in a git repository).
    fn in_repository(&self) -> bool;

    /// Snapshots the directory an attempt of `step` runs in: `workdir` (a step's worktree),
    /// or the project when `None`. Called before the attempt and after it, then
    /// [`Self::compare`].
    async fn snapshot(
        &self,
        execution: ExecutionId,
        step: &StepId,
        attempt: u32,
        workdir: Option<&Path>,
    ) -> Result<Snapshot, WorkspaceError>;

    /// Compares two snapshots of one attempt, keeping both trees reachable (git's garbage
    /// collection must not drop them).
    async fn compare(
        &self,
        execution: ExecutionId,
        step: &StepId,
        attempt: u32,
        before: Snapshot,
        after: Snapshot,
    ) -> Result<(Vec<ChangedFile>, Option<(String, String)>), WorkspaceError>;

    /// The unified diff between two recorded trees, without colour, read with a git that runs
    /// nothing the repository names (no external diff, no text conversion).
    async fn patch(&self, before: &str, after: &str) -> Result<String, WorkspaceError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_compare_into_added_modified_deleted() {
        let before: BTreeMap<String, String> = [("a", "1"), ("b", "2"), ("c", "3")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let after: BTreeMap<String, String> = [("a", "1"), ("b", "9"), ("d", "4")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let got: Vec<(String, char)> = compare_files(&before, &after)
            .into_iter()
            .map(|f| (f.path, f.change.mark()))
            .collect();
        assert_eq!(
            got,
            [
                ("b".to_owned(), 'M'),
                ("c".to_owned(), 'D'),
                ("d".to_owned(), 'A')
            ]
        );
    }
}
