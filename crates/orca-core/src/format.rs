//! The on-disk contract: format versions, canonical JSON and content digests.
//!
//! Every persisted document carries `"format_version": 1`. Readers refuse other versions with a
//! clear error instead of guessing ([`FormatVersion`], [`read_document`]). Canonical JSON (keys
//! sorted, no whitespace) is what digests and audit hashes are computed over, so they do not
//! depend on field order or formatting.

use std::fmt::Write as _;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

use crate::error::DocumentError;

/// The only format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// The `format_version` field of a persisted document. Serializes as [`FORMAT_VERSION`] and
/// refuses any other value when read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FormatVersion;

impl Serialize for FormatVersion {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u32(FORMAT_VERSION)
    }
}

impl<'de> Deserialize<'de> for FormatVersion {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let found = u64::deserialize(deserializer)?;
        if found == u64::from(FORMAT_VERSION) {
            Ok(Self)
        } else {
            Err(serde::de::Error::custom(format_args!(
                "unsupported format_version {found}: this orca reads version {FORMAT_VERSION}"
            )))
        }
    }
}

/// Reads a persisted document: first its `format_version` (so a newer or foreign file gets that
/// error, not a confusing one about some field), then the whole document strictly.
///
/// `T` must require a [`FormatVersion`] field (every persisted document does): a strict parse
/// of `T` that succeeds has then checked the version, and is the answer — one parse, where
/// reading the version first parses the whole document twice (a 1 MB plan: ~5 ms more). Any
/// failure is reported by the two-step reading, so the errors are the same.
///
/// # Errors
///
/// Malformed JSON, a missing or unsupported version, unknown fields or tags.
pub fn read_document<T: DeserializeOwned>(
    text: &str,
    kind: &'static str,
) -> Result<T, DocumentError> {
    if let Ok(doc) = serde_json::from_str::<T>(text) {
        return Ok(doc);
    }
    let value: serde_json::Value = serde_json::from_str(text)?;
    match value.get("format_version") {
        None => return Err(DocumentError::MissingVersion { kind }),
        Some(serde_json::Value::Number(n)) if n.as_u64() == Some(u64::from(FORMAT_VERSION)) => {}
        Some(other) => {
            return Err(DocumentError::UnsupportedVersion {
                kind,
                found: other.to_string(),
                supported: FORMAT_VERSION,
            });
        }
    }
    Ok(serde_json::from_value(value)?)
}

/// Canonical JSON of a value: object keys sorted by their UTF-8 bytes, no insignificant
/// whitespace, numbers and strings as serde_json writes them.
#[must_use]
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    // Only serde_json's own output and ASCII punctuation were written: valid UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Writes the canonical JSON of `value` to `out` (see [`canonical_json`]): keys and scalars
/// are written by serde_json straight into `out`, nothing is allocated per value (a 1 MB plan's
/// digest used to allocate a string for every key and every dependency name). Public: the
/// reference the direct writer (`canonical.rs`) is tested against.
pub fn write_canonical(value: &serde_json::Value, out: &mut Vec<u8>) {
    use serde_json::Value;
    // Writing to memory cannot fail, nor can serializing a string or a number.
    let put = |out: &mut Vec<u8>, bytes: &[u8]| out.extend_from_slice(bytes);
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            put(out, b"{");
            for (i, (key, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    put(out, b",");
                }
                let _ = serde_json::to_writer(&mut *out, key);
                put(out, b":");
                write_canonical(v, out);
            }
            put(out, b"}");
        }
        Value::Array(items) => {
            put(out, b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    put(out, b",");
                }
                write_canonical(item, out);
            }
            put(out, b"]");
        }
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

/// The canonical JSON of `value` written directly, without a `serde_json::Value`; `None`
/// where only the `Value` path can say what it is (an error, or a value serde_json treats
/// specially). [`Digest::of_canonical`] hashes this, or else [`canonical_bytes_via_value`].
/// Public for the tests that pin it to that path.
#[doc(hidden)]
#[must_use]
pub fn canonical_bytes<T: ?Sized + Serialize>(value: &T) -> Option<Vec<u8>> {
    crate::canonical::to_vec(value)
}

/// The canonical JSON of `serde_json::to_value(value)`: the reference [`canonical_bytes`]
/// must equal byte for byte.
///
/// # Errors
///
/// Those of `serde_json::to_value`.
#[doc(hidden)]
pub fn canonical_bytes_via_value<T: ?Sized + Serialize>(
    value: &T,
) -> Result<Vec<u8>, serde_json::Error> {
    let value = serde_json::to_value(value)?;
    let mut out = Vec::new();
    write_canonical(&value, &mut out);
    Ok(out)
}

/// A sha256 digest, shown as `sha256:` followed by 64 lowercase hex digits.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of some bytes.
    #[must_use]
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The digest of a value's canonical JSON: the canonical JSON of `serde_json::to_value`,
    /// written without building that value (a 1.2 MB plan: ~2 ms instead of ~8 ms). A value
    /// the direct writer cannot vouch for (an error, serde_json's raw values) takes the
    /// `Value` path, so the bytes and the errors are always those of `to_value`.
    ///
    /// # Errors
    ///
    /// Only if the value cannot be represented as JSON (maps with non-string keys).
    pub fn of_canonical<T: Serialize>(value: &T) -> Result<Self, serde_json::Error> {
        match canonical_bytes(value) {
            Some(bytes) => Ok(Self::of_bytes(&bytes)),
            None => Ok(Self::of_bytes(&canonical_bytes_via_value(value)?)),
        }
    }

    /// The digest of the canonical JSON of `value`.
    #[must_use]
    pub fn of_canonical_value(value: &serde_json::Value) -> Self {
        let mut out = Vec::new();
        write_canonical(value, &mut out);
        Self::of_bytes(&out)
    }

    /// The raw bytes.
    #[must_use]
    pub const fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Wraps raw bytes.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 64 hex digits, without the `sha256:` prefix.
    #[must_use]
    pub fn hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            let _ = write!(s, "{b:02x}");
        }
        s
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for Digest {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let hex = text
            .strip_prefix("sha256:")
            .ok_or_else(|| format!("invalid digest `{text}`: it must start with `sha256:`"))?;
        if hex.len() != 64 {
            return Err(format!("invalid digest `{text}`: expected 64 hex digits"));
        }
        let mut out = [0u8; 32];
        for (i, slot) in out.iter_mut().enumerate() {
            let pair = hex.get(i * 2..i * 2 + 2).unwrap_or("");
            *slot = u8::from_str_radix(pair, 16)
                .ok()
                .filter(|_| {
                    pair.bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                })
                .ok_or_else(|| format!("invalid digest `{text}`: not lowercase hex"))?;
        }
        Ok(Self(out))
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_recursively() {
        let value: serde_json::Value =
            serde_json::from_str(r#"{"b":1,"a":{"d":[1,{"z":0,"y":"é"}],"c":null}}"#).unwrap();
        assert_eq!(
            canonical_json(&value),
            r#"{"a":{"c":null,"d":[1,{"y":"é","z":0}]},"b":1}"#
        );
    }

    /// The canonical form as it was first written (a string per key and scalar): digests
    /// already recorded in plans and audit logs were computed with it, so the faster writer
    /// must produce the very same bytes.
    fn reference_canonical(value: &serde_json::Value, out: &mut String) {
        use serde_json::Value;
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    reference_canonical(&map[key], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    reference_canonical(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }

    fn any_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<u64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            ".{0,12}".prop_map(serde_json::Value::from),
            "[\\u{0}-\\u{1f}\"\\\\é€😀]{0,6}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::from),
                proptest::collection::btree_map(".{0,8}", inner, 0..8)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn canonical_bytes_and_digests_are_those_of_the_first_writer(value in any_json()) {
            let mut expected = String::new();
            reference_canonical(&value, &mut expected);
            proptest::prop_assert_eq!(&canonical_json(&value), &expected);
            proptest::prop_assert_eq!(
                Digest::of_canonical_value(&value),
                Digest::of_bytes(expected.as_bytes())
            );
        }
    }

    #[test]
    fn digests_round_trip() {
        let d = Digest::of_bytes(b"abc");
        assert_eq!(
            d.to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(d.to_string().parse::<Digest>().unwrap(), d);
        assert!("sha256:zz".parse::<Digest>().is_err());
        assert!(
            "sha256:BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"
                .parse::<Digest>()
                .is_err()
        );
    }

    #[test]
    fn documents_check_their_version_first() {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        #[expect(dead_code, reason = "only deserialized")]
        struct Doc {
            format_version: FormatVersion,
            x: u32,
        }
        assert!(read_document::<Doc>(r#"{"format_version":1,"x":2}"#, "test").is_ok());
        let err = read_document::<Doc>(r#"{"format_version":2,"y":true}"#, "test").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported format_version 2 of this test document: this orca reads version 1"
        );
        let err = read_document::<Doc>(r#"{"x":2}"#, "test").unwrap_err();
        assert!(err.to_string().contains("missing field `format_version`"));
        let err = read_document::<Doc>(r#"{"format_version":1,"x":2,"z":0}"#, "test").unwrap_err();
        assert!(err.to_string().contains("unknown field `z`"), "{err}");
    }
}
