//! End-to-end tests of the real `orca` binary, each in its own temporary project.
//!
//! Every step is a short shell command, so no model or network is needed. The `--json`
//! contracts are snapshot-tested with ids, times and digests redacted.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value;
use tempfile::TempDir;

use crate::procs::step_processes;

/// A temporary project with `.orca/` initialised.
struct Project {
    dir: TempDir,
    /// The user's config directory (the signing key), outside the project: tests never touch
    /// the real home.
    config: TempDir,
}

impl Project {
    fn new() -> Self {
        let project = Self {
            dir: tempfile::tempdir().unwrap(),
            config: tempfile::tempdir().unwrap(),
        };
        let out = project.run(&["init"]);
        assert_eq!(code(&out), 0, "init: {}", stderr(&out));
        project
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root().join(name)
    }

    /// `orca --root ROOT …`, with no colours, no terminal and no model keys.
    fn cmd(&self) -> Command {
        let mut cmd = Command::cargo_bin("orca").unwrap();
        cmd.arg("--root")
            .arg(self.root())
            .current_dir(self.root())
            .env("NO_COLOR", "1")
            .env("XDG_CONFIG_HOME", self.config.path())
            .env_remove("ORCA_SIGNING_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ORCA_LOG")
            .write_stdin(Vec::<u8>::new());
        cmd
    }

    /// The same, as a child process for tests that act while it runs.
    fn spawn(&self, args: &[&str]) -> Child {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("orca"))
            .arg("--root")
            .arg(self.root())
            .args(args)
            .current_dir(self.root())
            .env("NO_COLOR", "1")
            .env("XDG_CONFIG_HOME", self.config.path())
            .env_remove("ORCA_SIGNING_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ORCA_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    /// Runs `orca --json …` and parses the last JSON value on stdout.
    fn json(&self, args: &[&str]) -> (i32, Value) {
        let out = self.cmd().arg("--json").args(args).output().unwrap();
        let value = last_json(&stdout(&out))
            .unwrap_or_else(|| panic!("no JSON on stdout of {args:?}; stderr: {}", stderr(&out)));
        (code(&out), value)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// Creates a proposal from a plan document and returns its id.
    fn create(&self, name: &str, plan: &str) -> String {
        let file = self.write(name, plan);
        let (c, v) = self.json(&["plan", "create", "--file", file.to_str().unwrap()]);
        assert_eq!(c, 0, "plan create: {v}");
        v["plan_id"].as_str().unwrap().to_owned()
    }

    /// The only execution's id.
    fn only_exec(&self) -> String {
        let (c, v) = self.json(&["exec", "list"]);
        assert_eq!(c, 0);
        let items = v.as_array().unwrap();
        assert_eq!(items.len(), 1, "{v}");
        items[0]["execution_id"].as_str().unwrap().to_owned()
    }

    /// Every file under `.orca/` with its content.
    fn orca_tree(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let entry = entry.unwrap();
                let path = entry.path();
                if entry.file_type().unwrap().is_dir() {
                    walk(&path, base, out);
                } else {
                    let rel = path.strip_prefix(base).unwrap().to_path_buf();
                    out.insert(rel, std::fs::read(&path).unwrap_or_default());
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(&self.path(".orca"), self.root(), &mut out);
        out
    }

    /// Waits (without a time assertion: a generous bound only guards against a hang) until
    /// the file holds `needle`.
    fn wait_for(&self, name: &str, needle: &str) {
        let start = Instant::now();
        while !self.read(name).contains(needle) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{name} never held {needle:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
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

fn last_json(text: &str) -> Option<Value> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .map_while(Result::ok)
        .last()
}

/// Replaces ids, times and digests so snapshots are stable.
fn redact(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(redact_text(s)),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if k.ends_with("_ms") && v.is_number() {
                        Value::String("[ms]".to_owned())
                    } else {
                        redact(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn redact_text(s: &str) -> String {
    if is_timestamp(s) {
        return "[time]".to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while !rest.is_empty() {
        let found = ["plan_", "exec_", "sha256:"]
            .iter()
            .filter_map(|p| rest.find(p).map(|i| (i, *p)))
            .min();
        let Some((i, prefix)) = found else {
            out.push_str(rest);
            break;
        };
        out.push_str(&rest[..i]);
        let after = &rest[i + prefix.len()..];
        let (len, label) = match prefix {
            "sha256:" => (64, "[digest]"),
            "plan_" => (36, "[plan_id]"),
            _ => (36, "[exec_id]"),
        };
        let body: String = after
            .chars()
            .take_while(|c| c.is_ascii_hexdigit() || *c == '-')
            .collect();
        // Full ids and short ids (at least 8 hex digits) alike.
        let id_like = prefix != "sha256:" && body.len() >= 8 && body.len() <= len;
        if body.len() == len || id_like {
            out.push_str(label);
            rest = &after[body.len()..];
        } else {
            out.push_str(prefix);
            rest = after;
        }
    }
    out
}

fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && s.ends_with('Z')
        && b[..4].iter().all(u8::is_ascii_digit)
}

/// A valid plan document with the given steps (a JSON array).
fn plan_doc(goal: &str, steps: &str) -> String {
    format!(
        r#"{{
  "goal": "{goal}",
  "summary": "an end-to-end test plan",
  "assumptions": ["a POSIX shell"],
  "risks": ["none: it writes only in the project"],
  "verification": ["effects.txt records every step"],
  "steps": {steps}
}}"#
    )
}

/// A shell step.
fn step(id: &str, command: &str, after: &[&str]) -> String {
    serde_json::json!({
        "id": id,
        "agent": "shell",
        "description": format!("the {id} step"),
        "command": command,
        "depends_on": after,
    })
    .to_string()
}

fn steps(list: &[String]) -> String {
    format!("[{}]", list.join(",\n"))
}

/// A diamond of four short steps, each appending its name to `effects.txt`.
fn diamond() -> String {
    plan_doc(
        "a diamond of four steps",
        &steps(&[
            step("a", "sleep 0.1; echo a >> effects.txt; echo did a", &[]),
            step("b", "sleep 0.1; echo b >> effects.txt; echo did b", &["a"]),
            step("c", "sleep 0.1; echo c >> effects.txt; echo did c", &["a"]),
            step("d", "echo d >> effects.txt; echo did d", &["b", "c"]),
        ]),
    )
}

fn kill_process(pid: i32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

// 1. The whole happy path, with every `--json` contract.
#[test]
fn init_create_approve_run_list_show_verify() {
    let p = Project::new();
    // init is idempotent and never overwrites an edited config.
    let config = p.path(".orca/config.toml");
    let edited = format!("{}\n# my edit\n", std::fs::read_to_string(&config).unwrap());
    std::fs::write(&config, &edited).unwrap();
    let (c, v) = p.json(&["init"]);
    assert_eq!(c, 0);
    assert_eq!(v["created_config"], Value::Bool(false));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), edited);

    let file = p.write("diamond.json", &diamond());
    let (c, created) = p.json(&["plan", "create", "--file", file.to_str().unwrap()]);
    assert_eq!(c, 0);
    insta::assert_json_snapshot!("plan_create", redact(&created));
    let plan_id = created["plan_id"].as_str().unwrap().to_owned();

    let (c, list) = p.json(&["plan", "list"]);
    assert_eq!(c, 0);
    insta::assert_json_snapshot!("plan_list", redact(&list));

    // A unique prefix is enough, like git.
    let prefix = &plan_id[..13];
    let out = p.run(&["plan", "show", prefix, "--graph"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    insta::assert_snapshot!("plan_show_graph", redact_text(&stdout(&out)));

    let (c, approved) = p.json(&["plan", "approve", prefix, "--note", "looks right"]);
    assert_eq!(c, 0);
    insta::assert_json_snapshot!("plan_approve", redact(&approved));

    let (c, ran) = p.json(&["run", &plan_id]);
    assert_eq!(c, 0, "{ran}");
    insta::assert_json_snapshot!("run_completed", redact(&ran));
    let mut effects: Vec<String> = p.read("effects.txt").lines().map(str::to_owned).collect();
    assert_eq!(effects.first().map(String::as_str), Some("a"));
    assert_eq!(effects.last().map(String::as_str), Some("d"));
    effects.sort();
    assert_eq!(effects, ["a", "b", "c", "d"], "each step ran exactly once");

    let (c, execs) = p.json(&["exec", "list"]);
    assert_eq!(c, 0);
    insta::assert_json_snapshot!("exec_list", redact(&execs));
    let (c, of_plan) = p.json(&["exec", "list", "--plan", prefix]);
    assert_eq!(c, 0);
    assert_eq!(of_plan, execs);
    let exec_id = execs[0]["execution_id"].as_str().unwrap().to_owned();
    assert_eq!(exec_id, ran["execution_id"].as_str().unwrap());

    let (c, mut shown) = p.json(&["exec", "show", &exec_id[..14]]);
    assert_eq!(c, 0);
    assert_eq!(shown["stage"], "completed");
    // Whether the diamond's middle steps overlapped in time is the scheduler's, not the
    // contract's: `shared` is left out of the snapshot (`diffs` tests it).
    for change in shown["changes"].as_array_mut().into_iter().flatten() {
        if let Some(c) = change.as_object_mut() {
            c.remove("shared");
        }
    }
    insta::assert_json_snapshot!("exec_show", redact(&shown));

    let out = p.run(&["audit", "verify"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    insta::assert_snapshot!("audit_verify", redact_text(&stdout(&out)));
    let out = p.run(&["audit", "verify", &exec_id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

// 2. One changed byte in an execution's audit log: exit 5, naming the entry.
#[test]
fn tampered_audit_log_exits_5_naming_the_entry() {
    let p = Project::new();
    let file = p.write("diamond.json", &diamond());
    let (c, _) = p.json(&["run", file.to_str().unwrap(), "--yes"]);
    assert_eq!(c, 0);
    let exec_id = p.only_exec();
    let log = p
        .orca_tree()
        .into_keys()
        .find(|k| {
            k.to_string_lossy()
                .ends_with(&format!("{exec_id}.audit.jsonl"))
        })
        .expect("the execution's audit log");
    let path = p.root().join(&log);
    let text = std::fs::read_to_string(&path).unwrap();
    // Change one byte of the first attempt's start (entry 3, after the creation, the sandbox
    // and the start of the run): `"shell"` → `"Shell"`.
    let target = text
        .lines()
        .position(|l| l.starts_with("{\"seq\":3,"))
        .expect("entry 3");
    let line = text.lines().nth(target).unwrap();
    let at = line.find("\"shell\"").expect("the agent of entry 3") + 1;
    let offset = text
        .lines()
        .take(target)
        .map(|l| l.len() + 1)
        .sum::<usize>()
        + at;
    let mut bytes = text.into_bytes();
    assert_eq!(bytes[offset], b's');
    bytes[offset] = b'S';
    std::fs::write(&path, &bytes).unwrap();

    let out = p.run(&["audit", "verify", &exec_id]);
    assert_eq!(code(&out), 5, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("TAMPERED"), "{text}");
    insta::assert_snapshot!("audit_tampered", redact_text(&text));
    // Every log: still exit 5.
    let out = p.run(&["audit", "verify", "--all"]);
    assert_eq!(code(&out), 5);
    let (c, v) = p.json(&["audit", "verify"]);
    assert_eq!(c, 5);
    insta::assert_json_snapshot!("audit_tampered_json", redact(&v));
}

// 3. A step fails both attempts; with no terminal the run waits (exit 4); a second process
// decides `retry` and the execution completes.
#[test]
fn failing_step_waits_for_a_decision_then_retry_completes() {
    let p = Project::new();
    let file = p.write(
        "flaky.json",
        &plan_doc(
            "a flaky step",
            &steps(&[
                step("first", "echo first >> effects.txt", &[]),
                step(
                    "flaky",
                    "echo \"flaky $ORCA_ATTEMPT\" >> effects.txt; test \"$ORCA_ATTEMPT\" -ge 3",
                    &["first"],
                ),
                step("last", "echo last >> effects.txt", &["flaky"]),
            ]),
        ),
    );
    let (c, waiting) = p.json(&["run", file.to_str().unwrap(), "--yes"]);
    assert_eq!(c, 4, "{waiting}");
    insta::assert_json_snapshot!("run_awaiting_decision", redact(&waiting));
    assert_eq!(p.read("effects.txt"), "first\nflaky 1\nflaky 2\n");
    let exec_id = p.only_exec();

    let (c, shown) = p.json(&["exec", "show", &exec_id]);
    assert_eq!(c, 0);
    assert_eq!(shown["stage"], "running");

    let (c, done) = p.json(&[
        "exec",
        "decide",
        &exec_id[..14],
        "retry",
        "--guidance",
        "the third attempt works",
    ]);
    assert_eq!(c, 0, "{done}");
    assert_eq!(done["stage"], "completed");
    assert_eq!(done["execution_id"], exec_id.as_str());
    assert_eq!(
        p.read("effects.txt"),
        "first\nflaky 1\nflaky 2\nflaky 3\nlast\n",
        "the completed step is not re-run"
    );
    let out = p.run(&["audit", "verify", &exec_id]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}

// 4. `exec cancel` from a second process while `run` drives a long step: ended for good.
// (`exec stop`, which leaves it resumable, is tested in `procs.rs`.)
#[test]
fn exec_cancel_from_another_process_ends_the_run_for_good() {
    let p = Project::new();
    let file = p.write(
        "long.json",
        &plan_doc(
            "a long step",
            &steps(&[
                step("first", "echo first >> effects.txt", &[]),
                step(
                    "long",
                    "sleep 30 & echo started >> effects.txt; wait",
                    &["first"],
                ),
                step("after", "echo after >> effects.txt", &["long"]),
            ]),
        ),
    );
    let run = p.spawn(&["--json", "run", file.to_str().unwrap(), "--yes"]);
    p.wait_for("effects.txt", "started");
    // Found from outside: in its own PID namespace the step's pids are not ours.
    assert!(!step_processes(p.root()).is_empty());
    let exec_id = p.only_exec();

    // Another process cannot drive it at the same time.
    let out = p.run(&["exec", "resume", &exec_id]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim_end().lines().count(),
        1,
        "{}",
        stderr(&out)
    );
    // A watcher follows it from a third process.
    let watch = p.spawn(&["--json", "watch", &exec_id]);

    let (c, stopped) = p.json(&["exec", "cancel", &exec_id, "--reason", "enough"]);
    assert_eq!(c, 0, "{stopped}");
    assert_eq!(stopped["stage"], "stopped");

    // The run notices and ends: exit 3 (it would otherwise sleep 30 s).
    let out = run.wait_with_output().unwrap();
    assert_eq!(code(&out), 3, "{}{}", stdout(&out), stderr(&out));
    let last = last_json(&stdout(&out)).unwrap();
    assert_eq!(last["execution_id"], exec_id.as_str());
    assert_eq!(last["stage"], "stopped");
    assert!(
        step_processes(p.root()).is_empty(),
        "the step's sleep was killed"
    );
    assert!(!p.read("effects.txt").contains("after"));
    let watched = watch.wait_with_output().unwrap();
    assert_eq!(code(&watched), 3, "{}", stderr(&watched));
    let last = last_json(&stdout(&watched)).unwrap();
    assert_eq!(last["execution_id"], exec_id.as_str());
    assert_eq!(last["stage"], "stopped");

    let (c, shown) = p.json(&["exec", "show", &exec_id]);
    assert_eq!(c, 0);
    assert_eq!(shown["stage"], "stopped");
    let out = p.run(&["audit", "verify", &exec_id]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}

// 5. kill -9 during a long step, then `exec resume`: completed, and a step that completed
// before the kill is not re-run.
#[test]
fn kill_9_then_resume_completes_without_rerunning_completed_steps() {
    let p = Project::new();
    let file = p.write(
        "crash.json",
        &plan_doc(
            "survive a crash",
            &steps(&[
                step("first", "echo first >> effects.txt", &[]),
                step(
                    "long",
                    "echo \"long $ORCA_ATTEMPT\" >> effects.txt; \
                     if [ -e go ]; then echo long-done >> effects.txt; \
                     else echo started > long.pid; exec sleep 30; fi",
                    &["first"],
                ),
                step("last", "echo last >> effects.txt", &["long"]),
            ]),
        ),
    );
    let mut run = p.spawn(&["run", file.to_str().unwrap(), "--yes"]);
    p.wait_for("effects.txt", "long 1");
    p.wait_for("long.pid", "\n");
    run.kill().unwrap(); // SIGKILL
    let _ = run.wait();
    // An orphaned step process of the killed run (without a PID namespace) is not ours to
    // keep.
    for orphan in step_processes(p.root()) {
        kill_process(orphan);
    }
    std::fs::write(p.path("go"), "").unwrap();

    let exec_id = p.only_exec();
    let (c, shown) = p.json(&["exec", "show", &exec_id]);
    assert_eq!(c, 0);
    assert_eq!(shown["stage"], "running");

    let (c, resumed) = p.json(&["exec", "resume", &exec_id]);
    assert_eq!(c, 0, "{resumed}");
    assert_eq!(resumed["stage"], "completed");
    let effects = p.read("effects.txt");
    assert_eq!(
        effects.matches("first").count(),
        1,
        "the completed step was not re-run: {effects}"
    );
    assert!(effects.ends_with("long-done\nlast\n"), "{effects}");
    let (_, shown) = p.json(&["exec", "show", &exec_id]);
    assert_eq!(shown["tasks"][0]["step_id"], "first");
    assert_eq!(
        shown["tasks"][0]["attempts"].as_array().map(Vec::len),
        Some(1),
        "the completed task kept its one attempt: {shown}"
    );
    let out = p.run(&["audit", "verify", &exec_id]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}

/// Runs a bad command: exit 2, one line on stderr naming `needle`, nothing under `.orca/`
/// changed.
fn assert_bad_input(p: &Project, args: &[&str], needle: &str) -> String {
    let before = p.orca_tree();
    let out = p.run(args);
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{args:?}: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: one line: {err}"
    );
    assert!(err.contains(needle), "{args:?}: {err} should name {needle}");
    let after = p.orca_tree();
    let changed: Vec<_> = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .chain(before.keys().filter(|k| !after.contains_key(*k)).cloned())
        .collect();
    assert!(changed.is_empty(), "{args:?} changed {changed:?}");
    err
}

// 6. Bad inputs: exit 2, one line, nothing changed.
#[test]
fn bad_inputs_exit_2_with_one_line_and_change_nothing() {
    let p = Project::new();
    // Two plans and an execution to resolve against.
    let file = p.write("diamond.json", &diamond());
    let (c, ran) = p.json(&["run", file.to_str().unwrap(), "--yes"]);
    assert_eq!(c, 0);
    let plan_a = ran["plan_id"].as_str().unwrap().to_owned();
    let plan_b = p.create("again.json", &diamond());
    let exec_id = ran["execution_id"].as_str().unwrap().to_owned();
    // Path-like ids are refused before anything is read or listed (the listing cache is
    // stale here, after `plan create`, and stays untouched).
    let mut lines = vec![
        assert_bad_input(&p, &["plan", "show", "../x"], "../x"),
        assert_bad_input(&p, &["exec", "show", "../x"], "../x"),
        assert_bad_input(&p, &["audit", "verify", "../../etc"], "../../etc"),
        assert_bad_input(&p, &["plan", "approve", "plan_/../x"], "plan_/../x"),
    ];
    // Listing refreshes the derived listing cache (`.orca/cache/`); do it once before
    // hashing, so that only the bad commands are judged.
    assert_eq!(p.json(&["plan", "list"]).0, 0);
    assert_eq!(p.json(&["exec", "list"]).0, 0);

    p.write("malformed.json", "{\"goal\": \"x\",");
    lines.push(assert_bad_input(
        &p,
        &["plan", "create", "--file", "malformed.json"],
        "malformed.json",
    ));
    p.write(
        "cycle.json",
        &plan_doc(
            "a cycle",
            &steps(&[step("x", "true", &["y"]), step("y", "true", &["x"])]),
        ),
    );
    lines.push(assert_bad_input(
        &p,
        &["plan", "create", "--file", "cycle.json"],
        "cycle",
    ));
    lines.push(assert_bad_input(
        &p,
        &["run", "cycle.json", "--yes"],
        "cycle",
    ));
    p.write(
        "unknown-agent.json",
        &plan_doc(
            "an unknown agent",
            &format!(
                "[{}]",
                serde_json::json!({"id": "x", "agent": "nobody", "description": "x", "command": "true", "depends_on": []})
            ),
        ),
    );
    lines.push(assert_bad_input(
        &p,
        &["plan", "create", "--file", "unknown-agent.json"],
        "nobody",
    ));
    lines.push(assert_bad_input(
        &p,
        &["plan", "create", "--file", "missing.json"],
        "missing.json",
    ));
    let unknown = "plan_00000000-0000-7000-8000-000000000000";
    lines.push(assert_bad_input(&p, &["plan", "show", unknown], unknown));
    let unknown = "exec_00000000-0000-7000-8000-000000000000";
    lines.push(assert_bad_input(&p, &["exec", "show", unknown], unknown));
    lines.push(assert_bad_input(&p, &["exec", "resume", unknown], unknown));
    // Two plans share the prefix `plan_`.
    assert_ne!(plan_a, plan_b);
    lines.push(assert_bad_input(
        &p,
        &["plan", "show", "plan_"],
        "ambiguous",
    ));
    lines.push(assert_bad_input(
        &p,
        &["run", "plan_", "--yes"],
        "ambiguous",
    ));
    // Usage errors: exit 2 too (clap adds a hint line after the error).
    let before = p.orca_tree();
    let out = p.run(&["run", &plan_b, "--concurrency", "0"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).starts_with("error: invalid value '0' for '--concurrency"));
    assert_eq!(p.orca_tree(), before);
    // A corrupt execution state file.
    let state = p
        .orca_tree()
        .into_keys()
        .find(|k| k.to_string_lossy().ends_with(&format!("{exec_id}.json")))
        .expect("the execution's state file");
    std::fs::write(p.root().join(&state), "{ not json").unwrap();
    lines.push(assert_bad_input(&p, &["exec", "show", &exec_id], &exec_id));
    // A truncated plan file (a torn write, as if by a crash).
    let plan_file = p.path(&format!(".orca/plans/{plan_b}.json"));
    assert!(plan_file.is_file());
    std::fs::write(&plan_file, "{\n  \"stage\": \"proposal\",\n  \"format_").unwrap();
    lines.push(assert_bad_input(&p, &["plan", "show", &plan_b], &plan_b));
    lines.push(assert_bad_input(&p, &["plan", "approve", &plan_b], &plan_b));
    // No config validation in the agents crate yet: a bad `.orca/config.toml` is not tested.

    let root = p.root().display().to_string();
    insta::assert_snapshot!(
        "bad_inputs",
        redact_text(&lines.join("")).replace(&root, "[root]")
    );
}

// 7. Help and the agents listing.
#[test]
fn help_mentions_exit_codes_and_agents_list_has_shell() {
    let p = Project::new();
    for args in [
        &["--help"][..],
        &["run", "--help"][..],
        &["exec", "resume", "--help"][..],
        &["audit", "verify", "--help"][..],
    ] {
        let out = p.run(args);
        assert_eq!(code(&out), 0);
        let text = stdout(&out);
        assert!(text.contains("Exit codes"), "{args:?}: {text}");
        for needle in [
            "0  success",
            "2  bad input",
            "3  the execution ended",
            "4  waiting",
            "5  audit",
        ] {
            assert!(text.contains(needle), "{args:?} lacks {needle:?}");
        }
    }
    let (c, agents) = p.json(&["agents", "list"]);
    assert_eq!(c, 0);
    let ids: Vec<&str> = agents
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["agent_id"].as_str())
        .collect();
    assert!(ids.contains(&"shell"), "{agents}");
    // With no key and no config: the built-ins on the local Ollama default.
    let table: Vec<String> = agents
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            format!(
                "{} {} {} {}",
                a["agent_id"].as_str().unwrap_or("?"),
                a["role"].as_str().unwrap_or("?"),
                a["backend"].as_str().unwrap_or("?"),
                a["model"].as_str().unwrap_or("-")
            )
        })
        .collect();
    insta::assert_snapshot!("agents_list", table.join("\n"));
}

/// The first `prefix` + uuid id in `text`.
fn find_id(text: &str, prefix: &str) -> Option<String> {
    text.match_indices(prefix).find_map(|(i, _)| {
        let body: String = text[i + prefix.len()..]
            .chars()
            .take_while(|c| c.is_ascii_hexdigit() || *c == '-')
            .collect();
        (body.len() == 36).then(|| format!("{prefix}{body}"))
    })
}

/// An OpenAI-compatible model: the planner (model `planner-model`) builds, fills and submits
/// a draft of two steps, then submits its result; the tester (model `tester-model`) submits a
/// success. It answers from the conversation so far, so it needs no state of its own.
pub(crate) struct FakeModels;

impl wiremock::Respond for FakeModels {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        use serde_json::json;
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let turns = messages.iter().filter(|m| m["role"] == "assistant").count();
        let plan_id = messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .find_map(|m| find_id(m["content"].as_str()?, "plan_"))
            .unwrap_or_default();
        let calls: Vec<(&str, Value)> = if body["model"] == "tester-model" {
            vec![(
                "submit_result",
                json!({"status": "success", "summary": "hello.txt says hello"}),
            )]
        } else {
            match turns {
                0 => vec![(
                    "orca_plan_create_draft",
                    json!({"goal": "greet the project", "summary": "write a file, then check it"}),
                )],
                1 => vec![
                    (
                        "orca_plan_set_assumptions",
                        json!({"plan_id": plan_id, "items": ["a POSIX shell"]}),
                    ),
                    (
                        "orca_plan_set_risks",
                        json!({"plan_id": plan_id, "items": ["none"]}),
                    ),
                    (
                        "orca_plan_set_verification",
                        json!({"plan_id": plan_id, "items": ["the tester reads hello.txt"]}),
                    ),
                    (
                        "orca_plan_add_step",
                        json!({"plan_id": plan_id, "step": {
                        "id": "write", "agent": "shell", "description": "write hello.txt",
                        "command": "echo hello > hello.txt && echo wrote hello.txt", "depends_on": []}}),
                    ),
                    (
                        "orca_plan_add_step",
                        json!({"plan_id": plan_id, "step": {
                        "id": "check", "agent": "tester", "description": "check that hello.txt says hello",
                        "depends_on": ["write"]}}),
                    ),
                    ("orca_plan_submit", json!({"plan_id": plan_id})),
                ],
                _ => vec![(
                    "submit_result",
                    json!({"type": "plan", "plan_id": plan_id, "stage": "proposal", "message": "two steps: write, then check"}),
                )],
            }
        };
        let tool_calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                orca_testkit::fake_model::tool_call(&format!("call_{turns}_{i}"), name, args)
            })
            .collect();
        wiremock::ResponseTemplate::new(200).set_body_json(orca_testkit::fake_model::tool_calls(
            "chatcmpl-test",
            &body["model"],
            tool_calls,
        ))
    }
}

// 8. `ask` against a fake OpenAI-compatible planner (and tester) configured in
// `.orca/config.toml`: the plan is created, approved with --yes and run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_builds_a_plan_with_a_fake_planner_then_runs_it() {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/chat/completions"))
        .respond_with(FakeModels)
        .mount(&server)
        .await;
    let p = Project::new();
    let url = format!("{}/v1", server.uri());
    p.write(
        ".orca/config.toml",
        &format!(
            "[agents.planner]\nbackend = \"ollama\"\nbase_url = \"{url}\"\nmodel = \"planner-model\"\n\n\
             [agents.tester]\nbackend = \"ollama\"\nbase_url = \"{url}\"\nmodel = \"tester-model\"\n"
        ),
    );
    let (c, agents) = p.json(&["agents", "list"]);
    assert_eq!(c, 0);
    assert!(agents.to_string().contains("planner-model"), "{agents}");

    let mut cmd = p.cmd();
    cmd.args([
        "--json",
        "ask",
        "say hello in hello.txt and check it",
        "--yes",
    ]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let ran = last_json(&stdout(&out)).unwrap();
    insta::assert_json_snapshot!("ask_run", redact(&ran));
    assert_eq!(p.read("hello.txt"), "hello\n");

    let (c, plans) = p.json(&["plan", "list"]);
    assert_eq!(c, 0);
    assert_eq!(plans[0]["goal"], "greet the project");
    assert_eq!(plans[0]["stage"], "approved");
    let requests = server.received_requests().await.unwrap_or_default();
    let tester_calls = requests
        .iter()
        .filter(|r| String::from_utf8_lossy(&r.body).contains("tester-model"))
        .count();
    assert_eq!(tester_calls, 1, "the tester step went to the fake model");
    let out = p.run(&["audit", "verify"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    // The planner's conversation is in its plan's log: its tool calls (the plan tools, the
    // first of which created the plan) and its answers.
    let plan_id = plans[0]["plan_id"].as_str().unwrap().to_owned();
    let out = p.run(&["audit", "show", &plan_id]);
    let shown = stdout(&out);
    println!("{shown}");
    let planner_calls = shown.matches("tool.call").count();
    println!("planner tool calls in the plan's log: {planner_calls}");
    assert!(planner_calls >= 2, "{shown}");
    assert!(shown.contains("orca_plan_create"), "{shown}");

    // Without --yes and with no terminal, the proposal waits for approval: exit 4.
    let mut cmd = p.cmd();
    cmd.args(["ask", "the same again"]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 4, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("greet the project"),
        "the plan is shown"
    );
    assert!(
        stderr(&out).contains("orca plan approve"),
        "{}",
        stderr(&out)
    );
    let (_, plans) = p.json(&["plan", "list"]);
    assert_eq!(plans[0]["stage"], "proposal");
}

// 6 (continued). A bad `.orca/config.toml`: exit 2, one line naming the file and field, and
// nothing changed.
#[test]
fn bad_config_exits_2_naming_the_field() {
    let p = Project::new();
    let mut lines = Vec::new();
    p.write(
        ".orca/config.toml",
        "[agents.reviewer]\nbackend = \"gpt\"\n",
    );
    lines.push(assert_bad_input(
        &p,
        &["plan", "list"],
        "agents.reviewer.backend",
    ));
    p.write(
        ".orca/config.toml",
        "[agents.reviewer\nbackend = \"openai\"\n",
    );
    lines.push(assert_bad_input(&p, &["exec", "list"], "config.toml"));
    p.write(
        ".orca/config.toml",
        "[agents.reviewer]\ncolour = \"blue\"\n",
    );
    lines.push(assert_bad_input(&p, &["agents", "list"], "colour"));
    let root = p.root().display().to_string();
    insta::assert_snapshot!("bad_config", lines.join("").replace(&root, "[root]"));
}

// The README's main job: the example DAG of shell steps, from a fresh directory.
#[test]
fn the_example_parallel_dag_runs_and_verifies() {
    let p = Project::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/parallel-dag.json");
    let (c, ran) = p.json(&["run", example.to_str().unwrap(), "--yes"]);
    assert_eq!(c, 0, "{ran}");
    assert_eq!(ran["stage"], "completed");
    let tasks = ran["tasks"].as_array().unwrap();
    assert!(tasks.len() >= 2);
    assert!(tasks.iter().all(|t| t["status"] == "completed"), "{ran}");
    assert_eq!(ran["audit"]["result"], "intact");
    let out = p.run(&["audit", "verify", "--all"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    // Every other example plan document is valid for the built-in agents.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") && path != example {
            let (c, v) = p.json(&["plan", "create", "--file", path.to_str().unwrap()]);
            assert_eq!(c, 0, "{}: {v}", path.display());
        }
    }
}

// The other failure policies: `stop` ends the run failed (exit 3); `skip` skips the failed
// step's dependents and finishes the independent branch (exit 3: the execution failed).
#[test]
fn on_failure_stop_and_skip_end_the_run_without_a_human() {
    let p = Project::new();
    let doc = plan_doc(
        "a failing branch",
        &steps(&[
            step("broken", "echo broken >> effects.txt; exit 7", &[]),
            step(
                "after-broken",
                "echo after-broken >> effects.txt",
                &["broken"],
            ),
            step(
                "independent",
                "sleep 0.1; echo independent >> effects.txt",
                &[],
            ),
        ]),
    );
    let file = p.write("failing.json", &doc);
    let (c, stopped) = p.json(&[
        "run",
        file.to_str().unwrap(),
        "--yes",
        "--on-failure",
        "stop",
        "--max-attempts",
        "1",
    ]);
    assert_eq!(c, 3, "{stopped}");
    // Whether the independent step had finished is a matter of timing: not asserted.
    assert_eq!(stopped["stage"], "failed");
    assert_eq!(
        stopped["execution_id"]
            .as_str()
            .map(|s| s.starts_with("exec_")),
        Some(true)
    );
    assert_eq!(stopped["tasks"][0]["step_id"], "broken");
    assert_eq!(stopped["tasks"][0]["status"], "failed");
    assert_eq!(stopped["tasks"][1]["status"], "pending");
    assert!(!p.read("effects.txt").contains("after-broken"));

    std::fs::remove_file(p.path("effects.txt")).unwrap();
    let (c, skipped) = p.json(&[
        "run",
        file.to_str().unwrap(),
        "--yes",
        "--on-failure",
        "skip",
    ]);
    assert_eq!(c, 3, "the execution failed: {skipped}");
    insta::assert_json_snapshot!("run_on_failure_skip", redact(&skipped));
    let effects = p.read("effects.txt");
    assert_eq!(
        effects.matches("broken\n").count(),
        2,
        "two attempts: {effects}"
    );
    assert!(effects.contains("independent"), "{effects}");
    assert!(!effects.contains("after-broken"), "{effects}");
}

// The human's other decisions on a proposal: reject (it can no longer run) and
// request-changes (back to draft).
#[test]
fn reject_and_request_changes() {
    let p = Project::new();
    let rejected = p.create("one.json", &diamond());
    let (c, v) = p.json(&["plan", "reject", &rejected, "--reason", "not now"]);
    assert_eq!(c, 0);
    assert_eq!(v["stage"], "rejected");
    let before = p.orca_tree();
    let out = p.run(&["run", &rejected, "--yes"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("rejected"), "{}", stderr(&out));
    assert_eq!(
        p.orca_tree().len(),
        before.len(),
        "no execution was created"
    );

    let revised = p.create("two.json", &diamond());
    let (c, v) = p.json(&["plan", "request-changes", &revised, "--feedback", "smaller"]);
    assert_eq!(c, 0);
    assert_eq!(v["stage"], "draft");
    let out = p.run(&["run", &revised, "--yes"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("draft"), "{}", stderr(&out));

    // A proposal with no --yes and no terminal waits for approval: exit 4.
    let waiting = p.create("three.json", &diamond());
    let out = p.run(&["run", &waiting]);
    assert_eq!(code(&out), 4, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("orca plan approve"),
        "{}",
        stderr(&out)
    );

    let (c, plans) = p.json(&["plan", "list"]);
    assert_eq!(c, 0);
    let stages: Vec<&str> = plans
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["stage"].as_str())
        .collect();
    assert_eq!(stages, ["proposal", "draft", "rejected"], "newest first");
}

// No model reachable: an actionable one-line message naming the endpoint.
#[test]
fn ask_with_no_reachable_model_says_what_to_do() {
    let p = Project::new();
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    p.write(
        ".orca/config.toml",
        &format!("[agents.planner]\nbackend = \"ollama\"\nbase_url = \"{url}\"\n"),
    );
    let out = p.run(&["ask", "hello"]);
    let err = stderr(&out);
    // A configuration problem: exit 2, as documented (it was 1, an "internal error").
    assert_eq!(code(&out), 2, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("no model reachable at {url}")),
        "{err}"
    );
    assert!(err.contains(".orca/config.toml"), "{err}");
}

// Ctrl-C (SIGINT) of `run`: it ends the running step, records its attempt interrupted and
// exits 130; the step's process is gone and the execution stays resumable (ADR 0010).
#[test]
fn ctrl_c_stops_the_run_and_its_step() {
    let p = Project::new();
    let file = p.write(
        "long.json",
        &plan_doc(
            "a long step",
            &steps(&[step(
                "long",
                "sleep 30 & echo started >> effects.txt; wait",
                &[],
            )]),
        ),
    );
    let run = p.spawn(&["--json", "run", file.to_str().unwrap(), "--yes"]);
    p.wait_for("effects.txt", "started");
    assert!(!step_processes(p.root()).is_empty());
    let status = std::process::Command::new("kill")
        .args(["-INT", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = run.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}{}", stdout(&out), stderr(&out));
    let last = last_json(&stdout(&out)).unwrap();
    assert_eq!(last["stage"], "running");
    assert_eq!(last["outcome"], "interrupted");
    assert!(
        step_processes(p.root()).is_empty(),
        "the step's sleep was killed"
    );
    let out = p.run(&["audit", "verify"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}

// Without --root, the nearest ancestor holding `.orca/` is the project; ids may be given
// without their `plan_` / `exec_` prefix; `--log-format json` writes JSON log lines.
#[test]
fn root_discovery_bare_prefixes_and_json_logs() {
    let p = Project::new();
    let plan_id = p.create("diamond.json", &diamond());
    let nested = p.path("deep/er");
    std::fs::create_dir_all(&nested).unwrap();
    let orca = || {
        let mut cmd = Command::cargo_bin("orca").unwrap();
        cmd.current_dir(&nested)
            .env("NO_COLOR", "1")
            .env("XDG_CONFIG_HOME", p.config.path())
            .env_remove("ORCA_SIGNING_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ORCA_LOG")
            .write_stdin(Vec::<u8>::new());
        cmd
    };
    let short = &plan_id["plan_".len().."plan_".len() + 13];
    let out = orca()
        .args([
            "-v",
            "--log-format",
            "json",
            "--json",
            "run",
            short,
            "--yes",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let ran = last_json(&stdout(&out)).unwrap();
    assert_eq!(ran["plan_id"], plan_id.as_str());
    assert_eq!(ran["stage"], "completed");
    // The steps ran in the project root, not in the current directory.
    assert_eq!(p.read("effects.txt").lines().count(), 4);
    assert!(!nested.join("effects.txt").exists());
    let logs: Vec<Value> = stderr(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    assert!(
        logs.iter().any(|l| l["level"] == "INFO"),
        "JSON log lines on stderr: {}",
        stderr(&out)
    );
    let exec_id = ran["execution_id"].as_str().unwrap();
    let out = orca()
        .args(["exec", "show", &exec_id["exec_".len().."exec_".len() + 13]])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // People see the short id: the last digits of the full one.
    assert!(stdout(&out).contains(&format!("exec_{}", &exec_id[exec_id.len() - 8..])));
}

// The other ways out of a pending decision: `decide stop` ends the execution stopped (exit 3);
// `decide retry --no-run` only records it, and `exec resume` then continues.
#[test]
fn decide_stop_and_decide_no_run_then_resume() {
    let p = Project::new();
    let doc = plan_doc(
        "a flaky step",
        &steps(&[
            step("first", "echo first >> effects.txt", &[]),
            step(
                "flaky",
                "echo \"flaky $ORCA_ATTEMPT\" >> effects.txt; test \"$ORCA_ATTEMPT\" -ge 3",
                &["first"],
            ),
        ]),
    );
    let file = p.write("flaky.json", &doc);
    let (c, first) = p.json(&["run", file.to_str().unwrap(), "--yes"]);
    assert_eq!(c, 4);
    let stopped_id = first["execution_id"].as_str().unwrap().to_owned();
    let (c, stopped) = p.json(&["exec", "decide", &stopped_id, "stop"]);
    assert_eq!(c, 3, "{stopped}");
    assert_eq!(stopped["stage"], "stopped");
    assert_eq!(stopped["execution_id"], stopped_id.as_str());

    std::fs::remove_file(p.path("effects.txt")).unwrap();
    let (c, second) = p.json(&["run", file.to_str().unwrap(), "--yes"]);
    assert_eq!(c, 4);
    let id = second["execution_id"].as_str().unwrap().to_owned();
    let (c, recorded) = p.json(&["exec", "decide", &id, "retry", "--no-run"]);
    assert_eq!(c, 0);
    assert_eq!(recorded["stage"], "running");
    assert_eq!(
        p.read("effects.txt"),
        "first\nflaky 1\nflaky 2\n",
        "nothing ran"
    );
    let (c, resumed) = p.json(&["exec", "resume", &id]);
    assert_eq!(c, 0, "{resumed}");
    assert_eq!(resumed["stage"], "completed");
    assert_eq!(p.read("effects.txt"), "first\nflaky 1\nflaky 2\nflaky 3\n");
    // Deciding again: there is nothing to decide.
    let out = p.run(&["exec", "decide", &id, "retry"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert_eq!(stderr(&out).trim_end().lines().count(), 1);
    let out = p.run(&["audit", "verify", "--all"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}

/// Whether every `start X` in `log` is followed directly by `end X` (no two steps overlapped).
fn never_overlapped(log: &str) -> bool {
    let lines: Vec<&str> = log.lines().collect();
    lines.len().is_multiple_of(2)
        && lines.chunks(2).all(|pair| {
            pair[0]
                .strip_prefix("start ")
                .is_some_and(|id| pair[1] == format!("end {id}"))
        })
}

// `--concurrency 1` runs one step at a time; steps sharing a lock never overlap, whatever the
// concurrency.
#[test]
fn concurrency_one_and_locks_serialise_steps() {
    let p = Project::new();
    let marked =
        |id: &str| format!("echo 'start {id}' >> log.txt; sleep 0.1; echo 'end {id}' >> log.txt");
    let free = plan_doc(
        "three independent steps",
        &steps(&[
            step("x", &marked("x"), &[]),
            step("y", &marked("y"), &[]),
            step("z", &marked("z"), &[]),
        ]),
    );
    let file = p.write("free.json", &free);
    let (c, _) = p.json(&["run", file.to_str().unwrap(), "--yes", "--concurrency", "1"]);
    assert_eq!(c, 0);
    let log = p.read("log.txt");
    assert_eq!(log.lines().count(), 6, "{log}");
    assert!(never_overlapped(&log), "{log}");

    std::fs::remove_file(p.path("log.txt")).unwrap();
    let locked_step = |id: &str| {
        let mut v: Value = serde_json::from_str(&step(id, &marked(id), &[])).unwrap();
        v["locks"] = serde_json::json!(["shared"]);
        v.to_string()
    };
    let locked = plan_doc(
        "three steps sharing a lock",
        &steps(&[locked_step("x"), locked_step("y"), locked_step("z")]),
    );
    let file = p.write("locked.json", &locked);
    let (c, _) = p.json(&["run", file.to_str().unwrap(), "--yes", "--concurrency", "4"]);
    assert_eq!(c, 0);
    let log = p.read("log.txt");
    assert_eq!(log.lines().count(), 6, "{log}");
    assert!(never_overlapped(&log), "{log}");
}

// A person at a terminal: the two-question approval (a mistyped answer is asked again, then
// approve with a note), then a failing step's decision (retry with guidance) → completed.
#[test]
fn terminal_approval_and_decision() {
    use std::io::{Read as _, Write as _};
    let p = Project::new();
    let file = p.write(
        "flaky.json",
        &plan_doc(
            "a flaky step",
            &steps(&[
                step("first", "echo first >> effects.txt", &[]),
                step(
                    "flaky",
                    "echo \"flaky $ORCA_ATTEMPT\" >> effects.txt; test \"$ORCA_ATTEMPT\" -ge 3",
                    &["first"],
                ),
                step("last", "echo last >> effects.txt", &["flaky"]),
            ]),
        ),
    );
    let (mut controller, terminal) = orca_testkit::pty::openpty();
    let mut child = {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("orca"));
        cmd.arg("--root")
            .arg(p.root())
            .args(["run", file.to_str().unwrap()])
            .current_dir(p.root())
            .env("NO_COLOR", "1")
            .env("XDG_CONFIG_HOME", p.config.path())
            .env_remove("ORCA_SIGNING_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ORCA_LOG")
            .stdin(Stdio::from(terminal.try_clone().unwrap()))
            .stderr(Stdio::from(terminal))
            .stdout(Stdio::piped());
        cmd.spawn().unwrap()
        // The command, and with it our copies of the terminal, is dropped here.
    };
    // The answers wait in the terminal's line buffer; each prompt reads one line.
    controller
        .write_all(b"aprove\napprove\nlooks good\nretry\ntry once more\n")
        .unwrap();
    let screen = orca_testkit::pty::record(&controller);
    // Only a guard against a hang: the run takes well under a second.
    let status = orca_testkit::pty::wait(&mut child, "the interactive run");
    drop(controller);
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let screen = screen.join().unwrap();
    assert_eq!(status.code(), Some(0), "{screen}\n{out}");
    assert!(screen.contains("`aprove` is not an option"), "{screen}");
    assert!(
        screen.contains("A note to record with the approval"),
        "{screen}"
    );
    assert!(screen.contains("Guidance for the next attempt"), "{screen}");
    assert_eq!(
        p.read("effects.txt"),
        "first\nflaky 1\nflaky 2\nflaky 3\nlast\n"
    );
    let (_, plans) = p.json(&["plan", "list"]);
    let plan_id = plans[0]["plan_id"].as_str().unwrap().to_owned();
    let (_, plan) = p.json(&["plan", "show", &plan_id]);
    assert_eq!(plan["stage"], "approved");
    assert!(plan.to_string().contains("looks good"), "{plan}");
    let exec_id = p.only_exec();
    let (_, shown) = p.json(&["exec", "show", &exec_id]);
    assert_eq!(shown["stage"], "completed");
    assert!(shown.to_string().contains("try once more"), "{shown}");
}
