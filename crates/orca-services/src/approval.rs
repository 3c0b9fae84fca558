//! Approvals bound to the record and signed (ADR 0013).
//!
//! An approval is the `plan.approved` entry of the plan's audit log, carrying an ed25519
//! signature (made through the store's [`orca_store::Authority`]) over the plan id, the digest of
//! the approved content, who, when and the note. Before a plan runs, [`check`] recomputes the
//! digest of the plan file as it is now and requires: the plan log verifies; it holds the
//! approval; the approval's digest is the content's; the plan file's approval is the logged one;
//! and the signature verifies with a trusted key.

use orca_core::{ApprovedPlan, Digest, PlanId};
use orca_store::audit::VerifyReport;
use orca_store::signing::{SignatureRecord, approval_statement};
use orca_store::{AuditLogId, Store};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::error::Result;

/// The kind of the approval entry.
pub const APPROVED: orca_core::AuditKind = orca_core::AuditKind::PlanApproved;

/// How the actor of an approval taken through an agent host's MCP elicitation begins
/// (ADR 0019): `mcp-elicitation:<the name the host reported> (unverified client)`.
pub const MCP_ELICITATION: &str = "mcp-elicitation:";

/// What a reader of an approval is told when it came through an agent host.
pub const THROUGH_AGENT_HOST: &str = "an agent host (MCP elicitation): its UI asked and answered; orca cannot tell a human's click from the host's own, and the host's name is the one it reported";

/// Whether an approval by `by` came through an agent host (MCP elicitation) rather than from
/// the approver at a terminal or in the web inbox.
#[must_use]
pub fn through_agent_host(by: &str) -> bool {
    by.starts_with(MCP_ELICITATION)
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

/// The data of a plan's `plan.approved` entry, signed by the store's authority.
#[must_use]
pub fn approval_entry(store: &dyn Store, plan: &ApprovedPlan) -> Value {
    let approval = plan.approval();
    let statement = approval_statement(
        plan.id(),
        &approval.digest,
        &approval.by,
        approval.at,
        approval.note.as_deref(),
    );
    json!({
        "by": approval.by,
        "digest": approval.digest,
        "at": rfc3339(approval.at),
        "note": approval.note,
        "signature": store.authority().sign(&statement),
    })
}

/// What is wrong with a plan's approval: the entry of the plan log it is about (if any) and
/// the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalProblem {
    /// The plan.
    pub plan: PlanId,
    /// The plan-log entry at fault, if one is.
    pub entry: Option<u64>,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for ApprovalProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.entry {
            Some(e) => write!(
                f,
                "plan {}: entry {e} of its plan log: {}",
                self.plan, self.problem
            ),
            None => write!(f, "plan {}: {}", self.plan, self.problem),
        }
    }
}

/// Checks that an approved plan, as stored now, is the one its signed approval covers.
///
/// # Errors
///
/// Store failures. A bad approval is `Ok(Err(problem))`.
pub async fn check(
    store: &dyn Store,
    plan: &ApprovedPlan,
) -> Result<std::result::Result<(), ApprovalProblem>> {
    let id = plan.id();
    let bad = |entry: Option<u64>, problem: String| {
        Ok(Err(ApprovalProblem {
            plan: id,
            entry,
            problem,
        }))
    };
    let log = AuditLogId::Plan { plan_id: id };
    // The chain must hold; a bad seal is the seal's problem (reported with the log), and the
    // approval is still judged on its own signature below. One read where the store can (the
    // log verified and its entries parsed together).
    let (report, entries) = store.verified_entries(log).await?;
    match &report {
        VerifyReport::Tampered { seq, problem } if !problem.starts_with("seal:") => {
            return bad(
                Some(*seq),
                format!("its plan log was tampered with: {problem}"),
            );
        }
        // Approving seals the plan log; where signatures are required, a missing seal means
        // it was deleted (entries could have been added after the approval).
        VerifyReport::Intact {
            entries: count,
            sealed: false,
        } if store.authority().requires_signatures() => {
            return bad(
                Some(*count),
                "its plan log is not sealed, though approving seals it (the seal was deleted)"
                    .to_owned(),
            );
        }
        _ => {}
    }
    // A log whose only problem is its seal gave no entries: read them.
    let entries = match report {
        VerifyReport::Intact { .. } => entries,
        VerifyReport::Tampered { .. } => store.entries(log).await?,
    };
    let Some(entry) = entries.iter().rev().find(|e| e.kind == APPROVED) else {
        return bad(None, "its approval is missing from its plan log".to_owned());
    };
    let at = Some(entry.seq);
    let data = &entry.data;
    let logged_digest = data
        .get("digest")
        .and_then(Value::as_str)
        .and_then(|d| d.parse::<Digest>().ok());
    let content = plan.content().digest();
    if logged_digest.as_ref() != Some(&content) {
        return bad(
            at,
            format!(
                "its content (digest {content}) does not match the digest that was approved ({})",
                logged_digest.map_or_else(|| "none".to_owned(), |d| d.to_string())
            ),
        );
    }
    if plan.approval().policy.is_some() {
        return Ok(
            crate::policy::check_policy_approval(&store.authority(), plan, entry, &entries)
                .map(|_| ())
                .map_err(|(seq, problem)| ApprovalProblem {
                    plan: id,
                    entry: Some(seq),
                    problem,
                }),
        );
    }
    let approval = plan.approval();
    let same = data.get("by").and_then(Value::as_str) == Some(approval.by.as_str())
        && data.get("at").and_then(Value::as_str) == Some(rfc3339(approval.at).as_str())
        && data.get("note").and_then(Value::as_str) == approval.note.as_deref()
        && approval.digest == content;
    if !same {
        return bad(
            at,
            "the plan file's approval (who, when, note, digest) is not the one its plan log records"
                .to_owned(),
        );
    }
    let signature = match data.get("signature") {
        None | Some(Value::Null) => None,
        Some(v) => match serde_json::from_value::<SignatureRecord>(v.clone()) {
            Ok(s) => Some(s),
            Err(_) => return bad(at, "its approval's signature is malformed".to_owned()),
        },
    };
    let statement = approval_statement(
        id,
        &content,
        &approval.by,
        approval.at,
        approval.note.as_deref(),
    );
    if let Err(e) = store.authority().check(&statement, signature.as_ref()) {
        return bad(at, format!("its approval: {e}"));
    }
    Ok(Ok(()))
}
