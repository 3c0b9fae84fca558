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
//!
//! Backends: [`FileStore`] (the default: human-readable JSON under `<project>/.orca/`, every
//! write atomic and durable, one file per task so a transition costs O(task); see
//! `adr/0007-store-layout-and-durability.md`) and [`MemoryStore`] (same semantics, one
//! process). The [`audit`] module holds the pure audit-log logic (hash chain, redaction, Merkle
//! root, verification; `adr/0008-audit-log.md`).
//!
//! ```
//! use orca_store::{FileStore, PlanStore};
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let dir = tempfile::tempdir().unwrap();
//! let store = FileStore::open(dir.path()).unwrap();
//! let listing = store.list_plans().await.unwrap();
//! assert!(listing.items.is_empty() && listing.problems.is_empty());
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod audit;
pub mod bounded;
pub mod common;
pub mod entry_template;
mod error;
mod file;
pub mod keys;
mod memory;
pub mod perms;
mod port;
pub mod redaction;
pub mod signing;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod verify;

pub use file::{FileStore, STORE_DIR};
pub use memory::MemoryStore;

pub use audit::{AuditEntry, NewAuditEntry, Seal, VerifyReport};
pub use error::{BoxError, StoreError};
pub use port::{
    AuditLogId, AuditStore, ChangeCursor, ExecutionSnapshot, ExecutionStore, ExecutionSummary,
    ExpiredTask, Lease, LeaseInfo, Listing, ListingProblem, PlanStore, PlanSummary, ResourceGuard,
    Revision, Store, TaskTransition, Transitioned, Versioned, WriteOrder,
};
pub use signing::{Authority, PublicKey, SignatureProblem, SignatureRecord, SigningKey};
