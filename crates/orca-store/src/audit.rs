//! The audit log: the causal chain.
//!
//! Each log is append-only JSON lines. An entry records its sequence number, time, parent
//! entry (execution → task attempt → agent call → tool call), kind, data, the hash of the
//! previous entry and its own sha256 over its canonical form. A terminal execution's log is
//! sealed with a Merkle root over the entry hashes.

use orca_core::Digest;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// An entry to append; the store assigns sequence, time and hashes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewAuditEntry {
    /// The entry this one happened inside (its sequence number), if any.
    pub parent: Option<u64>,
    /// What happened (`execution.started`, `task.attempt.started`, `agent.call`, `tool.call`…).
    pub kind: String,
    /// Details. Secrets are redacted before the entry is hashed.
    pub data: serde_json::Value,
}

impl NewAuditEntry {
    /// An entry with no parent.
    #[must_use]
    pub fn new(kind: impl Into<String>, data: serde_json::Value) -> Self {
        Self {
            parent: None,
            kind: kind.into(),
            data,
        }
    }

    /// Sets the parent (builder style).
    #[must_use]
    pub const fn with_parent(mut self, parent: Option<u64>) -> Self {
        self.parent = parent;
        self
    }
}

/// A stored audit entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditEntry {
    /// 0-based position in the log.
    pub seq: u64,
    /// When it was appended.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The parent entry's sequence number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
    /// What happened.
    pub kind: String,
    /// Details (redacted).
    pub data: serde_json::Value,
    /// The previous entry's hash (all zeros for the first entry).
    pub prev: Digest,
    /// sha256 over the canonical form of every other field.
    pub hash: Digest,
}

/// The seal of a finished log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seal {
    /// How many entries were sealed.
    pub entries: u64,
    /// The Merkle root over their hashes.
    pub merkle_root: Digest,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// The result of verifying a log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum VerifyReport {
    /// Every entry checks out.
    Intact {
        /// Entries checked.
        entries: u64,
        /// Whether the log is sealed (and the seal matches).
        sealed: bool,
    },
    /// The first problem found.
    Tampered {
        /// The 0-based line / sequence number of the first bad entry.
        seq: u64,
        /// What is wrong with it.
        problem: String,
    },
}

impl VerifyReport {
    /// Whether the log checks out.
    #[must_use]
    pub const fn is_intact(&self) -> bool {
        matches!(self, Self::Intact { .. })
    }
}
