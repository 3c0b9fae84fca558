//! What can go wrong for an embedder.

use thiserror::Error;

/// An embedding call that failed. Messages name the plan, step, agent or file.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// An agent profile that cannot be used (a duplicate id, a bad backend).
    #[error("agents: {0}")]
    Agents(#[from] orca_agents::ConfigError),
    /// The store could not be opened or read.
    #[error("store: {0}")]
    Store(#[from] orca_store::StoreError),
    /// A service refused or failed (a plan that does not validate, a wrong stage…).
    #[error(transparent)]
    Service(#[from] orca_services::ServiceError),
    /// An id or slug that does not parse.
    #[error(transparent)]
    Id(#[from] orca_core::IdError),
    /// The project directory cannot be used.
    #[error("{path}: {source}")]
    Io {
        /// The directory.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}
