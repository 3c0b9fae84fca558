//! The crate's integration tests, one test binary with a module per area.

mod worktree;
mod worktree_base;
