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
/// # Errors
///
/// Malformed JSON, a missing or unsupported version, unknown fields or tags.
pub fn read_document<T: DeserializeOwned>(
    text: &str,
    kind: &'static str,
) -> Result<T, DocumentError> {
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
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, out: &mut String) {
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
                if let Some(v) = map.get(key) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
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

    /// The digest of a value's canonical JSON.
    ///
    /// # Errors
    ///
    /// Only if the value cannot be represented as JSON (maps with non-string keys).
    pub fn of_canonical<T: Serialize>(value: &T) -> Result<Self, serde_json::Error> {
        let value = serde_json::to_value(value)?;
        Ok(Self::of_bytes(canonical_json(&value).as_bytes()))
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
