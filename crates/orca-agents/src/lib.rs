//! # orca-agents
//!
//! Agent backends and adapters, the agent loop, built-in profiles and workspace tools.
//!
//! - [`Agents`] implements [`orca_core::AgentPort`] over a set of [`Profile`]s; the `shell`
//!   agent is always present.
//! - [`ChatBackend`] is the small trait a model backend implements; adapters:
//!   [`OpenAiBackend`] (Chat Completions: OpenAI, Ollama, vLLM, llama.cpp, LM Studio),
//!   [`AnthropicBackend`] (Messages), [`OllamaBackend`] (Ollama's native `/api/chat`),
//!   [`ScriptedBackend`] (replays a file). Command-line agents
//!   (Claude Code, Codex, opencode) run as subprocesses ([`CliSpec`]).
//! - The agent loop offers the caller's tools plus a forced `submit_result` tool, validates the
//!   result, repairs it up to twice, enforces budgets and retries transient errors.
//! - [`WorkspaceTools`] is a [`orca_core::ToolHost`] confined to the project root.
//! - [`config`] parses `.orca/config.toml`.

pub mod agent_loop;
pub mod anthropic;
pub mod backend;
pub mod cli;
pub mod config;
pub mod confine;
pub mod context_window;
mod endpoint;
pub mod error;
pub mod generation;
mod http;
pub use http::probe as probe_endpoint;
pub mod keys;
pub mod net;
pub mod ollama;
pub mod openai;
pub mod pricing;
mod process;
pub mod process_group;
pub mod profile;
pub mod progress;
pub mod project_instructions;
pub mod registry;
pub mod responses;
mod retry;
pub mod sandbox;
pub mod schema;
pub mod scripted;
pub mod secret;
pub mod shell;
pub mod step_env;
mod stream;
pub mod tool_mode;
pub mod tools;
pub mod window_probe;
pub mod workspace;
pub mod worktree;

pub use agent_loop::{LoopSettings, RetryPolicy};
pub use anthropic::AnthropicBackend;
pub use backend::{
    ChatBackend, ChatRequest, ChatResponse, Message, ReasoningEffort, Sampling, StopReason,
    ToolChoice, ToolResult,
};
pub use cli::{CliKind, CliSpec};
pub use error::{BackendError, ConfigError, ScriptError};
pub use generation::{Generation, GenerationSettings, ToolMode, WireApi};
pub use http::DEFAULT_REQUEST_TIMEOUT;
pub use net::{CaFile, Net, NetError};
pub use ollama::OllamaBackend;
pub use openai::{OpenAiBackend, TokenParam};
pub use pricing::{ModelPrice, PriceTable};
pub use process::OUTPUT_CAP;
pub use profile::{BackendSpec, Profile, built_in_profiles};
pub use progress::{ModelProgress, ProgressSink};
pub use registry::Agents;
pub use responses::ResponsesBackend;
pub use sandbox::{KernelSupport, SandboxMode, SandboxPolicy};
pub use scripted::ScriptedBackend;
pub use secret::ApiKey;
pub use step_env::EnvPolicy;
pub use stream::{DEFAULT_IDLE_TIMEOUT, Streaming};
pub use tools::ToolSet;
pub use workspace::WorkspaceTools;
pub use worktree::{Applied, GitWorktrees};
