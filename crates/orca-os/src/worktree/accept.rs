//! Accepting an execution's result into the user's checked-out branch, and discarding it.
//!
//! Accepting checks everything before it touches anything: a clean working tree, a
//! checked-out branch, the result still the tree that was shown, and (with `git merge-tree`,
//! which writes only objects) no conflict. Only then is the branch fast-forwarded or given a
//! merge commit naming the execution.

use orca_core::{ExecutionId, Merged, StepWorkspaces as _, WorkspaceEnd, WorkspaceError};

use super::GitWorktrees;
use super::git::git;

impl GitWorktrees {
    /// The executions that have an integration branch (`orca/<exec>`), by their id's text:
    /// one git command for a whole listing.
    ///
    /// # Errors
    /// A git failure.
    pub async fn result_branches(&self) -> Result<Vec<String>, WorkspaceError> {
        let out = git(
            &self.top,
            &["for-each-ref", "--format=%(refname)", "refs/heads/orca/"],
        )
        .await?;
        Ok(out
            .lines()
            .filter_map(|l| l.strip_prefix("refs/heads/orca/"))
            .map(str::to_owned)
            .collect())
    }

    pub(super) async fn tree_of_branch(
        &self,
        execution: ExecutionId,
    ) -> Result<Option<String>, WorkspaceError> {
        let branch = self.branch_ref(execution);
        if self.commit_of(&branch).await.is_none() {
            return Ok(None);
        }
        let tree = git(&self.top, &["rev-parse", &format!("{branch}^{{tree}}")]).await?;
        Ok(Some(tree.trim().to_owned()))
    }

    pub(super) async fn patch_of_result(
        &self,
        execution: ExecutionId,
    ) -> Result<String, WorkspaceError> {
        let branch = self.branch_ref(execution);
        let Some(tip) = self.commit_of(&branch).await else {
            return Err(WorkspaceError::Git(format!(
                "execution {execution} has no branch `orca/{execution}`"
            )));
        };
        let base = git(&self.top, &["merge-base", "HEAD", &tip]).await?;
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
                base.trim(),
                &tip,
            ],
        )
        .await
    }

    pub(super) async fn accept_result(
        &self,
        execution: ExecutionId,
        tree: &str,
        message: &str,
    ) -> Result<Merged, WorkspaceError> {
        let _guard = self.lock.lock().await;
        let branch = self.branch(execution);
        let Some(tip) = self.commit_of(&self.branch_ref(execution)).await else {
            return Err(WorkspaceError::Git(format!(
                "execution {execution} has no branch `{branch}` (discarded, or it ran in place)"
            )));
        };
        let now = self.tree_of_branch(execution).await?.unwrap_or_default();
        if now != tree {
            return Err(WorkspaceError::ResultChanged {
                execution,
                shown: tree.to_owned(),
                now,
            });
        }
        let status = git(
            &self.top,
            &["status", "--porcelain", "--untracked-files=no"],
        )
        .await?;
        if !status.trim().is_empty() {
            return Err(WorkspaceError::Git(format!(
                "{} has uncommitted changes: commit or stash them first; nothing was changed",
                self.top.display()
            )));
        }
        if git(&self.top, &["symbolic-ref", "--quiet", "HEAD"])
            .await
            .is_err()
        {
            return Err(WorkspaceError::Git(format!(
                "{} has no branch checked out (detached HEAD): check one out first; nothing was changed",
                self.top.display()
            )));
        }
        let head = git(&self.top, &["rev-parse", "HEAD"]).await?;
        let head = head.trim();
        let ancestor = |a: String, b: String| async move {
            git(&self.top, &["merge-base", "--is-ancestor", &a, &b])
                .await
                .is_ok()
        };
        if ancestor(tip.clone(), head.to_owned()).await {
            return Ok(Merged::UpToDate {
                commit: head.to_owned(),
            });
        }
        if ancestor(head.to_owned(), tip.clone()).await {
            git(&self.top, &["merge", "--ff-only", "--quiet", &tip]).await?;
            return Ok(Merged::FastForward { commit: tip });
        }
        // A conflict is found without touching the working tree or the index.
        if let Err(e) = git(
            &self.top,
            &[
                "merge-tree",
                "--write-tree",
                "--name-only",
                "--no-messages",
                head,
                &tip,
            ],
        )
        .await
        {
            let files = self.conflicts(head, &tip).await;
            if files.is_empty() {
                return Err(e);
            }
            return Err(WorkspaceError::AcceptConflict { branch, files });
        }
        git(
            &self.top,
            &[
                "merge",
                "--no-ff",
                "--no-edit",
                "--no-verify",
                "--quiet",
                "-m",
                message,
                &tip,
            ],
        )
        .await?;
        let commit = git(&self.top, &["rev-parse", "HEAD"]).await?;
        Ok(Merged::MergeCommit {
            commit: commit.trim().to_owned(),
        })
    }

    /// The files `git merge-tree` reports conflicting between `head` and `tip`.
    async fn conflicts(&self, head: &str, tip: &str) -> Vec<String> {
        let out = super::git::git_status_output(
            &self.top,
            &[
                "merge-tree",
                "--write-tree",
                "--name-only",
                "--no-messages",
                head,
                tip,
            ],
        )
        .await;
        // The first line is the tree; the conflicted files follow.
        out.lines()
            .skip(1)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    pub(super) async fn discard_all(
        &self,
        execution: ExecutionId,
    ) -> Result<Vec<String>, WorkspaceError> {
        let prefix = format!("refs/heads/orca-step/{execution}/");
        let steps = git(
            &self.top,
            &["for-each-ref", "--format=%(refname:short)", &prefix],
        )
        .await?;
        let mut removed: Vec<String> = steps
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        self.end(execution, WorkspaceEnd::Completed).await?;
        let _guard = self.lock.lock().await;
        let branch = self.branch(execution);
        if self.commit_of(&self.branch_ref(execution)).await.is_some() {
            git(&self.top, &["branch", "--quiet", "-D", &branch]).await?;
            removed.push(branch);
        }
        Ok(removed)
    }
}
