//! Many workers on one shared PostgreSQL store (ADR 0022), against a throwaway server: four
//! `orca worker` processes drive 200 tasks (four detached 50-task DAG executions); every task
//! runs exactly once (counted), a resource shared across executions is never held twice at
//! once (overlaps counted from the recorded intervals), and the exported audit verifies. A
//! worker killed with SIGKILL mid-task is taken over by another, and the abandoned attempt is
//! recorded. Workers whose clocks are 30 s apart (libfaketime) neither steal a live lease nor
//! keep a dead one; the database restarted mid-run is survived.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{isolated, orca};
use orca_testkit::postgres::Throwaway;
use serde_json::{Value, json};

/// A throwaway server of the test's own (to stop or restart) and a database on it.
pub(crate) fn own_server(durable: bool) -> (Throwaway, String) {
    let server = Throwaway::start(durable).unwrap_or_else(|e| panic!("{e}"));
    let url = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(server.create_database())
        .unwrap();
    (server, url)
}

fn database() -> String {
    let server = Throwaway::shared().unwrap_or_else(|e| panic!("{e}"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(server.create_database())
        .unwrap()
}

pub(crate) fn on(url: &str, root: &Path, cfg: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["--store", url];
    all.extend_from_slice(args);
    orca(root, cfg, &all)
}

/// Creates and approves a plan, starts it detached; returns the execution id.
pub(crate) fn detached(url: &str, root: &Path, cfg: &Path, name: &str, doc: &Value) -> String {
    std::fs::write(root.join(name), doc.to_string()).unwrap();
    let out = on(
        url,
        root,
        cfg,
        &["--json", "plan", "create", "--file", name],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let plan = serde_json::from_slice::<Value>(&out.stdout).unwrap()["plan_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        on(url, root, cfg, &["plan", "approve", &plan])
            .status
            .code(),
        Some(0)
    );
    let out = on(url, root, cfg, &["--json", "run", &plan, "--detach"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["execution_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

pub(crate) fn worker(url: &str, root: &Path, cfg: &Path, extra: &[&str]) -> Child {
    let mut cmd = isolated(root, cfg);
    cmd.args(["--store", url, "--json", "worker", "--poll", "1"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

pub(crate) fn wait(mut child: Child, limit: Duration) -> std::process::Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("a worker did not finish in {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

pub(crate) fn stage(url: &str, root: &Path, cfg: &Path, exec: &str) -> Value {
    let out = on(url, root, cfg, &["--json", "exec", "show", exec]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Exports the shared store and verifies every chain in the export.
pub(crate) fn verify_exported(url: &str, root: &Path, cfg: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().to_str().unwrap();
    let out = on(url, root, cfg, &["store", "export", "--to", to]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = orca(dir.path(), cfg, &["audit", "verify", "--all"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn four_workers_run_200_tasks_each_exactly_once_without_lock_overlaps() {
    four_workers_200_tasks("execution");
}

/// The same with tasks claimed one by one (ADR 0026): the four workers share the executions.
#[test]
fn four_workers_claiming_tasks_run_200_tasks_each_exactly_once_without_lock_overlaps() {
    four_workers_200_tasks("task");
}

#[expect(clippy::print_stdout, reason = "the test prints its counts")]
fn four_workers_200_tasks(claim: &str) {
    let url = database();
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    let runs = root.join("runs.log");
    let locks = root.join("locks.log");
    let mut execs = Vec::new();
    for p in 0..4 {
        // 5 layers of 10; each step depends on one step of the layer before.
        let mut steps = Vec::new();
        for layer in 0..5 {
            for i in 0..10 {
                let id = format!("p{p}-l{layer}-s{i}");
                let deps: Vec<String> = if layer == 0 {
                    vec![]
                } else {
                    vec![format!("p{p}-l{}-s{}", layer - 1, (i + 3) % 10)]
                };
                let mut step = json!({
                    "id": id, "agent": "shell", "description": id,
                    "command": format!("echo {id} >> {}", runs.display()),
                    "depends_on": deps, "max_attempts": 1
                });
                if i == 0 {
                    // One resource shared by every execution: its holders record an interval.
                    step["locks"] = json!(["shared"]);
                    step["command"] = json!(format!(
                        "echo B >> {l}; echo {id} >> {r}; sleep 0.1; echo E >> {l}",
                        l = locks.display(),
                        r = runs.display()
                    ));
                }
                steps.push(step);
            }
        }
        let doc = json!({
            "goal": format!("dag {p}"), "summary": "s", "assumptions": ["a"], "risks": ["r"],
            "verification": ["v"], "steps": steps
        });
        execs.push(detached(&url, root, cfg, &format!("p{p}.json"), &doc));
    }
    let workers: Vec<Child> = (0..4)
        .map(|_| {
            worker(
                &url,
                root,
                cfg,
                &[
                    "--until-idle",
                    "--concurrency",
                    "1",
                    "--tasks",
                    "4",
                    "--claim",
                    claim,
                ],
            )
        })
        .collect();
    let mut drove = Vec::new();
    for w in workers {
        let out = wait(w, Duration::from_secs(600));
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        drove.push(v["driven"].as_u64().unwrap());
    }
    let text = std::fs::read_to_string(&runs).unwrap();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for line in text.lines() {
        *counts.entry(line).or_default() += 1;
    }
    let twice = counts.values().filter(|n| **n > 1).count();
    let lock_log = std::fs::read_to_string(&locks).unwrap();
    let (mut held, mut overlaps) = (0i32, 0usize);
    for l in lock_log.lines() {
        match l {
            "B" => {
                held += 1;
                if held > 1 {
                    overlaps += 1;
                }
            }
            _ => held -= 1,
        }
    }
    println!(
        "claiming {claim}s: tasks run: {} distinct of 200, run more than once: {twice}; lock intervals: {}, overlaps: {overlaps}; drives per worker: {drove:?}",
        counts.len(),
        lock_log.lines().count() / 2
    );
    assert_eq!((counts.len(), twice), (200, 0));
    assert_eq!(overlaps, 0);
    let mut created_twice = 0;
    for e in &execs {
        assert_eq!(stage(&url, root, cfg, e)["stage"], "completed", "{e}");
        // One `execution.created` per execution, however fast a worker takes a detached run.
        let out = on(&url, root, cfg, &["events", e]);
        let created = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["type"] == "execution.created")
            .count();
        created_twice += usize::from(created != 1);
    }
    println!("executions with other than one execution.created event: {created_twice}");
    assert_eq!(created_twice, 0);
    verify_exported(&url, root, cfg);
}

#[test]
fn a_worker_killed_mid_task_is_taken_over_and_the_abandoned_attempt_recorded() {
    killed_mid_task("execution");
}

/// The same with tasks claimed one by one: the task is taken over once its lease expired.
#[test]
fn a_worker_claiming_tasks_killed_mid_task_is_taken_over_after_its_task_lease() {
    killed_mid_task("task");
}

#[expect(clippy::print_stdout, reason = "the test prints its counts")]
fn killed_mid_task(claim: &str) {
    let url = database();
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    let started = root.join("started");
    let doc = json!({
        "goal": "slow", "summary": "s", "assumptions": ["a"], "risks": ["r"], "verification": ["v"],
        "steps": [
            { "id": "slow", "agent": "shell", "description": "slow",
              // The first attempt lasts long enough that a test thread starved on a loaded
              // box still kills its worker mid-step; the attempt taken over is quick.
              "command": format!(
                  "echo x >> {f}; if [ \"$(wc -l < {f})\" -eq 1 ]; then sleep 30; fi",
                  f = started.display()
              ), "depends_on": [] },
            { "id": "after", "agent": "shell", "description": "after", "command": "true",
              "depends_on": ["slow"] }
        ]
    });
    let exec = detached(&url, root, cfg, "slow.json", &doc);
    let mut first = worker(&url, root, cfg, &["--claim", claim]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !started.exists() {
        assert!(
            Instant::now() < deadline,
            "the first worker never started the step"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Someone watches from another host while the worker dies and another takes over.
    let mut watching = isolated(root, cfg);
    watching
        .args(["--store", &url, "watch", &exec])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let watcher = watching.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    first.kill().unwrap(); // SIGKILL: no cleanup, its connections just close.
    let _ = first.wait();
    let taken_over = Instant::now();
    // Give the watcher time to see the driver gone before another takes over.
    std::thread::sleep(Duration::from_secs(3));
    let second = worker(&url, root, cfg, &["--until-idle", "--claim", claim]);
    let out = wait(second, Duration::from_secs(300));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let watched = wait(watcher, Duration::from_secs(120));
    let said = String::from_utf8_lossy(&watched.stderr).into_owned();
    println!(
        "watch during the takeover: exit {:?}; said it waits for a worker: {}",
        watched.status.code(),
        said.contains("waiting for a worker")
    );
    assert_eq!(watched.status.code(), Some(0), "{said}");
    if claim == "execution" {
        assert!(
            said.contains("waiting for a worker to take it over"),
            "{said}"
        );
    }
    let v = stage(&url, root, cfg, &exec);
    assert_eq!(v["stage"], "completed", "{v}");
    let runs = std::fs::read_to_string(&started).unwrap().lines().count();
    let text = v.to_string();
    println!(
        "claiming {claim}s: slow step started {runs} times (1 killed + 1 taken over), done {:.1} s after the kill",
        taken_over.elapsed().as_secs_f64()
    );
    assert_eq!(runs, 2);
    assert!(
        text.contains("abandoned"),
        "the killed attempt is recorded: {text}"
    );
    verify_exported(&url, root, cfg);
}

#[test]
fn workers_reconnect_when_the_database_restarts_mid_run() {
    // A server of its own: this test restarts it.
    let (server, url) = own_server(false);
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    let runs = root.join("runs.log");
    // A chain of 12 short steps: the restart lands in the middle.
    let steps: Vec<Value> = (0..12)
        .map(|i| {
            let deps: Vec<String> = if i == 0 {
                vec![]
            } else {
                vec![format!("s{}", i - 1)]
            };
            json!({ "id": format!("s{i}"), "agent": "shell", "description": "s",
                    "command": format!("echo s{i} >> {}; sleep 0.3", runs.display()),
                    "depends_on": deps })
        })
        .collect();
    let doc = json!({ "goal": "chain", "summary": "s", "assumptions": ["a"], "risks": ["r"],
                      "verification": ["v"], "steps": steps });
    let exec = detached(&url, root, cfg, "chain.json", &doc);
    let workers: Vec<Child> = (0..2).map(|_| worker(&url, root, cfg, &[])).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_to_string(&runs)
        .unwrap_or_default()
        .lines()
        .count()
        < 3
    {
        assert!(Instant::now() < deadline, "the workers never got going");
        std::thread::sleep(Duration::from_millis(50));
    }
    server.stop().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    server.restart(false).unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let final_stage = loop {
        let out = on(&url, root, cfg, &["--json", "exec", "show", &exec]);
        if out.status.code() == Some(0) {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            if v["stage"] != "running" && v["stage"] != "pending" {
                break v;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the run never finished after the restart"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    for mut w in workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    let text = std::fs::read_to_string(&runs).unwrap();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for line in text.lines() {
        *counts.entry(line).or_default() += 1;
    }
    let reruns: usize = counts.values().map(|n| n - 1).sum();
    println!(
        "after a database restart mid-run: stage {}, {} of 12 steps ran, {reruns} re-runs (at-least-once for steps cut off)",
        final_stage["stage"],
        counts.len()
    );
    assert_eq!(final_stage["stage"], "completed", "{final_stage}");
    assert_eq!(counts.len(), 12);
    verify_exported(&url, root, cfg);
}

/// libfaketime, to give one worker process a clock 30 s off (Debian's `faketime`).
fn faketime_lib() -> std::path::PathBuf {
    std::fs::read_dir("/usr/lib")
        .unwrap()
        .flatten()
        .map(|e| e.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("libfaketime not found: install Debian's `faketime` package (.ci/setup does)")
        })
}

fn skewed_worker(url: &str, root: &Path, cfg: &Path, skew: &str, extra: &[&str]) -> Child {
    let mut cmd = isolated(root, cfg);
    cmd.env("LD_PRELOAD", faketime_lib())
        .env("FAKETIME", skew)
        // Timers and timeouts keep the real monotonic clock; the wall clock is off.
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .args(["--store", url, "--json", "worker", "--poll", "1"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

#[test]
fn workers_with_clocks_30s_apart_neither_steal_a_live_lease_nor_keep_a_dead_one() {
    let url = database();
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    let started = root.join("started");
    let doc = json!({
        "goal": "skew", "summary": "s", "assumptions": ["a"], "risks": ["r"], "verification": ["v"],
        "steps": [
            { "id": "slow", "agent": "shell", "description": "slow",
              "command": format!("echo x >> {}; sleep 4", started.display()), "depends_on": [] }
        ]
    });
    let exec = detached(&url, root, cfg, "skew.json", &doc);
    // The leader's clock is 30 s ahead; the other's 30 s behind.
    let mut ahead = skewed_worker(&url, root, cfg, "+30s", &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !started.exists() {
        assert!(
            Instant::now() < deadline,
            "the first worker never started the step"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut behind = skewed_worker(&url, root, cfg, "-30s", &[]);
    // While the leader lives, the other (polling every second) must not take over.
    std::thread::sleep(Duration::from_secs(3));
    let while_live = std::fs::read_to_string(&started).unwrap().lines().count();
    ahead.kill().unwrap();
    let _ = ahead.wait();
    let deadline = Instant::now() + Duration::from_secs(120);
    let v = loop {
        let v = stage(&url, root, cfg, &exec);
        if v["stage"] == "completed" {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "the dead leader was never taken over: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = behind.kill();
    let _ = behind.wait();
    let total = std::fs::read_to_string(&started).unwrap().lines().count();
    println!(
        "clock skew ±30 s: step starts while the leader lived: {while_live} (must be 1); after it was killed: {total} (must be 2)"
    );
    assert_eq!((while_live, total), (1, 2));
    assert!(v.to_string().contains("abandoned"), "{v}");
    verify_exported(&url, root, cfg);
}

#[test]
fn watch_on_another_host_follows_a_run_driven_by_a_worker() {
    let url = database();
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    let started = root.join("started");
    let steps: Vec<Value> = (0..3)
        .map(|i| {
            let deps: Vec<String> = if i == 0 {
                vec![]
            } else {
                vec![format!("w{}", i - 1)]
            };
            json!({ "id": format!("w{i}"), "agent": "shell", "description": "w",
                    "command": format!("echo w{i} >> {}; sleep 0.7", started.display()),
                    "depends_on": deps })
        })
        .collect();
    let doc = json!({ "goal": "watched", "summary": "s", "assumptions": ["a"], "risks": ["r"],
                      "verification": ["v"], "steps": steps });
    let exec = detached(&url, root, cfg, "watched.json", &doc);
    let mut w = worker(&url, root, cfg, &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the worker never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A watcher that is not the driver (as on another host): follows until the end.
    let mut cmd = isolated(root, cfg);
    cmd.args(["--store", &url, "watch", &exec])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = wait(cmd.spawn().unwrap(), Duration::from_secs(120));
    let _ = w.kill();
    let _ = w.wait();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("watch exit {:?}, output:\n{text}", out.status.code());
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text.contains("w2"), "{text}");
}

/// A worker already waiting when runs are detached takes each at once — before its creator has
/// written the first entry — and still each execution has one `execution.created`.
#[test]
fn runs_detached_to_a_waiting_worker_are_created_once() {
    let url = database();
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    let mut w = worker(&url, root, cfg, &[]);
    // The worker is listening before anything is detached.
    std::thread::sleep(Duration::from_secs(2));
    let doc = json!({ "goal": "quick", "summary": "s", "assumptions": ["a"], "risks": ["r"],
                      "verification": ["v"],
                      "steps": [{ "id": "a", "agent": "shell", "description": "a", "command": "true" }] });
    let execs: Vec<String> = (0..5)
        .map(|i| detached(&url, root, cfg, &format!("q{i}.json"), &doc))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    for e in &execs {
        while stage(&url, root, cfg, e)["stage"] != "completed" {
            assert!(Instant::now() < deadline, "{e} did not complete");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let _ = w.kill();
    let _ = w.wait();
    let mut twice = 0;
    for e in &execs {
        let out = on(&url, root, cfg, &["events", e]);
        let created = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["type"] == "execution.created")
            .count();
        twice += usize::from(created != 1);
    }
    println!(
        "runs detached to a waiting worker with other than one execution.created: {twice} of {}",
        execs.len()
    );
    assert_eq!(twice, 0);
    verify_exported(&url, root, cfg);
}
