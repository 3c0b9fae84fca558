//! Documents to and from rows: JSON text, revisions as `bigint`, log keys.

use std::path::PathBuf;

use orca_core::DocumentError;
use orca_core::redact::Redactor;
use orca_store::{AuditLogId, Revision, StoreError, Versioned};
use serde::Serialize;

/// Where a row is, for error messages (`postgres plans plan_…`).
pub(crate) fn location(table: &str, key: &str) -> PathBuf {
    PathBuf::from(format!("postgres {table} {key}"))
}

pub(crate) fn corrupt(table: &str, key: &str, message: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        path: location(table, key),
        message: message.into(),
    }
}

/// The JSON text of a document.
pub(crate) fn encode<T: Serialize>(value: &T, what: &str) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::backend(format!("encoding {what}"), e))
}

/// The JSON text of a document after redacting its strings (execution headers and tasks).
pub(crate) fn encode_redacted<T: Serialize>(
    value: &T,
    what: &str,
    redactor: &Redactor,
) -> Result<String, StoreError> {
    let doc = serde_json::to_value(value)
        .map_err(|e| StoreError::backend(format!("encoding {what}"), e))?;
    encode(
        &redactor.redact_document(doc, orca_store::redaction::STRUCTURAL_KEYS),
        what,
    )
}

/// Reads a stored document strictly, with its revision.
pub(crate) fn decode<T>(
    table: &str,
    key: &str,
    doc: &str,
    revision: i64,
    parse: fn(&str) -> Result<T, DocumentError>,
) -> Result<Versioned<T>, StoreError> {
    let value = parse(doc).map_err(|e| corrupt(table, key, e.to_string()))?;
    Ok(Versioned {
        value,
        revision: revision_of(table, key, revision)?,
    })
}

pub(crate) fn revision_of(table: &str, key: &str, revision: i64) -> Result<Revision, StoreError> {
    u64::try_from(revision)
        .ok()
        .filter(|r| *r >= 1)
        .map(Revision)
        .ok_or_else(|| corrupt(table, key, format!("invalid revision {revision}")))
}

pub(crate) fn db_revision(revision: Revision) -> i64 {
    i64::try_from(revision.0).unwrap_or(i64::MAX)
}

/// A serialisable tag (stage, status) as the text stored in its column.
pub(crate) fn tag<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// The primary key of an audit log.
pub(crate) fn log_key(log: AuditLogId) -> String {
    match log {
        AuditLogId::Plan { plan_id } => format!("plan:{plan_id}"),
        AuditLogId::Runs { plan_id } => format!("runs:{plan_id}"),
        AuditLogId::Execution {
            plan_id,
            execution_id,
        } => format!("exec:{plan_id}:{execution_id}"),
    }
}

/// Reads the document of row `key` of `table` (`plans` or `executions`) locked for the rest of
/// the transaction, checks it is still at `expected`, and returns it with its next revision:
/// the start of every compare-and-swap update.
pub(crate) async fn locked_at<T>(
    tx: &tokio_postgres::Transaction<'_>,
    table: &'static str,
    key: &str,
    what: &str,
    expected: Revision,
    parse: fn(&str) -> Result<T, DocumentError>,
) -> Result<(Versioned<T>, Revision), StoreError> {
    let row = tx
        .query_opt(
            &format!("SELECT revision, doc FROM {table} WHERE id = $1 FOR UPDATE"),
            &[&key],
        )
        .await
        .map_err(crate::db(format!("reading {what}")))?
        .ok_or_else(|| StoreError::NotFound {
            what: what.to_owned(),
        })?;
    let stored = decode(table, key, row.get(1), row.get(0), parse)?;
    if stored.revision != expected {
        return Err(orca_store::common::conflict(
            what.to_owned(),
            expected,
            stored.revision,
        ));
    }
    let next = orca_store::common::next_revision(what, stored.revision)?;
    Ok((stored, next))
}
