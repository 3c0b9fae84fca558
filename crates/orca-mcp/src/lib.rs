//! orca as an MCP server for agent hosts (Claude Code, Codex, opencode…), over stdio.
//!
//! The tools ([`server`]) are the service calls the command line makes: create a plan from a
//! document or a request, list and show plans and executions, run an approved plan (the run is
//! driven by a process orca owns, started through the [`Host`], never inside the request),
//! watch an execution, read a step's output, and answer a deviation with retry or stop.
//!
//! **No tool approves a plan** (ADR 0019): the only code here that approves is [`approval`],
//! and it does so only with a human's answer to an MCP elicitation, shown by the host's UI;
//! when the host cannot elicit, the tool returns the command (and inbox) for the human.
//! Everything a tool returns goes through the binary's redactor first.
#![forbid(unsafe_code)]

pub mod approval;
pub mod host;
pub mod params;
pub mod resources;
mod schemas;
pub mod server;
pub mod view;

pub use host::{Elicitation, Host, Launched, Settings};
pub use server::OrcaMcp;

use rmcp::ServiceExt as _;

/// What can go wrong serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The MCP session could not start or failed.
    #[error("mcp session: {0}")]
    Session(String),
}

/// Serves `server` on stdin/stdout until the client closes the session.
///
/// # Errors
///
/// When the session cannot be initialised or ends in an error.
pub async fn serve_stdio(server: OrcaMcp) -> Result<(), McpError> {
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| McpError::Session(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| McpError::Session(e.to_string()))?;
    Ok(())
}
