//! `cargo xtask torture [--kills N] [--dev|--release] [--seed S]`: a kill -9 campaign on the real
//! binary (the release build; the dev build by default when N < 20, as in CI).
//!
//! A 50-task DAG of `shell` steps (5 layers × 10, each step depending on two of the layer
//! before; two shared locks; five steps fail their first attempt using `$ORCA_ATTEMPT`). Each
//! step appends `step-id attempt` to an effects file (one `O_APPEND` write). Rounds: start
//! `orca run` (or `orca exec resume` once the execution exists), SIGKILL it at a random moment,
//! resume, … until a process finishes on its own; then check the round:
//! - the execution is completed and every task is completed;
//! - the succeeding attempt of every task left its effect;
//! - every effect line names an attempt recorded in the task's record (no silent extra run),
//!   and no `(step, attempt)` appears twice (never doubled); extra effects belong to attempts
//!   recorded as failed or abandoned;
//! - every file under `.orca/` parses (JSON, JSON lines; lock, lease and index files are
//!   checked to be readable), except leftover `.*.tmp` files of interrupted atomic writes,
//!   which are counted;
//! - `orca audit verify --all` passes.
//!
//! Rounds repeat until N kills happened in total. Then: two `orca exec resume` at once on one
//! interrupted execution → exactly one drives it to the end, the other exits non-zero saying
//! the execution is "being driven by another process".

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{self, Profile};

const LAYERS: usize = 5;
const WIDTH: usize = 10;
/// A run that takes longer than this without being killed is stuck.
const STUCK: Duration = Duration::from_secs(60);

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

fn plan_document(effects: &Path) -> String {
    let effects = effects.display();
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
            let mut locks = Vec::new();
            if w % 3 == 0 {
                locks.push("db");
            }
            if w % 4 == 1 {
                locks.push("cache");
            }
            let sleep = 20 + (l * WIDTH + w) * 7 % 60;
            let fail_first = if w == 7 {
                " && test \"$ORCA_ATTEMPT\" -gt 1"
            } else {
                ""
            };
            let command = format!(
                "sleep 0.0{sleep:02} && echo \"$ORCA_STEP_ID $ORCA_ATTEMPT\" >> '{effects}'{fail_first}"
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
    let doc = dir.join("torture-plan.json");
    std::fs::write(&doc, plan_document(&effects)).map_err(|e| e.to_string())?;
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
    let mut kills = 0usize;
    let mut rounds = 0usize;
    let mut totals = Totals::default();
    while kills < opts.kills || rounds == 0 {
        rounds += 1;
        let _ = std::fs::remove_file(&effects);
        let (exec, k) = round(&bin, &dir, &plan, opts.kills.saturating_sub(kills))?;
        kills += k;
        let t = check(&bin, &dir, &exec, &effects)
            .map_err(|e| format!("round {rounds} ({exec}, {k} kills): {e}"))?;
        util::say(&format!(
            "round {rounds}: {exec} completed after {k} kills; {} attempts recorded, {} extra \
             effects explained, {} abandoned attempts, {} leftover temp files in .orca/ so far",
            t.attempts, t.extra_effects, t.abandoned, t.tmp_files
        ));
        totals.add(&t);
    }
    concurrent_resume(&bin, &dir, &effects)?;
    full_disk(&bin, &dir)?;
    util::say(&format!(
        "torture passed: {kills} kills over {rounds} rounds in {:.1} s; {} extra effects, all \
         explained by {} recorded abandoned/failed attempts; {} leftover temp files; concurrent \
         resume: exactly one driver",
        started.elapsed().as_secs_f64(),
        totals.extra_effects,
        totals.abandoned + totals.failed,
        totals.tmp_files
    ));
    Ok(())
}

/// Runs one execution to its end, killing the process up to `budget` times (at least once
/// when the budget allows). Returns the execution id and the number of kills.
fn round(bin: &Path, dir: &Path, plan: &str, budget: usize) -> Result<(String, usize), String> {
    let mut exec: Option<String> = None;
    let known: BTreeSet<String> = executions(bin, dir, plan)?.into_iter().collect();
    let mut kills = 0usize;
    loop {
        let mut cmd = util::command(bin);
        cmd.arg("--root").arg(dir).arg("--quiet");
        match &exec {
            None => cmd.args(["run", plan, "--yes"]),
            Some(e) => cmd.args(["exec", "resume", e]),
        };
        cmd.args([
            "--on-failure",
            "stop",
            "--max-attempts",
            "3",
            "--concurrency",
            "4",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("cannot start orca: {e}"))?;
        let kill_at =
            (kills < budget.max(1)).then(|| Duration::from_millis(fastrand::u64(30..900)));
        let status = util::wait_with_deadline(&mut child, kill_at.unwrap_or(STUCK))?;
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
            None if kill_at.is_some() => kills += 1,
            None => return Err(format!("orca did not finish within {} s", STUCK.as_secs())),
            Some(s) if s.success() => {
                let exec = exec.ok_or("orca run succeeded but created no execution")?;
                return Ok((exec, kills));
            }
            Some(s) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(format!("orca exited {s}: {}", err.trim()));
            }
        }
    }
}

fn executions(bin: &Path, dir: &Path, plan: &str) -> Result<Vec<String>, String> {
    let out = util::orca_ok(bin, dir, &["--json", "exec", "list", "--plan", plan])?;
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("exec list --json: {e}"))?;
    Ok(v.as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e["execution_id"].as_str().map(str::to_owned))
        .collect())
}

#[derive(Debug, Default)]
struct Totals {
    attempts: usize,
    extra_effects: usize,
    abandoned: usize,
    failed: usize,
    tmp_files: usize,
}

impl Totals {
    fn add(&mut self, o: &Self) {
        self.attempts += o.attempts;
        self.extra_effects += o.extra_effects;
        self.abandoned += o.abandoned;
        self.failed += o.failed;
        // The store directory is shared by the rounds: the latest count is the total.
        self.tmp_files = o.tmp_files;
    }
}

/// Checks a finished round.
fn check(bin: &Path, dir: &Path, exec: &str, effects: &Path) -> Result<Totals, String> {
    let mut t = Totals::default();
    let mut problems = Vec::new();
    let out = util::orca_ok(bin, dir, &["--json", "exec", "show", exec])?;
    let snap: Value = serde_json::from_str(&out).map_err(|e| format!("exec show --json: {e}"))?;
    if snap["stage"].as_str() != Some("completed") {
        problems.push(format!("execution stage is {}", snap["stage"]));
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
            problems.push(format!("task {step} is {}", task["status"]));
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
            problems.push(format!(
                "task {step}: succeeded attempt {n} left no effect (lost)"
            ));
        }
    }
    t.tmp_files = parse_store(&dir.join(".orca"), &mut problems);
    let (ok, out, err) = util::orca(bin, dir, &["audit", "verify", "--all"])?;
    if !ok {
        problems.push(format!(
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
