//! One round of the torture campaign: an execution driven to its end through kills at the
//! campaign's kill points, decisions answered, failed resumes counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::counts::{self, KillPoint};
use super::{DECIDER, STUCK, executions, locks_of};
use crate::util;

/// The files the steps write.
#[derive(Debug, Clone, Copy)]
pub(super) struct Files<'a> {
    pub(super) effects: &'a Path,
    pub(super) markers: &'a Path,
}

/// What one round did.
#[derive(Debug, Default)]
pub(super) struct RoundStats {
    pub(super) kills: usize,
    pub(super) orphans: usize,
    pub(super) failed_resumes: usize,
    pub(super) decisions: usize,
    pub(super) slowest_orphan_exit: Duration,
    pub(super) kills_by_point: BTreeMap<KillPoint, usize>,
}

/// Waits for `child`, killing it (SIGKILL) when `point`'s moment comes (or, if it does not
/// come, 3 s after a random moment: then the kill counts as random). `Err(point)`: it was
/// killed there.
///
/// `applying_decision`: the process starts by applying a decision just answered; a kill
/// "during a decision" then lands within its first 80 ms.
fn wait_or_kill(
    child: &mut std::process::Child,
    point: Option<KillPoint>,
    markers: &Path,
    applying_decision: bool,
) -> Result<Result<std::process::ExitStatus, KillPoint>, String> {
    let seen_before = counts::read_markers(markers).len();
    let random_at = Duration::from_millis(fastrand::u64(30..900));
    let decision_at = Duration::from_millis(fastrand::u64(2..80));
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(Ok(status));
        }
        if started.elapsed() > STUCK {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("orca did not finish within {} s", STUCK.as_secs()));
        }
        if let Some(p) = point {
            let all = counts::read_markers(markers);
            let fresh = all.get(seen_before..).unwrap_or_default();
            let at_point =
                (p == KillPoint::Decision && applying_decision && started.elapsed() >= decision_at)
                    || counts::due(
                        p,
                        fresh,
                        &all,
                        started.elapsed(),
                        random_at,
                        locks_of,
                        |m| m.step == DECIDER && m.attempt >= 3,
                    );
            let fallback = started.elapsed() > random_at + Duration::from_secs(3);
            if at_point || fallback {
                // A write lands a moment after its trigger.
                if matches!(p, KillPoint::Write | KillPoint::Decision) {
                    std::thread::sleep(Duration::from_micros(fastrand::u64(0..3000)));
                }
                let _ = child.kill();
                let _ = child.wait();
                return Ok(Err(if at_point { p } else { KillPoint::Random }));
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Runs one execution to its end, killing the process up to `budget` times (at least once
/// when the budget allows), each time at a kill point picked at random. A run waiting for a
/// decision (exit 4) gets `exec decide … retry --no-run`; a resume that fails is counted and
/// tried again.
pub(super) fn round(
    bin: &Path,
    dir: &Path,
    plan: &str,
    (budget, done): (usize, usize),
    files: Files<'_>,
) -> Result<(String, RoundStats), String> {
    let mut exec: Option<String> = None;
    let known: BTreeSet<String> = executions(bin, dir, plan)?.into_iter().collect();
    let mut stats = RoundStats::default();
    let mut failures_in_a_row = 0;
    let mut watchers = Vec::new();
    let mut just_decided = false;
    loop {
        let mut cmd = util::command(bin);
        cmd.arg("--root").arg(dir).arg("--quiet");
        match &exec {
            None => cmd.args(["run", plan, "--yes"]),
            Some(e) => cmd.args(["exec", "resume", e]),
        };
        cmd.args([
            "--on-failure",
            "ask",
            "--max-attempts",
            "3",
            "--concurrency",
            "4",
            "--kill-grace",
            "2",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("cannot start orca: {e}"))?;
        // The kill points take turns across the campaign; a decision just answered is
        // applied by this process: kill it there.
        let point = (stats.kills < budget.max(1)).then(|| {
            if just_decided {
                KillPoint::Decision
            } else {
                KillPoint::ALL[(done + stats.kills) % KillPoint::ALL.len()]
            }
        });
        let status = wait_or_kill(&mut child, point, files.markers, just_decided)?;
        just_decided = false;
        if exec.is_none() {
            let now: Vec<String> = executions(bin, dir, plan)?
                .into_iter()
                .filter(|e| !known.contains(e))
                .collect();
            if now.len() > 1 {
                return Err(format!("one `orca run` created {} executions", now.len()));
            }
            exec = now.into_iter().next();
        }
        match status {
            Err(p) => {
                stats.kills += 1;
                *stats.kills_by_point.entry(p).or_default() += 1;
                watchers.push(counts::watch_orphans(exec.as_deref()));
            }
            Ok(s) if s.success() => {
                for w in watchers.drain(..) {
                    let (orphans, took) = w.join().unwrap_or((0, Duration::ZERO));
                    stats.orphans += orphans;
                    stats.slowest_orphan_exit = stats.slowest_orphan_exit.max(took);
                }
                let exec = exec.ok_or("orca run succeeded but created no execution")?;
                return Ok((exec, stats));
            }
            Ok(s) if s.code() == Some(4) && exec.is_some() => {
                let e = exec.clone().unwrap_or_default();
                util::orca_ok(bin, dir, &["exec", "decide", &e, "retry", "--no-run"])?;
                stats.decisions += 1;
                just_decided = true;
            }
            Ok(s) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                stats.failed_resumes += 1;
                failures_in_a_row += 1;
                util::say(&format!("a run/resume failed ({s}): {}", err.trim()));
                if failures_in_a_row >= 5 || exec.is_none() {
                    return Err(format!("orca exited {s}: {}", err.trim()));
                }
                continue;
            }
        }
        failures_in_a_row = 0;
    }
}
