//! One module per command family; `app` only wires and dispatches.

pub(crate) mod accept;
pub(crate) mod agents;
pub(crate) mod ask;
pub(crate) mod audit;
pub(crate) mod config;
pub(crate) mod diff;
pub(crate) mod driver;
pub(crate) mod eval;
pub(crate) mod events;
pub(crate) mod exec;
pub(crate) mod filter;
pub(crate) mod logs;
pub(crate) mod mcp;
pub(crate) mod plan;
pub(crate) mod policy;
pub(crate) mod retry;
pub(crate) mod revise;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod setup;
pub(crate) mod store;
pub(crate) mod transcript;
pub(crate) mod vote;
pub(crate) mod watch;
pub(crate) mod worker;
