//! Workspace tools.
/// Placeholder.
#[derive(Debug)]
pub struct WorkspaceTools;
