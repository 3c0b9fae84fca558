//! Git worktrees for isolated steps (ADR 0017): [`GitWorktrees`] implements
//! [`StepWorkspaces`] with the `git` binary.
//!
//! Layout, all inside the repository's common git directory (never in the user's working tree,
//! so `git status` there stays clean):
//!
//! ```text
//! <git-common-dir>/orca-worktrees/<exec>/integration     branch orca/<exec>
//! <git-common-dir>/orca-worktrees/<exec>/steps/<step>    branch orca-step/<exec>/<step>/work
//! ```
//!
//! and the refs of `refs.rs` (`refs/orca/<exec>/base`, `…/result/<step>`, …).
//!
//! `orca/<exec>` starts at the execution's base: the commit checked out when it first prepared
//! a step. A step's worktree starts at that base with the results of its direct dependencies
//! merged in (plan order), so what it sees does not depend on which unrelated steps happened to
//! finish first; each completed step's branch is merged into `orca/<exec>` with `--no-ff` and
//! its final commit kept as `refs/orca/<exec>/result/<step>`. Every operation is idempotent: a
//! worktree found on resume is re-created, a merge cut by `kill -9` is aborted before the next
//! one, a branch already merged is not merged again, a missing ref is recovered. The user's
//! checked-out branch and working tree are only touched by accepting a result (`accept.rs`).

mod accept;
mod changes;
mod git;
mod refs;

pub use changes::{GitChanges, is_object_id};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use orca_core::{
    ExecutionId, KeptWorktree, Merged, StepId, StepWorkspaces, ToolHost, WorkspaceEnd,
    WorkspaceError,
};
use tokio::sync::Mutex;

use self::git::{check_gitfile, create_parent, git, unmerged};
use self::refs::{Kind, base_ref, merge_subject, step_ref};

impl std::fmt::Debug for GitWorktrees {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitWorktrees")
            .field("top", &self.top)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// Builds the workspace tools of a step's worktree (the binary's grants, environment policy
/// and sandbox, rooted in the worktree).
pub type ToolsAt = Arc<dyn Fn(&Path) -> Option<Arc<dyn ToolHost>> + Send + Sync>;

/// Worktrees of one git repository, for one project directory inside it.
pub struct GitWorktrees {
    /// The top of the user's working tree.
    top: PathBuf,
    /// The project directory relative to `top` (`""` when they are the same).
    sub: PathBuf,
    /// The repository's common git directory.
    common: PathBuf,
    /// Where orca's worktrees live.
    base: PathBuf,
    /// Workspace tools for model agents, re-rooted in a step's worktree.
    tools: Option<ToolsAt>,
    /// One git operation at a time: worktree and ref updates of one repository are serialised.
    lock: Mutex<()>,
}

impl GitWorktrees {
    /// The worktrees of the git repository holding `project`.
    ///
    /// # Errors
    /// [`WorkspaceError::NotARepository`] when `project` is not in a git work tree (or `git`
    /// cannot be run).
    pub async fn discover(project: &Path) -> Result<Self, WorkspaceError> {
        let not_repo = || WorkspaceError::NotARepository(project.to_path_buf());
        let out = git(
            project,
            &["rev-parse", "--show-toplevel", "--git-common-dir"],
        )
        .await
        .map_err(|_| not_repo())?;
        let mut lines = out.lines();
        let (Some(top), Some(common)) = (lines.next(), lines.next()) else {
            return Err(not_repo());
        };
        let top = PathBuf::from(top);
        let common = project.join(common);
        let top = top.canonicalize().map_err(|_| not_repo())?;
        let common = common.canonicalize().map_err(|_| not_repo())?;
        let project = project.canonicalize().map_err(|_| not_repo())?;
        let sub = project
            .strip_prefix(&top)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        Ok(Self {
            top,
            sub,
            base: common.join("orca-worktrees"),
            common,
            tools: None,
            lock: Mutex::new(()),
        })
    }

    /// How model agents get their workspace tools inside a step's worktree (builder style).
    /// Without it they are offered none there (never the project's, which act on the user's
    /// tree).
    #[must_use]
    pub fn with_tools(mut self, tools: ToolsAt) -> Self {
        self.tools = Some(tools);
        self
    }

    /// The directory orca keeps its worktrees in.
    #[must_use]
    pub fn worktrees_dir(&self) -> &Path {
        &self.base
    }

    fn exec_dir(&self, execution: ExecutionId) -> PathBuf {
        self.base.join(execution.to_string())
    }

    fn integration_dir(&self, execution: ExecutionId) -> PathBuf {
        self.exec_dir(execution).join("integration")
    }

    fn step_dir(&self, execution: ExecutionId, step: &StepId) -> PathBuf {
        self.exec_dir(execution).join("steps").join(step.as_str())
    }

    /// A step's branch, alone in a directory of its own under `refs/heads/`, so the sandbox
    /// can leave it writable to the step and every other ref read-only (ADR 0041).
    fn step_branch(execution: ExecutionId, step: &StepId) -> String {
        format!("orca-step/{execution}/{step}/work")
    }

    /// Runs git in one of orca's worktrees, once its `.git` file is checked to point into this
    /// repository (a step could have pointed it elsewhere).
    async fn git_at(&self, dir: &Path, args: &[&str]) -> Result<String, WorkspaceError> {
        check_gitfile(dir, &self.common)?;
        git(dir, args).await
    }

    async fn has_branch(&self, branch: &str) -> bool {
        git(
            &self.top,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ],
        )
        .await
        .is_ok()
    }

    /// The worktrees git knows, as canonical-ish paths.
    async fn registered(&self) -> Result<Vec<(PathBuf, Option<String>)>, WorkspaceError> {
        let out = git(&self.top, &["worktree", "list", "--porcelain"]).await?;
        let mut found = Vec::new();
        let mut path: Option<PathBuf> = None;
        for line in out.lines().chain(std::iter::once("")) {
            if let Some(p) = line.strip_prefix("worktree ") {
                path = Some(PathBuf::from(p));
            } else if let Some(b) = line.strip_prefix("branch refs/heads/") {
                if let Some(p) = path.take() {
                    found.push((p, Some(b.to_owned())));
                }
            } else if line.is_empty()
                && let Some(p) = path.take()
            {
                found.push((p, None));
            }
        }
        Ok(found)
    }

    async fn is_registered(&self, dir: &Path) -> Result<bool, WorkspaceError> {
        Ok(self.registered().await?.iter().any(|(p, _)| p == dir))
    }

    /// Removes a worktree whether or not git still knows it; nothing left behind.
    ///
    /// A `kill -9` during `git worktree add` leaves the entry locked ("initializing") and maybe
    /// without its directory: it is unlocked, removed as far as git can, its directory deleted
    /// and the rest pruned; only an entry git still lists after all that is an error.
    async fn remove_worktree(&self, dir: &Path) -> Result<(), WorkspaceError> {
        let d = dir.to_string_lossy();
        if self.is_registered(dir).await? {
            let _ = git(&self.top, &["worktree", "unlock", &d]).await;
            let _ = git(&self.top, &["worktree", "remove", "--force", "--force", &d]).await;
        }
        if dir.exists() {
            tokio::fs::remove_dir_all(dir).await.map_err(|e| {
                WorkspaceError::Git(format!("cannot remove {}: {e}", dir.display()))
            })?;
        }
        git(&self.top, &["worktree", "prune"]).await?;
        if self.is_registered(dir).await? {
            return Err(WorkspaceError::Git(format!(
                "git still lists the worktree {d} after removing it"
            )));
        }
        Ok(())
    }

    /// The integration branch as a full ref name.
    fn branch_ref(&self, execution: ExecutionId) -> String {
        format!("refs/heads/{}", self.branch(execution))
    }

    /// A merged step's worktree and branch are no longer needed (only failed steps keep
    /// theirs): its result is recorded first, then they go.
    async fn finish_step(
        &self,
        execution: ExecutionId,
        step: &StepId,
        result: &str,
    ) -> Result<(), WorkspaceError> {
        self.set_ref(&step_ref(execution, Kind::Result, step), result)
            .await?;
        self.delete_ref(&step_ref(execution, Kind::Conflict, step))
            .await?;
        self.remove_worktree(&self.step_dir(execution, step))
            .await?;
        let branch = Self::step_branch(execution, step);
        if self.has_branch(&branch).await {
            git(&self.top, &["branch", "--quiet", "-D", &branch]).await?;
        }
        Ok(())
    }

    /// The integration branch and its worktree, created on first use at the execution's base
    /// (recorded before the branch, so a crash between the two re-creates the branch there).
    async fn ensure_integration(&self, execution: ExecutionId) -> Result<PathBuf, WorkspaceError> {
        let base = self.ensure_base(execution).await?;
        let branch = self.branch(execution);
        if !self.has_branch(&branch).await {
            git(&self.top, &["branch", &branch, &base]).await?;
        }
        let dir = self.integration_dir(execution);
        if !self.is_registered(&dir).await? {
            self.remove_worktree(&dir).await?;
            create_parent(&dir).await?;
            let d = dir.to_string_lossy();
            git(&self.top, &["worktree", "add", "--quiet", &d, &branch]).await?;
        }
        // A merge cut short by a crash: abandon it (the step is merged again).
        if self
            .git_at(&dir, &["rev-parse", "--verify", "--quiet", "MERGE_HEAD"])
            .await
            .is_ok()
        {
            self.git_at(&dir, &["merge", "--abort"]).await?;
        }
        self.git_at(&dir, &["reset", "--quiet", "--hard", "HEAD"])
            .await?;
        Ok(dir)
    }

    /// Merges the results of `after` into the step's fresh worktree `dir`, in order. A
    /// dependency whose result cannot be found adds nothing (logged). A conflict is left in the
    /// worktree for inspection and marks the step, so its next attempt starts from the
    /// integration branch, where those results were merged.
    async fn merge_dependencies(
        &self,
        execution: ExecutionId,
        step: &StepId,
        after: &[StepId],
        dir: &Path,
    ) -> Result<(), WorkspaceError> {
        let mut merged = Vec::new();
        for dep in after {
            let Some(result) = self.result_of(execution, dep).await? else {
                // Only if its ref was removed and it merged nothing: start without it.
                tracing::warn!(%execution, %step, dependency = %dep, "no result recorded for the dependency");
                continue;
            };
            merged.push(dep.clone());
            let message = format!("orca: step {step} starts from step {dep}");
            let outcome = self
                .git_at(
                    dir,
                    &[
                        "merge",
                        "--ff",
                        "--no-edit",
                        "--no-verify",
                        "--quiet",
                        "-m",
                        &message,
                        &result,
                    ],
                )
                .await;
            let Err(e) = outcome else { continue };
            let files = unmerged(dir).await;
            if files.is_empty() {
                return Err(WorkspaceError::Git(format!(
                    "cannot merge the result of step `{dep}` into the worktree of step `{step}`: {e}"
                )));
            }
            if let Some(tip) = self.commit_of(&self.branch_ref(execution)).await {
                self.set_ref(&step_ref(execution, Kind::Conflict, step), &tip)
                    .await?;
            }
            return Err(WorkspaceError::DependenciesConflict {
                step: step.clone(),
                dependencies: merged,
                files,
            });
        }
        Ok(())
    }

    /// Starts `next`'s branch where `previous`'s ends (a replan continues from the merged
    /// results of the plan it replaces, not from `HEAD`): that is `next`'s base. Nothing
    /// happens when `next` already has a branch or `previous` has none.
    ///
    /// # Errors
    /// A git failure.
    pub async fn continue_from(
        &self,
        previous: ExecutionId,
        next: ExecutionId,
    ) -> Result<bool, WorkspaceError> {
        let _guard = self.lock.lock().await;
        let to = self.branch(next);
        if self.has_branch(&to).await {
            return Ok(false);
        }
        let Some(tip) = self.commit_of(&self.branch_ref(previous)).await else {
            return Ok(false);
        };
        self.set_ref(&base_ref(next), &tip).await?;
        git(&self.top, &["branch", &to, &tip]).await?;
        Ok(true)
    }
}

#[async_trait]
impl StepWorkspaces for GitWorktrees {
    async fn integrated(&self, execution: ExecutionId) -> Result<Option<PathBuf>, WorkspaceError> {
        let _guard = self.lock.lock().await;
        if !self.has_branch(&self.branch(execution)).await {
            return Ok(None);
        }
        self.ensure_integration(execution).await.map(Some)
    }

    async fn prepare(
        &self,
        execution: ExecutionId,
        step: &StepId,
        after: &[StepId],
    ) -> Result<PathBuf, WorkspaceError> {
        let _guard = self.lock.lock().await;
        self.ensure_integration(execution).await?;
        let base = self.ensure_base(execution).await?;
        let dir = self.step_dir(execution, step);
        // Every attempt starts fresh: what a killed or failed attempt left (a half-done merge
        // included) is dropped.
        self.remove_worktree(&dir).await?;
        create_parent(&dir).await?;
        // After a conflict the step starts from the integration branch, which holds what it
        // conflicted with; otherwise from the base plus its dependencies' results.
        let conflicted = self
            .commit_of(&step_ref(execution, Kind::Conflict, step))
            .await
            .is_some();
        let start = if conflicted {
            self.branch_ref(execution)
        } else {
            base
        };
        let d = dir.to_string_lossy();
        let branch = Self::step_branch(execution, step);
        git(
            &self.top,
            &["worktree", "add", "--quiet", "-B", &branch, &d, &start],
        )
        .await?;
        if !conflicted {
            self.merge_dependencies(execution, step, after, &dir)
                .await?;
        }
        let started = self.git_at(&dir, &["rev-parse", "HEAD"]).await?;
        self.set_ref(&step_ref(execution, Kind::Start, step), started.trim())
            .await?;
        Ok(dir.join(&self.sub))
    }

    async fn integrate(
        &self,
        execution: ExecutionId,
        step: &StepId,
        attempt: u32,
    ) -> Result<(), WorkspaceError> {
        let _guard = self.lock.lock().await;
        let dir = self.step_dir(execution, step);
        let branch = Self::step_branch(execution, step);
        let registered = self.is_registered(&dir).await?;
        if !registered && !self.has_branch(&branch).await {
            // Merged and dropped already (integrating again after a crash changes nothing).
            return Ok(());
        }
        if registered {
            self.git_at(&dir, &["add", "--all"]).await?;
            if self
                .git_at(&dir, &["diff", "--cached", "--quiet"])
                .await
                .is_err()
            {
                let message =
                    format!("orca: step {step} (execution {execution}, attempt {attempt})");
                self.git_at(&dir, &["commit", "--quiet", "--no-verify", "-m", &message])
                    .await?;
            }
        }
        let tip = match self.commit_of(&format!("refs/heads/{branch}")).await {
            Some(tip) => Some(tip),
            // A worktree an older orca prepared, on the branch it named then.
            None if registered => self
                .git_at(&dir, &["rev-parse", "HEAD"])
                .await
                .ok()
                .map(|s| s.trim().to_owned()),
            None => None,
        };
        let Some(tip) = tip else {
            return Err(WorkspaceError::Git(format!(
                "step `{step}` has no branch `{branch}` to merge"
            )));
        };
        let integration = self.ensure_integration(execution).await?;
        let started = self
            .commit_of(&step_ref(execution, Kind::Start, step))
            .await;
        // Nothing of its own to merge: it changed nothing (its dependencies' results are
        // merged already), or its branch is merged already.
        if started.as_deref() == Some(tip.as_str())
            || self
                .git_at(&integration, &["merge-base", "--is-ancestor", &tip, "HEAD"])
                .await
                .is_ok()
        {
            return self.finish_step(execution, step, &tip).await;
        }
        let message = merge_subject(step);
        if self
            .git_at(
                &integration,
                &[
                    "merge",
                    "--no-ff",
                    "--no-verify",
                    "--quiet",
                    "-m",
                    &message,
                    &tip,
                ],
            )
            .await
            .is_ok()
        {
            return self.finish_step(execution, step, &tip).await;
        }
        let files = unmerged(&integration).await;
        self.git_at(&integration, &["merge", "--abort"]).await?;
        if files.is_empty() {
            return Err(WorkspaceError::Git(format!(
                "merging step `{step}` into `{}` failed",
                self.branch(execution)
            )));
        }
        // The retry starts from the integration branch, where what it conflicted with is.
        if let Some(at) = self.commit_of(&self.branch_ref(execution)).await {
            self.set_ref(&step_ref(execution, Kind::Conflict, step), &at)
                .await?;
        }
        Err(WorkspaceError::Conflict {
            step: step.clone(),
            branch: self.branch(execution),
            files,
        })
    }

    async fn end(&self, execution: ExecutionId, end: WorkspaceEnd) -> Result<(), WorkspaceError> {
        if end == WorkspaceEnd::Kept {
            return Ok(());
        }
        let _guard = self.lock.lock().await;
        let exec_dir = self.exec_dir(execution);
        for (path, branch) in self.registered().await? {
            if path.starts_with(&exec_dir) {
                self.remove_worktree(&path).await?;
                if let Some(b) = branch
                    && b.starts_with("orca-step/")
                {
                    git(&self.top, &["branch", "--quiet", "-D", &b]).await?;
                }
            }
        }
        // Step branches whose worktree was already gone.
        let prefix = format!("refs/heads/orca-step/{execution}/");
        let left = git(
            &self.top,
            &["for-each-ref", "--format=%(refname:short)", &prefix],
        )
        .await?;
        for b in left.lines().filter(|l| !l.is_empty()) {
            git(&self.top, &["branch", "--quiet", "-D", b]).await?;
        }
        // The base and the results go with the worktrees; `orca/<exec>` holds them all.
        self.delete_refs(execution).await?;
        changes::remove_indexes(&self.common, execution).await;
        if exec_dir.exists() {
            tokio::fs::remove_dir_all(&exec_dir).await.map_err(|e| {
                WorkspaceError::Git(format!("cannot remove {}: {e}", exec_dir.display()))
            })?;
        }
        git(&self.top, &["worktree", "prune"]).await?;
        Ok(())
    }

    async fn kept(&self, execution: ExecutionId) -> Result<Vec<KeptWorktree>, WorkspaceError> {
        let steps = self.exec_dir(execution).join("steps");
        let mut kept = Vec::new();
        for (path, branch) in self.registered().await? {
            let Some(step) = path
                .strip_prefix(&steps)
                .ok()
                .and_then(|rest| rest.to_str())
                .and_then(|s| StepId::parse(s).ok())
            else {
                continue;
            };
            kept.push(KeptWorktree {
                step,
                branch: branch.unwrap_or_default(),
                path,
            });
        }
        Ok(kept)
    }

    fn branch(&self, execution: ExecutionId) -> String {
        format!("orca/{execution}")
    }

    async fn result_tree(&self, execution: ExecutionId) -> Result<Option<String>, WorkspaceError> {
        self.tree_of_branch(execution).await
    }

    async fn with_results(&self) -> Option<Vec<ExecutionId>> {
        let names = self.result_branches().await.ok()?;
        Some(names.iter().filter_map(|n| n.parse().ok()).collect())
    }

    async fn result_patch(&self, execution: ExecutionId) -> Result<String, WorkspaceError> {
        self.patch_of_result(execution).await
    }

    async fn accept(
        &self,
        execution: ExecutionId,
        tree: &str,
        message: &str,
    ) -> Result<Merged, WorkspaceError> {
        self.accept_result(execution, tree, message).await
    }

    async fn discard(&self, execution: ExecutionId) -> Result<Vec<String>, WorkspaceError> {
        self.discard_all(execution).await
    }

    fn tools_at(&self, dir: &Path) -> Option<Arc<dyn ToolHost>> {
        self.tools.as_ref().and_then(|f| f(dir))
    }
}
