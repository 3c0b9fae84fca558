//! `orca config show`: the effective settings (`settings::layers`) with where each came from.
//! Needs no project (outside one it shows the user's config and the environment); reads only.

use serde_json::json;

use crate::app::{out, out_json};
use crate::cli::Global;
use crate::exit::{CliError, Exit};
use crate::render;
use crate::settings::layers::{self, ENV_OVERRIDES};

pub(crate) fn show(global: &Global) -> Result<Exit, CliError> {
    let env = |k: &str| std::env::var(k).ok();
    let root = global.root.clone().or_else(|| {
        std::env::current_dir().ok().and_then(|cwd| {
            cwd.ancestors()
                .find(|d| d.join(".orca").is_dir())
                .map(std::path::Path::to_path_buf)
        })
    });
    let project = root.filter(|r| r.join(".orca").is_dir());
    let layers = layers::load(project.as_deref(), &env)?.unwrap_or_default();
    let mut rows = layers::effective(&layers);
    // The shared store's URL may hold a password: shown without it (ADR 0027).
    for (key, value, _) in &mut rows {
        if key == "store.url"
            && let Some(toml::Value::String(url)) = value
        {
            *url = orca_store_postgres::redacted_url(url);
        }
        // A webhook's URL may be its credential (a Slack webhook's path is; ADR 0049).
        if key == "notify.webhook"
            && let Some(toml::Value::Array(hooks)) = value
        {
            for hook in hooks {
                if let Some(toml::Value::String(url)) = hook.get_mut("url") {
                    *url = orca_notify::shown_url(url);
                }
            }
        }
        // Telemetry headers carry the collector's credentials (ADR 0048): never shown.
        if key.starts_with("telemetry.headers")
            && let Some(v) = value
        {
            *v = toml::Value::String("[redacted]".to_owned());
        }
    }
    // The settings an environment variable can set, at their built-in value when unset.
    for (var, key) in ENV_OVERRIDES {
        if !rows.iter().any(|(k, _, _)| k == key) {
            let backend = rows
                .iter()
                .find(|(k, _, _)| k == "defaults.backend")
                .and_then(|(_, v, _)| v.as_ref())
                .and_then(|v| v.as_str().map(str::to_owned));
            let (value, why) = builtin(key, backend.as_deref(), &env);
            rows.push((
                (*key).to_owned(),
                Some(toml::Value::String(value)),
                format!("built-in{why} (set {var} to change)"),
            ));
        }
    }
    let user = layers::user_config_path(&env);
    let project_file = project.map(|r| r.join(".orca").join("config.toml"));
    let file_json =
        |p: Option<std::path::PathBuf>| p.map(|p| json!({ "path": p, "exists": p.is_file() }));
    if global.json {
        let settings: Vec<_> = rows
            .iter()
            .map(|(k, v, s)| {
                // TOML values as JSON.
                let value = v
                    .as_ref()
                    .and_then(|v| serde_json::to_value(v).ok())
                    .unwrap_or(serde_json::Value::Null);
                json!({ "key": k, "value": value, "source": s })
            })
            .collect();
        out_json(&json!({
            "files": { "user": file_json(user), "project": file_json(project_file) },
            "settings": settings,
        }));
    } else {
        let describe = |label: &str, p: Option<std::path::PathBuf>| match p {
            Some(p) if p.is_file() => format!("{label}: {}\n", p.display()),
            Some(p) => format!("{label}: {} (none)\n", p.display()),
            None => format!("{label}: (none)\n"),
        };
        let mut text = describe("User config   ", user);
        text.push_str(&describe("Project config", project_file));
        text.push('\n');
        let table: Vec<Vec<String>> = rows
            .into_iter()
            .map(|(k, v, s)| {
                let v = v.map_or_else(|| "-".to_owned(), |v| v.to_string());
                vec![k, v, s]
            })
            .collect();
        text.push_str(&render::table(&["SETTING", "VALUE", "SOURCE"], &table));
        out(&text);
    }
    Ok(Exit::Ok)
}

/// The value a setting an environment variable overrides has when nothing sets it, and why:
/// the model backend follows the configured backend, else the keys in the environment, as the
/// agents do.
fn builtin(
    key: &str,
    backend: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> (String, &'static str) {
    use orca_agents::BackendSpec;
    use orca_agents::profile as p;
    let (kind, base_url, model, why) = match backend {
        Some("anthropic") => (
            "anthropic",
            p::ANTHROPIC_BASE_URL,
            p::DEFAULT_ANTHROPIC_MODEL,
            ", for that backend",
        ),
        Some("openai") => (
            "openai",
            p::OPENAI_BASE_URL,
            p::DEFAULT_OPENAI_MODEL,
            ", for that backend",
        ),
        Some("ollama") => (
            "ollama",
            p::OLLAMA_BASE_URL,
            p::DEFAULT_OLLAMA_MODEL,
            ", for that backend",
        ),
        Some(_) => ("", "", "", ", not used by that backend"),
        None => match BackendSpec::default_from_env(env) {
            BackendSpec::Anthropic { .. } => (
                "anthropic",
                p::ANTHROPIC_BASE_URL,
                p::DEFAULT_ANTHROPIC_MODEL,
                ", as ANTHROPIC_API_KEY is set",
            ),
            BackendSpec::OpenAi {
                api_key: Some(_), ..
            } => (
                "openai",
                p::OPENAI_BASE_URL,
                p::DEFAULT_OPENAI_MODEL,
                ", as OPENAI_API_KEY is set",
            ),
            _ => (
                "openai",
                p::OLLAMA_BASE_URL,
                p::DEFAULT_OLLAMA_MODEL,
                ", no API key set: a local server (Ollama's port)",
            ),
        },
    };
    match key {
        "defaults.backend" => (kind.to_owned(), why),
        "defaults.model" => (model.to_owned(), why),
        "defaults.base_url" => (base_url.to_owned(), why),
        "sandbox" => (orca_os::SandboxMode::default().as_str().to_owned(), ""),
        _ => (String::new(), ""),
    }
}
