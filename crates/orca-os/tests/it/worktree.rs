//! `GitWorktrees` on real temporary repositories (ADR 0017), below the binary: merges, a
//! conflict that leaves the run's branch as it was, idempotent prepare / integrate / end (also
//! over a merge a crash left half done), a replan continuing from the merged results, and the
//! clear error outside a repository. Counts are printed.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::process::Command;

use orca_core::{ExecutionId, StepId, StepWorkspaces, WorkspaceEnd, WorkspaceError};
use orca_os::GitWorktrees;

fn run_git(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .env_remove("GIT_DIR")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let (success, out) = run_git(dir, args);
    assert!(success, "git {args:?}");
    out
}

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    ok(dir.path(), &["init", "--quiet", "--initial-branch=main"]);
    std::fs::write(dir.path().join("f.txt"), "one\ntwo\nthree\n").unwrap();
    ok(dir.path(), &["add", "--all"]);
    ok(dir.path(), &["commit", "--quiet", "-m", "base"]);
    dir
}

fn step(s: &str) -> StepId {
    StepId::parse(s).unwrap()
}

fn worktrees(dir: &Path) -> usize {
    ok(dir, &["worktree", "list", "--porcelain"])
        .lines()
        .filter(|l| l.starts_with("worktree "))
        .count()
}

fn rev(dir: &Path, r: &str) -> String {
    ok(dir, &["rev-parse", r]).trim().to_owned()
}

#[tokio::test]
async fn merges_conflicts_and_idempotence() {
    let r = repo();
    let root = r.path();
    let head = rev(root, "HEAD");
    let git = GitWorktrees::discover(root).await.unwrap();
    let exec = ExecutionId::new();
    let branch = git.branch(exec);

    // Two steps prepared at once; each edits its own line.
    let a = git.prepare(exec, &step("a"), &[]).await.unwrap();
    let b = git.prepare(exec, &step("b"), &[]).await.unwrap();
    std::fs::write(a.join("f.txt"), "ONE\ntwo\nthree\n").unwrap();
    std::fs::write(b.join("f.txt"), "one\ntwo\nTHREE\n").unwrap();
    git.integrate(exec, &step("a"), 1).await.unwrap();
    git.integrate(exec, &step("b"), 1).await.unwrap();
    assert_eq!(
        ok(root, &["show", &format!("{branch}:f.txt")]),
        "ONE\ntwo\nTHREE\n"
    );
    // Integrating again changes nothing (a resume after the merge, before the record).
    let tip = rev(root, &branch);
    git.integrate(exec, &step("b"), 1).await.unwrap();
    assert_eq!(rev(root, &branch), tip);

    // Two steps after both, editing the same line: the second conflicts, the branch stays.
    let ab = [step("a"), step("b")];
    let c = git.prepare(exec, &step("c"), &ab).await.unwrap();
    let d = git.prepare(exec, &step("d"), &ab).await.unwrap();
    std::fs::write(c.join("f.txt"), "ONE\nc\nTHREE\n").unwrap();
    std::fs::write(d.join("f.txt"), "ONE\nd\nTHREE\n").unwrap();
    git.integrate(exec, &step("c"), 1).await.unwrap();
    let before = rev(root, &branch);
    let err = git.integrate(exec, &step("d"), 1).await.unwrap_err();
    let WorkspaceError::Conflict { files, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(files, &["f.txt".to_owned()]);
    assert_eq!(rev(root, &branch), before, "a conflict merges nothing");
    let kept = git.kept(exec).await.unwrap();
    println!("kept after the conflict: {kept:?}");
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].step, step("d"));

    // A merge a crash left half done in the integration worktree is abandoned first.
    let integration = git
        .worktrees_dir()
        .join(exec.to_string())
        .join("integration");
    let (merged, _) = run_git(
        &integration,
        &[
            "merge",
            "--no-ff",
            "-m",
            "x",
            &format!("orca-step/{exec}/d/work"),
        ],
    );
    assert!(!merged, "the manual merge conflicts");
    // Prepared again (a retry), d starts from the merged results and now merges.
    let d = git.prepare(exec, &step("d"), &ab).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(d.join("f.txt")).unwrap(),
        "ONE\nc\nTHREE\n"
    );
    std::fs::write(d.join("f.txt"), "ONE\nd\nTHREE\n").unwrap();
    git.integrate(exec, &step("d"), 2).await.unwrap();
    assert_eq!(
        ok(root, &["show", &format!("{branch}:f.txt")]),
        "ONE\nd\nTHREE\n"
    );

    // Preparing twice leaves one worktree for the step.
    git.prepare(exec, &step("e"), &[]).await.unwrap();
    git.prepare(exec, &step("e"), &[]).await.unwrap();
    let during = worktrees(root);
    println!("worktrees with e prepared twice: {during}");
    assert_eq!(during, 3, "the user's, the integration one, e's");

    // A replan's execution continues from the merged results.
    let next = ExecutionId::new();
    assert!(git.continue_from(exec, next).await.unwrap());
    assert_eq!(rev(root, &git.branch(next)), rev(root, &branch));
    assert!(!git.continue_from(exec, next).await.unwrap(), "only once");

    git.end(exec, WorkspaceEnd::Completed).await.unwrap();
    git.end(exec, WorkspaceEnd::Completed).await.unwrap();
    let left = worktrees(root);
    let step_branches = ok(root, &["for-each-ref", "refs/heads/orca-step/"])
        .lines()
        .count();
    let refs = ok(root, &["for-each-ref", "refs/orca/"]).lines().count();
    println!("after end: worktrees {left}, step branches {step_branches}, orca refs {refs}");
    assert_eq!((left, step_branches), (1, 0));
    // The replan's base is kept (its execution has not ended); none of `exec`'s is.
    assert_eq!(refs, 1);
    assert!(!git.worktrees_dir().join(exec.to_string()).exists());
    // The user's checkout never moved.
    assert_eq!(rev(root, "HEAD"), head);
    assert_eq!(ok(root, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn outside_a_repository_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = GitWorktrees::discover(dir.path()).await.unwrap_err();
    assert!(
        err.to_string().ends_with("is not in a git repository"),
        "{err}"
    );
}

#[tokio::test]
async fn a_repository_without_a_commit_says_so() {
    let dir = tempfile::tempdir().unwrap();
    ok(dir.path(), &["init", "--quiet"]);
    let git = GitWorktrees::discover(dir.path()).await.unwrap();
    let err = git
        .prepare(ExecutionId::new(), &step("a"), &[])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("has no commit yet"), "{err}");
}

#[tokio::test]
async fn a_worktree_left_locked_and_half_made_by_a_crash_is_recreated() {
    let r = repo();
    let root = r.path();
    let git = GitWorktrees::discover(root).await.unwrap();
    let exec = ExecutionId::new();
    let dir = git.prepare(exec, &step("a"), &[]).await.unwrap();
    // What `kill -9` during `git worktree add` leaves: the entry locked, the directory gone.
    ok(
        root,
        &[
            "worktree",
            "lock",
            "--reason",
            "initializing",
            &dir.to_string_lossy(),
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
    let again = git.prepare(exec, &step("a"), &[]).await.unwrap();
    assert_eq!(again, dir);
    assert!(again.join("f.txt").exists());
    let n = worktrees(root);
    println!("worktrees after re-creating a locked, half-made one: {n}");
    assert_eq!(n, 3, "the user's, the integration one, a's");
}
