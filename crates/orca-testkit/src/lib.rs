//! # orca-testkit
//!
//! What orca's tests and benchmarks start around the code under test, kept out of every
//! production crate's `src/` (`publish = false`; `cargo xtask tidy` checks that only
//! dev-dependencies and benchmarks name it):
//!
//! - [`postgres`]: a throwaway PostgreSQL server in a temp dir on a free port (plain, or with
//!   TLS, a throwaway CA and client certificates), removed when dropped or when the test
//!   process dies.
//! - [`certs`]: a throwaway CA with server and client certificates, made with `openssl`.
//! - [`fake_model`]: the Chat Completions bodies a fake model server answers with.
//! - [`bench`]: the table and the JSON a benchmark hands to `cargo xtask bench`.
//! - [`pty`]: a pseudo-terminal for a program a test runs as a person at a terminal would.
//! - [`otlp`]: an OTLP/HTTP receiver (protobuf and JSON) that keeps every span, metric and
//!   byte it was sent.
#![forbid(unsafe_code)]

pub mod bench;
pub mod certs;
pub mod fake_model;
pub mod otlp;
pub mod postgres;
pub mod pty;
