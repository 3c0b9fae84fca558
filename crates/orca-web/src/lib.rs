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
//! models (inbox, one execution) any other front end can reuse; the audit tree and a step's
//! transcript come from `orca_services::timeline`, as on the command line.
//!
//! Pages: `pages` (inbox, plans, a plan, executions, an execution, the approval
//! confirmation), `live` (an execution's live part and the event streams), `steps` (one
//! step's attempts, transcript and output, live), `audit` (the causal tree with durations),
//! `results` (diffs, accept / discard), `login`. Text agents write goes through [`markdown`]
//! (a safe subset) or [`html::esc`]; nothing passes HTML through.
#![forbid(unsafe_code)]
#![allow(
    clippy::result_large_err,
    reason = "handlers return an axum response as their error: one per request, never in a loop"
)]

pub mod action_tokens;
mod audit;
pub mod error;
mod exec_list;
pub mod html;
mod live;
mod login;
pub mod markdown;
pub mod notify;
mod pages;
mod post;
mod results;
pub mod server;
mod signed_approval;
pub mod state;
mod steps;
pub mod svg;
pub mod tls;
pub mod tokens;
pub mod views;

pub use error::WebError;
pub use notify::{Deliver, NotifyConfig};
pub use server::{TlsFiles, check_bind, router, serve};
pub use state::{NoRuns, RunStarter, Settings, Web};
pub use tokens::{TokenFile, TokenName};
