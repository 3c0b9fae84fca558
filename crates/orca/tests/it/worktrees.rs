//! Worktree isolation end to end (ADR 0017), on real temporary git repositories with
//! the shell agent and the real `orca` binary: two parallel steps merge cleanly; two editing the
//! same line conflict and produce the decision; a retry after the human decides completes; the
//! user's branch and working tree are untouched (hashed before and after); `kill -9` mid-run then
//! resume leaks no worktree (counted with `git worktree list`); outside a repository a clear
//! message and steps run in place; `--apply` fast-forwards a clean checkout.
//!
//! Deadlines are generous (a loaded 2-core CI box); the counts are printed.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

pub(crate) struct Project {
    pub(crate) dir: TempDir,
    config_home: TempDir,
    /// Plan documents (outside the repository).
    docs: TempDir,
}

pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=tester",
            "-c",
            "user.email=t@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The message of the first failure with `code` anywhere in `v`.
pub(crate) fn find_code(v: &Value, code: &str) -> Option<String> {
    match v {
        Value::Object(m) => {
            if m.get("code").and_then(Value::as_str) == Some(code) {
                return m.get("message").and_then(Value::as_str).map(str::to_owned);
            }
            m.values().find_map(|x| find_code(x, code))
        }
        Value::Array(a) => a.iter().find_map(|x| find_code(x, code)),
        _ => None,
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn last_json(text: &str) -> Option<Value> {
    serde_json::from_str(text).ok().or_else(|| {
        text.lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v.is_object() || v.is_array())
    })
}

impl Project {
    /// A git repository with one commit (`shared.txt`, `.gitignore` holding `.orca/`), then
    /// `orca init`. `git: false` makes a plain directory.
    pub(crate) fn new(with_git: bool) -> Self {
        let p = Self {
            dir: tempfile::tempdir().unwrap(),
            config_home: tempfile::tempdir().unwrap(),
            docs: tempfile::tempdir().unwrap(),
        };
        std::fs::write(p.path("shared.txt"), "line1\nline2\nline3\n").unwrap();
        if with_git {
            git(p.dir.path(), &["init", "--quiet", "--initial-branch=main"]);
            std::fs::write(p.path(".gitignore"), ".orca/\nmarks/\n").unwrap();
            git(p.dir.path(), &["add", "--all"]);
            git(p.dir.path(), &["commit", "--quiet", "-m", "base"]);
        }
        let out = p.run(&["init"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        p
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A marker file steps write by absolute path from their worktrees: inside the project
    /// (the sandbox lets a step write only there), in `marks/`, which git ignores.
    pub(crate) fn mark(&self, name: &str) -> PathBuf {
        let dir = self.path("marks");
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut cmd = common::isolated(self.dir.path(), self.config_home.path());
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    pub(crate) fn json(&self, args: &[&str]) -> (i32, Value, String) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        let value = last_json(&String::from_utf8_lossy(&out.stdout))
            .unwrap_or_else(|| panic!("no JSON from {args:?}: {}", stderr(&out)));
        (code(&out), value, stderr(&out))
    }

    /// Writes a plan document of steps `(id, command, depends_on, isolation)`; the agent is
    /// `shell`, or `agent` when given.
    fn plan_with(&self, agent: &str, steps: &[(&str, &str, &[&str], Option<&str>)]) -> String {
        let path = self.plan(steps);
        let mut doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for s in doc["steps"].as_array_mut().unwrap() {
            s["agent"] = json!(agent);
        }
        std::fs::write(&path, doc.to_string()).unwrap();
        path
    }

    /// Writes a plan document of shell steps `(id, command, depends_on, isolation)`.
    pub(crate) fn plan(&self, steps: &[(&str, &str, &[&str], Option<&str>)]) -> String {
        let steps: Vec<Value> = steps
            .iter()
            .map(|(id, cmd, deps, iso)| {
                let mut s = json!({ "id": id, "agent": "shell",
                    "description": format!("the {id} step"), "command": cmd, "depends_on": deps });
                if let Some(iso) = iso {
                    s["isolation"] = json!(iso);
                }
                s
            })
            .collect();
        let doc = json!({ "goal": "parallel edits", "assumptions": ["git"], "risks": ["none"],
                          "verification": ["the merged branch"], "steps": steps });
        let path = self.docs.path().join("plan.json");
        std::fs::write(&path, doc.to_string()).unwrap();
        path.display().to_string()
    }

    /// What the user sees of their repository: branch, HEAD, status, and a hash of every
    /// tracked and untracked file's content in the working tree (`.orca/` aside).
    pub(crate) fn user_state(&self) -> String {
        let d = self.dir.path();
        let listed = git(
            d,
            &["ls-files", "--cached", "--others", "--exclude-standard"],
        );
        let mut hashes = String::new();
        for f in listed.lines() {
            let content = std::fs::read(self.path(f)).unwrap_or_default();
            hashes.push_str(&format!("{f}:{}\n", content.len()));
            hashes.push_str(&String::from_utf8_lossy(&content));
        }
        format!(
            "branch={}head={}status={}files={hashes}",
            git(d, &["symbolic-ref", "HEAD"]),
            git(d, &["rev-parse", "HEAD"]),
            git(d, &["status", "--porcelain"]),
        )
    }

    /// `git worktree list` entries (the user's own checkout included).
    pub(crate) fn worktrees(&self) -> usize {
        git(self.dir.path(), &["worktree", "list", "--porcelain"])
            .lines()
            .filter(|l| l.starts_with("worktree "))
            .count()
    }

    pub(crate) fn step_branches(&self) -> usize {
        git(
            self.dir.path(),
            &[
                "for-each-ref",
                "--format=%(refname)",
                "refs/heads/orca-step/",
            ],
        )
        .lines()
        .count()
    }

    /// orca's refs (`refs/orca/<exec>/base`, `…/result/<step>`, …), of every execution.
    pub(crate) fn orca_refs(&self) -> usize {
        git(
            self.dir.path(),
            &["for-each-ref", "--format=%(refname)", "refs/orca/"],
        )
        .lines()
        .count()
    }

    pub(crate) fn show(&self, rev_path: &str) -> String {
        git(self.dir.path(), &["show", rev_path])
    }
}

#[test]
fn two_parallel_steps_editing_different_files_merge_cleanly_and_leave_the_user_untouched() {
    let p = Project::new(true);
    // The user has work of their own in progress: a modified tracked file and a new one.
    std::fs::write(p.path("shared.txt"), "line1\nline2\nline3\nmine\n").unwrap();
    std::fs::write(p.path("notes.txt"), "my notes\n").unwrap();
    let before = p.user_state();
    let plan = p.plan(&[
        (
            "left",
            "echo left > left.txt && sed -i '1s/.*/L/' shared.txt",
            &[],
            Some("worktree"),
        ),
        (
            "right",
            "echo right > right.txt && sed -i '3s/.*/R/' shared.txt",
            &[],
            Some("worktree"),
        ),
        (
            "after",
            "test -f left.txt && test -f right.txt",
            &["left", "right"],
            Some("worktree"),
        ),
    ]);
    let (c, v, err) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 0, "{v} {err}");
    assert_eq!(v["stage"], "completed", "{v}");
    let exec = v["execution_id"].as_str().unwrap();
    let branch = format!("orca/{exec}");
    assert_eq!(p.show(&format!("{branch}:left.txt")), "left\n");
    assert_eq!(p.show(&format!("{branch}:right.txt")), "right\n");
    assert_eq!(p.show(&format!("{branch}:shared.txt")), "L\nline2\nR\n");
    let after = p.user_state();
    let changed = usize::from(before != after);
    println!("user state changed: {changed}");
    assert_eq!(before, after);
    let (wt, sb) = (p.worktrees(), p.step_branches());
    let refs = p.orca_refs();
    println!(
        "worktrees after a completed run: {wt} (the user's own), step branches left: {sb}, orca refs left: {refs}"
    );
    assert_eq!((wt, sb, refs), (1, 0, 0));
    assert!(
        !p.path("left.txt").exists(),
        "a step wrote into the user's tree"
    );
}

#[test]
fn same_line_conflict_is_a_decision_and_a_retry_completes() {
    let p = Project::new(true);
    let before = p.user_state();
    // No declared writes (so plan validation cannot see it): the worktree merge catches it.
    let plan = p.plan(&[
        (
            "first",
            "sed -i '1s/.*/A/' shared.txt",
            &[],
            Some("worktree"),
        ),
        (
            "second",
            "sleep 1; sed -i '1s/.*/B/' shared.txt",
            &[],
            Some("worktree"),
        ),
    ]);
    let (c, v, err) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 4, "awaiting the decision: {v} {err}");
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let (_, shown, _) = p.json(&["exec", "show", &exec]);
    let failure = find_code(&shown, "merge_conflict")
        .unwrap_or_else(|| panic!("no merge_conflict failure: {shown}"));
    println!("conflict: {failure}");
    assert!(failure.contains("shared.txt"), "{failure}");
    assert!(failure.contains("`second`"), "{failure}");
    assert_eq!(shown["worktrees"]["kept"][0]["step"], "second", "{shown}");
    let text = String::from_utf8_lossy(&p.run(&["exec", "show", &exec]).stdout).into_owned();
    assert!(text.contains("worktrees kept for inspection"), "{text}");
    // The human decides: retry. The step restarts from the merged results (A) and wins.
    let (c, v, err) = p.json(&[
        "exec",
        "decide",
        &exec,
        "retry",
        "--guidance",
        "edit on top of first",
    ]);
    assert_eq!(c, 0, "{v} {err}");
    assert_eq!(v["stage"], "completed", "{v}");
    assert_eq!(
        p.show(&format!("orca/{exec}:shared.txt")),
        "B\nline2\nline3\n"
    );
    let log = git(
        p.dir.path(),
        &["log", "--format=%s", &format!("orca/{exec}")],
    );
    assert!(log.contains("orca: merge step first"), "{log}");
    assert!(log.contains("orca: merge step second"), "{log}");
    assert_eq!(before, p.user_state());
    let wt = p.worktrees();
    println!("worktrees after the retry completed: {wt}");
    assert_eq!(wt, 1);
}

#[test]
fn kill_9_mid_run_then_resume_recreates_worktrees_and_leaks_none() {
    let p = Project::new(true);
    let started = p.mark("started");
    let plan = p.plan(&[
        ("quick", "echo q > quick.txt", &[], Some("worktree")),
        (
            "slow",
            &format!(
                "echo x >> '{}'; echo partial > slow.txt; sleep 60; echo s > slow.txt",
                started.display()
            ),
            &[],
            Some("worktree"),
        ),
    ]);
    // A first run that takes a while on the second attempt would be slow; the resumed attempt
    // must not sleep: it sees the marker's two lines.
    let plan_text = std::fs::read_to_string(&plan).unwrap().replace(
        "sleep 60",
        &format!(
            "if [ $(wc -l < '{}') -lt 2 ]; then sleep 60; fi",
            started.display()
        ),
    );
    std::fs::write(&plan, plan_text).unwrap();
    let mut child = p.command(&["run", &plan, "--yes"]).spawn().unwrap();
    let start = Instant::now();
    while !started.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the slow step never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let `quick` merge too, then kill -9 the runner mid-run.
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    let _ = child.wait();
    let during = p.worktrees();
    println!("worktrees after kill -9: {during}");
    assert!(during >= 2, "the slow step's worktree exists: {during}");
    let (c, list, _) = p.json(&["exec", "list"]);
    assert_eq!(c, 0);
    let exec = list[0]["execution_id"].as_str().unwrap().to_owned();
    let (c, v, err) = p.json(&["exec", "resume", &exec]);
    assert_eq!(c, 0, "{v} {err}");
    assert_eq!(v["stage"], "completed", "{v}");
    let branch = format!("orca/{exec}");
    assert_eq!(p.show(&format!("{branch}:slow.txt")), "s\n");
    assert_eq!(p.show(&format!("{branch}:quick.txt")), "q\n");
    let (wt, sb) = (p.worktrees(), p.step_branches());
    let dirs = std::fs::read_dir(p.path(".git/orca-worktrees"))
        .map(|d| d.count())
        .unwrap_or(0);
    let refs = p.orca_refs();
    println!(
        "after resume: worktrees {wt}, step branches {sb}, orca worktree dirs {dirs}, orca refs {refs}"
    );
    assert_eq!((wt, sb, dirs, refs), (1, 0, 0, 0));
    assert_eq!(
        std::fs::read_to_string(&started).unwrap().lines().count(),
        2
    );
}

#[test]
fn apply_fast_forwards_a_clean_checkout() {
    let p = Project::new(true);
    let plan = p.plan(&[("edit", "echo new > new.txt", &[], Some("worktree"))]);
    let (c, v, err) = p.json(&["run", &plan, "--yes", "--apply"]);
    assert_eq!(c, 0, "{v} {err}");
    let exec = v["execution_id"].as_str().unwrap();
    assert_eq!(
        git(p.dir.path(), &["rev-parse", "HEAD"]),
        git(p.dir.path(), &["rev-parse", &format!("orca/{exec}")])
    );
    assert_eq!(std::fs::read_to_string(p.path("new.txt")).unwrap(), "new\n");
    assert_eq!(
        git(p.dir.path(), &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/main"
    );

    // A dirty tree is never touched: --apply refuses and says so.
    std::fs::write(p.path("shared.txt"), "dirty\n").unwrap();
    let before = p.user_state();
    let plan = p.plan(&[("more", "echo more > more.txt", &[], Some("worktree"))]);
    let (c, v, err) = p.json(&["run", &plan, "--yes", "--apply"]);
    assert_eq!(c, 0, "{v} {err}");
    assert!(err.contains("not applied"), "{err}");
    assert_eq!(before, p.user_state());
}

#[test]
fn outside_a_git_repository_isolated_steps_run_in_place_with_a_clear_message() {
    let p = Project::new(false);
    let plan = p.plan(&[("edit", "echo here > here.txt", &[], Some("worktree"))]);
    let (c, v, err) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 0, "{v} {err}");
    assert!(err.contains("is not in a git repository"), "{err}");
    assert!(err.contains("run in place"), "{err}");
    assert_eq!(
        std::fs::read_to_string(p.path("here.txt")).unwrap(),
        "here\n"
    );
}

#[test]
fn a_model_agents_file_tools_act_in_its_worktree_never_in_the_users_tree() {
    let p = Project::new(true);
    let script = json!({ "turns": [
        { "tool_calls": [{ "name": "write_file",
            "arguments": { "path": "model.txt", "content": "from the model\n" } }] },
        { "tool_calls": [{ "name": "write_file",
            "arguments": { "path": "shared.txt", "content": "rewritten\n" } }] },
        { "tool_calls": [{ "name": "submit_result",
            "arguments": { "status": "success", "summary": "wrote" } }] }
    ]});
    std::fs::write(p.mark("script.json"), script.to_string()).unwrap();
    std::fs::write(
        p.path(".orca/config.toml"),
        "[agents.writer]\nbackend = \"scripted\"\nscript = \"marks/script.json\"\ntools = [\"write_file\"]\ndescription = \"writes files\"\n",
    )
    .unwrap();
    let before = p.user_state();
    let plan = p.plan_with("writer", &[("write", "", &[], Some("worktree"))]);
    let (c, v, err) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 0, "{v} {err}");
    let exec = v["execution_id"].as_str().unwrap();
    assert_eq!(
        p.show(&format!("orca/{exec}:model.txt")),
        "from the model\n"
    );
    assert_eq!(p.show(&format!("orca/{exec}:shared.txt")), "rewritten\n");
    let leaked = usize::from(p.path("model.txt").exists()) + usize::from(before != p.user_state());
    println!("writes that reached the user's tree: {leaked}");
    assert_eq!(leaked, 0);
}

#[test]
fn the_example_plan_runs_in_worktrees_by_the_plans_default() {
    let p = Project::new(true);
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/parallel-worktrees.json");
    let example = example.display().to_string();
    let out = p.run(&["plan", "validate", &example]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let before = p.user_state();
    let (c, v, err) = p.json(&["run", &example, "--yes"]);
    assert_eq!(c, 0, "{v} {err}");
    let exec = v["execution_id"].as_str().unwrap();
    assert!(
        p.show(&format!("orca/{exec}:src/greet.rs"))
            .contains("hello")
    );
    assert!(
        p.show(&format!("orca/{exec}:docs/greet.md"))
            .contains("greet")
    );
    assert_eq!(
        before,
        p.user_state(),
        "the example ran in worktrees, not in place"
    );
    let merges = git(
        p.dir.path(),
        &["log", "--merges", "--format=%s", &format!("orca/{exec}")],
    );
    println!("merges on the run's branch: {}", merges.lines().count());
    // `code` and `docs`; `check` changed nothing, so there is nothing of it to merge.
    assert_eq!(merges.lines().count(), 2);
}

#[test]
fn the_configs_default_isolates_writing_steps_only() {
    let p = Project::new(true);
    std::fs::write(p.path(".orca/config.toml"), "isolation = \"worktree\"\n").unwrap();
    let path = p.plan(&[
        ("writer", "echo w > w.txt", &[], None),
        ("reader", "echo r > r.txt", &["writer"], None),
    ]);
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    doc["steps"][0]["writes"] = json!(["w.txt"]);
    std::fs::write(&path, doc.to_string()).unwrap();
    let (c, v, err) = p.json(&["run", &path, "--yes"]);
    assert_eq!(c, 0, "{v} {err}");
    let exec = v["execution_id"].as_str().unwrap();
    assert_eq!(p.show(&format!("orca/{exec}:w.txt")), "w\n");
    assert!(
        !p.path("w.txt").exists(),
        "the writing step ran in a worktree"
    );
    assert!(
        p.path("r.txt").exists(),
        "a step declaring no writes runs in place"
    );
}
