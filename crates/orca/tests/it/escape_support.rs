//! What the tests of routes around the sandbox share (`git_plants`, `step_fds_and_keys`,
//! `step_processes`): a project (a git repository when asked) next to a directory steps cannot
//! write, orca run isolated with its own home, plans of shell steps in place or in worktrees,
//! and readers of what landed where.

#![allow(dead_code, reason = "each test module uses a part of this one")]
#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::common;

/// Where a step runs: in the project, or in a worktree of its own.
pub(crate) const PLACES: [Option<&str>; 2] = [None, Some("worktree")];

/// The name of a place, for what the tests print.
pub(crate) fn place(isolation: Option<&str>) -> &'static str {
    if isolation.is_some() {
        "worktree"
    } else {
        "in place"
    }
}

/// A step of a plan: a shell step running `command`, or (`via_model`) a coder whose scripted
/// model runs `command` with the `run_command` tool, then submits.
pub(crate) struct Step<'a> {
    pub(crate) id: &'a str,
    pub(crate) command: String,
    pub(crate) after: &'a [&'a str],
    pub(crate) isolation: Option<&'a str>,
    pub(crate) locks: &'a [&'a str],
    pub(crate) timeout_secs: Option<u64>,
    pub(crate) via_model: bool,
}

impl<'a> Step<'a> {
    pub(crate) fn new(id: &'a str, command: String, isolation: Option<&'a str>) -> Self {
        Self {
            id,
            command,
            after: &[],
            isolation,
            locks: &[],
            timeout_secs: None,
            via_model: false,
        }
    }

    /// The same step, its command run by a scripted model's `run_command`.
    pub(crate) fn via_model(self) -> Self {
        Self {
            via_model: true,
            ..self
        }
    }
}

/// A project, a directory beside it that steps cannot write (`outside`), and the user's home
/// and config directories (temporary, never the real ones).
pub(crate) struct Site {
    _tmp: TempDir,
    pub(crate) root: PathBuf,
    pub(crate) outside: PathBuf,
    pub(crate) home: PathBuf,
    config_home: PathBuf,
}

pub(crate) fn git(dir: &Path, home: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("HOME", home)
        .env("GIT_AUTHOR_NAME", "user")
        .env("GIT_AUTHOR_EMAIL", "user@example.com")
        .env("GIT_COMMITTER_NAME", "user")
        .env("GIT_COMMITTER_EMAIL", "user@example.com")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("XDG_CONFIG_HOME")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

impl Site {
    /// A project (a git repository with one commit if `with_git`; `.orca/` and `marks/`
    /// ignored), initialised.
    pub(crate) fn new(with_git: bool) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let site = Self {
            root: base.join("project"),
            outside: base.join("outside"),
            home: base.join("home"),
            config_home: base.join("config"),
            _tmp: tmp,
        };
        for d in [&site.root, &site.outside, &site.home, &site.config_home] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::create_dir_all(site.root.join("marks")).unwrap();
        std::fs::write(site.root.join("shared.txt"), "one\ntwo\n").unwrap();
        if with_git {
            for args in [
                &["init", "--quiet", "--initial-branch=main"][..],
                &["config", "commit.gpgsign", "false"],
            ] {
                assert!(git(&site.root, &site.home, args).status.success());
            }
            std::fs::write(site.root.join(".gitignore"), ".orca/\nmarks/\n").unwrap();
            assert!(
                git(&site.root, &site.home, &["add", "--all"])
                    .status
                    .success()
            );
            let out = git(&site.root, &site.home, &["commit", "--quiet", "-m", "base"]);
            assert!(out.status.success(), "{out:?}");
        }
        let out = site.orca(&[], &["init"]);
        assert!(out.status.success(), "{out:?}");
        site
    }

    /// `git ARGS…` in the project, as the user types it (their home, their config).
    pub(crate) fn user_git(&self, args: &[&str]) -> Output {
        git(&self.root, &self.home, args)
    }

    pub(crate) fn command(&self, env: &[(&str, &str)], args: &[&str]) -> Command {
        let mut cmd = common::isolated(&self.root, &self.config_home);
        cmd.env("HOME", &self.home)
            .envs(env.iter().copied())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    pub(crate) fn orca(&self, env: &[(&str, &str)], args: &[&str]) -> Output {
        self.command(env, args).output().unwrap()
    }

    pub(crate) fn spawn(&self, env: &[(&str, &str)], args: &[&str]) -> Child {
        self.command(env, args).spawn().unwrap()
    }

    /// `orca --json ARGS…`: exit code and the last JSON value printed.
    pub(crate) fn json(&self, env: &[(&str, &str)], args: &[&str]) -> (i32, Value) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.orca(env, &all);
        super::common::last_json(&out, args)
    }

    /// Writes a plan document of `steps` outside the project; its path. A step `via_model`
    /// gets an agent of its own (`coder-<plan>-<id>`), added to `.orca/config.toml`: a
    /// scripted model whose first turn runs the command with `run_command` and whose second
    /// submits.
    pub(crate) fn plan(&self, name: &str, steps: &[Step<'_>]) -> String {
        let mut agents = String::new();
        for s in steps.iter().filter(|s| s.via_model) {
            let script = json!({ "turns": [
                { "tool_calls": [{ "name": "run_command",
                    "arguments": { "command": s.command, "timeout_secs": s.timeout_secs.unwrap_or(120) } }] },
                { "tool_calls": [{ "name": "submit_result",
                    "arguments": { "status": "success", "summary": "ran the command" } }] }
            ]});
            let file = format!("marks/{name}-{}.script.json", s.id);
            std::fs::write(self.root.join(&file), script.to_string()).unwrap();
            agents.push_str(&format!(
                "\n[agents.coder-{name}-{id}]\nbackend = \"scripted\"\nscript = \"{file}\"\ntools = [\"run_command\"]\ndescription = \"runs what its model says\"\n",
                id = s.id
            ));
        }
        if !agents.is_empty() {
            let config = self.root.join(".orca/config.toml");
            let mut text = std::fs::read_to_string(&config).unwrap_or_default();
            text.push_str(&agents);
            std::fs::write(config, text).unwrap();
        }
        let steps: Vec<Value> = steps
            .iter()
            .map(|s| {
                let mut v = if s.via_model {
                    json!({ "id": s.id, "agent": format!("coder-{name}-{}", s.id),
                        "description": format!("the {} step", s.id),
                        "depends_on": s.after, "locks": s.locks })
                } else {
                    json!({ "id": s.id, "agent": "shell",
                        "description": format!("the {} step", s.id), "command": s.command,
                        "depends_on": s.after, "locks": s.locks })
                };
                if let Some(iso) = s.isolation {
                    v["isolation"] = json!(iso);
                }
                if let Some(t) = s.timeout_secs {
                    v["timeout_secs"] = json!(t);
                }
                v
            })
            .collect();
        let doc = json!({ "goal": "attack around the sandbox", "summary": "hostile steps",
            "assumptions": ["a POSIX shell"], "risks": ["the steps are hostile"],
            "verification": ["nothing gets through"], "steps": steps });
        let path = self.outside.join(format!("{name}.json"));
        std::fs::write(&path, doc.to_string()).unwrap();
        path.display().to_string()
    }

    /// A marker file's path (in `marks/`, which git ignores: steps write there by absolute
    /// path from their worktrees).
    pub(crate) fn mark(&self, name: &str) -> PathBuf {
        self.root.join("marks").join(name)
    }

    pub(crate) fn read_mark(&self, name: &str) -> String {
        std::fs::read_to_string(self.mark(name)).unwrap_or_default()
    }

    /// Waits until the marker `name` holds `needle`.
    pub(crate) fn wait_mark(&self, name: &str, needle: &str) {
        let start = Instant::now();
        while !self.read_mark(name).contains(needle) {
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "{name} never held {needle:?}: {:?}",
                self.read_mark(name)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every file under `.orca/`, with its bytes.
    pub(crate) fn records(&self) -> Vec<(PathBuf, Vec<u8>)> {
        files(&self.root.join(".orca"))
    }

    /// The id of the only execution.
    pub(crate) fn only_exec(&self) -> String {
        let (c, v) = self.json(&[], &["exec", "list"]);
        assert_eq!(c, 0, "{v}");
        v[0]["execution_id"].as_str().unwrap().to_owned()
    }
}

/// Every file under `dir` (recursively), with its bytes.
pub(crate) fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                out.push((e.path(), std::fs::read(e.path()).unwrap_or_default()));
            }
        }
    }
    out
}

/// How many times `needle` occurs in `haystack`.
pub(crate) fn occurrences(haystack: &[u8], needle: &[u8]) -> usize {
    if needle.is_empty() || haystack.len() < needle.len() {
        return 0;
    }
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// Standard base64 (with padding), as `base64` prints it for a short input.
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Whether the project's runs gave their steps a PID namespace (the `sandbox` audit entry).
pub(crate) fn pid_namespaces(root: &Path) -> bool {
    crate::procs::pid_namespaces(root)
}

/// Whether a test may accept a machine without the kernel features it checks.
pub(crate) fn allow_no_sandbox() -> bool {
    std::env::var_os("ORCA_ALLOW_NO_SANDBOX").is_some()
}

#[test]
fn base64_matches_the_tool() {
    assert_eq!(base64(b"sk-1\n"), "c2stMQo=");
    assert_eq!(base64(b"ab"), "YWI=");
    assert_eq!(base64(b"abc"), "YWJj");
}
