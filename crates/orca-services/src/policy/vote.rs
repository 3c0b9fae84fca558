//! An approval signed on the approver's own machine (`orca policy vote`) and brought to a
//! server by hand: the web inbox records it only if it is the approver's signature over this
//! plan, this content digest and this policy. The server's key signs nothing for anyone.

use orca_core::policy::ApproverName;
use orca_core::{Digest, PlanId};
use orca_store::signing::policy_vote_statement;
use orca_store::{SignatureRecord, SigningKey};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::SignedPolicy;

/// What `orca policy vote` prints and the web inbox takes: the fields of an approver's
/// `orca.policy-vote/1` statement (verdict "approve") and their signature over it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedVote {
    /// The plan approved.
    pub plan_id: PlanId,
    /// The digest of the content approved.
    pub digest: Digest,
    /// The digest of the policy the approver's own config names.
    pub policy: Digest,
    /// The approver's name in that policy.
    pub approver: ApproverName,
    /// When it was signed (RFC 3339, whole seconds).
    pub at: String,
    /// The note, if any.
    #[serde(default)]
    pub note: Option<String>,
    /// The approver's signature over the statement.
    pub signature: SignatureRecord,
}

/// How old a signed vote may be when it is brought to a server.
pub const VOTE_MAX_AGE: time::Duration = time::Duration::hours(1);

/// How far in the future its time may be (clocks differ).
pub const VOTE_MAX_SKEW: time::Duration = time::Duration::minutes(5);

impl SignedVote {
    /// Signs an approval of `plan` (content `digest`) under `policy` as `approver`, now.
    #[must_use]
    pub fn sign(
        key: &SigningKey,
        plan_id: PlanId,
        digest: Digest,
        policy: Digest,
        approver: ApproverName,
        note: Option<String>,
    ) -> Self {
        let now = OffsetDateTime::now_utc();
        let at = now.replace_nanosecond(0).unwrap_or(now);
        let statement = policy_vote_statement(
            plan_id,
            &digest,
            &policy,
            approver.as_str(),
            "approve",
            at,
            note.as_deref(),
        );
        Self {
            plan_id,
            digest,
            policy,
            approver,
            at: at.format(&Rfc3339).unwrap_or_default(),
            note,
            signature: key.sign(&statement),
        }
    }

    /// When it was signed.
    ///
    /// # Errors
    ///
    /// `at` is not RFC 3339.
    pub fn at(&self) -> Result<OffsetDateTime, String> {
        OffsetDateTime::parse(&self.at, &Rfc3339)
            .map_err(|e| format!("`at` {:?} is not an RFC 3339 time: {e}", self.at))
    }

    /// The bytes signed (`None` when `at` is not a time).
    #[must_use]
    pub fn statement(&self) -> Option<Vec<u8>> {
        Some(policy_vote_statement(
            self.plan_id,
            &self.digest,
            &self.policy,
            self.approver.as_str(),
            "approve",
            self.at().ok()?,
            self.note.as_deref(),
        ))
    }

    /// Reads what `orca policy vote` printed (surrounding blanks ignored).
    ///
    /// # Errors
    ///
    /// Not a signed vote: one line saying why.
    pub fn parse(text: &str) -> Result<Self, String> {
        serde_json::from_str(text.trim())
            .map_err(|e| format!("not a signed approval from `orca policy vote`: {e}"))
    }

    /// Checks the vote is `bound`'s approval of `plan` under `policy`, signed by `bound`'s key
    /// in that policy, made between `now - VOTE_MAX_AGE` and `now + VOTE_MAX_SKEW`. The content
    /// digest is the caller's to compare with the plan's.
    ///
    /// # Errors
    ///
    /// The first thing that does not hold, as a sentence.
    pub fn check(
        &self,
        plan: PlanId,
        policy: &SignedPolicy,
        bound: &ApproverName,
        now: OffsetDateTime,
    ) -> Result<OffsetDateTime, String> {
        if self.plan_id != plan {
            return Err(format!(
                "this signed approval is for plan {}, not plan {plan}",
                self.plan_id
            ));
        }
        if self.approver != *bound {
            return Err(format!(
                "this signed approval is {}'s, and this access token approves only as {bound}",
                self.approver
            ));
        }
        if self.policy != policy.digest {
            return Err(format!(
                "this approval was signed under the policy {}, but plans here are decided under {}",
                self.policy, policy.digest
            ));
        }
        let Some(key) = policy.policy.approvers.get(&self.approver) else {
            return Err(format!(
                "{} is not an approver in the policy {}",
                self.approver, policy.digest
            ));
        };
        if self.signature.key.to_string() != *key {
            return Err(format!(
                "this approval is signed by {}, which is not {}'s key in the policy ({key})",
                self.signature.key, self.approver
            ));
        }
        let at = self.at()?;
        let valid = self
            .statement()
            .is_some_and(|s| self.signature.is_valid_for(&s));
        if !valid {
            return Err(format!(
                "the signature does not verify with {}'s key: it was not made over this plan, digest, policy, time and note",
                self.approver
            ));
        }
        if at < now - VOTE_MAX_AGE || at > now + VOTE_MAX_SKEW {
            return Err(format!(
                "this approval was signed at {}: more than an hour ago or in the future; sign it again",
                self.at
            ));
        }
        Ok(at)
    }
}
