//! # orca-web
//!
//! `orca serve`: the decision inbox and dashboard over HTTP, and notifications of pending
//! decisions (ADR 0016). Pages are rendered on the server (no JavaScript framework; a small
//! script only for live updates); every request needs an access token; every action redeems a
//! single-use action token, then makes the same service call as the command line, recorded as
//! `web:<token name>`.
//!
//! Layering: this crate speaks HTTP over `orca-services` and the `orca-store` traits; it never
//! names a concrete store or agent backend (the binary picks them). [`views`] holds the read
//! models (inbox, one execution) any other front end can reuse.
#![forbid(unsafe_code)]
#![allow(
    clippy::result_large_err,
    reason = "handlers return an axum response as their error: one per request, never in a loop"
)]

pub mod action_tokens;
pub mod error;
mod exec_list;
pub mod html;
mod live;
pub mod notify;
mod pages;
mod post;
mod results;
pub mod server;
pub mod state;
pub mod svg;
pub mod tls;
pub mod tokens;
pub mod views;

pub use error::WebError;
pub use notify::{Deliver, NotifyConfig};
pub use server::{TlsFiles, check_bind, router, serve};
pub use state::{NoRuns, RunStarter, Settings, Web};
pub use tokens::{TokenFile, TokenName};
