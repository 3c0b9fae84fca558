//! The transitions of a plan before approval: a draft edited and submitted, a proposal
//! approved, sent back for changes or rejected. Each consumes the old stage.

#[allow(
    clippy::wildcard_imports,
    reason = "the transitions share the plan module's imports and types"
)]
use super::*;

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
            format_version: FormatVersion,
            id,
            created_at,
            supersedes: None,
            history: Vec::new(),
            content,
        }
    }

    /// Marks this draft as the replacement of another plan (after a failed execution).
    #[must_use]
    pub const fn superseding(mut self, previous: PlanId) -> Self {
        self.supersedes = Some(previous);
        self
    }

    /// Sets the goal.
    pub fn set_goal(&mut self, goal: impl Into<String>) {
        self.content.goal = goal.into();
    }

    /// Sets or clears the summary.
    pub fn set_summary(&mut self, summary: Option<String>) {
        self.content.summary = summary;
    }

    /// Replaces the assumptions.
    pub fn set_assumptions(&mut self, items: Vec<String>) {
        self.content.assumptions = items;
    }

    /// Replaces the risks.
    pub fn set_risks(&mut self, items: Vec<String>) {
        self.content.risks = items;
    }

    /// Replaces the verification list.
    pub fn set_verification(&mut self, items: Vec<String>) {
        self.content.verification = items;
    }

    /// Adds a step at `position` (0 = first), or at the end.
    ///
    /// # Errors
    ///
    /// A duplicate step id, or a position past the end. The draft is unchanged.
    pub fn add_step(&mut self, step: Step, position: Option<usize>) -> Result<(), BuilderError> {
        if self.content.position(&step.id).is_some() {
            return Err(BuilderError::DuplicateStep(step.id));
        }
        let len = self.content.steps.len();
        let index = position.unwrap_or(len);
        if index > len {
            return Err(BuilderError::IndexOutOfRange { index, len });
        }
        self.content.steps.insert(index, step);
        Ok(())
    }

    /// Changes some fields of a step.
    ///
    /// # Errors
    ///
    /// No step with this id. The draft is unchanged.
    pub fn update_step(&mut self, id: &StepId, patch: StepPatch) -> Result<(), BuilderError> {
        let step = self
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
            max_attempts,
            timeout_secs,
            env,
            isolation,
            budget,
        } = patch;
        if let Some(v) = agent {
            step.agent = v;
        }
        if let Some(v) = description {
            step.description = v;
        }
        if let Some(v) = command {
            step.command = v;
        }
        if let Some(v) = depends_on {
            step.depends_on = v;
        }
        if let Some(v) = locks {
            step.locks = v;
        }
        if let Some(v) = writes {
            step.writes = v;
        }
        if let Some(v) = assumptions {
            step.assumptions = v;
        }
        if let Some(v) = risks {
            step.risks = v;
        }
        if let Some(v) = verification {
            step.verification = v;
        }
        if let Some(v) = max_attempts {
            step.max_attempts = v;
        }
        if let Some(v) = timeout_secs {
            step.timeout_secs = v;
        }
        if let Some(v) = env {
            step.env = v;
        }
        if let Some(v) = isolation {
            step.isolation = v;
        }
        if let Some(v) = budget {
            step.budget = v;
        }
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
            .content
            .position(id)
            .ok_or_else(|| BuilderError::UnknownStep(id.clone()))?;
        Ok(self.content.steps.remove(index))
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
        let problems = self.content.validate(known_agents);
        if !problems.is_empty() {
            return Err(Box::new(SubmitRejected {
                draft: self,
                problems,
            }));
        }
        let Self {
            format_version,
            id,
            created_at,
            supersedes,
            mut history,
            content,
        } = self;
        history.push(PlanEvent::Submitted { at });
        Ok(ProposalPlan {
            format_version,
            id,
            created_at,
            supersedes,
            history,
            content,
        })
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
        let digest = self.content.digest();
        let Self {
            format_version,
            id,
            created_at,
            supersedes,
            history,
            content,
        } = self;
        ApprovedPlan {
            format_version,
            id,
            created_at,
            supersedes,
            history,
            content,
            approval: Approval {
                at,
                by: by.into(),
                note,
                digest,
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
        let Self {
            format_version,
            id,
            created_at,
            supersedes,
            history,
            content,
        } = self;
        RejectedPlan {
            format_version,
            id,
            created_at,
            supersedes,
            history,
            content,
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
        let Self {
            format_version,
            id,
            created_at,
            supersedes,
            mut history,
            content,
        } = self;
        history.push(PlanEvent::ChangesRequested {
            at,
            by: by.into(),
            feedback: feedback.into(),
        });
        DraftPlan {
            format_version,
            id,
            created_at,
            supersedes,
            history,
            content,
        }
    }
}
