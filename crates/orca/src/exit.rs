//! Errors the binary reports, and their exit codes.

use std::fmt;

use orca_services::ServiceError;
use orca_store::StoreError;

/// The documented exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    Ok = 0,
    Internal = 1,
    BadInput = 2,
    ExecutionFailed = 3,
    AwaitingHuman = 4,
    Tampered = 5,
    /// A record kept changing under concurrent writers past the retry limit: transient,
    /// nothing changed, try again.
    Conflict = 6,
    /// Stopped (Ctrl-C, `exec stop`) or found without a live driver: resumable.
    Interrupted = 130,
}

/// A one-line error with its exit code.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) exit: Exit,
    pub(crate) message: String,
}

impl CliError {
    pub(crate) fn bad_input(message: impl Into<String>) -> Self {
        Self {
            exit: Exit::BadInput,
            message: message.into(),
        }
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self {
            exit: Exit::Internal,
            message: message.into(),
        }
    }

    pub(crate) fn with(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The whole chain of an error, on one line.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out.replace('\n', " ")
}

impl From<ServiceError> for CliError {
    fn from(e: ServiceError) -> Self {
        let exit = if e.is_tampering() {
            Exit::Tampered
        } else if matches!(e, ServiceError::Contended { .. }) {
            Exit::Conflict
        } else if matches!(e, ServiceError::ReplanFailed { .. }) {
            Exit::AwaitingHuman
        } else if e.is_user_error() {
            Exit::BadInput
        } else {
            Exit::Internal
        };
        Self {
            exit,
            message: chain(&e),
        }
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        let exit = if matches!(e, StoreError::Tampered { .. }) {
            Exit::Tampered
        } else if e.is_user_error() || matches!(e, StoreError::LeaseHeld { .. }) {
            Exit::BadInput
        } else {
            Exit::Internal
        };
        Self {
            exit,
            message: chain(&e),
        }
    }
}
