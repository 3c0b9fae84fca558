//! Decisions under an approval policy: an approver's signed approval (the plan is approved when
//! the policy is satisfied), a required approver's rejection, and the timers (reminders,
//! escalation, expiry) the notifier applies.

use std::collections::BTreeSet;

use orca_core::policy::{ApproverName, Outcome, Tally, Verdict, Vote, tally};
use orca_core::{
    ApprovedPlan, AuditKind, Digest, GivenApproval, Plan, PlanId, ProposalPlan, Requester,
};
use orca_store::signing::policy_vote_statement;
use orca_store::{AuditLogId, NewAuditEntry, SignatureRecord, Versioned};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{PolicyContext, SignedPolicy, SignedVote};
use crate::error::{Result, ServiceError};
use crate::planning::PlanningService;

/// What an approver's approval did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum PolicyDecision {
    /// The policy is satisfied: the plan is approved.
    Approved(ApprovedPlan, Tally),
    /// The approval is recorded; the plan needs more.
    Pending(ProposalPlan, Tally),
}

/// Something a timer did to a proposal, for the notifier to send.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimerEvent {
    /// The approvers of `rule` were reminded (the expiry is near).
    Reminded {
        /// The rule.
        rule: String,
        /// Who was reminded.
        approvers: Vec<ApproverName>,
    },
    /// `rule` escalated: `approvers` now count and are asked.
    Escalated {
        /// The rule.
        rule: String,
        /// Who is asked now.
        approvers: Vec<ApproverName>,
    },
    /// The plan was rejected, unanswered, when `rule` expired.
    Expired {
        /// The rule.
        rule: String,
    },
}

impl TimerEvent {
    /// The notifier payload's `event`.
    #[must_use]
    pub const fn event(&self) -> &'static str {
        match self {
            Self::Reminded { .. } => "approval_reminder",
            Self::Escalated { .. } => "approval_escalated",
            Self::Expired { .. } => "approval_expired",
        }
    }
}

impl TimerEvent {
    /// The notifier's JSON for this event of plan `plan` (`event`, the plan, the rule and who
    /// is asked).
    #[must_use]
    pub fn payload(&self, plan: PlanId) -> Value {
        let (rule, approvers, headline) = match self {
            Self::Reminded { rule, approvers } => (
                rule,
                approvers.clone(),
                format!("plan {plan} still needs your approval (rule {rule}); it expires soon"),
            ),
            Self::Escalated { rule, approvers } => (
                rule,
                approvers.clone(),
                format!("plan {plan} needs an approval: it escalated to you (rule {rule})"),
            ),
            Self::Expired { rule } => (
                rule,
                Vec::new(),
                format!("plan {plan} was rejected: nobody approved it in time (rule {rule})"),
            ),
        };
        json!({ "event": self.event(), "plan_id": plan, "rule": rule, "approvers": approvers,
                "headline": headline })
    }
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

/// The votes a proposal holds.
fn votes(proposal: &ProposalPlan) -> Vec<Vote> {
    proposal
        .approvals()
        .map(|p| {
            p.given
                .iter()
                .map(|g| Vote {
                    approver: g.approver.clone(),
                    verdict: Verdict::Approve,
                })
                .collect()
        })
        .unwrap_or_default()
}

fn escalated(proposal: &ProposalPlan) -> BTreeSet<String> {
    proposal
        .approvals()
        .map(|p| p.escalated.iter().cloned().collect())
        .unwrap_or_default()
}

/// The policy text and signature as recorded with a decision (so the check later needs no file).
pub(super) fn policy_record(signed: &SignedPolicy) -> Value {
    json!({ "digest": signed.digest, "text": signed.text, "signature": signed.signature })
}

impl PlanningService {
    fn policy_ctx(&self) -> Result<&PolicyContext> {
        self.policy()
            .ok_or_else(|| ServiceError::BadInput("no approval policy is configured".to_owned()))
    }

    /// Where a proposal stands under the configured policy (`None` without one).
    #[must_use]
    pub fn policy_tally(&self, plan: &Plan) -> Option<Tally> {
        let ctx = self.policy()?;
        let Plan::Proposal(p) = plan else {
            return None;
        };
        Some(self.tally_of(ctx, p, &votes(p)))
    }

    fn tally_of(&self, ctx: &PolicyContext, p: &ProposalPlan, votes: &[Vote]) -> Tally {
        // The surroundings count as this process sees them only if its key is an approver's:
        // it signs the approval that records them. A server recording approvers' own signed
        // votes attests nothing, so every rule that could match counts (ADR 0054).
        let attests = self
            .store()
            .authority()
            .public_key()
            .is_some_and(|k| ctx.signed.approver(&k).is_some());
        let reqs = if attests {
            ctx.around.requirements(&ctx.signed.policy, p.content())
        } else {
            ctx.signed.policy.requirements_unattested(p.content())
        };
        let requester = ctx.signed.requester(p.requested_by());
        tally(&reqs, requester.as_ref(), votes, &escalated(p))
    }

    /// The approver this process signs as.
    fn me(&self, ctx: &PolicyContext) -> Result<ApproverName> {
        let key = self.store().authority().public_key().ok_or_else(|| {
            ServiceError::BadInput("approving under a policy needs your signing key".to_owned())
        })?;
        ctx.signed.approver(&key).cloned().ok_or_else(|| {
            ServiceError::BadInput(format!(
                "your key {key} is not an approver's in the approval policy {} (approvers: {})",
                ctx.signed.digest,
                names(ctx.signed.policy.approvers.keys())
            ))
        })
    }

    /// This process's approver approves the proposal (whose content had the digest `shown`,
    /// if given): a signed `plan.approval.given` entry; when that satisfies the policy, the
    /// plan is approved (`plan.approved`, recording the policy and the signers) and its log
    /// sealed.
    ///
    /// # Errors
    ///
    /// No policy, a key that is no approver's, the requester approving their own plan, an
    /// approver no rule of this plan counts, an approver approving twice, content changed
    /// since it was shown; nothing is written then.
    pub async fn approve_as_approver(
        &self,
        id: PlanId,
        note: Option<String>,
        shown: Option<&Digest>,
    ) -> Result<PolicyDecision> {
        let ctx = self.policy_ctx()?;
        let me = self.me(ctx)?;
        let at = OffsetDateTime::now_utc();
        let authority = self.store().authority();
        self.cast(ctx, id, me, note, shown, at, |statement| {
            authority.sign(statement)
        })
        .await
    }

    /// Records an approval the approver signed on their own machine ([`SignedVote`], from
    /// `orca policy vote`), brought by someone allowed to approve only as `bound` (a web access
    /// token bound to that approver): the same `plan.approval.given` entry as
    /// [`PlanningService::approve_as_approver`], carrying the approver's signature. This
    /// process's key signs nothing.
    ///
    /// # Errors
    ///
    /// As [`PlanningService::approve_as_approver`], and a vote that is not `bound`'s, not for
    /// this plan, this policy or the plan's content now, not signed by the approver's key in
    /// the policy, or older than an hour; nothing is written then.
    pub async fn approve_with_vote(
        &self,
        id: PlanId,
        vote: &SignedVote,
        bound: &ApproverName,
    ) -> Result<PolicyDecision> {
        let ctx = self.policy_ctx()?;
        let at = vote
            .check(id, &ctx.signed, bound, OffsetDateTime::now_utc())
            .map_err(|e| ServiceError::BadInput(format!("plan {id}: {e}; nothing was recorded")))?;
        let signature = vote.signature.clone();
        self.cast(
            ctx,
            id,
            vote.approver.clone(),
            vote.note.clone(),
            Some(&vote.digest),
            at,
            |_| Some(signature),
        )
        .await
        .map_err(|e| match e {
            ServiceError::ContentChanged { shown, now, .. } => ServiceError::BadInput(format!(
                "plan {id}: this signed approval is over the digest {shown}, but the plan's content has the digest {now}; nothing was recorded"
            )),
            other => other,
        })
    }

    /// `me`'s approval at `at`, signed by `sign` (given the statement): checked, recorded, and
    /// the plan approved when that satisfies the policy.
    #[allow(
        clippy::too_many_arguments,
        reason = "one private step shared by the two ways of approving"
    )]
    async fn cast(
        &self,
        ctx: &PolicyContext,
        id: PlanId,
        me: ApproverName,
        note: Option<String>,
        shown: Option<&Digest>,
        at: OffsetDateTime,
        sign: impl FnOnce(&[u8]) -> Option<SignatureRecord>,
    ) -> Result<PolicyDecision> {
        let Versioned { value, revision } = self.store().plan(id).await?;
        let Plan::Proposal(proposal) = value else {
            return Err(crate::planning::wrong_stage(&value, "proposal"));
        };
        let digest = proposal.content().digest();
        if let Some(shown) = shown.filter(|s| **s != digest) {
            return Err(ServiceError::ContentChanged {
                plan: id,
                shown: shown.clone(),
                now: digest,
            });
        }
        if ctx.signed.requester(proposal.requested_by()).as_ref() == Some(&me) {
            return Err(ServiceError::BadInput(format!(
                "plan {id}: {me} asked for this plan, and nobody approves their own request"
            )));
        }
        let mut all = votes(&proposal);
        all.push(Vote {
            approver: me.clone(),
            verdict: Verdict::Approve,
        });
        let after = self.tally_of(ctx, &proposal, &all);
        if !after.rules.iter().any(|r| r.eligible.contains(&me)) {
            return Err(ServiceError::BadInput(format!(
                "plan {id}: {me} is not among the approvers it needs ({})",
                summaries(&after)
            )));
        }
        let policy = &ctx.signed.digest;
        let statement = policy_vote_statement(
            id,
            &digest,
            policy,
            me.as_str(),
            "approve",
            at,
            note.as_deref(),
        );
        let entry = json!({
            "approver": me, "verdict": "approve", "digest": digest, "policy": policy,
            "at": rfc3339(at), "note": note,
            "signature": sign(&statement),
        });
        let given = GivenApproval {
            approver: me,
            at,
            note,
        };
        let proposal = proposal
            .add_approval(policy, given)
            .map_err(|e| ServiceError::BadInput(format!("plan {id}: {e}")))?;
        if after.outcome != Outcome::Approved {
            let plan = Plan::Proposal(proposal.clone());
            let written = self.store().update_plan(&plan, revision).await;
            self.unless_decided(id, written.map_err(Into::into)).await?;
            self.audit(id, AuditKind::PlanApprovalGiven, entry).await?;
            return Ok(PolicyDecision::Pending(proposal, after));
        }
        let signers: Vec<ApproverName> = proposal
            .approvals()
            .map(|p| p.given.iter().map(|g| g.approver.clone()).collect())
            .unwrap_or_default();
        let approved = proposal.approve_by_policy(policy.clone(), signers, at);
        let mut approved_entry = crate::approval::approval_entry(self.store().as_ref(), &approved);
        if let Some(obj) = approved_entry.as_object_mut() {
            obj.insert("policy".to_owned(), policy_record(&ctx.signed));
            obj.insert("around".to_owned(), json!(ctx.around));
            obj.insert("requester".to_owned(), json!(approved.requested_by()));
            obj.insert(
                "satisfied".to_owned(),
                json!(
                    after
                        .rules
                        .iter()
                        .map(|r| json!({"rule": r.rule, "by": r.given}))
                        .collect::<Vec<_>>()
                ),
            );
        }
        let written = self
            .store()
            .update_plan(&Plan::Approved(approved.clone()), revision)
            .await;
        self.unless_decided(id, written.map_err(Into::into)).await?;
        self.audit(id, AuditKind::PlanApprovalGiven, entry).await?;
        self.audit(id, AuditKind::PlanApproved, approved_entry)
            .await?;
        self.store().seal(AuditLogId::Plan { plan_id: id }).await?;
        Ok(PolicyDecision::Approved(approved, after))
    }

    /// Applies a proposal's due timers at `now`: reminders, escalations, and the expiry
    /// (rejected, never approved), each recorded in the plan log. Returns what happened.
    ///
    /// # Errors
    ///
    /// Store failures; a plan that is no longer a proposal gives no events.
    pub async fn apply_timers(&self, id: PlanId, now: OffsetDateTime) -> Result<Vec<TimerEvent>> {
        let Some(ctx) = self.policy() else {
            return Ok(Vec::new());
        };
        let Versioned { value, revision } = self.store().plan(id).await?;
        let Plan::Proposal(mut proposal) = value else {
            return Ok(Vec::new());
        };
        let since = proposal
            .history()
            .iter()
            .rev()
            .find_map(|e| match e {
                orca_core::PlanEvent::Submitted { at } => Some(*at),
                _ => None,
            })
            .unwrap_or_else(|| proposal.created_at());
        let age = u64::try_from((now - since).whole_seconds()).unwrap_or(0);
        let reqs = ctx
            .around
            .requirements(&ctx.signed.policy, proposal.content());
        let policy = ctx.signed.digest.clone();
        let mut events = Vec::new();
        let mut entries = Vec::new();
        for r in &reqs {
            if let Some(expire) = r.expire_after_secs.filter(|e| age >= *e) {
                let reason = format!(
                    "no approval within {expire}s under rule `{}`: expired, denied",
                    r.rule
                );
                let rejected = proposal.reject(EXPIRY_ACTOR, Some(reason.clone()), now);
                let entry = json!({ "by": EXPIRY_ACTOR, "reason": reason, "rule": r.rule,
                                    "policy": policy, "expired": true });
                self.record(
                    Plan::Rejected(rejected),
                    revision,
                    AuditKind::PlanRejected,
                    entry,
                )
                .await?;
                return Ok(vec![TimerEvent::Expired {
                    rule: r.rule.clone(),
                }]);
            }
            let already = |list: Option<&Vec<String>>| list.is_some_and(|l| l.contains(&r.rule));
            let escalate_due = r.escalate_after_secs.is_some_and(|e| age >= e)
                && !already(proposal.approvals().map(|p| &p.escalated));
            if escalate_due {
                proposal = proposal
                    .mark(&policy, &r.rule, false)
                    .map_err(|e| ServiceError::BadInput(format!("plan {id}: {e}")))?;
                let approvers: Vec<ApproverName> = r.escalate_to.iter().cloned().collect();
                entries.push((
                    AuditKind::PlanApprovalEscalated,
                    json!({ "rule": r.rule, "to": approvers, "policy": policy, "after_secs": r.escalate_after_secs }),
                ));
                events.push(TimerEvent::Escalated {
                    rule: r.rule.clone(),
                    approvers,
                });
            }
            let remind_due = match (r.expire_after_secs, r.remind_before_secs) {
                (Some(e), Some(b)) => age >= e.saturating_sub(b),
                _ => false,
            } && !already(proposal.approvals().map(|p| &p.reminded));
            if remind_due {
                proposal = proposal
                    .mark(&policy, &r.rule, true)
                    .map_err(|e| ServiceError::BadInput(format!("plan {id}: {e}")))?;
                let approvers: Vec<ApproverName> = r.from.iter().cloned().collect();
                entries.push((
                    AuditKind::PlanApprovalReminded,
                    json!({ "rule": r.rule, "to": approvers, "policy": policy, "expires_after_secs": r.expire_after_secs }),
                ));
                events.push(TimerEvent::Reminded {
                    rule: r.rule.clone(),
                    approvers,
                });
            }
        }
        if events.is_empty() {
            return Ok(events);
        }
        self.store()
            .update_plan(&Plan::Proposal(proposal), revision)
            .await?;
        for (kind, data) in entries {
            self.store()
                .append(
                    AuditLogId::Plan { plan_id: id },
                    NewAuditEntry::new(kind, data),
                )
                .await?;
        }
        Ok(events)
    }

    /// The requester recorded for plans made here, when a policy is configured.
    pub(crate) fn requester(&self) -> Option<Requester> {
        self.policy().map(|c| c.requester.clone())
    }
}

/// The actor of a rejection by a policy's expiry.
pub const EXPIRY_ACTOR: &str = "expiry:approval-policy";

fn names<'a>(it: impl IntoIterator<Item = &'a ApproverName>) -> String {
    it.into_iter()
        .map(ApproverName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every rule's "needs n of {…}; k given (…)", joined.
#[must_use]
pub fn summaries(tally: &Tally) -> String {
    tally
        .rules
        .iter()
        .map(|r| format!("{}: {}", r.rule, r.summary()))
        .collect::<Vec<_>>()
        .join("; ")
}
