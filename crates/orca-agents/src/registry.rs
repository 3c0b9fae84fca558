//! The registry: maps agent ids to profiles and dispatches to their backends.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use orca_core::{AgentId, AgentInfo, AgentPort as _, ErrorCode, Reply, Role, TaskFailure};

mod port;
mod settings;

use crate::agent_loop::LoopSettings;
use crate::cli::CliAgent;
use crate::error::ConfigError;
use crate::generation::{Generation, WireApi};
use crate::profile::{BackendSpec, Profile};
use crate::stall::StallLimits;
use orca_llm::backend::ChatBackend;
use orca_llm::net::{CaFile, Net, NetError};
use orca_llm::pricing::PriceTable;
use orca_llm::progress::{self, ProgressSink};
use orca_llm::window_probe::{KnownWindow, ServerApi, WindowSource, Windows};
use orca_os::sandbox::SandboxPolicy;
use orca_os::step_env::EnvPolicy;

/// How a profile runs.
#[derive(Debug, Clone)]
enum Runtime {
    Shell,
    Chat(Arc<dyn ChatBackend>),
    Cli(CliAgent),
}

#[derive(Debug, Clone)]
struct Entry {
    profile: Profile,
    runtime: Runtime,
    generation: Generation,
    net: Net,
    /// Its own stall limits (config `[agents.NAME.limits]`); `None`: the loop settings'.
    stall: Option<StallLimits>,
}

/// The agents of a project: implements [`AgentPort`] over a set of [`Profile`]s.
///
/// The `shell` agent is always present.
#[derive(Debug, Clone)]
pub struct Agents {
    root: PathBuf,
    entries: BTreeMap<AgentId, Entry>,
    settings: LoopSettings,
    env: EnvPolicy,
    sandbox: Option<Arc<SandboxPolicy>>,
    project_instructions: bool,
    net: Net,
    windows: Arc<Windows>,
    ask_windows: bool,
    progress: Option<Arc<dyn ProgressSink>>,
    /// How long a step's process group gets between SIGTERM and SIGKILL.
    kill_grace: std::time::Duration,
    /// Whether steps pass on their attempt's trace context (telemetry export is on).
    trace_context: bool,
}

impl Agents {
    /// Only the `shell` agent, running commands in `root`.
    #[must_use]
    pub fn shell_only(root: impl Into<PathBuf>) -> Self {
        let mut entries = BTreeMap::new();
        let shell = Profile::shell();
        entries.insert(
            shell.id.clone(),
            Entry {
                profile: shell,
                runtime: Runtime::Shell,
                generation: Generation::default(),
                net: Net::direct(),
                stall: None,
            },
        );
        Self {
            root: root.into(),
            entries,
            settings: LoopSettings::default(),
            env: EnvPolicy::default(),
            sandbox: None,
            project_instructions: true,
            net: Net::direct(),
            windows: Arc::new(Windows::new()),
            ask_windows: false,
            progress: None,
            kill_grace: orca_os::process_group::DEFAULT_KILL_GRACE,
            trace_context: false,
        }
    }

    /// Runs a model-backed call with progress reported under `label`, then its usage.
    async fn reporting<T>(
        &self,
        label: &str,
        agent: &AgentId,
        run: impl Future<Output = Reply<T>>,
    ) -> Reply<T> {
        let started = Instant::now();
        let reply = progress::scoped(self.progress.clone(), label, agent.as_str(), run).await;
        progress::finished(
            self.progress.as_ref(),
            label,
            agent.as_str(),
            &reply.usage,
            started.elapsed(),
        );
        reply
    }

    /// The given profiles (plus `shell`), with backends built from their specs.
    ///
    /// # Errors
    ///
    /// A backend that cannot be built (a scripted file that does not parse…).
    pub fn new(
        root: impl Into<PathBuf>,
        profiles: impl IntoIterator<Item = Profile>,
        settings: LoopSettings,
    ) -> Result<Self, ConfigError> {
        let mut agents = Self::shell_only(root);
        agents.settings = settings;
        for profile in profiles {
            agents.insert(profile)?;
        }
        Ok(agents)
    }

    /// The built-in profiles on the default backend chosen from `env` (Anthropic, OpenAI, or a
    /// local Ollama), plus `shell`: what a project without `.orca/config.toml` gets.
    #[must_use]
    pub fn with_defaults(
        root: impl Into<PathBuf>,
        env: &dyn Fn(&str) -> Option<String>,
        settings: LoopSettings,
    ) -> Self {
        let mut agents = Self::shell_only(root);
        agents.settings = settings;
        agents.ask_windows = true;
        agents.net = Net::from_env(env).unwrap_or_else(|err| {
            tracing::warn!(%err, "model requests go direct, through no proxy");
            Net::direct()
        });
        let backend = BackendSpec::default_from_env(env);
        // The local Ollama fallback speaks Ollama's native API, which takes the context size
        // (`num_ctx`): through its OpenAI endpoint every prompt would be cut to Ollama's default
        // window (ADR 0025).
        let api = if is_ollama_fallback(&backend) {
            WireApi::Ollama
        } else {
            WireApi::Chat
        };
        for profile in crate::profile::built_in_profiles(&backend) {
            let generation = Generation {
                api,
                ..Generation::default()
            };
            let runtime = match backend.build_chat(
                &profile.id,
                &generation,
                &PriceTable::shipped(),
                &agents.net,
                &agents.windows,
            ) {
                Ok(chat) => Runtime::Chat(chat),
                Err(err) => {
                    tracing::warn!(%err, agent = %profile.id, "cannot build the default backend");
                    continue;
                }
            };
            agents.entries.insert(
                profile.id.clone(),
                Entry {
                    profile,
                    runtime,
                    generation,
                    net: agents.net.clone(),
                    stall: None,
                },
            );
        }
        agents
    }

    /// The agents of a project from its validated config: built-in profiles (with overrides)
    /// and custom agents. `env` looks up the key variables the config names.
    ///
    /// # Errors
    ///
    /// A prompt file that cannot be read, a key variable that is not set, a bad script.
    pub fn from_config(
        root: impl Into<PathBuf>,
        config: &crate::config::Config,
        env: &dyn Fn(&str) -> Option<String>,
        settings: LoopSettings,
    ) -> Result<Self, ConfigError> {
        let root = root.into();
        let profiles = config.profiles(&root, env)?;
        let mut agents = Self::shell_only(root);
        agents.settings = settings;
        agents.project_instructions = !config.skip_project_instructions;
        agents.ask_windows = true;
        agents.net = Net::from_env(env).map_err(|e| ConfigError::Invalid {
            file: "<environment>".to_owned(),
            field: "proxy".to_owned(),
            message: e.to_string(),
        })?;
        // One `Net` (and so one client per timeout) per ca_file.
        let mut nets: BTreeMap<PathBuf, Net> = BTreeMap::new();
        let net_error = |e: NetError| match e {
            NetError::CaFile {
                setting,
                path,
                message,
            } => ConfigError::Invalid {
                file: config.file().to_owned(),
                field: setting,
                message: format!("{path}: {message}"),
            },
            other => ConfigError::Invalid {
                file: config.file().to_owned(),
                field: "tls".to_owned(),
                message: other.to_string(),
            },
        };
        for profile in profiles {
            let mut generation = config.generation(&profile.id);
            if config.on_default_backend(&profile.id) && is_ollama_fallback(&profile.backend) {
                generation.api = WireApi::Ollama;
            }
            let net = match config.ca_file_for(&profile.id, &agents.root, env) {
                None => agents.net.clone(),
                Some((path, setting)) => {
                    if let Some(net) = nets.get(&path) {
                        net.clone()
                    } else {
                        let ca = CaFile::load(&path, &setting).map_err(net_error)?;
                        let net = agents.net.with_ca_file(Some(Arc::new(ca)));
                        nets.insert(path, net.clone());
                        net
                    }
                }
            };
            if matches!(
                profile.backend,
                BackendSpec::OpenAi { .. } | BackendSpec::Anthropic { .. }
            ) {
                // A ca_file the TLS library refuses is the config's error, before any request.
                net.client(generation.request_timeout).map_err(net_error)?;
            }
            let id = profile.id.clone();
            agents.insert_with_net(profile, generation, &config.prices, net)?;
            let stall = config.stall_limits(&id, agents.settings.stall);
            agents.set_stall_limits(&id, stall);
        }
        Ok(agents)
    }

    /// Adds or replaces a profile (`shell` cannot be replaced).
    ///
    /// # Errors
    ///
    /// A backend that cannot be built.
    pub fn insert(&mut self, profile: Profile) -> Result<(), ConfigError> {
        self.insert_with(profile, Generation::default(), &PriceTable::shipped())
    }

    /// Adds or replaces a profile with its generation settings (output cap, request timeout,
    /// sampling, token parameter, tool mode), pricing its usage with `prices`.
    ///
    /// # Errors
    ///
    /// A backend that cannot be built, or `shell`.
    pub fn insert_with(
        &mut self,
        profile: Profile,
        generation: Generation,
        prices: &PriceTable,
    ) -> Result<(), ConfigError> {
        let net = self.net.clone();
        self.insert_with_net(profile, generation, prices, net)
    }

    /// As [`Self::insert_with`], reaching the model server through `net` (its roots and
    /// proxies).
    ///
    /// # Errors
    ///
    /// A backend that cannot be built, or `shell`.
    pub fn insert_with_net(
        &mut self,
        profile: Profile,
        generation: Generation,
        prices: &PriceTable,
        net: Net,
    ) -> Result<(), ConfigError> {
        if profile.id.as_str() == AgentId::SHELL {
            return Err(ConfigError::Invalid {
                file: "<profiles>".to_owned(),
                field: "agents.shell".to_owned(),
                message: "the built-in shell agent cannot be replaced".to_owned(),
            });
        }
        let runtime = match &profile.backend {
            BackendSpec::Shell => Runtime::Shell,
            BackendSpec::Cli(cli) => Runtime::Cli(CliAgent::new(cli.clone())),
            other => Runtime::Chat(other.build_chat(
                &profile.id,
                &generation,
                prices,
                &net,
                &self.windows,
            )?),
        };
        self.entries.insert(
            profile.id.clone(),
            Entry {
                profile,
                runtime,
                generation,
                net,
                stall: None,
            },
        );
        Ok(())
    }

    /// Which environment variables steps receive.
    #[must_use]
    pub const fn env_policy(&self) -> &EnvPolicy {
        &self.env
    }

    /// The keys of every configured model backend (for the redactor).
    #[must_use]
    pub fn api_keys(&self) -> Vec<String> {
        self.entries
            .values()
            .filter_map(|e| match &e.profile.backend {
                BackendSpec::OpenAi { api_key, .. } | BackendSpec::Anthropic { api_key, .. } => {
                    api_key.as_ref().map(|k| k.expose().to_owned())
                }
                _ => None,
            })
            .collect()
    }

    /// The credentials of the proxy URLs model requests go through (for the redactor).
    #[must_use]
    pub fn proxy_secrets(&self) -> Vec<String> {
        self.net.proxies().secrets()
    }

    /// The project root commands and tools run in.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The profile of an agent.
    #[must_use]
    pub fn profile(&self, id: &AgentId) -> Option<&Profile> {
        self.entries.get(id).map(|e| &e.profile)
    }

    /// The loop settings (retries, default limits).
    #[must_use]
    pub const fn settings(&self) -> &LoopSettings {
        &self.settings
    }

    /// The generation settings of an agent (the defaults for an unknown one).
    #[must_use]
    pub fn generation(&self, id: &AgentId) -> Generation {
        self.entries
            .get(id)
            .map_or_else(Generation::default, |e| e.generation)
    }

    /// Whether `AGENTS.md` / `CLAUDE.md` from the root are added to the planner's and the
    /// model-backed specialists' prompts (default: yes).
    #[must_use]
    pub const fn with_project_instructions(mut self, on: bool) -> Self {
        self.project_instructions = on;
        self
    }

    /// `prompt` with the project instructions, when they are on and present.
    fn with_instructions(&self, prompt: &str) -> String {
        match self
            .project_instructions
            .then(|| crate::project_instructions::section(&self.root))
            .flatten()
        {
            Some(section) => format!("{prompt}{section}"),
            None => prompt.to_owned(),
        }
    }

    /// The profile a model sees: its prompt with the project instructions.
    fn seen_profile(&self, entry: &Entry) -> Profile {
        let mut profile = entry.profile.clone();
        profile.prompt = self.with_instructions(&profile.prompt);
        profile
    }

    /// The loop settings of one agent: the registry's, with the agent's generation settings
    /// and, when the config gives no window, the one its server reports (asked once).
    async fn loop_settings(&self, entry: &Entry) -> LoopSettings {
        let mut settings = entry.generation.apply_to(self.settings);
        if let Some(stall) = entry.stall {
            settings.stall = stall;
        }
        if settings.context_window.is_none()
            && let Some(w) = self.asked_window(entry).await
        {
            settings.context_window = Some(w.tokens);
        }
        // An output cap the window cannot hold would fail every request: unless the agent
        // sets one, a turn may write at most a quarter of its window.
        if let Some(window) = settings.context_window
            && entry.generation.max_output_tokens.is_none()
        {
            let quarter = u32::try_from((window / 4).max(256)).unwrap_or(u32::MAX);
            settings.max_output_tokens = Some(
                settings
                    .max_output_tokens
                    .map_or(quarter, |m| m.min(quarter)),
            );
        }
        settings
    }

    /// Whether the windows of agents without a configured `context_window` are asked of
    /// their servers (builder style). On for [`Self::from_config`] and [`Self::with_defaults`];
    /// off for [`Self::new`], whose embedder sets windows itself.
    #[must_use]
    pub const fn with_window_probe(mut self, on: bool) -> Self {
        self.ask_windows = on;
        self
    }

    /// The window `entry`'s server reports (model servers reached over HTTP only).
    async fn asked_window(&self, entry: &Entry) -> Option<KnownWindow> {
        if !self.ask_windows {
            return None;
        }
        let BackendSpec::OpenAi {
            base_url, model, ..
        } = &entry.profile.backend
        else {
            return None;
        };
        let api = match entry.generation.api {
            WireApi::Ollama => ServerApi::OllamaNative,
            WireApi::Chat => ServerApi::OpenAiCompatible,
            // The Responses API is OpenAI's (or a gateway's): nothing to ask.
            WireApi::Responses => return None,
        };
        let client = entry.net.client(entry.generation.request_timeout).ok()?;
        self.windows.window(&client, api, base_url, model).await
    }

    /// An agent's context window and where it comes from: the config's, else the one its
    /// server reports (asked once per run), else `None` (requests are not fitted).
    pub async fn context_window(&self, id: &AgentId) -> Option<KnownWindow> {
        let entry = self.entries.get(id)?;
        if let Some(tokens) = entry.generation.context_window {
            return Some(KnownWindow {
                tokens,
                source: WindowSource::Configured,
            });
        }
        self.asked_window(entry).await
    }

    /// The windows asked of servers so far (shared by every agent of this registry).
    #[must_use]
    pub const fn windows(&self) -> &Arc<Windows> {
        &self.windows
    }

    /// How an agent reaches its model server (roots, proxies), for `orca doctor`.
    #[must_use]
    pub fn net(&self, id: &AgentId) -> Option<&Net> {
        self.entries.get(id).map(|e| &e.net)
    }

    fn entry(&self, id: &AgentId) -> Result<&Entry, TaskFailure> {
        self.entries.get(id).ok_or_else(|| {
            TaskFailure::new(
                ErrorCode::UnknownAgent,
                format!(
                    "no agent `{id}`; available: {}",
                    self.entries
                        .keys()
                        .map(AgentId::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })
    }

    /// The planner's system prompt, with the specialists actually available.
    #[must_use]
    pub fn planner_prompt(&self, base: &str) -> String {
        let specialists: Vec<AgentInfo> = self
            .agents()
            .into_iter()
            .filter(|a| a.role == Role::Specialist)
            .collect();
        crate::profile::render_planner_prompt(base, &specialists)
    }
}

/// The local Ollama that [`BackendSpec::default_from_env`] falls back to without keys: spoken
/// to natively, since its OpenAI endpoint cuts every prompt to Ollama's default window.
fn is_ollama_fallback(backend: &BackendSpec) -> bool {
    matches!(backend, BackendSpec::OpenAi { base_url, api_key: None, .. }
        if base_url == crate::profile::OLLAMA_BASE_URL)
}
