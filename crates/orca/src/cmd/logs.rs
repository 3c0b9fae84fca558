//! `orca exec logs EXEC [STEP] [--follow]`: what each attempt of a step did — when it ran, how
//! it ended, its output and its agent's transcript (the model's answers, each tool call with
//! its result: [`transcript`]) — from the task records and the execution's events
//! (`orca_services::events`). Everything printed goes through the redactor.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use orca_core::{ExecutionId, Task};
use orca_services::NoHuman;
use orca_services::events::ExecEvent;
use orca_services::timeline::{attempt_output, ends_attempt};
use orca_store::ExecutionSnapshot;
use serde_json::{Value, json};

use crate::app::{App, out, out_json};
use crate::cmd::events::{Follower, follow_events};
use crate::cmd::transcript;
use crate::exit::{CliError, Exit};

pub(crate) async fn logs(
    app: &App,
    exec: &str,
    step: Option<&str>,
    follow: bool,
) -> Result<Exit, CliError> {
    let orca = app.orca(Arc::new(NoHuman));
    let id = orca.executions().resolve(exec).await?;
    let snap = orca.executions().get(id).await?;
    if let Some(step) = step
        && !snap
            .tasks
            .iter()
            .any(|t| t.value.step_id().as_str() == step)
    {
        let steps: Vec<&str> = snap
            .tasks
            .iter()
            .map(|t| t.value.step_id().as_str())
            .collect();
        return Err(CliError::bad_input(format!(
            "execution {id} has no step `{step}`; its steps: {}",
            steps.join(", ")
        )));
    }
    let wanted = |s: Option<&String>| step.is_none_or(|w| s.is_some_and(|s| s == w));
    if app.json() {
        let mut events = Vec::new();
        follow_events(app, &orca, id, follow, |e| {
            if e.step_id.is_some() && wanted(e.step_id.as_ref()) {
                events.push(e.clone());
            }
        })
        .await?;
        let snap = orca.executions().get(id).await?;
        out_json(&logs_json(id, &snap, &events, step));
        return Ok(Exit::Ok);
    }
    // People: each event of the step(s) as it comes; an ended attempt with its output, which
    // is in the task record (written just after the attempt's entry: wait a poll for it).
    let mut printed = 0usize;
    let mut waiting: Vec<ExecEvent> = Vec::new();
    let mut follower = Follower::new(app, &orca, id, follow).await?;
    while let Some(batch) = follower.next().await? {
        waiting.extend(
            batch
                .into_iter()
                .filter(|e| e.step_id.is_some() && wanted(e.step_id.as_ref())),
        );
        if waiting.is_empty() {
            continue;
        }
        let snap = orca.executions().get(id).await?;
        let mut text = String::new();
        let mut rest = Vec::new();
        for e in waiting.drain(..) {
            if !rest.is_empty() || (ends_attempt(&e) && !recorded(&snap, &e)) {
                rest.push(e);
                continue;
            }
            line(&mut text, &e, &snap);
            printed += 1;
        }
        waiting = rest;
        if !text.is_empty() {
            out(&text);
        }
    }
    // Whatever is left once the run is over: its records are as complete as they will be.
    if !waiting.is_empty() {
        let snap = orca.executions().get(id).await?;
        let mut text = String::new();
        for e in &waiting {
            line(&mut text, e, &snap);
            printed += 1;
        }
        out(&text);
    }
    if printed == 0 {
        out("no attempts yet");
    }
    Ok(Exit::Ok)
}

/// Whether the task record already holds the attempt `e` ended.
fn recorded(snap: &ExecutionSnapshot, e: &ExecEvent) -> bool {
    snap.tasks.iter().any(|t| {
        Some(t.value.step_id().as_str()) == e.step_id.as_deref()
            && (matches!(t.value, Task::Completed(_))
                || t.value
                    .attempts()
                    .iter()
                    .any(|a| Some(a.number) == e.attempt))
    })
}

/// One event for people; an ended attempt is followed by its output, indented.
fn line(text: &mut String, e: &ExecEvent, snap: &ExecutionSnapshot) {
    let step = e.step_id.as_deref().unwrap_or("-");
    let attempt = e
        .attempt
        .map(|a| format!(" attempt {a}"))
        .unwrap_or_default();
    let when =
        e.at.format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
    match e.kind.as_str() {
        "task.attempt.started" => {
            let agent = e.data.get("agent").and_then(Value::as_str).unwrap_or("?");
            let _ = writeln!(text, "── {step}{attempt} [{agent}] started {when}");
        }
        kind if transcript::is_transcript(kind) => transcript::line(text, e),
        "step.changes" => {
            // What the attempt changed (`orca exec diff` shows the lines).
            if let Ok(c) = serde_json::from_value::<orca_core::RecordedChanges>(e.data.clone()) {
                let files = c.files.len() + usize::try_from(c.more_files).unwrap_or(usize::MAX);
                let mut names: Vec<String> = c
                    .files
                    .iter()
                    .take(5)
                    .map(|f| {
                        format!(
                            "{} {}",
                            f.change.mark(),
                            crate::cmd::diff::sanitize(&f.path)
                        )
                    })
                    .collect();
                if files > names.len() {
                    names.push(format!("… {} more", files - names.len()));
                }
                let _ = writeln!(
                    text,
                    "   changed {files} file{}{}{}",
                    if files == 1 { "" } else { "s" },
                    if names.is_empty() { "" } else { ": " },
                    names.join(", ")
                );
            }
        }
        kind @ ("task.attempt.completed" | "task.attempt.failed" | "task.attempt.interrupted") => {
            let how = kind.trim_start_matches("task.attempt.");
            let _ = writeln!(text, "── {step}{attempt} {how} {when}");
            if let Some(output) = attempt_output(snap, step, e.attempt) {
                for l in output.lines() {
                    let _ = writeln!(text, "   │ {l}");
                }
            }
            if let Some(f) = e.data.get("failure") {
                let message = f.get("message").and_then(Value::as_str).unwrap_or("");
                let _ = writeln!(text, "   failure: {message}");
            }
        }
        other => {
            let _ = writeln!(text, "── {step}{attempt} {other} {when}");
        }
    }
}

fn logs_json(
    id: ExecutionId,
    snap: &ExecutionSnapshot,
    events: &[ExecEvent],
    step: Option<&str>,
) -> Value {
    let mut steps: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for t in &snap.tasks {
        let s = t.value.step_id().as_str();
        if step.is_some_and(|w| w != s) {
            continue;
        }
        let attempts = t
            .value
            .attempts()
            .iter()
            .map(|a| {
                let mine = || {
                    events
                        .iter()
                        .filter(|e| e.step_id.as_deref() == Some(s) && e.attempt == Some(a.number))
                };
                let calls: Vec<&Value> = mine()
                    .filter(|e| e.kind.starts_with("tool."))
                    .map(|e| &e.data)
                    .collect();
                let said: Vec<Value> = mine().filter_map(transcript::item).collect();
                json!({
                    "attempt": a.number,
                    "started_at": a.started_at.format(&time::format_description::well_known::Rfc3339).ok(),
                    "finished_at": a.finished_at.format(&time::format_description::well_known::Rfc3339).ok(),
                    "outcome": a.outcome,
                    "output": attempt_output(snap, s, Some(a.number)),
                    "tool_calls": calls,
                    "transcript": said,
                })
            })
            .collect();
        steps.insert(s.to_owned(), attempts);
    }
    let steps: Vec<Value> = snap
        .tasks
        .iter()
        .filter_map(|t| {
            let s = t.value.step_id().as_str();
            steps.remove(s).map(|attempts| {
                json!({ "step_id": s, "status": crate::render::task_status(&t.value), "attempts": attempts })
            })
        })
        .collect();
    json!({ "execution_id": id, "steps": steps })
}
