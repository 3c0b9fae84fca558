//! An audit entry's hash is written field by field (`audit::entry_hash`, no copy of its data):
//! it must stay the hash of the serialized entry without `hash`, as canonical JSON — the way it
//! was first computed, and the way every stored chain was hashed.

use orca_core::Digest;
use orca_store::audit::{AuditEntry, entry_hash, entry_hash_via_value};
use proptest::prelude::*;
use serde_json::Value;
use time::OffsetDateTime;

/// Any JSON value: objects with keys in any order (escapes, unicode, keys that sort apart by
/// bytes but not by chars), arrays, strings with control characters, every kind of number.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC*".prop_map(Value::String),
        "[\"\\\\\u{0}-\u{1f}\u{7f}é€😀a-z]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("[a-zA-Zé_\"\\\\\u{1}]{0,6}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn entry() -> impl Strategy<Value = AuditEntry> {
    (
        any::<u64>(),
        0i64..4_000_000_000,
        0u32..1_000_000_000,
        -86_399i32..86_399,
        prop::option::of(any::<u64>()),
        "[a-z._]{1,20}|\\PC{0,12}",
        json(),
        any::<[u8; 32]>(),
    )
        .prop_filter_map(
            "a time and an offset",
            |(seq, secs, nanos, offset, parent, kind, data, prev)| {
                let at = OffsetDateTime::from_unix_timestamp(secs)
                    .ok()?
                    .replace_nanosecond(nanos)
                    .ok()?
                    .to_offset(time::UtcOffset::from_whole_seconds(offset).ok()?);
                Some(AuditEntry {
                    seq,
                    at,
                    parent,
                    kind,
                    data,
                    prev: Digest::from_bytes(prev),
                    hash: Digest::from_bytes([7; 32]),
                })
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn the_hash_is_the_canonical_serialized_entry_without_hash(e in entry()) {
        prop_assert_eq!(entry_hash(&e), entry_hash_via_value(&e));
    }
}

#[test]
fn a_known_entry_keeps_its_hash() {
    // Pinned from the first writer (the serialized entry as canonical JSON): a stored chain's
    // hashes do not change with the writer.
    let e = AuditEntry {
        seq: 41,
        at: OffsetDateTime::from_unix_timestamp(1_764_000_000)
            .unwrap()
            .replace_nanosecond(123_456_789)
            .unwrap(),
        parent: Some(40),
        kind: "task.attempt.completed".to_owned(),
        data: serde_json::json!({"b": 1, "a": [true, null, 1.5, -3], "é": {"z": "\u{1}\"\\"}}),
        prev: Digest::from_bytes([9; 32]),
        hash: Digest::from_bytes([0; 32]),
    };
    assert_eq!(
        entry_hash(&e).to_string(),
        "sha256:b67374b17e6c6b706b792d16af5ee40d20802b4fe4658b8cb0ab84cf0435e6e0"
    );
    assert_eq!(entry_hash_via_value(&e), entry_hash(&e));
}
