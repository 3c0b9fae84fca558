//! Worktree isolation: where a step runs, and the port that gives it its own checkout.
//!
//! A step with `isolation: "worktree"` (or every step that declares `writes`, when the plan's
//! default says so) runs in a checkout of its own, on a branch named after the execution and the
//! step, created from the execution's base commit plus the results of its direct dependencies,
//! and its result is merged into the execution's integration branch when it completes.
//! orca-core only names the rule and the port; the git code is in `orca-agents` (`worktree.rs`)
//! and the binary wires it (ADR 0017).

use std::collections::BTreeSet;
use std::path::PathBuf;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::agent::ToolHost;
use crate::graph::dependency_indices;
use crate::id::{ExecutionId, StepId};
use crate::plan::{PlanContent, Step};

/// Where a step runs.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// In the project directory itself.
    #[default]
    InPlace,
    /// In a git worktree of its own, merged into the execution's branch when it completes.
    Worktree,
}

impl Isolation {
    /// The isolation `step` runs with: its own, else (for a step that declares writes) the
    /// plan's default, else `fallback` (the project config's), else in place.
    #[must_use]
    pub fn of(step: &Step, plan: &PlanContent, fallback: Option<Self>) -> Self {
        step.isolation.unwrap_or_else(|| {
            if step.writes.is_empty() {
                Self::InPlace
            } else {
                plan.isolation.or(fallback).unwrap_or_default()
            }
        })
    }
}

/// Whether `plan` has any step that runs in a worktree.
#[must_use]
pub fn any_worktree(plan: &PlanContent, fallback: Option<Isolation>) -> bool {
    plan.steps
        .iter()
        .any(|s| Isolation::of(s, plan, fallback) == Isolation::Worktree)
}

/// The steps whose results the worktree of `plan.steps[index]` starts from, in plan order:
/// its direct dependencies (the "after the previous step" default applied), where one that
/// runs in place — and so commits nothing — is replaced by its own, recursively. Each result
/// already holds its own dependencies' results.
#[must_use]
pub fn worktree_dependencies(
    plan: &PlanContent,
    index: usize,
    fallback: Option<Isolation>,
) -> Vec<StepId> {
    let deps = dependency_indices(&plan.steps);
    let mut found = BTreeSet::new();
    let mut seen = BTreeSet::new();
    let mut todo: Vec<usize> = deps.get(index).cloned().unwrap_or_default();
    while let Some(i) = todo.pop() {
        if !seen.insert(i) {
            continue;
        }
        let Some(step) = plan.steps.get(i) else {
            continue;
        };
        if Isolation::of(step, plan, fallback) == Isolation::Worktree {
            found.insert(i);
        } else if let Some(more) = deps.get(i) {
            todo.extend(more);
        }
    }
    found
        .into_iter()
        .filter_map(|i| plan.steps.get(i).map(|s| s.id.clone()))
        .collect()
}

/// Why a step's workspace could not be prepared or merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The project is not in a git repository: isolated steps run in place.
    #[error("{0} is not in a git repository")]
    NotARepository(PathBuf),
    /// The step's branch does not merge cleanly into the execution's branch.
    #[error("merging step `{step}` into `{branch}` conflicts in {}", files.join(", "))]
    Conflict {
        /// The step.
        step: StepId,
        /// The integration branch.
        branch: String,
        /// The conflicting files, relative to the repository.
        files: Vec<String>,
    },
    /// The result to accept is no longer the one shown (the integration branch moved).
    #[error(
        "the result of execution {execution} changed since it was shown (tree {shown}, now {now})"
    )]
    ResultChanged {
        /// The execution.
        execution: ExecutionId,
        /// The tree that was shown and accepted.
        shown: String,
        /// The tree the integration branch holds now.
        now: String,
    },
    /// Accepting the result into the checked-out branch conflicts.
    #[error("merging `{branch}` into the checked-out branch conflicts in {}; nothing was changed", files.join(", "))]
    AcceptConflict {
        /// The integration branch.
        branch: String,
        /// The conflicting files, relative to the repository.
        files: Vec<String>,
    },
    /// The results of the step's dependencies do not merge into one starting point.
    #[error(
        "the results of step `{step}`'s dependencies {} conflict in {}",
        dependencies.iter().map(|d| format!("`{d}`")).collect::<Vec<_>>().join(", "),
        files.join(", ")
    )]
    DependenciesConflict {
        /// The step that was to start.
        step: StepId,
        /// The dependencies merged so far, the one that conflicted last.
        dependencies: Vec<StepId>,
        /// The conflicting files, relative to the repository.
        files: Vec<String>,
    },
    /// A git command failed.
    #[error("{0}")]
    Git(String),
}

/// A kept worktree, for `exec show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeptWorktree {
    /// The step.
    pub step: StepId,
    /// Its branch.
    pub branch: String,
    /// Where it is checked out.
    pub path: PathBuf,
}

/// How [`StepWorkspaces::accept`] brought the result into the checked-out branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum Merged {
    /// The branch was fast-forwarded to the result.
    FastForward {
        /// The new commit.
        commit: String,
    },
    /// A merge commit naming the execution was made.
    MergeCommit {
        /// The merge commit.
        commit: String,
    },
    /// The branch already held the result.
    UpToDate {
        /// The checked-out commit.
        commit: String,
    },
}

/// How the execution's isolated workspaces ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceEnd {
    /// Every step completed: the step worktrees, branches and result refs go, the integration
    /// branch stays.
    Completed,
    /// Failed or stopped: everything is kept for inspection.
    Kept,
}

/// Gives isolated steps their own checkout and merges their results. Every operation is
/// idempotent: after a `kill -9` the runner calls it again and it reuses or re-creates what it
/// finds, so nothing leaks.
#[async_trait]
pub trait StepWorkspaces: Send + Sync + std::fmt::Debug {
    /// Prepares a fresh checkout for an attempt of `step` and returns the directory it runs in:
    /// the execution's base commit with the results of `after` (its direct dependencies, in
    /// plan order; see [`worktree_dependencies`]) merged in. After a conflict (its own merge,
    /// or its dependencies') the next attempt starts from the integration branch instead,
    /// which holds what it conflicted with.
    ///
    /// # Errors
    /// [`WorkspaceError::DependenciesConflict`] when the dependencies' results conflict.
    async fn prepare(
        &self,
        execution: ExecutionId,
        step: &StepId,
        after: &[StepId],
    ) -> Result<PathBuf, WorkspaceError>;

    /// Commits what the attempt changed on its branch, merges the branch into the integration
    /// branch and keeps the result addressable for the steps that depend on it. A conflict
    /// leaves the integration branch as it was.
    async fn integrate(
        &self,
        execution: ExecutionId,
        step: &StepId,
        attempt: u32,
    ) -> Result<(), WorkspaceError>;

    /// The execution ended: removes or keeps its worktrees.
    async fn end(&self, execution: ExecutionId, end: WorkspaceEnd) -> Result<(), WorkspaceError>;

    /// The worktrees kept for `execution`.
    async fn kept(&self, execution: ExecutionId) -> Result<Vec<KeptWorktree>, WorkspaceError>;

    /// The integration branch of `execution`.
    fn branch(&self, execution: ExecutionId) -> String;

    /// The checkout of `execution`'s integration branch, clean at its tip, where the plan's
    /// checks run on the integrated result; `None` when no step of it was merged yet (the
    /// branch does not exist). By default `None`.
    async fn integrated(&self, execution: ExecutionId) -> Result<Option<PathBuf>, WorkspaceError> {
        let _ = execution;
        Ok(None)
    }

    /// The id of the git tree at the tip of the integration branch (the execution's result),
    /// or `None` when it has no branch.
    async fn result_tree(&self, execution: ExecutionId) -> Result<Option<String>, WorkspaceError> {
        let _ = execution;
        Ok(None)
    }

    /// The executions that have an integration branch (a result, accepted or not), in one
    /// look; `None` when the implementation cannot tell (ask [`Self::result_tree`] each).
    async fn with_results(&self) -> Option<Vec<ExecutionId>> {
        None
    }

    /// The unified diff of what accepting the result brings into the checked-out branch
    /// (from their merge base to the integration branch), without colour.
    async fn result_patch(&self, execution: ExecutionId) -> Result<String, WorkspaceError> {
        Err(WorkspaceError::Git(format!(
            "execution {execution} has no result to show"
        )))
    }

    /// Merges the integration branch into the checked-out branch, only if its tree is still
    /// `tree`: a fast-forward, or a merge commit with `message`. A dirty working tree, a
    /// detached `HEAD`, a changed result or a conflict is refused and changes nothing.
    async fn accept(
        &self,
        execution: ExecutionId,
        tree: &str,
        message: &str,
    ) -> Result<Merged, WorkspaceError> {
        let _ = (tree, message);
        Err(WorkspaceError::Git(format!(
            "execution {execution} has no result to accept"
        )))
    }

    /// Removes every branch, worktree and ref of the execution (its recorded step diffs stay);
    /// returns the branches removed.
    async fn discard(&self, execution: ExecutionId) -> Result<Vec<String>, WorkspaceError> {
        Err(WorkspaceError::Git(format!(
            "execution {execution} has nothing to discard"
        )))
    }

    /// Workspace tools rooted at `dir` (a step's worktree), for model agents: the same grants
    /// as the project's. `None`: no workspace tools are offered.
    fn tools_at(&self, dir: &std::path::Path) -> Option<std::sync::Arc<dyn ToolHost>> {
        let _ = dir;
        None
    }
}
