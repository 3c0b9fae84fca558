//! One execution, live: the fragment the page shows (and re-renders), and the server-sent
//! events that push it whenever it changes (server-side change detection).

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use orca_core::{AttemptOutcome, DecisionRequest, Execution, ExecutionId, Task};

use crate::html::{badge, cut, esc, nonce_field, secs, status_badge, when, when_cell};
use crate::state::Web;
use crate::tokens::TokenName;
use crate::views::{self, ExecutionView};

/// How long one event stream stays open.
const STREAM_LIMIT: Duration = Duration::from_secs(3600);

fn decision_box(id: ExecutionId, request: &DecisionRequest, nonce: &dyn Fn() -> String) -> String {
    let mut out = String::from("<div class=\"card decision\"><h2>Decision needed</h2>");
    match request {
        DecisionRequest::Deviation {
            step_id,
            attempts,
            failure,
        } => {
            let _ = write!(
                out,
                "<p>Step <code>{}</code> failed after {}: {}</p>{}",
                esc(step_id.as_str()),
                orca_core::plural::count(*attempts, "attempt", "attempts"),
                esc(&failure.message),
                failure
                    .output
                    .as_ref()
                    .map(|o| format!("<pre>{}</pre>", esc(&cut(o, 4000))))
                    .unwrap_or_default()
            );
            let _ = write!(
                out,
                "<form class=\"stack\" method=\"post\" action=\"/executions/{id}/decide\">{}\
<label>Guidance for the retry or the new plan (optional)<textarea name=\"guidance\" rows=\"2\"></textarea></label>\
<button type=\"submit\" name=\"decision\" value=\"retry\" id=\"retry\">Retry</button> \
<button class=\"sec\" type=\"submit\" name=\"decision\" value=\"replan\" id=\"replan\">Replan</button> \
<button class=\"bad\" type=\"submit\" name=\"decision\" value=\"stop\" id=\"stop\">Stop</button></form>",
                nonce_field(&nonce())
            );
        }
        DecisionRequest::Interruption {
            step_id,
            reason,
            question,
        } => {
            let _ = write!(
                out,
                "<p>Step <code>{}</code> stopped: {}</p>{}",
                esc(step_id.as_str()),
                esc(reason),
                question
                    .as_ref()
                    .map(|q| format!("<p><strong>{}</strong></p>", esc(q)))
                    .unwrap_or_default()
            );
            let _ = write!(
                out,
                "<form class=\"stack\" method=\"post\" action=\"/executions/{id}/decide\">{}\
<label>Your answer<textarea name=\"guidance\" rows=\"2\"></textarea></label>\
<button type=\"submit\" name=\"decision\" value=\"answer\" id=\"answer\">Answer</button> \
<button class=\"bad\" type=\"submit\" name=\"decision\" value=\"stop\" id=\"stop\">Stop</button></form>",
                nonce_field(&nonce())
            );
        }
    }
    out.push_str("</div>");
    out
}

fn task_row(task: &Task) -> (String, String, String) {
    let attempts = task.attempts();
    let started = match task {
        Task::Running(r) => Some(r.started_at),
        _ => attempts.first().map(|a| a.started_at),
    };
    let timing = match (task, started) {
        // Not a ticking clock: the fragment changes only when the task does.
        (Task::Running(r), _) => format!("attempt {} running", r.attempt),
        (_, Some(s)) => attempts
            .last()
            .map(|a| secs(a.finished_at - s))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let detail = match task {
        Task::Completed(c) => c.result.summary.clone(),
        Task::Skipped(s) => s.reason.clone(),
        _ => attempts
            .last()
            .map(|a| match &a.outcome {
                AttemptOutcome::Failed { failure } => failure.message.clone(),
                AttemptOutcome::Interrupted { interruption } => interruption.reason.clone(),
                AttemptOutcome::Abandoned { note } => note.clone(),
                _ => String::new(),
            })
            .unwrap_or_default(),
    };
    (started.map(when_cell).unwrap_or_default(), timing, detail)
}

/// The live part of an execution page. `me` gets fresh action tokens for the decision forms.
pub(crate) fn fragment(web: &Web, view: &ExecutionView, me: &TokenName) -> String {
    let issue = || {
        web.actions.issue(
            me,
            &format!("exec:{}:decide", view.snapshot.execution.value.id()),
        )
    };
    render(view, &issue)
}

fn render(view: &ExecutionView, nonce: &dyn Fn() -> String) -> String {
    let e = &view.snapshot.execution.value;
    let id = e.id();
    let done = view
        .snapshot
        .tasks
        .iter()
        .filter(|t| matches!(t.value, Task::Completed(_)))
        .count();
    let mut out = format!(
        "<p class=\"status\">{} {done}/{} steps done · {}</p>",
        status_badge(view.status()),
        view.snapshot.tasks.len(),
        if views::driven(view) {
            "driven by a live process".to_owned()
        } else if e.stage().is_terminal() {
            "ended".to_owned()
        } else {
            "no process drives it now".to_owned()
        }
    );
    match e {
        Execution::Failed(f) => {
            let _ = write!(out, "<p class=\"msg bad\">failed: {}</p>", esc(&f.reason));
        }
        Execution::Stopped(s) => {
            let _ = write!(
                out,
                "<p class=\"msg bad\">stopped by {}{}</p>",
                esc(&s.by),
                s.reason
                    .as_ref()
                    .map(|r| format!(": {}", esc(r)))
                    .unwrap_or_default()
            );
        }
        Execution::Completed(c) => {
            let _ = write!(
                out,
                "<p class=\"msg ok\">completed in {}</p>",
                secs(c.finished_at - c.started_at)
            );
        }
        _ => {}
    }
    if let Some(d) = e.decision() {
        match &d.answer {
            None => out.push_str(&decision_box(id, &d.request, nonce)),
            Some(a) => {
                let _ = write!(
                    out,
                    "<p class=\"msg\">decided by {} at {}; waiting for the run to apply it</p>",
                    esc(&a.by),
                    esc(&when(a.at))
                );
            }
        }
    }
    // Usage and cost only when a model was called (a run of shell steps has none).
    let u = view.usage;
    if u.input_tokens + u.output_tokens + u.cost_micro_usd > 0 {
        let _ = write!(
            out,
            "<p class=\"mut\">usage: {} input + {} output tokens{}</p>",
            u.input_tokens,
            u.output_tokens,
            if u.cost_micro_usd > 0 {
                format!(
                    " · cost ${}.{:06}",
                    u.cost_micro_usd / 1_000_000,
                    u.cost_micro_usd % 1_000_000
                )
            } else {
                String::new()
            }
        );
    }
    if let Some(plan) = &view.plan {
        out.push_str(&crate::svg::dag(
            plan.content(),
            &crate::pages::statuses(&view.snapshot),
            crate::svg::Links::Execution(id),
        ));
    }
    out.push_str("<table><tr><th>Step</th><th>Status</th><th class=\"opt\">Started</th><th>Time</th><th>Result</th></tr>");
    for t in &view.snapshot.tasks {
        let (started, timing, detail) = task_row(&t.value);
        let _ = write!(
            out,
            "<tr class=\"task\"><td><a href=\"/executions/{id}/steps/{step}\"><code>{step}</code></a></td><td>{}{}</td><td class=\"opt\">{}</td><td class=\"time\">{}</td><td class=\"wide\">{}</td></tr>",
            badge(&t.value.status().to_string()),
            match t.value.attempts().len() {
                0 | 1 => String::new(),
                n => format!(" <span class=\"mut\">{n} attempts</span>"),
            },
            started,
            esc(&timing),
            crate::markdown::line(&cut(&detail, 300)),
            step = esc(t.value.step_id().as_str()),
        );
    }
    out.push_str("</table>");
    for t in &view.snapshot.tasks {
        let output = match &t.value {
            Task::Completed(c) => c.result.output.clone(),
            _ => t.value.attempts().last().and_then(|a| match &a.outcome {
                AttemptOutcome::Failed { failure } => failure.output.clone(),
                _ => None,
            }),
        };
        if let Some(o) = output.filter(|o| !o.trim().is_empty()) {
            let _ = write!(
                out,
                "<details><summary>output of <code>{}</code></summary><pre>{}</pre></details>",
                esc(t.value.step_id().as_str()),
                esc(&cut(&o, 8000))
            );
        }
    }
    out
}

/// What a live page shows now: `probe` is compared with the last one sent (without the
/// action tokens, fresh on each render), `html` is what is sent, `ended` closes the stream.
pub(crate) struct Rendered {
    pub(crate) probe: String,
    pub(crate) html: String,
    pub(crate) ended: bool,
}

/// `GET /executions/{id}/events`: an `update` event with the fragment whenever it changes,
/// then `end` when the execution ends.
pub(crate) async fn events(
    State(web): State<Arc<Web>>,
    Extension(me): Extension<TokenName>,
    Path(id): Path<String>,
) -> Response {
    let id = match web.orca.executions().resolve(&id).await {
        Ok(id) => id,
        Err(e) => return crate::pages::error_response(&e.into()),
    };
    // The page holds the state as of now: only changes are sent (re-sending it would replace
    // a form under the user's cursor).
    let first = match views::execution(&web.orca, web.store.as_ref(), id).await {
        Ok(view) => render(&view, &String::new),
        Err(_) => String::new(),
    };
    changes(web, first, move |web| {
        let me = me.clone();
        async move {
            let view = views::execution(&web.orca, web.store.as_ref(), id)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Rendered {
                probe: render(&view, &|| String::new()),
                html: fragment(&web, &view, &me),
                ended: view.snapshot.execution.value.stage().is_terminal(),
            })
        }
    })
}

/// A server-sent event stream of what `now` renders: polled, sent only when its probe
/// changed since `first` (the page's own state) or the last event, `end` once it ended (or
/// failed to render), closed after an hour or when the server stops.
pub(crate) fn changes<F, Fut>(web: Arc<Web>, first: String, now: F) -> Response
where
    F: Fn(Arc<Web>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Rendered, String>> + Send,
{
    let poll = web.settings.poll;
    let started = tokio::time::Instant::now();
    let now = Arc::new(now);
    let state = (web, first, false);
    let stream = futures_util::stream::unfold(state, move |(web, last, ended)| {
        let now = now.clone();
        async move {
            if ended {
                return None;
            }
            loop {
                if started.elapsed() > STREAM_LIMIT {
                    return None;
                }
                let r = match now(web.clone()).await {
                    Ok(r) => r,
                    Err(e) => {
                        let ev = Event::default()
                            .event("end")
                            .data(format!("<p class=\"msg bad\">{}</p>", esc(&e)));
                        return Some((Ok::<_, Infallible>(ev), (web, last, true)));
                    }
                };
                if r.probe != last {
                    let ev = Event::default()
                        .event(if r.ended { "end" } else { "update" })
                        .data(r.html);
                    return Some((Ok(ev), (web, r.probe, r.ended)));
                }
                tokio::select! {
                    () = web.closing.cancelled() => return None,
                    () = tokio::time::sleep(poll) => {}
                }
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
