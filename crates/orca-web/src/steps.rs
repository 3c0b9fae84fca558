//! One step of an execution, as `orca exec logs EXEC STEP` shows it: each attempt, when it ran
//! and how it ended, its agent's transcript in log order (the model's answers, each tool call
//! with its arguments, outcome and recorded result, a command-line agent's own tools, checks,
//! the files it changed) and its output — live while the step runs (server-sent events, as
//! the execution page).
//!
//! All of it was written by an agent or a step's process: answers and a model agent's output
//! are rendered as Markdown ([`crate::markdown`], safe by construction), results and a shell
//! step's output as escaped text in a `<pre>` that wraps.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use orca_core::{AttemptOutcome, ExecutionId, Task};
use orca_services::events::{self, ExecEvent};
use orca_services::timeline::{
    answer_tokens, attempt_output, check_outcome, cut_note, ends_attempt, tool_outcome,
};
use orca_store::ExecutionSnapshot;
use serde_json::Value;

use crate::html::{badge, cut, esc, page, secs, when_cell};
use crate::live::{Rendered, changes};
use crate::markdown;
use crate::pages::{Reply, error_response, resolve_exec, short_id, status_page};
use crate::state::Web;

/// The most of one output or recorded text a page shows (the rest: `orca exec logs`).
const MAX_TEXT: usize = 20_000;

/// Everything the step page shows, read once.
struct StepView {
    snapshot: ExecutionSnapshot,
    events: Vec<ExecEvent>,
    /// The step's agent is the shell (its output is a terminal's, not Markdown).
    shell: bool,
    description: Option<String>,
}

async fn read(web: &Web, id: ExecutionId, step: &str) -> Result<StepView, Response> {
    let snapshot = web
        .orca
        .executions()
        .get(id)
        .await
        .map_err(|e| error_response(&e.into()))?;
    if !snapshot
        .tasks
        .iter()
        .any(|t| t.value.step_id().as_str() == step)
    {
        let steps: Vec<&str> = snapshot
            .tasks
            .iter()
            .map(|t| t.value.step_id().as_str())
            .collect();
        return Err(status_page(
            StatusCode::NOT_FOUND,
            "Not found",
            &format!(
                "execution {id} has no step `{step}`; its steps: {}",
                steps.join(", ")
            ),
        ));
    }
    let info = snapshot.execution.value.info();
    let all = events::read(web.store.as_ref(), info.plan_id, id, None)
        .await
        .map_err(|e| error_response(&e.into()))?;
    let events = all
        .into_iter()
        .filter(|e| e.step_id.as_deref() == Some(step))
        .collect();
    let plan_step = web
        .orca
        .planning()
        .plan(info.plan_id)
        .await
        .ok()
        .and_then(|p| {
            p.content()
                .steps
                .iter()
                .find(|s| s.id.as_str() == step)
                .cloned()
        });
    Ok(StepView {
        snapshot,
        events,
        shell: plan_step
            .as_ref()
            .is_some_and(|s| s.agent.as_ref() == "shell"),
        description: plan_step.map(|s| s.description),
    })
}

/// `GET /executions/{id}/steps/{step}`.
pub(crate) async fn step(
    State(web): State<Arc<Web>>,
    Path((id, step)): Path<(String, String)>,
) -> Reply {
    let id = resolve_exec(&web, &id).await?;
    let view = read(&web, id, &step).await?;
    let ended = view.snapshot.execution.value.stage().is_terminal();
    let body = format!(
        "<h1>Step <code>{}</code></h1><p>{}execution <a class=\"id\" href=\"/executions/{id}\">{}</a> · \
<a href=\"/audit?exec={id}\">audit tree</a></p>\
<div id=\"live\" data-events=\"{}\"{}>{}</div>\
<noscript><p class=\"mut\">Live updates need JavaScript; reload the page to refresh.</p></noscript>",
        esc(&step),
        view.description
            .as_deref()
            .map(|d| format!("{} · ", markdown::line(d)))
            .unwrap_or_default(),
        esc(&short_id(&id.to_string())),
        if ended {
            String::new()
        } else {
            format!("/executions/{id}/steps/{}/events", esc(&step))
        },
        if ended { " data-ended=\"1\"" } else { "" },
        render(&view, &step),
    );
    Ok(Html(page(&format!("Step {step}"), &body)).into_response())
}

/// `GET /executions/{id}/steps/{step}/events`: the step's part whenever it changes, `end`
/// when the execution ends.
pub(crate) async fn events(
    State(web): State<Arc<Web>>,
    Path((id, step)): Path<(String, String)>,
) -> Response {
    let id = match resolve_exec(&web, &id).await {
        Ok(id) => id,
        Err(page) => return page,
    };
    let first = match read(&web, id, &step).await {
        Ok(view) => render(&view, &step),
        Err(page) => return page,
    };
    changes(web, first, move |web| {
        let step = step.clone();
        async move {
            let view = read(&web, id, &step)
                .await
                .map_err(|_| format!("execution {id} cannot be read"))?;
            let html = render(&view, &step);
            Ok(Rendered {
                probe: html.clone(),
                html,
                ended: view.snapshot.execution.value.stage().is_terminal(),
            })
        }
    })
}

/// The live part: the task's state, then each attempt with its transcript and output.
fn render(view: &StepView, step: &str) -> String {
    let Some(task) = view
        .snapshot
        .tasks
        .iter()
        .map(|t| &t.value)
        .find(|t| t.step_id().as_str() == step)
    else {
        return String::new();
    };
    let mut out = format!("<p class=\"status\">{}", badge(&task.status().to_string()));
    if let Task::Running(r) = task {
        let _ = write!(out, " attempt {} running", r.attempt);
    }
    out.push_str("</p>");
    // Attempts in the order they started, each with the entries hung under it.
    let mut attempts: BTreeMap<u32, Vec<&ExecEvent>> = BTreeMap::new();
    for e in &view.events {
        if let Some(a) = e.attempt {
            attempts.entry(a).or_default().push(e);
        }
    }
    if attempts.is_empty() {
        out.push_str("<p class=\"mut\">no attempts yet</p>");
    }
    for (number, evs) in attempts {
        let _ = write!(
            out,
            "<section class=\"attempt card\" id=\"attempt-{number}\"><h2>Attempt {number}</h2>"
        );
        for e in evs {
            item(&mut out, view, step, e);
        }
        out.push_str("</section>");
    }
    out
}

fn str_of<'a>(data: &'a Value, key: &str) -> Option<&'a str> {
    data.get(key).and_then(Value::as_str)
}

/// Recorded text an agent or a process wrote, escaped, in a box that wraps.
fn pre(text: &str) -> String {
    format!("<pre class=\"out\">{}</pre>", esc(&cut(text, MAX_TEXT)))
}

fn note(out: &mut String, data: &Value) {
    if let Some(n) = cut_note(data) {
        let _ = write!(out, "<p class=\"mut\">{}</p>", esc(&n));
    }
}

/// One entry of an attempt, as `exec logs` prints it.
fn item(out: &mut String, view: &StepView, step: &str, e: &ExecEvent) {
    let d = &e.data;
    let at = when_cell(e.at);
    match e.kind.as_str() {
        "task.attempt.started" => {
            let _ = write!(
                out,
                "<p class=\"ev\">started {at} by agent <code>{}</code></p>",
                esc(str_of(d, "agent").unwrap_or("?"))
            );
        }
        "agent.answer" => {
            let turn = d.get("turn").and_then(Value::as_u64).unwrap_or(0);
            let tokens = answer_tokens(d)
                .map(|(i, o)| format!(", {i} in / {o} out tokens"))
                .unwrap_or_default();
            let _ = write!(
                out,
                "<div class=\"ev answer\"><p class=\"meta\">answer (turn {turn}, {}{tokens}) {at}</p>{}",
                esc(str_of(d, "agent").unwrap_or("?")),
                markdown::block(&cut(str_of(d, "text").unwrap_or(""), MAX_TEXT))
            );
            note(out, d);
            out.push_str("</div>");
        }
        "check.passed" | "check.failed" => {
            let millis = d.get("millis").and_then(Value::as_u64).unwrap_or(0);
            let _ = write!(
                out,
                "<div class=\"ev\"><p class=\"meta\">check <code>{}</code> → {} ({millis} ms)</p>",
                esc(str_of(d, "command").unwrap_or("?")),
                esc(&check_outcome(d))
            );
            if e.kind == "check.failed" {
                out.push_str(&pre(str_of(d, "output").unwrap_or("")));
            }
            out.push_str("</div>");
        }
        "agent.tool" => {
            let how = if d.get("ok").and_then(Value::as_bool) == Some(false) {
                "failed"
            } else {
                "ok"
            };
            let _ = write!(
                out,
                "<div class=\"ev tool\"><p class=\"meta\">own tool <code>{}</code> <code>{}</code> → {how}</p>",
                esc(str_of(d, "tool").unwrap_or("?")),
                esc(&cut(
                    &d.get("input").map(Value::to_string).unwrap_or_default(),
                    400
                ))
            );
            if let Some(o) = str_of(d, "output") {
                out.push_str(&pre(o));
            }
            note(out, d);
            out.push_str("</div>");
        }
        "tool.call" | "tool.refused" => {
            let _ = write!(
                out,
                "<div class=\"ev tool\"><p class=\"meta\">tool <code>{}</code> <code>{}</code> → {}</p>",
                esc(str_of(d, "tool").unwrap_or("?")),
                esc(&cut(
                    &d.get("arguments").map(Value::to_string).unwrap_or_default(),
                    400
                )),
                esc(tool_outcome(&e.kind, d).lines().next().unwrap_or(""))
            );
            if let Some(r) = str_of(d, "result") {
                out.push_str(&pre(r));
            } else if let Some(err) = str_of(d, "error").filter(|e| e.contains('\n')) {
                out.push_str(&pre(err));
            }
            note(out, d);
            out.push_str("</div>");
        }
        "step.changes" => {
            if let Ok(c) = serde_json::from_value::<orca_core::RecordedChanges>(d.clone()) {
                let files = c.files.len() + usize::try_from(c.more_files).unwrap_or(usize::MAX);
                let _ = write!(
                    out,
                    "<p class=\"ev\">changed {} (<a href=\"/executions/{}#changes\">the diff</a>)</p>",
                    orca_core::plural::count(files, "file", "files"),
                    e.execution_id
                );
            }
        }
        _ if ends_attempt(e) => {
            let how = e.kind.trim_start_matches("task.attempt.");
            let took = attempt_took(view, step, e.attempt)
                .map(|t| format!(" in {t}"))
                .unwrap_or_default();
            let _ = write!(out, "<p class=\"ev end\">{} {at}{took}</p>", badge(how));
            if let Some(m) = d
                .get("failure")
                .and_then(|f| f.get("message"))
                .and_then(Value::as_str)
            {
                let _ = write!(out, "<p class=\"msg bad\">failure: {}</p>", esc(m));
            }
            if let Some(output) =
                attempt_output(&view.snapshot, step, e.attempt).filter(|o| !o.trim().is_empty())
            {
                out.push_str("<h3>Output</h3>");
                if view.shell {
                    out.push_str(&pre(&output));
                } else {
                    out.push_str(&markdown::block(&cut(&output, MAX_TEXT)));
                }
            }
        }
        other => {
            let _ = write!(out, "<p class=\"ev\"><code>{}</code> {at}</p>", esc(other));
        }
    }
}

/// How long attempt `number` took, from its task record.
fn attempt_took(view: &StepView, step: &str, number: Option<u32>) -> Option<String> {
    let task = view
        .snapshot
        .tasks
        .iter()
        .map(|t| &t.value)
        .find(|t| t.step_id().as_str() == step)?;
    let a = task.attempts().iter().find(|a| Some(a.number) == number)?;
    if matches!(a.outcome, AttemptOutcome::Abandoned { .. }) {
        return None;
    }
    Some(secs(a.finished_at - a.started_at))
}
