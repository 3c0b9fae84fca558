//! # orca-agents
//!
//! The agent runtime: who does a step, and how.
//!
//! - [`Agents`] implements [`orca_core::AgentPort`] over a set of [`Profile`]s (built-in
//!   specialists, custom ones); the `shell` agent is always present.
//! - The agent loop ([`agent_loop`]) offers the caller's tools plus a forced `submit_result`
//!   tool, validates the result, repairs it up to twice, enforces budgets and retries
//!   transient errors; models are reached through `orca-llm`'s [`ChatBackend`].
//! - Command-line agents (Claude Code, Codex, opencode) run as subprocesses ([`CliSpec`]),
//!   through `orca-os`.
//! - [`WorkspaceTools`] is a [`orca_core::ToolHost`] confined to the project root.
//! - [`config`] parses `.orca/config.toml`.
//!
//! **Architecture Invariant:** no `unsafe` here; processes, the sandbox and worktrees are
//! `orca-os`'s, the model wire is `orca-llm`'s.
#![forbid(unsafe_code)]

pub mod agent_loop;
pub mod api_keys;
pub mod checks;
pub mod cli;
pub mod config;
pub mod error;
pub mod generation;
pub mod profile;
pub mod project_instructions;
pub mod registry;
pub mod schema;
pub mod shell;
pub mod stall;
mod task_message;
pub mod tool_mode;
pub mod tools;
pub mod workspace;

pub use agent_loop::LoopSettings;
pub use cli::{CliKind, CliSpec, Declaration, DeclarationSettings, PromptVia, Reading};
pub use error::ConfigError;
pub use generation::{Generation, GenerationSettings, ToolMode, WireApi};
// The wire types the runtime's own API speaks (a profile holds a `ChatBackend`).
pub use orca_llm::{
    ApiKey, BackendError, ChatBackend, ChatRequest, ChatResponse, Message, ModelProgress,
    ProgressSink, ReasoningEffort, RetryPolicy, Sampling, StopReason, ToolChoice, ToolResult,
};
pub use profile::{BackendSpec, Profile, built_in_profiles};
pub use registry::Agents;
pub use stall::StallLimits;
pub use tools::ToolSet;
pub use workspace::WorkspaceTools;
