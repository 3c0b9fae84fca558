//! The refs that keep an execution's starting points addressable (ADR 0017), outside
//! `refs/heads` so they never show as branches:
//!
//! ```text
//! refs/orca/<exec>/base              the execution's base commit (written before orca/<exec>)
//! refs/orca/<exec>/result/<step>     a completed step's result: its branch's final commit
//! refs/orca/<exec>/start/<step>      where the step's current attempt started
//! refs/orca/<exec>/conflict/<step>   its last attempt conflicted: the next starts from orca/<exec>
//! ```
//!
//! git writes a ref through a lock file and a rename, so after `kill -9` each one is either
//! there or not: a missing base is taken again (from the branch if it exists, else `HEAD`), a
//! missing result is recovered from the step's merge commit on the integration branch.

use orca_core::{ExecutionId, StepId, WorkspaceError};

use super::GitWorktrees;
use super::git::git;

/// The per-step refs.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    /// A completed step's result.
    Result,
    /// Where the current attempt started.
    Start,
    /// The last attempt conflicted.
    Conflict,
}

/// The ref of `kind` for `step`.
pub(super) fn step_ref(execution: ExecutionId, kind: Kind, step: &StepId) -> String {
    let dir = match kind {
        Kind::Result => "result",
        Kind::Start => "start",
        Kind::Conflict => "conflict",
    };
    format!("refs/orca/{execution}/{dir}/{step}")
}

/// The execution's base commit.
pub(super) fn base_ref(execution: ExecutionId) -> String {
    format!("refs/orca/{execution}/base")
}

/// Every ref of the execution starts with this.
pub(super) fn prefix(execution: ExecutionId) -> String {
    format!("refs/orca/{execution}/")
}

/// The subject of the commit that merges `step` into the integration branch.
pub(super) fn merge_subject(step: &StepId) -> String {
    format!("orca: merge step {step}")
}

impl GitWorktrees {
    /// The commit `rev` names, if any.
    pub(super) async fn commit_of(&self, rev: &str) -> Option<String> {
        git(
            &self.top,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{rev}^{{commit}}"),
            ],
        )
        .await
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
    }

    pub(super) async fn set_ref(&self, name: &str, commit: &str) -> Result<(), WorkspaceError> {
        git(&self.top, &["update-ref", name, commit])
            .await
            .map(drop)
    }

    pub(super) async fn delete_ref(&self, name: &str) -> Result<(), WorkspaceError> {
        if self.commit_of(name).await.is_some() {
            git(&self.top, &["update-ref", "-d", name]).await?;
        }
        Ok(())
    }

    /// The execution's base commit, recorded the first time it is asked for: the integration
    /// branch's tip if the branch already exists (an execution started before base refs, or a
    /// replan's, which starts where the plan it replaces ended), else `HEAD`.
    pub(super) async fn ensure_base(
        &self,
        execution: ExecutionId,
    ) -> Result<String, WorkspaceError> {
        let name = base_ref(execution);
        if let Some(base) = self.commit_of(&name).await {
            return Ok(base);
        }
        let from = match self.commit_of(&self.branch_ref(execution)).await {
            Some(tip) => tip,
            None => self.commit_of("HEAD").await.ok_or_else(|| {
                WorkspaceError::Git(format!(
                    "{} has no commit yet: commit once before running isolated steps",
                    self.top.display()
                ))
            })?,
        };
        self.set_ref(&name, &from).await?;
        Ok(from)
    }

    /// The result of a completed step, or `None` if none can be found. A result
    /// whose ref is missing (removed behind orca's back, or merged by an older orca) is found
    /// again as the second parent of the step's merge commit on the integration branch, and
    /// its ref re-created.
    pub(super) async fn result_of(
        &self,
        execution: ExecutionId,
        step: &StepId,
    ) -> Result<Option<String>, WorkspaceError> {
        let name = step_ref(execution, Kind::Result, step);
        if let Some(result) = self.commit_of(&name).await {
            return Ok(Some(result));
        }
        let branch = self.branch_ref(execution);
        if self.commit_of(&branch).await.is_none() {
            return Ok(None);
        }
        // Only this execution's merges (a replan's branch starts on the previous plan's).
        let range = match self.commit_of(&base_ref(execution)).await {
            Some(base) => format!("{base}..{branch}"),
            None => branch,
        };
        let log = git(
            &self.top,
            &["log", "--first-parent", "--format=%P%x09%s", &range],
        )
        .await?;
        let subject = merge_subject(step);
        let found = log.lines().find_map(|line| {
            let (parents, s) = line.split_once('\t')?;
            (s == subject)
                .then(|| parents.split_whitespace().nth(1).map(str::to_owned))
                .flatten()
        });
        if let Some(result) = &found {
            self.set_ref(&name, result).await?;
        }
        Ok(found)
    }

    /// Removes every ref of the execution; returns how many there were.
    pub(super) async fn delete_refs(
        &self,
        execution: ExecutionId,
    ) -> Result<usize, WorkspaceError> {
        let names = self.refs(execution).await?;
        for name in &names {
            git(&self.top, &["update-ref", "-d", name]).await?;
        }
        Ok(names.len())
    }

    /// The refs orca keeps for `execution` (`refs/orca/<exec>/…`), sorted.
    ///
    /// # Errors
    /// A git failure.
    pub async fn refs(&self, execution: ExecutionId) -> Result<Vec<String>, WorkspaceError> {
        let out = git(
            &self.top,
            &["for-each-ref", "--format=%(refname)", &prefix(execution)],
        )
        .await?;
        Ok(out
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect())
    }
}
