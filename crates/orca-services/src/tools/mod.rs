//! The tool surface offered to agents, the role grants, and the one place where every tool
//! call is checked and audited: [`Gate`].
//!
//! - [`table`]: the one table of `orca_*` tools (name, access, schema, handler);
//! - [`grants`](mod@grants): which tools a role gets in a [`CallMode`];
//! - `gate`: [`Gate`], the check, dispatch and audit of every call;
//! - [`transcript`]: what is recorded of a call's result and of a model's answers (bounded);
//! - `plan_tools`, `ask`: the handlers; `schema`, `args`: what they share.
//!
//! There is no tool that approves a plan or starts an execution: those belong to the human and
//! the service layer.

mod args;
mod ask;
mod gate;
pub mod grants;
mod plan_log;
mod plan_tools;
mod schema;
pub mod table;
pub mod transcript;

#[cfg(test)]
mod tests;

pub(crate) use ask::ask_specialist;
pub use gate::{AuditScope, Gate, ProcessSink, StepOwner, ToolContext};
pub use grants::{CallMode, grants};
pub use table::{TABLE, ToolDef, definitions, names};

/// Workspace tools that only read (derived from [`orca_core::tool_access::WORKSPACE_TOOLS`]).
pub use orca_core::tool_access::WORKSPACE_READ_TOOLS as READ_TOOLS;
/// Workspace tools that change files or run commands: never offered for read-only questions
/// (derived from [`orca_core::tool_access::WORKSPACE_TOOLS`]).
pub use orca_core::tool_access::WORKSPACE_WRITE_TOOLS as WRITE_TOOLS;
