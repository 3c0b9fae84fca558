//! `orca ask MESSAGE`: the planner answers, or builds a plan to approve and run.

use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use orca_core::{ErrorCode, PlanRefStage, PlannerResponse};
use orca_services::hitl::render_plan;
use orca_services::{Hitl, NoHuman};
use serde_json::json;

use crate::app::{App, out, out_json};
use crate::cli::RunOptions;
use crate::cmd::run::approve_and_run;
use crate::exit::{CliError, Exit};
use crate::term::{TerminalHitl, interactive};

/// `orca ask MESSAGE`.
pub(crate) async fn ask(app: &App, message: &str, options: &RunOptions) -> Result<Exit, CliError> {
    let hitl: Arc<dyn Hitl> = if interactive() && !app.json {
        Arc::new(TerminalHitl { style: app.style })
    } else {
        Arc::new(NoHuman)
    };
    let orca = app.orca(hitl);
    // Ctrl-C while the planner works ends the conversation (its model request is dropped):
    // nothing was approved or run, and the process says so instead of dying silently.
    let (reply, unplanned) = tokio::select! {
        reply = orca.relay().invoke_keeping(message) => reply?,
        _ = tokio::signal::ctrl_c() => {
            return Err(CliError::with(
                Exit::Interrupted,
                "interrupted (Ctrl-C) while the planner was working: nothing was approved or run; a draft it made stays in `orca plan list`",
            ));
        }
    };
    if let PlannerResponse::Plan { plan_id, .. } = &reply.outcome {
        crate::ids::learn_plan(*plan_id);
    }
    match reply.outcome {
        PlannerResponse::Answer { text } => {
            if app.json {
                out_json(&json!({ "type": "answer", "text": text }));
            } else {
                out(&text);
            }
            Ok(Exit::Ok)
        }
        PlannerResponse::Plan {
            plan_id,
            stage: PlanRefStage::Proposal,
            message,
        } => {
            if let Some(m) = message {
                app.info(&m);
            }
            let plan = orca.planning().plan(plan_id).await?;
            crate::telemetry::planner(app, plan_id, &plan.content().goal).await;
            // The interactive approval shows the plan in its question: print it only when no
            // question will be asked (--yes, or no terminal).
            let asks = interactive() && !options.yes;
            if !app.json && !asks {
                let mut text = render_plan(&plan);
                text.push_str(&crate::settings::step_env::step_env_text(
                    &plan,
                    app.agents.env_policy(),
                ));
                out(&text);
            }
            approve_and_run(app, &orca, plan_id, options, false).await
        }
        PlannerResponse::Plan {
            plan_id,
            stage: PlanRefStage::Draft,
            message,
        } => {
            if app.json {
                out_json(
                    &json!({ "type": "plan", "plan_id": plan_id, "stage": "draft", "message": message }),
                );
            } else {
                out(&format!(
                    "the planner left draft {plan_id}: {}",
                    message.unwrap_or_default()
                ));
            }
            Ok(Exit::Ok)
        }
        // No model reachable, or its key refused: the configuration must change (exit 2);
        // the message names the endpoint and the settings to look at.
        PlannerResponse::Failure(failure) if failure.code == ErrorCode::BackendUnavailable => {
            let kept = keep_conversation(app, message, &failure, &unplanned);
            Err(CliError::bad_input(format!(
                "the planner cannot run: {failure}{}",
                kept_text(kept.as_deref())
            )))
        }
        // The model failed (an error status after retries, a timeout, an answer that could
        // not be used): the work failed, not orca (exit 3, as a failed execution). A planner
        // that failed before it made a plan has no log to hold what it spent: the JSON line
        // says it (`orca eval` counts it).
        PlannerResponse::Failure(failure) => {
            let kept = keep_conversation(app, message, &failure, &unplanned);
            if app.json {
                out_json(&json!({
                    "type": "planner_failed",
                    "code": failure.code,
                    "message": failure.message,
                    "usage": reply.usage,
                    "conversation": kept.as_ref().map(|p| p.display().to_string()),
                }));
            }
            Err(CliError::with(
                Exit::ExecutionFailed,
                format!(
                    "the planner failed: {failure}{}",
                    kept_text(kept.as_deref())
                ),
            ))
        }
    }
}

/// Where a planner that failed before it made a plan leaves its conversation: a plan's log
/// holds a planner's answers and tool calls, and without a plan there is none. Kept in
/// `.orca/planner/failed-<time>-<id>.jsonl` (0600): a first line with the request and the
/// failure, then each answer and tool call in order, every string redacted. `None` when there
/// is nothing to keep, or it could not be written (said, and the failure stays the one shown).
fn keep_conversation(
    app: &App,
    request: &str,
    failure: &orca_core::TaskFailure,
    entries: &[orca_store::audit::NewAuditEntry],
) -> Option<PathBuf> {
    if entries.is_empty() {
        return None;
    }
    let redactor = crate::redact::redactor();
    let now = time::OffsetDateTime::now_utc();
    let mut text = String::new();
    let head = json!({
        "type": "planner_conversation",
        "at": now.format(&time::format_description::well_known::Rfc3339).ok(),
        "request": request,
        "failure": failure,
    });
    for line in std::iter::once(head).chain(
        entries
            .iter()
            .map(|e| json!({ "kind": e.kind, "parent": e.parent, "data": e.data })),
    ) {
        text.push_str(&redactor.redact_json(line).to_string());
        text.push('\n');
    }
    let dir = app.root().join(".orca").join("planner");
    let stamp = format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    );
    // Nanoseconds and the process: two failures never share a name (and a file is never
    // overwritten: it is created new).
    let path = dir.join(format!(
        "failed-{stamp}-{:09}-{}.jsonl",
        now.nanosecond(),
        std::process::id()
    ));
    let written = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .and_then(|()| crate::settings::write_private(&path, &text));
    match written {
        Ok(()) => Some(path),
        Err(e) => {
            app.info(&format!(
                "the planner's conversation could not be kept in {}: {e}",
                path.display()
            ));
            None
        }
    }
}

fn kept_text(kept: Option<&Path>) -> String {
    kept.map(|p| format!(" (its conversation: {})", p.display()))
        .unwrap_or_default()
}

pub(crate) fn planner_text(response: &PlannerResponse) -> String {
    match response {
        PlannerResponse::Answer { text } => text.clone(),
        PlannerResponse::Plan { message, .. } => message.clone().unwrap_or_default(),
        PlannerResponse::Failure(f) => f.to_string(),
    }
}
