//! The registry: maps agent ids to profiles and dispatches to their backends.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use orca_core::{
    AgentAnswer, AgentId, AgentInfo, AgentPort, ErrorCode, PlannerRequest, PlannerResponse,
    QuestionRequest, Reply, Role, TaskFailure, TaskRequest, TaskResult, ToolHost,
};

use crate::agent_loop::{self, LoopSettings};
use crate::backend::ChatBackend;
use crate::cli::CliAgent;
use crate::error::ConfigError;
use crate::generation::Generation;
use crate::pricing::PriceTable;
use crate::profile::{BackendSpec, Profile};
use crate::progress::{self, ProgressSink};
use crate::sandbox::SandboxPolicy;
use crate::shell;
use crate::step_env::{self, EnvPolicy};

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
    progress: Option<Arc<dyn ProgressSink>>,
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
            },
        );
        Self {
            root: root.into(),
            entries,
            settings: LoopSettings::default(),
            env: EnvPolicy::default(),
            sandbox: None,
            project_instructions: true,
            progress: None,
        }
    }

    /// The same agents, whose processes (shell steps, command-line agents) run under `policy`.
    /// In `kernel` mode, check [`crate::sandbox::probe`] first: where the kernel cannot
    /// confine, every child fails to start rather than run unconfined.
    #[must_use]
    pub fn with_sandbox(mut self, policy: Arc<SandboxPolicy>) -> Self {
        self.sandbox = Some(policy);
        self
    }

    /// The same agents, reporting the progress of streamed model answers (and each model-backed
    /// step's usage when it ends) to `sink`.
    #[must_use]
    pub fn with_progress(mut self, sink: Arc<dyn ProgressSink>) -> Self {
        self.progress = Some(sink);
        self
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
        let backend = BackendSpec::default_from_env(env);
        for profile in crate::profile::built_in_profiles(&backend) {
            let generation = Generation::default();
            let runtime = match backend.build_chat(&profile.id, &generation, &PriceTable::shipped())
            {
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
        for profile in profiles {
            let generation = config.generation(&profile.id);
            agents.insert_with(profile, generation, &config.prices)?;
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
            other => Runtime::Chat(other.build_chat(&profile.id, &generation, prices)?),
        };
        self.entries.insert(
            profile.id.clone(),
            Entry {
                profile,
                runtime,
                generation,
            },
        );
        Ok(())
    }

    /// Sets which environment variables steps receive (builder style; see
    /// [`crate::step_env`]). Without it, steps get the base allowlist and their own `env`
    /// names, read from this process's environment.
    #[must_use]
    pub fn with_env_policy(mut self, policy: EnvPolicy) -> Self {
        self.env = policy;
        self
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

    /// The loop settings of one agent: the registry's, with the agent's generation settings.
    fn loop_settings(&self, entry: &Entry) -> LoopSettings {
        entry.generation.apply_to(self.settings)
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

#[async_trait]
impl AgentPort for Agents {
    fn agents(&self) -> Vec<AgentInfo> {
        self.entries.values().map(|e| e.profile.info()).collect()
    }

    async fn reap(&self, groups: &[orca_core::ProcessGroup]) -> Vec<orca_core::ReapOutcome> {
        crate::process_group::reap_groups(groups).await
    }

    async fn settle(&self) {
        let most = crate::process_group::kill_grace() + std::time::Duration::from_secs(5);
        crate::process_group::settle(most).await;
    }

    async fn run_task(&self, request: TaskRequest, tools: &dyn ToolHost) -> Reply<TaskResult> {
        let entry = match self.entry(&request.agent) {
            Ok(e) => e,
            Err(f) => return Reply::new(TaskResult::Failure(f)),
        };
        // An isolated step runs in its own worktree (ADR 0017).
        let root = request.workdir.as_deref().unwrap_or(&self.root);
        match &entry.runtime {
            Runtime::Shell => Reply::new(
                shell::run_shell_for(root, &request, &self.env, self.sandbox.as_deref(), tools)
                    .await,
            ),
            Runtime::Cli(cli) => {
                cli.run_task(
                    root,
                    &entry.profile,
                    &request,
                    &self.env,
                    self.sandbox.as_deref(),
                    tools,
                )
                .await
            }
            Runtime::Chat(backend) => {
                let started = Instant::now();
                // `run_command` calls made by this step's agent get its names too.
                let mut names = self.env.agent_names(&request.agent).to_vec();
                names.extend(request.step.env.iter().cloned());
                let budget = request.budget.min(&entry.profile.limits);
                let settings = self.loop_settings(entry);
                let profile = self.seen_profile(entry);
                let run = agent_loop::run_task(
                    backend.as_ref(),
                    &profile,
                    &request,
                    budget,
                    tools,
                    &settings,
                );
                let run = step_env::STEP_NAMES.scope((request.agent.clone(), names), run);
                let run = self.reporting(request.step.id.as_str(), &request.agent, run);
                match request.timeout {
                    Some(t) => match tokio::time::timeout(t, run).await {
                        Ok(reply) => reply,
                        Err(_) => Reply::new(TaskResult::Failure(TaskFailure::new(
                            ErrorCode::Timeout,
                            format!(
                                "agent `{}` timed out after {}s",
                                request.agent,
                                started.elapsed().as_secs()
                            ),
                        ))),
                    },
                    None => run.await,
                }
            }
        }
    }

    async fn ask(
        &self,
        request: QuestionRequest,
        tools: &dyn ToolHost,
    ) -> Reply<Result<AgentAnswer, TaskFailure>> {
        let entry = match self.entry(&request.agent) {
            Ok(e) => e,
            Err(f) => return Reply::new(Err(f)),
        };
        match &entry.runtime {
            Runtime::Shell => Reply::new(Err(TaskFailure::new(
                ErrorCode::Validation,
                "the shell agent runs commands; it cannot answer questions",
            ))),
            Runtime::Cli(cli) => {
                cli.ask(
                    &self.root,
                    &entry.profile,
                    &request,
                    &self.env,
                    self.sandbox.as_deref(),
                )
                .await
            }
            Runtime::Chat(backend) => {
                let budget = request.budget.min(&entry.profile.limits);
                let profile = self.seen_profile(entry);
                let settings = self.loop_settings(entry);
                let run = agent_loop::ask(
                    backend.as_ref(),
                    &profile,
                    &request,
                    budget,
                    tools,
                    &settings,
                );
                self.reporting("ask", &request.agent, run).await
            }
        }
    }

    async fn plan(&self, request: PlannerRequest, tools: &dyn ToolHost) -> Reply<PlannerResponse> {
        let entry = match self.entry(&AgentId::planner()) {
            Ok(e) => e,
            Err(f) => return Reply::new(PlannerResponse::Failure(f)),
        };
        match &entry.runtime {
            Runtime::Chat(backend) => {
                let budget = request.budget.min(&entry.profile.limits);
                let system = self.with_instructions(&self.planner_prompt(&entry.profile.prompt));
                let settings = self.loop_settings(entry);
                let run = agent_loop::plan(
                    backend.as_ref(),
                    &entry.profile,
                    &system,
                    &request,
                    budget,
                    tools,
                    &settings,
                );
                self.reporting("plan", &entry.profile.id, run).await
            }
            Runtime::Shell | Runtime::Cli(_) => {
                Reply::new(PlannerResponse::Failure(TaskFailure::new(
                    ErrorCode::Validation,
                    format!(
                        "the planner must use a model backend (openai, anthropic, scripted), not `{}`",
                        entry.profile.backend.kind()
                    ),
                )))
            }
        }
    }
}
