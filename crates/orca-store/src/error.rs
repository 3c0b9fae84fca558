//! Store errors. User-facing problems (not found, conflict, corrupt file) are kept apart from
//! internal ones (I/O).

use std::path::PathBuf;

use orca_core::{ExecutionId, Holder};
use thiserror::Error;

use crate::port::Revision;

/// A boxed backend error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

fn conflict_text(what: &str, expected: Revision, found: Revision) -> String {
    if expected == found {
        format!(
            "{what} is being written by another writer right now (at revision {found}): re-read \
             it and retry"
        )
    } else {
        format!(
            "{what} was changed concurrently (expected revision {expected}, found {found}): \
             re-read it and retry"
        )
    }
}

/// What can go wrong in a store.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Nothing stored under this id.
    #[error("{what} not found")]
    NotFound {
        /// What was looked for (`plan plan_…`).
        what: String,
    },
    /// Something with this id already exists.
    #[error("{what} already exists")]
    AlreadyExists {
        /// What (`plan plan_…`).
        what: String,
    },
    /// Compare-and-swap failed: someone else wrote first (or, `found == expected`, is writing
    /// it right now and a claim does not wait). Re-read and retry.
    #[error("{}", conflict_text(what, *expected, *found))]
    Conflict {
        /// What (`execution exec_…`, `task build of exec_…`).
        what: String,
        /// The revision the writer read.
        expected: Revision,
        /// The revision stored now.
        found: Revision,
    },
    /// A stored file cannot be read: corrupt, truncated, foreign or written by a newer orca.
    #[error("{}: {message}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Another live process holds the execution's lease.
    #[error("execution {execution} is being driven by another process (pid {} on {})", holder.pid, holder.host)]
    LeaseHeld {
        /// The execution.
        execution: ExecutionId,
        /// Who holds it.
        holder: Holder,
    },
    /// A write was refused because it would change something that must not change
    /// (an approved plan, a terminal execution).
    #[error("{0}")]
    Immutable(String),
    /// The request itself is inconsistent (tasks that do not match the execution's steps, a
    /// task of another execution…). Nothing was written.
    #[error("{0}")]
    Invalid(String),
    /// A record was changed behind orca's back (a log cut or rewritten under a running
    /// execution, a state file that disagrees with its log). Nothing was written.
    #[error("{}: {message}", path.display())]
    Tampered {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An I/O or backend failure.
    #[error("{context}")]
    Backend {
        /// What was being done (`writing .orca/plans/plan_….json`).
        context: String,
        /// The backend's error.
        #[source]
        source: BoxError,
    },
}

impl StoreError {
    /// Whether retrying after re-reading may succeed (a CAS conflict).
    #[must_use]
    pub const fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }

    /// Whether the error is about input or stored data (as opposed to an internal failure).
    #[must_use]
    pub const fn is_user_error(&self) -> bool {
        matches!(
            self,
            Self::NotFound { .. }
                | Self::AlreadyExists { .. }
                | Self::Corrupt { .. }
                | Self::Immutable(_)
                | Self::Invalid(_)
                | Self::Tampered { .. }
        )
    }

    /// Wraps a backend error with what was being done. A file where a directory should be (or
    /// the reverse) is a damaged layout, the user's to fix: [`StoreError::Corrupt`].
    pub fn backend(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        let context = context.into();
        let source = source.into();
        if let Some(io) = source.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::NotADirectory | std::io::ErrorKind::IsADirectory
            )
        {
            return Self::Corrupt {
                path: PathBuf::from(context),
                message: format!("the store's layout is damaged: {io}"),
            };
        }
        Self::Backend { context, source }
    }
}
