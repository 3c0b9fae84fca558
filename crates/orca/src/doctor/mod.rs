//! `orca doctor`: the keys and step environment of the configured agents ([`report`]), and
//! the live checks of what a run needs ([`live`]).

use std::path::Path;

use orca_agents::api_keys::{self, KeySource, KeyStatus};
use orca_agents::config::Config;
use orca_agents::{Agents, BackendSpec};
use orca_core::AgentPort as _;
use orca_os::step_env;
use serde_json::{Value, json};

pub(crate) mod live;
mod telemetry;

/// The key status of every agent, for `orca doctor`.
fn key_statuses(agents: &Agents, config: Option<&Config>) -> Vec<(String, String, KeyStatus)> {
    let env = |k: &str| std::env::var(k).ok();
    agents
        .agents()
        .into_iter()
        .map(|info| {
            let profile = agents.profile(&info.id);
            let key = profile.and_then(|p| match &p.backend {
                BackendSpec::OpenAi { api_key, .. } | BackendSpec::Anthropic { api_key, .. } => {
                    api_key.as_ref().map(|k| k.expose().to_owned())
                }
                _ => None,
            });
            let needs_key = profile.is_some_and(|p| {
                matches!(
                    p.backend,
                    BackendSpec::OpenAi { .. } | BackendSpec::Anthropic { .. }
                )
            });
            let source = if needs_key {
                config.map_or_else(
                    || orca_agents::config::default_key_source(&env),
                    |c| c.key_source(&info.id, &env),
                )
            } else {
                KeySource::None
            };
            // A placeholder put in for a variable that is not set is not a key.
            let present = key.as_deref().is_some_and(|k| k != "unset");
            let status = KeyStatus {
                masked: key.as_deref().filter(|_| present).map(api_keys::mask),
                present,
                source,
            };
            (info.id.to_string(), info.backend, status)
        })
        .collect()
}

/// `orca doctor`: where each agent's key comes from (masked), and what steps receive.
pub(crate) fn report(
    agents: &Agents,
    config: Option<&Config>,
    root: &Path,
    json_out: bool,
) -> Value {
    let statuses = key_statuses(agents, config);
    let policy = agents.env_policy();
    let env_names: Vec<Value> = agents
        .agents()
        .iter()
        .map(|a| json!({ "agent_id": a.id, "named": policy.named(&a.id, &[]) }))
        .collect();
    let store = root.join(".orca");
    let store_mode = std::fs::metadata(&store).ok().map(|m| {
        use std::os::unix::fs::PermissionsExt as _;
        format!("{:04o}", m.permissions().mode() & 0o777)
    });
    let value = json!({
        "keys": statuses.iter().map(|(id, backend, s)| json!({ "agent_id": id, "backend": backend, "key": s })).collect::<Vec<_>>(),
        "step_env": { "base": step_env::BASE_DESCRIPTION, "agents": env_names },
        "store": { "path": store, "mode": store_mode },
    });
    if json_out {
        return value;
    }
    let rows: Vec<Vec<String>> = statuses
        .iter()
        .map(|(id, backend, s)| {
            let agent_id = orca_core::AgentId::parse(id).ok();
            let named = agent_id
                .map(|a| crate::settings::step_env::named_text(&policy.named(&a, &[])))
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "-".to_owned());
            // Redacted per cell, so the table stays aligned.
            vec![
                id.clone(),
                backend.clone(),
                crate::redact::redact(&s.to_string()),
                named,
            ]
        })
        .collect();
    let mut text = crate::render::table(
        &["AGENT", "BACKEND", "KEY", "STEP ENV (beyond the base)"],
        &rows,
    );
    text.push_str(&format!(
        "\nevery step gets {}; nothing else of orca's environment\n.orca: {}\n",
        step_env::BASE_DESCRIPTION,
        store_mode.map_or_else(|| "not created yet".to_owned(), |m| format!("mode {m}")),
    ));
    Value::String(text)
}
