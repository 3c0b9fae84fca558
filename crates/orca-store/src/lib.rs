//! # orca-store
//!
//! The storage port of orca ([`Store`] = [`PlanStore`] + [`ExecutionStore`] + [`AuditStore`]),
//! its backends, and the tamper-evident audit log.
//!
//! Updates are compare-and-swap on a [`Revision`]: a writer that read revision `r` can only
//! write if the stored revision is still `r`, so a concurrent writer never silently overwrites
//! another. A running execution is held by an exclusive [`Lease`] across processes; a lease
//! whose holder died is detected as stale and can be taken over by `resume`.
//!
//! The port never names a backend's error type: backend errors cross as boxed sources inside
//! [`StoreError`].

pub mod audit;
mod common;
mod error;
mod file;
mod memory;
mod port;

pub use file::{FileStore, STORE_DIR};
pub use memory::MemoryStore;

pub use audit::{AuditEntry, NewAuditEntry, Seal, VerifyReport};
pub use error::{BoxError, StoreError};
pub use port::{
    AuditLogId, AuditStore, ExecutionSnapshot, ExecutionStore, ExecutionSummary, Lease, LeaseInfo,
    Listing, ListingProblem, PlanStore, PlanSummary, ResourceGuard, Revision, Store, Versioned,
};
