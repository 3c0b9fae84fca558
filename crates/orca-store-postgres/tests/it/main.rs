//! The crate's integration tests against a real throwaway PostgreSQL, one test binary with a
//! module per area (`faults.rs` beside this directory is its own binary, from before).

mod group;
mod tls;
