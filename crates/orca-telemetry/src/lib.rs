//! orca's OpenTelemetry export (ADR 0048, telemetry): traces and metrics of executions, named
//! after the GenAI semantic conventions, sent over OTLP/HTTP (protobuf or JSON) to the collector
//! the standard `OTEL_*` variables or the config's `[telemetry]` table name. Off unless an
//! endpoint is set.
//!
//! Spans are not made while the run goes: they are derived from the execution's audit log
//! ([`spans`]), with explicit start and end times and ids derived from the execution id
//! ([`ids`]), so a resumed run, a takeover or a late reader continue the same trace without
//! coordination. [`Telemetry`] batches and sends them in the background with a bounded queue
//! and a bounded flush at exit; a collector that is down costs one warning, never the run.
#![forbid(unsafe_code)]

mod client;
pub mod config;
mod export;
pub mod follow;
pub mod ids;
mod ledger;
mod metrics;
pub mod spans;
mod waits;

pub use config::{ConfigError, Protocol, TelemetrySettings};
pub use export::{Telemetry, probe};
pub use spans::{ModelInfo, SpanInput};
