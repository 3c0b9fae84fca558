//! Secrets in the binary: the one redactor every output goes through (stdout, stderr, logs in
//! every format, the store), loading the config and its keys (refusing files others can read),
//! the step environment policy, and `orca doctor`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, RwLock};

use orca_agents::config::Config;
use orca_agents::keys::{self, KeySource, KeyStatus};
use orca_agents::{Agents, BackendSpec, ConfigError, LoopSettings};
use orca_core::redact::{Redactor, is_secret_env_name, plausible_secret_value};
use orca_core::{AgentPort as _, Plan};
use orca_os::step_env::{self, EnvPolicy, NamedVar};
use serde_json::{Value, json};

use crate::exit::CliError;

static REDACTOR: LazyLock<RwLock<Redactor>> = LazyLock::new(|| RwLock::new(from_environment()));

/// The redactor of this process (cheap to clone).
pub(crate) fn redactor() -> Redactor {
    REDACTOR
        .read()
        .map_or_else(|p| p.into_inner().clone(), |r| r.clone())
}

/// Adds the secrets found while loading the config (keys from files and commands, env file
/// values) to the process's redactor.
pub(crate) fn learn(more: &Redactor) {
    let mut r = REDACTOR
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    r.merge(more);
}

/// `text` redacted.
pub(crate) fn redact(text: &str) -> String {
    redactor().redact(text)
}

/// A redactor knowing the values of every environment variable of this process whose name
/// says it holds a secret (`*_API_KEY`, `*_TOKEN`, `*SECRET*`, `*PASSWORD*`…).
fn from_environment() -> Redactor {
    Redactor::new().with_secrets(
        std::env::vars()
            .filter(|(k, v)| is_secret_env_name(k) && plausible_secret_value(v))
            .map(|(_, v)| v),
    )
}

/// A `tracing` writer that redacts each event before it reaches stderr: every log format
/// (`--log-format human|json`, any `-v`) goes through it.
#[derive(Debug, Default)]
pub(crate) struct RedactingStderr;

/// One event's bytes, written redacted when dropped.
#[derive(Debug, Default)]
pub(crate) struct EventBuf(Vec<u8>);

impl std::io::Write for EventBuf {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuf {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.0);
        let mut err = std::io::stderr().lock();
        crate::model_meter::clear_status(&mut err);
        let _ = err.write_all(redact(&text).as_bytes());
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactingStderr {
    type Writer = EventBuf;

    fn make_writer(&'a self) -> Self::Writer {
        EventBuf::default()
    }
}

/// Refuses a config file that holds something secret-looking while others can read it.
pub(crate) fn check_config_file(path: &Path, text: &str) -> Result<(), CliError> {
    if Redactor::new().finds_secret(text) {
        keys::check_private(path, "config file").map_err(CliError::bad_input)?;
    }
    Ok(())
}

/// The project's agents, their step environment policy, and the secrets learned on the way
/// (added to the process's redactor).
pub(crate) struct Loaded {
    pub(crate) agents: Agents,
    pub(crate) config: Option<Config>,
}

/// Reads `.orca/config.toml` (if any) and builds the agents, their step environment and the
/// redactor's secrets.
pub(crate) fn load_agents(root: &Path) -> Result<Loaded, CliError> {
    let env = |k: &str| std::env::var(k).ok();
    // The user's config under the project's, `ORCA_*` over both (`config_layers`).
    let Some(layers) = crate::config_layers::load(Some(root), &env)? else {
        let agents = Agents::with_defaults(root, &env, LoopSettings::default())
            .with_env_policy(EnvPolicy::from_vars(std::env::vars()));
        remember_keys(&agents);
        return Ok(Loaded {
            agents,
            config: None,
        });
    };
    let text = crate::config_layers::merged_text(&layers, &env);
    // Each file was checked on its own; an error of the merge names the files merged.
    let named = match layers.files.as_slice() {
        [one] => one.clone(),
        [] => PathBuf::from("the ORCA_* environment settings"),
        _ => PathBuf::from(format!(
            "{} (merged)",
            layers
                .files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" + ")
        )),
    };
    let config = Config::parse(&text, &named).map_err(|e| CliError::bad_input(e.to_string()))?;
    let policy = config
        .env_policy(root, std::env::vars())
        .map_err(|e| CliError::bad_input(e.to_string()))?;
    learn(&Redactor::new().with_secrets(policy.file_values()));
    let agents = match Agents::from_config(root, &config, &env, LoopSettings::default()) {
        Ok(agents) => agents,
        // A key that is not set only matters to the agents that use it: they fail when called
        // (with an authentication error); everything else works.
        Err(ConfigError::MissingKey { file, field, var }) => {
            tracing::warn!(
                "{file}: {field}: the environment variable {var} is not set; the agents using it fail when called"
            );
            let placeholder = |k: &str| {
                std::env::var(k)
                    .ok()
                    .or_else(|| (k == var).then(|| "unset".to_owned()))
            };
            Agents::from_config(root, &config, &placeholder, LoopSettings::default())
                .map_err(|e| CliError::bad_input(e.to_string()))?
        }
        Err(e) => return Err(CliError::bad_input(e.to_string())),
    };
    let agents = agents.with_env_policy(policy);
    remember_keys(&agents);
    Ok(Loaded {
        agents,
        config: Some(config),
    })
}

fn remember_keys(agents: &Agents) {
    learn(&Redactor::new().with_secrets(agents.api_keys()));
    // A proxy's password, too (ADR 0025): no log line may carry it.
    learn(&Redactor::new().with_secrets(agents.proxy_secrets()));
}

/// What one step will receive, for `plan show`: names, never values.
pub(crate) fn step_env_json(plan: &Plan, policy: &EnvPolicy) -> Value {
    let steps: Vec<Value> = plan
        .content()
        .steps
        .iter()
        .map(|s| {
            json!({
                "step_id": s.id,
                "base": step_env::BASE_DESCRIPTION,
                "named": policy.named(&s.agent, &s.env),
            })
        })
        .collect();
    Value::Array(steps)
}

fn named_text(named: &[NamedVar]) -> String {
    named
        .iter()
        .map(|v| {
            format!(
                "{} ({}{})",
                v.name,
                v.from,
                if v.set { "" } else { ", not set" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `plan show` section listing what each step receives.
pub(crate) fn step_env_text(plan: &Plan, policy: &EnvPolicy) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "Environment (names only; every step gets {}):\n",
        step_env::BASE_DESCRIPTION
    );
    for s in &plan.content().steps {
        let named = policy.named(&s.agent, &s.env);
        let _ = writeln!(
            out,
            "  {}: {}",
            s.id,
            if named.is_empty() {
                "nothing more".to_owned()
            } else {
                format!("+ {}", named_text(&named))
            }
        );
    }
    out
}

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
                masked: key.as_deref().filter(|_| present).map(keys::mask),
                present,
                source,
            };
            (info.id.to_string(), info.backend, status)
        })
        .collect()
}

/// `orca doctor`: where each agent's key comes from (masked), and what steps receive.
pub(crate) fn doctor(
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
                .map(|a| named_text(&policy.named(&a, &[])))
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "-".to_owned());
            // Redacted per cell, so the table stays aligned.
            vec![id.clone(), backend.clone(), redact(&s.to_string()), named]
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

/// Writes a new private file (0600 whatever the umask).
pub(crate) fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(text.as_bytes())
}
