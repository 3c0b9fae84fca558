//! Approval policies for a team: the signed policy file, loaded and verified, and what it
//! makes of a plan (ADR "approvals for a team").
//!
//! The policy file is TOML kept outside every project (the user's config names it); next to it,
//! `FILE.sig` holds an admin's signature (`{"key": "ed25519:…", "signature": "…"}`) over the
//! sha256 of the file's bytes. A policy whose signature does not verify with a policy admin key
//! the user's config names is refused, and nothing is approved or run under it. The matching
//! and counting are `orca_core::policy`'s; the decisions under a policy are in `decide`, the
//! check before a run and `audit verify`'s explanation in `verify`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use orca_core::policy::{ApproverName, PlanFacts, Policy, Requirement};
use orca_core::{Digest, Isolation, PlanContent, Requester};
use orca_store::signing::policy_statement;
use orca_store::{Authority, PublicKey, SignatureRecord};
use serde::{Deserialize, Serialize};

mod decide;
mod verify;
mod vote;

pub use decide::{EXPIRY_ACTOR, PolicyDecision, TimerEvent, summaries};
pub use verify::{PolicyExplanation, SignerEntry, check_policy_approval, explain};
pub use vote::{SignedVote, VOTE_MAX_AGE, VOTE_MAX_SKEW};

/// A policy file that verified: its text, digest, parsed content and admin signature.
#[derive(Debug, Clone)]
pub struct SignedPolicy {
    /// The file's text, as signed.
    pub text: String,
    /// sha256 of the text.
    pub digest: Digest,
    /// The parsed policy.
    pub policy: Policy,
    /// The admin's signature over [`policy_statement`] of the digest.
    pub signature: SignatureRecord,
}

/// What is wrong with a policy file; nothing is approved or run under it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("approval policy {path}: {problem}")]
pub struct PolicyLoadError {
    /// The file (or the record) at fault.
    pub path: String,
    /// What is wrong.
    pub problem: String,
}

/// Where a policy file's signature is kept: `FILE.sig`.
#[must_use]
pub fn signature_path(policy: &Path) -> PathBuf {
    let mut name = policy.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

impl SignedPolicy {
    /// Reads a policy file and its signature and verifies both with `authority`'s policy admin
    /// keys.
    ///
    /// # Errors
    ///
    /// An unreadable file, a missing or bad signature, a signature by a key that is no admin's,
    /// malformed TOML or a policy whose content is inconsistent.
    pub fn load(path: &Path, authority: &Authority) -> Result<Self, PolicyLoadError> {
        let bad = |problem: String| PolicyLoadError {
            path: path.display().to_string(),
            problem,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let sig_path = signature_path(path);
        let sig = std::fs::read_to_string(&sig_path).map_err(|e| {
            bad(format!(
                "its signature {}: {e} (an admin signs it: orca policy sign {})",
                sig_path.display(),
                path.display()
            ))
        })?;
        let signature: SignatureRecord = serde_json::from_str(sig.trim())
            .map_err(|e| bad(format!("its signature {}: {e}", sig_path.display())))?;
        Self::from_parts(text, signature, authority).map_err(bad)
    }

    /// A policy from its text and signature (a file's, or one recorded with an approval).
    ///
    /// # Errors
    ///
    /// As [`SignedPolicy::load`], as one line.
    pub fn from_parts(
        text: String,
        signature: SignatureRecord,
        authority: &Authority,
    ) -> Result<Self, String> {
        let digest = Digest::of_bytes(text.as_bytes());
        if authority.policy_admins().is_empty() && authority.requires_signatures() {
            return Err(
                "no policy admin key is configured ([approval] policy_admin_key in the user's config), so no policy can be trusted"
                    .to_owned(),
            );
        }
        authority
            .check_policy(&policy_statement(&digest), Some(&signature))
            .map_err(|e| format!("refused: {e}"))?;
        let policy = parse(&text)?;
        Ok(Self {
            text,
            digest,
            policy,
            signature,
        })
    }

    /// The approver whose key `key` is.
    #[must_use]
    pub fn approver(&self, key: &PublicKey) -> Option<&ApproverName> {
        self.policy.approver_with_key(&key.to_string())
    }

    /// The approver a requester is, if any (by key, else by name).
    #[must_use]
    pub fn requester(&self, requester: Option<&Requester>) -> Option<ApproverName> {
        let r = requester?;
        r.key
            .as_deref()
            .and_then(|k| self.policy.approver_with_key(k).cloned())
            .or_else(|| {
                r.name
                    .parse()
                    .ok()
                    .filter(|n| self.policy.approvers.contains_key(n))
            })
    }
}

/// Parses and checks a policy's TOML text.
///
/// # Errors
///
/// Malformed TOML, an unknown field, or inconsistent content; one line naming it.
pub fn parse(text: &str) -> Result<Policy, String> {
    let policy: Policy = toml::from_str(text).map_err(|e| e.message().to_owned())?;
    policy.validate().map_err(|e| e.to_string())?;
    Ok(policy)
}

/// What a policy sees around a plan that its content does not say, recorded with the
/// approval so that the check later computes the same requirements.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Surroundings {
    /// The project's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The backend of each agent (agent id → backend name).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub backends: std::collections::BTreeMap<String, String>,
    /// The project's default isolation for steps that declare writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
}

impl Surroundings {
    /// The requirements of `content` under `policy`, seen from here.
    #[must_use]
    pub fn requirements(&self, policy: &Policy, content: &PlanContent) -> Vec<Requirement> {
        let backends: BTreeSet<String> = content
            .steps
            .iter()
            .filter_map(|s| self.backends.get(s.agent.as_str()).cloned())
            .collect();
        policy.requirements(&PlanFacts {
            content,
            project: self.project.as_deref(),
            backends: &backends,
            isolation_fallback: self.isolation,
        })
    }
}

/// A configured approval policy and the surroundings plans are judged in: what a
/// [`crate::PlanningService`] decides under.
#[derive(Debug, Clone)]
pub struct PolicyContext {
    /// The verified policy.
    pub signed: SignedPolicy,
    /// The project, backends and default isolation.
    pub around: Surroundings,
    /// Who asks for plans made here.
    pub requester: Requester,
}
