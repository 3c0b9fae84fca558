//! Running `git` for [`super::GitWorktrees`]: orca's own short commands, with the variables
//! that would redirect them removed, no prompt, no hooks, unsigned commits as `orca`.

use std::path::Path;

use orca_core::WorkspaceError;
use tokio::process::Command;

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

/// Creates the parent directory of `dir`.
pub(super) async fn create_parent(dir: &Path) -> Result<(), WorkspaceError> {
    if let Some(parent) = dir.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| WorkspaceError::Git(format!("cannot create {}: {e}", parent.display())))?;
    }
    Ok(())
}

/// The files a merge left unmerged in the worktree `dir` (empty when there is no conflict).
pub(super) async fn unmerged(dir: &Path) -> Vec<String> {
    git(dir, &["diff", "--name-only", "--diff-filter=U"])
        .await
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Runs `git` in `dir` and returns its standard output; a non-zero exit is an error holding
/// the command and its standard error. orca's commits are made as `orca`, unsigned, without
/// the repository's hooks.
pub(super) async fn git(dir: &Path, args: &[&str]) -> Result<String, WorkspaceError> {
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
