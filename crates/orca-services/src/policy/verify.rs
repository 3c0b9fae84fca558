//! The check of an approval made under a policy, as it was when the plan was approved: the
//! policy recorded with the approval (its text and admin signature, not today's file), each
//! approver's signed entry, and the count, recomputed.

use std::collections::BTreeSet;

use orca_core::policy::{ApproverName, Outcome, Tally, Verdict, Vote, tally};
use orca_core::{ApprovedPlan, AuditKind, Digest, Requester};
use orca_store::signing::policy_vote_statement;
use orca_store::{AuditEntry, Authority, SignatureRecord};
use serde_json::Value;

use super::{SignedPolicy, Surroundings};

/// One approver's signed approval that counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignerEntry {
    /// The approver.
    pub approver: ApproverName,
    /// Their key.
    pub key: String,
    /// The plan-log entry of their approval.
    pub entry: u64,
}

/// How a plan's approval satisfied its policy: for `audit verify` and `plan show`.
#[derive(Debug, Clone)]
pub struct PolicyExplanation {
    /// The policy's digest.
    pub policy: Digest,
    /// The count, recomputed from the recorded policy and the signed entries.
    pub tally: Tally,
    /// The signed approvals that counted.
    pub signers: Vec<SignerEntry>,
}

impl PolicyExplanation {
    /// One line per rule: `rule infra: needs 2 of {alice, bob}; 2 given (alice, bob) — signed
    /// in entries 3 (alice), 4 (bob)`.
    #[must_use]
    pub fn lines(&self) -> Vec<String> {
        self.tally
            .rules
            .iter()
            .map(|r| {
                let by: Vec<String> = self
                    .signers
                    .iter()
                    .filter(|s| r.given.contains(&s.approver))
                    .map(|s| format!("{} (entry {}, key {})", s.approver, s.entry, s.key))
                    .collect();
                format!(
                    "rule {}: {}; signed by {}",
                    r.rule,
                    r.summary(),
                    if by.is_empty() {
                        "nobody".to_owned()
                    } else {
                        by.join(", ")
                    }
                )
            })
            .collect()
    }
}

fn parse<T: serde::de::DeserializeOwned>(v: Option<&Value>) -> Option<T> {
    v.and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// Checks a plan's approval made under a policy, from its `plan.approved` entry (`approved`)
/// and the plan log's other `entries`, and explains it.
///
/// # Errors
///
/// One line naming what does not hold (the plan-log entry is the caller's to name).
pub fn check_policy_approval(
    authority: &Authority,
    plan: &ApprovedPlan,
    approved: &AuditEntry,
    entries: &[AuditEntry],
) -> Result<PolicyExplanation, (u64, String)> {
    let at = approved.seq;
    let bad = |seq: u64, p: &str| Err((seq, p.to_owned()));
    let data = &approved.data;
    let Some(record) = data.get("policy") else {
        return bad(at, "its approval names no policy");
    };
    let (Some(text), Some(signature)) = (
        record.get("text").and_then(Value::as_str),
        parse::<SignatureRecord>(record.get("signature")),
    ) else {
        return bad(at, "its recorded policy is malformed");
    };
    let signed = SignedPolicy::from_parts(text.to_owned(), signature, authority)
        .map_err(|e| (at, format!("its recorded policy: {e}")))?;
    let recorded = plan.approval().policy.as_ref();
    if recorded.map(|p| &p.digest) != Some(&signed.digest) {
        return bad(
            at,
            "the plan file's policy digest is not the recorded policy's",
        );
    }
    let around: Surroundings = parse(data.get("around")).unwrap_or_default();
    let requester: Option<Requester> = parse(data.get("requester"));
    if requester.as_ref() != plan.requested_by() {
        return bad(
            at,
            "the plan file's requester is not the one its approval records",
        );
    }
    // Who asked is also in the plan's first entry, written before anyone could approve.
    let created: Option<Requester> = entries
        .iter()
        .find(|e| e.kind == AuditKind::PlanCreated)
        .and_then(|e| parse(e.data.get("requested_by")));
    if created.as_ref() != plan.requested_by() {
        return bad(
            at,
            "the plan file's requester is not the one its plan log recorded at its creation",
        );
    }
    let digest = plan.content().digest();
    let mut votes = Vec::new();
    let mut signers = Vec::new();
    let mut escalated = BTreeSet::new();
    for e in entries.iter().filter(|e| e.seq < at) {
        if e.kind == AuditKind::PlanApprovalEscalated {
            if let Some(rule) = e.data.get("rule").and_then(Value::as_str) {
                escalated.insert(rule.to_owned());
            }
            continue;
        }
        if e.kind != AuditKind::PlanApprovalGiven {
            continue;
        }
        let d = &e.data;
        let Some(approver) = parse::<ApproverName>(d.get("approver")) else {
            return bad(e.seq, "an approval names no approver");
        };
        let Some(key) = signed.policy.approvers.get(&approver) else {
            return bad(
                e.seq,
                &format!("{approver} is not an approver of the recorded policy"),
            );
        };
        let sig = parse::<SignatureRecord>(d.get("signature"));
        let note = d.get("note").and_then(Value::as_str);
        let when = parse::<String>(d.get("at")).and_then(|s| {
            time::OffsetDateTime::parse(&s, &time::format_description::well_known::Rfc3339).ok()
        });
        let (Some(sig), Some(when)) = (sig, when) else {
            return bad(e.seq, &format!("{approver}'s approval is not signed"));
        };
        let statement = policy_vote_statement(
            plan.id(),
            &digest,
            &signed.digest,
            approver.as_str(),
            "approve",
            when,
            note,
        );
        if sig.key.to_string() != *key || !sig.is_valid_for(&statement) {
            return bad(
                e.seq,
                &format!(
                    "{approver}'s approval is not signed by {approver}'s key in the recorded policy over this content"
                ),
            );
        }
        votes.push(Vote {
            approver: approver.clone(),
            verdict: Verdict::Approve,
        });
        signers.push(SignerEntry {
            approver,
            key: key.clone(),
            entry: e.seq,
        });
    }
    // The entry that approved is signed by the last approver (or a key trusted directly): the
    // surroundings it records are then theirs. Signed by another key (a server that recorded
    // approvers' own votes), they are not trusted: every rule that could match counts.
    let approver_keys: BTreeSet<&String> = signed.policy.approvers.values().collect();
    let sig = parse::<SignatureRecord>(data.get("signature"));
    let approval = plan.approval();
    let statement = orca_store::signing::approval_statement(
        plan.id(),
        &digest,
        &approval.by,
        approval.at,
        approval.note.as_deref(),
    );
    let attested = match sig {
        Some(s) if s.is_valid_for(&statement) => {
            approver_keys.contains(&s.key.to_string()) || authority.trusts(&s.key)
        }
        None if !authority.requires_signatures() => true,
        _ => {
            return bad(
                at,
                "its approval is not signed, or its signature does not verify",
            );
        }
    };
    let reqs = if attested {
        around.requirements(&signed.policy, plan.content())
    } else {
        signed.policy.requirements_unattested(plan.content())
    };
    let who = signed.requester(requester.as_ref());
    let counted = tally(&reqs, who.as_ref(), &votes, &escalated);
    if counted.outcome != Outcome::Approved {
        return bad(
            at,
            &format!(
                "its signed approvals do not satisfy the recorded policy ({})",
                super::decide::summaries(&counted)
            ),
        );
    }
    Ok(PolicyExplanation {
        policy: signed.digest,
        tally: counted,
        signers,
    })
}

/// Explains an approved plan's policy approval from its plan log, if it was approved under one.
#[must_use]
pub fn explain(
    authority: &Authority,
    plan: &ApprovedPlan,
    entries: &[AuditEntry],
) -> Option<Result<PolicyExplanation, (u64, String)>> {
    plan.approval().policy.as_ref()?;
    let approved = entries
        .iter()
        .rev()
        .find(|e| e.kind == AuditKind::PlanApproved)?;
    Some(check_policy_approval(authority, plan, approved, entries))
}
