//! The role grants: which tools an agent is offered for one call. The `orca_*` tools a mode
//! gets follow from their access in the [table](super::table); workspace tools from the
//! profile, narrowed by their access in [`orca_core::tool_access`].

use std::collections::BTreeSet;

use orca_core::tool_access::workspace_access;
use orca_core::{AgentInfo, Role, ToolAccess};

use super::table::{TABLE, names};

/// What an agent call is for; it narrows the grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallMode {
    /// The relay forwarding a message.
    Relay,
    /// The planner handling a new request (no plan yet): it drafts, so it gets no tools to
    /// read other plans or executions.
    Planning,
    /// The planner revising or replanning the plan it is given: it also reads plans and
    /// executions.
    Revising,
    /// A specialist carrying out a step.
    Task,
    /// A specialist answering a read-only question.
    Question,
}

/// The `orca_*` tools whose access is one of `access`.
fn orca_tools(access: &[ToolAccess]) -> impl Iterator<Item = String> + '_ {
    TABLE
        .iter()
        .filter(|d| access.contains(&d.access))
        .map(|d| d.name.to_owned())
}

/// A workspace tool that changes files or runs commands.
fn writes(tool: &str) -> bool {
    workspace_access(tool).is_some_and(|a| !a.is_read_only())
}

/// A workspace tool that only reads.
fn only_reads(tool: &str) -> bool {
    workspace_access(tool).is_some_and(ToolAccess::is_read_only)
}

/// The tools an agent is granted for a call: the role's orca tools plus the workspace tools its
/// profile grants, minus the write tools for read-only questions.
#[must_use]
pub fn grants(info: &AgentInfo, mode: CallMode) -> BTreeSet<String> {
    use names::*;
    let mut out: BTreeSet<String> = BTreeSet::new();
    let profile = info.workspace_tools.iter();
    match (info.role, mode) {
        (Role::Relay, _) | (_, CallMode::Relay) => out.extend(orca_tools(&[ToolAccess::Relay])),
        (Role::Planner, _) | (_, CallMode::Planning | CallMode::Revising) => {
            // Research is read-only, whatever the profile says; plans are drafted, never run.
            // A new request needs no other plan or execution: each tool offered is one more
            // a small model may call instead of drafting.
            out.extend(orca_tools(&[
                ToolAccess::Read,
                ToolAccess::AskHuman,
                ToolAccess::EditDraft,
            ]));
            if mode != CallMode::Revising {
                for t in [PLANS_LIST, PLANS_GET, EXECUTIONS_LIST, EXECUTION_GET] {
                    out.remove(t);
                }
            }
            out.extend(profile.filter(|t| only_reads(t)).cloned());
        }
        // Lean lists: a specialist's step message already carries the plan and the
        // earlier steps, so it gets no plan or agent tools, only a way to ask the human.
        (Role::Specialist, CallMode::Task) => {
            out.insert(ASK_USER.to_owned());
            out.extend(profile.cloned());
        }
        (Role::Specialist, CallMode::Question) => {
            out.extend(profile.filter(|t| !writes(t)).cloned());
        }
    }
    out
}
