//! Short ids in everything printed for people: every full plan or execution id in a table,
//! message, progress line or error becomes its short id among the project's records (its
//! last digits, `orca_services::short_ids`). `--json` keeps full ids (the contract).

use std::sync::{Mutex, OnceLock, PoisonError};

use orca_core::{ExecutionId, PlanId};
use orca_services::short_ids::ShortIds;
use orca_store::{AuditLogId, Store};

#[derive(Default)]
struct Known {
    plans: ShortIds,
    execs: ShortIds,
}

fn known() -> &'static Mutex<Known> {
    static KNOWN: OnceLock<Mutex<Known>> = OnceLock::new();
    KNOWN.get_or_init(|| Mutex::new(Known::default()))
}

/// Reads the ids of every plan and execution that has an audit log (every one: a log is
/// created with its record). Read-only: a directory scan through the port, no listing cache
/// written. A scan that fails leaves the ids at their minimum length; resolving an ambiguous
/// prefix still lists the candidates.
pub(crate) async fn load(store: &dyn Store) {
    let logs = store.audit_logs().await.unwrap_or_default();
    let mut plans = Vec::new();
    let mut execs = Vec::new();
    for log in logs {
        match log {
            AuditLogId::Plan { plan_id } | AuditLogId::Runs { plan_id } => {
                plans.push(plan_id.to_string());
            }
            AuditLogId::Execution {
                plan_id,
                execution_id,
            } => {
                plans.push(plan_id.to_string());
                execs.push(execution_id.to_string());
            }
        }
    }
    let mut k = known().lock().unwrap_or_else(PoisonError::into_inner);
    k.plans = ShortIds::new(plans);
    k.execs = ShortIds::new(execs);
}

/// A plan's short id.
pub(crate) fn plan(id: PlanId) -> String {
    short(&id.to_string())
}

/// An execution's short id.
pub(crate) fn exec(id: ExecutionId) -> String {
    short(&id.to_string())
}

/// A record created by this process (after [`load`]): its id is shortened too.
pub(crate) fn learn_plan(id: PlanId) {
    let mut k = known().lock().unwrap_or_else(PoisonError::into_inner);
    k.plans.insert(id.to_string());
}

/// See [`learn_plan`].
pub(crate) fn learn_exec(id: ExecutionId) {
    let mut k = known().lock().unwrap_or_else(PoisonError::into_inner);
    k.execs.insert(id.to_string());
}

/// The short form of a known id; an id of no known record (a typo, a missing plan) stays
/// whole, so an error names exactly what was asked for.
fn short(full: &str) -> String {
    let k = known().lock().unwrap_or_else(PoisonError::into_inner);
    let ids = if full.starts_with(ExecutionId::PREFIX) {
        &k.execs
    } else {
        &k.plans
    };
    if ids.matching(full).is_empty() {
        full.to_owned()
    } else {
        ids.short(full)
    }
}

/// The length of a hyphenated uuid.
const UUID_LEN: usize = 36;

fn is_uuid(text: &str) -> bool {
    text.len() == UUID_LEN
        && text.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// `text` with every full plan and execution id replaced by its short id.
pub(crate) fn abbreviate(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let found = [PlanId::PREFIX, ExecutionId::PREFIX]
            .iter()
            .filter_map(|p| rest.find(p).map(|i| (i, p.len())))
            .min();
        let Some((i, plen)) = found else {
            out.push_str(rest);
            break;
        };
        out.push_str(&rest[..i]);
        let end = i + plen + UUID_LEN;
        // An id is a whole word, and not a part of a path (a file named in an error must be
        // found as printed): not after `/`, not followed by more id characters, `/` or an
        // extension.
        let bytes = rest.as_bytes();
        let after = bytes.get(end).copied();
        let in_path = (i > 0 && bytes.get(i - 1) == Some(&b'/'))
            || after == Some(b'/')
            || (after == Some(b'.') && bytes.get(end + 1).is_some_and(u8::is_ascii_alphanumeric));
        let whole = rest.get(i + plen..end).is_some_and(is_uuid)
            && !in_path
            && !after.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'-');
        if whole {
            out.push_str(&short(&rest[i..end]));
            rest = &rest[end..];
        } else {
            out.push_str(&rest[i..i + plen]);
            rest = &rest[i + plen..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_ids_become_short_and_nothing_else_changes() {
        let p = PlanId::new();
        let e = ExecutionId::new();
        let unknown = PlanId::new();
        assert_eq!(abbreviate(&unknown.to_string()), unknown.to_string());
        learn_plan(p);
        learn_exec(e);
        let text = format!(
            "run {p} as {e}; plan_xyz and exec_ stay; {p}x stays too; .orca/plans/{p}/x and {e}.json stay"
        );
        let short = abbreviate(&text);
        assert!(short.starts_with(&format!("run {} as {};", plan(p), exec(e))));
        assert!(short.contains("plan_xyz and exec_ stay"));
        assert!(short.contains(&format!("{p}x stays too")));
        assert!(short.ends_with(&format!(".orca/plans/{p}/x and {e}.json stay")));
        assert_eq!(plan(p).len(), "plan_".len() + 8);
    }
}
