//! `orca ask MESSAGE`: the planner answers, or builds a plan to approve and run.

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
    let reply = tokio::select! {
        reply = orca.relay().invoke(message) => reply?,
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
        PlannerResponse::Failure(failure) if failure.code == ErrorCode::BackendUnavailable => Err(
            CliError::bad_input(format!("the planner cannot run: {failure}")),
        ),
        // The model failed (an error status after retries, a timeout, an answer that could
        // not be used): the work failed, not orca (exit 3, as a failed execution). A planner
        // that failed before it made a plan has no log to hold what it spent: the JSON line
        // says it (`orca eval` counts it).
        PlannerResponse::Failure(failure) => {
            if app.json {
                out_json(&json!({
                    "type": "planner_failed",
                    "code": failure.code,
                    "message": failure.message,
                    "usage": reply.usage,
                }));
            }
            Err(CliError::with(
                Exit::ExecutionFailed,
                format!("the planner failed: {failure}"),
            ))
        }
    }
}

pub(crate) fn planner_text(response: &PlannerResponse) -> String {
    match response {
        PlannerResponse::Answer { text } => text.clone(),
        PlannerResponse::Plan { message, .. } => message.clone().unwrap_or_default(),
        PlannerResponse::Failure(f) => f.to_string(),
    }
}
