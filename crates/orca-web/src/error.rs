//! Errors.

use orca_services::ServiceError;

/// What can go wrong in the web layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebError {
    /// Bad input (a flag, a file, a form field).
    #[error("{0}")]
    BadInput(String),
    /// The server refuses to start as configured.
    #[error("{0}")]
    Refused(String),
    /// A service call failed.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// Anything else.
    #[error("{0}")]
    Internal(String),
}
