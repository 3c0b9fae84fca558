//! The diff of every step, on real temporary git repositories and the real `orca` binary: an
//! in-place step's diff and a worktree step's diff show exactly the lines each changed, while
//! the user's index, `HEAD` and refs stay byte for byte as they were; `--stat` and `exec show`
//! list the files (snapshots); in-place steps that ran together say their diffs may mix;
//! outside a repository `exec diff` says so once and lists the
//! files the step changed.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;
use std::path::Path;

use crate::worktrees::{Project, git};

/// The bytes of the user's index, `HEAD` and every ref that is not orca's own.
fn user_git_state(dir: &Path) -> (Vec<u8>, Vec<u8>, String) {
    let index = std::fs::read(dir.join(".git/index")).unwrap_or_default();
    let head = std::fs::read(dir.join(".git/HEAD")).unwrap();
    let refs: String = git(dir, &["for-each-ref", "--format=%(refname) %(objectname)"])
        .lines()
        .filter(|l| {
            !l.starts_with("refs/orca/")
                && !l.starts_with("refs/orca-diff/")
                && !l.starts_with("refs/heads/orca/")
                && !l.starts_with("refs/heads/orca-step/")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    (index, head, refs)
}

/// The `+`/`-` lines of a unified diff (not the file headers).
fn changed_lines(patch: &str) -> BTreeSet<String> {
    patch
        .lines()
        .filter(|l| {
            (l.starts_with('+') || l.starts_with('-'))
                && !l.starts_with("+++")
                && !l.starts_with("---")
        })
        .map(str::to_owned)
        .collect()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn in_place_and_worktree_diffs_show_exactly_what_each_step_changed() {
    let p = Project::new(true);
    let before = user_git_state(p.dir.path());
    let plan = p.plan(&[
        (
            "inplace",
            "sed -i '2s/.*/changed/' shared.txt && printf 'new\\n' > added.txt",
            &[],
            Some("in_place"),
        ),
        (
            "isolated",
            "printf 'x\\ny\\n' > wt.txt && sed -i '3d' shared.txt",
            &["inplace"],
            Some("worktree"),
        ),
    ]);
    let (c, v, err) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 0, "{v} {err}");
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let after = user_git_state(p.dir.path());
    let same = [
        before.0 == after.0,
        before.1 == after.1,
        before.2 == after.2,
    ];
    println!("index, HEAD, refs unchanged: {same:?}");
    assert_eq!(before.0, after.0, "the user's index changed");
    assert_eq!(before.1, after.1, "HEAD changed");
    assert_eq!(before.2, after.2, "the user's refs changed");
    // Control: the in-place step did change the working tree (so the diff has something).
    assert!(p.path("added.txt").exists());

    let out = p.run(&["exec", "diff", &exec, "inplace"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines = changed_lines(&stdout(&out));
    println!("in place: {lines:?}");
    let want: BTreeSet<String> = ["-line2", "+changed", "+new"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines, want, "{}", stdout(&out));
    assert!(
        !stdout(&out).contains('\x1b'),
        "colour in a pipe: {}",
        stdout(&out)
    );

    let out = p.run(&["exec", "diff", &exec, "isolated"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines = changed_lines(&stdout(&out));
    println!("in a worktree: {lines:?}");
    let want: BTreeSet<String> = ["+x", "+y", "-line3"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines, want, "{}", stdout(&out));

    let out = p.run(&["exec", "diff", &exec, "--stat"]);
    assert!(out.status.success(), "{}", stderr(&out));
    insta::assert_snapshot!("exec_diff_stat", stdout(&out));

    let out = p.run(&["exec", "show", &exec]);
    let text = stdout(&out);
    let block: String = text
        .lines()
        .skip_while(|l| !l.starts_with("files changed"))
        .take_while(|l| l.starts_with("files changed") || l.starts_with(' '))
        .map(|l| format!("{l}\n"))
        .collect();
    insta::assert_snapshot!("exec_show_files_changed", block);

    // A step that is not in the plan is refused by name.
    let out = p.run(&["exec", "diff", &exec, "nosuch"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("nosuch"), "{}", stderr(&out));
}

#[test]
fn outside_a_repository_diff_says_so_once_and_lists_the_files() {
    let p = Project::new(false);
    let plan = p.plan(&[(
        "write",
        "printf 'a\\n' > a.txt && printf 'changed\\n' > shared.txt",
        &[],
        None,
    )]);
    let (c, v, err) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 0, "{v} {err}");
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let out = p.run(&["exec", "diff", &exec]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out).matches("not in a git repository").count();
    println!(
        "said outside a repository: {said} time(s); stdout:\n{}",
        stdout(&out)
    );
    assert_eq!(said, 1, "{}", stderr(&out));
    let text = stdout(&out);
    let listed: Vec<&str> = text.lines().filter(|l| l.starts_with("#   ")).collect();
    assert_eq!(listed, ["#   A a.txt", "#   M shared.txt"], "{text}");
}

#[test]
fn in_place_steps_that_ran_together_say_their_diffs_may_mix() {
    let p = Project::new(true);
    let plan = p.plan(&[
        // Each waits (up to 20 s) until the other has started: they ran together however
        // slow the machine (two `sleep 1` steps assumed it).
        (
            "a",
            "touch a.started && for i in $(seq 400); do [ -f b.started ] && break; sleep 0.05; \
             done && printf 'a\\n' > a.txt",
            &[],
            Some("in_place"),
        ),
        (
            "b",
            "touch b.started && for i in $(seq 400); do [ -f a.started ] && break; sleep 0.05; \
             done && printf 'b\\n' > b.txt",
            &[],
            Some("in_place"),
        ),
        ("c", "printf 'c\\n' > c.txt", &["a", "b"], Some("in_place")),
    ]);
    let (c, v, err) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 0, "{v} {err}");
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let (c, v, err) = p.json(&["exec", "diff", &exec, "--stat"]);
    assert_eq!(c, 0, "{v} {err}");
    let shared: Vec<(String, bool)> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["step"].as_str().unwrap().to_owned(),
                s["shared"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    println!("shared working tree: {shared:?}");
    assert_eq!(
        shared,
        [
            ("a".to_owned(), true),
            ("b".to_owned(), true),
            ("c".to_owned(), false)
        ]
    );
    // Control: c alone changed only its own file.
    let files: Vec<&str> = v["steps"][2]["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert_eq!(files, ["c.txt"]);
    let text = stdout(&p.run(&["exec", "diff", &exec, "a", "--stat"]));
    assert!(text.contains("their changes may be here too"), "{text}");
}
