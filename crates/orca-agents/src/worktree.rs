//! Git worktrees for isolated steps (ADR 0017): [`GitWorktrees`] implements
//! [`StepWorkspaces`] with the `git` binary.
//!
//! Layout, all inside the repository's common git directory (never in the user's working tree,
//! so `git status` there stays clean):
//!
//! ```text
//! <git-common-dir>/orca-worktrees/<exec>/integration     branch orca/<exec>
//! <git-common-dir>/orca-worktrees/<exec>/steps/<step>    branch orca-step/<exec>/<step>
//! ```
//!
//! `orca/<exec>` starts at the commit checked out when the execution first prepared a step
//! (its base); each completed step's branch is merged into it with `--no-ff`. Every operation
//! is idempotent: a worktree found on resume is re-created from the integration branch, a merge
//! cut by `kill -9` is aborted before the next one, a branch already merged is not merged again.
//! The user's checked-out branch and working tree are only touched by [`GitWorktrees::apply`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use orca_core::{
    ExecutionId, KeptWorktree, StepId, StepWorkspaces, ToolHost, WorkspaceEnd, WorkspaceError,
};
use tokio::process::Command;
use tokio::sync::Mutex;

impl std::fmt::Debug for GitWorktrees {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitWorktrees")
            .field("top", &self.top)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// Variables that would point git at another repository or index than the one asked for.
const GIT_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
];

/// What [`GitWorktrees::apply`] did to the user's branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The checked-out branch was fast-forwarded to the execution's branch.
    FastForwarded {
        /// The new commit.
        to: String,
    },
    /// Nothing to do: the checked-out commit already holds the execution's result.
    UpToDate,
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

    fn step_branch(execution: ExecutionId, step: &StepId) -> String {
        format!("orca-step/{execution}/{step}")
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

    /// A merged step's worktree and branch are no longer needed: only failed steps keep theirs.
    async fn drop_merged(
        &self,
        execution: ExecutionId,
        step: &StepId,
    ) -> Result<(), WorkspaceError> {
        self.remove_worktree(&self.step_dir(execution, step))
            .await?;
        let branch = Self::step_branch(execution, step);
        if self.has_branch(&branch).await {
            git(&self.top, &["branch", "--quiet", "-D", &branch]).await?;
        }
        Ok(())
    }

    /// The integration branch and its worktree, created on first use from `HEAD`.
    async fn ensure_integration(&self, execution: ExecutionId) -> Result<PathBuf, WorkspaceError> {
        let branch = self.branch(execution);
        if !self.has_branch(&branch).await {
            git(
                &self.top,
                &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
            )
            .await
            .map_err(|_| {
                WorkspaceError::Git(format!(
                    "{} has no commit yet: commit once before running isolated steps",
                    self.top.display()
                ))
            })?;
            git(&self.top, &["branch", &branch, "HEAD"]).await?;
        }
        let dir = self.integration_dir(execution);
        if !self.is_registered(&dir).await? {
            self.remove_worktree(&dir).await?;
            create_parent(&dir).await?;
            let d = dir.to_string_lossy();
            git(&self.top, &["worktree", "add", "--quiet", &d, &branch]).await?;
        }
        // A merge cut short by a crash: abandon it (the step is merged again).
        if git(&dir, &["rev-parse", "--verify", "--quiet", "MERGE_HEAD"])
            .await
            .is_ok()
        {
            git(&dir, &["merge", "--abort"]).await?;
        }
        git(&dir, &["reset", "--quiet", "--hard", "HEAD"]).await?;
        Ok(dir)
    }

    /// Starts `next`'s branch where `previous`'s ends (a replan continues from the merged
    /// results of the plan it replaces, not from `HEAD`). Nothing happens when `next` already
    /// has a branch or `previous` has none.
    ///
    /// # Errors
    /// A git failure.
    pub async fn continue_from(
        &self,
        previous: ExecutionId,
        next: ExecutionId,
    ) -> Result<bool, WorkspaceError> {
        let _guard = self.lock.lock().await;
        let (from, to) = (self.branch(previous), self.branch(next));
        if self.has_branch(&to).await || !self.has_branch(&from).await {
            return Ok(false);
        }
        git(&self.top, &["branch", &to, &from]).await?;
        Ok(true)
    }

    /// Fast-forwards the user's checked-out branch to the execution's branch, only when the
    /// working tree is clean and the move is a fast-forward.
    ///
    /// # Errors
    /// A dirty working tree, a checked-out branch that diverged, or a git failure: nothing is
    /// changed.
    pub async fn apply(&self, execution: ExecutionId) -> Result<Applied, WorkspaceError> {
        let _guard = self.lock.lock().await;
        let branch = self.branch(execution);
        if !self.has_branch(&branch).await {
            return Err(WorkspaceError::Git(format!(
                "execution {execution} has no branch `{branch}`"
            )));
        }
        let status = git(
            &self.top,
            &["status", "--porcelain", "--untracked-files=no"],
        )
        .await?;
        if !status.trim().is_empty() {
            return Err(WorkspaceError::Git(format!(
                "{} has uncommitted changes: commit or stash them, or merge `{branch}` yourself",
                self.top.display()
            )));
        }
        let head = git(&self.top, &["rev-parse", "HEAD"]).await?;
        let target = git(&self.top, &["rev-parse", &branch]).await?;
        if head.trim() == target.trim() {
            return Ok(Applied::UpToDate);
        }
        if git(&self.top, &["merge-base", "--is-ancestor", &branch, "HEAD"])
            .await
            .is_ok()
        {
            return Ok(Applied::UpToDate);
        }
        git(&self.top, &["merge", "--ff-only", "--quiet", &branch])
            .await
            .map_err(|e| {
                WorkspaceError::Git(format!(
                    "the checked-out branch cannot be fast-forwarded to `{branch}` ({e}); merge it yourself"
                ))
            })?;
        Ok(Applied::FastForwarded {
            to: target.trim().to_owned(),
        })
    }
}

#[async_trait]
impl StepWorkspaces for GitWorktrees {
    async fn prepare(
        &self,
        execution: ExecutionId,
        step: &StepId,
    ) -> Result<PathBuf, WorkspaceError> {
        let _guard = self.lock.lock().await;
        self.ensure_integration(execution).await?;
        let dir = self.step_dir(execution, step);
        // Every attempt starts fresh from the integration branch: what a killed or failed
        // attempt left is dropped (its branch stays until then for inspection).
        self.remove_worktree(&dir).await?;
        create_parent(&dir).await?;
        let d = dir.to_string_lossy();
        let branch = Self::step_branch(execution, step);
        git(
            &self.top,
            &[
                "worktree",
                "add",
                "--quiet",
                "-B",
                &branch,
                &d,
                &self.branch(execution),
            ],
        )
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
        if !self.is_registered(&dir).await? && !self.has_branch(&branch).await {
            // Merged and dropped already (integrating again after a crash changes nothing).
            return Ok(());
        }
        git(&dir, &["add", "--all"]).await?;
        if git(&dir, &["diff", "--cached", "--quiet"]).await.is_err() {
            let message = format!("orca: step {step} (execution {execution}, attempt {attempt})");
            git(&dir, &["commit", "--quiet", "--no-verify", "-m", &message]).await?;
        }
        let integration = self.ensure_integration(execution).await?;
        if git(
            &integration,
            &["merge-base", "--is-ancestor", &branch, "HEAD"],
        )
        .await
        .is_ok()
        {
            return self.drop_merged(execution, step).await;
        }
        let message = format!("orca: merge step {step}");
        if git(
            &integration,
            &[
                "merge",
                "--no-ff",
                "--no-verify",
                "--quiet",
                "-m",
                &message,
                &branch,
            ],
        )
        .await
        .is_ok()
        {
            return self.drop_merged(execution, step).await;
        }
        let files = git(&integration, &["diff", "--name-only", "--diff-filter=U"])
            .await
            .unwrap_or_default();
        let files: Vec<String> = files.lines().map(str::to_owned).collect();
        git(&integration, &["merge", "--abort"]).await?;
        if files.is_empty() {
            return Err(WorkspaceError::Git(format!(
                "merging step `{step}` into `{}` failed",
                self.branch(execution)
            )));
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

    fn tools_at(&self, dir: &Path) -> Option<Arc<dyn ToolHost>> {
        self.tools.as_ref().and_then(|f| f(dir))
    }
}

async fn create_parent(dir: &Path) -> Result<(), WorkspaceError> {
    if let Some(parent) = dir.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| WorkspaceError::Git(format!("cannot create {}: {e}", parent.display())))?;
    }
    Ok(())
}

/// Runs `git` in `dir` and returns its standard output; a non-zero exit is an error holding
/// the command and its standard error. orca's commits are made as `orca`, unsigned, without
/// the repository's hooks.
async fn git(dir: &Path, args: &[&str]) -> Result<String, WorkspaceError> {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=orca",
            "-c",
            "user.email=orca@localhost",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for name in GIT_ENV {
        cmd.env_remove(name);
    }
    let out = cmd
        .output()
        .await
        .map_err(|e| WorkspaceError::Git(format!("cannot run git: {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(WorkspaceError::Git(format!(
            "git {} failed in {}: {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
