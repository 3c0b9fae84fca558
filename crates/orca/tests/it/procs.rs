//! A step's processes live and die with their run (ADR 0010, ADR 0041), shown on the real
//! `orca` binary with real processes: `kill -9` of the runner with grandchildren, a step
//! ignoring SIGTERM and a `setsid` daemon alive; a resume that must end a dead runner's
//! leftovers before re-running; Ctrl-C and `exec stop` leaving a resumable execution that
//! completes with every step run once.
//!
//! A step runs in a PID namespace of its own where the kernel allows (its audit entry says), so
//! the pids it prints are not ours: its processes are found from outside, by the
//! `ORCA_EXECUTION_ID` in their environment and their working directory in the project.
//!
//! Deadlines are generous (a loaded 2-core CI box); the measured figures are printed.

#![expect(clippy::unwrap_used, reason = "tests")]
#![expect(clippy::print_stdout, reason = "tests print what they measured")]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

struct Project {
    dir: TempDir,
    /// The user's config directory (where the signing key lives): never the real home.
    config_home: TempDir,
}

impl Project {
    fn new() -> Self {
        let p = Self {
            dir: tempfile::tempdir().unwrap(),
            config_home: tempfile::tempdir().unwrap(),
        };
        let out = p.run(&["init"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        p
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = common::isolated(self.dir.path(), self.config_home.path());
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.command(args).spawn().unwrap()
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn json(&self, args: &[&str]) -> (i32, Value) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        let value = last_json(&String::from_utf8_lossy(&out.stdout))
            .unwrap_or_else(|| panic!("no JSON from {args:?}: {}", stderr(&out)));
        (code(&out), value)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    fn plan(&self, steps: &[(&str, &str, &[&str])]) -> String {
        self.plan_locked(steps, &[])
    }

    /// A plan whose steps named in `locked` hold the lock `db`.
    fn plan_locked(&self, steps: &[(&str, &str, &[&str])], locked: &[&str]) -> String {
        let steps: Vec<Value> = steps
            .iter()
            .map(|(id, cmd, deps)| {
                let locks: Vec<&str> = if locked.contains(id) {
                    vec!["db"]
                } else {
                    vec![]
                };
                json!({ "id": id, "agent": "shell", "description": format!("the {id} step"),
                        "command": cmd, "depends_on": deps, "locks": locks })
            })
            .collect();
        let doc = json!({ "goal": "processes", "summary": "process ownership",
                          "assumptions": ["a POSIX shell"], "risks": ["none"],
                          "verification": ["marker files"], "steps": steps });
        let path = self.path("plan.json");
        std::fs::write(&path, doc.to_string()).unwrap();
        path.display().to_string()
    }

    fn wait_for(&self, name: &str, needle: &str) {
        let start = Instant::now();
        while !self.read(name).contains(needle) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{name} never held {needle:?}: {:?}",
                self.read(name)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn only_exec(&self) -> String {
        let (c, v) = self.json(&["exec", "list"]);
        assert_eq!(c, 0);
        v[0]["execution_id"].as_str().unwrap().to_owned()
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
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

/// The processes of this project's steps, seen from outside (pids of our namespace): every live
/// process whose environment holds `ORCA_EXECUTION_ID` and whose working directory is in the
/// project.
pub(crate) fn step_processes(root: &Path) -> Vec<i32> {
    let root = root.canonicalize().unwrap();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let in_project =
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(&root));
        let is_step = in_project
            && std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|b| *b == 0)
                    .any(|v| v.starts_with(b"ORCA_EXECUTION_ID="))
            });
        if is_step && is_alive(pid) {
            out.push(pid);
        }
    }
    out
}

/// Waits until no process of the project's steps is left (or `limit` passed); how many are.
pub(crate) fn wait_no_step_processes(root: &Path, limit: Duration) -> usize {
    let start = Instant::now();
    loop {
        let alive = step_processes(root).len();
        if alive == 0 || start.elapsed() > limit {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the runs of the project gave their steps a PID namespace (the `sandbox` audit
/// entry of its executions).
pub(crate) fn pid_namespaces(root: &Path) -> bool {
    sandbox_entry(root).is_some_and(|e| e["data"]["pid_namespace"] == true)
}

/// The `sandbox` audit entry of the project's first execution.
pub(crate) fn sandbox_entry(root: &Path) -> Option<Value> {
    walk(&root.join(".orca"))
        .iter()
        .filter(|f| f.to_string_lossy().ends_with(".audit.jsonl"))
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect::<Vec<_>>()
        })
        .find(|e| e["kind"] == "sandbox")
}

fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Pids of the members of process group `pgid` whose command is `comm`.
fn members_named(pgid: i32, comm: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let name = head.split_once('(').map(|(_, n)| n).unwrap_or_default();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) && name == comm {
            out.push(pid);
        }
    }
    out
}

/// `kill -9` of the runner while its steps have grandchildren, ignore SIGTERM, or fork a
/// `setsid` daemon: every process of a step is gone at once — in its own PID namespace the
/// daemon too; with process groups only, the daemon that left its group is the documented
/// exception. `exec list` / `exec show` say `interrupted` with the driver's pid and the resume
/// command.
#[test]
fn sigkill_of_the_runner_takes_every_step_process_with_it() {
    let p = Project::new();
    let plan = p.plan(&[
        (
            "grandkids",
            "sleep 60 & sleep 60 & echo up >> ready; wait",
            &[],
        ),
        (
            "stubborn",
            "trap '' TERM; sh -c 'trap \"\" TERM; echo up >> ready; while :; do sleep 0.1; done' & wait",
            &[],
        ),
        (
            "daemon",
            "setsid sh -c 'echo up > daemon.up; exec sleep 60' & echo up >> ready; wait",
            &[],
        ),
    ]);
    let mut run = p.spawn(&["run", &plan, "--yes", "--concurrency", "4"]);
    let start = Instant::now();
    while p.read("ready").lines().count() < 3 || p.read("daemon.up").trim().is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "steps never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = step_processes(p.dir.path()).len();
    assert!(before >= 7, "{before} step processes");

    run.kill().unwrap(); // SIGKILL
    let _ = run.wait();
    let started = Instant::now();
    let alive = wait_no_step_processes(p.dir.path(), Duration::from_secs(20));
    let own_namespaces = pid_namespaces(p.dir.path());
    println!(
        "step processes alive after SIGKILL of the runner: {alive} of {before} ({} ms; own PID namespaces: {own_namespaces})",
        started.elapsed().as_millis()
    );
    if own_namespaces {
        assert_eq!(alive, 0, "step processes survived the runner");
    } else {
        // The documented limit without a PID namespace: a process that calls setsid leaves
        // the group; nothing holds it. Cleaned up here.
        assert!(alive <= 1, "orphans survived the runner");
        for pid in step_processes(p.dir.path()) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }

    let exec = p.only_exec();
    let (c, list) = p.json(&["exec", "list"]);
    assert_eq!(c, 0);
    assert_eq!(list[0]["stage"], "running");
    assert_eq!(list[0]["driver"]["state"], "interrupted", "{list}");
    assert_eq!(list[0]["driver"]["pid"], run.id());
    assert_eq!(
        list[0]["driver"]["resume"],
        format!("orca exec resume {exec}")
    );
    let (c, shown) = p.json(&["exec", "show", &exec]);
    assert_eq!(c, 0);
    assert_eq!(shown["driver"]["state"], "interrupted", "{shown}");
    assert!(shown["driver"]["since"].is_string());
    // The running attempts recorded their process groups.
    let groups: usize = shown["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["processes"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(groups, 3, "{shown}");
    let out = p.run(&["exec", "show", &exec]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("interrupted since"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // `watch` does not wait forever on a dead driver.
    let (c, watched) = p.json(&["watch", &exec]);
    assert_eq!(c, 130, "{watched}");
    assert_eq!(watched["driver"]["state"], "interrupted");
}

/// When the watchdog is gone too (killed first), what a dead runner's step left is ended before
/// the step runs again: by the PID namespace at once (its init dies with the leader), or,
/// with process groups only, by the next `resume`, which audits the takeover. Either way the
/// old processes are gone when the step re-runs (the new attempt watches the old ones'
/// heartbeat and counts overlaps).
#[test]
fn resume_ends_a_dead_runners_leftovers_before_rerunning() {
    let p = Project::new();
    let plan = p.plan(&[(
        "effect",
        "if [ -e gen1 ]; then \
           n=$(wc -l < beats); sleep 0.5; m=$(wc -l < beats); \
           if [ \"$n\" != \"$m\" ]; then echo overlap >> overlaps; fi; \
           echo \"second $ORCA_ATTEMPT\" >> effects; \
         else touch gen1; \
           (while :; do echo x >> beats; sleep 0.05; done) & \
           (while :; do echo y >> beats; sleep 0.05; done) & \
           echo first >> effects; wait; fi",
        &[],
    )]);
    let mut run = p.spawn(&["run", &plan, "--yes"]);
    p.wait_for("effects", "first");
    // Wait until the group is recorded, then kill its watchdog (the member `orca-watchdog`).
    let exec = p.only_exec();
    let start = Instant::now();
    let leader = loop {
        let (_, shown) = p.json(&["exec", "show", &exec]);
        if let Some(pgid) = shown["tasks"][0]["processes"][0]["pgid"].as_i64() {
            break i32::try_from(pgid).unwrap();
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{shown}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let watchdogs = members_named(leader, "orca-watchdog");
    assert_eq!(watchdogs.len(), 1, "one watchdog per group");
    signal(u32::try_from(watchdogs[0]).unwrap(), "-KILL");
    run.kill().unwrap();
    let _ = run.wait();
    std::thread::sleep(Duration::from_millis(300));
    let alive_before = step_processes(p.dir.path()).len();
    let own_namespaces = pid_namespaces(p.dir.path());
    println!(
        "leftovers alive after the runner and its watchdog died: {alive_before} (own PID namespaces: {own_namespaces})"
    );
    if own_namespaces {
        assert_eq!(alive_before, 0, "the namespace's init dies with the leader");
    } else {
        assert!(
            alive_before >= 2,
            "the leader's parent-death signal spares its children"
        );
    }

    let (c, resumed) = p.json(&["exec", "resume", &exec]);
    assert_eq!(c, 0, "{resumed}");
    assert_eq!(resumed["stage"], "completed");
    let overlaps = p.read("overlaps").lines().count();
    println!("old processes alive when the step re-ran: {overlaps}");
    assert_eq!(overlaps, 0);
    assert_eq!(step_processes(p.dir.path()).len(), 0);
    assert_eq!(p.read("effects"), "first\nsecond 2\n");
    let log = audit_kinds(&p, &exec);
    let takeover = log.iter().find(|e| e["kind"] == "takeover.processes_ended");
    if own_namespaces {
        // Nothing was left to end: a takeover entry, if any, says the group was gone.
        if let Some(t) = takeover {
            assert_ne!(t["data"]["groups"][0]["outcome"], "survived", "{t}");
        }
    } else {
        let takeover = takeover.unwrap_or_else(|| panic!("no takeover entry: {log:?}"));
        assert_eq!(takeover["data"]["step_id"], "effect");
        assert_eq!(takeover["data"]["attempt"], 1);
        assert_eq!(takeover["data"]["groups"][0]["pgid"], leader);
        assert_eq!(takeover["data"]["groups"][0]["outcome"], "killed");
    }
    let out = p.run(&["audit", "verify", &exec]);
    assert_eq!(code(&out), 0);
}

fn audit_kinds(p: &Project, exec: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for entry in walk(&p.path(".orca")) {
        if entry
            .to_string_lossy()
            .ends_with(&format!("{exec}.audit.jsonl"))
        {
            for line in std::fs::read_to_string(&entry).unwrap().lines() {
                out.push(serde_json::from_str(line).unwrap());
            }
        }
    }
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// The plan of the stop/resume tests: `first` done, `long` running (it finishes only once
/// `go` exists), `last` after it. Each appends to `effects`; `first` also records its
/// identity variables.
fn stop_plan(p: &Project) -> String {
    p.plan(&[
        (
            "first",
            "echo first >> effects; echo \"$ORCA_EXECUTION_ID $ORCA_TASK_ID $ORCA_ATTEMPT $ORCA_PLAN_ID $ORCA_IDEMPOTENCY_KEY\" > ids",
            &[],
        ),
        (
            "long",
            "echo \"long $ORCA_ATTEMPT\" >> effects; if [ -e go ]; then echo long-done >> effects; \
             else sleep 60 & echo started > long.pid; wait; fi",
            &["first"],
        ),
        ("last", "echo last >> effects", &["long"]),
    ])
}

fn assert_resumes_running_each_step_once(p: &Project, exec: &str) {
    let (c, shown) = p.json(&["exec", "show", exec]);
    assert_eq!(c, 0);
    assert_eq!(shown["stage"], "running", "resumable: {shown}");
    assert_eq!(shown["driver"]["state"], "interrupted");
    std::fs::write(p.path("go"), "").unwrap();
    let (c, resumed) = p.json(&["exec", "resume", exec]);
    assert_eq!(c, 0, "{resumed}");
    assert_eq!(resumed["stage"], "completed");
    let effects = p.read("effects");
    println!("effects: {effects:?}");
    assert_eq!(effects.matches("first").count(), 1, "{effects}");
    assert_eq!(effects.matches("last").count(), 1, "{effects}");
    assert_eq!(effects.matches("long-done").count(), 1, "{effects}");
    let (_, shown) = p.json(&["exec", "show", exec]);
    // The interrupted attempt is recorded (abandoned, not counted), then the one that ran.
    let attempts = shown["tasks"][1]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{shown}");
    assert_eq!(attempts[0]["outcome"]["outcome"], "abandoned", "{shown}");
    let out = p.run(&["audit", "verify", exec]);
    assert_eq!(code(&out), 0);
    // The identity every step process gets.
    let ids = p.read("ids");
    let fields: Vec<&str> = ids.split_whitespace().collect();
    assert_eq!(fields.len(), 5, "{ids}");
    assert_eq!(fields[0], exec);
    assert_eq!(fields[1], "first");
    assert_eq!(fields[2], "1");
    assert!(fields[3].starts_with("plan_"));
    assert_eq!(fields[4], format!("{exec}.first"));
}

/// One Ctrl-C (SIGINT to the orca process) stops the run cleanly: the step's processes are
/// ended, its attempt recorded interrupted, exit 130, the execution resumable; `resume`
/// completes it with each completed step run exactly once.
#[test]
fn one_ctrl_c_leaves_a_resumable_execution() {
    let p = Project::new();
    let plan = stop_plan(&p);
    let run = p.spawn(&["--json", "run", &plan, "--yes", "--kill-grace", "2"]);
    p.wait_for("effects", "long 1");
    p.wait_for("long.pid", "\n");
    signal(run.id(), "-INT");
    let out = run.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    let last = last_json(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(last["outcome"], "interrupted", "{last}");
    assert_eq!(last["stage"], "running");
    assert_eq!(
        step_processes(p.dir.path()).len(),
        0,
        "the step's child was ended"
    );
    let exec = p.only_exec();
    assert_resumes_running_each_step_once(&p, &exec);
}

/// `exec stop` from another process does the same, waits for the driver to let go, and a
/// watcher in a third process reports the interruption.
#[test]
fn exec_stop_from_another_process_leaves_a_resumable_execution() {
    let p = Project::new();
    let plan = stop_plan(&p);
    let run = p.spawn(&["--json", "run", &plan, "--yes"]);
    p.wait_for("effects", "long 1");
    p.wait_for("long.pid", "\n");
    let exec = p.only_exec();
    let watch = p.spawn(&["--json", "watch", &exec]);
    let (c, stopped) = p.json(&["exec", "stop", &exec, "--reason", "lunch"]);
    assert_eq!(c, 0, "{stopped}");
    assert_eq!(stopped["state"], "interrupted");
    assert_eq!(stopped["resume"], format!("orca exec resume {exec}"));
    assert_eq!(
        step_processes(p.dir.path()).len(),
        0,
        "stop returns once the step's processes are gone"
    );
    let out = run.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    let watched = watch.wait_with_output().unwrap();
    assert_eq!(code(&watched), 130, "{}", stderr(&watched));
    let last = last_json(&String::from_utf8_lossy(&watched.stdout)).unwrap();
    assert_eq!(last["driver"]["state"], "interrupted", "{last}");
    // Stopping again: nothing drives it; still resumable.
    let (c, again) = p.json(&["exec", "stop", &exec]);
    assert_eq!(c, 0, "{again}");
    assert_eq!(again["state"], "interrupted");
    assert_resumes_running_each_step_once(&p, &exec);
}

/// A resource lock stays held while any process of the step that took it lives: here a
/// `setsid` daemon the first step leaves behind. In the step's own PID namespace the daemon
/// ends with its step, and the second step holding `db` starts after that; with process groups
/// only, it escapes the group kill and keeps `db` until it exits.
#[test]
fn a_lock_is_held_until_the_last_process_of_its_step_is_gone() {
    let p = Project::new();
    let plan = p.plan_locked(
        &[
            (
                "first",
                "setsid sh -c 'echo daemon-start >> log; sleep 1.5; echo daemon-end >> log' & \
                 sleep 0.2; echo first-done >> log",
                &[],
            ),
            ("second", "echo second >> log", &[]),
        ],
        &["first", "second"],
    );
    let (c, done) = p.json(&["run", &plan, "--yes", "--concurrency", "1"]);
    assert_eq!(c, 0, "{done}");
    p.wait_for("log", "second");
    if pid_namespaces(p.dir.path()) {
        std::thread::sleep(Duration::from_secs(2));
    } else {
        p.wait_for("log", "daemon-end");
    }
    let log = p.read("log");
    println!("order: {log:?}");
    let at = |what: &str| log.find(what);
    assert!(at("first-done") < at("second"), "{log}");
    if pid_namespaces(p.dir.path()) {
        assert_eq!(
            at("daemon-end"),
            None,
            "the daemon outlived its step: {log}"
        );
    } else {
        assert!(
            at("daemon-end") < at("second"),
            "the second holder of `db` ran while the first one's process still held it: {log}"
        );
    }
}
