//! A temporary project for the CLI tests (`cli.rs`, `commands.rs`): `.orca/` initialised, the
//! user's config home a temp dir, every command run isolated (`super::isolated`).

#![allow(dead_code, reason = "each test binary uses a part of this module")]
#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use tempfile::TempDir;

/// A temporary project with `.orca/` initialised; the user's config home is a temp dir too.
pub(crate) struct Project {
    pub(crate) dir: TempDir,
    pub(crate) config: TempDir,
}

impl Project {
    pub(crate) fn new() -> Self {
        let p = Self {
            dir: tempfile::tempdir().unwrap(),
            config: tempfile::tempdir().unwrap(),
        };
        let out = p.run(&["init"]);
        assert_eq!(code(&out), 0, "init: {}", stderr(&out));
        p
    }

    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        super::orca(self.root(), self.config.path(), args)
    }

    pub(crate) fn run_env(&self, env: &[(&str, &str)], args: &[&str]) -> Output {
        let mut cmd = super::isolated(self.root(), self.config.path());
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
    pub(crate) fn json(&self, args: &[&str]) -> (i32, Value) {
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

    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.root().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Creates a proposal from a plan document; its full id.
    pub(crate) fn create(&self, name: &str, plan: &str) -> String {
        let file = self.write(name, plan);
        let (c, v) = self.json(&["plan", "create", "--file", file.to_str().unwrap()]);
        assert_eq!(c, 0, "plan create: {v}");
        v["plan_id"].as_str().unwrap().to_owned()
    }
}

pub(crate) fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A plan document of shell steps `(id, command, depends_on)`.
pub(crate) fn plan_doc(goal: &str, steps: &[(&str, &str, &[&str])]) -> String {
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

pub(crate) fn one_step(goal: &str) -> String {
    plan_doc(goal, &[("only", "echo ok", &[])])
}
