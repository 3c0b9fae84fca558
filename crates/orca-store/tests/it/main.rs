//! The crate's integration tests, one test binary (one link, one process start) with a
//! module per area.

mod chain_head;
mod common;
mod conformance;
mod differential;
mod entry_hash;
mod format;
mod redaction;
mod task_lock;
mod task_snapshot;
