//! Signatures over orca's records: approvals and seals (ADR 0013).
//!
//! An approval is an ed25519 signature by the approver's key over a canonical *statement*
//! (the plan id, the digest of its content, who approved, when, and the note); a seal is a
//! signature over the log it seals (its id), how many entries, their Merkle root and when.
//! This module is the math and the trust decision only: no files. Keys are loaded by
//! [`crate::keys`]; the store (or any holder of an [`Authority`]) signs and checks.
//!
//! Trust comes from outside the project: an [`Authority`] is built by the binary from the
//! user's own key and `--trusted-key` files, never from anything under `.orca/`. A record
//! signed by any other key — including a key a forged record carries along with itself — is
//! *untrusted*.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use ed25519_dalek::{Signer as _, Verifier as _};
use orca_core::{Digest, PlanId};
use serde::{Deserialize, Serialize};
use serde_json::json;
use thiserror::Error;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::port::AuditLogId;

/// The text before a public key's hex.
const KEY_PREFIX: &str = "ed25519:";

/// A public key, shown as `ed25519:<64 hex digits>`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PublicKey([u8; 32]);

impl PublicKey {
    /// The raw bytes.
    #[must_use]
    pub const fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{KEY_PREFIX}{}", to_hex(&self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<PublicKey> for String {
    fn from(k: PublicKey) -> Self {
        k.to_string()
    }
}

impl TryFrom<String> for PublicKey {
    type Error = SignatureProblem;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl std::str::FromStr for PublicKey {
    type Err = SignatureProblem;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let hex = text
            .trim()
            .strip_prefix(KEY_PREFIX)
            .ok_or(SignatureProblem::Malformed(
                "a public key starts with `ed25519:`",
            ))?;
        let bytes = from_hex::<32>(hex)
            .ok_or(SignatureProblem::Malformed("a public key is 64 hex digits"))?;
        Ok(Self(bytes))
    }
}

/// A private signing key. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct SigningKey(ed25519_dalek::SigningKey);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.public())
    }
}

impl SigningKey {
    /// A key from its 32-byte seed.
    #[must_use]
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    /// A new random key (the operating system's random source).
    ///
    /// # Errors
    ///
    /// The random source is unavailable.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut seed = [0u8; 32];
        getrandom::getrandom(&mut seed)?;
        Ok(Self::from_seed(seed))
    }

    /// The seed (what a key file holds).
    #[must_use]
    pub fn seed(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// The public half.
    #[must_use]
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key().to_bytes())
    }

    /// Signs a statement.
    #[must_use]
    pub fn sign(&self, statement: &[u8]) -> SignatureRecord {
        SignatureRecord {
            key: self.public(),
            signature: to_hex(&self.0.sign(statement).to_bytes()),
        }
    }
}

/// A signature with the public key that made it, as stored in a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureRecord {
    /// Who signed (the key is trusted only if the verifier already knows it).
    pub key: PublicKey,
    /// The ed25519 signature, 128 hex digits.
    pub signature: String,
}

impl SignatureRecord {
    /// Whether the signature is `key`'s over `statement` (the math only, not trust).
    #[must_use]
    pub fn is_valid_for(&self, statement: &[u8]) -> bool {
        let Some(bytes) = from_hex::<64>(&self.signature) else {
            return false;
        };
        let Ok(key) = ed25519_dalek::VerifyingKey::from_bytes(self.key.bytes()) else {
            return false;
        };
        key.verify(statement, &ed25519_dalek::Signature::from_bytes(&bytes))
            .is_ok()
    }
}

/// Why a signed record is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SignatureProblem {
    /// The record carries no signature.
    #[error("it is not signed")]
    Missing,
    /// A key or signature is not well-formed.
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// The signature does not verify over the record (it was changed or forged).
    #[error("its signature does not verify (the record was changed or forged)")]
    Invalid,
    /// A valid signature by a key the verifier does not trust.
    #[error(
        "it is signed by {0}, a key that is not trusted (only keys from outside the project are: the user's own key or --trusted-key)"
    )]
    Untrusted(PublicKey),
    /// A valid signature over a policy by a key not configured as a policy admin's.
    #[error(
        "it is signed by {0}, which is not a policy admin key ([approval] policy_admin_key in the user's config)"
    )]
    NotPolicyAdmin(PublicKey),
}

/// Who may sign, and whose signatures count. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Authority {
    key: Option<Arc<SigningKey>>,
    /// `None`: signatures are not required (a library user or test that configured nothing);
    /// a signature that is present must still verify.
    trusted: Option<Arc<BTreeSet<PublicKey>>>,
    /// Keys whose signature makes an approval policy valid (the user's config names them).
    policy_admins: Arc<BTreeSet<PublicKey>>,
}

impl Authority {
    /// Signs with `key` and trusts it and `others`: the binary's authority.
    #[must_use]
    pub fn new(key: Option<SigningKey>, others: impl IntoIterator<Item = PublicKey>) -> Self {
        let mut trusted: BTreeSet<PublicKey> = others.into_iter().collect();
        if let Some(k) = &key {
            trusted.insert(k.public());
        }
        Self {
            key: key.map(Arc::new),
            trusted: Some(Arc::new(trusted)),
            policy_admins: Arc::default(),
        }
    }

    /// Also trusts `keys` (an approval policy's approvers, once the policy verified).
    #[must_use]
    pub fn also_trusting(mut self, keys: impl IntoIterator<Item = PublicKey>) -> Self {
        if let Some(trusted) = &self.trusted {
            let mut all = (**trusted).clone();
            all.extend(keys);
            self.trusted = Some(Arc::new(all));
        }
        self
    }

    /// Also trusts `admins` to sign approval policies.
    #[must_use]
    pub fn with_policy_admins(mut self, admins: impl IntoIterator<Item = PublicKey>) -> Self {
        self.policy_admins = Arc::new(admins.into_iter().collect());
        self
    }

    /// The keys trusted to sign approval policies.
    #[must_use]
    pub fn policy_admins(&self) -> &BTreeSet<PublicKey> {
        &self.policy_admins
    }

    /// Whether `key` is one this authority trusts directly (its own or `--trusted-key`).
    #[must_use]
    pub fn trusts(&self, key: &PublicKey) -> bool {
        self.trusted.as_ref().is_none_or(|t| t.contains(key))
    }

    /// Checks an approval policy's signature over its statement: valid, and by a policy
    /// admin's key (when signatures are required).
    ///
    /// # Errors
    ///
    /// Missing, invalid, or by a key that is no policy admin's.
    pub fn check_policy(
        &self,
        statement: &[u8],
        signature: Option<&SignatureRecord>,
    ) -> Result<(), SignatureProblem> {
        let Some(signature) = signature else {
            return Err(SignatureProblem::Missing);
        };
        if !signature.is_valid_for(statement) {
            return Err(SignatureProblem::Invalid);
        }
        if self.requires_signatures() && !self.policy_admins.contains(&signature.key) {
            return Err(SignatureProblem::NotPolicyAdmin(signature.key.clone()));
        }
        Ok(())
    }

    /// Signs nothing and requires no signature (checks only those present).
    #[must_use]
    pub fn permissive() -> Self {
        Self::default()
    }

    /// Whether signatures are required.
    #[must_use]
    pub const fn requires_signatures(&self) -> bool {
        self.trusted.is_some()
    }

    /// The signing key's public half, if this authority signs.
    #[must_use]
    pub fn public_key(&self) -> Option<PublicKey> {
        self.key.as_ref().map(|k| k.public())
    }

    /// Signs a statement, if this authority holds a key.
    #[must_use]
    pub fn sign(&self, statement: &[u8]) -> Option<SignatureRecord> {
        self.key.as_ref().map(|k| k.sign(statement))
    }

    /// Checks a record's signature over its statement.
    ///
    /// # Errors
    ///
    /// Missing (when signatures are required), invalid, or by an untrusted key.
    pub fn check(
        &self,
        statement: &[u8],
        signature: Option<&SignatureRecord>,
    ) -> Result<(), SignatureProblem> {
        let Some(signature) = signature else {
            return if self.requires_signatures() {
                Err(SignatureProblem::Missing)
            } else {
                Ok(())
            };
        };
        if !signature.is_valid_for(statement) {
            return Err(SignatureProblem::Invalid);
        }
        match &self.trusted {
            Some(keys) if !keys.contains(&signature.key) => {
                Err(SignatureProblem::Untrusted(signature.key.clone()))
            }
            _ => Ok(()),
        }
    }
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

/// What an approver signs: the canonical JSON of the plan id, the digest of the approved
/// content, who, when (RFC 3339) and the note.
#[must_use]
pub fn approval_statement(
    plan: PlanId,
    digest: &Digest,
    by: &str,
    at: OffsetDateTime,
    note: Option<&str>,
) -> Vec<u8> {
    let value = json!({
        "statement": "orca.approval/1",
        "plan_id": plan.to_string(),
        "digest": digest.to_string(),
        "by": by,
        "at": rfc3339(at),
        "note": note,
    });
    orca_core::format::canonical_json(&value).into_bytes()
}

/// What a policy admin signs: the sha256 digest of the policy file's bytes.
#[must_use]
pub fn policy_statement(policy: &Digest) -> Vec<u8> {
    let value = json!({ "statement": "orca.policy/1", "digest": policy.to_string() });
    orca_core::format::canonical_json(&value).into_bytes()
}

/// What one approver signs under an approval policy: the plan, the digest of its content, the
/// policy's digest, the approver's name in it, their verdict, when and the note.
#[must_use]
pub fn policy_vote_statement(
    plan: PlanId,
    digest: &Digest,
    policy: &Digest,
    approver: &str,
    verdict: &str,
    at: OffsetDateTime,
    note: Option<&str>,
) -> Vec<u8> {
    let value = json!({
        "statement": "orca.policy-vote/1",
        "plan_id": plan.to_string(),
        "digest": digest.to_string(),
        "policy": policy.to_string(),
        "approver": approver,
        "verdict": verdict,
        "at": rfc3339(at),
        "note": note,
    });
    orca_core::format::canonical_json(&value).into_bytes()
}

/// What a person accepting an execution's result signs: the canonical JSON of the execution
/// id, the id of the result's git tree they were shown, who, when (RFC 3339) and the note.
#[must_use]
pub fn acceptance_statement(
    execution: orca_core::ExecutionId,
    tree: &str,
    by: &str,
    at: OffsetDateTime,
    note: Option<&str>,
) -> Vec<u8> {
    let value = json!({
        "statement": "orca.acceptance/1",
        "execution_id": execution.to_string(),
        "tree": tree,
        "by": by,
        "at": rfc3339(at),
        "note": note,
    });
    orca_core::format::canonical_json(&value).into_bytes()
}

/// What a seal signs: the log it seals (so a seal cannot be moved to another log), how many
/// entries, their Merkle root and when.
#[must_use]
pub fn seal_statement(log: AuditLogId, entries: u64, root: &Digest, at: OffsetDateTime) -> Vec<u8> {
    let value = json!({
        "statement": "orca.seal/1",
        "log": log,
        "entries": entries,
        "merkle_root": root.to_string(),
        "at": rfc3339(at),
    });
    orca_core::format::canonical_json(&value).into_bytes()
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

fn from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let text = text.as_bytes();
    if text.len() != N * 2 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in text.chunks(2).enumerate() {
        let [hi, lo] = pair else { return None };
        out[i] = (digit(*hi)? << 4) | digit(*lo)?;
    }
    Some(out)
}

/// Hex of a key seed, for key files.
#[must_use]
pub(crate) fn seed_to_hex(seed: &[u8; 32]) -> String {
    to_hex(seed)
}

/// A key seed from hex, for key files.
#[must_use]
pub(crate) fn seed_from_hex(text: &str) -> Option<[u8; 32]> {
    from_hex::<32>(text.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_verifies_and_refuses_others() {
        let mine = SigningKey::from_seed([7; 32]);
        let theirs = SigningKey::from_seed([9; 32]);
        let auth = Authority::new(Some(mine.clone()), []);
        let s = b"statement";
        let sig = auth.sign(s).unwrap();
        assert_eq!(auth.check(s, Some(&sig)), Ok(()));
        assert_eq!(
            auth.check(b"other", Some(&sig)),
            Err(SignatureProblem::Invalid)
        );
        assert_eq!(auth.check(s, None), Err(SignatureProblem::Missing));
        let forged = theirs.sign(s);
        assert_eq!(
            auth.check(s, Some(&forged)),
            Err(SignatureProblem::Untrusted(theirs.public()))
        );
        assert_eq!(Authority::permissive().check(s, None), Ok(()));
        let key: PublicKey = mine.public().to_string().parse().unwrap();
        assert_eq!(key, mine.public());
        assert_eq!(seed_from_hex(&seed_to_hex(&[3; 32])), Some([3; 32]));
    }
}
