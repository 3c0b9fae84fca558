//! The crate's integration tests, one test binary (one link, one process start) with a
//! module per area.

mod approval_policy;
mod canonical;
mod context_bounds;
mod execution_refusals;
mod graph_properties;
mod hitl_answers;
mod malformed_plans;
mod model_execution;
mod model_plan;
mod redact;
mod serde_roundtrip;
mod snapshots;
mod step_env;
mod worktree_dependencies;
mod write_conflicts;
