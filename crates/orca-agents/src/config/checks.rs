//! Checks of one agent's settings and the backend they describe: every error names the file
//! and the field (`agents.reviewer.backend: unknown backend "gpt"`).

use std::path::{Path, PathBuf};

use orca_llm::secret::ApiKey;

use crate::config::{AgentSettings, BACKENDS, Config, is_env_name};
use crate::profile::{
    ALL_TOOLS, ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_MODEL, DEFAULT_OLLAMA_MODEL,
    DEFAULT_OPENAI_MODEL, OLLAMA_BASE_URL, OPENAI_BASE_URL,
};
use crate::{BackendSpec, CliKind, CliSpec, ConfigError, WireApi};

impl Config {
    pub(super) fn validate(s: &AgentSettings, field: &str, file: &str) -> Result<(), ConfigError> {
        let invalid = |sub: &str, message: String| ConfigError::Invalid {
            file: file.to_owned(),
            field: format!("{field}.{sub}"),
            message,
        };
        if let Some(limits) = &s.limits {
            limits
                .validate()
                .map_err(|(sub, message)| invalid(&format!("limits.{sub}"), message))?;
        }
        if let Some(b) = &s.backend
            && !BACKENDS.contains(&b.as_str())
        {
            return Err(invalid(
                "backend",
                format!(
                    "unknown backend \"{b}\" (expected one of: {})",
                    BACKENDS.join(", ")
                ),
            ));
        }
        if s.cli.is_some() && s.backend.as_deref() != Some("cli") {
            return Err(invalid(
                "cli",
                "declares how a program is run, which only `backend = \"cli\"` uses".to_owned(),
            ));
        }
        if s.backend.as_deref() == Some("cli") {
            if s.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                return Err(invalid(
                    "command",
                    "backend \"cli\" runs the program named here (\"gemini\", \"aider\")"
                        .to_owned(),
                ));
            }
            if s.permission_mode.is_some() {
                return Err(invalid(
                    "permission_mode",
                    "backend \"cli\" has no permission modes: put the program's own flags in `args` (and `cli.read_only_args` for questions)".to_owned(),
                ));
            }
            if let Some(cli) = &s.cli {
                cli.validate()
                    .map_err(|(sub, message)| invalid(&format!("cli.{sub}"), message))?;
            }
        }
        if let Some(url) = &s.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(invalid(
                "base_url",
                format!("\"{url}\" is not an http:// or https:// URL"),
            ));
        }
        if let Some(env) = &s.api_key_env
            && !is_env_name(env)
        {
            return Err(invalid(
                "api_key_env",
                "must be the NAME of an environment variable (like ANTHROPIC_API_KEY), never the key itself"
                    .to_owned(),
            ));
        }
        if [
            s.api_key_env.is_some(),
            s.api_key_file.is_some(),
            s.api_key_cmd.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count()
            > 1
        {
            return Err(invalid(
                "api_key_env",
                "set one of api_key_env, api_key_file, api_key_cmd".to_owned(),
            ));
        }
        if let Some(cmd) = &s.api_key_cmd
            && let Err(e) = crate::api_keys::split_command(cmd)
        {
            return Err(invalid("api_key_cmd", e));
        }
        if let Some(names) = &s.env
            && let Some(bad) = names.iter().find(|n| !orca_core::plan::is_env_name(n))
        {
            return Err(invalid(
                "env",
                format!(
                    "{bad:?} must be the NAME of an environment variable (not ORCA_*), never a value"
                ),
            ));
        }
        if let Some(g) = &s.generation
            && let Err((sub, message)) = g.validate()
        {
            return Err(invalid(&format!("generation.{sub}"), message));
        }
        if s.prompt.is_some() && s.prompt_file.is_some() {
            return Err(invalid(
                "prompt_file",
                "set either prompt or prompt_file, not both".to_owned(),
            ));
        }
        if let Some(tools) = &s.tools {
            for t in tools {
                if !ALL_TOOLS.contains(&t.as_str()) {
                    return Err(invalid(
                        "tools",
                        format!(
                            "unknown tool \"{t}\" (expected any of: {})",
                            ALL_TOOLS.join(", ")
                        ),
                    ));
                }
            }
        }
        if s.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(invalid("model", "must not be empty".to_owned()));
        }
        if let Some(b) = s.backend.as_deref() {
            if s.api == Some(WireApi::Responses) && b != "openai" {
                return Err(invalid(
                    "api",
                    format!("only the openai backend speaks the Responses API, not \"{b}\""),
                ));
            }
            if s.api == Some(WireApi::Ollama) && !["openai", "ollama"].contains(&b) {
                return Err(invalid(
                    "api",
                    format!(
                        "only the ollama and openai backends speak Ollama's native API, not \"{b}\""
                    ),
                ));
            }
            if s.ca_file.is_some() && !["openai", "ollama", "anthropic"].contains(&b) {
                return Err(invalid(
                    "ca_file",
                    format!(
                        "only model backends (openai, ollama, anthropic) take a ca_file, not \"{b}\""
                    ),
                ));
            }
            if s.script.is_some() && b != "scripted" {
                return Err(invalid(
                    "script",
                    format!("only the scripted backend takes a script, not \"{b}\""),
                ));
            }
            if s.command.is_some() && !["claude-code", "codex", "opencode", "cli"].contains(&b) {
                return Err(invalid(
                    "command",
                    format!("only command-line backends take a command, not \"{b}\""),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn backend_spec(
        &self,
        s: &AgentSettings,
        field: &str,
        root: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<BackendSpec, ConfigError> {
        let invalid = |sub: &str, message: String| ConfigError::Invalid {
            file: self.file.clone(),
            field: format!("{field}.{sub}"),
            message,
        };
        let secret = |sub: &str, message: String| ConfigError::Secret {
            file: self.file.clone(),
            field: format!("{field}.{sub}"),
            message,
        };
        let key = |default_env: Option<&str>| -> Result<Option<ApiKey>, ConfigError> {
            if let Some(path) = &s.api_key_file {
                let path = match (path.strip_prefix("~"), env("HOME")) {
                    (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
                    _ => root.join(path),
                };
                // A key file others can read is refused outright (as ssh does); a missing or
                // empty one only fails the agents that use it, when they are called.
                if path.exists() {
                    crate::api_keys::check_private(&path, "key file")
                        .map_err(|m| secret("api_key_file", m))?;
                }
                return Ok(match crate::api_keys::read_key_file(&path) {
                    Ok(k) => Some(ApiKey::new(k)),
                    Err(m) => {
                        tracing::warn!(
                            "{}: {field}.api_key_file: {m}; the agents using it fail when called",
                            self.file
                        );
                        None
                    }
                });
            }
            if let Some(cmd) = &s.api_key_cmd {
                return Ok(match crate::api_keys::run_key_command_once(cmd, root) {
                    Ok(k) => Some(ApiKey::new(k)),
                    Err(m) => {
                        tracing::warn!(
                            "{}: {field}.api_key_cmd: {m}; the agents using it fail when called",
                            self.file
                        );
                        None
                    }
                });
            }
            match &s.api_key_env {
                Some(name) => env(name)
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| Some(ApiKey::new(v)))
                    .ok_or_else(|| ConfigError::MissingKey {
                        file: self.file.clone(),
                        field: format!("{field}.api_key_env"),
                        var: name.clone(),
                    }),
                None => Ok(default_env
                    .and_then(env)
                    .filter(|v| !v.trim().is_empty())
                    .map(ApiKey::new)),
            }
        };
        let model = |default: &str| s.model.clone().unwrap_or_else(|| default.to_owned());
        let url = |default: &str| s.base_url.clone().unwrap_or_else(|| default.to_owned());
        Ok(match s.backend.as_deref() {
            Some("cli") => {
                let program = s
                    .command
                    .clone()
                    .filter(|c| !c.trim().is_empty())
                    .ok_or_else(|| {
                        invalid(
                            "command",
                            "backend \"cli\" runs the program named here (\"gemini\", \"aider\")"
                                .to_owned(),
                        )
                    })?;
                if s.timeout_secs == Some(0) {
                    return Err(invalid("timeout_secs", "must be at least 1".to_owned()));
                }
                let declaration = s
                    .cli
                    .clone()
                    .unwrap_or_default()
                    .validate()
                    .map_err(|(field, m)| invalid(&format!("cli.{field}"), m))?;
                let spec = CliSpec {
                    model: s.model.clone(),
                    args: s.args.clone().unwrap_or_default(),
                    permission_mode: s.permission_mode.clone(),
                    timeout: s.timeout_secs.map(std::time::Duration::from_secs),
                    ..CliSpec::declared(program, declaration)
                };
                spec.validate().map_err(|m| invalid("permission_mode", m))?;
                BackendSpec::Cli(spec)
            }
            None => {
                // The backend found in the environment, with what the settings name over it.
                let mut spec = BackendSpec::default_from_env(env);
                if let BackendSpec::OpenAi {
                    base_url,
                    model,
                    api_key,
                }
                | BackendSpec::Anthropic {
                    base_url,
                    model,
                    api_key,
                } = &mut spec
                {
                    if let Some(u) = &s.base_url {
                        base_url.clone_from(u);
                    }
                    if let Some(m) = &s.model {
                        model.clone_from(m);
                    }
                    if s.has_key_source() {
                        *api_key = key(None)?;
                    }
                }
                spec
            }
            Some("anthropic") => BackendSpec::Anthropic {
                base_url: url(ANTHROPIC_BASE_URL),
                model: model(DEFAULT_ANTHROPIC_MODEL),
                api_key: key(Some("ANTHROPIC_API_KEY"))?,
            },
            Some("openai") => BackendSpec::OpenAi {
                base_url: url(OPENAI_BASE_URL),
                model: model(DEFAULT_OPENAI_MODEL),
                api_key: key(Some("OPENAI_API_KEY"))?,
            },
            Some("ollama") => BackendSpec::OpenAi {
                base_url: url(OLLAMA_BASE_URL),
                model: model(DEFAULT_OLLAMA_MODEL),
                api_key: key(None)?,
            },
            Some(cli @ ("claude-code" | "codex" | "opencode")) => {
                let kind = CliKind::from_backend(cli).unwrap_or(CliKind::ClaudeCode);
                if s.timeout_secs == Some(0) {
                    return Err(invalid("timeout_secs", "must be at least 1".to_owned()));
                }
                let spec = CliSpec {
                    program: s
                        .command
                        .clone()
                        .unwrap_or_else(|| kind.default_program().to_owned()),
                    model: s.model.clone(),
                    args: s.args.clone().unwrap_or_default(),
                    permission_mode: s.permission_mode.clone(),
                    timeout: s.timeout_secs.map(std::time::Duration::from_secs),
                    ..CliSpec::new(kind)
                };
                spec.validate().map_err(|m| invalid("permission_mode", m))?;
                BackendSpec::Cli(spec)
            }
            Some("scripted") => {
                let script = s.script.as_ref().ok_or_else(|| {
                    invalid(
                        "script",
                        "the scripted backend needs a script file".to_owned(),
                    )
                })?;
                BackendSpec::Scripted {
                    path: root.join(script),
                }
            }
            Some("shell") => BackendSpec::Shell,
            Some(other) => return Err(invalid("backend", format!("unknown backend \"{other}\""))),
        })
    }
}
