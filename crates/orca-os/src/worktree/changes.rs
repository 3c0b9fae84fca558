//! What a step attempt changed, as git trees ([`GitChanges`]); outside a repository see
//! [`crate::file_changes`].
//!
//! A tree is built in a temporary index of orca's own, kept in the common git directory (out
//! of every step's reach) for the attempt: `git add --all` then `git write-tree`, with `.orca/`
//! excluded. The first snapshot starts the index from the repository's own (the user's, or the
//! worktree's that orca has just created), for its file stamps; the second reuses the first's.
//! File stamps include the change time, which no step can set back, and orca's git sets
//! `core.trustCtime` itself, so a file whose content changed is always hashed again. The
//! user's index, working tree and refs are never written.
//!
//! The trees are kept reachable by a ref per attempt, outside `refs/heads` and outside
//! `refs/orca/<exec>/` (removed when an execution ends):
//!
//! ```text
//! refs/orca-diff/<exec>/<step>/<attempt>   a commit of the tree after, whose parent holds the tree before
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use orca_core::{
    ChangedFile, ExecutionId, FileChange, Snapshot, StepChanges, StepId, WorkspaceError,
};

use super::GitWorktrees;
use super::git::{check_gitfile, git, git_with_index};

/// Settings of the commands that build a snapshot: stamps are trusted only with the change
/// time, whatever the repository's config says.
const STAMPS: &[&str] = &["-c", "core.trustCtime=true", "-c", "core.checkStat=default"];

/// Records changes as git trees in the repository holding the project.
#[derive(Debug, Clone)]
pub struct GitChanges {
    top: PathBuf,
    sub: PathBuf,
    common: PathBuf,
    worktrees: PathBuf,
}

impl GitWorktrees {
    /// The recorder of step changes in this repository.
    #[must_use]
    pub fn changes(&self) -> GitChanges {
        GitChanges {
            top: self.top.clone(),
            sub: self.sub.clone(),
            common: self.common.clone(),
            worktrees: self.base.clone(),
        }
    }
}

/// Removes the temporary indexes an execution's attempts left (an attempt cut short by a
/// crash never compared its snapshots).
pub(super) async fn remove_indexes(common: &Path, execution: ExecutionId) {
    let dir = common.join("orca-diff-index");
    let Ok(mut entries) = tokio::fs::read_dir(&dir).await else {
        return;
    };
    let prefix = format!("{execution}-");
    while let Ok(Some(e)) = entries.next_entry().await {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = tokio::fs::remove_file(e.path()).await;
        }
    }
}

/// Whether `id` is a full object id (what orca recorded), so it can never be read as an option.
#[must_use]
pub fn is_object_id(id: &str) -> bool {
    (id.len() == 40 || id.len() == 64) && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// git with the temporary `index` and [`STAMPS`].
async fn stamped(top: &Path, index: &Path, args: &[&str]) -> Result<String, WorkspaceError> {
    let all = [STAMPS, args].concat();
    git_with_index(top, index, &all).await
}

impl GitChanges {
    fn index_path(&self, execution: ExecutionId, step: &StepId, attempt: u32) -> PathBuf {
        self.common
            .join("orca-diff-index")
            .join(format!("{execution}-{step}-{attempt}"))
    }

    /// The top of the working tree `workdir` belongs to: the user's, or one of orca's
    /// worktrees (checked to belong to this repository).
    fn top_of(&self, workdir: Option<&Path>) -> Result<PathBuf, WorkspaceError> {
        let Some(dir) = workdir else {
            return Ok(self.top.clone());
        };
        let up = self.sub.components().count();
        let top = dir.ancestors().nth(up).unwrap_or(dir).to_path_buf();
        if top.starts_with(&self.worktrees) {
            check_gitfile(&top, &self.common)?;
            Ok(top)
        } else if top == self.top {
            Ok(top)
        } else {
            Err(WorkspaceError::Git(format!(
                "{} is neither the project nor one of orca's worktrees",
                dir.display()
            )))
        }
    }

    /// The pathspec of the project's `.orca/`, which no snapshot holds.
    fn orca_pathspec(&self) -> String {
        format!(":(top,literal){}", self.sub.join(".orca").to_string_lossy())
    }

    async fn snapshot_tree(&self, top: &Path, index: &Path) -> Result<String, WorkspaceError> {
        if !index.exists() {
            super::git::create_parent(index).await?;
            let own = git(
                top,
                &["rev-parse", "--path-format=absolute", "--git-path", "index"],
            )
            .await
            .ok()
            .map(|p| PathBuf::from(p.trim_end_matches('\n')));
            let copied = match own {
                Some(own) if own.is_file() => tokio::fs::copy(&own, index).await.is_ok(),
                _ => false,
            };
            if !copied {
                let head = git(top, &["rev-parse", "--verify", "--quiet", "HEAD^{tree}"]).await;
                match head {
                    Ok(tree) => stamped(top, index, &["read-tree", tree.trim()]).await?,
                    Err(_) => stamped(top, index, &["read-tree", "--empty"]).await?,
                };
            }
        }
        stamped(top, index, &["add", "--all", "--", ":(top)"]).await?;
        // Out of the temporary index only (an exclude pathspec is an error when `.orca/` is
        // ignored, as `orca init` makes it).
        let orca = self.orca_pathspec();
        stamped(
            top,
            index,
            &[
                "rm",
                "-r",
                "--cached",
                "--quiet",
                "--ignore-unmatch",
                "--",
                &orca,
            ],
        )
        .await?;
        Ok(stamped(top, index, &["write-tree"])
            .await?
            .trim()
            .to_owned())
    }

    /// Keeps `before` and `after` reachable under the attempt's ref.
    async fn keep(
        &self,
        execution: ExecutionId,
        step: &StepId,
        attempt: u32,
        before: &str,
        after: &str,
    ) -> Result<(), WorkspaceError> {
        let name = format!("orca: step {step}, attempt {attempt}, execution {execution}");
        let first = git(
            &self.top,
            &["commit-tree", before, "-m", &format!("{name}: before")],
        )
        .await?;
        let second = git(
            &self.top,
            &[
                "commit-tree",
                after,
                "-p",
                first.trim(),
                "-m",
                &format!("{name}: after"),
            ],
        )
        .await?;
        git(
            &self.top,
            &[
                "update-ref",
                &format!("refs/orca-diff/{execution}/{step}/{attempt}"),
                second.trim(),
            ],
        )
        .await
        .map(drop)
    }

    /// The files that differ between two trees, with the lines added and removed.
    async fn changed(&self, before: &str, after: &str) -> Result<Vec<ChangedFile>, WorkspaceError> {
        let base = ["diff-tree", "-r", "-z", "--no-renames", "--no-ext-diff"];
        let status = git(
            &self.top,
            &[&base[..], &["--name-status", before, after]].concat(),
        )
        .await?;
        let numstat = git(
            &self.top,
            &[&base[..], &["--numstat", before, after]].concat(),
        )
        .await?;
        let mut counts: BTreeMap<&str, (Option<u64>, Option<u64>)> = BTreeMap::new();
        for record in numstat.split('\0').filter(|r| !r.is_empty()) {
            let mut parts = record.splitn(3, '\t');
            if let (Some(a), Some(r), Some(path)) = (parts.next(), parts.next(), parts.next()) {
                counts.insert(path, (a.parse().ok(), r.parse().ok()));
            }
        }
        let mut fields = status.split('\0').filter(|r| !r.is_empty());
        let mut files = Vec::new();
        while let (Some(mark), Some(path)) = (fields.next(), fields.next()) {
            let change = match mark.chars().next() {
                Some('A') => FileChange::Added,
                Some('D') => FileChange::Deleted,
                _ => FileChange::Modified,
            };
            let (added, removed) = counts.get(path).copied().unwrap_or_default();
            files.push(ChangedFile {
                path: path.to_owned(),
                change,
                added,
                removed,
            });
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }
}

#[async_trait]
impl StepChanges for GitChanges {
    fn in_repository(&self) -> bool {
        true
    }

    async fn snapshot(
        &self,
        execution: ExecutionId,
        step: &StepId,
        attempt: u32,
        workdir: Option<&Path>,
    ) -> Result<Snapshot, WorkspaceError> {
        let top = self.top_of(workdir)?;
        let index = self.index_path(execution, step, attempt);
        self.snapshot_tree(&top, &index).await.map(Snapshot::Tree)
    }

    async fn compare(
        &self,
        execution: ExecutionId,
        step: &StepId,
        attempt: u32,
        before: Snapshot,
        after: Snapshot,
    ) -> Result<(Vec<ChangedFile>, Option<(String, String)>), WorkspaceError> {
        let _ = tokio::fs::remove_file(self.index_path(execution, step, attempt)).await;
        let (Snapshot::Tree(before), Snapshot::Tree(after)) = (before, after) else {
            return Err(WorkspaceError::Git(
                "a snapshot of a repository is a tree".to_owned(),
            ));
        };
        self.keep(execution, step, attempt, &before, &after).await?;
        let files = if before == after {
            Vec::new()
        } else {
            self.changed(&before, &after).await?
        };
        Ok((files, Some((before, after))))
    }

    async fn patch(&self, before: &str, after: &str) -> Result<String, WorkspaceError> {
        if !is_object_id(before) || !is_object_id(after) {
            return Err(WorkspaceError::Git(format!(
                "`{before}` and `{after}` are not both object ids"
            )));
        }
        git(
            &self.top,
            &[
                "diff-tree",
                "-p",
                "-r",
                "--no-renames",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                before,
                after,
            ],
        )
        .await
    }
}
