//! Agent profiles: role, description, backend, prompt, workspace tools, limits; the built-in
//! profiles and their prompts.

use std::path::PathBuf;
use std::sync::Arc;

use orca_core::{AgentId, AgentInfo, Budget, Role};

use crate::cli::CliSpec;
use crate::error::ConfigError;
use crate::generation::{Generation, WireApi};
use orca_llm::anthropic::AnthropicBackend;
use orca_llm::backend::ChatBackend;
use orca_llm::net::Net;
use orca_llm::ollama::OllamaBackend;
use orca_llm::openai::OpenAiBackend;
use orca_llm::pricing::PriceTable;
use orca_llm::responses::ResponsesBackend;
use orca_llm::scripted::ScriptedBackend;
use orca_llm::secret::ApiKey;
use orca_llm::window_probe::Windows;

/// The Ollama OpenAI-compatible endpoint used when no key is set.
pub const OLLAMA_BASE_URL: &str = "http://127.0.0.1:11434/v1";
/// The OpenAI endpoint.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The Anthropic endpoint.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The default Anthropic model.
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
/// The default OpenAI model.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4.1";
/// The default Ollama model.
pub const DEFAULT_OLLAMA_MODEL: &str = "qwen2.5-coder";

/// Workspace tools that only read (from the one table, [`orca_core::tool_access`]).
pub use orca_core::tool_access::WORKSPACE_READ_TOOLS as READ_TOOLS;

/// What the writing specialists (documents, design records) may use: read, and write files,
/// but run nothing.
const DOCUMENT_TOOLS: &[&str] = &[
    "read_file",
    "list_files",
    "search_text",
    "write_file",
    "edit_file",
];
/// All workspace tools (from the one table, [`orca_core::tool_access`]).
pub use orca_core::tool_access::WORKSPACE_TOOL_NAMES as ALL_TOOLS;

/// How a profile's agent runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum BackendSpec {
    /// The built-in shell runner.
    Shell,
    /// An OpenAI-compatible Chat Completions endpoint (OpenAI, Ollama, vLLM, LM Studio…).
    OpenAi {
        /// The base URL, up to and including `/v1`.
        base_url: String,
        /// The model.
        model: String,
        /// The key, if the endpoint needs one.
        api_key: Option<ApiKey>,
    },
    /// The Anthropic Messages API.
    Anthropic {
        /// The base URL (without `/v1`).
        base_url: String,
        /// The model.
        model: String,
        /// The key.
        api_key: Option<ApiKey>,
    },
    /// A command-line coding agent (Claude Code, Codex, opencode).
    Cli(CliSpec),
    /// Replays model turns from a JSON file.
    Scripted {
        /// The script file.
        path: PathBuf,
    },
    /// A backend supplied by the embedding program.
    Custom(Arc<dyn ChatBackend>),
}

impl BackendSpec {
    /// The default backend from the environment: Anthropic if `ANTHROPIC_API_KEY` is set, else
    /// OpenAI if `OPENAI_API_KEY` is set, else Ollama's OpenAI-compatible endpoint.
    #[must_use]
    pub fn default_from_env(env: &dyn Fn(&str) -> Option<String>) -> Self {
        let nonempty = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        if let Some(key) = nonempty("ANTHROPIC_API_KEY") {
            Self::Anthropic {
                base_url: ANTHROPIC_BASE_URL.to_owned(),
                model: DEFAULT_ANTHROPIC_MODEL.to_owned(),
                api_key: Some(ApiKey::new(key)),
            }
        } else if let Some(key) = nonempty("OPENAI_API_KEY") {
            Self::OpenAi {
                base_url: OPENAI_BASE_URL.to_owned(),
                model: DEFAULT_OPENAI_MODEL.to_owned(),
                api_key: Some(ApiKey::new(key)),
            }
        } else {
            Self::OpenAi {
                base_url: OLLAMA_BASE_URL.to_owned(),
                model: DEFAULT_OLLAMA_MODEL.to_owned(),
                api_key: None,
            }
        }
    }

    /// The backend kind's name.
    #[must_use]
    pub fn kind(&self) -> &str {
        match self {
            Self::Shell => "shell",
            Self::OpenAi { .. } => "openai",
            Self::Anthropic { .. } => "anthropic",
            Self::Cli(cli) => cli.kind.as_str(),
            Self::Scripted { .. } => "scripted",
            Self::Custom(b) => b.kind(),
        }
    }

    /// The model, if the backend has one.
    #[must_use]
    pub fn model(&self) -> Option<&str> {
        match self {
            Self::Shell | Self::Scripted { .. } => None,
            Self::OpenAi { model, .. } | Self::Anthropic { model, .. } => Some(model),
            Self::Cli(cli) => cli.model.as_deref(),
            Self::Custom(b) => b.model(),
        }
    }

    /// Builds the chat backend of a model-backed spec, with the agent's request timeout and
    /// token parameter, pricing with `prices`, its HTTP client from `net` (roots, proxies).
    pub(crate) fn build_chat(
        &self,
        id: &AgentId,
        generation: &Generation,
        prices: &PriceTable,
        net: &Net,
        windows: &Arc<Windows>,
    ) -> Result<Arc<dyn ChatBackend>, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            file: "<profiles>".to_owned(),
            field: format!("agents.{id}.backend"),
            message,
        };
        let timeout = generation.request_timeout;
        let prices = prices.clone();
        let client = || {
            net.client(timeout).map_err(|e| ConfigError::Invalid {
                file: "<profiles>".to_owned(),
                field: format!("agents.{id}"),
                message: e.to_string(),
            })
        };
        Ok(match self {
            Self::OpenAi {
                base_url,
                model,
                api_key,
            } => match generation.api {
                WireApi::Ollama => Arc::new(
                    OllamaBackend::new(base_url, model, api_key.clone(), client()?)
                        .with_context_window(generation.context_window)
                        .with_windows(Arc::clone(windows))
                        .with_prices(prices)
                        .with_streaming(generation.streaming),
                ),
                WireApi::Responses => Arc::new(
                    ResponsesBackend::new(base_url, model, api_key.clone(), timeout)
                        .with_prices(prices)
                        .with_streaming(generation.streaming)
                        .with_client(client()?),
                ),
                WireApi::Chat => Arc::new(
                    OpenAiBackend::with_timeout(base_url, model, api_key.clone(), timeout)
                        .with_token_param(generation.token_param)
                        .with_prices(prices)
                        .with_streaming(generation.streaming)
                        .with_client(client()?),
                ),
            },
            Self::Anthropic {
                base_url,
                model,
                api_key,
            } => Arc::new(
                AnthropicBackend::with_timeout(base_url, model, api_key.clone(), timeout)
                    .with_prices(prices)
                    .with_streaming(generation.streaming)
                    .with_client(client()?),
            ),
            Self::Scripted { path } => {
                Arc::new(ScriptedBackend::from_file(path).map_err(|e| invalid(e.to_string()))?)
            }
            Self::Custom(b) => Arc::clone(b),
            Self::Shell | Self::Cli(_) => {
                return Err(invalid(format!("`{}` is not a model backend", self.kind())));
            }
        })
    }
}

/// An agent profile.
#[derive(Debug, Clone)]
pub struct Profile {
    /// Its id.
    pub id: AgentId,
    /// Its role.
    pub role: Role,
    /// What it is good at.
    pub description: String,
    /// How it runs.
    pub backend: BackendSpec,
    /// Its system prompt.
    pub prompt: String,
    /// Workspace tools it is granted.
    pub workspace_tools: Vec<String>,
    /// Its limits (the tighter of these and a request's budget apply).
    pub limits: Budget,
}

impl Profile {
    /// The built-in `shell` agent.
    #[must_use]
    pub fn shell() -> Self {
        Self {
            id: AgentId::shell(),
            role: Role::Specialist,
            description:
                "runs the step's `command` with `sh -c` in the project root; exit 0 is success"
                    .to_owned(),
            backend: BackendSpec::Shell,
            prompt: String::new(),
            workspace_tools: Vec::new(),
            limits: Budget::UNLIMITED,
        }
    }

    /// What the caller knows about it.
    #[must_use]
    pub fn info(&self) -> AgentInfo {
        AgentInfo {
            id: self.id.clone(),
            role: self.role,
            description: self.description.clone(),
            // A declared command-line agent is named by its program (`cli:gemini`), so that
            // two of them (and an eval report binding them) can be told apart.
            backend: match &self.backend {
                BackendSpec::Cli(cli) if cli.kind == crate::CliKind::Declared => {
                    let program = std::path::Path::new(&cli.program)
                        .file_name()
                        .map_or_else(|| cli.program.clone(), |n| n.to_string_lossy().into_owned());
                    format!("cli:{program}")
                }
                other => other.kind().to_owned(),
            },
            model: self.backend.model().map(str::to_owned),
            workspace_tools: self.workspace_tools.clone(),
        }
    }
}

/// A built-in profile's fixed parts.
#[derive(Debug, Clone, Copy)]
pub struct BuiltIn {
    /// Its id.
    pub id: &'static str,
    /// Its role.
    pub role: Role,
    /// What it is good at.
    pub description: &'static str,
    /// Its prompt.
    pub prompt: &'static str,
    /// Its workspace tools.
    pub tools: &'static [&'static str],
}

/// The built-in model-backed profiles.
pub const BUILT_INS: &[BuiltIn] = &[
    BuiltIn {
        id: "orca",
        role: Role::Relay,
        description: "the relay the user talks to: forwards every message to the planner",
        prompt: include_str!("../prompts/orca.md"),
        tools: &[],
    },
    BuiltIn {
        id: "planner",
        role: Role::Planner,
        description: "researches read-only, asks questions, and builds plans with the plan tools",
        prompt: include_str!("../prompts/planner.md"),
        tools: READ_TOOLS,
    },
    BuiltIn {
        id: "coder",
        role: Role::Specialist,
        description: "writes and changes code in the project, and checks that it builds",
        prompt: include_str!("../prompts/coder.md"),
        tools: ALL_TOOLS,
    },
    BuiltIn {
        id: "tester",
        role: Role::Specialist,
        description: "writes and runs tests, and reports what passes and fails",
        prompt: include_str!("../prompts/tester.md"),
        tools: ALL_TOOLS,
    },
    BuiltIn {
        id: "reviewer",
        role: Role::Specialist,
        description: "reviews code and changes read-only, and reports problems with file and line",
        prompt: include_str!("../prompts/reviewer.md"),
        tools: &["read_file", "list_files", "search_text", "run_command"],
    },
    BuiltIn {
        id: "researcher",
        role: Role::Specialist,
        description: "investigates the codebase read-only and reports findings with evidence",
        prompt: include_str!("../prompts/researcher.md"),
        tools: READ_TOOLS,
    },
    BuiltIn {
        id: "document-writer",
        role: Role::Specialist,
        description: "writes and updates documentation (READMEs, guides, doc comments)",
        prompt: include_str!("../prompts/document-writer.md"),
        tools: DOCUMENT_TOOLS,
    },
    BuiltIn {
        id: "architect",
        role: Role::Specialist,
        description: "designs structure and interfaces and writes design records; does not implement",
        prompt: include_str!("../prompts/architect.md"),
        tools: DOCUMENT_TOOLS,
    },
];

/// The built-in profiles, all on `backend`.
#[must_use]
pub fn built_in_profiles(backend: &BackendSpec) -> Vec<Profile> {
    BUILT_INS
        .iter()
        .filter_map(|b| {
            Some(Profile {
                id: AgentId::parse(b.id).ok()?,
                role: b.role,
                description: b.description.to_owned(),
                backend: backend.clone(),
                prompt: b.prompt.to_owned(),
                workspace_tools: b.tools.iter().map(|t| (*t).to_owned()).collect(),
                limits: Budget::UNLIMITED,
            })
        })
        .collect()
}

/// The marker in the planner's prompt replaced by the list of specialists.
pub const SPECIALISTS_MARKER: &str = "{{specialists}}";

/// The planner's prompt with the specialists actually available.
#[must_use]
pub fn render_planner_prompt(base: &str, specialists: &[AgentInfo]) -> String {
    let mut list = String::new();
    for a in specialists {
        list.push_str(&format!("- `{}` ({}): {}", a.id, a.backend, a.description));
        if !a.workspace_tools.is_empty() {
            list.push_str(&format!(" [tools: {}]", a.workspace_tools.join(", ")));
        }
        list.push('\n');
    }
    if list.is_empty() {
        list.push_str("- (none)\n");
    }
    if base.contains(SPECIALISTS_MARKER) {
        base.replace(SPECIALISTS_MARKER, list.trim_end())
    } else {
        format!("{base}\n\n## Specialists available\n\n{list}")
    }
}
