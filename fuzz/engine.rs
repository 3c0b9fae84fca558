//! The fuzzing engine shared by the fuzz targets of several crates
//! (`crates/*/tests/fuzz.rs` include it with `#[path]`): seeds from `fuzz/corpus/<target>/`,
//! byte-level and structural mutations, and the "clear error" check.
//!
//! Cases: `ORCA_FUZZ_CASES` (default 16, so the normal test suite stays fast);
//! `cargo xtask fuzz --cases N` runs more.
#![allow(dead_code, reason = "each fuzz target file uses a different part")]

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde_json::Value;

const DEFAULT_CASES: u32 = 16;

/// Tokens worth inserting: JSON and TOML syntax, odd numbers and characters, bad versions.
const TOKENS: &[&[u8]] = &[
    b"\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b"=",
    b"null",
    b"-1",
    b"1e400",
    b"-99999999999999999999",
    b"\\u0000",
    "\u{202e}\u{e9}\u{1f980}\u{0}".as_bytes(),
    &[0xff, 0xfe],
    b"\"format_version\": 99,",
    b"[agents.x]\n",
];

pub(crate) fn cases() -> u32 {
    std::env::var("ORCA_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

pub(crate) fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

pub(crate) fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

/// The seed files of a target, sorted by name.
pub(crate) fn corpus(target: &str) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir(target))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!seeds.is_empty(), "no seeds in fuzz/corpus/{target}");
    seeds
}

/// One byte-level mutation.
#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
    Duplicate(usize, usize),
}

pub(crate) fn mutation() -> impl Strategy<Value = Mutation> {
    let interesting = prop_oneof![
        3 => prop::sample::select(TOKENS.iter().map(|t| t.to_vec()).collect::<Vec<_>>()),
        1 => proptest::collection::vec(any::<u8>(), 1..8),
    ];
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        (any::<usize>(), interesting).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 1usize..32).prop_map(|(i, n)| Mutation::Delete(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 1usize..64).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
    ]
}

pub(crate) fn apply(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = bytes.len().max(1);
        match m {
            Mutation::Flip(i, x) => {
                if !bytes.is_empty() {
                    let i = i % bytes.len();
                    bytes[i] ^= x;
                }
            }
            Mutation::Insert(i, b) => {
                let i = i % (bytes.len() + 1);
                bytes.splice(i..i, b.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let i = i % len;
                let end = (i + n).min(bytes.len());
                if i < end {
                    bytes.drain(i..end);
                }
            }
            Mutation::Truncate(i) => bytes.truncate(i % len),
            Mutation::Duplicate(i, n) => {
                let i = i % len;
                let end = (i + n).min(bytes.len());
                if i < end {
                    let copy = bytes[i..end].to_vec();
                    bytes.splice(end..end, copy);
                }
            }
        }
    }
    bytes
}

/// Replaces the value at a pseudo-random path of a JSON document with another value.
pub(crate) fn replace_value(node: &mut Value, pick: u64, with: Value) {
    let descend = !pick.is_multiple_of(3);
    let k = usize::try_from(pick / 3).unwrap_or(0);
    match node {
        Value::Object(m) if descend && !m.is_empty() => {
            let len = m.len();
            if let Some(child) = m.values_mut().nth(k % len) {
                replace_value(child, pick / 3, with);
            }
        }
        Value::Array(a) if descend && !a.is_empty() => {
            let len = a.len();
            replace_value(&mut a[k % len], pick / 3, with);
        }
        _ => *node = with,
    }
}

pub(crate) fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        Just(serde_json::json!([])),
        Just(serde_json::json!({})),
        Just(serde_json::json!({ "status": "running" })),
    ]
}

/// A fuzzed input derived from a target's seeds.
pub(crate) fn input(target: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let seeds = corpus(target);
    let n = seeds.len();
    let s1 = seeds.clone();
    let mutated = (0..n, proptest::collection::vec(mutation(), 1..6))
        .prop_map(move |(i, ms)| apply(s1[i].clone(), &ms));
    let s2 = seeds;
    let structural = (0..n, any::<u64>(), json_leaf()).prop_map(move |(i, pick, with)| {
        let Ok(mut doc) = serde_json::from_slice::<Value>(&s2[i]) else {
            return s2[i].clone();
        };
        replace_value(&mut doc, pick, with);
        serde_json::to_vec(&doc).unwrap()
    });
    prop_oneof![
        4 => mutated,
        3 => structural,
        1 => proptest::collection::vec(any::<u8>(), 0..256),
    ]
}

/// A clear error: one non-empty line.
#[track_caller]
pub(crate) fn clear(message: &str) {
    assert!(!message.trim().is_empty(), "an empty error message");
    assert!(!message.contains('\n'), "a multi-line error: {message:?}");
}
