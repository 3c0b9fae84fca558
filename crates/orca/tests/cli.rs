//! The operator's CLI as a person and a script see it (issue 15): short unique ids, honest
//! progress and summaries, output discipline, the JSON contract and the commands added for
//! daily use. Every test drives the real binary in temp dirs (`common::isolated`).

#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use tempfile::TempDir;

/// A temporary project with `.orca/` initialised; the user's config home is a temp dir too.
struct Project {
    dir: TempDir,
    config: TempDir,
}

impl Project {
    fn new() -> Self {
        let p = Self {
            dir: tempfile::tempdir().unwrap(),
            config: tempfile::tempdir().unwrap(),
        };
        let out = p.run(&["init"]);
        assert_eq!(code(&out), 0, "init: {}", stderr(&out));
        p
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn run(&self, args: &[&str]) -> Output {
        common::orca(self.root(), self.config.path(), args)
    }

    fn run_env(&self, env: &[(&str, &str)], args: &[&str]) -> Output {
        let mut cmd = common::isolated(self.root(), self.config.path());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.args(args);
        assert_cmd::Command::from_std(cmd)
            .write_stdin(Vec::<u8>::new())
            .timeout(std::time::Duration::from_secs(120))
            .output()
            .unwrap()
    }

    /// `orca --json ARGS…`: the exit code and the JSON value on stdout.
    fn json(&self, args: &[&str]) -> (i32, Value) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        let value: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout of {args:?} is not one JSON value ({e}): {}\nstderr: {}",
                stdout(&out),
                stderr(&out)
            )
        });
        (code(&out), value)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.root().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Creates a proposal from a plan document; its full id.
    fn create(&self, name: &str, plan: &str) -> String {
        let file = self.write(name, plan);
        let (c, v) = self.json(&["plan", "create", "--file", file.to_str().unwrap()]);
        assert_eq!(c, 0, "plan create: {v}");
        v["plan_id"].as_str().unwrap().to_owned()
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A plan document of shell steps `(id, command, depends_on)`.
fn plan_doc(goal: &str, steps: &[(&str, &str, &[&str])]) -> String {
    let steps: Vec<Value> = steps
        .iter()
        .map(|(id, command, after)| {
            serde_json::json!({
                "id": id, "agent": "shell", "description": format!("the {id} step"),
                "command": command, "depends_on": after,
            })
        })
        .collect();
    serde_json::json!({
        "goal": goal,
        "summary": "a CLI test plan",
        "assumptions": ["a POSIX shell"],
        "risks": ["none"],
        "verification": ["the exit code"],
        "steps": steps,
    })
    .to_string()
}

fn one_step(goal: &str) -> String {
    plan_doc(goal, &[("only", "echo ok", &[])])
}

/// Every `plan_…` / `exec_…` token in `text`.
fn id_tokens(text: &str, prefix: &str) -> Vec<String> {
    text.match_indices(prefix)
        .map(|(i, _)| {
            text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect::<String>()
        })
        .filter(|t| t.len() > prefix.len())
        .collect()
}

// Defect 3: ids created close together share their first (timestamp) digits. Every id a table
// shows is the shortest unique prefix (≥ 8 hex digits) and names exactly one plan; an
// ambiguous prefix exits 2 listing the candidates.
#[test]
fn short_ids_are_unique_and_an_ambiguous_prefix_lists_the_candidates() {
    let p = Project::new();
    let ids: Vec<String> = (0..4)
        .map(|i| p.create(&format!("p{i}.json"), &one_step(&format!("plan {i}"))))
        .collect();
    let out = p.run(&["plan", "list"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let shown = id_tokens(&stdout(&out), "plan_");
    assert_eq!(shown.len(), ids.len(), "{}", stdout(&out));
    let mut not_unique = 0;
    for short in &shown {
        assert!(short.len() >= "plan_".len() + 8, "{short}");
        assert!(short.len() < ids[0].len(), "a short id, not the full one: {short}");
        if ids.iter().filter(|id| id.starts_with(short.as_str())).count() != 1 {
            not_unique += 1;
        }
    }
    println!("short ids shown: {shown:?}; not unique: {not_unique}");
    assert_eq!(not_unique, 0);

    // Created within a second of each other: the first 8 hex digits (a timestamp) are shared.
    let common_prefix = &ids[0][.."plan_".len() + 8];
    if ids.iter().all(|id| id.starts_with(common_prefix)) {
        let out = p.run(&["plan", "show", common_prefix]);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("ambiguous"), "{err}");
        let listed = id_tokens(&err, "plan_")
            .into_iter()
            .filter(|t| t.len() > common_prefix.len())
            .count();
        assert_eq!(listed, ids.len(), "every candidate listed: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }

    // Messages use the short id too, and it resolves.
    let out = p.run(&["plan", "approve", &shown[0]]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let said = stdout(&out);
    assert!(ids.iter().all(|id| !said.contains(id.as_str())), "no full id in a message: {said}");
    assert!(id_tokens(&said, "plan_").iter().all(|t| t.len() < ids[0].len()));
}
