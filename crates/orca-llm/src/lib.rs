//! # orca-llm
//!
//! The model wire: how orca talks to a language model, and nothing about what it asks.
//!
//! - [`ChatBackend`] is the small trait a model backend implements, with normalized request
//!   and response types ([`ChatRequest`], [`ChatResponse`], [`Message`]); a third-party
//!   backend needs no HTTP crate.
//! - HTTP adapters: [`OpenAiBackend`] (Chat Completions: OpenAI, Ollama, vLLM, llama.cpp, LM
//!   Studio), [`ResponsesBackend`] (OpenAI Responses), [`AnthropicBackend`] (Messages),
//!   [`OllamaBackend`] (Ollama's native `/api/chat`); streaming, idle timeouts and progress;
//!   proxies and TLS roots ([`Net`]); [`ScriptedBackend`] replays a file.
//! - Around a call: retries of transient errors ([`RetryPolicy`]), prices ([`PriceTable`]),
//!   context windows ([`context_window`], [`window_probe`]).
//!
//! **Architecture Invariant:** provider JSON stays private to its adapter; the trait speaks
//! only the normalized types. **Architecture Invariant:** nothing here runs a process, reads
//! a config file or knows about agents, plans or tools beyond their JSON schemas.
//!
//! **API Boundary:** [`ChatBackend`] and its types are what an embedder implements.
#![forbid(unsafe_code)]

pub mod anthropic;
pub mod backend;
pub mod context_window;
mod endpoint;
pub mod error;
mod http;
pub mod net;
pub mod ollama;
pub mod openai;
pub mod pricing;
pub mod progress;
pub mod repetition;
pub mod responses;
pub mod retry;
pub mod scripted;
pub mod secret;
mod stream;
pub mod trace;
pub mod window_probe;

pub use anthropic::AnthropicBackend;
pub use backend::{
    ChatBackend, ChatRequest, ChatResponse, Message, ReasoningEffort, Sampling, StopReason,
    ToolChoice, ToolResult,
};
pub use error::{BackendError, ScriptError};
pub use http::DEFAULT_REQUEST_TIMEOUT;
pub use http::client_builder as http_client_builder;
pub use http::probe as probe_endpoint;
pub use net::{CaFile, Net, NetError};
pub use ollama::OllamaBackend;
pub use openai::{OpenAiBackend, TokenParam};
pub use pricing::{ModelPrice, PriceTable};
pub use progress::{ModelProgress, ProgressSink};
pub use responses::ResponsesBackend;
pub use retry::{RetryPolicy, call_with_retry};
pub use scripted::ScriptedBackend;
pub use secret::ApiKey;
pub use stream::{DEFAULT_IDLE_TIMEOUT, Streaming};
