//! Chaos while busy: eight `orca worker` processes claiming the tasks of four executions on one
//! PostgreSQL server, one worker killed with SIGKILL every few seconds (and a fresh one
//! started in its place), and the server itself restarted once mid-run (fast shutdown: every
//! connection cut). Every task completes exactly once in the audit, no task's attempts overlap
//! in time, every chain verifies, and the workers reconnect by themselves. The throughput
//! before, during and after the chaos is printed.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{isolated, orca};
use serde_json::{Value, json};

use crate::pg_workers::{detached, on, own_server, verify_exported};

const EXECUTIONS: usize = 4;
const LAYERS: usize = 5;
const WIDTH: usize = 10;
const TASKS: usize = EXECUTIONS * LAYERS * WIDTH;
const WORKERS: usize = 8;
const KILLS: usize = 5;
const KILL_EVERY: Duration = Duration::from_secs(3);

/// A worker logging at debug level to `logs/worker-N.log` (kept when the test fails).
fn worker(url: &str, root: &Path, cfg: &Path, logs: &Path, n: usize) -> Child {
    let log = std::fs::File::create(logs.join(format!("worker-{n}.log"))).unwrap();
    let mut cmd = isolated(root, cfg);
    cmd.args([
        "--store", url, "worker", "--poll", "1", "--claim", "task", "--tasks", "4",
    ])
    .env(
        "ORCA_LOG",
        "orca_services=debug,orca_store_postgres=debug,orca=debug",
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(log);
    cmd.spawn().unwrap()
}

/// A plan of `LAYERS` × `WIDTH` shell steps; each step depends on one of the layer before and
/// records its start and end (nanoseconds) with its start as the attempt's token.
fn plan(p: usize, runs: &Path) -> Value {
    let mut steps = Vec::new();
    for layer in 0..LAYERS {
        for i in 0..WIDTH {
            let id = format!("p{p}-l{layer}-s{i}");
            let deps: Vec<String> = if layer == 0 {
                vec![]
            } else {
                vec![format!("p{p}-l{}-s{}", layer - 1, (i + 3) % WIDTH)]
            };
            steps.push(json!({
                "id": id, "agent": "shell", "description": id, "max_attempts": 3,
                "command": format!(
                    "S=$(date +%s%N); echo \"B {id} $S\" >> {r}; sleep 0.2; \
                     echo \"E {id} $S $(date +%s%N)\" >> {r}",
                    r = runs.display()
                ),
                "depends_on": deps
            }));
        }
    }
    json!({
        "goal": format!("chaos {p}"), "summary": "s", "assumptions": ["a"], "risks": ["r"],
        "verification": ["v"], "steps": steps
    })
}

/// Every attempt the steps recorded: id → [(start, end if it ended)].
type Attempts = BTreeMap<String, Vec<(u128, Option<u128>)>>;

fn attempts(runs: &Path) -> Attempts {
    let text = std::fs::read_to_string(runs).unwrap_or_default();
    let mut out: Attempts = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["B", id, start] => out
                .entry((*id).to_owned())
                .or_default()
                .push((start.parse().unwrap(), None)),
            ["E", id, start, end] => {
                let start: u128 = start.parse().unwrap();
                if let Some(a) = out
                    .get_mut(*id)
                    .and_then(|v| v.iter_mut().find(|a| a.0 == start))
                {
                    a.1 = Some(end.parse().unwrap());
                }
            }
            _ => {}
        }
    }
    out
}

/// Pairs of one task's attempts that ran at the same time: an attempt that ended after
/// another attempt of the same task began (a killed attempt has no end: its processes died
/// with its worker, or it would have written one). Each pair is printed.
#[expect(clippy::print_stdout, reason = "the test names what overlapped")]
fn overlaps(attempts: &Attempts) -> usize {
    let mut n = 0;
    for (id, runs) in attempts {
        for (i, a) in runs.iter().enumerate() {
            for b in &runs[i + 1..] {
                let (first, second) = if a.0 <= b.0 { (a, b) } else { (b, a) };
                if first.1.is_some_and(|end| end > second.0) {
                    println!("overlap: {id}: {first:?} and {second:?}");
                    n += 1;
                }
            }
        }
    }
    n
}

fn all_done(url: &str, root: &Path, cfg: &Path, execs: &[String]) -> bool {
    execs.iter().all(|e| {
        let out = on(url, root, cfg, &["--json", "exec", "show", e]);
        out.status.code() == Some(0)
            && serde_json::from_slice::<Value>(&out.stdout).is_ok_and(|v| v["stage"] == "completed")
    })
}

#[test]
fn eight_workers_killed_and_a_restarted_server_lose_and_double_nothing() {
    let (server, url) = own_server(true);
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    let runs = root.join("runs.log");
    let logs = tempfile::tempdir().unwrap();
    let mut started = 0;
    let mut spawn = || {
        started += 1;
        worker(&url, root, cfg, logs.path(), started)
    };
    let execs: Vec<String> = (0..EXECUTIONS)
        .map(|p| detached(&url, root, cfg, &format!("chaos{p}.json"), &plan(p, &runs)))
        .collect();

    let start = Instant::now();
    let mut workers: Vec<Child> = (0..WORKERS).map(|_| spawn()).collect();
    let mut marks = Vec::new();
    for k in 0..KILLS {
        std::thread::sleep(KILL_EVERY);
        let i = k % WORKERS;
        workers[i].kill().unwrap(); // SIGKILL: no cleanup, its connections just close.
        let _ = workers[i].wait();
        workers[i] = spawn();
        marks.push((start.elapsed(), "kill -9 of a worker"));
        if k == 1 {
            server.stop().unwrap();
            server.restart(true).unwrap();
            marks.push((start.elapsed(), "server restarted (fast)"));
        }
    }
    let chaos_end = start.elapsed();
    let deadline = Instant::now() + Duration::from_secs(400);
    while !all_done(&url, root, cfg, &execs) {
        assert!(Instant::now() < deadline, "the executions never completed");
        std::thread::sleep(Duration::from_millis(500));
    }
    let end = start.elapsed();
    for mut w in workers {
        let _ = w.kill();
        let _ = w.wait();
    }

    // What the steps recorded.
    let attempts = attempts(&runs);
    let completed = attempts
        .values()
        .filter(|v| v.iter().any(|a| a.1.is_some()))
        .count();
    let reruns: usize = attempts.values().map(|v| v.len() - 1).sum();
    let overlapping = overlaps(&attempts);
    // What the audit recorded: one completion per step.
    let (mut lost, mut doubled) = (0usize, 0usize);
    for e in &execs {
        let out = on(&url, root, cfg, &["events", e]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let mut per_step: BTreeMap<String, usize> = BTreeMap::new();
        for v in String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["type"] == "task.attempt.completed")
        {
            *per_step
                .entry(v["step_id"].as_str().unwrap_or_default().to_owned())
                .or_default() += 1;
        }
        lost += (LAYERS * WIDTH).saturating_sub(per_step.len());
        doubled += per_step.values().filter(|n| **n > 1).count();
    }
    // Throughput: completions per second before the first kill, during the chaos, after it.
    let t0 = attempts
        .values()
        .flatten()
        .map(|a| a.0)
        .min()
        .unwrap_or_default();
    let ends: Vec<f64> = attempts
        .values()
        .flatten()
        .filter_map(|a| a.1)
        .map(|e| (e.saturating_sub(t0)) as f64 / 1e9)
        .collect();
    let first_kill = KILL_EVERY.as_secs_f64();
    let rate = |from: f64, to: f64| {
        let n = ends.iter().filter(|e| **e >= from && **e < to).count();
        (n, n as f64 / (to - from).max(1e-9))
    };
    let (n_before, before) = rate(0.0, first_kill);
    let (n_during, during) = rate(first_kill, chaos_end.as_secs_f64());
    let (n_after, after) = rate(chaos_end.as_secs_f64(), end.as_secs_f64() + 1.0);
    for (at, what) in &marks {
        println!("  {:>6.1} s  {what}", at.as_secs_f64());
    }
    println!(
        "chaos: {TASKS} tasks, {WORKERS} workers, {KILLS} kill -9, 1 server restart; all done in {:.1} s\n\
         completions/s: before the first kill {before:.1} ({n_before}), during the chaos {during:.1} ({n_during}), after {after:.1} ({n_after})\n\
         tasks completed {completed} of {TASKS}; lost {lost}, completed twice in the audit {doubled}; \
         attempts cut off and run again {reruns}; overlapping attempts of one task {overlapping}",
        end.as_secs_f64()
    );
    if (completed, lost, doubled, overlapping) != (TASKS, 0, 0, 0) {
        let kept = logs.keep();
        let _ = std::fs::copy(&runs, kept.join("runs.log"));
        panic!(
            "expected {TASKS} completed and nothing lost, doubled or overlapping; the workers' \
             logs and the steps' record are kept in {}",
            kept.display()
        );
    }

    // Every chain verifies.
    verify_exported(&url, root, cfg);
}
/// The control of the overlap count: two attempts of one task that ran at once are counted,
/// one cut off (no end) before the next began is not.
#[test]
fn the_overlap_count_sees_attempts_that_ran_at_once() {
    let mut a: Attempts = BTreeMap::new();
    a.insert("t".to_owned(), vec![(10, Some(30)), (20, Some(40))]);
    a.insert("killed".to_owned(), vec![(10, None), (20, Some(40))]);
    a.insert("serial".to_owned(), vec![(10, Some(15)), (20, Some(40))]);
    assert_eq!(overlaps(&a), 1);
}
