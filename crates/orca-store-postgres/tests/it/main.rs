//! The crate's integration tests against a real throwaway PostgreSQL, one test binary with a
//! module per area (`faults.rs` beside this directory is its own binary, from before).

mod catch_up;
mod chained;
/// The orca-store integration tests' fixtures (plans, holders, the task cycle): shared, not
/// copied.
#[path = "../../../orca-store/tests/it/common/mod.rs"]
mod common;
mod conformance;
mod db;
mod ending;
mod group;
mod leases;
mod notify;
mod schema;
mod staged;
mod tamper;
mod tls;
