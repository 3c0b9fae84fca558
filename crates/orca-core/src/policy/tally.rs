//! Counting the approvals and rejections of a plan against its requirements.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{ApproverName, Requirement};

/// An approver's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Approves the content shown.
    Approve,
    /// Rejects it.
    Reject,
}

/// One approver's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vote {
    /// Who.
    pub approver: ApproverName,
    /// What.
    pub verdict: Verdict,
}

/// One requirement, counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleTally {
    /// The rule.
    pub rule: String,
    /// Distinct approvals needed.
    pub need: u32,
    /// Who counts now (the rule's approvers, with its escalation set once it escalated),
    /// without the requester.
    pub eligible: BTreeSet<ApproverName>,
    /// The eligible approvers who approved.
    pub given: BTreeSet<ApproverName>,
    /// Whether the rule escalated.
    pub escalated: bool,
}

impl RuleTally {
    /// Whether the rule is satisfied.
    #[must_use]
    pub fn satisfied(&self) -> bool {
        self.given.len() >= self.need as usize
    }

    /// "needs 2 of {alice, bob}; 1 given (alice)".
    #[must_use]
    pub fn summary(&self) -> String {
        let set = |s: &BTreeSet<ApproverName>| {
            s.iter()
                .map(ApproverName::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let given = if self.given.is_empty() {
            "none given".to_owned()
        } else {
            format!("{} given ({})", self.given.len(), set(&self.given))
        };
        format!(
            "needs {} of {{{}}}; {given}",
            self.need,
            set(&self.eligible)
        )
    }
}

/// Where a plan stands under its requirements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Every requirement is satisfied.
    Approved,
    /// Some requirement still needs approvals.
    Pending,
    /// A required approver rejected it.
    Rejected {
        /// Who.
        by: ApproverName,
    },
}

/// Every requirement counted, and the outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// One per requirement.
    pub rules: Vec<RuleTally>,
    /// The outcome.
    pub outcome: Outcome,
}

/// Counts `votes` against `requirements`. Only an approver eligible for a rule (named by it, or
/// by its escalation once `escalated` holds its name) counts for it, once however often they
/// answered, and never the `requester`. A rejection by an approver eligible for any rule
/// rejects the plan, whatever else was given; the plan is approved only when every rule has
/// its count.
#[must_use]
pub fn tally(
    requirements: &[Requirement],
    requester: Option<&ApproverName>,
    votes: &[Vote],
    escalated: &BTreeSet<String>,
) -> Tally {
    let approving: BTreeSet<&ApproverName> = votes
        .iter()
        .filter(|v| v.verdict == Verdict::Approve)
        .map(|v| &v.approver)
        .collect();
    let rules: Vec<RuleTally> = requirements
        .iter()
        .map(|r| {
            let escalated = escalated.contains(&r.rule);
            let mut eligible = r.from.clone();
            if escalated {
                eligible.extend(r.escalate_to.iter().cloned());
            }
            if let Some(me) = requester {
                eligible.remove(me);
            }
            let given = eligible
                .iter()
                .filter(|a| approving.contains(a))
                .cloned()
                .collect();
            RuleTally {
                rule: r.rule.clone(),
                need: r.need,
                eligible,
                given,
                escalated,
            }
        })
        .collect();
    let rejected_by = votes.iter().find(|v| {
        v.verdict == Verdict::Reject && rules.iter().any(|r| r.eligible.contains(&v.approver))
    });
    let outcome = match rejected_by {
        Some(v) => Outcome::Rejected {
            by: v.approver.clone(),
        },
        None if rules.iter().all(RuleTally::satisfied) => Outcome::Approved,
        None => Outcome::Pending,
    };
    Tally { rules, outcome }
}
