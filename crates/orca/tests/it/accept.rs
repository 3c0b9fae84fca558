//! A result the human accepts, on real temporary git repositories and the real `orca` binary:
//! the user's branch is unchanged until `exec accept`, then holds the work (a fast-forward, or a
//! merge commit naming the execution when the branch moved on); a dirty working
//! tree, a conflict and a result changed after it was shown are refused with nothing changed;
//! a second decision is refused naming the first; the signed acceptance verifies and a
//! tampered one is detected; `exec discard` removes the branches and worktrees, audited.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use crate::worktrees::{Project, git};

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A completed execution whose one worktree step wrote `work.txt` and changed `shared.txt`
/// line 1 to `line`; returns its id.
fn completed(p: &Project, line: &str) -> String {
    let plan = p.plan(&[(
        "work",
        &format!("printf 'done\\n' > work.txt && sed -i '1s/.*/{line}/' shared.txt"),
        &[],
        Some("worktree"),
    )]);
    let (c, v, err) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 0, "{v} {err}");
    v["execution_id"].as_str().unwrap().to_owned()
}

fn head(p: &Project) -> String {
    git(p.dir.path(), &["rev-parse", "HEAD"]).trim().to_owned()
}

/// The bytes of the user's index and `HEAD`, and the tip of `main`.
fn untouched(p: &Project) -> (Vec<u8>, Vec<u8>, String) {
    (
        std::fs::read(p.path(".git/index")).unwrap(),
        std::fs::read(p.path(".git/HEAD")).unwrap(),
        git(p.dir.path(), &["rev-parse", "refs/heads/main"]),
    )
}

/// Every file under `dir` named `name`.
fn find_files(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let path = e.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.file_name().is_some_and(|n| n == name) {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn the_users_branch_gets_the_work_only_when_accepted_and_only_once() {
    let p = Project::new(true);
    let main_before = head(&p);
    let exec = completed(&p, "accepted");
    assert_eq!(head(&p), main_before, "the run moved the user's branch");
    assert!(!p.path("work.txt").exists());
    let show = stdout(&p.run(&["exec", "show", &exec]));
    assert!(show.contains("awaiting acceptance"), "{show}");
    let list = stdout(&p.run(&["exec", "list"]));
    assert!(list.contains(" awaiting acceptance "), "{list}");
    let waiting = stdout(&p.run(&["exec", "list", "--status", "awaiting_acceptance"]));
    assert_eq!(waiting.lines().count(), 2, "{waiting}");

    let out = p.run(&["exec", "accept", &exec, "--yes", "--note", "looks right"]);
    assert!(out.status.success(), "{}", stderr(&out));
    println!("accept: {}", stderr(&out).trim());
    assert_eq!(
        std::fs::read_to_string(p.path("work.txt")).unwrap(),
        "done\n"
    );
    assert_ne!(head(&p), main_before);
    let status = git(p.dir.path(), &["status", "--porcelain"]);
    assert_eq!(status, "", "accepting left the tree dirty");

    let verify = p.run(&["audit", "verify"]);
    assert!(
        verify.status.success(),
        "{}{}",
        stdout(&verify),
        stderr(&verify)
    );
    let list = stdout(&p.run(&["exec", "list"]));
    assert!(!list.contains("awaiting acceptance"), "{list}");
    let show = stdout(&p.run(&["exec", "show", &exec]));
    assert!(show.contains("result: accepted by"), "{show}");

    let again = p.run(&["exec", "accept", &exec, "--yes"]);
    println!("second accept: {}", stderr(&again).trim());
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("already accepted by"),
        "{}",
        stderr(&again)
    );
    let discard = p.run(&["exec", "discard", &exec]);
    assert_eq!(discard.status.code(), Some(2), "{}", stderr(&discard));
    assert!(
        stderr(&discard).contains("already accepted"),
        "{}",
        stderr(&discard)
    );

    // A tampered acceptance (its note rewritten, the chain recomputed) is detected.
    let runs: Vec<PathBuf> = find_files(&p.path(".orca"), "runs.audit.jsonl")
        .into_iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .contains("execution.accepted")
        })
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    crate::tamper_support::rechain(&runs[0], |entries| {
        for e in entries.iter_mut() {
            if e.kind == "execution.accepted" {
                e.data["note"] = serde_json::json!("not what was signed");
            }
        }
    });
    let verify = p.run(&["audit", "verify"]);
    let said = format!("{}{}", stdout(&verify), stderr(&verify));
    println!("after tampering: {}", said.trim());
    assert_ne!(verify.status.code(), Some(0), "{said}");
    assert!(said.contains("acceptance"), "{said}");
}

#[test]
fn a_dirty_tree_and_a_conflict_are_refused_with_nothing_changed() {
    let p = Project::new(true);
    let exec = completed(&p, "theirs");
    // Dirty: a tracked file modified.
    std::fs::write(p.path("shared.txt"), "mine\nline2\nline3\n").unwrap();
    let before = untouched(&p);
    let out = p.run(&["exec", "accept", &exec, "--yes"]);
    println!("dirty: {}", stderr(&out).trim());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("uncommitted changes"),
        "{}",
        stderr(&out)
    );
    assert_eq!(before, untouched(&p));
    assert_eq!(
        std::fs::read_to_string(p.path("shared.txt")).unwrap(),
        "mine\nline2\nline3\n"
    );
    // Conflict: the user commits another line 1.
    git(p.dir.path(), &["commit", "--quiet", "-am", "mine"]);
    let before = untouched(&p);
    let out = p.run(&["exec", "accept", &exec, "--yes"]);
    println!("conflict: {}", stderr(&out).trim());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("conflicts in shared.txt"),
        "{}",
        stderr(&out)
    );
    assert_eq!(before, untouched(&p));
    assert_eq!(git(p.dir.path(), &["status", "--porcelain"]), "");
    // Control: nothing was recorded, so a later accept is not refused as a second one.
    let show = stdout(&p.run(&["exec", "show", &exec]));
    assert!(show.contains("awaiting acceptance"), "{show}");
}

#[test]
fn a_result_changed_after_it_was_shown_is_refused() {
    let p = Project::new(true);
    let exec = completed(&p, "shown");
    let before = untouched(&p);
    let mut child = p.command(&["exec", "accept", &exec]);
    let mut child = child
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the question, with the diff shown.
    let mut err = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("[y/N]") {
        assert_eq!(err.read(&mut byte).unwrap(), 1, "no question: {seen:?}");
        seen.push(byte[0]);
    }
    // The integration branch moves under the question.
    let branch = format!("refs/heads/orca/{exec}");
    let tip = git(p.dir.path(), &["rev-parse", &branch]);
    let tree = git(p.dir.path(), &["rev-parse", "HEAD^{tree}"]);
    let moved = git(
        p.dir.path(),
        &[
            "commit-tree",
            tree.trim(),
            "-p",
            tip.trim(),
            "-m",
            "sneaked in",
        ],
    );
    git(p.dir.path(), &["update-ref", &branch, moved.trim()]);
    child.stdin.take().unwrap().write_all(b"y\n").unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    println!("changed result: {}", rest.trim());
    assert_eq!(status.code(), Some(2), "{rest}");
    assert!(rest.contains("changed since it was shown"), "{rest}");
    assert_eq!(before, untouched(&p));
}

#[test]
fn discard_removes_the_branches_and_worktrees_audited() {
    let p = Project::new(true);
    let exec = completed(&p, "dropped");
    let branch = format!("refs/heads/orca/{exec}");
    let branches_before = git(p.dir.path(), &["for-each-ref", &branch])
        .lines()
        .count();
    assert_eq!(branches_before, 1, "control: the integration branch exists");
    let out = p.run(&["exec", "discard", &exec]);
    assert!(out.status.success(), "{}", stderr(&out));
    let left = git(p.dir.path(), &["for-each-ref", &branch])
        .lines()
        .count();
    let (wt, sb) = (p.worktrees(), p.step_branches());
    println!("after discard: integration branches {left}, worktrees {wt}, step branches {sb}");
    assert_eq!((left, wt, sb), (0, 1, 0));
    let audit = stdout(&p.run(&["--json", "audit", "show", &exec]));
    let plan_runs: Vec<PathBuf> = find_files(&p.path(".orca"), "runs.audit.jsonl");
    let discarded = plan_runs
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .contains("execution.discarded")
        })
        .count();
    assert_eq!(discarded, 1, "{audit}");
    let again = p.run(&["exec", "accept", &exec, "--yes"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("already discarded by"),
        "{}",
        stderr(&again)
    );
    let verify = p.run(&["audit", "verify"]);
    assert!(
        verify.status.success(),
        "{}{}",
        stdout(&verify),
        stderr(&verify)
    );
}

#[test]
fn a_diverged_branch_gets_a_merge_commit_naming_the_execution() {
    let p = Project::new(true);
    let exec = completed(&p, "theirs");
    std::fs::write(p.path("mine.txt"), "mine\n").unwrap();
    git(p.dir.path(), &["add", "mine.txt"]);
    git(p.dir.path(), &["commit", "--quiet", "-m", "mine"]);
    let mine = head(&p);
    let out = p.run(&["exec", "accept", &exec, "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let subject = git(p.dir.path(), &["log", "-1", "--format=%s"]);
    let parents = git(p.dir.path(), &["log", "-1", "--format=%P"]);
    println!("merge: {} (parents: {})", subject.trim(), parents.trim());
    assert_eq!(subject.trim(), format!("orca: accept execution {exec}"));
    assert_eq!(parents.split_whitespace().count(), 2);
    assert!(parents.starts_with(&mine), "{parents}");
    assert_eq!(
        std::fs::read_to_string(p.path("work.txt")).unwrap(),
        "done\n"
    );
    assert_eq!(
        std::fs::read_to_string(p.path("mine.txt")).unwrap(),
        "mine\n"
    );
    assert_eq!(git(p.dir.path(), &["status", "--porcelain"]), "");
}
