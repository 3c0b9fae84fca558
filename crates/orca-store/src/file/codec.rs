//! Documents on disk: a domain type's JSON plus `"revision"`; decoding names the file of any
//! error; the one mapping of I/O errors and of bounded reads to [`StoreError`].

use std::io;
use std::path::Path;

use orca_core::DocumentError;
use orca_core::redact::Redactor;
use serde::Serialize;

use crate::error::StoreError;
use crate::port::{ListingProblem, Revision, Versioned};
use crate::redaction;

pub(super) fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> StoreError {
    let context = context.into();
    move |e| StoreError::backend(context, e)
}

pub(super) fn corrupt(path: &Path, message: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Encodes a document: `"revision"` first, then the document's own fields.
pub(super) fn encode<T: Serialize>(
    value: &T,
    revision: Revision,
    path: &Path,
) -> Result<Vec<u8>, StoreError> {
    let doc = serde_json::to_value(value)
        .map_err(|e| StoreError::backend(format!("encoding {}", path.display()), e))?;
    let serde_json::Value::Object(fields) = doc else {
        return Err(StoreError::backend(
            format!("encoding {}", path.display()),
            "a document must be a JSON object",
        ));
    };
    let mut bytes = serde_json::to_vec_pretty(&with_revision(fields, revision))
        .map_err(|e| StoreError::backend(format!("encoding {}", path.display()), e))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// A document's fields with `"revision"` first: a file's document, or a snapshot's record.
pub(super) fn with_revision(
    fields: serde_json::Map<String, serde_json::Value>,
    revision: Revision,
) -> serde_json::Value {
    let mut map = serde_json::Map::with_capacity(fields.len() + 1);
    map.insert("revision".into(), revision.0.into());
    map.extend(fields);
    serde_json::Value::Object(map)
}

/// [`encode`] after redacting every string of the document (see [`Redactor::redact_strings`]).
pub(super) fn encode_redacted<T: Serialize>(
    value: &T,
    revision: Revision,
    path: &Path,
    redactor: &Redactor,
) -> Result<Vec<u8>, StoreError> {
    encode(&redacted_document(value, path, redactor)?, revision, path)
}

/// A document as JSON with every string redacted (see [`Redactor::redact_document`]).
pub(super) fn redacted_document<T: Serialize>(
    value: &T,
    path: &Path,
    redactor: &Redactor,
) -> Result<serde_json::Value, StoreError> {
    let doc = serde_json::to_value(value)
        .map_err(|e| StoreError::backend(format!("encoding {}", path.display()), e))?;
    Ok(redactor.redact_document(doc, redaction::STRUCTURAL_KEYS))
}

/// Decodes a document written by [`encode`]: the store strips `"revision"`, the domain type
/// reads the rest strictly (format version first).
pub(super) fn decode<T>(
    path: &Path,
    bytes: &[u8],
    parse: fn(&str) -> Result<T, DocumentError>,
) -> Result<Versioned<T>, StoreError> {
    let mut value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        corrupt(
            path,
            format!("not valid JSON ({e}): the file is corrupt or truncated"),
        )
    })?;
    let Some(map) = value.as_object_mut() else {
        return Err(corrupt(path, "not an orca document (not a JSON object)"));
    };
    let revision = map.remove("revision");
    let text = value.to_string();
    let doc = parse(&text).map_err(|e| corrupt(path, e.to_string()))?;
    let revision = revision
        .as_ref()
        .and_then(serde_json::Value::as_u64)
        .filter(|r| *r >= 1)
        .ok_or_else(|| {
            corrupt(
                path,
                "missing or invalid `revision`: not written by the orca store",
            )
        })?;
    Ok(Versioned {
        value: doc,
        revision: Revision(revision),
    })
}

pub(super) fn read_opt(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    read_bounded(path, crate::bounded::MAX_DOCUMENT)
}

pub(super) fn read_bounded(path: &Path, max: u64) -> Result<Option<Vec<u8>>, StoreError> {
    match crate::bounded::read_regular(path, max) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => Err(corrupt(path, e.to_string())),
        Err(e) => Err(StoreError::backend(
            format!("reading {}", path.display()),
            e,
        )),
    }
}

pub(super) fn problem(path: &Path, e: &StoreError) -> ListingProblem {
    let message = match e {
        StoreError::Corrupt { message, .. } => message.clone(),
        other => other.to_string(),
    };
    ListingProblem {
        location: path.display().to_string(),
        message,
    }
}
