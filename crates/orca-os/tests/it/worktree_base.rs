//! Where a step's worktree starts (ADR 0017), on real temporary repositories below
//! the binary: at the execution's base plus the results of its direct dependencies only — not
//! the integration branch's tip, which also holds unrelated steps that finished earlier. Also:
//! a diamond sees every ancestor, dependencies whose results conflict fail the preparation
//! with the files (and the retry starts from the integration branch), a result ref removed
//! behind orca's back is recovered from the merge commit, a base recorded before a crash is
//! honoured, and no ref outlives a completed execution. Counts are printed.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use orca_core::{ExecutionId, StepId, StepWorkspaces, WorkspaceEnd, WorkspaceError};
use orca_os::GitWorktrees;

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .env_remove("GIT_DIR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
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

fn steps(s: &[&str]) -> Vec<StepId> {
    s.iter().map(|x| step(x)).collect()
}

/// The files a worktree holds (`.git` aside), sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".git")
        .collect();
    names.sort();
    names
}

fn orca_refs(root: &Path) -> Vec<String> {
    ok(root, &["for-each-ref", "--format=%(refname)", "refs/orca/"])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Prepares `id` after `deps` (printing how long that took), writes `<id>.txt`, and
/// integrates it.
#[expect(
    clippy::print_stdout,
    reason = "the timing is a figure the test prints"
)]
async fn complete(git: &GitWorktrees, exec: ExecutionId, id: &str, deps: &[&str]) -> Vec<String> {
    let started = Instant::now();
    let dir = git.prepare(exec, &step(id), &steps(deps)).await.unwrap();
    println!(
        "prepare {id} after {deps:?}: {} ms",
        started.elapsed().as_millis()
    );
    let seen = files(&dir);
    std::fs::write(dir.join(format!("{id}.txt")), id).unwrap();
    git.integrate(exec, &step(id), 1).await.unwrap();
    seen
}

#[tokio::test]
async fn a_step_sees_its_dependencies_results_and_not_an_unrelated_step_that_finished_first() {
    let r = repo();
    let root = r.path();
    let git = GitWorktrees::discover(root).await.unwrap();
    let exec = ExecutionId::new();
    // a → c, and b unrelated to c; b finishes (and merges) before c starts.
    complete(&git, exec, "a", &[]).await;
    complete(&git, exec, "b", &[]).await;
    let branch = git.branch(exec);
    assert!(ok(root, &["ls-tree", "--name-only", &branch]).contains("b.txt"));
    let seen = complete(&git, exec, "c", &["a"]).await;
    println!("c sees: {seen:?}");
    assert_eq!(
        seen,
        ["a.txt", "f.txt"],
        "b's result leaked into c's worktree"
    );
    // c merges cleanly into a branch that also holds b.
    let tree = ok(root, &["ls-tree", "--name-only", &branch]);
    assert_eq!(tree, "a.txt\nb.txt\nc.txt\nf.txt\n");
    let merges = ok(
        root,
        &["log", "--first-parent", "--merges", "--format=%s", &branch],
    );
    assert_eq!(
        merges,
        "orca: merge step c\norca: merge step b\norca: merge step a\n"
    );
    let refs = git.refs(exec).await.unwrap();
    println!("refs during the run: {refs:?}");
    assert!(refs.iter().any(|r| r.ends_with("/result/c")), "{refs:?}");
    assert!(refs.iter().any(|r| r.ends_with("/base")), "{refs:?}");

    git.end(exec, WorkspaceEnd::Completed).await.unwrap();
    let left = orca_refs(root);
    println!(
        "orca refs left after the execution completed: {}",
        left.len()
    );
    assert_eq!(left.len(), 0, "{left:?}");
    assert_eq!(ok(root, &["ls-tree", "--name-only", &branch]), tree);
}

#[tokio::test]
async fn a_diamond_sees_every_ancestor_and_a_sibling_never_sees_its_sibling() {
    let r = repo();
    let root = r.path();
    let git = GitWorktrees::discover(root).await.unwrap();
    let exec = ExecutionId::new();
    complete(&git, exec, "a", &[]).await;
    let c_saw = complete(&git, exec, "c", &["a"]).await;
    let b_saw = complete(&git, exec, "b", &["a"]).await;
    println!("b sees {b_saw:?}, c sees {c_saw:?}");
    assert_eq!(
        b_saw,
        ["a.txt", "f.txt"],
        "c finished first: b must not see it"
    );
    assert_eq!(c_saw, ["a.txt", "f.txt"]);
    let d_saw = complete(&git, exec, "d", &["b", "c"]).await;
    println!("d sees {d_saw:?}");
    assert_eq!(d_saw, ["a.txt", "b.txt", "c.txt", "f.txt"]);
    assert_eq!(
        ok(root, &["ls-tree", "--name-only", &git.branch(exec)]),
        "a.txt\nb.txt\nc.txt\nd.txt\nf.txt\n"
    );
    // A step that changes nothing adds no merge to the branch.
    let tip = ok(root, &["rev-parse", &git.branch(exec)]);
    git.prepare(exec, &step("e"), &steps(&["d"])).await.unwrap();
    git.integrate(exec, &step("e"), 1).await.unwrap();
    assert_eq!(ok(root, &["rev-parse", &git.branch(exec)]), tip);
    git.end(exec, WorkspaceEnd::Completed).await.unwrap();
    assert_eq!(orca_refs(root).len(), 0);
}

#[tokio::test]
async fn dependencies_whose_results_conflict_fail_the_preparation_and_the_retry_starts_from_the_branch()
 {
    let r = repo();
    let root = r.path();
    let git = GitWorktrees::discover(root).await.unwrap();
    let exec = ExecutionId::new();
    let branch = git.branch(exec);
    // b edits line one; x (after b) puts it back; c (unrelated) edits it too and, merged
    // after x, merges cleanly. b's and c's results conflict with each other.
    let b = git.prepare(exec, &step("b"), &[]).await.unwrap();
    std::fs::write(b.join("f.txt"), "B\ntwo\nthree\n").unwrap();
    git.integrate(exec, &step("b"), 1).await.unwrap();
    let x = git.prepare(exec, &step("x"), &steps(&["b"])).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(x.join("f.txt")).unwrap(),
        "B\ntwo\nthree\n"
    );
    std::fs::write(x.join("f.txt"), "one\ntwo\nthree\n").unwrap();
    git.integrate(exec, &step("x"), 1).await.unwrap();
    let c = git.prepare(exec, &step("c"), &[]).await.unwrap();
    std::fs::write(c.join("f.txt"), "C\ntwo\nthree\n").unwrap();
    git.integrate(exec, &step("c"), 1).await.unwrap();
    assert_eq!(
        ok(root, &["show", &format!("{branch}:f.txt")]),
        "C\ntwo\nthree\n"
    );

    let err = git
        .prepare(exec, &step("d"), &steps(&["b", "c"]))
        .await
        .unwrap_err();
    println!("preparing d: {err}");
    let WorkspaceError::DependenciesConflict {
        dependencies,
        files,
        ..
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(files, &["f.txt".to_owned()]);
    assert_eq!(dependencies, &steps(&["b", "c"]));
    assert!(
        err.to_string().contains("`b`, `c` conflict in f.txt"),
        "{err}"
    );
    let kept = git.kept(exec).await.unwrap();
    assert_eq!(
        kept.len(),
        1,
        "d's worktree is kept for inspection: {kept:?}"
    );
    assert_eq!(kept[0].step, step("d"));

    // The retry starts from the branch, where b, x and c were merged: it merges cleanly.
    let d = git
        .prepare(exec, &step("d"), &steps(&["b", "c"]))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(d.join("f.txt")).unwrap(),
        "C\ntwo\nthree\n"
    );
    std::fs::write(d.join("d.txt"), "d").unwrap();
    git.integrate(exec, &step("d"), 2).await.unwrap();
    let refs = git.refs(exec).await.unwrap();
    assert!(!refs.iter().any(|r| r.contains("/conflict/")), "{refs:?}");
    // Kept (a failed execution): the refs stay with the worktrees.
    git.end(exec, WorkspaceEnd::Kept).await.unwrap();
    assert_eq!(git.refs(exec).await.unwrap(), refs);
    git.end(exec, WorkspaceEnd::Completed).await.unwrap();
    let left = orca_refs(root).len() + git.kept(exec).await.unwrap().len();
    println!("refs and worktrees left after completing: {left}");
    assert_eq!(left, 0);
}

#[tokio::test]
async fn a_result_ref_removed_behind_orcas_back_is_recovered_from_the_merge_commit() {
    let r = repo();
    let root = r.path();
    let git = GitWorktrees::discover(root).await.unwrap();
    let exec = ExecutionId::new();
    complete(&git, exec, "a", &[]).await;
    complete(&git, exec, "b", &[]).await;
    let name = format!("refs/orca/{exec}/result/a");
    let result = ok(root, &["rev-parse", &name]);
    ok(root, &["update-ref", "-d", &name]);
    let seen = complete(&git, exec, "c", &["a"]).await;
    assert_eq!(seen, ["a.txt", "f.txt"]);
    assert_eq!(ok(root, &["rev-parse", &name]), result, "re-created");
    // A dependency with no result to be found adds nothing.
    let seen = complete(&git, exec, "e", &["in-place"]).await;
    assert_eq!(seen, ["f.txt"]);
}

#[tokio::test]
async fn a_base_recorded_before_a_crash_is_the_one_used() {
    let r = repo();
    let root = r.path();
    let first = ok(root, &["rev-parse", "HEAD"]).trim().to_owned();
    std::fs::write(root.join("later.txt"), "later").unwrap();
    ok(root, &["add", "--all"]);
    ok(root, &["commit", "--quiet", "-m", "later"]);
    let git = GitWorktrees::discover(root).await.unwrap();
    let exec = ExecutionId::new();
    // kill -9 after the base was recorded, before the branch was made; HEAD moved since.
    ok(
        root,
        &["update-ref", &format!("refs/orca/{exec}/base"), &first],
    );
    let dir = git.prepare(exec, &step("a"), &[]).await.unwrap();
    assert_eq!(files(&dir), ["f.txt"]);
    assert_eq!(
        ok(root, &["rev-parse", &git.branch(exec)]).trim(),
        first,
        "the branch starts at the recorded base"
    );
}

#[tokio::test]
async fn a_step_run_again_after_its_merge_merges_again_cleanly() {
    let r = repo();
    let root = r.path();
    let git = GitWorktrees::discover(root).await.unwrap();
    let exec = ExecutionId::new();
    complete(&git, exec, "a", &[]).await;
    complete(&git, exec, "b", &["a"]).await;
    // kill -9 after b's merge, before its record: the resumed runner runs b again, from the
    // base plus a's result, and it does the same thing.
    let seen = complete(&git, exec, "b", &["a"]).await;
    assert_eq!(seen, ["a.txt", "f.txt"], "the re-run starts from base + a");
    let merges = ok(
        root,
        &[
            "log",
            "--first-parent",
            "--merges",
            "--format=%s",
            &git.branch(exec),
        ],
    );
    println!("merges after b ran twice: {}", merges.lines().count());
    assert_eq!(
        ok(root, &["ls-tree", "--name-only", &git.branch(exec)]),
        "a.txt\nb.txt\nf.txt\n"
    );
    git.end(exec, WorkspaceEnd::Completed).await.unwrap();
    assert_eq!(
        orca_refs(root).len() + git.kept(exec).await.unwrap().len(),
        0
    );
}
