//! Human renderings: tables, plans, the step graph.

use std::fmt::Write as _;

use orca_core::{Plan, Task, graph};
use orca_store::{ExecutionSnapshot, ExecutionSummary, PlanSummary};
use time::format_description::well_known::Rfc3339;

fn when(t: time::OffsetDateTime) -> String {
    t.format(&Rfc3339)
        .unwrap_or_default()
        .chars()
        .take(19)
        .collect::<String>()
        .replace('T', " ")
}

use crate::term::clip;

/// A plain table with a header row; columns padded to their widest cell. When the width is
/// limited (a terminal, or `COLUMNS`), the last column (a goal, a description, a detail) is cut
/// to fit, marked `…`.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    match crate::term::width() {
        Some(max) => table_within(header, rows, max),
        None => table_within(header, rows, usize::MAX),
    }
}

/// [`table`] within `max` columns (the last column keeps at least its `…`).
pub(crate) fn table_within(header: &[&str], rows: &[Vec<String>], max: usize) -> String {
    let n = header.len();
    let mut first: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = first.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let others: usize = first.iter().take(n.saturating_sub(1)).map(|w| w + 2).sum();
    let last = first.last().copied().unwrap_or(0);
    if others + last > max {
        let room = max.saturating_sub(others).max(1);
        let rows: Vec<Vec<String>> = rows
            .iter()
            .map(|row| {
                row.iter()
                    .enumerate()
                    .map(|(i, c)| if i + 1 == n { clip(c, room) } else { c.clone() })
                    .collect()
            })
            .collect();
        return padded(header, &rows);
    }
    padded(header, rows)
}

fn padded(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for row in rows {
        line(row.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

pub(crate) fn plan_list(items: &[PlanSummary], unreadable: usize) -> String {
    if items.is_empty() && unreadable > 0 {
        return format!(
            "no plans to show; {unreadable} could not be read (see the warnings above; `orca audit verify` checks them)\n"
        );
    }
    if items.is_empty() {
        return "no plans yet: create one with `orca plan create --file PLAN.json` or `orca ask`\n"
            .to_owned();
    }
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|p| {
            vec![
                crate::ids::plan(p.plan_id),
                p.stage.to_string(),
                p.steps.to_string(),
                p.executions.to_string(),
                when(p.created_at),
                clip(&p.goal, 60),
            ]
        })
        .collect();
    table(
        &["PLAN", "STAGE", "STEPS", "EXECS", "CREATED", "GOAL"],
        &rows,
    )
}

/// `live[i]`: whether execution `i` (not ended) has a live driver; `None` if not known.
pub(crate) fn exec_list(
    items: &[ExecutionSummary],
    live: &[Option<bool>],
    awaiting: &[bool],
    unreadable: usize,
) -> String {
    if items.is_empty() && unreadable > 0 {
        return format!(
            "no executions to show; {unreadable} could not be read (see the warnings above; `orca audit verify` checks them)\n"
        );
    }
    if items.is_empty() {
        return "no executions yet: run an approved plan with `orca run PLAN`\n".to_owned();
    }
    let rows: Vec<Vec<String>> = items
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let stage = orca_services::status::Status::of(
                e.stage,
                e.awaiting_decision,
                live.get(i).copied().flatten(),
                awaiting.get(i).copied().unwrap_or(false),
            )
            .to_string();
            vec![
                crate::ids::exec(e.execution_id),
                crate::ids::plan(e.plan_id),
                stage,
                format!("{}/{}", e.completed, e.total),
                when(e.created_at),
            ]
        })
        .collect();
    table(&["EXECUTION", "PLAN", "STATUS", "DONE", "CREATED"], &rows)
}

/// The status a person reads: a step whose last attempt was cancelled or interrupted did not
/// fail.
pub(crate) fn task_status(task: &Task) -> String {
    match task {
        Task::Failed(f) => match f.last_failure().code {
            orca_core::ErrorCode::Cancelled => "cancelled".to_owned(),
            orca_core::ErrorCode::Interrupted => "interrupted".to_owned(),
            _ => task.status().to_string(),
        },
        _ => task.status().to_string(),
    }
}

fn task_line(task: &Task) -> (String, String, String) {
    let attempts = task.attempts().len() + usize::from(matches!(task, Task::Running(_)));
    let detail = match task {
        Task::Completed(t) => crate::term::headline(&t.result.summary),
        Task::Failed(f) => {
            // "interrupted: interrupted: …" said the code twice when the message starts with it.
            let failure = f.last_failure();
            let text = if failure
                .message
                .starts_with(&format!("{}:", failure.code.as_str()))
            {
                failure.message.clone()
            } else {
                failure.to_string()
            };
            clip(&text.replace('\n', " "), 70)
        }
        Task::Skipped(s) => s.reason.clone(),
        Task::Running(r) => format!(
            "attempt {} on pid {} ({})",
            r.attempt, r.holder.pid, r.holder.host
        ),
        Task::Pending(_) => String::new(),
    };
    (task_status(task), attempts.to_string(), clip(&detail, 70))
}

/// Per-step totals and the execution's (`orca_services::events::totals`).
pub(crate) type Totals = (
    std::collections::BTreeMap<String, orca_services::events::StepTotals>,
    orca_services::events::StepTotals,
);

fn seconds(ms: u64) -> String {
    // Milliseconds to seconds, one decimal (display only: u64 → f64 loses nothing here).
    #[expect(clippy::cast_precision_loss, reason = "display of a duration")]
    let s = ms as f64 / 1000.0;
    format!("{s:.1}s")
}

fn tokens(u: &orca_core::Usage) -> String {
    match u.total_tokens() {
        0 => "-".to_owned(),
        n => n.to_string(),
    }
}

fn cost(u: &orca_core::Usage) -> String {
    match u.cost_micro_usd {
        0 => "-".to_owned(),
        c => format!("${}.{:06}", c / 1_000_000, c % 1_000_000),
    }
}

/// The total line: step time, tokens (in/out), turns and cost.
pub(crate) fn total_line(total: &orca_services::events::StepTotals) -> String {
    use orca_core::plural::count;
    let u = &total.usage;
    let mut line = format!(
        "Total:     {}, {} in steps",
        count(total.attempts, "attempt", "attempts"),
        seconds(total.duration_ms),
    );
    // Usage and cost only when a model was called (a run of shell steps has none).
    if u.turns > 0 || u.total_tokens() > 0 {
        line.push_str(&format!(
            ", {} tokens (in {}, out {}), {}, cost {}",
            u.total_tokens(),
            u.input_tokens,
            u.output_tokens,
            count(u.turns, "model turn", "model turns"),
            if u.cost_micro_usd == 0 {
                "unknown or none".to_owned()
            } else {
                cost(u)
            }
        ));
    }
    line
}

pub(crate) fn exec_show(
    snapshot: &ExecutionSnapshot,
    plan: Option<&Plan>,
    status: orca_services::status::Status,
    totals: &Totals,
) -> String {
    let e = &snapshot.execution.value;
    let info = e.info();
    let mut out = String::new();
    let _ = writeln!(out, "Execution {} ({status})", info.id);
    let _ = writeln!(
        out,
        "Plan:      {}{}",
        info.plan_id,
        plan.map(|p| format!(" — {}", p.content().goal))
            .unwrap_or_default()
    );
    let _ = writeln!(out, "Digest:    {}", info.plan_digest);
    let _ = writeln!(out, "Created:   {}", when(info.created_at));
    match e {
        orca_core::Execution::Failed(f) => {
            // A reason of several lines (a failed plan check's output) is indented under it.
            let _ = writeln!(
                out,
                "Failed:    {}",
                f.reason.replace('\n', "\n           │ ")
            );
            if let Some(p) = f.replanned_as {
                let _ = writeln!(out, "Replanned: {p}");
            }
        }
        orca_core::Execution::Stopped(s) => {
            let _ = writeln!(
                out,
                "Stopped:   by {}{}",
                s.by,
                s.reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            );
        }
        _ => {}
    }
    if let Some(answered) = e.decision().and_then(|d| d.answer.as_ref()) {
        // Decided (e.g. `decide --no-run`), not yet applied: nothing waits for a person.
        let _ = writeln!(
            out,
            "Decided:   {} by {} at {} — applied when the run continues: `orca exec resume {}`",
            decision_name(&answered.decision),
            answered.by,
            when(answered.at),
            info.id
        );
    } else if let Some(d) = e.decision() {
        let _ = writeln!(
            out,
            "Waiting:   a decision about step `{}` ({}) — answer with `orca exec decide {} {}`",
            d.request.step_id(),
            d.request.option_keys().join(" | "),
            info.id,
            d.request.option_keys().join("|")
        );
        // A failed check: what it said, which the decision is about.
        if let orca_core::DecisionRequest::Deviation { failure, .. } = &d.request
            && failure.code == orca_core::ErrorCode::CheckFailed
        {
            let _ = writeln!(out, "Check:     {}", failure.message);
            for line in failure.cause.as_deref().unwrap_or_default().lines() {
                let _ = writeln!(out, "           │ {line}");
            }
        }
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = snapshot
        .tasks
        .iter()
        .map(|t| {
            let (status, attempts, detail) = task_line(&t.value);
            let agent = plan
                .and_then(|p| p.content().step(t.value.step_id()))
                .map(|s| s.agent.to_string())
                .unwrap_or_default();
            let step = totals.0.get(t.value.step_id().as_str());
            vec![
                t.value.step_id().to_string(),
                agent,
                status,
                attempts,
                step.map_or_else(|| "-".to_owned(), |s| seconds(s.duration_ms)),
                step.map_or_else(|| "-".to_owned(), |s| tokens(&s.usage)),
                step.map_or_else(|| "-".to_owned(), |s| cost(&s.usage)),
                detail,
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "STEP", "AGENT", "STATUS", "TRIES", "TIME", "TOKENS", "COST", "DETAIL",
        ],
        &rows,
    ));
    out.push_str(&total_line(&totals.1));
    out.push('\n');
    out
}

/// The plan's steps by layer (longest path from a root), with their edges.
pub(crate) fn plan_graph(plan: &Plan) -> String {
    let steps = &plan.content().steps;
    let deps = graph::dependency_indices(steps);
    let Some(order) = graph::topological_order(&deps) else {
        return "the steps form a cycle; no graph\n".to_owned();
    };
    let mut level = vec![0usize; steps.len()];
    for v in order {
        level[v] = deps[v].iter().map(|&d| level[d] + 1).max().unwrap_or(0);
    }
    let depth = level.iter().copied().max().map_or(0, |m| m + 1);
    let mut out = String::new();
    for l in 0..depth {
        let _ = writeln!(out, "── layer {} ──", l + 1);
        for (i, s) in steps.iter().enumerate().filter(|(i, _)| level[*i] == l) {
            let from: Vec<&str> = deps[i]
                .iter()
                .filter_map(|d| steps.get(*d))
                .map(|s| s.id.as_str())
                .collect();
            let arrow = if from.is_empty() {
                String::new()
            } else {
                format!("  ◀── {}", from.join(", "))
            };
            let locks = if s.locks.is_empty() {
                String::new()
            } else {
                format!("  🔒 {}", s.locks.join(", "))
            };
            let _ = writeln!(out, "  [{}] {} ({}){arrow}{locks}", i + 1, s.id, s.agent);
        }
    }
    let _ = writeln!(
        out,
        "critical path: {}; widest layer: {}",
        orca_core::plural::count(depth, "step", "steps"),
        orca_core::plural::count(
            (0..depth)
                .map(|l| level.iter().filter(|x| **x == l).count())
                .max()
                .unwrap_or(0),
            "step",
            "steps"
        )
    );
    out
}

fn decision_name(d: &orca_core::Decision) -> &'static str {
    match d {
        orca_core::Decision::Retry { .. } => "retry",
        orca_core::Decision::Replan { .. } => "replan",
        orca_core::Decision::Stop => "stop",
        orca_core::Decision::Answer { .. } => "answer",
    }
}

/// Who decided a plan and when, with the digest approved; what it supersedes.
pub(crate) fn plan_decision(plan: &Plan) -> String {
    let mut out = String::new();
    match plan {
        Plan::Approved(a) => {
            let approval = a.approval();
            let _ = writeln!(
                out,
                "Approved:  by {} at {}",
                approval.by,
                when(approval.at)
            );
            let _ = writeln!(out, "Digest:    {}", approval.digest);
            if orca_services::approval::through_agent_host(&approval.by) {
                let _ = writeln!(
                    out,
                    "Through:   {}",
                    orca_services::approval::THROUGH_AGENT_HOST
                );
            }
            if let Some(note) = &approval.note {
                let _ = writeln!(out, "Note:      {note}");
            }
            if let Some(policy) = &approval.policy {
                let _ = writeln!(out, "Policy:    {}", policy.digest);
            }
        }
        Plan::Rejected(r) => {
            let rejection = r.rejection();
            let _ = writeln!(
                out,
                "Rejected:  by {} at {}{}",
                rejection.by,
                when(rejection.at),
                rejection
                    .reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            );
        }
        Plan::Proposal(p) => {
            let _ = writeln!(out, "Approved:  not yet (a proposal waiting for approval)");
            let _ = writeln!(
                out,
                "Digest:    {}  (`plan approve --digest` approves only this content)",
                p.content().digest()
            );
        }
        _ => {}
    }
    if let Some(previous) = plan.supersedes() {
        let _ = writeln!(out, "Revises:   {previous}");
    }
    out
}
