//! A trial's figures, read from its kept `.orca/` (by `eval run` once the trial ended, and
//! again by `eval verify`), and the hidden check, run in the trial's copy.

use std::path::{Path, PathBuf};
use std::time::Duration;

use orca_core::{
    AgentId, AgentPort as _, Check, CheckVerdict, ChecksRequest, ExecutionId, ExecutionStage,
    NoTools, PlanId, Usage,
};
use orca_services::ExecutionService;
use orca_store::{AuditLogId, AuditStore as _, ExecutionStore as _, FileStore, PlanStore as _};
use serde_json::Value;

use super::report::{Failure, Figures, LogHead};
use crate::exit::CliError;

/// How long the hidden check may take.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(300);

/// What the kept state says, before the hidden check.
pub(crate) struct Measured {
    pub(crate) figures: Figures,
    /// The last execution and its plan, if the run completed (only then is the hidden check
    /// run).
    pub(crate) completed: Option<(PlanId, ExecutionId)>,
    /// Logs that do not verify (named).
    pub(crate) tampered: Vec<String>,
}

fn usage_of(value: &Value) -> Usage {
    serde_json::from_value(value.clone()).unwrap_or_default()
}

fn head(log: &AuditLogId, entries: &[orca_store::AuditEntry]) -> LogHead {
    LogHead {
        log: log.to_string(),
        entries: entries.len() as u64,
        head: entries
            .last()
            .map_or_else(|| "none".to_owned(), |e| e.hash.to_string()),
    }
}

/// The failure of an execution that did not complete, from its last failed attempt.
fn failure_of(stage: ExecutionStage, events: &[orca_services::events::ExecEvent]) -> Failure {
    if !stage.is_terminal() {
        return Failure::Timeout;
    }
    let last = events
        .iter()
        .rev()
        .find(|e| e.kind == "task.attempt.failed");
    let Some(e) = last else {
        let reason = events
            .iter()
            .rev()
            .find(|e| e.is_terminal())
            .and_then(|e| e.data.get("reason").and_then(Value::as_str))
            .unwrap_or("the execution did not complete");
        return Failure::StepFailed {
            step: String::new(),
            code: stage.to_string(),
            message: reason.chars().take(500).collect(),
        };
    };
    let step = e.step_id.clone().unwrap_or_default();
    let failure = e.data.get("failure").cloned().unwrap_or(Value::Null);
    let code = failure
        .get("code")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    let message: String = failure
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .chars()
        .take(500)
        .collect();
    if code == "budget_exceeded" {
        Failure::Budget { step, message }
    } else if code.contains("stall") || message.contains("stalled") {
        Failure::Stall { step, message }
    } else {
        Failure::StepFailed {
            step,
            code,
            message,
        }
    }
}

/// Reads a trial's `.orca/`: its plans and executions, their figures and log heads.
/// The most of a trial's output read for a planner's failure line.
const MAX_OUTPUT: u64 = 16 << 20;

/// What a planner that failed before it made a plan left in the trial's output.
struct Unplanned {
    /// What it spent.
    usage: Usage,
    /// The output's digest (kept with the figures, so `eval verify` refuses an edited output).
    digest: String,
    /// Why it failed, and where its conversation was kept (relative to the trial), when the
    /// output names it.
    why: String,
}

/// What a planner that failed before it made a plan spent and why it failed, from the
/// `planner_failed` line `orca ask --json` wrote to the trial's output. `None`: no such line.
fn unplanned(output: &Path) -> Option<Unplanned> {
    let file = std::fs::File::open(output).ok()?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_OUTPUT), &mut bytes).ok()?;
    // The output mixes JSON documents (pretty-printed) with lines of text: a document starts
    // at a line that starts with `{`.
    let starts = std::iter::once(0).chain(
        bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i + 1),
    );
    let line = starts
        .filter(|at| bytes.get(*at) == Some(&b'{'))
        .filter_map(|at| {
            let v: Value = serde_json::Deserializer::from_slice(&bytes[at..])
                .into_iter()
                .next()?
                .ok()?;
            (v["type"] == "planner_failed").then_some(v)
        })
        .next_back()?;
    // Why, and the conversation's path from the trial's root (`.orca/planner/…`), whoever ran
    // it where. An output of an orca that kept no conversation keeps the bare reason, so a
    // report it wrote still verifies.
    let why = match line["conversation"]
        .as_str()
        .and_then(|kept| kept.find(".orca/planner/").map(|at| &kept[at..]))
    {
        Some(kept) => format!(
            "{NO_PLAN}: {}: {} (its conversation: {kept})",
            line["code"].as_str().unwrap_or("failed"),
            line["message"].as_str().unwrap_or_default()
        ),
        None => NO_PLAN.to_owned(),
    };
    Some(Unplanned {
        usage: usage_of(&line["usage"]),
        digest: orca_core::Digest::of_bytes(&bytes).to_string(),
        why,
    })
}

/// [`measure`], counting a planner that failed before it made any plan from the trial's
/// `output` (see [`unplanned`]): what it spent, and why it failed.
pub(crate) async fn measure_trial(store: &FileStore, output: &Path) -> Result<Measured, CliError> {
    let mut measured = measure(store).await?;
    let no_plan = matches!(
        &measured.figures.failure,
        Some(Failure::PlanNotMade { detail }) if detail == NO_PLAN
    );
    if no_plan && let Some(found) = unplanned(output) {
        let f = &mut measured.figures;
        let usage = found.usage;
        f.input_tokens += usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens;
        f.output_tokens += usage.output_tokens;
        f.cost_micro_usd += usage.cost_micro_usd;
        f.planner_output = Some(found.digest);
        f.failure = Some(Failure::PlanNotMade { detail: found.why });
    }
    Ok(measured)
}

/// Why a trial failed when its planner made no plan at all.
const NO_PLAN: &str = "the planner made no plan";

pub(crate) async fn measure(store: &FileStore) -> Result<Measured, CliError> {
    let mut figures = Figures {
        passed: false,
        failure: None,
        executions: Vec::new(),
        attempts: 0,
        decisions: 0,
        input_tokens: 0,
        output_tokens: 0,
        cost_micro_usd: 0,
        logs: Vec::new(),
        planner_output: None,
    };
    let mut tampered = Vec::new();
    let mut usage = Usage::default();
    let mut plans = store.list_plans().await?.items;
    plans.sort_by_key(|p| p.plan_id);
    for plan in &plans {
        let log = AuditLogId::Plan {
            plan_id: plan.plan_id,
        };
        let entries = store.entries(log).await?;
        // The planner's model calls are recorded in the plan's log, turn by turn.
        for e in entries.iter().filter(|e| e.kind == "agent.answer") {
            if let Some(u) = e.data.get("usage") {
                usage.add(&usage_of(u));
            }
        }
        if !store.verify(log).await?.is_intact() {
            tampered.push(log.to_string());
        }
        figures.logs.push(head(&log, &entries));
    }
    let mut execs = store.list_executions(None).await?.items;
    // Oldest first: a replan's execution follows the one it replaced.
    execs.sort_by_key(|e| e.execution_id);
    let mut last: Option<(
        ExecutionStage,
        (PlanId, ExecutionId),
        Vec<orca_services::events::ExecEvent>,
    )> = None;
    for summary in &execs {
        let log = ExecutionService::log(summary.plan_id, summary.execution_id);
        let entries = store.entries(log).await?;
        let events =
            orca_services::events::from_entries(summary.plan_id, summary.execution_id, &entries);
        let (_, totals) = orca_services::events::totals(&events);
        figures.attempts += totals.attempts;
        usage.add(&totals.usage);
        figures.decisions += u32::try_from(
            events
                .iter()
                // Asked of a human, or answered by the unattended policy instead of one.
                .filter(|e| matches!(e.kind.as_str(), "decision.requested" | "policy.applied"))
                .count(),
        )
        .unwrap_or(u32::MAX);
        if !store.verify(log).await?.is_intact() {
            tampered.push(log.to_string());
        }
        figures.logs.push(head(&log, &entries));
        figures.executions.push(summary.execution_id.to_string());
        last = Some((
            summary.stage,
            (summary.plan_id, summary.execution_id),
            events,
        ));
    }
    figures.input_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens;
    figures.output_tokens = usage.output_tokens;
    figures.cost_micro_usd = usage.cost_micro_usd;
    let completed = match &last {
        None => {
            figures.failure = Some(Failure::PlanNotMade {
                detail: if plans.is_empty() {
                    NO_PLAN.to_owned()
                } else {
                    "no plan was approved and run".to_owned()
                },
            });
            None
        }
        Some((ExecutionStage::Completed, ids, _)) => Some(*ids),
        Some((stage, _, events)) => {
            figures.failure = Some(failure_of(*stage, events));
            None
        }
    };
    Ok(Measured {
        figures,
        completed,
        tampered,
    })
}

/// Opens a trial's store to read and verify it (trusting the user's key and `trusted`).
pub(crate) fn open_store(root: &Path, trusted: &[PathBuf]) -> Result<FileStore, CliError> {
    if !root.join(orca_store::STORE_DIR).is_dir() {
        return Err(CliError::with(
            crate::exit::Exit::Tampered,
            format!("{}: no .orca/ (the trial's record is gone)", root.display()),
        ));
    }
    let (authority, _) = crate::trust::authority(root, trusted, crate::trust::KeyUse::Verify)?;
    Ok(FileStore::open_with_redactor(
        root,
        authority,
        crate::redact::redactor(),
    )?)
}

/// Runs the hidden check (`sh CHECK`) in `root`, under the sandbox and with the environment
/// a step gets there (the plan checks' way, ADR 0043): it runs code the agents wrote, which
/// must reach no further than their steps could. Its output goes to `log`. `None`: it did not
/// end in time or could not run.
pub(crate) async fn run_check(
    check: &Path,
    root: &Path,
    log: &Path,
    run: (PlanId, ExecutionId),
) -> Result<Option<i32>, CliError> {
    let loaded = crate::settings::Settings::load(root)?;
    let sandbox = crate::sandbox::Sandbox::open(root, loaded.config.as_ref(), true)?;
    let agents = loaded.agents.with_sandbox(sandbox.policy.clone());
    let quoted = check.display().to_string().replace('\'', "'\\''");
    let request = ChecksRequest {
        execution_id: run.1,
        plan_id: run.0,
        identity: None,
        agent: AgentId::shell(),
        env: Vec::new(),
        workdir: None,
        checks: vec![Check {
            command: format!("sh '{quoted}'"),
            timeout_secs: Some(CHECK_TIMEOUT.as_secs()),
        }],
    };
    let runs = agents.run_checks(&request, &NoTools).await;
    let Some(ran) = runs.first() else {
        return Ok(None);
    };
    std::fs::write(log, &ran.output)
        .map_err(|e| CliError::internal(format!("{}: {e}", log.display())))?;
    Ok(match &ran.verdict {
        CheckVerdict::Passed => Some(0),
        CheckVerdict::Failed { status } => Some(
            status
                .strip_prefix("exit status ")
                .and_then(|n| n.parse().ok())
                .unwrap_or(-1),
        ),
        _ => None,
    })
}

/// The figures of a trial once its check ran: passed only when the run completed and the
/// check exited 0.
pub(crate) fn with_check(mut m: Measured, status: Option<Option<i32>>) -> Figures {
    if let Some(status) = status {
        if status == Some(0) {
            m.figures.passed = true;
        } else {
            m.figures.failure = Some(Failure::CheckFailed { status });
        }
    }
    m.figures
}
