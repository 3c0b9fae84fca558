//! The report of an eval run (`report.json`, `report.md`): every trial's figures, the figures
//! per task and in total (computed only from the trials), what it binds, and its signature.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use orca_store::{Authority, SignatureRecord};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::exit::CliError;

pub(crate) const REPORT_FORMAT_VERSION: u32 = 1;

/// Why a trial failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Failure {
    /// No execution: the planner made no plan, or the plan could not be approved or run.
    PlanNotMade { detail: String },
    /// A step failed its last attempt (its own checks included).
    StepFailed {
        step: String,
        code: String,
        message: String,
    },
    /// A step ran out of its token, cost, turn or time budget.
    Budget { step: String, message: String },
    /// A step's agent was stopped as stalled.
    Stall { step: String, message: String },
    /// The run did not end in time (the trial's `timeout_secs`).
    Timeout,
    /// The run completed, but the hidden check did not exit 0.
    CheckFailed { status: Option<i32> },
}

impl Failure {
    /// The short name used in tables.
    pub(crate) const fn name(&self) -> &'static str {
        match self {
            Self::PlanNotMade { .. } => "plan not made",
            Self::StepFailed { .. } => "step failed",
            Self::Budget { .. } => "budget",
            Self::Stall { .. } => "stall",
            Self::Timeout => "timeout",
            Self::CheckFailed { .. } => "check failed",
        }
    }
}

/// One audit log of a trial and its head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogHead {
    pub(crate) log: String,
    pub(crate) entries: u64,
    pub(crate) head: String,
}

/// What a trial's kept `.orca/` and the hidden check say: recomputed by `eval verify`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Figures {
    pub(crate) passed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) failure: Option<Failure>,
    pub(crate) executions: Vec<String>,
    pub(crate) attempts: u32,
    pub(crate) decisions: u32,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) cost_micro_usd: u64,
    pub(crate) logs: Vec<LogHead>,
    /// The digest of the trial's output, when its planner failed before making a plan and
    /// what it spent was read from there (no log holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) planner_output: Option<String>,
}

/// One trial: a task's n-th run in its own copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Trial {
    pub(crate) task: String,
    /// 1-based.
    pub(crate) trial: u32,
    /// The copy the trial ran in (holding its `.orca/`), relative to the report.
    pub(crate) dir: String,
    pub(crate) wall_ms: u64,
    pub(crate) figures: Figures,
}

/// The figures of a set of trials (one task's, or all).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Summary {
    pub(crate) trials: u32,
    pub(crate) passed: u32,
    /// The share of trials that passed.
    pub(crate) pass_at_1: f64,
    /// Tasks whose every trial passed (for a task: 1 or 0).
    pub(crate) pass_all: u32,
    /// `pass_all` over the tasks (for a task: 1.0 or 0.0).
    pub(crate) pass_hat_k: f64,
    pub(crate) attempts: u64,
    pub(crate) decisions: u64,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) cost_micro_usd: u64,
    pub(crate) wall_ms: u64,
    /// Failed trials by why.
    pub(crate) failures: BTreeMap<String, u32>,
}

/// An agent's settings, as the report binds them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentSetting {
    pub(crate) agent_id: String,
    pub(crate) backend: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    pub(crate) prompt_digest: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) tools: Vec<String>,
}

/// The suite a report measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SuiteRef {
    pub(crate) name: String,
    /// Its directory as given (absolute).
    pub(crate) path: String,
    pub(crate) digest: String,
}

/// `report.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Report {
    pub(crate) format_version: u32,
    pub(crate) suite: SuiteRef,
    pub(crate) orca_version: String,
    /// Trials per task.
    pub(crate) k: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) planner: Option<String>,
    /// The digest of the config every trial got (`none` without one).
    pub(crate) config_digest: String,
    pub(crate) agents: Vec<AgentSetting>,
    pub(crate) started_at: String,
    pub(crate) trials: Vec<Trial>,
    pub(crate) tasks: BTreeMap<String, Summary>,
    pub(crate) total: Summary,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) signature: Option<SignatureRecord>,
}

/// A share in thousandths, so a figure reads and compares the same everywhere.
fn share(part: u32, whole: u32) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    (f64::from(part) * 1000.0 / f64::from(whole)).round() / 1000.0
}

fn summarize<'a>(trials: impl Iterator<Item = &'a Trial>) -> Summary {
    let mut s = Summary::default();
    let mut by_task: BTreeMap<&str, bool> = BTreeMap::new();
    for t in trials {
        let f = &t.figures;
        s.trials += 1;
        s.passed += u32::from(f.passed);
        let all = by_task.entry(t.task.as_str()).or_insert(true);
        *all &= f.passed;
        s.attempts += u64::from(f.attempts);
        s.decisions += u64::from(f.decisions);
        s.input_tokens += f.input_tokens;
        s.output_tokens += f.output_tokens;
        s.cost_micro_usd += f.cost_micro_usd;
        s.wall_ms += t.wall_ms;
        if let Some(failure) = &f.failure {
            *s.failures.entry(failure.name().to_owned()).or_default() += 1;
        }
    }
    let tasks = u32::try_from(by_task.len()).unwrap_or(u32::MAX);
    s.pass_all = u32::try_from(by_task.values().filter(|v| **v).count()).unwrap_or(u32::MAX);
    s.pass_at_1 = share(s.passed, s.trials);
    s.pass_hat_k = share(s.pass_all, tasks);
    s
}

/// The figures per task (in the order of `tasks`) and in total, from the trials alone.
pub(crate) fn figures(trials: &[Trial]) -> (BTreeMap<String, Summary>, Summary) {
    let mut tasks = BTreeMap::new();
    for t in trials {
        if !tasks.contains_key(&t.task) {
            let s = summarize(trials.iter().filter(|x| x.task == t.task));
            tasks.insert(t.task.clone(), s);
        }
    }
    (tasks, summarize(trials.iter()))
}

impl Report {
    /// What the signature covers: the canonical JSON of the report without its signature.
    pub(crate) fn statement(&self) -> Result<Vec<u8>, CliError> {
        let mut value = serde_json::to_value(self)
            .map_err(|e| CliError::internal(format!("cannot serialize the report: {e}")))?;
        if let Value::Object(map) = &mut value {
            map.remove("signature");
        }
        let mut text = b"orca eval report\n".to_vec();
        text.extend_from_slice(orca_core::format::canonical_json(&value).as_bytes());
        Ok(text)
    }

    pub(crate) fn sign(&mut self, authority: &Authority) -> Result<(), CliError> {
        self.signature = None;
        let statement = self.statement()?;
        self.signature =
            Some(authority.sign(&statement).ok_or_else(|| {
                CliError::bad_input("no signing key: the report cannot be signed")
            })?);
        Ok(())
    }

    /// Reads a report, naming the file in every error.
    pub(crate) fn read(path: &std::path::Path) -> Result<Self, CliError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::bad_input(format!("{}: cannot read it: {e}", path.display())))?;
        let report: Self = serde_json::from_str(&text).map_err(|e| {
            CliError::bad_input(format!("{}: not an eval report: {e}", path.display()))
        })?;
        if report.format_version != REPORT_FORMAT_VERSION {
            return Err(CliError::bad_input(format!(
                "{}: report format_version {} is not supported (this orca reads {REPORT_FORMAT_VERSION})",
                path.display(),
                report.format_version
            )));
        }
        Ok(report)
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

pub(crate) fn secs(ms: u64) -> String {
    format!("{}.{}s", ms / 1000, (ms % 1000) / 100)
}

pub(crate) fn usd(micro: u64) -> String {
    format!("${}.{:04}", micro / 1_000_000, (micro % 1_000_000) / 100)
}

fn failures_text(f: &BTreeMap<String, u32>) -> String {
    if f.is_empty() {
        return "-".to_owned();
    }
    f.iter()
        .map(|(k, v)| format!("{k} ×{v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn summary_row(name: &str, s: &Summary) -> String {
    format!(
        "| {name} | {}/{} | {} | {} | {} | {} | {} / {} | {} | {} | {} |\n",
        s.passed,
        s.trials,
        pct(s.pass_at_1),
        pct(s.pass_hat_k),
        s.attempts,
        s.decisions,
        s.input_tokens,
        s.output_tokens,
        usd(s.cost_micro_usd),
        secs(s.wall_ms),
        failures_text(&s.failures)
    )
}

/// `report.md`: the table per task and in total, the failed trials, what the report binds.
pub(crate) fn markdown(r: &Report) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Eval: {}\n", r.suite.name);
    let _ = writeln!(
        md,
        "{} trial(s) per task, orca {}, suite {}.\n",
        r.k, r.orca_version, r.suite.digest
    );
    md.push_str("| task | passed | pass@1 | pass^k | attempts | decisions | tokens in / out | cost | time | failures |\n");
    md.push_str("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (task, s) in &r.tasks {
        md.push_str(&summary_row(task, s));
    }
    md.push_str(&summary_row("**total**", &r.total));
    let failed: Vec<&Trial> = r.trials.iter().filter(|t| !t.figures.passed).collect();
    if !failed.is_empty() {
        md.push_str("\n## Failed trials\n\n");
        for t in failed {
            let why = match &t.figures.failure {
                Some(Failure::PlanNotMade { detail }) => format!("plan not made: {detail}"),
                Some(Failure::StepFailed {
                    step,
                    code,
                    message,
                }) => format!("step `{step}` failed ({code}): {message}"),
                Some(Failure::Budget { step, message }) => {
                    format!("step `{step}` ran out of budget: {message}")
                }
                Some(Failure::Stall { step, message }) => {
                    format!("step `{step}` stalled: {message}")
                }
                Some(Failure::Timeout) => "the run did not end in time".to_owned(),
                Some(Failure::CheckFailed { status }) => format!(
                    "the hidden check failed (exit {})",
                    status.map_or_else(|| "by a signal".to_owned(), |s| s.to_string())
                ),
                None => "unknown".to_owned(),
            };
            let first = why.lines().next().unwrap_or_default();
            let _ = writeln!(md, "- `{}` #{}: {first} (`{}`)", t.task, t.trial, t.dir);
        }
    }
    md.push_str("\n## Agents\n\n");
    if let Some(p) = &r.planner {
        let _ = writeln!(md, "Planner: `{p}`.\n");
    }
    for a in &r.agents {
        let _ = writeln!(
            md,
            "- `{}`: {} {}, prompt {}",
            a.agent_id,
            a.backend,
            a.model.as_deref().unwrap_or("-"),
            a.prompt_digest
        );
    }
    let _ = writeln!(
        md,
        "\nConfig {}. Signed by {}. Check with `orca eval verify report.json`.",
        r.config_digest,
        r.signature
            .as_ref()
            .map_or_else(|| "nobody".to_owned(), |s| s.key.to_string())
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(task: &str, n: u32, passed: bool) -> Trial {
        Trial {
            task: task.to_owned(),
            trial: n,
            dir: format!("trials/{task}/{n}"),
            wall_ms: 1000,
            figures: Figures {
                passed,
                failure: (!passed).then_some(Failure::CheckFailed { status: Some(1) }),
                executions: Vec::new(),
                attempts: 1,
                decisions: 0,
                input_tokens: 10,
                output_tokens: 5,
                cost_micro_usd: 0,
                logs: Vec::new(),
                planner_output: None,
            },
        }
    }

    #[test]
    fn pass_at_1_counts_trials_and_pass_hat_k_counts_tasks() {
        let trials = [
            trial("a", 1, true),
            trial("a", 2, true),
            trial("b", 1, true),
            trial("b", 2, false),
            trial("c", 1, false),
            trial("c", 2, false),
        ];
        let (tasks, total) = figures(&trials);
        assert_eq!((total.passed, total.trials), (3, 6));
        assert!((total.pass_at_1 - 0.5).abs() < 1e-9);
        assert_eq!(total.pass_all, 1);
        assert!((total.pass_hat_k - 0.333).abs() < 1e-9);
        assert!((tasks["b"].pass_at_1 - 0.5).abs() < 1e-9);
        assert_eq!(tasks["b"].pass_all, 0);
        assert_eq!(tasks["a"].pass_all, 1);
        assert_eq!(total.failures["check failed"], 3);
    }
}
