//! Errors of the model wire. Messages are lowercase fragments naming the file, field or endpoint.

use std::time::Duration;

use thiserror::Error;

/// A model backend call that failed, classified so the agent loop knows whether to retry.
///
/// A third-party backend builds these without depending on any HTTP crate.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BackendError {
    /// Too many requests (HTTP 429 without a quota marker): retried, honouring `retry_after`.
    #[error("rate limited by {endpoint}: {message}")]
    RateLimited {
        /// Where.
        endpoint: String,
        /// The provider's message.
        message: String,
        /// How long the provider asked to wait.
        retry_after: Option<Duration>,
    },
    /// The provider is overloaded (HTTP 529): retried.
    #[error("{endpoint} is overloaded: {message}")]
    Overloaded {
        /// Where.
        endpoint: String,
        /// The provider's message.
        message: String,
        /// How long the provider asked to wait.
        retry_after: Option<Duration>,
    },
    /// A server error (HTTP 5xx): retried.
    #[error("server error {status} from {endpoint}: {message}")]
    Server {
        /// Where.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The body, shortened (HTML bodies are reduced to a note).
        message: String,
        /// How long the provider asked to wait.
        retry_after: Option<Duration>,
    },
    /// The request timed out: not retried (the same request to the same slow model would most
    /// likely time out again; the agent loop fails the turn with a message naming the setting).
    #[error("request to {endpoint} timed out")]
    Timeout {
        /// Where.
        endpoint: String,
    },
    /// A streamed answer went silent for longer than the idle timeout: not retried, like a
    /// timeout.
    #[error("the model at {endpoint} sent nothing for {} s (idle_timeout_secs)", idle.as_secs())]
    Stalled {
        /// Where.
        endpoint: String,
        /// How long it was silent.
        idle: Duration,
    },
    /// The server reported an error in the middle of a streamed answer: not retried (an
    /// overload or rate limit reported so is [`Self::Overloaded`] / [`Self::RateLimited`]).
    #[error("the model at {endpoint} failed mid-answer: {message}")]
    StreamFailed {
        /// Where.
        endpoint: String,
        /// The provider's message.
        message: String,
    },
    /// The account is out of quota or credit: never retried.
    #[error("quota or billing limit reached at {endpoint}: {message}")]
    Quota {
        /// Where.
        endpoint: String,
        /// The provider's message.
        message: String,
    },
    /// The key was refused (HTTP 401/403): never retried.
    #[error("authentication refused by {endpoint} (status {status}): {message}")]
    Auth {
        /// Where.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// Nothing answered at the endpoint: never retried.
    #[error(
        "no model reachable at {endpoint}: start Ollama, or set ANTHROPIC_API_KEY / OPENAI_API_KEY, or configure an agent backend in .orca/config.toml ({message})"
    )]
    Unreachable {
        /// Where.
        endpoint: String,
        /// The transport error.
        message: String,
    },
    /// The TLS connection failed (a certificate the roots do not trust, a handshake refused):
    /// never retried.
    #[error("the TLS connection to {endpoint} failed: {message}")]
    Tls {
        /// Where.
        endpoint: String,
        /// What failed, and the setting that fixes it.
        message: String,
    },
    /// The server refused a request longer than the model's context window: never retried.
    #[error(
        "the request does not fit the model's context window at {endpoint}: {message}; set `context_window` in this agent's [generation] settings so orca fits requests before sending them"
    )]
    ContextLength {
        /// Where.
        endpoint: String,
        /// The provider's message.
        message: String,
    },
    /// The request was refused for another reason (HTTP 4xx): never retried.
    #[error("request refused by {endpoint} (status {status}): {message}")]
    Refused {
        /// Where.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The response could not be understood: never retried.
    #[error("invalid response from {endpoint}: {message}")]
    InvalidResponse {
        /// Where.
        endpoint: String,
        /// What was wrong.
        message: String,
    },
}

impl BackendError {
    /// Whether the agent loop may retry the call.
    #[must_use]
    pub const fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. } | Self::Overloaded { .. } | Self::Server { .. }
        )
    }

    /// The wait the provider asked for, if any.
    #[must_use]
    pub const fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. }
            | Self::Overloaded { retry_after, .. }
            | Self::Server { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// A scripted backend file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The file could not be read.
    #[error("cannot read script {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        message: String,
    },
    /// The file is not a valid script.
    #[error("invalid script {path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// The parse error.
        message: String,
    },
}
