//! `cargo xtask bench [pg] [--quick] [--dev] [--reps N]`: every benchmark of the project, one
//! table; `pg` runs only the PostgreSQL part (`pg_bench`, and `runner_bench --dag-only`: the
//! DAG ratios and both worker modes on postgres, ADR 0026).
//!
//! Runs (each several times; the table shows the median and the spread min–max):
//! - the store benchmark example `orca-store/benches/store_bench.rs`, if it exists;
//! - the runner benchmark `orca-services/benches/runner_bench.rs`;
//! - the PostgreSQL store benchmark `orca-store-postgres/benches/pg_bench.rs` (a throwaway
//!   server, fsync on): claim + complete per task, tasks/s with 1, 4 and 8 workers;
//! - the CLI: cold start of `orca plan list` with 100 plans, and listing 10,000 plans (wall
//!   time and peak memory of the process). The plans are one real plan created by the CLI,
//!   copied under fresh ids by a small helper (not 10,000 CLI calls).
//!
//! `--store`: only the store and runner benchmarks (what a change to the file store moves),
//! without building the `orca` binary or the PostgreSQL benchmark.
//!
//! Writes `target/bench/report.json`. `--quick` shrinks every size so the whole run takes
//! seconds, builds with the dev profile (unless `--release`), and asserts nothing about time:
//! it fails only if a benchmark cannot run.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::util::{self, Profile};

/// One measured figure across repetitions.
#[derive(Debug, Clone)]
struct Row {
    name: String,
    unit: String,
    values: Vec<f64>,
    /// `value <= target` is good.
    target: Option<f64>,
    description: String,
}

struct Options {
    quick: bool,
    /// Only the PostgreSQL figures.
    pg_only: bool,
    /// Only the store and runner benchmarks.
    store_only: bool,
    profile: Profile,
    reps: usize,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let quick = args.iter().any(|a| a == "--quick");
    let profile = if args.iter().any(|a| a == "--release") {
        Profile::Release
    } else if quick || args.iter().any(|a| a == "--dev") {
        Profile::Dev
    } else {
        Profile::Release
    };
    let reps = match args.iter().position(|a| a == "--reps") {
        Some(p) => args
            .get(p + 1)
            .and_then(|n| n.parse().ok())
            .filter(|&n: &usize| n > 0)
            .ok_or("--reps needs a positive number")?,
        None if quick => 1,
        None => 3,
    };
    let mut pg_only = false;
    for (i, a) in args.iter().enumerate() {
        if a.starts_with("--")
            && !matches!(
                a.as_str(),
                "--quick" | "--release" | "--dev" | "--reps" | "--store"
            )
        {
            return Err(format!("bench: unknown option {a}"));
        }
        let is_reps_value = i > 0 && args[i - 1] == "--reps";
        if !a.starts_with("--") && !is_reps_value {
            if a == "pg" {
                pg_only = true;
            } else {
                return Err(format!("bench: unknown part {a} (the one part is `pg`)"));
            }
        }
    }
    Ok(Options {
        quick,
        pg_only,
        store_only: args.iter().any(|a| a == "--store"),
        profile,
        reps,
    })
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let opts = parse(args)?;
    let out_dir = util::target_dir(root).join("bench");
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
    let has_store_bench = !opts.pg_only
        && root
            .join("crates/orca-store/benches/store_bench.rs")
            .is_file();

    util::say(&format!(
        "building ({} profile)…",
        if opts.profile == Profile::Release {
            "release"
        } else {
            "dev"
        }
    ));
    if !opts.pg_only && !opts.store_only {
        util::build(opts.profile, &["-p", "orca", "--bin", "orca"])?;
    }
    let runner_bench = util::build_bench(opts.profile, "orca-services", "runner_bench")?;
    let store_bench = if has_store_bench {
        Some(util::build_bench(
            opts.profile,
            "orca-store",
            "store_bench",
        )?)
    } else {
        None
    };
    let pg_bench = if opts.store_only {
        None
    } else {
        Some(util::build_bench(
            opts.profile,
            "orca-store-postgres",
            "pg_bench",
        )?)
    };

    let mut rows: Vec<Row> = Vec::new();
    for rep in 0..opts.reps {
        util::say(&format!("repetition {}/{}", rep + 1, opts.reps));
        if let Some(bin) = &store_bench {
            example(
                bin,
                &out_dir.join(format!("store-{rep}.json")),
                &opts,
                &mut rows,
            )?;
        }
        example(
            &runner_bench,
            &out_dir.join(format!("runner-{rep}.json")),
            &opts,
            &mut rows,
        )?;
        // The PostgreSQL store on a throwaway durable server (ADR 0021, 0022).
        let Some(pg_bench) = &pg_bench else {
            continue;
        };
        example(
            pg_bench,
            &out_dir.join(format!("pg-{rep}.json")),
            &opts,
            &mut rows,
        )?;
        if !opts.pg_only {
            cli(root, &opts, &mut rows)?;
        }
    }

    let (table, report) = render(&rows, &opts, has_store_bench || opts.pg_only);
    util::say(&table);
    let path = out_dir.join("report.json");
    let bytes = serde_json::to_vec_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
    util::say(&format!("wrote {}", path.display()));
    Ok(())
}

fn add(rows: &mut Vec<Row>, name: &str, unit: &str, value: f64, target: Option<f64>, desc: &str) {
    if let Some(row) = rows.iter_mut().find(|r| r.name == name) {
        row.values.push(value);
        desc.clone_into(&mut row.description);
    } else {
        rows.push(Row {
            name: name.to_owned(),
            unit: unit.to_owned(),
            values: vec![value],
            target,
            description: desc.to_owned(),
        });
    }
}

/// Runs a benchmark example with `--json PATH` and collects its figures
/// (`{"figures": [{"name", "value", "unit", "target", "description"}]}`).
fn example(
    bin: &Path,
    json_path: &Path,
    opts: &Options,
    rows: &mut Vec<Row>,
) -> Result<(), String> {
    let _ = std::fs::remove_file(json_path);
    let mut cmd = util::command(bin);
    if opts.quick {
        cmd.arg("--quick");
    }
    if opts.pg_only {
        // The runner benchmark's postgres figures only (pg_bench ignores it).
        cmd.arg("--dag-only");
    }
    let out = cmd
        .arg("--json")
        .arg(json_path)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}): {}",
            bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let Ok(text) = std::fs::read_to_string(json_path) else {
        // A benchmark without JSON output: show what it printed.
        util::say(String::from_utf8_lossy(&out.stdout).trim());
        return Ok(());
    };
    let doc: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not JSON: {e}", json_path.display()))?;
    // The store benchmark writes a flat object: map its figures.
    for (key, name, unit, target, desc) in [
        (
            "task_vs_raw_write",
            "store_task_vs_raw_write",
            "x",
            Some(1.5),
            "one task claim + complete, each with its audit entry (fsync on) / one raw atomic file write",
        ),
        (
            "growth_ratio",
            "store_growth_1000_100",
            "x",
            Some(10.5),
            "store time of a 1,000-task execution / a 100-task one",
        ),
        (
            "list_plans_ms",
            "store_list_10k_plans_ms",
            "ms",
            Some(250.0),
            "FileStore::list_plans of 10,000 plans, fresh store (cache warm)",
        ),
        (
            "list_plans_uncached_ms",
            "store_list_10k_plans_nocache_ms",
            "ms",
            None,
            "the same, first listing (no cache)",
        ),
        (
            "raw_atomic_write_ms",
            "store_raw_atomic_write_ms",
            "ms",
            None,
            "temp + fsync + rename + dir fsync",
        ),
        (
            "task_claim_complete_ms",
            "store_task_claim_complete_ms",
            "ms",
            None,
            "one task claim + complete through FileStore, each with its audit entry (one write each)",
        ),
    ] {
        if let Some(value) = doc[key].as_f64() {
            add(rows, name, unit, value, target, desc);
        }
    }
    for f in doc["figures"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let (Some(name), Some(value)) = (f["name"].as_str(), f["value"].as_f64()) else {
            continue;
        };
        add(
            rows,
            name,
            f["unit"].as_str().unwrap_or(""),
            value,
            f["target"].as_f64(),
            f["description"].as_str().unwrap_or(""),
        );
    }
    Ok(())
}

const PLAN: &str = r#"{
  "goal": "A plan for the listing benchmark",
  "summary": "Two shell steps.",
  "steps": [
    { "id": "one", "agent": "shell", "description": "first", "command": "true", "depends_on": [] },
    { "id": "two", "agent": "shell", "description": "second", "command": "true", "depends_on": ["one"] }
  ],
  "assumptions": ["none"], "risks": ["none"], "verification": ["none"]
}"#;

/// Creates `n` plans in the project at `dir`: one through the CLI, the others copies of its
/// file under fresh plan ids.
fn make_plans(bin: &Path, dir: &Path, n: usize) -> Result<(), String> {
    let doc = dir.join("plan.json");
    std::fs::write(&doc, PLAN).map_err(|e| e.to_string())?;
    let out = util::orca_ok(
        bin,
        dir,
        &["--json", "plan", "create", "--file", &doc.to_string_lossy()],
    )?;
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("plan create --json: {e}"))?;
    let id = v["plan_id"]
        .as_str()
        .ok_or("plan create: no plan_id")?
        .to_owned();
    let plans = dir.join(".orca/plans");
    let text = std::fs::read_to_string(plans.join(format!("{id}.json")))
        .map_err(|e| format!("reading the plan file of {id}: {e}"))?;
    let uuid = id.strip_prefix("plan_").unwrap_or(&id).to_owned();
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    for i in 1..n {
        let fresh = util::uuid_v7(ms + i as u64);
        let copy = text.replace(&uuid, &fresh);
        let path = plans.join(format!("{}.json", id.replace(&uuid, &fresh)));
        std::fs::write(&path, copy).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

fn cli(root: &Path, opts: &Options, rows: &mut Vec<Row>) -> Result<(), String> {
    let bin = util::built(root, opts.profile, "orca");
    let list = |dir: &PathBuf| {
        let mut cmd = util::command(&bin);
        cmd.arg("--root").arg(dir).args(["--json", "plan", "list"]);
        util::run_measured(&mut cmd)
    };
    let small = util::scratch(root, "bench/plans-100")?;
    make_plans(&bin, &small, 100)?;
    let _ = std::fs::remove_dir_all(small.join(".orca/cache"));
    let cold = list(&small)?;
    if !cold.success {
        return Err("`orca plan list` failed with 100 plans".into());
    }
    add(
        rows,
        "cli_plan_list_cold_100_ms",
        "ms",
        cold.wall.as_secs_f64() * 1e3,
        None,
        "cold start of `orca plan list --json`, 100 plans, no listing cache",
    );

    let n = if opts.quick { 1000 } else { 10_000 };
    let big = util::scratch(root, "bench/plans-many")?;
    make_plans(&bin, &big, n)?;
    let _ = std::fs::remove_dir_all(big.join(".orca/cache"));
    let first = list(&big)?;
    let warm = list(&big)?;
    if !first.success || !warm.success {
        return Err(format!("`orca plan list` failed with {n} plans"));
    }
    add(
        rows,
        "cli_plan_list_10k_ms",
        "ms",
        warm.wall.as_secs_f64() * 1e3,
        Some(250.0),
        &format!("`orca plan list --json`, {n} plans (listing cache warm), wall time"),
    );
    add(
        rows,
        "cli_plan_list_10k_rss_mib",
        "MiB",
        warm.max_rss_kib as f64 / 1024.0,
        Some(64.0),
        &format!("peak RSS of that process, {n} plans"),
    );
    add(
        rows,
        "cli_plan_list_10k_nocache_ms",
        "ms",
        first.wall.as_secs_f64() * 1e3,
        None,
        &format!("the first listing of {n} plans (no cache: every file read)"),
    );
    add(
        rows,
        "cli_plan_list_10k_nocache_rss_mib",
        "MiB",
        first.max_rss_kib as f64 / 1024.0,
        None,
        "peak RSS of that process",
    );
    let _ = std::fs::remove_dir_all(&big);
    Ok(())
}

fn render(rows: &[Row], opts: &Options, has_store_bench: bool) -> (String, Value) {
    use std::fmt::Write as _;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n{:<34} {:>10} {:>19} {:>8} {:>5}  what",
        "figure", "median", "spread (min-max)", "target", "met?"
    );
    let mut items = Vec::new();
    for r in rows {
        let (median, min, max) = util::stats(&r.values);
        let met = r.target.map(|t| median <= t);
        let met_text = match (opts.quick, met) {
            (true, Some(_)) => "(q)",
            (false, Some(true)) => "yes",
            (false, Some(false)) => "NO",
            (_, None) => "-",
        };
        let target = r
            .target
            .map_or_else(|| "-".to_owned(), |t| format!("<={t}"));
        let _ = writeln!(
            t,
            "{:<34} {:>8.3}{:<2} {:>9.3}-{:<9.3} {:>8} {:>5}  {}",
            r.name, median, r.unit, min, max, target, met_text, r.description
        );
        items.push(json!({
            "figure": r.name, "unit": r.unit, "median": median, "min": min, "max": max,
            "values": r.values, "target": r.target, "met": if opts.quick { None } else { met },
            "description": r.description,
        }));
    }
    side_by_side(&mut t, rows);
    if opts.quick {
        let _ = writeln!(t, "(quick run: small sizes; targets are not judged)");
    }
    if !has_store_bench {
        let _ = writeln!(
            t,
            "(no crates/orca-store/benches/store_bench.rs in this tree: store figures missing)"
        );
    }
    let report = json!({
        "quick": opts.quick,
        "profile": opts.profile.dir(),
        "repetitions": opts.reps,
        "machine": machine(),
        "figures": items,
    });
    (t, report)
}

/// orca's workers beside the bare job queue, one line per worker count (medians over the
/// repetitions), when the runner benchmark measured them.
fn side_by_side(t: &mut String, rows: &[Row]) {
    use std::fmt::Write as _;
    let median = |name: String| {
        rows.iter()
            .find(|r| r.name == name)
            .map(|r| util::stats(&r.values).0)
    };
    let mut lines = Vec::new();
    for w in [1, 2, 4, 8, 16] {
        if let (Some(bare), Some(orca)) = (
            median(format!("pg_bare_{w}w_per_s")),
            median(format!("pg_orca_{w}w_per_s")),
        ) {
            lines.push(format!(
                "{w:>7}  {bare:>11.0}  {orca:>12.0}  {:>10.2}x",
                bare / orca.max(f64::MIN_POSITIVE)
            ));
        }
    }
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(
        t,
        "\norca beside a bare SKIP LOCKED queue on the same server (goal: bare ÷ orca ≤ 2x)\n\
         workers  bare jobs/s  orca tasks/s  bare ÷ orca"
    );
    for l in lines {
        let _ = writeln!(t, "{l}");
    }
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_default();
    json!({ "cpu": cpu, "cores": cores, "memory": mem, "os": std::env::consts::OS })
}
