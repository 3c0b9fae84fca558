//! `orca agents list` and `orca doctor`.

use orca_core::AgentPort as _;
use serde_json::{Value, json};

use crate::app::{App, out, out_json};
use crate::exit::{CliError, Exit};
use crate::render;
use crate::secrets;

pub(crate) fn agents_list(app: &App) -> Result<Exit, CliError> {
    let agents = app.agents.agents();
    if app.json {
        out_json(&json!(agents));
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
pub(crate) fn doctor(app: &App) -> Result<Exit, CliError> {
    let report = secrets::doctor(&app.agents, app.config.as_ref(), &app.root, app.json);
    match report {
        Value::String(text) => out(&text),
        other => out_json(&other),
    }
    Ok(Exit::Ok)
}
