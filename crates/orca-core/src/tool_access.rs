//! What each tool may do to the world, and the workspace tools' table: the one place the
//! read-only workspace tools are written. The `orca_*` tools' access is in the services'
//! tool table; a [`crate::ToolHost`] answers [`crate::ToolHost::access`] for the tools it offers.

/// What a tool may do when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolAccess {
    /// Only reads (files, plans, executions, a read-only specialist): allowed while planning and
    /// in read-only questions; calls of a turn that all read run concurrently.
    Read,
    /// Asks the human: changes nothing, but one question at a time.
    AskHuman,
    /// Edits or submits a plan draft: the planner's work.
    EditDraft,
    /// Forwards a message to the planner: the relay's one tool.
    Relay,
    /// Changes the project's files or runs commands.
    Write,
}

impl ToolAccess {
    /// Changes nothing: may be granted while planning and for read-only questions.
    #[must_use]
    pub const fn is_read_only(self) -> bool {
        matches!(self, Self::Read | Self::AskHuman)
    }

    /// May run concurrently with the other calls of a turn when they all may.
    #[must_use]
    pub const fn runs_concurrently(self) -> bool {
        matches!(self, Self::Read)
    }
}

/// A workspace tool (offered by the binary's workspace host, granted by a profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceTool {
    /// The name the model calls.
    pub name: &'static str,
    /// What it may do.
    pub access: ToolAccess,
}

/// Every workspace tool, read tools first.
pub const WORKSPACE_TOOLS: &[WorkspaceTool] = &[
    WorkspaceTool {
        name: "read_file",
        access: ToolAccess::Read,
    },
    WorkspaceTool {
        name: "list_files",
        access: ToolAccess::Read,
    },
    WorkspaceTool {
        name: "search_text",
        access: ToolAccess::Read,
    },
    WorkspaceTool {
        name: "write_file",
        access: ToolAccess::Write,
    },
    WorkspaceTool {
        name: "edit_file",
        access: ToolAccess::Write,
    },
    WorkspaceTool {
        name: "run_command",
        access: ToolAccess::Write,
    },
];

const fn count(read_only: Option<bool>) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < WORKSPACE_TOOLS.len() {
        if keep(WORKSPACE_TOOLS[i], read_only) {
            n += 1;
        }
        i += 1;
    }
    n
}

const fn keep(tool: WorkspaceTool, read_only: Option<bool>) -> bool {
    match read_only {
        None => true,
        Some(r) => tool.access.is_read_only() == r,
    }
}

const fn names<const N: usize>(read_only: Option<bool>) -> [&'static str; N] {
    let mut out = [""; N];
    let mut n = 0;
    let mut i = 0;
    while i < WORKSPACE_TOOLS.len() {
        if keep(WORKSPACE_TOOLS[i], read_only) {
            out[n] = WORKSPACE_TOOLS[i].name;
            n += 1;
        }
        i += 1;
    }
    out
}

const ALL_N: usize = count(None);
const READ_N: usize = count(Some(true));
const WRITE_N: usize = count(Some(false));

/// The names of every workspace tool (derived from [`WORKSPACE_TOOLS`]).
pub const WORKSPACE_TOOL_NAMES: &[&str] = &names::<ALL_N>(None);
/// The workspace tools that only read (derived from [`WORKSPACE_TOOLS`]).
pub const WORKSPACE_READ_TOOLS: &[&str] = &names::<READ_N>(Some(true));
/// The workspace tools that change files or run commands (derived from [`WORKSPACE_TOOLS`]).
pub const WORKSPACE_WRITE_TOOLS: &[&str] = &names::<WRITE_N>(Some(false));

/// What the workspace tool `name` may do; `None` if it is not a workspace tool.
#[must_use]
pub fn workspace_access(name: &str) -> Option<ToolAccess> {
    WORKSPACE_TOOLS
        .iter()
        .find(|t| t.name == name)
        .map(|t| t.access)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_derived_lists_follow_the_table() {
        assert_eq!(
            WORKSPACE_READ_TOOLS,
            &["read_file", "list_files", "search_text"]
        );
        assert_eq!(
            WORKSPACE_WRITE_TOOLS,
            &["write_file", "edit_file", "run_command"]
        );
        assert_eq!(WORKSPACE_TOOL_NAMES.len(), WORKSPACE_TOOLS.len());
        assert_eq!(workspace_access("run_command"), Some(ToolAccess::Write));
        assert_eq!(workspace_access("orca_plans_get"), None);
    }
}
