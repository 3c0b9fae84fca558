//! A claiming worker cut off from its database must stop its attempt before the task's lease
//! can run out: otherwise the worker that takes the task over runs it while the first attempt
//! still runs (once seen in the chaos run: two attempts of one task at once). The database is
//! cut off under a worker mid-step — frozen (nothing answers, no connection breaks: a
//! partition that drops packets, which the worker notices only by its own clock), or stopped
//! (every connection cut, which it notices at once), or only the connection holding its hold on
//! the execution is cut (a leader could take the execution now); the step's process must be gone before
//! the lease could expire, and the task, taken up again once the database is back, must run
//! once more without its attempts overlapping.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{isolated, orca};
use serde_json::json;

use crate::pg_workers::{detached, own_server, stage, verify_exported};

/// The postgres store's task lease.
const LEASE: Duration = Duration::from_secs(30);

/// How the worker is cut off.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Nothing answers, no connection breaks.
    Frozen,
    /// The server stops: every connection cut.
    Stopped,
    /// Only the connection holding the worker's hold on the execution (a session lock) is cut:
    /// the lock is gone — a leader could take the execution — and every other connection works.
    Hold,
}

/// The first attempt's sleep: long past the lease; its value names its process (one per test:
/// they run at once).
fn marker(cut: Cut) -> &'static str {
    match cut {
        Cut::Frozen => "47.25",
        Cut::Stopped => "47.75",
        Cut::Hold => "47.5",
    }
}

/// A worker with its output in a file (a pipe nobody reads would stall it).
fn quiet_worker(url: &str, root: &Path, cfg: &Path, log: &Path) -> Child {
    let mut cmd = isolated(root, cfg);
    cmd.args(["--store", url, "worker", "--poll", "1", "--claim", "task"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    cmd.spawn().unwrap()
}

/// Whether a process runs `sleep MARKER` (in any PID namespace below this one).
fn marker_alive(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == marker.as_bytes()))
    })
}

#[test]
fn a_worker_whose_database_stops_answering_stops_its_attempt_before_the_lease_runs_out() {
    cut_off(Cut::Frozen);
}

#[test]
fn a_worker_whose_database_goes_down_stops_its_attempt_before_the_lease_runs_out() {
    cut_off(Cut::Stopped);
}

/// Seen in the chaos run: after a server restart a claimer ran on without its hold, a leader
/// took the execution and recovered (ran again) the task the claimer was running.
#[test]
fn a_worker_whose_hold_on_the_execution_is_cut_stops_its_attempt_at_once() {
    cut_off(Cut::Hold);
}

/// Cuts the connection that holds a shared lock on an execution (a claimer's hold).
fn cut_the_hold(url: &str) {
    let out = std::process::Command::new(crate::pg_store::psql())
        .args([
            url,
            "-tAc",
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks \
             WHERE locktype = 'advisory' AND mode = 'ShareLock' AND granted",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1", "{out:?}");
}

#[expect(clippy::print_stdout, reason = "the test prints its figures")]
fn cut_off(cut: Cut) {
    let (server, url) = own_server(false);
    let marker = marker(cut);
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    let runs = root.join("runs.log");
    // The first attempt sleeps past the lease; every later one is quick. Each attempt writes
    // its start, and its end if it lives to it.
    let doc = json!({
        "goal": "fence", "summary": "s", "assumptions": ["a"], "risks": ["r"], "verification": ["v"],
        "steps": [{
            "id": "long", "agent": "shell", "description": "long", "max_attempts": 3,
            "command": format!(
                "S=$(date +%s%N); echo \"B $S\" >> {r}; \
                 if [ \"$(grep -c '^B' {r})\" -eq 1 ]; then sleep {marker}; fi; \
                 echo \"E $S $(date +%s%N)\" >> {r}",
                r = runs.display()
            ),
            "depends_on": []
        }]
    });
    let exec = detached(&url, root, cfg, "fence.json", &doc);
    let mut first = quiet_worker(&url, root, cfg, &root.join("first.log"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while !marker_alive(marker) {
        assert!(
            Instant::now() < deadline,
            "the worker never started the step"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Cut off: no renewal can reach the database from now on (or, for the hold, the worker
    // no longer holds the execution).
    match cut {
        Cut::Frozen => server.freeze().unwrap(),
        Cut::Stopped => server.stop().unwrap(),
        Cut::Hold => cut_the_hold(&url),
    }
    let cut_at = Instant::now();
    while marker_alive(marker) {
        assert!(
            cut_at.elapsed() < Duration::from_secs(90),
            "the cut-off worker's attempt never ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let stopped_after = cut_at.elapsed();
    match cut {
        Cut::Frozen => server.thaw().unwrap(),
        Cut::Stopped => server.restart(false).unwrap(),
        Cut::Hold => {}
    }
    // Another worker, and the first one, take the task up again once the database is back.
    // Either may run it (the first one, once it recorded its attempt interrupted, often
    // does): the run is waited for, then both workers end, idle.
    let mut second = quiet_worker(&url, root, cfg, &root.join("second.log"));
    let deadline = Instant::now() + Duration::from_secs(300);
    let v = loop {
        let v = stage(&url, root, cfg, &exec);
        if v["stage"] == "completed" || Instant::now() > deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    for w in [&mut first, &mut second] {
        let _ = w.kill();
        let _ = w.wait();
    }
    let text = std::fs::read_to_string(&runs).unwrap();
    let starts: Vec<u128> = text
        .lines()
        .filter_map(|l| l.strip_prefix("B ")?.parse().ok())
        .collect();
    let ends: Vec<(u128, u128)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("E ")?.split(' ');
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    // An attempt that ended after a later attempt of the task began ran beside it.
    let overlapping = ends
        .iter()
        .filter(|(start, end)| starts.iter().any(|s| s > start && s < end))
        .count();
    let shown = v.to_string();
    let how = if shown.contains("could not renew its task leases")
        || shown.contains("lost its hold on the execution")
    {
        "recorded interrupted by the cut-off worker"
    } else if shown.contains("abandoned") {
        "taken over after its lease"
    } else {
        "neither"
    };
    println!(
        "database {}: attempt stopped {:.1} s after the cut (lease {} s); attempts {}, \
         first one ended by itself: {}; overlapping attempts {overlapping}; first attempt {how}",
        match cut {
            Cut::Frozen => "frozen",
            Cut::Stopped => "stopped",
            Cut::Hold => "hold cut",
        },
        stopped_after.as_secs_f64(),
        LEASE.as_secs(),
        starts.len(),
        ends.first().is_some_and(|(s, _)| Some(s) == starts.first()),
    );
    assert_eq!(v["stage"], "completed", "{v}");
    // The lease ran at least a lease from the last renewal, at most a heartbeat before the cut.
    assert!(stopped_after < LEASE, "stopped after {stopped_after:?}");
    assert_eq!(starts.len(), 2, "{text}");
    assert_eq!(ends.len(), 1, "the first attempt ran to its end: {text}");
    assert_eq!(overlapping, 0, "{text}");
    assert_ne!(how, "neither", "{shown}");
    verify_exported(&url, root, cfg);
}
