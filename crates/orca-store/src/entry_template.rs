//! An audit entry with its place in the chain left open: the texts a store that chains in its
//! database fills with the entry's `seq` and `prev` (ADR 0060). The entry's hash is sha256 over
//! its canonical JSON without `hash`, whose keys are sorted — `prev` and `seq` are its last two
//! — so the canonical text is `hash_head` + `<prev hex>` + `","seq":` + `<seq>` + `}`; the
//! stored line is `{"seq":<seq>,` + `line_body` + `<prev hex>` + `","hash":"sha256:` +
//! `<hash hex>` + `"}`. [`Template::fill`] is the reference for that arithmetic (what a
//! database must compute), and [`Template::entry`] takes back what the database answered,
//! checking its hash.

use orca_core::Digest;
use time::OffsetDateTime;

use crate::audit::{AuditEntry, NewAuditEntry, entry_hash, zero_digest};

/// An entry ready to be chained anywhere: its texts with `seq` and `prev` open.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// The entry as it will be, but for `seq`, `prev` and `hash`.
    entry: AuditEntry,
    /// The canonical text up to `prev`'s hex digits (it ends `"prev":"sha256:`).
    pub hash_head: String,
    /// The line between `{"seq":<seq>,` and `prev`'s hex digits (it ends `"prev":"sha256:`).
    pub line_body: String,
}

/// Why an entry cannot be made a template (its canonical form did not end as every entry's
/// does: never for an entry `serde_json` can write).
#[derive(Debug, thiserror::Error)]
#[error("an audit entry's template: {0}")]
pub struct TemplateError(String);

const ZERO_HEX: &str = "0000000000000000000000000000000000000000000000000000000000000000";

impl Template {
    /// The template of `new` (its data redacted as every entry's is) appended at `at`.
    pub fn new(new: NewAuditEntry, at: OffsetDateTime) -> Result<Self, TemplateError> {
        // Chained at seq 0 after nothing: `prev` and `hash` all zeros, `seq` 0 — the values
        // whose text is cut off below.
        let mut entry = crate::audit::next_entry(None, new, at);
        entry.hash = zero_digest();
        let canonical = canonical_unhashed(&entry)?;
        let tail = format!("{ZERO_HEX}\",\"seq\":0}}");
        let hash_head = canonical
            .strip_suffix(&tail)
            .filter(|h| h.ends_with("\"prev\":\"sha256:"))
            .ok_or_else(|| TemplateError(format!("its canonical form ends {canonical:?}")))?
            .to_owned();
        let line = serde_json::to_string(&entry).map_err(|e| TemplateError(e.to_string()))?;
        let line_tail = format!("{ZERO_HEX}\",\"hash\":\"sha256:{ZERO_HEX}\"}}");
        let line_body = line
            .strip_prefix("{\"seq\":0,")
            .and_then(|l| l.strip_suffix(&line_tail))
            .filter(|b| b.ends_with("\"prev\":\"sha256:"))
            .ok_or_else(|| TemplateError(format!("its line is {line:?}")))?
            .to_owned();
        Ok(Self {
            entry,
            hash_head,
            line_body,
        })
    }

    /// The entry chained at `seq` after `prev`, and its stored line: what a database given
    /// [`Self::hash_head`] and [`Self::line_body`] computes.
    #[must_use]
    pub fn fill(&self, seq: u64, prev: &Digest) -> (Digest, String) {
        let prev = prev.hex();
        let canonical = format!("{}{prev}\",\"seq\":{seq}}}", self.hash_head);
        let hash = Digest::of_bytes(canonical.as_bytes());
        let line = format!(
            "{{\"seq\":{seq},{}{prev}\",\"hash\":\"sha256:{}\"}}",
            self.line_body,
            hash.hex()
        );
        (hash, line)
    }

    /// The entry as chained at `seq` after `prev` with `hash`, if that hash is the entry's:
    /// `None` when whoever chained it hashed something else.
    #[must_use]
    pub fn entry(&self, seq: u64, prev: Digest, hash: Digest) -> Option<AuditEntry> {
        let mut entry = self.entry.clone();
        entry.seq = seq;
        entry.prev = prev;
        entry.hash = hash;
        (entry_hash(&entry) == entry.hash).then_some(entry)
    }
}

/// The canonical JSON of `entry` without its hash, as text: what [`entry_hash`] hashes.
fn canonical_unhashed(entry: &AuditEntry) -> Result<String, TemplateError> {
    let bytes = crate::audit::unhashed_canonical(entry)
        .ok_or_else(|| TemplateError("it cannot be written as JSON".to_owned()))?;
    String::from_utf8(bytes).map_err(|e| TemplateError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn at() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp_nanos(1_765_000_000_123_456_789)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH)
    }

    #[test]
    fn a_filled_template_is_the_entry_the_chain_would_append() {
        let prev = Digest::of_bytes(b"the head");
        let new = NewAuditEntry {
            parent: Some(7),
            kind: "task.completed".into(),
            data: json!({"step": "a", "note": "é ✓ \u{1F600} \"quoted\" \\ \n", "z": [1, 2.5, null]}),
        };
        let template = Template::new(new.clone(), at()).unwrap_or_else(|e| panic!("{e}"));
        let mut head = crate::audit::next_entry(None, NewAuditEntry::new("x", json!({})), at());
        head.seq = 41;
        head.hash = prev.clone();
        let expected = crate::audit::next_entry(Some(&head), new, at());
        let (hash, line) = template.fill(42, &prev);
        assert_eq!(hash, expected.hash);
        assert_eq!(line, serde_json::to_string(&expected).unwrap_or_default());
        assert_eq!(template.entry(42, prev.clone(), hash), Some(expected));
        assert_eq!(template.entry(42, prev, Digest::of_bytes(b"other")), None);
    }

    proptest! {
        /// Whatever the entry holds, filling its template gives the line and the hash the
        /// chain's own arithmetic gives.
        #[test]
        fn templates_fill_to_the_chains_own_entries(
            kind in "[a-z.]{1,20}",
            text in any::<String>(),
            key in any::<String>(),
            parent in proptest::option::of(0u64..1_000_000),
            seq in 0u64..u64::MAX / 2,
        ) {
            let new = NewAuditEntry { parent, kind, data: json!({ key: text, "n": seq }) };
            let template = Template::new(new.clone(), at()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let prev = Digest::of_bytes(&seq.to_le_bytes());
            let mut head = crate::audit::next_entry(None, NewAuditEntry::new("x", json!({})), at());
            head.seq = seq;
            head.hash = prev.clone();
            let expected = crate::audit::next_entry(Some(&head), new, at());
            let (hash, line) = template.fill(seq + 1, &prev);
            prop_assert_eq!(&hash, &expected.hash);
            prop_assert_eq!(line, serde_json::to_string(&expected).unwrap_or_default());
        }
    }
}
