//! Errors of the crate. Messages are lowercase fragments naming the file, field or endpoint.

use thiserror::Error;

/// A `.orca/config.toml` that does not validate, or a profile that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The text is not TOML, or a table has the wrong shape.
    #[error("{file}: {message}")]
    Parse {
        /// The config file.
        file: String,
        /// The parser's message.
        message: String,
    },
    /// A field has a value that is not allowed.
    #[error("{file}: {field}: {message}")]
    Invalid {
        /// The config file.
        file: String,
        /// The dotted field path (`agents.reviewer.backend`).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// An `api_key_env` names an environment variable that is not set.
    #[error("{file}: {field}: the environment variable {var} is not set")]
    MissingKey {
        /// The config file.
        file: String,
        /// The dotted field path (`agents.reviewer.api_key_env`).
        field: String,
        /// The variable.
        var: String,
    },
    /// A key file, key command or env file that cannot be used (never quoting a secret).
    #[error("{file}: {field}: {message}")]
    Secret {
        /// The config file.
        file: String,
        /// The dotted field path (`agents.coder.api_key_file`).
        field: String,
        /// What is wrong, and how to fix it.
        message: String,
    },
    /// A prompt file could not be read.
    #[error("{file}: {field}: cannot read prompt file {path}: {message}")]
    PromptFile {
        /// The config file.
        file: String,
        /// The dotted field path.
        field: String,
        /// The prompt file.
        path: String,
        /// The I/O error.
        message: String,
    },
}
