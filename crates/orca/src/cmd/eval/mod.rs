//! `orca eval`: how often a setup of agents gets real tasks right, with proof (ADR 0047,
//! `docs/eval.md`). `run` measures a suite, `verify` recomputes a report from its kept trials,
//! `compare` shows what changed between two reports.

mod compare;
mod measure;
mod report;
mod suite;
mod trial;
mod verify;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use orca_core::{AgentPort as _, Digest};
use time::format_description::well_known::Rfc3339;

use crate::app::{out, out_json};
use crate::cli::Global;
use crate::exit::{CliError, Exit};
use crate::term::say;
use report::{AgentSetting, Report, SuiteRef, Trial};
use suite::Suite;

#[derive(Debug, Subcommand)]
pub(crate) enum EvalCommand {
    /// Run every task of a suite N times, each in a fresh copy with its own `.orca/`, and
    /// write a signed `report.json` and `report.md`.
    #[command(
        after_help = "Examples:\n  orca eval run examples/eval -k 3 --out /tmp/eval-a\n  orca eval run examples/eval --task add-flag --task fix-test\n\nExit codes: 0 every trial ran (whether it passed is in the report), 2 bad suite or options."
    )]
    Run(RunArgs),
    /// Recompute a report's figures from its kept trials (re-running the hidden checks) and
    /// check its signature and the suite's digest.
    #[command(
        after_help = "Exit codes: 0 the report holds, 2 unreadable, 5 a figure, trial, suite or signature does not match."
    )]
    Verify {
        /// The report (`report.json`, or its directory).
        report: PathBuf,
    },
    /// What changed between two reports, task by task: the trials that flipped, and the change
    /// in pass@1, pass^k, tokens, cost and time.
    Compare {
        /// The report before.
        a: PathBuf,
        /// The report after.
        b: PathBuf,
    },
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The suite: a directory holding `suite.toml`, or the file.
    suite: PathBuf,
    /// Trials per task.
    #[arg(short = 'k', long = "trials", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    k: u32,
    /// Trials in flight at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    concurrency: u16,
    /// Only these tasks (repeatable).
    #[arg(long = "task", value_name = "ID")]
    tasks: Vec<String>,
    /// The agents' setup every trial gets as its `.orca/config.toml` (default: the suite's
    /// `config`, else none: your user config alone).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The configured agent whose backend and model play the planner.
    #[arg(long, value_name = "NAME")]
    planner: Option<String>,
    /// The agents whose settings the report binds (repeatable; default: every agent).
    #[arg(long = "agent", value_name = "NAME")]
    agents: Vec<String>,
    /// Where the report and the trials go (a new directory, outside the suite).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// What a person watching `eval run` sees on stderr: a line per trial as it ends and, at a
/// terminal, the table per task so far, redrawn below those lines.
struct Live {
    quiet: bool,
    terminal: bool,
    /// Lines of the table drawn last (erased before the next line).
    drawn: usize,
}

impl Live {
    fn new(global: &Global) -> Self {
        use std::io::IsTerminal as _;
        Self {
            quiet: global.quiet,
            // Not with JSON logs: stderr stays JSON lines.
            terminal: std::io::stderr().is_terminal()
                && global.log_format == crate::cli::LogFormat::Human,
            drawn: 0,
        }
    }

    fn clear(&mut self) {
        if self.drawn > 0 {
            use std::io::Write as _;
            let _ = write!(std::io::stderr().lock(), "\x1b[{}A\x1b[J", self.drawn);
            self.drawn = 0;
        }
    }

    fn show(&mut self, trials: &[Trial], total: usize) {
        if self.quiet {
            return;
        }
        let Some(trial) = trials.last() else { return };
        let verdict = if trial.figures.passed {
            "passed".to_owned()
        } else {
            format!(
                "FAILED ({})",
                trial
                    .figures
                    .failure
                    .as_ref()
                    .map_or("unknown", report::Failure::name)
            )
        };
        let passed = trials.iter().filter(|t| t.figures.passed).count();
        self.clear();
        say(&format!(
            "[{}/{total}] {} #{} {verdict} in {}, {} attempt(s), {} tokens — {passed}/{} passed so far",
            trials.len(),
            trial.task,
            trial.trial,
            report::secs(trial.wall_ms),
            trial.figures.attempts,
            trial.figures.input_tokens + trial.figures.output_tokens,
            trials.len()
        ));
        if self.terminal {
            let (by_task, _) = report::figures(trials);
            let rows: Vec<Vec<String>> = by_task
                .iter()
                .map(|(task, s)| {
                    vec![
                        task.clone(),
                        format!("{}/{}", s.passed, s.trials),
                        s.failures
                            .iter()
                            .map(|(k, v)| format!("{k} ×{v}"))
                            .collect::<Vec<_>>()
                            .join(", "),
                    ]
                })
                .collect();
            let table = crate::render::table(&["TASK", "PASSED", "FAILED AS"], &rows);
            say(table.trim_end());
            self.drawn = table.trim_end().lines().count();
        }
    }
}

/// `orca eval …`.
pub(crate) async fn run(command: EvalCommand, global: &Global) -> Result<Exit, CliError> {
    match command {
        EvalCommand::Run(args) => run_suite(&args, global).await,
        EvalCommand::Verify { report } => verify::verify(&report, global).await,
        EvalCommand::Compare { a, b } => compare::compare(&a, &b, global.json),
    }
}

/// The config text every trial gets, with the planner played by `planner`'s model.
fn config_text(path: Option<&Path>, planner: Option<&str>) -> Result<Option<String>, CliError> {
    let text = match path {
        Some(p) => Some(std::fs::read_to_string(p).map_err(|e| {
            CliError::bad_input(format!("{}: cannot read the config: {e}", p.display()))
        })?),
        None => None,
    };
    let Some(name) = planner else {
        return Ok(text);
    };
    let source = path.map_or_else(|| "no config".to_owned(), |p| p.display().to_string());
    let mut table: toml::Table = toml::from_str(text.as_deref().unwrap_or(""))
        .map_err(|e| CliError::bad_input(format!("{source}: not valid TOML: {e}")))?;
    let agent = table
        .get("agents")
        .and_then(|a| a.get(name))
        .and_then(toml::Value::as_table)
        .cloned()
        .ok_or_else(|| {
            CliError::bad_input(format!("--planner {name}: no [agents.{name}] in {source}"))
        })?;
    // Its model and how to reach it; the planner keeps its own prompt and tools.
    let model: toml::Table = agent
        .into_iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "prompt" | "prompt_file" | "description" | "tools"
            )
        })
        .collect();
    let agents = table
        .entry("agents")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let Some(agents) = agents.as_table_mut() {
        agents.insert("planner".to_owned(), toml::Value::Table(model));
    }
    Ok(Some(toml::to_string(&table).map_err(|e| {
        CliError::internal(format!("cannot write the config: {e}"))
    })?))
}

/// The agents' settings as a trial's settings resolve them.
fn agent_settings(root: &Path, only: &[String]) -> Result<Vec<AgentSetting>, CliError> {
    let loaded = crate::settings::Settings::load(root)?;
    let mut all = loaded.agents.agents();
    all.sort_by(|a, b| a.id.cmp(&b.id));
    for name in only {
        if !all.iter().any(|a| a.id.as_str() == name) {
            return Err(CliError::bad_input(format!(
                "--agent {name}: no such agent in the trials' settings"
            )));
        }
    }
    Ok(all
        .into_iter()
        .filter(|a| only.is_empty() || only.iter().any(|n| n == a.id.as_str()))
        .map(|a| {
            let prompt = loaded
                .agents
                .profile(&a.id)
                .map(|p| p.prompt.clone())
                .unwrap_or_default();
            AgentSetting {
                agent_id: a.id.to_string(),
                backend: a.backend,
                model: a.model,
                prompt_digest: Digest::of_bytes(prompt.as_bytes()).to_string(),
                tools: a.workspace_tools,
            }
        })
        .collect())
}

fn default_out(name: &str) -> PathBuf {
    let stamp = time::OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_default()
        .replace([':', '-'], "");
    PathBuf::from("eval-runs").join(format!("{name}-{}", stamp.trim_end_matches('Z')))
}

fn absolute(path: &Path) -> Result<PathBuf, CliError> {
    std::path::absolute(path).map_err(|e| CliError::bad_input(format!("{}: {e}", path.display())))
}

async fn run_suite(args: &RunArgs, global: &Global) -> Result<Exit, CliError> {
    let suite = Suite::load(&args.suite)?;
    for id in &args.tasks {
        if !suite.tasks.iter().any(|t| &t.id == id) {
            return Err(CliError::bad_input(format!(
                "--task {id}: the suite has no such task"
            )));
        }
    }
    let tasks: Vec<suite::Task> = suite
        .tasks
        .iter()
        .filter(|t| args.tasks.is_empty() || args.tasks.contains(&t.id))
        .cloned()
        .collect();
    let out_dir = absolute(&args.out.clone().unwrap_or_else(|| default_out(&suite.name)))?;
    // A trial's copy must not sit beside the checks it is judged by.
    if out_dir.starts_with(&suite.dir) {
        return Err(CliError::bad_input(format!(
            "--out {}: inside the suite; its trials could read the hidden checks",
            out_dir.display()
        )));
    }
    if out_dir.exists() {
        return Err(CliError::bad_input(format!(
            "--out {}: already exists; choose a new directory",
            out_dir.display()
        )));
    }
    let config_path = args.config.clone().or_else(|| suite.config.clone());
    let config = config_text(config_path.as_deref(), args.planner.as_deref())?;
    let digest = suite.digest()?;
    let (authority, created) =
        crate::trust::authority(&out_dir, &global.trusted_key, crate::trust::KeyUse::Sign)?;
    if let Some(path) = created {
        say(&format!("created your signing key {}", path.display()));
    }
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| CliError::bad_input(format!("{}: {e}", out_dir.display())))?;
    let setup = Arc::new(trial::Setup {
        exe: std::env::current_exe()
            .map_err(|e| CliError::internal(format!("cannot find the orca binary: {e}")))?,
        config: config.clone(),
        out: out_dir.clone(),
        trusted: global.trusted_key.clone(),
    });
    let started_at = time::OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_default();
    let total = tasks.len() * args.k as usize;
    say(&format!(
        "eval {}: {} task(s) × {} = {total} trial(s), {} at once, into {}",
        suite.name,
        tasks.len(),
        args.k,
        args.concurrency,
        out_dir.display()
    ));
    let gate = Arc::new(tokio::sync::Semaphore::new(usize::from(args.concurrency)));
    let mut set = tokio::task::JoinSet::new();
    for n in 1..=args.k {
        for task in &tasks {
            let (setup, task, gate) = (setup.clone(), task.clone(), gate.clone());
            set.spawn(async move {
                let _permit = gate.acquire_owned().await;
                trial::run(&setup, &task, n).await
            });
        }
    }
    let mut trials: Vec<Trial> = Vec::with_capacity(total);
    let mut live = Live::new(global);
    while let Some(joined) = set.join_next().await {
        let trial = joined.map_err(|e| CliError::internal(format!("a trial panicked: {e}")))??;
        trials.push(trial);
        live.show(&trials, total);
    }
    live.clear();
    trials.sort_by(|a, b| (a.task.as_str(), a.trial).cmp(&(b.task.as_str(), b.trial)));
    let first = tasks
        .first()
        .map(|t| out_dir.join(trial::trial_dir(&t.id, 1)))
        .unwrap_or_else(|| out_dir.clone());
    let agents = agent_settings(&first, &args.agents)?;
    let (by_task, sum) = report::figures(&trials);
    let mut report = Report {
        format_version: report::REPORT_FORMAT_VERSION,
        suite: SuiteRef {
            name: suite.name.clone(),
            path: suite.dir.display().to_string(),
            digest: digest.to_string(),
        },
        orca_version: env!("CARGO_PKG_VERSION").to_owned(),
        k: args.k,
        planner: args.planner.clone(),
        config_digest: config.as_ref().map_or_else(
            || "none".to_owned(),
            |c| Digest::of_bytes(c.as_bytes()).to_string(),
        ),
        agents,
        started_at,
        trials,
        tasks: by_task,
        total: sum,
        signature: None,
    };
    report.sign(&authority)?;
    let json = serde_json::to_string_pretty(&report)
        .map_err(|e| CliError::internal(format!("cannot write the report: {e}")))?;
    let md = report::markdown(&report);
    for (name, text) in [
        ("report.json", format!("{json}\n")),
        ("report.md", md.clone()),
    ] {
        let path = out_dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| CliError::internal(format!("{}: {e}", path.display())))?;
    }
    if global.json {
        out_json(&serde_json::json!({
            "report": out_dir.join("report.json"),
            "total": report.total,
        }));
    } else {
        out(md.trim_end());
        say(&format!(
            "report: {}",
            out_dir.join("report.json").display()
        ));
    }
    Ok(Exit::Ok)
}
