//! Where an isolated step's worktree starts, end to end (ADR 0017), with the real
//! `orca` binary and shell steps on temporary git repositories: at the execution's base plus
//! the results of its direct dependencies — never an unrelated step that merely finished
//! first. Each step lists the files it sees into its output (`SEES(<step>): …`), and the order
//! in which steps merged is read back from the run's branch, so the test knows the unrelated
//! step really had merged before. Also: a diamond sees every ancestor; dependencies whose
//! results conflict fail the step with the files and the decision, and the retry completes;
//! `kill -9` mid-run then resume (a result ref removed and junk left in the worktree behind
//! orca's back) leaks no worktree, branch or ref — counted and printed.
//!
//! Ordering is forced by steps waiting (up to 120 s) for another step's merge commit to appear
//! in the repository, never by sleeping a fixed time.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::worktrees::{Project, find_code, git};

/// A shell snippet that waits until step `step` has merged into some `orca/…` branch.
fn wait_merged(p: &Project, step: &str) -> String {
    format!(
        "n=0; until git -C '{}' log --all --format=%s | grep -qx 'orca: merge step {step}'; do \
         n=$((n+1)); [ $n -gt 1200 ] && exit 9; sleep 0.1; done",
        p.dir.path().display()
    )
}

/// A shell snippet printing the files the step sees: `SEES(<step>): a.txt b.txt …`.
fn list(step: &str) -> String {
    format!("echo \"SEES({step}): $(ls | sort | tr '\\n' ' ')\"")
}

/// Every string in `v`.
fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// What `step` said it sees, from `exec show --json`.
fn seen(p: &Project, exec: &str, step: &str) -> Vec<String> {
    let (_, shown, _) = p.json(&["exec", "show", exec]);
    let mut all = Vec::new();
    strings(&shown, &mut all);
    let tag = format!("SEES({step}): ");
    let line = all
        .iter()
        .flat_map(|s| s.lines())
        .find_map(|l| l.strip_prefix(&tag))
        .unwrap_or_else(|| panic!("no {tag} in {shown}"));
    line.split_whitespace().map(str::to_owned).collect()
}

/// The steps merged into `orca/<exec>`, oldest first.
fn merge_order(p: &Project, exec: &str) -> Vec<String> {
    let log = git(
        p.dir.path(),
        &[
            "log",
            "--first-parent",
            "--merges",
            "--reverse",
            "--format=%s",
            &format!("orca/{exec}"),
        ],
    );
    log.lines()
        .filter_map(|l| l.strip_prefix("orca: merge step "))
        .map(str::to_owned)
        .collect()
}

/// Worktrees beyond the user's own, step branches and orca refs: all 0 after a completed run.
fn leaks(p: &Project) -> (usize, usize, usize) {
    (p.worktrees() - 1, p.step_branches(), p.orca_refs())
}

#[test]
fn a_step_sees_its_dependencys_result_and_not_an_unrelated_step_that_finished_before_it_started() {
    let p = Project::new(true);
    // a → c; b unrelated to c. a waits for b's merge, so b has merged before c starts.
    let plan = p.plan(&[
        (
            "a",
            &format!("{} && echo a > a.txt", wait_merged(&p, "b")),
            &[],
            Some("worktree"),
        ),
        ("b", "echo b > b.txt", &[], Some("worktree")),
        (
            "c",
            &format!("{} && echo c > c.txt", list("c")),
            &["a"],
            Some("worktree"),
        ),
    ]);
    let (c, v, err) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 0, "{v} {err}");
    let exec = v["execution_id"].as_str().unwrap();
    let order = merge_order(&p, exec);
    println!("merged in order: {order:?}");
    assert_eq!(order, ["b", "a", "c"], "b merged before c started");
    let c_sees = seen(&p, exec, "c");
    println!("c sees: {c_sees:?}");
    assert!(c_sees.contains(&"a.txt".to_owned()), "{c_sees:?}");
    let leaked = usize::from(c_sees.contains(&"b.txt".to_owned()));
    println!("unrelated results seen by c: {leaked}");
    assert_eq!(leaked, 0, "b's result leaked into c's worktree: {c_sees:?}");
    // c still merges cleanly into a branch that holds b.
    let tree = git(
        p.dir.path(),
        &["ls-tree", "--name-only", &format!("orca/{exec}")],
    );
    for f in ["a.txt", "b.txt", "c.txt", "shared.txt"] {
        assert!(tree.lines().any(|l| l == f), "{f} missing: {tree}");
    }
    let left = leaks(&p);
    println!("left after the run (worktrees, step branches, refs): {left:?}");
    assert_eq!(left, (0, 0, 0));
}

#[test]
fn a_diamond_sees_every_ancestor_and_a_sibling_never_sees_its_sibling() {
    let p = Project::new(true);
    // a → {b, c} → d; b and c share a lock, so the second starts after the first merged.
    let path = p.plan(&[
        ("a", "echo a > a.txt", &[], Some("worktree")),
        (
            "b",
            &format!("{} && echo b > b.txt", list("b")),
            &["a"],
            Some("worktree"),
        ),
        (
            "c",
            &format!("{} && echo c > c.txt", list("c")),
            &["a"],
            Some("worktree"),
        ),
        (
            "d",
            &format!("{} && echo d > d.txt", list("d")),
            &["b", "c"],
            Some("worktree"),
        ),
    ]);
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    doc["steps"][1]["locks"] = serde_json::json!(["one-at-a-time"]);
    doc["steps"][2]["locks"] = serde_json::json!(["one-at-a-time"]);
    std::fs::write(&path, doc.to_string()).unwrap();
    let (c, v, err) = p.json(&["run", &path, "--yes"]);
    assert_eq!(c, 0, "{v} {err}");
    let exec = v["execution_id"].as_str().unwrap();
    let order = merge_order(&p, exec);
    println!("merged in order: {order:?}");
    assert_eq!(order.first().map(String::as_str), Some("a"), "{order:?}");
    assert_eq!(order.last().map(String::as_str), Some("d"), "{order:?}");
    let (b_sees, c_sees, d_sees) = (
        seen(&p, exec, "b"),
        seen(&p, exec, "c"),
        seen(&p, exec, "d"),
    );
    println!("b sees {b_sees:?}; c sees {c_sees:?}; d sees {d_sees:?}");
    assert_eq!(
        b_sees,
        ["a.txt", "shared.txt"],
        "c's result leaked into b's worktree"
    );
    assert_eq!(
        c_sees,
        ["a.txt", "shared.txt"],
        "b's result leaked into c's worktree"
    );
    assert_eq!(d_sees, ["a.txt", "b.txt", "c.txt", "shared.txt"]);
    assert_eq!(leaks(&p), (0, 0, 0));
}

#[test]
fn dependencies_whose_results_conflict_fail_the_step_with_the_files_and_a_retry_completes() {
    let p = Project::new(true);
    // b edits line 1; x (after b) puts it back; c (unrelated, merged after x) edits line 1
    // too, cleanly on the run's branch. d needs b and c: their results conflict.
    let plan = p.plan(&[
        ("b", "sed -i '1s/.*/B/' shared.txt", &[], Some("worktree")),
        (
            "x",
            "sed -i '1s/.*/line1/' shared.txt",
            &["b"],
            Some("worktree"),
        ),
        (
            "c",
            &format!("{} && sed -i '1s/.*/C/' shared.txt", wait_merged(&p, "x")),
            &[],
            Some("worktree"),
        ),
        (
            "d",
            &format!("{} && echo d > d.txt", list("d")),
            &["b", "c"],
            Some("worktree"),
        ),
    ]);
    let (c, v, err) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 4, "awaiting the decision: {v} {err}");
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let (_, shown, _) = p.json(&["exec", "show", &exec]);
    let failure = find_code(&shown, "merge_conflict")
        .unwrap_or_else(|| panic!("no merge_conflict failure: {shown}"));
    println!("d's failure: {failure}");
    assert!(failure.contains("step `d` cannot start"), "{failure}");
    assert!(
        failure.contains("`b`, `c` conflict in shared.txt"),
        "{failure}"
    );
    assert_eq!(shown["worktrees"]["kept"][0]["step"], "d", "{shown}");
    let refs = p.orca_refs();
    println!("refs kept with the failed run: {refs}");
    assert!(refs > 0);
    // The decision is offered; retry: d starts from the run's branch, where both merged.
    let (c, v, err) = p.json(&[
        "exec",
        "decide",
        &exec,
        "retry",
        "--guidance",
        "start from the merged branch",
    ]);
    assert_eq!(c, 0, "{v} {err}");
    assert_eq!(v["stage"], "completed", "{v}");
    assert_eq!(
        p.show(&format!("orca/{exec}:shared.txt")),
        "C\nline2\nline3\n"
    );
    assert_eq!(p.show(&format!("orca/{exec}:d.txt")), "d\n");
    let left = leaks(&p);
    println!("left after the retry completed (worktrees, step branches, refs): {left:?}");
    assert_eq!(left, (0, 0, 0));
}

#[test]
fn kill_9_then_resume_starts_dependents_from_recorded_results_and_leaks_nothing() {
    let p = Project::new(true);
    let started = p.mark("started");
    // first → slow. The first attempt of slow waits to be killed; the resumed one lists what
    // it sees and goes on.
    let plan = p.plan(&[
        ("first", "echo f > first.txt", &[], Some("worktree")),
        ("other", "echo o > other.txt", &[], Some("worktree")),
        (
            "slow",
            &format!(
                "echo x >> '{m}'; {list}; echo s > slow.txt; \
                 if [ $(wc -l < '{m}') -lt 2 ]; then sleep 120; fi",
                m = started.display(),
                list = list("slow")
            ),
            &["first"],
            Some("worktree"),
        ),
    ]);
    let mut child = p.command(&["run", &plan, "--yes"]).spawn().unwrap();
    let start = Instant::now();
    let exec = loop {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the slow step never started"
        );
        if started.exists() {
            let (_, list, _) = p.json(&["exec", "list"]);
            if let Some(id) = list[0]["execution_id"].as_str()
                && merge_order(&p, id).contains(&"other".to_owned())
            {
                break id.to_owned();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill().unwrap();
    let _ = child.wait();
    let during = (p.worktrees(), p.orca_refs());
    println!(
        "after kill -9: worktrees {}, orca refs {}",
        during.0, during.1
    );
    // Behind orca's back: first's result ref goes, junk appears in slow's worktree.
    let result = format!("refs/orca/{exec}/result/first");
    git(p.dir.path(), &["update-ref", "-d", &result]);
    let slow_dir = p.path(&format!(".git/orca-worktrees/{exec}/steps/slow"));
    assert!(slow_dir.exists(), "slow's worktree exists after the kill");
    std::fs::write(slow_dir.join("junk.txt"), "left by the killed attempt").unwrap();

    let (c, v, err) = p.json(&["exec", "resume", &exec]);
    assert_eq!(c, 0, "{v} {err}");
    assert_eq!(v["stage"], "completed", "{v}");
    let slow_sees = seen(&p, &exec, "slow");
    println!("the resumed slow sees: {slow_sees:?}");
    assert_eq!(slow_sees, ["first.txt", "shared.txt"]);
    assert_eq!(p.show(&format!("orca/{exec}:slow.txt")), "s\n");
    assert_eq!(p.show(&format!("orca/{exec}:other.txt")), "o\n");
    let left = leaks(&p);
    let dirs = std::fs::read_dir(p.path(".git/orca-worktrees"))
        .map(|d| d.count())
        .unwrap_or(0);
    println!("after resume (worktrees, step branches, refs): {left:?}, orca worktree dirs {dirs}");
    assert_eq!((left, dirs), ((0, 0, 0), 0));
}

#[test]
fn a_dependency_run_in_place_passes_on_the_results_it_depends_on() {
    let p = Project::new(true);
    // a (worktree) → b (in place: it commits nothing) → c (worktree): c starts from a's result.
    let plan = p.plan(&[
        ("a", "echo a > a.txt", &[], Some("worktree")),
        ("b", "true", &["a"], Some("in_place")),
        (
            "c",
            &format!("{} && echo c > c.txt", list("c")),
            &["b"],
            Some("worktree"),
        ),
    ]);
    let (c, v, err) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 0, "{v} {err}");
    let exec = v["execution_id"].as_str().unwrap();
    let c_sees = seen(&p, exec, "c");
    println!("c sees {c_sees:?}");
    assert_eq!(c_sees, ["a.txt", "shared.txt"]);
    assert_eq!(leaks(&p), (0, 0, 0));
}
