//! The settings of one run of `orca`, read and parsed once: the user's and the project's
//! config files and the `ORCA_*` variables merged ([`layers`]), the agents they describe with
//! their keys (learned by the redactor), the step environment policy, and the sections other
//! parts read (`[serve]`, `[notify]`). Every command takes them from here; nothing reads
//! `.orca/config.toml` again.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use orca_agents::api_keys;
use orca_agents::config::Config;
use orca_agents::{Agents, ConfigError, LoopSettings};
use orca_core::redact::Redactor;
use orca_os::step_env::EnvPolicy;

use crate::exit::CliError;
use crate::redact::learn;

pub(crate) mod layers;
pub(crate) mod notify;
pub(crate) mod step_env;

/// Refuses a config file that holds something secret-looking while others can read it.
pub(crate) fn check_config_file(path: &Path, text: &str) -> Result<(), CliError> {
    if Redactor::new().finds_secret(text) {
        api_keys::check_private(path, "config file").map_err(CliError::bad_input)?;
    }
    Ok(())
}

/// The project's settings: its agents with their step environment policy (the secrets learned
/// on the way are added to the process's redactor), the validated config, and the raw
/// sections that belong to other parts (`[serve]`, `[notify]`), each parsed by its owner.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) agents: Agents,
    pub(crate) config: Option<Config>,
    /// `[serve]` of the merged files, for `orca serve`.
    pub(crate) serve: Option<toml::Value>,
    /// `[notify]` of the merged files, for `orca serve`'s notifier.
    pub(crate) notify: Option<toml::Value>,
    /// `[telemetry]` of the merged files (OpenTelemetry export).
    pub(crate) telemetry: Option<toml::Value>,
    /// The files the settings came from (user, project), for error messages.
    pub(crate) files: Vec<PathBuf>,
    /// Which ways of approving the files allow (`[approval]`).
    pub(crate) approval: layers::ApprovalSettings,
}

impl Settings {
    /// Reads the user's and the project's config (if any) once and builds the agents, their
    /// step environment and the redactor's secrets.
    ///
    /// # Errors
    ///
    /// A file that does not parse or validate (named, with the field), a key file others can
    /// read.
    pub(crate) fn load(root: &Path) -> Result<Self, CliError> {
        load(root)
    }
}

fn load(root: &Path) -> Result<Settings, CliError> {
    let env = |k: &str| std::env::var(k).ok();
    // The user's config under the project's, `ORCA_*` over both (`layers`).
    let Some(layers) = layers::load(Some(root), &env)? else {
        let agents = Agents::with_defaults(root, &env, LoopSettings::default())
            .with_env_policy(EnvPolicy::from_vars(std::env::vars()));
        remember_keys(&agents);
        return Ok(Settings {
            agents,
            config: None,
            serve: None,
            notify: None,
            telemetry: None,
            files: Vec::new(),
            approval: layers::ApprovalSettings::default(),
        });
    };
    let text = layers::merged_text(&layers, &env);
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
    notify::learn_password(layers.merged.get("notify"), root);
    Ok(Settings {
        agents,
        config: Some(config),
        serve: layers.merged.get("serve").cloned(),
        notify: layers.merged.get("notify").cloned(),
        telemetry: layers.merged.get("telemetry").cloned(),
        files: layers.files,
        approval: layers.approval,
    })
}

fn remember_keys(agents: &Agents) {
    learn(&Redactor::new().with_secrets(agents.api_keys()));
    // A proxy's password, too (ADR 0025): no log line may carry it.
    learn(&Redactor::new().with_secrets(agents.proxy_secrets()));
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
