//! `.orca/config.toml`: custom agents and overrides of the built-in ones, validated with
//! errors that name the field (`agents.reviewer.backend: unknown backend "gpt"`).
//!
//! The binary reads the file and hands over its text and path; nothing here reads environment
//! variables directly (an `env` lookup is passed in), so keys are resolved where the caller says.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use orca_core::{AgentId, Budget, Role};
use serde::Deserialize;

use crate::error::ConfigError;
use crate::generation::{Generation, GenerationSettings, WireApi};
use crate::profile::{BUILT_INS, Profile, built_in_profiles};
use crate::stall::StallLimits;
use orca_llm::pricing::PriceTable;
use orca_os::sandbox::SandboxMode;

mod checks;
mod limits;
mod template;
mod tls;
pub use limits::LimitSettings;
pub use template::CONFIG_TEMPLATE;

/// Largest prompt file read.
const MAX_PROMPT_BYTES: u64 = 256 * 1024;

/// Backend names accepted in the config.
pub const BACKENDS: &[&str] = &[
    "anthropic",
    "openai",
    "ollama",
    "claude-code",
    "codex",
    "opencode",
    "cli",
    "scripted",
    "shell",
];

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    env_file: Option<PathBuf>,
    #[serde(default)]
    sandbox: Option<String>,
    #[serde(default)]
    sandbox_writable: Option<Vec<PathBuf>>,
    #[serde(default)]
    project_instructions: Option<bool>,
    #[serde(default)]
    isolation: Option<orca_core::Isolation>,
    #[serde(default)]
    defaults: Option<toml::Value>,
    #[serde(default)]
    agents: BTreeMap<String, toml::Value>,
    /// Price overrides (see [`orca_llm::pricing`]).
    #[serde(default)]
    prices: BTreeMap<String, orca_llm::pricing::PriceSetting>,
    /// `orca serve`'s settings: read by the binary (`serve.rs`), not here.
    #[serde(default, rename = "serve")]
    _serve: Option<toml::Value>,
    /// The notifier: read by the binary (`serve.rs`), not here.
    #[serde(default, rename = "notify")]
    _notify: Option<toml::Value>,
    /// OpenTelemetry export: read by the binary (`telemetry.rs`), not here.
    #[serde(default, rename = "telemetry")]
    _telemetry: Option<toml::Value>,
    #[serde(default)]
    store: Option<RawStore>,
    #[serde(default)]
    tls: Option<RawTls>,
}

/// `[tls]`: the root certificates of model endpoints (ADR 0025).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    /// A PEM file of certificates trusted besides the system's.
    #[serde(default)]
    ca_file: Option<PathBuf>,
}

/// `[store]`: where orca keeps plans, executions and audit logs (ADR 0021).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    url: String,
}

/// An agent's settings as written (all optional: a missing field is `None`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSettings {
    /// What it is good at (custom agents).
    pub description: Option<String>,
    /// Its role (custom agents; `specialist` by default).
    pub role: Option<Role>,
    /// The backend name.
    pub backend: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The endpoint.
    pub base_url: Option<String>,
    /// The NAME of the environment variable holding the key.
    pub api_key_env: Option<String>,
    /// A file holding the key (mode 0600), relative to the project root or absolute.
    pub api_key_file: Option<PathBuf>,
    /// A command printing the key (`pass show openai`), run without a shell.
    pub api_key_cmd: Option<String>,
    /// Names of environment variables this agent's steps receive (a command-line agent names
    /// its provider key here).
    pub env: Option<Vec<String>>,
    /// The prompt text.
    pub prompt: Option<String>,
    /// A prompt file, relative to the project root.
    pub prompt_file: Option<PathBuf>,
    /// Granted workspace tools.
    pub tools: Option<Vec<String>>,
    /// Limits: the budget and the stall limits (`[agents.NAME.limits]`).
    pub limits: Option<LimitSettings>,
    /// The executable of a command-line agent.
    pub command: Option<String>,
    /// Extra arguments of a command-line agent, after orca's own flags.
    pub args: Option<Vec<String>>,
    /// A command-line agent's permission mode (Claude Code `--permission-mode`, Codex `-s`,
    /// opencode `auto` / `ask`); by default the one that lets it edit the project.
    pub permission_mode: Option<String>,
    /// A command-line agent's hard timeout per run, in seconds (default 1800).
    pub timeout_secs: Option<u64>,
    /// How a `backend = "cli"` program is run and read (`[agents.NAME.cli]`).
    pub cli: Option<crate::cli::DeclarationSettings>,
    /// The script of a scripted backend, relative to the project root.
    pub script: Option<PathBuf>,
    /// Generation settings (`[agents.NAME.generation]`; see [`crate::generation`]).
    pub generation: Option<GenerationSettings>,
    /// The wire format of an `openai` backend: `chat` (default), `responses`, or `ollama`
    /// (Ollama's native `/api/chat`, also for the `ollama` backend).
    pub api: Option<WireApi>,
    /// A PEM file of root certificates trusted besides the system's for this agent's endpoint
    /// (over `[tls] ca_file`; ADR 0025).
    pub ca_file: Option<PathBuf>,
}

impl AgentSettings {
    const fn has_key_source(&self) -> bool {
        self.api_key_env.is_some() || self.api_key_file.is_some() || self.api_key_cmd.is_some()
    }

    fn merged_over(&self, base: &Self) -> Self {
        let backend_changed = self.backend.is_some() && self.backend != base.backend;
        // Endpoint settings of another backend do not carry over.
        let pick = |mine: &Option<String>, theirs: &Option<String>| {
            unless_changed(backend_changed, mine, theirs)
        };
        Self {
            description: self
                .description
                .clone()
                .or_else(|| base.description.clone()),
            role: self.role.or(base.role),
            backend: self.backend.clone().or_else(|| base.backend.clone()),
            model: pick(&self.model, &base.model),
            base_url: pick(&self.base_url, &base.base_url),
            // One key source: the agent's own, or else the base's.
            api_key_env: if self.has_key_source() {
                self.api_key_env.clone()
            } else {
                pick(&self.api_key_env, &base.api_key_env)
            },
            api_key_file: if self.has_key_source() {
                self.api_key_file.clone()
            } else {
                unless_changed(backend_changed, &self.api_key_file, &base.api_key_file)
            },
            api_key_cmd: if self.has_key_source() {
                self.api_key_cmd.clone()
            } else {
                pick(&self.api_key_cmd, &base.api_key_cmd)
            },
            env: self.env.clone().or_else(|| base.env.clone()),
            prompt: self.prompt.clone().or_else(|| base.prompt.clone()),
            prompt_file: self
                .prompt_file
                .clone()
                .or_else(|| base.prompt_file.clone()),
            tools: self.tools.clone().or_else(|| base.tools.clone()),
            limits: self.limits.or(base.limits),
            command: pick(&self.command, &base.command),
            args: if backend_changed {
                self.args.clone()
            } else {
                self.args.clone().or_else(|| base.args.clone())
            },
            permission_mode: pick(&self.permission_mode, &base.permission_mode),
            timeout_secs: self.timeout_secs.or(base.timeout_secs),
            cli: match (&self.cli, &base.cli) {
                _ if backend_changed => self.cli.clone(),
                (Some(mine), Some(theirs)) => Some(mine.merged_over(theirs)),
                (mine, theirs) => mine.clone().or_else(|| theirs.clone()),
            },
            script: self.script.clone().or_else(|| base.script.clone()),
            api: if backend_changed {
                self.api
            } else {
                self.api.or(base.api)
            },
            ca_file: self.ca_file.clone().or_else(|| base.ca_file.clone()),
            generation: match (self.generation, base.generation) {
                (Some(mine), Some(theirs)) => Some(mine.merged_over(&theirs)),
                (mine, theirs) => mine.or(theirs),
            },
        }
    }
}

/// This layer's setting, else the base's unless the backend changed (the base's then belongs
/// to another backend).
fn unless_changed<T: Clone>(
    backend_changed: bool,
    mine: &Option<T>,
    theirs: &Option<T>,
) -> Option<T> {
    mine.clone().or_else(|| {
        if backend_changed {
            None
        } else {
            theirs.clone()
        }
    })
}

/// A validated config.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    file: String,
    /// Names of environment variables every step receives.
    pub env: Vec<String>,
    /// A file of `NAME=value` lines every step receives (mode 0600), relative to the root.
    pub env_file: Option<PathBuf>,
    /// How agent processes are confined (`sandbox = "kernel" | "tools" | "off"`); `None`: not
    /// set (the caller picks, `kernel` by default).
    pub sandbox: Option<SandboxMode>,
    /// Extra paths shell steps, `run_command` and command-line agents may write in `kernel`
    /// mode (absolute, or `~/…`), besides the project and a per-step temporary directory.
    pub sandbox_writable: Vec<PathBuf>,
    /// The isolation of writing steps when neither they nor their plan name one (ADR 0017).
    pub isolation: Option<orca_core::Isolation>,
    /// Settings every agent starts from.
    pub defaults: AgentSettings,
    /// Per-agent settings (built-in overrides and custom agents).
    pub agents: BTreeMap<AgentId, AgentSettings>,
    /// `[store] url`: a shared PostgreSQL store (`postgres://…`) instead of the files under
    /// `.orca/`; `None`: the file store.
    pub store_url: Option<String>,
    /// The shipped price table with the config's `[prices]` applied.
    pub prices: PriceTable,
    /// Whether `AGENTS.md` / `CLAUDE.md` are kept out of the planner's and specialists'
    /// prompts (`project_instructions = false`; by default they go in).
    pub skip_project_instructions: bool,
    /// `[tls] ca_file`: root certificates every model endpoint trusts besides the system's.
    pub tls_ca_file: Option<PathBuf>,
}

fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_uppercase() || c == '_')
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

impl Config {
    /// Parses and validates config text; `file` names it in errors.
    ///
    /// # Errors
    ///
    /// The first problem, naming the field.
    pub fn parse(text: &str, file: &Path) -> Result<Self, ConfigError> {
        let file = file.display().to_string();
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|span| {
                text.get(..span.start)
                    .map_or(0, |b| b.matches('\n').count())
                    + 1
            });
            // On one line; the parser gives no message for some inputs (a lone `\r`).
            let what = e
                .message()
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(": ");
            let what = if what.is_empty() {
                "not valid TOML".to_owned()
            } else {
                what
            };
            ConfigError::Parse {
                file: file.clone(),
                message: match line {
                    Some(line) => format!("line {line}: {what}"),
                    None => what,
                },
            }
        })?;
        let invalid = |field: String, message: String| ConfigError::Invalid {
            file: file.clone(),
            field,
            message,
        };
        let settings = |field: &str, value: toml::Value| -> Result<AgentSettings, ConfigError> {
            if let Some(l) = value.get("limits") {
                limits::check_table(l)
                    .map_err(|(sub, message)| invalid(format!("{field}.limits{sub}"), message))?;
            }
            let s: AgentSettings = value.try_into().map_err(|e: toml::de::Error| {
                invalid(field.to_owned(), e.message().trim().to_owned())
            })?;
            Self::validate(&s, field, &file)?;
            Ok(s)
        };
        for name in &raw.env {
            if !orca_core::plan::is_env_name(name) {
                return Err(invalid(
                    "env".to_owned(),
                    format!(
                        "{name:?} must be the NAME of an environment variable (not ORCA_*), never a value"
                    ),
                ));
            }
        }
        let defaults = match raw.defaults {
            Some(v) => settings("defaults", v)?,
            None => AgentSettings::default(),
        };
        for (field, bad) in [
            (
                "defaults.prompt",
                defaults.prompt.is_some() || defaults.prompt_file.is_some(),
            ),
            ("defaults.role", defaults.role.is_some()),
            ("defaults.description", defaults.description.is_some()),
            ("defaults.env", defaults.env.is_some()),
        ] {
            if bad {
                return Err(invalid(
                    field.to_owned(),
                    "cannot be set for every agent".to_owned(),
                ));
            }
        }
        let mut agents = BTreeMap::new();
        for (name, value) in raw.agents {
            let field = format!("agents.{name}");
            let id = AgentId::parse(&name).map_err(|e| invalid(field.clone(), e.to_string()))?;
            if name == AgentId::SHELL {
                return Err(invalid(
                    field,
                    "the built-in shell agent cannot be configured".to_owned(),
                ));
            }
            let s = settings(&field, value)?;
            let built_in = BUILT_INS.iter().find(|b| b.id == name);
            if let Some(b) = built_in {
                if s.role.is_some_and(|r| r != b.role) {
                    return Err(invalid(
                        format!("{field}.role"),
                        "the role of a built-in agent cannot be changed".to_owned(),
                    ));
                }
                if b.role != Role::Specialist {
                    let merged = s.merged_over(&defaults);
                    if let Some(backend) = merged.backend.as_deref()
                        && !["anthropic", "openai", "ollama", "scripted"].contains(&backend)
                    {
                        return Err(invalid(
                            format!("{field}.backend"),
                            format!(
                                "the {name} agent needs a model backend (anthropic, openai, ollama, scripted), not \"{backend}\""
                            ),
                        ));
                    }
                }
            }
            agents.insert(id, s);
        }
        let sandbox = raw
            .sandbox
            .map(|m| m.parse::<SandboxMode>())
            .transpose()
            .map_err(|e| invalid("sandbox".to_owned(), e))?;
        let store_url = raw.store.map(|s| s.url);
        if let Some(url) = &store_url
            && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
        {
            return Err(invalid(
                "store.url".to_owned(),
                "must be a postgres:// url (the file store needs no [store] section)".to_owned(),
            ));
        }
        let sandbox_writable = raw.sandbox_writable.unwrap_or_default();
        for p in &sandbox_writable {
            let text = p.display().to_string();
            if !(p.is_absolute() || text == "~" || text.starts_with("~/")) {
                return Err(invalid(
                    "sandbox_writable".to_owned(),
                    format!("\"{text}\" must be an absolute path or start with ~/"),
                ));
            }
            if p.components().any(|c| {
                c.as_os_str().eq_ignore_ascii_case(".orca") || c == std::path::Component::ParentDir
            }) {
                return Err(invalid(
                    "sandbox_writable".to_owned(),
                    format!("\"{text}\" may not name .orca or use .."),
                ));
            }
        }
        let mut prices = PriceTable::shipped();
        for (model, setting) in &raw.prices {
            setting
                .validate()
                .map_err(|(sub, message)| invalid(format!("prices.\"{model}\".{sub}"), message))?;
            prices.set(model.clone(), setting.price());
        }
        Ok(Self {
            file,
            prices,
            skip_project_instructions: raw.project_instructions == Some(false),
            tls_ca_file: raw.tls.and_then(|t| t.ca_file),
            env: raw.env,
            env_file: raw.env_file,
            sandbox,
            sandbox_writable,
            isolation: raw.isolation,
            defaults,
            agents,
            store_url,
        })
    }

    /// Which environment variables steps receive: the config's `env` names, the variables of
    /// its `env_file` (which must be private, mode 0600), and each agent's `env` names; values
    /// are looked up in `vars` (orca's environment).
    ///
    /// # Errors
    ///
    /// An env file that cannot be read, is readable by others, or does not parse.
    pub fn env_policy(
        &self,
        root: &Path,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<orca_os::step_env::EnvPolicy, ConfigError> {
        let mut policy =
            orca_os::step_env::EnvPolicy::from_vars(vars).with_config_names(self.env.clone());
        if let Some(file) = &self.env_file {
            let path = root.join(file);
            let secret = |message: String| ConfigError::Secret {
                file: self.file.clone(),
                field: "env_file".to_owned(),
                message,
            };
            let text = crate::api_keys::read_private_file(&path, "env file").map_err(secret)?;
            let vars = orca_os::step_env::parse_env_file(&text)
                .map_err(|m| secret(format!("{}: {m}", path.display())))?;
            policy = policy.with_file_vars(vars);
        }
        for (id, s) in &self.agents {
            if let Some(names) = &s.env {
                policy.set_agent_names(id.clone(), names.clone());
            }
        }
        Ok(policy)
    }

    /// The generation settings of `agent`: its `[agents.NAME.generation]` over
    /// `[defaults.generation]`.
    #[must_use]
    pub fn generation(&self, agent: &AgentId) -> Generation {
        let base = self.defaults.generation.unwrap_or_default();
        let mut g = self
            .agents
            .get(agent)
            .and_then(|s| s.generation)
            .map_or(base, |g| g.merged_over(&base))
            .resolve();
        let merged = self
            .agents
            .get(agent)
            .map_or_else(|| self.defaults.clone(), |s| s.merged_over(&self.defaults));
        g.api = merged.api.unwrap_or_default();
        g
    }

    /// The stall limits of `agent`: each of its `[agents.NAME.limits]` stall settings, else
    /// `[defaults.limits]`', else `base`.
    #[must_use]
    pub fn stall_limits(&self, agent: &AgentId, base: StallLimits) -> StallLimits {
        let base = self.defaults.limits.map_or(base, |l| l.stall_over(base));
        self.agents
            .get(agent)
            .and_then(|s| s.limits)
            .map_or(base, |l| l.stall_over(base))
    }

    /// The config file, as errors name it.
    #[must_use]
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Where `agent`'s key comes from (for `orca doctor`); `env` decides the default backend.
    #[must_use]
    pub fn key_source(
        &self,
        agent: &AgentId,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> crate::api_keys::KeySource {
        let s = self
            .agents
            .get(agent)
            .map_or_else(|| self.defaults.clone(), |s| s.merged_over(&self.defaults));
        key_source_of(&s, env)
    }

    /// Every profile: the built-ins (with overrides) and the custom agents, on their backends.
    /// `root` resolves prompt and script files; `env` looks up key variables.
    ///
    /// # Errors
    ///
    /// A prompt file that cannot be read, a key variable that is not set.
    pub fn profiles(
        &self,
        root: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<Profile>, ConfigError> {
        let mut out = Vec::new();
        let default_backend = self.backend_spec(&self.defaults, "defaults", root, env)?;
        for mut p in built_in_profiles(&default_backend) {
            if let Some(s) = self.agents.get(&p.id) {
                let field = format!("agents.{}", p.id);
                let merged = s.merged_over(&self.defaults);
                p.backend = self.backend_spec(&merged, &field, root, env)?;
                self.apply(&mut p, s, &field, root)?;
            } else {
                if let Some(l) = self.defaults.limits.filter(LimitSettings::sets_budget) {
                    p.limits = l.budget();
                }
                if let Some(t) = &self.defaults.tools {
                    p.workspace_tools.retain(|g| t.contains(g));
                }
            }
            out.push(p);
        }
        for (id, s) in &self.agents {
            if BUILT_INS.iter().any(|b| b.id == id.as_str()) {
                continue;
            }
            let field = format!("agents.{id}");
            let merged = s.merged_over(&self.defaults);
            let mut p = Profile {
                id: id.clone(),
                role: s.role.unwrap_or(Role::Specialist),
                description: s
                    .description
                    .clone()
                    .unwrap_or_else(|| format!("custom agent {id}")),
                backend: self.backend_spec(&merged, &field, root, env)?,
                prompt: String::new(),
                workspace_tools: Vec::new(),
                limits: Budget::UNLIMITED,
            };
            if s.prompt.is_none() && s.prompt_file.is_none() {
                p.prompt = generic_prompt(id, &p.description);
            }
            self.apply(&mut p, &merged, &field, root)?;
            out.push(p);
        }
        Ok(out)
    }

    fn apply(
        &self,
        p: &mut Profile,
        s: &AgentSettings,
        field: &str,
        root: &Path,
    ) -> Result<(), ConfigError> {
        if let Some(d) = &s.description {
            p.description.clone_from(d);
        }
        if let Some(t) = &s.tools {
            p.workspace_tools.clone_from(t);
        }
        if let Some(l) = [s.limits, self.defaults.limits]
            .into_iter()
            .flatten()
            .find(LimitSettings::sets_budget)
        {
            p.limits = l.budget();
        }
        if let Some(prompt) = &s.prompt {
            p.prompt.clone_from(prompt);
        }
        if let Some(file) = &s.prompt_file {
            p.prompt = read_prompt_file(root, file).map_err(|message| ConfigError::PromptFile {
                file: self.file.clone(),
                field: format!("{field}.prompt_file"),
                path: root.join(file).display().to_string(),
                message,
            })?;
        }
        Ok(())
    }
}

fn key_source_of(
    s: &AgentSettings,
    env: &dyn Fn(&str) -> Option<String>,
) -> crate::api_keys::KeySource {
    use crate::api_keys::KeySource;
    if let Some(p) = &s.api_key_file {
        return KeySource::File(p.clone());
    }
    if let Some(c) = &s.api_key_cmd {
        return KeySource::Command(c.clone());
    }
    if let Some(e) = &s.api_key_env {
        return KeySource::Env(e.clone());
    }
    match s.backend.as_deref() {
        Some("anthropic") => KeySource::Env("ANTHROPIC_API_KEY".to_owned()),
        Some("openai") => KeySource::Env("OPENAI_API_KEY".to_owned()),
        None => default_key_source(env),
        Some(_) => KeySource::None,
    }
}

/// The key source of the default backend ([`BackendSpec::default_from_env`]).
#[must_use]
pub fn default_key_source(env: &dyn Fn(&str) -> Option<String>) -> crate::api_keys::KeySource {
    use crate::api_keys::KeySource;
    let set = |k: &str| env(k).is_some_and(|v| !v.trim().is_empty());
    if set("ANTHROPIC_API_KEY") {
        KeySource::Env("ANTHROPIC_API_KEY".to_owned())
    } else if set("OPENAI_API_KEY") {
        KeySource::Env("OPENAI_API_KEY".to_owned())
    } else {
        KeySource::None
    }
}

/// Reads a prompt file, which must be a regular file inside the project (after resolving `..`
/// and symlinks) of at most [`MAX_PROMPT_BYTES`].
fn read_prompt_file(root: &Path, file: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let root = root.canonicalize().map_err(|e| e.to_string())?;
    let path = root.join(file).canonicalize().map_err(|e| e.to_string())?;
    if !path.starts_with(&root) {
        return Err(format!(
            "it leads outside the project ({}); a prompt file must be inside the project",
            path.display()
        ));
    }
    let meta = std::fs::metadata(&path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".to_owned());
    }
    if meta.len() > MAX_PROMPT_BYTES {
        return Err(format!(
            "{} bytes, more than the {MAX_PROMPT_BYTES} bytes a prompt may have",
            meta.len()
        ));
    }
    let mut text = String::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(MAX_PROMPT_BYTES).read_to_string(&mut text))
        .map_err(|e| e.to_string())?;
    Ok(text)
}

fn generic_prompt(id: &AgentId, description: &str) -> String {
    format!(
        "# Role: {id} (specialist)\n\nYou are {id}: {description}.\n\n## You may\n- Use the tools you are offered, for the step you are given.\n\n## You may not\n- Change the plan, approve anything, or work outside the project root.\n\n## Output contract\nFinish by calling `submit_result` exactly once with a task result: `{{\"status\": \"success\", \"summary\": \"...\"}}`, `{{\"status\": \"failure\", \"code\": \"task_failed\", \"message\": \"...\"}}` or `{{\"status\": \"interruption\", \"reason\": \"...\", \"question\": \"...\"}}`.\n"
    )
}
