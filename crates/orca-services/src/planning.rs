//! `PlanningService`: drafts, builder operations, submit, approval decisions, listing.
//!
//! Every change is a compare-and-swap on the plan's revision and leaves an entry in the plan's
//! audit log. Nothing here can be reached by an agent except through the plan builder tools,
//! and no tool approves a plan: `approve` / `reject` / `request_changes` are the human's.

use orca_core::AuditKind;
use std::collections::BTreeSet;
use std::sync::Arc;

use orca_core::{
    AgentId, ApprovedPlan, Digest, DraftPlan, Plan, PlanContent, PlanId, ProposalPlan, Step,
    StepId, StepPatch,
};
use orca_store::audit::NewAuditEntry;
use orca_store::{AuditLogId, Listing, PlanSummary, Store, Versioned};
use serde_json::json;
use time::OffsetDateTime;
use tracing::instrument;

use crate::error::{Result, ServiceError};

/// A builder operation on a draft.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DraftEdit {
    /// Set the goal.
    SetGoal(String),
    /// Set or clear the summary.
    SetSummary(Option<String>),
    /// Replace the assumptions.
    SetAssumptions(Vec<String>),
    /// Replace the risks.
    SetRisks(Vec<String>),
    /// Replace the verification list.
    SetVerification(Vec<String>),
    /// Replace the plan's checks (run on the integrated result).
    SetChecks(Vec<orca_core::Check>),
    /// Add a step at a position (or the end).
    AddStep {
        /// The step.
        step: Box<Step>,
        /// 0-based position; `None` = the end.
        position: Option<usize>,
    },
    /// Change some fields of a step.
    UpdateStep {
        /// The step.
        id: StepId,
        /// The changes.
        patch: Box<StepPatch>,
    },
    /// Remove a step.
    RemoveStep(StepId),
}

impl DraftEdit {
    const fn name(&self) -> &'static str {
        match self {
            Self::SetGoal(_) => "set_goal",
            Self::SetSummary(_) => "set_summary",
            Self::SetAssumptions(_) => "set_assumptions",
            Self::SetRisks(_) => "set_risks",
            Self::SetVerification(_) => "set_verification",
            Self::SetChecks(_) => "set_checks",
            Self::AddStep { .. } => "add_step",
            Self::UpdateStep { .. } => "update_step",
            Self::RemoveStep(_) => "remove_step",
        }
    }
}

/// Plans: what to do, and the human's decisions about it.
#[derive(Clone)]
pub struct PlanningService {
    store: Arc<dyn Store>,
    known_agents: Arc<BTreeSet<AgentId>>,
    /// The approval policy plans are decided under, if one is configured.
    policy: Option<Arc<crate::policy::PolicyContext>>,
}

impl std::fmt::Debug for PlanningService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanningService")
            .field("known_agents", &self.known_agents)
            .finish_non_exhaustive()
    }
}

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

impl PlanningService {
    /// A service over a store; `known_agents` are the agents plans may name.
    #[must_use]
    pub fn new(store: Arc<dyn Store>, known_agents: BTreeSet<AgentId>) -> Self {
        Self {
            store,
            known_agents: Arc::new(known_agents),
            policy: None,
        }
    }

    /// Decides plans under an approval policy: approvals are counted by it, plans record
    /// who asked for them. `None`: one approval by the user's key, as without a policy.
    #[must_use]
    pub fn with_policy(mut self, policy: Option<Arc<crate::policy::PolicyContext>>) -> Self {
        self.policy = policy;
        self
    }

    /// The approval policy, if one is configured.
    #[must_use]
    pub fn policy(&self) -> Option<&crate::policy::PolicyContext> {
        self.policy.as_deref()
    }

    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The agents plans may name.
    #[must_use]
    pub fn known_agents(&self) -> &BTreeSet<AgentId> {
        &self.known_agents
    }

    pub(crate) async fn audit(
        &self,
        plan: PlanId,
        kind: AuditKind,
        data: serde_json::Value,
    ) -> Result<()> {
        self.store
            .append(
                AuditLogId::Plan { plan_id: plan },
                NewAuditEntry::new(kind, data),
            )
            .await?;
        Ok(())
    }

    /// Writes a stored plan's next stage (compare-and-swap on `revision`), then its entry in the
    /// plan's log, and returns the stage: every transition of a stored plan goes through here.
    /// After the final decision (approved, rejected) the plan's log is sealed: its lifecycle is
    /// over (executions go to its run register).
    pub(crate) async fn record<P: Clone + Into<Plan>>(
        &self,
        stage: P,
        revision: orca_store::Revision,
        kind: AuditKind,
        data: serde_json::Value,
    ) -> Result<P> {
        let plan: Plan = stage.clone().into();
        self.store.update_plan(&plan, revision).await?;
        self.audit(plan.id(), kind, data).await?;
        if matches!(plan, Plan::Approved(_) | Plan::Rejected(_)) {
            self.store
                .seal(AuditLogId::Plan { plan_id: plan.id() })
                .await?;
        }
        Ok(stage)
    }

    /// Creates an empty draft (optionally replacing a plan after a failed execution).
    #[instrument(skip(self))]
    pub async fn create_draft(
        &self,
        goal: Option<String>,
        supersedes: Option<PlanId>,
    ) -> Result<DraftPlan> {
        let mut draft = DraftPlan::new(PlanId::new(), now());
        if let Some(requester) = self.requester() {
            draft = draft.with_requester(requester);
        }
        if let Some(goal) = goal {
            draft.set_goal(goal);
        }
        if let Some(previous) = supersedes {
            self.plan(previous).await?;
            draft = draft.superseding(previous);
        }
        self.store.create_plan(&Plan::Draft(draft.clone())).await?;
        if let Some(previous) = supersedes {
            self.superseded(previous, draft.id()).await?;
        }
        let mut entry =
            json!({ "stage": "draft", "goal": draft.content().goal, "supersedes": supersedes });
        with_requester(&mut entry, draft.requested_by());
        self.audit(draft.id(), AuditKind::PlanCreated, entry)
            .await?;
        Ok(draft)
    }

    /// Applies a builder operation to a draft.
    ///
    /// # Errors
    ///
    /// The plan is not a draft, the operation is refused (duplicate id, index out of range,
    /// unknown step), or a concurrent writer changed it first.
    #[instrument(skip(self, edit), fields(edit = edit.name()))]
    pub async fn edit(&self, id: PlanId, edit: DraftEdit) -> Result<DraftPlan> {
        let Versioned { value, revision } = self.store.plan(id).await?;
        let Plan::Draft(mut draft) = value else {
            return Err(wrong_stage(&value, "draft"));
        };
        let name = edit.name();
        let detail = match &edit {
            DraftEdit::AddStep { step, .. } => json!({ "step": step.id }),
            DraftEdit::UpdateStep { id, .. } | DraftEdit::RemoveStep(id) => json!({ "step": id }),
            _ => json!({}),
        };
        match edit {
            DraftEdit::SetGoal(goal) => draft.set_goal(goal),
            DraftEdit::SetSummary(summary) => draft.set_summary(summary),
            DraftEdit::SetAssumptions(items) => draft.set_assumptions(items),
            DraftEdit::SetRisks(items) => draft.set_risks(items),
            DraftEdit::SetVerification(items) => draft.set_verification(items),
            DraftEdit::SetChecks(checks) => draft.set_checks(checks),
            DraftEdit::AddStep { step, position } => draft
                .add_step(*step, position)
                .map_err(|e| ServiceError::BadInput(e.to_string()))?,
            DraftEdit::UpdateStep { id, patch } => draft
                .update_step(&id, *patch)
                .map_err(|e| ServiceError::BadInput(e.to_string()))?,
            DraftEdit::RemoveStep(id) => {
                draft
                    .remove_step(&id)
                    .map_err(|e| ServiceError::BadInput(e.to_string()))?;
            }
        }
        let detail = json!({ "operation": name, "detail": detail });
        self.record(draft, revision, AuditKind::PlanEdited, detail)
            .await
    }

    /// Validates a draft and turns it into a proposal.
    ///
    /// # Errors
    ///
    /// [`ServiceError::Invalid`] with every problem (the draft stays as it was), or the plan is
    /// not a draft.
    #[instrument(skip(self))]
    pub async fn submit(&self, id: PlanId) -> Result<ProposalPlan> {
        let Versioned { value, revision } = self.store.plan(id).await?;
        let Plan::Draft(draft) = value else {
            return Err(wrong_stage(&value, "draft"));
        };
        match draft.submit(&self.known_agents, now()) {
            Ok(proposal) => {
                let entry = json!({ "steps": proposal.content().steps.len(), "digest": proposal.content().digest() });
                self.record(proposal, revision, AuditKind::PlanSubmitted, entry)
                    .await
            }
            Err(rejected) => {
                let problems = rejected.problems;
                self.audit(
                    id,
                    AuditKind::PlanSubmitRefused,
                    json!({ "problems": problems.iter().map(ToString::to_string).collect::<Vec<_>>() }),
                )
                .await?;
                Err(ServiceError::Invalid(problems))
            }
        }
    }

    /// Creates a proposal from a plan document. Invalid content stores nothing.
    ///
    /// # Errors
    ///
    /// [`ServiceError::Invalid`] with every problem.
    #[instrument(skip(self, content))]
    pub async fn create_proposal(
        &self,
        content: PlanContent,
        supersedes: Option<PlanId>,
    ) -> Result<ProposalPlan> {
        let problems = content.validate(&self.known_agents);
        if !problems.is_empty() {
            return Err(ServiceError::Invalid(problems));
        }
        if let Some(previous) = supersedes {
            self.plan(previous).await?;
        }
        let at = now();
        let mut draft = DraftPlan::with_content(PlanId::new(), at, content);
        if let Some(requester) = self.requester() {
            draft = draft.with_requester(requester);
        }
        if let Some(previous) = supersedes {
            draft = draft.superseding(previous);
        }
        let proposal = draft
            .submit(&self.known_agents, at)
            .map_err(|rejected| ServiceError::Invalid(rejected.problems))?;
        self.store
            .create_plan(&Plan::Proposal(proposal.clone()))
            .await?;
        if let Some(previous) = supersedes {
            self.superseded(previous, proposal.id()).await?;
        }
        let mut entry = json!({ "stage": "proposal", "goal": proposal.content().goal,
                                "supersedes": supersedes, "digest": proposal.content().digest() });
        with_requester(&mut entry, proposal.requested_by());
        self.audit(proposal.id(), AuditKind::PlanCreated, entry)
            .await?;
        Ok(proposal)
    }

    async fn proposal(&self, id: PlanId) -> Result<(ProposalPlan, orca_store::Revision)> {
        let Versioned { value, revision } = self.store.plan(id).await?;
        match value {
            Plan::Proposal(p) => Ok((p, revision)),
            other => Err(wrong_stage(&other, "proposal")),
        }
    }

    /// The human approves a proposal; the digest of its content is recorded. Where the human
    /// was shown the plan before deciding (a page, a prompt, a form), use
    /// [`PlanningService::approve_shown`]: this one approves whatever the proposal holds now.
    #[instrument(skip(self, note))]
    pub async fn approve(
        &self,
        id: PlanId,
        by: &str,
        note: Option<String>,
    ) -> Result<ApprovedPlan> {
        self.approve_checked(id, by, note, None).await
    }

    /// The human approves the proposal they were shown, whose content had the digest `shown`:
    /// approved only if the proposal still has exactly that content. The check and the write
    /// are one compare-and-swap on the plan's revision, so content changed after it was shown
    /// (a concurrent request for changes and a new submission, an edited plan file) is never
    /// approved.
    ///
    /// # Errors
    ///
    /// [`ServiceError::ContentChanged`] (nothing written) when the content's digest is not
    /// `shown`; otherwise as [`PlanningService::approve`].
    #[instrument(skip(self, note))]
    pub async fn approve_shown(
        &self,
        id: PlanId,
        by: &str,
        note: Option<String>,
        shown: &Digest,
    ) -> Result<ApprovedPlan> {
        self.approve_checked(id, by, note, Some(shown)).await
    }

    async fn approve_checked(
        &self,
        id: PlanId,
        by: &str,
        note: Option<String>,
        shown: Option<&Digest>,
    ) -> Result<ApprovedPlan> {
        if self.policy.is_some() {
            return match self.approve_as_approver(id, note, shown).await? {
                crate::policy::PolicyDecision::Approved(plan, _) => Ok(plan),
                crate::policy::PolicyDecision::Pending(_, tally) => {
                    Err(ServiceError::AwaitingApprovals {
                        plan: id,
                        needs: crate::policy::summaries(&tally),
                    })
                }
            };
        }
        let (proposal, revision) = self.proposal(id).await?;
        if let Some(shown) = shown {
            let now = proposal.content().digest();
            if now != *shown {
                return Err(ServiceError::ContentChanged {
                    plan: id,
                    shown: shown.clone(),
                    now,
                });
            }
        }
        let approved = proposal.approve(by, note, now());
        let entry = crate::approval::approval_entry(self.store.as_ref(), &approved);
        let recorded = self
            .record(approved, revision, AuditKind::PlanApproved, entry)
            .await;
        self.unless_decided(id, recorded).await
    }

    /// The human rejects a proposal.
    #[instrument(skip(self, reason))]
    pub async fn reject(&self, id: PlanId, by: &str, reason: Option<String>) -> Result<Plan> {
        self.reject_recorded(id, by, reason, true).await
    }

    /// Someone who is not this process's user rejects a proposal (a web access token): it is
    /// recorded as `by`, never under the name of the approver whose key this process holds.
    #[instrument(skip(self, reason))]
    pub async fn reject_for(&self, id: PlanId, by: &str, reason: Option<String>) -> Result<Plan> {
        self.reject_recorded(id, by, reason, false).await
    }

    async fn reject_recorded(
        &self,
        id: PlanId,
        by: &str,
        reason: Option<String>,
        as_me: bool,
    ) -> Result<Plan> {
        let (proposal, revision) = self.proposal(id).await?;
        // Under a policy, a rejection by one of its approvers is recorded under their name:
        // any required approver's rejection rejects.
        let approver = self.policy().filter(|_| as_me).and_then(|ctx| {
            let key = self.store.authority().public_key()?;
            Some((
                ctx.signed.approver(&key)?.to_string(),
                ctx.signed.digest.clone(),
            ))
        });
        let by = approver.as_ref().map_or(by, |(name, _)| name.as_str());
        let rejected = Plan::Rejected(proposal.reject(by, reason.clone(), now()));
        let entry = match &approver {
            None => json!({ "by": by, "reason": reason }),
            Some((_, policy)) => json!({ "by": by, "reason": reason, "policy": policy }),
        };
        let recorded = self
            .record(rejected, revision, AuditKind::PlanRejected, entry)
            .await;
        self.unless_decided(id, recorded).await
    }

    /// A decision that lost a race (the proposal changed between reading and writing it) is
    /// told what happened: another human decided first, so the plan's stage — "approved",
    /// "rejected" — is the error, not a bare revision conflict.
    pub(crate) async fn unless_decided<T>(&self, id: PlanId, recorded: Result<T>) -> Result<T> {
        match recorded {
            Err(ServiceError::Store(orca_store::StoreError::Conflict { .. })) => {
                match self.store.plan(id).await {
                    Ok(Versioned { value, .. }) if !matches!(value, Plan::Proposal(_)) => {
                        Err(wrong_stage(&value, "proposal"))
                    }
                    _ => recorded,
                }
            }
            other => other,
        }
    }

    /// The human asks for changes: the proposal goes back to draft with the feedback.
    #[instrument(skip(self, feedback))]
    pub async fn request_changes(&self, id: PlanId, by: &str, feedback: &str) -> Result<DraftPlan> {
        if feedback.trim().is_empty() {
            return Err(ServiceError::BadInput(
                "feedback is empty: say what should change".to_owned(),
            ));
        }
        let (proposal, revision) = self.proposal(id).await?;
        let draft = proposal.request_changes(by, feedback, now());
        let entry = json!({ "by": by, "feedback": feedback });
        self.record(draft, revision, AuditKind::PlanChangesRequested, entry)
            .await
    }

    /// A plan.
    pub async fn plan(&self, id: PlanId) -> Result<Plan> {
        Ok(self.store.plan(id).await?.value)
    }

    /// Records in `previous`'s run register that `next` supersedes it (the old plan's own log is
    /// sealed).
    async fn superseded(&self, previous: PlanId, next: PlanId) -> Result<()> {
        self.store
            .append(
                AuditLogId::Runs { plan_id: previous },
                NewAuditEntry::new(AuditKind::PlanSuperseded, json!({ "by_plan": next })),
            )
            .await?;
        Ok(())
    }

    /// An approved plan whose content still matches its approval digest, and whose approval
    /// is in its plan log, signed by a trusted key ([`crate::approval::check`]). A refusal is
    /// recorded in the plan's run register.
    ///
    /// # Errors
    ///
    /// Not approved, changed after approval, or the approval does not hold
    /// ([`ServiceError::ApprovalRefused`]).
    pub async fn approved(&self, id: PlanId) -> Result<ApprovedPlan> {
        let plan = match self.plan(id).await? {
            Plan::Approved(p) => p,
            other => return Err(wrong_stage(&other, "approved")),
        };
        if let Err(problem) = crate::approval::check(self.store.as_ref(), &plan).await? {
            // Best effort: the refusal itself must not be hidden by a failing register.
            let _ = self
                .store
                .append(
                    AuditLogId::Runs { plan_id: id },
                    NewAuditEntry::new(
                        AuditKind::RunRefused,
                        json!({ "entry": problem.entry, "problem": problem.problem }),
                    ),
                )
                .await;
            return Err(ServiceError::ApprovalRefused(problem));
        }
        Ok(plan)
    }

    /// Every plan, newest first, with the files that could not be read.
    pub async fn list(&self) -> Result<Listing<PlanSummary>> {
        Ok(self.store.list_plans().await?)
    }

    /// Resolves a full plan id, a unique prefix of one (`plan_019a`, or `019a`) or a short id
    /// (`plan_7c41d09e`, its last digits).
    ///
    /// # Errors
    ///
    /// [`ServiceError::UnknownId`] when nothing or more than one plan matches.
    pub async fn resolve(&self, text: &str) -> Result<PlanId> {
        if let Ok(id) = text.parse::<PlanId>() {
            return Ok(id);
        }
        // A text that can be no id (`../x`) is refused before anything is listed.
        check_prefix(text, PlanId::PREFIX, "plan")?;
        let listing = self.list().await?;
        let ids = listing.items.into_iter().map(|s| s.plan_id);
        resolve_prefix(text, PlanId::PREFIX, "plan", ids)
            .map_err(|e| unreadable_match(e, text, PlanId::PREFIX, &listing.problems))
    }
}

/// A prefix that matched no readable record but names one that cannot be read: that record's
/// problem (its file and what is wrong), not "no match".
pub(crate) fn unreadable_match(
    not_found: ServiceError,
    text: &str,
    prefix: &str,
    problems: &[orca_store::ListingProblem],
) -> ServiceError {
    if !matches!(&not_found, ServiceError::UnknownId(m) if m.starts_with("no ")) {
        return not_found;
    }
    let needle = if text.starts_with(prefix) {
        text.to_owned()
    } else {
        format!("{prefix}{text}")
    };
    let named = |location: &str| {
        std::path::Path::new(location)
            .components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with(&needle))
    };
    match problems.iter().find(|p| named(&p.location)) {
        Some(p) => ServiceError::Store(orca_store::StoreError::Corrupt {
            path: std::path::PathBuf::from(&p.location),
            message: format!("`{text}` names a record that cannot be read: {}", p.message),
        }),
        None => not_found,
    }
}

/// Refuses a text that cannot be a prefix of an id shown as `prefix` + uuid.
pub(crate) fn check_prefix(text: &str, prefix: &str, kind: &str) -> Result<()> {
    let valid = !text.is_empty()
        && text.len() <= prefix.len() + 36
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !valid {
        return Err(ServiceError::UnknownId(format!(
            "invalid {kind} id `{}`: expected `{prefix}` followed by a uuid, or a unique prefix of one",
            text.chars().take(80).collect::<String>()
        )));
    }
    Ok(())
}

/// Resolves a unique prefix among ids shown as `prefix` + uuid, or a unique short id (the
/// last digits: see [`crate::short_ids`]).
pub(crate) fn resolve_prefix<I: std::fmt::Display>(
    text: &str,
    prefix: &str,
    kind: &str,
    ids: impl Iterator<Item = I>,
) -> Result<I> {
    check_prefix(text, prefix, kind)?;
    let mut matches: Vec<I> = ids
        .filter(|id| crate::short_ids::names(&id.to_string(), prefix, text))
        .collect();
    if matches.len() > 1 {
        // The candidates, each by its shortest prefix that tells it from the others.
        let all: Vec<String> = matches.iter().map(ToString::to_string).collect();
        let short = crate::short_ids::ShortIds::new(all.iter().cloned());
        let mut names: Vec<String> = all.iter().take(10).map(|id| short.short(id)).collect();
        if all.len() > 10 {
            names.push(format!("and {} more", all.len() - 10));
        }
        return Err(ServiceError::UnknownId(format!(
            "{kind} id `{text}` is ambiguous: it matches {} {kind}s: {}",
            all.len(),
            names.join(", ")
        )));
    }
    matches
        .pop()
        .ok_or_else(|| ServiceError::UnknownId(format!("no {kind} matches `{text}`")))
}

/// Adds who asked for the plan to its `plan.created` entry, when recorded (under a policy).
fn with_requester(entry: &mut serde_json::Value, requester: Option<&orca_core::Requester>) {
    if let (Some(r), Some(obj)) = (requester, entry.as_object_mut()) {
        obj.insert("requested_by".to_owned(), json!(r));
    }
}

pub(crate) fn wrong_stage(plan: &Plan, expected: &'static str) -> ServiceError {
    ServiceError::PlanStage {
        plan: plan.id(),
        stage: plan.stage(),
        expected,
    }
}
