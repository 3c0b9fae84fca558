//! `orca agents list` and `orca doctor`.

use orca_core::AgentPort as _;
use serde_json::{Value, json};

use crate::app::{App, out, out_json};
use crate::exit::{CliError, Exit};
use crate::render;

/// The backend kind a person configured: an Ollama endpoint speaks the OpenAI protocol, but it
/// is `ollama` in the config and so in the list.
fn configured_kind(app: &App, agent: &orca_core::AgentInfo) -> String {
    let configured = app.config.as_ref().and_then(|c| {
        c.agents
            .get(&agent.id)
            .and_then(|s| s.backend.clone())
            .or_else(|| c.defaults.backend.clone())
    });
    match configured {
        Some(kind) if kind == "ollama" && agent.backend == "openai" => kind,
        _ => agent.backend.clone(),
    }
}

pub(crate) fn agents_list(app: &App) -> Result<Exit, CliError> {
    let mut agents = app.agents.agents();
    for agent in &mut agents {
        agent.backend = configured_kind(app, agent);
    }
    if app.json {
        // `agent_id`, like `plan_id`, `execution_id` and `step_id` everywhere else.
        let items: Vec<Value> = agents
            .iter()
            .map(|a| crate::app::renamed(json!(a), "id", "agent_id"))
            .collect();
        out_json(&Value::Array(items));
    } else {
        let rows: Vec<Vec<String>> = agents
            .iter()
            .map(|a| {
                vec![
                    a.id.to_string(),
                    format!("{:?}", a.role).to_lowercase(),
                    a.backend.clone(),
                    a.model.clone().unwrap_or_else(|| "-".to_owned()),
                    a.description.clone(),
                ]
            })
            .collect();
        out(&render::table(
            &["AGENT", "ROLE", "BACKEND", "MODEL", "DESCRIPTION"],
            &rows,
        ));
    }
    Ok(Exit::Ok)
}

/// `orca doctor`.
pub(crate) async fn doctor(app: &App) -> Result<Exit, CliError> {
    let report = crate::doctor::report(&app.agents, app.config.as_ref(), &app.root, app.json);
    let checks = crate::doctor::live::run(app).await;
    let problems = crate::doctor::live::problems(&checks);
    match report {
        Value::String(mut text) => {
            text.push('\n');
            text.push_str(&crate::doctor::live::text(&checks));
            out(&crate::redact::redact(&text));
        }
        mut other => {
            other["checks"] = Value::Array(checks);
            other["problems"] = problems.into();
            out_json(&other);
        }
    }
    // A problem a run would meet is not a healthy exit: scripts and CI can act on it.
    Ok(if problems == 0 {
        Exit::Ok
    } else {
        Exit::Unhealthy
    })
}
