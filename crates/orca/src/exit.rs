//! Errors the binary reports, and their exit codes.

use std::fmt;

use orca_services::ServiceError;
pub(crate) use orca_services::error::chain;
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
    /// `orca doctor` found a problem a run would meet (each printed with its next step).
    Unhealthy = 7,
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

impl From<ServiceError> for CliError {
    fn from(e: ServiceError) -> Self {
        let exit = if e.is_tampering() {
            Exit::Tampered
        } else if matches!(
            e,
            ServiceError::Contended { .. } | ServiceError::ContentChanged { .. }
        ) {
            Exit::Conflict
        } else if matches!(
            e,
            ServiceError::ReplanFailed { .. } | ServiceError::AwaitingApprovals { .. }
        ) {
            Exit::AwaitingHuman
        } else if e.is_user_error() {
            Exit::BadInput
        } else {
            Exit::Internal
        };
        Self::with(exit, chain(&e))
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
        Self::with(exit, chain(&e))
    }
}
