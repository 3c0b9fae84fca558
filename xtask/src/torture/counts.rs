//! What the torture campaign counts (ADR 0010): double concurrent runs of a step and
//! lock overlaps (from the start/end markers every step appends, with timestamps), orphans
//! (processes carrying the execution's id still alive 2 s after a kill), and the kill points.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Where a kill lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum KillPoint {
    /// While a step's process runs.
    Step,
    /// Just after an attempt failed: the runner waits out the retry backoff.
    Backoff,
    /// While a step holding a lock runs (steps sharing it wait for the lock).
    LockWait,
    /// Just after the last attempt failed: the runner writes the decision request.
    Decision,
    /// Just after a step ended: the runner writes its reply (task record, audit entry).
    Write,
    /// At a random moment.
    Random,
}

impl KillPoint {
    pub(super) const ALL: [Self; 6] = [
        Self::Step,
        Self::Backoff,
        Self::LockWait,
        Self::Decision,
        Self::Write,
        Self::Random,
    ];

    pub(super) const fn name(self) -> &'static str {
        match self {
            Self::Step => "during a step",
            Self::Backoff => "during backoff",
            Self::LockWait => "during a lock wait",
            Self::Decision => "during a decision",
            Self::Write => "during a write",
            Self::Random => "at random",
        }
    }
}

/// One marker line: `start|end|fail STEP ATTEMPT NANOS PID`.
#[derive(Debug, Clone)]
pub(super) struct Marker {
    pub(super) kind: String,
    pub(super) step: String,
    pub(super) attempt: u64,
    pub(super) at: u128,
    pub(super) pid: u32,
}

pub(super) fn read_markers(path: &Path) -> Vec<Marker> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [kind, step, attempt, at, pid] = f.as_slice() else {
                return None;
            };
            Some(Marker {
                kind: (*kind).to_owned(),
                step: (*step).to_owned(),
                attempt: attempt.parse().ok()?,
                at: at.parse().ok()?,
                pid: pid.parse().ok()?,
            })
        })
        .collect()
}

/// A run of a step's process: from its start marker to its end marker (a process killed
/// before its end marker has no interval: it did not go on).
#[derive(Debug, Clone)]
struct Interval {
    step: String,
    from: u128,
    to: u128,
}

fn intervals(markers: &[Marker]) -> Vec<Interval> {
    let mut starts: BTreeMap<(String, u64, u32), u128> = BTreeMap::new();
    let mut out = Vec::new();
    for m in markers {
        let key = (m.step.clone(), m.attempt, m.pid);
        match m.kind.as_str() {
            "start" => {
                starts.insert(key, m.at);
            }
            "end" | "fail" => {
                if let Some(from) = starts.remove(&key) {
                    out.push(Interval {
                        step: m.step.clone(),
                        from,
                        to: m.at,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

fn overlapping_pairs(list: &[&Interval]) -> usize {
    let mut n = 0;
    for (i, a) in list.iter().enumerate() {
        for b in &list[i + 1..] {
            if a.from < b.to && b.from < a.to {
                n += 1;
            }
        }
    }
    n
}

/// Pairs of runs of the same step that overlapped in time (its effect running twice at once).
pub(super) fn double_concurrent_runs(markers: &[Marker]) -> usize {
    let all = intervals(markers);
    let mut by_step: BTreeMap<&str, Vec<&Interval>> = BTreeMap::new();
    for i in &all {
        by_step.entry(i.step.as_str()).or_default().push(i);
    }
    by_step.values().map(|v| overlapping_pairs(v)).sum()
}

/// Pairs of runs of steps holding the same lock that overlapped in time (two holders at once).
pub(super) fn lock_overlaps(
    markers: &[Marker],
    locks_of: impl Fn(&str) -> Vec<&'static str>,
) -> usize {
    let all = intervals(markers);
    let mut by_lock: BTreeMap<&'static str, Vec<&Interval>> = BTreeMap::new();
    for i in &all {
        for lock in locks_of(&i.step) {
            by_lock.entry(lock).or_default().push(i);
        }
    }
    by_lock.values().map(|v| overlapping_pairs(v)).sum()
}

/// Whether process `pid` runs (not gone, not a zombie).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Clock ticks since boot (USER_HZ is 100 on Linux), the unit of a process's start time.
fn now_ticks() -> u64 {
    let text = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    let secs: f64 = text
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0);
    (secs * 100.0) as u64
}

fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Processes whose environment carries `ORCA_EXECUTION_ID=<exec>` (every step process and
/// its children), running now, started no later than `before` (clock ticks since boot).
fn processes_of(exec: &str, before: u64) -> Vec<u32> {
    let needle = format!("ORCA_EXECUTION_ID={exec}");
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes())
            && running(pid)
            && start_ticks(pid).is_some_and(|t| t <= before)
        {
            out.push(pid);
        }
    }
    out
}

/// Right after a kill: watches, in a thread, for 2 s, the processes of the execution that
/// were started before the kill (the next run goes on meanwhile: an orphan that survives can
/// overlap its re-run, which the markers then count). Joins to the number still alive after
/// 2 s (orphans) and how long the last one took to go.
pub(super) fn watch_orphans(exec: Option<&str>) -> std::thread::JoinHandle<(usize, Duration)> {
    let exec = exec.map(str::to_owned);
    let killed_at = now_ticks() + 1;
    std::thread::spawn(move || {
        let Some(exec) = exec else {
            return (0, Duration::ZERO);
        };
        let start = Instant::now();
        loop {
            let alive = processes_of(&exec, killed_at);
            if alive.is_empty() {
                return (0, start.elapsed());
            }
            if start.elapsed() >= Duration::from_secs(2) {
                return (alive.len(), start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

/// Whether the kill point's moment has come, given the markers written since this process
/// started (`fresh`), every marker (`all`), and how long the process has run.
pub(super) fn due(
    point: KillPoint,
    fresh: &[Marker],
    all: &[Marker],
    elapsed: Duration,
    random_at: Duration,
    locks_of: impl Fn(&str) -> Vec<&'static str>,
    last_attempt_fails: impl Fn(&Marker) -> bool,
) -> bool {
    let running = || {
        let mut open: BTreeMap<(String, u64, u32), &Marker> = BTreeMap::new();
        for m in all {
            let key = (m.step.clone(), m.attempt, m.pid);
            match m.kind.as_str() {
                "start" => {
                    open.insert(key, m);
                }
                "end" | "fail" => {
                    open.remove(&key);
                }
                _ => {}
            }
        }
        open.into_values().cloned().collect::<Vec<_>>()
    };
    match point {
        KillPoint::Random => elapsed >= random_at,
        KillPoint::Step => {
            elapsed >= random_at.min(Duration::from_millis(400)) && !running().is_empty()
        }
        KillPoint::LockWait => running().iter().any(|m| !locks_of(&m.step).is_empty()),
        KillPoint::Backoff => fresh
            .iter()
            .any(|m| m.kind == "fail" && !last_attempt_fails(m)),
        KillPoint::Decision => fresh
            .iter()
            .any(|m| m.kind == "fail" && last_attempt_fails(m)),
        KillPoint::Write => fresh.iter().any(|m| m.kind == "end"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(kind: &str, step: &str, attempt: u64, at: u128, pid: u32) -> Marker {
        Marker {
            kind: kind.to_owned(),
            step: step.to_owned(),
            attempt,
            at,
            pid,
        }
    }

    #[test]
    fn overlapping_runs_of_a_step_and_of_a_lock_are_counted() {
        let markers = vec![
            m("start", "a", 1, 0, 10),
            m("start", "a", 2, 5, 11), // the re-run starts while attempt 1 still runs
            m("end", "a", 1, 8, 10),
            m("end", "a", 2, 9, 11),
            m("start", "b", 1, 20, 12),
            m("fail", "b", 1, 30, 12),
            m("start", "b", 2, 30, 13), // back to back: no overlap
            m("end", "b", 2, 40, 13),
            m("start", "c", 1, 35, 14), // a second holder of b's lock
            m("end", "c", 1, 50, 14),
            m("start", "a", 3, 60, 15), // killed: no end, no interval
        ];
        assert_eq!(double_concurrent_runs(&markers), 1);
        let locks = |s: &str| if s == "a" { vec![] } else { vec!["db"] };
        assert_eq!(lock_overlaps(&markers, locks), 1);
    }

    /// A process carrying the execution's id that outlives the kill by 2 s is counted.
    #[test]
    fn a_process_of_the_execution_alive_after_2_s_is_an_orphan() {
        let exec = format!("exec_counts_test_{}", std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("ORCA_EXECUTION_ID", &exec)
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let (orphans, took) = watch_orphans(Some(&exec)).join().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(orphans, 1);
        assert!(took >= Duration::from_secs(2));
        assert_eq!(watch_orphans(Some("exec_nobody")).join().unwrap().0, 0);
    }
}
