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
    /// What happened (`execution.started`, `task.attempt.started`, `tool.call`…; `orca_core::AuditKind`).
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
    /// The log this seal belongs to (signed with the rest, so a seal cannot be moved to
    /// another log). Absent in seals written before ADR 0013.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<crate::port::AuditLogId>,
    /// The signature over [`crate::signing::seal_statement`], if the store signs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<crate::signing::SignatureRecord>,
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

/// The text that replaces a redacted secret.
pub const REDACTED: &str = orca_core::redact::REDACTED;

/// Whether a string contains something that looks like a credential (the shapes of
/// [`orca_core::redact`]: `sk-…`, `ghp_…`, `AKIA…`, `Bearer …`, PEM private keys, URL
/// passwords…).
#[must_use]
pub fn looks_like_secret(text: &str) -> bool {
    orca_core::redact::looks_like_secret(text)
}

/// Applies the redaction rule to entry data: the value of any key named like a secret
/// (`api_key`, `apikey`, `authorization`, `token`, `access_token`, `password`, `secret`,
/// `x-api-key`…, case-insensitive) becomes [`REDACTED`], and so does every credential shape in
/// any string (see [`orca_core::redact`]). Applied before the entry is hashed, so the secret is
/// never in the log. The store first applies its own [`orca_core::redact::Redactor`], which also
/// knows the exact values of the configured secrets.
#[must_use]
pub fn redact(value: serde_json::Value) -> serde_json::Value {
    orca_core::redact::Redactor::new().redact_json(value)
}

/// The all-zero digest: the `prev` of a log's first entry.
#[must_use]
pub const fn zero_digest() -> Digest {
    Digest::from_bytes([0; 32])
}

/// The hash an entry must carry: sha256 over the canonical JSON of the entry without its
/// `hash` field.
#[must_use]
pub fn entry_hash(entry: &AuditEntry) -> Digest {
    // An entry is plain data (strings, numbers, a JSON value, a time RFC 3339 can show).
    Digest::of_canonical(&Unhashed::of(entry)).unwrap_or_else(|_| zero_digest())
}

/// The canonical JSON [`entry_hash`] hashes (`None` if the entry cannot be written as JSON).
#[must_use]
pub fn unhashed_canonical(entry: &AuditEntry) -> Option<Vec<u8>> {
    let unhashed = Unhashed::of(entry);
    orca_core::format::canonical_bytes(&unhashed)
        .or_else(|| orca_core::format::canonical_bytes_via_value(&unhashed).ok())
}

/// The entry without its `hash`, borrowed: the canonical writer takes it straight from
/// `Serialize` — no copy of the data into a new JSON tree on every append and verification.
/// The same bytes as the serialized entry without `hash` (a property test holds them).
#[derive(Serialize)]
struct Unhashed<'a> {
    seq: u64,
    #[serde(with = "time::serde::rfc3339")]
    at: OffsetDateTime,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<u64>,
    kind: &'a str,
    data: &'a serde_json::Value,
    prev: &'a Digest,
}

impl<'a> Unhashed<'a> {
    fn of(entry: &'a AuditEntry) -> Self {
        Self {
            seq: entry.seq,
            at: entry.at,
            parent: entry.parent,
            kind: &entry.kind,
            data: &entry.data,
            prev: &entry.prev,
        }
    }
}

/// [`entry_hash`] as first written: the serialized entry, `hash` removed, as canonical JSON
/// (what the property test compares it with).
#[doc(hidden)]
#[must_use]
pub fn entry_hash_via_value(entry: &AuditEntry) -> Digest {
    let mut value = match serde_json::to_value(entry) {
        Ok(v) => v,
        Err(_) => return zero_digest(),
    };
    if let Some(map) = value.as_object_mut() {
        map.remove("hash");
    }
    Digest::of_canonical_value(&value)
}

/// Builds the entry that follows `last` (or the first one): sequence number, `prev`, redacted
/// data and hash.
#[must_use]
pub fn next_entry(last: Option<&AuditEntry>, new: NewAuditEntry, at: OffsetDateTime) -> AuditEntry {
    let (seq, prev) = match last {
        Some(e) => (e.seq + 1, e.hash.clone()),
        None => (0, zero_digest()),
    };
    let mut entry = AuditEntry {
        seq,
        at,
        parent: new.parent,
        kind: new.kind,
        data: redact(new.data),
        prev,
        hash: zero_digest(),
    };
    entry.hash = entry_hash(&entry);
    entry
}

/// The Merkle root over entry hashes.
///
/// Leaves are the entry hashes themselves; a parent is sha256(`0x01` ‖ left ‖ right). A level
/// with an odd number of nodes carries its last node up unchanged (it is never paired with a
/// copy of itself, so `[a, b, c]` and `[a, b, c, c]` have different roots). The root of no
/// entries is sha256 of the empty string; the root of one entry is its hash.
#[must_use]
pub fn merkle_root(hashes: &[Digest]) -> Digest {
    if hashes.is_empty() {
        return Digest::of_bytes(b"");
    }
    let mut level: Vec<Digest> = hashes.to_vec();
    while level.len() > 1 {
        let mut next = Vec::with_capacity(level.len().div_ceil(2));
        for pair in level.chunks(2) {
            match pair {
                [left, right] => {
                    let mut bytes = Vec::with_capacity(65);
                    bytes.push(1u8);
                    bytes.extend_from_slice(left.bytes());
                    bytes.extend_from_slice(right.bytes());
                    next.push(Digest::of_bytes(&bytes));
                }
                [only] => next.push(only.clone()),
                _ => {}
            }
        }
        level = next;
    }
    level.pop().unwrap_or_else(|| Digest::of_bytes(b""))
}

/// The seal of a list of entries.
#[must_use]
pub fn seal_of(entries: &[AuditEntry], at: OffsetDateTime) -> Seal {
    let hashes: Vec<Digest> = entries.iter().map(|e| e.hash.clone()).collect();
    Seal {
        entries: entries.len() as u64,
        merkle_root: merkle_root(&hashes),
        at,
        log: None,
        signature: None,
    }
}

fn tampered(seq: usize, problem: impl Into<String>) -> VerifyReport {
    VerifyReport::Tampered {
        seq: seq as u64,
        problem: problem.into(),
    }
}

/// Verifies a log from its raw lines (without line terminators) and its seal, if sealed.
///
/// Checks, line by line: the line parses as an entry; its hash matches its content (else the
/// entry was *changed*); its sequence number is its position (a gap means entries were
/// *removed*, a sequence number found again later means the log was *reordered*, a repeated one
/// after a well-chained forged line means that line was *inserted*); its `prev` is the previous
/// line's hash (else the previous entry was changed and re-hashed). Then the seal: more entries
/// than it covers were appended after it, fewer means the tail was *truncated*, and the Merkle
/// root must match. The report names the first bad entry by its position.
#[must_use]
pub fn verify_lines<S: AsRef<str>>(lines: &[S], seal: Option<&Seal>) -> VerifyReport {
    verify_and_parse(lines, seal).0
}

/// [`verify_lines`], with the entries it parsed: all of them when the log is intact, none
/// when it is not (one parse for a reader that needs both, e.g. a runner opening a run).
#[must_use]
pub fn verify_and_parse<S: AsRef<str>>(
    lines: &[S],
    seal: Option<&Seal>,
) -> (VerifyReport, Vec<AuditEntry>) {
    let mut parsed: Vec<Option<AuditEntry>> = Vec::with_capacity(lines.len());
    for line in lines {
        parsed.push(serde_json::from_str::<AuditEntry>(line.as_ref()).ok());
    }
    let mut prev = zero_digest();
    for (i, entry) in parsed.iter().enumerate() {
        let Some(entry) = entry else {
            return (
                tampered(i, format!("line {} is not a valid audit entry", i + 1)),
                Vec::new(),
            );
        };
        if entry_hash(entry) != entry.hash {
            return (
                tampered(
                    i,
                    format!("entry {i} was changed: its hash does not match its content"),
                ),
                Vec::new(),
            );
        }
        let seq = usize::try_from(entry.seq).unwrap_or(usize::MAX);
        if seq > i {
            let later = parsed
                .iter()
                .enumerate()
                .skip(i + 1)
                .find(|(_, e)| e.as_ref().is_some_and(|e| e.seq == i as u64));
            return (
                match later {
                    Some((j, _)) => tampered(
                        i,
                        format!("entries were reordered: entry {i} is at line {}", j + 1),
                    ),
                    None => tampered(
                        i,
                        format!(
                            "entry {i} was removed: line {} holds entry {}",
                            i + 1,
                            entry.seq
                        ),
                    ),
                },
                Vec::new(),
            );
        }
        if seq < i {
            // A repeated sequence number. If this line chains to the line before the previous
            // one, the previous line was forged and inserted; otherwise the log was reordered.
            let inserted = i >= 1
                && seq == i - 1
                && match i.checked_sub(2) {
                    Some(k) => parsed[k].as_ref().is_some_and(|p| p.hash == entry.prev),
                    None => entry.prev == zero_digest(),
                };
            return (
                if inserted {
                    tampered(i - 1, format!("an entry was inserted at line {i}"))
                } else {
                    tampered(
                        i,
                        format!(
                            "entries were reordered: line {} holds entry {}",
                            i + 1,
                            entry.seq
                        ),
                    )
                },
                Vec::new(),
            );
        }
        if entry.prev != prev {
            let at = i.saturating_sub(1);
            return (
                tampered(
                    at,
                    if i == 0 {
                        "entry 0 was changed: its prev is not the zero digest".to_owned()
                    } else {
                        format!(
                            "entry {at} was changed and re-hashed: entry {i} does not chain to it"
                        )
                    },
                ),
                Vec::new(),
            );
        }
        prev = entry.hash.clone();
    }
    let count = parsed.len();
    let Some(seal) = seal else {
        let entries = parsed.into_iter().flatten().collect();
        return (
            VerifyReport::Intact {
                entries: count as u64,
                sealed: false,
            },
            entries,
        );
    };
    let sealed = usize::try_from(seal.entries).unwrap_or(usize::MAX);
    if count < sealed {
        return (
            tampered(
                count,
                format!("the log was truncated: the seal covers {sealed} entries, {count} remain"),
            ),
            Vec::new(),
        );
    }
    if count > sealed {
        return (
            tampered(
                sealed,
                format!("entry {sealed} was appended after the seal"),
            ),
            Vec::new(),
        );
    }
    let entries: Vec<AuditEntry> = parsed.into_iter().flatten().collect();
    if seal_of(&entries, seal.at).merkle_root != seal.merkle_root {
        return (
            tampered(
                0,
                "the seal's merkle root does not match the entries (the log was rewritten)",
            ),
            Vec::new(),
        );
    }
    (
        VerifyReport::Intact {
            entries: count as u64,
            sealed: true,
        },
        entries,
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn log(n: usize) -> Vec<AuditEntry> {
        let mut out: Vec<AuditEntry> = Vec::new();
        for i in 0..n {
            let e = next_entry(
                out.last(),
                NewAuditEntry::new(format!("kind.{i}"), json!({ "i": i }))
                    .with_parent(i.checked_sub(1).map(|p| p as u64)),
                OffsetDateTime::UNIX_EPOCH,
            );
            out.push(e);
        }
        out
    }

    fn lines(entries: &[AuditEntry]) -> Vec<String> {
        entries
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect()
    }

    #[track_caller]
    fn check(lines: &[String], seal: Option<&Seal>, seq: u64, needle: &str) {
        match verify_lines(lines, seal) {
            VerifyReport::Tampered { seq: s, problem } => {
                assert_eq!(s, seq, "{problem}");
                assert!(
                    problem.contains(needle),
                    "{problem} does not mention {needle}"
                );
            }
            other @ VerifyReport::Intact { .. } => panic!("not detected: {other:?}"),
        }
    }

    #[test]
    fn first_entry_chains_to_zero_and_hashes_cover_every_field() {
        let entries = log(3);
        assert_eq!(entries[0].prev, zero_digest());
        assert_eq!(entries[1].prev, entries[0].hash);
        let mut changed = entries[1].clone();
        changed.parent = None;
        assert_ne!(entry_hash(&changed), entries[1].hash);
        assert_eq!(
            verify_lines(&lines(&entries), None),
            VerifyReport::Intact {
                entries: 3,
                sealed: false
            }
        );
    }

    #[test]
    fn hash_is_over_canonical_json_without_hash() {
        let e = &log(1)[0];
        let mut v = serde_json::to_value(e).unwrap();
        v.as_object_mut().unwrap().remove("hash");
        let expected = Digest::of_bytes(orca_core::format::canonical_json(&v).as_bytes());
        assert_eq!(e.hash, expected);
    }

    #[test]
    fn merkle_root_pairs_and_promotes_odd_nodes() {
        let h: Vec<Digest> = (0u8..4).map(|i| Digest::of_bytes(&[i])).collect();
        assert_eq!(merkle_root(&[]), Digest::of_bytes(b""));
        assert_eq!(merkle_root(&h[..1]), h[0]);
        let node = |a: &Digest, b: &Digest| {
            let mut bytes = vec![1u8];
            bytes.extend_from_slice(a.bytes());
            bytes.extend_from_slice(b.bytes());
            Digest::of_bytes(&bytes)
        };
        assert_eq!(merkle_root(&h[..2]), node(&h[0], &h[1]));
        assert_eq!(merkle_root(&h[..3]), node(&node(&h[0], &h[1]), &h[2]));
        let dup = [h[0].clone(), h[1].clone(), h[2].clone(), h[2].clone()];
        assert_ne!(merkle_root(&h[..3]), merkle_root(&dup));
    }

    #[test]
    fn redaction_hides_secret_keys_and_values() {
        let data = json!({
            "API_KEY": "abc", "Authorization": "xyz", "x-api-key": "k", "nested": [{"password": 1, "token": "t"}],
            "text": "use sk-ant-abcdefghijkl now", "bearer": "Bearer abc.def", "fine": "task-12345678 ok",
            "secret": null, "apikey": "q", "access_token": "a"
        });
        let r = redact(data);
        assert_eq!(r["API_KEY"], REDACTED);
        assert_eq!(r["Authorization"], REDACTED);
        assert_eq!(r["x-api-key"], REDACTED);
        assert_eq!(r["nested"][0]["password"], REDACTED);
        assert_eq!(r["nested"][0]["token"], REDACTED);
        // Only the credential is replaced; the text around it stays.
        assert_eq!(r["text"], "use [redacted] now");
        assert_eq!(r["bearer"], "Bearer [redacted]");
        assert_eq!(r["fine"], "task-12345678 ok");
        assert_eq!(r["secret"], serde_json::Value::Null);
        assert_eq!(r["apikey"], REDACTED);
        assert_eq!(r["access_token"], REDACTED);
        let e = next_entry(
            None,
            NewAuditEntry::new("tool.call", json!({"k": "sk-1234567890abcdef"})),
            OffsetDateTime::UNIX_EPOCH,
        );
        assert!(!serde_json::to_string(&e).unwrap().contains("sk-1234567890"));
    }

    #[test]
    fn detects_a_changed_entry() {
        let mut l = lines(&log(5));
        l[2] = l[2].replace("\"i\":2", "\"i\":9");
        check(&l, None, 2, "changed");
    }

    #[test]
    fn detects_a_changed_and_rehashed_entry() {
        let mut entries = log(5);
        entries[2].kind = "forged".into();
        entries[2].hash = entry_hash(&entries[2]);
        check(&lines(&entries), None, 2, "changed and re-hashed");
    }

    #[test]
    fn detects_a_removed_entry() {
        let mut l = lines(&log(5));
        l.remove(2);
        check(&l, None, 2, "removed");
        let mut l = lines(&log(5));
        l.remove(0);
        check(&l, None, 0, "removed");
    }

    #[test]
    fn detects_reordered_entries() {
        let mut l = lines(&log(5));
        l.swap(1, 3);
        check(&l, None, 1, "reordered");
    }

    #[test]
    fn detects_an_inserted_entry() {
        let entries = log(5);
        let forged = next_entry(
            Some(&entries[1]),
            NewAuditEntry::new("forged", json!({})),
            OffsetDateTime::UNIX_EPOCH,
        );
        let mut l = lines(&entries);
        l.insert(2, serde_json::to_string(&forged).unwrap());
        check(&l, None, 2, "inserted");
    }

    #[test]
    fn detects_garbage_lines() {
        let mut l = lines(&log(3));
        l[1] = "{not json".into();
        check(&l, None, 1, "not a valid audit entry");
    }

    #[test]
    fn seal_detects_truncation_appends_and_rewrites() {
        let entries = log(6);
        let seal = seal_of(&entries, OffsetDateTime::UNIX_EPOCH);
        let l = lines(&entries);
        assert_eq!(
            verify_lines(&l, Some(&seal)),
            VerifyReport::Intact {
                entries: 6,
                sealed: true
            }
        );
        check(&l[..4], Some(&seal), 4, "truncated");
        let mut more = entries.clone();
        more.push(next_entry(
            more.last(),
            NewAuditEntry::new("late", json!({})),
            OffsetDateTime::UNIX_EPOCH,
        ));
        check(&lines(&more), Some(&seal), 6, "after the seal");
        // A fully rewritten, self-consistent chain does not match the seal.
        let mut rewritten: Vec<AuditEntry> = Vec::new();
        for e in &entries {
            let n = next_entry(
                rewritten.last(),
                NewAuditEntry::new("other", e.data.clone()),
                e.at,
            );
            rewritten.push(n);
        }
        check(&lines(&rewritten), Some(&seal), 0, "merkle root");
    }
}
