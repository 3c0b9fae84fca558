//! # orca-os
//!
//! Everything orca asks of the kernel, in one crate — the only one allowed `unsafe`, each
//! block with a `SAFETY` comment and an `#[expect(unsafe_code, reason = …)]`.
//!
//! - [`process`]: a child process in its own process group, output captured with a cap, a
//!   timeout, and a guard that ends the whole group when the run ends or is dropped.
//! - [`idle`]: signs of life of a run besides its output (files modified under a tree).
//! - [`process_group`]: the watchdog forked into every group (the group dies with orca), the
//!   kill grace, ending the groups a dead runner recorded.
//! - [`sandbox`] and [`protected`]: the Landlock + mount-namespace sandbox a step runs in, and
//!   the paths it must never reach (`.orca/`, the signing key).
//! - [`step_env`]: the environment a step gets (an allowlist, never orca's whole environment).
//! - [`worktree`]: git worktrees for steps that run in isolation, step diffs as git trees,
//!   accepting a result; [`file_changes`]: step diffs outside a repository.
//! - [`term`]: the terminal's width.
//!
//! **Architecture Invariant:** nothing here knows about models, agents or plans beyond the
//! ids and ports of `orca-core`.

pub mod file_changes;
pub mod idle;
pub mod process;
pub mod process_group;
pub mod protected;
pub mod sandbox;
pub mod step_env;
pub mod term;
pub mod worktree;

pub use file_changes::FileChanges;
pub use process::{OUTPUT_CAP, RunEnd, RunOutput, RunSpec, run_captured};
pub use sandbox::{KernelSupport, PidNamespace, SandboxMode, SandboxPolicy};
pub use step_env::EnvPolicy;
pub use worktree::{GitChanges, GitWorktrees};
