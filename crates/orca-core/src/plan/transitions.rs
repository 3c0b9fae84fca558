//! The transitions of a plan before approval: a draft edited and submitted, a proposal
//! approved, sent back for changes or rejected. Each consumes the old stage.

use std::collections::BTreeSet;

use time::OffsetDateTime;

use crate::plan::PlanCommon;
use crate::{
    AgentId, Approval, ApprovedPlan, BuilderError, DraftPlan, FormatVersion, PlanContent,
    PlanEvent, PlanId, ProposalPlan, RejectedPlan, Rejection, Step, StepId, StepPatch,
    SubmitRejected,
};

impl DraftPlan {
    /// A new, empty draft.
    #[must_use]
    pub fn new(id: PlanId, created_at: OffsetDateTime) -> Self {
        Self::with_content(id, created_at, PlanContent::default())
    }

    /// A draft holding some content already (e.g. from a plan document).
    #[must_use]
    pub fn with_content(id: PlanId, created_at: OffsetDateTime, content: PlanContent) -> Self {
        Self {
            common: PlanCommon {
                format_version: FormatVersion,
                id,
                created_at,
                supersedes: None,
                history: Vec::new(),
                requested_by: None,
                content,
            },
        }
    }

    /// Marks this draft as the replacement of another plan (after a failed execution).
    #[must_use]
    pub const fn superseding(mut self, previous: PlanId) -> Self {
        self.common.supersedes = Some(previous);
        self
    }

    /// Sets the goal.
    pub fn set_goal(&mut self, goal: impl Into<String>) {
        self.common.content.goal = goal.into();
    }

    /// Sets or clears the summary.
    pub fn set_summary(&mut self, summary: Option<String>) {
        self.common.content.summary = summary;
    }

    /// Replaces the assumptions.
    pub fn set_assumptions(&mut self, items: Vec<String>) {
        self.common.content.assumptions = items;
    }

    /// Replaces the risks.
    pub fn set_risks(&mut self, items: Vec<String>) {
        self.common.content.risks = items;
    }

    /// Replaces the verification list.
    pub fn set_verification(&mut self, items: Vec<String>) {
        self.common.content.verification = items;
    }

    /// Replaces the plan's checks (run on the integrated result once every step completed).
    pub fn set_checks(&mut self, checks: Vec<crate::check::Check>) {
        self.common.content.checks = checks;
    }

    /// Adds a step at `position` (0 = first), or at the end.
    ///
    /// # Errors
    ///
    /// A duplicate step id, or a position past the end. The draft is unchanged.
    pub fn add_step(&mut self, step: Step, position: Option<usize>) -> Result<(), BuilderError> {
        if self.common.content.position(&step.id).is_some() {
            return Err(BuilderError::DuplicateStep(step.id));
        }
        let len = self.common.content.steps.len();
        let index = position.unwrap_or(len);
        if index > len {
            return Err(BuilderError::IndexOutOfRange { index, len });
        }
        self.common.content.steps.insert(index, step);
        Ok(())
    }

    /// Changes some fields of a step.
    ///
    /// # Errors
    ///
    /// No step with this id. The draft is unchanged.
    pub fn update_step(&mut self, id: &StepId, patch: StepPatch) -> Result<(), BuilderError> {
        let step = self
            .common
            .content
            .steps
            .iter_mut()
            .find(|s| &s.id == id)
            .ok_or_else(|| BuilderError::UnknownStep(id.clone()))?;
        let StepPatch {
            agent,
            description,
            command,
            depends_on,
            locks,
            writes,
            assumptions,
            risks,
            verification,
            checks,
            max_attempts,
            timeout_secs,
            env,
            isolation,
            budget,
        } = patch;
        replace_if_given(&mut step.agent, agent);
        replace_if_given(&mut step.description, description);
        replace_if_given(&mut step.command, command);
        replace_if_given(&mut step.depends_on, depends_on);
        replace_if_given(&mut step.locks, locks);
        replace_if_given(&mut step.writes, writes);
        replace_if_given(&mut step.assumptions, assumptions);
        replace_if_given(&mut step.risks, risks);
        replace_if_given(&mut step.verification, verification);
        replace_if_given(&mut step.checks, checks);
        replace_if_given(&mut step.max_attempts, max_attempts);
        replace_if_given(&mut step.timeout_secs, timeout_secs);
        replace_if_given(&mut step.env, env);
        replace_if_given(&mut step.isolation, isolation);
        replace_if_given(&mut step.budget, budget);
        Ok(())
    }

    /// Removes a step and returns it. Steps that named it in `depends_on` keep the name (and
    /// `submit` will report the unknown dependency), so nothing changes silently.
    ///
    /// # Errors
    ///
    /// No step with this id.
    pub fn remove_step(&mut self, id: &StepId) -> Result<Step, BuilderError> {
        let index = self
            .common
            .content
            .position(id)
            .ok_or_else(|| BuilderError::UnknownStep(id.clone()))?;
        Ok(self.common.content.steps.remove(index))
    }

    /// Validates the draft and turns it into an immutable proposal.
    ///
    /// # Errors
    ///
    /// [`SubmitRejected`] with the draft, unchanged, and every problem.
    pub fn submit(
        self,
        known_agents: &BTreeSet<AgentId>,
        at: OffsetDateTime,
    ) -> Result<ProposalPlan, Box<SubmitRejected>> {
        let problems = self.common.content.validate(known_agents);
        if !problems.is_empty() {
            return Err(Box::new(SubmitRejected {
                draft: self,
                problems,
            }));
        }
        Ok(ProposalPlan {
            common: self.common.with_event(PlanEvent::Submitted { at }),
            approvals: None,
        })
    }
}

/// A patch's field: `Some` replaces the step's value, `None` leaves it as is.
fn replace_if_given<T>(field: &mut T, given: Option<T>) {
    if let Some(value) = given {
        *field = value;
    }
}

impl ProposalPlan {
    /// The human approves: the plan becomes immutable and records the digest of its content.
    #[must_use]
    pub fn approve(
        self,
        by: impl Into<String>,
        note: Option<String>,
        at: OffsetDateTime,
    ) -> ApprovedPlan {
        let digest = self.common.content.digest();
        ApprovedPlan {
            common: self.common,
            approval: Approval {
                at,
                by: by.into(),
                note,
                digest,
                policy: None,
            },
        }
    }

    /// The human rejects the plan. Final.
    #[must_use]
    pub fn reject(
        self,
        by: impl Into<String>,
        reason: Option<String>,
        at: OffsetDateTime,
    ) -> RejectedPlan {
        RejectedPlan {
            common: self.common,
            rejection: Rejection {
                at,
                by: by.into(),
                reason,
            },
        }
    }

    /// The human asks for changes: back to a draft, the feedback kept in the history.
    #[must_use]
    pub fn request_changes(
        self,
        by: impl Into<String>,
        feedback: impl Into<String>,
        at: OffsetDateTime,
    ) -> DraftPlan {
        DraftPlan {
            common: self.common.with_event(PlanEvent::ChangesRequested {
                at,
                by: by.into(),
                feedback: feedback.into(),
            }),
        }
    }
}
