//! Verifying a log with its signed seal (ADR 0013), and building signed seals.
//!
//! [`crate::audit::verify_lines`] checks the chain and the seal's count and root; this adds
//! what the seal's signature binds: the seal names *this* log, and its signature verifies with
//! a trusted key. Seal problems start with `seal:` so a caller can name the seal file.

use time::OffsetDateTime;

use crate::audit::{self, AuditEntry, Seal, VerifyReport};
use crate::port::AuditLogId;
use crate::signing::{Authority, seal_statement};

/// The seal of `entries` of `log`, signed by the authority's key (if it has one).
#[must_use]
pub fn signed_seal(
    log: AuditLogId,
    entries: &[AuditEntry],
    at: OffsetDateTime,
    authority: &Authority,
) -> Seal {
    let mut seal = audit::seal_of(entries, at);
    seal.log = Some(log);
    seal.signature = authority.sign(&seal_statement(
        log,
        seal.entries,
        &seal.merkle_root,
        seal.at,
    ));
    seal
}

/// Verifies a log's lines and its seal, including the seal's log id and signature.
#[must_use]
pub fn verify_log<S: AsRef<str>>(
    log: AuditLogId,
    lines: &[S],
    seal: Option<&Seal>,
    authority: &Authority,
) -> VerifyReport {
    verify_log_entries(log, lines, seal, authority).0
}

/// [`verify_log`], with the entries parsed on the way: all of them when the log is intact,
/// none otherwise (see [`crate::AuditStore::verified_entries`]).
#[must_use]
pub fn verify_log_entries<S: AsRef<str>>(
    log: AuditLogId,
    lines: &[S],
    seal: Option<&Seal>,
    authority: &Authority,
) -> (VerifyReport, Vec<crate::audit::AuditEntry>) {
    let (report, entries) = audit::verify_and_parse(lines, seal);
    let Some(seal) = seal else {
        return (report, entries);
    };
    // The seal's own problems first: a seal moved from another log also mismatches its root.
    let problem = match seal.log {
        Some(named) if named != log => Some(format!(
            "seal: it belongs to the {named}, not to the {log} (logs or seals were swapped)"
        )),
        None if authority.requires_signatures() => {
            Some("seal: it names no log and is not signed (an old or forged seal)".to_owned())
        }
        _ => None,
    }
    .or_else(|| {
        authority
            .check(
                &seal_statement(log, seal.entries, &seal.merkle_root, seal.at),
                seal.signature.as_ref(),
            )
            .err()
            .map(|e| format!("seal: {e}"))
    });
    match problem {
        Some(problem) => (
            VerifyReport::Tampered {
                seq: seal.entries,
                problem,
            },
            Vec::new(),
        ),
        None => (report, entries),
    }
}
