//! `cargo xtask torture [--kills N] [--dev|--release] [--seed S]`: a kill -9 campaign on the real
//! binary (the release build; the dev build by default when N < 20, as in CI).
//!
//! A 50-task DAG of `shell` steps (5 layers × 10, each step depending on two of the layer
//! before; two shared locks; five steps fail their first attempt using `$ORCA_ATTEMPT`, and
//! one fails its first three, so the runner asks for a decision, answered `retry`). Each step
//! appends start/end markers with timestamps and its pid, runs a child `sleep`, and appends
//! `step-id attempt` to an effects file (one `O_APPEND` write). Rounds: start `orca run` (or
//! `orca exec resume` once the execution exists), SIGKILL it at the next kill point (during a
//! step, during backoff, during a lock wait, during a decision — right after the last failing
//! attempt, or while the next process applies the answered decision —, during a write, at
//! random), resume, … until a process finishes on its own; then check the round.
//!
//! Printed per campaign, and each must be 0 (else the command fails): completions lost (a task
//! not completed, or a succeeded attempt without its effect), **double concurrent runs** (two
//! runs of one step overlapping in time, from the markers), **lock overlaps** (two holders of
//! one lock overlapping in time), orphans (processes carrying the execution's id still alive
//! 2 s after a kill), failed resumes, logs that did not verify. Also checked (an error if
//! broken): every effect line names an attempt recorded in the task's record (no silent extra
//! run), and no `(step, attempt)` appears twice; every file under `.orca/` parses (leftover
//! `.*.tmp` files of interrupted atomic writes are counted).
//!
//! Then: two `orca exec resume` at once on one interrupted execution → exactly one drives it
//! to the end, the other exits non-zero saying the execution is "being driven by another
//! process"; and a full disk.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{self, Profile};

mod counts;
mod rounds;
mod totals;
use rounds::{Files, round};
use totals::{Totals, report};

const LAYERS: usize = 5;
const WIDTH: usize = 10;
/// A run that takes longer than this without being killed is stuck.
pub(super) const STUCK: Duration = Duration::from_secs(60);

struct Options {
    kills: usize,
    profile: Profile,
    seed: u64,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        kills: 5,
        profile: Profile::Release,
        seed: fastrand::u64(..),
    };
    let mut profile = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--kills" => {
                o.kills = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--kills needs a number")?;
            }
            "--seed" => {
                o.seed = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--seed needs a number")?;
            }
            "--dev" => profile = Some(Profile::Dev),
            "--release" => profile = Some(Profile::Release),
            other => return Err(format!("torture: unknown option {other}")),
        }
    }
    // A short campaign (CI) uses the dev build the test suite already made; a full one the
    // release binary.
    o.profile = profile.unwrap_or(if o.kills < 20 {
        Profile::Dev
    } else {
        Profile::Release
    });
    Ok(o)
}

/// The locks a torture step holds.
pub(super) fn locks_of(step: &str) -> Vec<&'static str> {
    let w: usize = step
        .rsplit('-')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or(usize::MAX);
    let mut locks = Vec::new();
    if w.is_multiple_of(3) {
        locks.push("db");
    }
    if w % 4 == 1 {
        locks.push("cache");
    }
    locks
}

/// The step that fails its first three attempts: after the third the runner asks for a
/// decision (the campaign answers `retry`).
pub(super) const DECIDER: &str = "s2-7";

fn plan_document(effects: &Path, markers: &Path) -> String {
    let effects = effects.display();
    let markers = markers.display();
    let mut steps = Vec::new();
    for l in 0..LAYERS {
        for w in 0..WIDTH {
            let id = format!("s{l}-{w}");
            let deps: Vec<String> = if l == 0 {
                Vec::new()
            } else {
                vec![
                    format!("s{}-{w}", l - 1),
                    format!("s{}-{}", l - 1, (w + 1) % WIDTH),
                ]
            };
            let locks = locks_of(&id);
            // Most steps are short; two per layer take most of a second, so a run they outlive
            // would overlap their re-run (double runs) or a lock's next holder.
            let ms = if w == 4 || w == 6 {
                600 + (l * 70) % 300
            } else {
                20 + (l * WIDTH + w) * 7 % 60
            };
            let sleep = format!("{}.{:03}", ms / 1000, ms % 1000);
            let fails_until = match (w, id.as_str()) {
                (_, DECIDER) => 3,
                (7, _) => 1,
                _ => 0,
            };
            // Start and end markers with timestamps (double runs, lock overlaps); the sleeps are
            // children of the step's shell, and `sleep 3` is left behind when the step ends (an
            // orphan 2 s after a kill if the group were not ended).
            let mark = |kind: &str| {
                format!(
                    "echo \"{kind} $ORCA_TASK_ID $ORCA_ATTEMPT $(date +%s%N) $$\" >> '{markers}'"
                )
            };
            let command = format!(
                "{start}; sleep 3 & sleep {sleep} & wait $!; echo \"$ORCA_TASK_ID $ORCA_ATTEMPT\" >> '{effects}'; \
                 if [ \"$ORCA_ATTEMPT\" -le {fails_until} ]; then {fail}; exit 1; fi; {end}",
                start = mark("start"),
                fail = mark("fail"),
                end = mark("end"),
            );
            steps.push(json!({
                "id": id, "agent": "shell", "description": format!("torture step {id}"),
                "command": command, "depends_on": deps, "locks": locks,
            }));
        }
    }
    json!({
        "goal": "torture: survive kill -9 at any moment",
        "steps": steps,
        "assumptions": ["a POSIX shell"],
        "risks": ["none"],
        "verification": ["xtask torture checks the record"],
    })
    .to_string()
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let opts = parse(args)?;
    fastrand::seed(opts.seed);
    util::say(&format!(
        "torture: {} kills, seed {} ({} build)",
        opts.kills,
        opts.seed,
        opts.profile.dir()
    ));
    util::build(opts.profile, &["-p", "orca", "--bin", "orca"])?;
    let bin = util::built(root, opts.profile, "orca");
    let dir = util::scratch(root, "torture")?;
    let effects = dir.join("effects.log");
    let markers = dir.join("markers.log");
    let doc = dir.join("torture-plan.json");
    std::fs::write(&doc, plan_document(&effects, &markers)).map_err(|e| e.to_string())?;
    let out = util::orca_ok(
        &bin,
        &dir,
        &["--json", "plan", "create", "--file", &doc.to_string_lossy()],
    )?;
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("plan create --json: {e}"))?;
    let plan = v["plan_id"]
        .as_str()
        .ok_or("plan create: no plan_id")?
        .to_owned();
    util::orca_ok(&bin, &dir, &["plan", "approve", &plan])?;

    let started = Instant::now();
    let mut rounds = 0usize;
    let mut totals = Totals::default();
    while totals.kills < opts.kills || rounds == 0 {
        rounds += 1;
        let _ = std::fs::remove_file(&effects);
        let _ = std::fs::remove_file(&markers);
        let files = Files {
            effects: &effects,
            markers: &markers,
        };
        let budget = opts.kills.saturating_sub(totals.kills);
        let (exec, r) = round(&bin, &dir, &plan, (budget, totals.kills), files)?;
        let t = check(&bin, &dir, &exec, files)
            .map_err(|e| format!("round {rounds} ({exec}, {} kills): {e}", r.kills))?;
        util::say(&format!(
            "round {rounds}: {exec} after {} kills: {} attempts recorded, {} extra effects \
             explained, {} abandoned; lost {}, double runs {}, lock overlaps {}, orphans {}, \
             failed resumes {}, unverified logs {}",
            r.kills,
            t.attempts,
            t.extra_effects,
            t.abandoned,
            t.completions_lost,
            t.double_runs,
            t.lock_overlaps,
            r.orphans,
            r.failed_resumes,
            t.unverified_logs
        ));
        totals.add(&t);
        totals.add_round(&r);
    }
    concurrent_resume(&bin, &dir, &effects)?;
    full_disk(&bin, &dir)?;
    report(&totals, rounds, started.elapsed(), opts.seed)
}

pub(super) fn executions(bin: &Path, dir: &Path, plan: &str) -> Result<Vec<String>, String> {
    let out = util::orca_ok(bin, dir, &["--json", "exec", "list", "--plan", plan])?;
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("exec list --json: {e}"))?;
    Ok(v.as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e["execution_id"].as_str().map(str::to_owned))
        .collect())
}

/// Checks a finished round: counts what the campaign reports (completions lost, double runs,
/// lock overlaps, logs that did not verify); any other broken invariant is an error.
fn check(bin: &Path, dir: &Path, exec: &str, files: Files<'_>) -> Result<Totals, String> {
    let effects = files.effects;
    let mut t = Totals::default();
    let mut problems = Vec::new();
    let out = util::orca_ok(bin, dir, &["--json", "exec", "show", exec])?;
    let snap: Value = serde_json::from_str(&out).map_err(|e| format!("exec show --json: {e}"))?;
    if snap["stage"].as_str() != Some("completed") {
        t.completions_lost += 1;
        util::say(&format!("lost: execution stage is {}", snap["stage"]));
    }
    // (step, attempt) → outcome, from the records.
    let mut recorded: BTreeMap<(String, u64), String> = BTreeMap::new();
    let mut succeeded: BTreeMap<String, u64> = BTreeMap::new();
    let tasks = snap["tasks"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if tasks.len() != LAYERS * WIDTH {
        problems.push(format!(
            "{} tasks, expected {}",
            tasks.len(),
            LAYERS * WIDTH
        ));
    }
    for task in tasks {
        let step = task["step_id"].as_str().unwrap_or("?").to_owned();
        if task["status"].as_str() != Some("completed") {
            t.completions_lost += 1;
            util::say(&format!("lost: task {step} is {}", task["status"]));
        }
        for a in task["attempts"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let n = a["number"].as_u64().unwrap_or(0);
            let outcome = a["outcome"]["outcome"].as_str().unwrap_or("?").to_owned();
            t.attempts += 1;
            match outcome.as_str() {
                "succeeded" => {
                    succeeded.insert(step.clone(), n);
                }
                "abandoned" => t.abandoned += 1,
                "failed" => t.failed += 1,
                _ => {}
            }
            if recorded.insert((step.clone(), n), outcome).is_some() {
                problems.push(format!("task {step}: attempt {n} recorded twice"));
            }
        }
    }
    let text = std::fs::read_to_string(effects).unwrap_or_default();
    let mut seen: BTreeSet<(String, u64)> = BTreeSet::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.split_whitespace();
        let (Some(step), Some(Ok(n)), None) = (
            parts.next(),
            parts.next().map(str::parse::<u64>),
            parts.next(),
        ) else {
            problems.push(format!("torn effect line {line:?}"));
            continue;
        };
        let key = (step.to_owned(), n);
        if !seen.insert(key.clone()) {
            problems.push(format!(
                "effect {step} attempt {n} happened twice (doubled)"
            ));
        }
        match recorded.get(&key).map(String::as_str) {
            None => problems.push(format!(
                "effect {step} attempt {n} has no recorded attempt (silent extra run)"
            )),
            Some("succeeded") => {}
            Some(_) => t.extra_effects += 1,
        }
    }
    for (step, n) in &succeeded {
        if !seen.contains(&(step.clone(), *n)) {
            t.completions_lost += 1;
            util::say(&format!(
                "lost: task {step}: succeeded attempt {n} left no effect"
            ));
        }
    }
    let markers = counts::read_markers(files.markers);
    t.double_runs = counts::double_concurrent_runs(&markers);
    t.lock_overlaps = counts::lock_overlaps(&markers, locks_of);
    t.tmp_files = parse_store(&dir.join(".orca"), &mut problems);
    let (ok, out, err) = util::orca(bin, dir, &["audit", "verify", "--all"])?;
    if !ok {
        t.unverified_logs += 1;
        util::say(&format!(
            "audit verify --all failed: {}{}",
            err.trim(),
            out.trim()
        ));
    }
    if problems.is_empty() {
        Ok(t)
    } else {
        let mut msg = format!("{} problems:", problems.len());
        for p in problems.iter().take(20) {
            let _ = write!(msg, "\n  - {p}");
        }
        Err(msg)
    }
}

/// Parses every file under `.orca/`; returns the number of leftover temp files.
fn parse_store(dir: &Path, problems: &mut Vec<String>) -> usize {
    let mut tmp = 0;
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            problems.push(format!("cannot read {}", d.display()));
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.ends_with(".tmp") {
                tmp += 1;
                continue;
            }
            let Ok(bytes) = std::fs::read(&path) else {
                problems.push(format!("cannot read {}", path.display()));
                continue;
            };
            if name.ends_with(".jsonl") {
                for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
                    if !line.is_empty() && serde_json::from_slice::<Value>(line).is_err() {
                        problems.push(format!("{} line {}: not JSON", path.display(), i + 1));
                    }
                }
            } else if name.ends_with(".json") && serde_json::from_slice::<Value>(&bytes).is_err() {
                problems.push(format!("{}: not JSON", path.display()));
            }
        }
    }
    tmp
}

/// Two `orca exec resume` at once on one interrupted execution.
fn concurrent_resume(bin: &Path, dir: &Path, effects: &Path) -> Result<(), String> {
    // A plan with one slow step, so the first resume is still driving when the second starts.
    let doc = dir.join("slow-plan.json");
    let text = json!({
        "goal": "concurrent resume",
        "steps": [{
            "id": "slow", "agent": "shell", "description": "slow", "depends_on": [],
            "command": format!("sleep 1.5 && echo \"$ORCA_STEP_ID $ORCA_ATTEMPT\" >> '{}'", effects.display()),
        }],
        "assumptions": ["a"], "risks": ["r"], "verification": ["v"],
    })
    .to_string();
    std::fs::write(&doc, text).map_err(|e| e.to_string())?;
    let out = util::orca_ok(
        bin,
        dir,
        &["--json", "plan", "create", "--file", &doc.to_string_lossy()],
    )?;
    let v: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
    let plan = v["plan_id"]
        .as_str()
        .ok_or("plan create: no plan_id")?
        .to_owned();
    // Start a run and kill it once the execution exists.
    let mut first = util::command(bin)
        .arg("--root")
        .arg(dir)
        .args(["--quiet", "run", &plan, "--yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let exec = loop {
        if let Some(e) = executions(bin, dir, &plan)?.into_iter().next() {
            break e;
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = first.kill();
            return Err("concurrent resume: the execution was never created".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = first.kill();
    let _ = first.wait();
    let spawn = || {
        util::command(bin)
            .arg("--root")
            .arg(dir)
            .args(["--quiet", "exec", "resume", &exec])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())
    };
    let a = spawn()?;
    let b = spawn()?;
    let (a, b) = (
        a.wait_with_output().map_err(|e| e.to_string())?,
        b.wait_with_output().map_err(|e| e.to_string())?,
    );
    let outcomes = [&a, &b];
    let winners = outcomes.iter().filter(|o| o.status.success()).count();
    let losers: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_owned())
        .collect();
    if winners != 1 || losers.len() != 1 {
        return Err(format!(
            "concurrent resume: {winners} processes succeeded (expected exactly 1); stderr: {losers:?}"
        ));
    }
    if !losers[0].contains("being driven by another process") {
        return Err(format!(
            "concurrent resume: the second process did not say the execution is being driven \
             by another process: {:?}",
            losers[0]
        ));
    }
    let out = util::orca_ok(bin, dir, &["--json", "exec", "show", &exec])?;
    let snap: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
    if snap["stage"].as_str() != Some("completed") {
        return Err(format!(
            "concurrent resume: execution ended {}",
            snap["stage"]
        ));
    }
    util::say(&format!(
        "concurrent resume: one driver; the other said: {}",
        losers[0]
    ));
    Ok(())
}

/// A real full disk: a 1 MiB tmpfs (when this process may mount one; else skipped, and the
/// store-wrapper test `orca-services/tests/faults.rs` covers it), filled up but for a few
/// KiB, then `orca run` → a clear error, every file still parses, the audit verifies; space
/// back → `orca exec resume` completes.
fn full_disk(bin: &Path, dir: &Path) -> Result<(), String> {
    let mnt = dir.join("full-disk");
    std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "orca-torture"])
        .arg(&mnt)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        util::say(
            "full disk: skipped (cannot mount a tmpfs here; see orca-services/tests/faults.rs)",
        );
        return Ok(());
    }
    let result = full_disk_in(bin, &mnt);
    let _ = Command::new("umount").arg(&mnt).status();
    result
}

fn full_disk_in(bin: &Path, root: &Path) -> Result<(), String> {
    let steps: Vec<Value> = (0..6)
        .map(|i| {
            json!({
                "id": format!("w{i}"), "agent": "shell", "description": "write some output",
                "command": "head -c 3000 /dev/zero | tr '\\0' x",
                "depends_on": if i == 0 { vec![] } else { vec![format!("w{}", i - 1)] },
            })
        })
        .collect();
    let doc = root.join("plan.json");
    let text = json!({ "goal": "full disk", "steps": steps, "assumptions": ["a"],
                       "risks": ["r"], "verification": ["v"] });
    std::fs::write(&doc, text.to_string()).map_err(|e| e.to_string())?;
    let out = util::orca_ok(
        bin,
        root,
        &["--json", "plan", "create", "--file", &doc.to_string_lossy()],
    )?;
    let v: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
    let plan = v["plan_id"]
        .as_str()
        .ok_or("plan create: no plan_id")?
        .to_owned();
    util::orca_ok(bin, root, &["plan", "approve", &plan])?;
    // Fill the disk, then give back a little room: enough, ideally, to fail mid-run; less
    // each time the run still fits.
    let filler = root.join("filler");
    let mut failure = None;
    for reserve in [48 * 1024, 16 * 1024, 0u64] {
        fill(&filler, reserve)?;
        let (ok, _, err) = util::orca(
            bin,
            root,
            &["--quiet", "run", &plan, "--yes", "--on-failure", "stop"],
        )?;
        if !ok {
            failure = Some(err);
            break;
        }
    }
    let err = failure.ok_or("full disk: `orca run` succeeded on a full disk")?;
    let last = err.trim().lines().last().unwrap_or_default().to_owned();
    if !last.contains("No space left on device") {
        return Err(format!(
            "full disk: the error does not say the disk is full: {err:?}"
        ));
    }
    let mut problems = Vec::new();
    parse_store(&root.join(".orca"), &mut problems);
    if !problems.is_empty() {
        return Err(format!("full disk: files do not parse: {problems:?}"));
    }
    let (ok, out, err) = util::orca(bin, root, &["audit", "verify", "--all"])?;
    if !ok {
        return Err(format!(
            "full disk: audit verify failed on the full disk: {}{}",
            err.trim(),
            out.trim()
        ));
    }
    // Space back: resume what the full disk interrupted (or run again if it never started).
    std::fs::remove_file(&filler).map_err(|e| e.to_string())?;
    let interrupted = unfinished(bin, root, &plan)?;
    if interrupted.is_empty() {
        util::orca_ok(bin, root, &["--quiet", "run", &plan, "--yes"])?;
    }
    for e in &interrupted {
        util::orca_ok(bin, root, &["--quiet", "exec", "resume", e])?;
    }
    if !unfinished(bin, root, &plan)?.is_empty() {
        return Err("full disk: an execution did not complete once space was back".into());
    }
    util::orca_ok(bin, root, &["audit", "verify", "--all"])?;
    util::say(&format!(
        "full disk (1 MiB tmpfs): `orca run` failed with: {last}; every file parsed, audit verified; resumed to completed once space was back"
    ));
    Ok(())
}

/// Fills the disk holding `filler`, then frees `reserve` bytes.
fn fill(filler: &Path, reserve: u64) -> Result<(), String> {
    use std::io::Write as _;
    let mut f = std::fs::File::create(filler).map_err(|e| e.to_string())?;
    let chunk = vec![0u8; 4096];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    f.set_len(len.saturating_sub(reserve))
        .map_err(|e| e.to_string())
}

/// The executions of a plan that are not completed.
fn unfinished(bin: &Path, dir: &Path, plan: &str) -> Result<Vec<String>, String> {
    let out = util::orca_ok(bin, dir, &["--json", "exec", "list", "--plan", plan])?;
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("exec list --json: {e}"))?;
    Ok(v.as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|e| e["stage"].as_str() != Some("completed"))
        .filter_map(|e| e["execution_id"].as_str().map(str::to_owned))
        .collect())
}
