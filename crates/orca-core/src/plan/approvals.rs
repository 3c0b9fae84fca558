//! A proposal's approvals under an approval policy: who asked for the plan, the approvals
//! given so far (each a separate signed entry of the plan log), and the transition to
//! approved once the policy is satisfied.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::error::TransitionError;
use crate::format::Digest;
use crate::plan::{Approval, ApprovedPlan, DraftPlan, ProposalPlan};
use crate::policy::ApproverName;

/// Who asked for a plan: the name orca knows them by and, where they had one, their public key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requester {
    /// `user:<login>`, `web:<token>`, `mcp:<host>`…
    pub name: String,
    /// Their signing key's public half (`ed25519:<hex>`), if they had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// One approver's approval, given before the policy was satisfied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GivenApproval {
    /// The approver.
    pub approver: ApproverName,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// An optional note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What a proposal has collected under its policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingApprovals {
    /// The digest of the policy the proposal is decided under (bound by its first approval,
    /// reminder or escalation).
    pub policy: Digest,
    /// Approvals given so far, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub given: Vec<GivenApproval>,
    /// Rules that escalated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escalated: Vec<String>,
    /// Rules whose approvers were reminded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reminded: Vec<String>,
}

/// How an approval policy approved a plan: its digest and who signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyApproval {
    /// The policy's digest (sha256 of its file).
    pub digest: Digest,
    /// The approvers whose signed approvals satisfied it.
    pub signers: Vec<ApproverName>,
}

impl DraftPlan {
    /// Records who asked for the plan.
    #[must_use]
    pub fn with_requester(mut self, requester: Requester) -> Self {
        self.common.requested_by = Some(requester);
        self
    }
}

impl ProposalPlan {
    /// The approvals collected under a policy, if any.
    #[must_use]
    pub const fn approvals(&self) -> Option<&PendingApprovals> {
        self.approvals.as_ref()
    }

    /// The collection under `policy`, started if there is none.
    fn under(&mut self, policy: &Digest) -> Result<&mut PendingApprovals, TransitionError> {
        let pending = self.approvals.get_or_insert_with(|| PendingApprovals {
            policy: policy.clone(),
            given: Vec::new(),
            escalated: Vec::new(),
            reminded: Vec::new(),
        });
        if pending.policy != *policy {
            return Err(TransitionError::PolicyChanged {
                bound: pending.policy.to_string(),
                now: policy.to_string(),
            });
        }
        Ok(pending)
    }

    /// Records an approver's approval under `policy`.
    ///
    /// # Errors
    ///
    /// The proposal is being decided under another policy, or the approver already approved.
    pub fn add_approval(
        mut self,
        policy: &Digest,
        approval: GivenApproval,
    ) -> Result<Self, TransitionError> {
        let pending = self.under(policy)?;
        if pending
            .given
            .iter()
            .any(|g| g.approver == approval.approver)
        {
            return Err(TransitionError::AlreadyApprovedBy(
                approval.approver.to_string(),
            ));
        }
        pending.given.push(approval);
        Ok(self)
    }

    /// Records that a rule escalated (or, with `reminder`, that its approvers were reminded).
    ///
    /// # Errors
    ///
    /// The proposal is being decided under another policy.
    pub fn mark(
        mut self,
        policy: &Digest,
        rule: &str,
        reminder: bool,
    ) -> Result<Self, TransitionError> {
        let pending = self.under(policy)?;
        let list = if reminder {
            &mut pending.reminded
        } else {
            &mut pending.escalated
        };
        if !list.iter().any(|r| r == rule) {
            list.push(rule.to_owned());
        }
        Ok(self)
    }

    /// The policy is satisfied: the plan is approved by the approvers who gave their approval
    /// (`signers`, in the order they approved), recording the policy's digest.
    #[must_use]
    pub fn approve_by_policy(
        self,
        policy: Digest,
        signers: Vec<ApproverName>,
        at: OffsetDateTime,
    ) -> ApprovedPlan {
        let digest = self.common.content.digest();
        let by = format!(
            "policy: {}",
            signers
                .iter()
                .map(ApproverName::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        );
        ApprovedPlan {
            common: self.common,
            approval: Approval {
                at,
                by,
                note: None,
                digest,
                policy: Some(PolicyApproval {
                    digest: policy,
                    signers,
                }),
            },
        }
    }
}
