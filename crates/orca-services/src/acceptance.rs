//! A result the human accepts: with worktree isolation an execution's work ends on its
//! integration branch; a person accepts it into their checked-out branch, or discards it.
//!
//! Accepting is bound to the id of the result's git tree the person was shown: a result that
//! changed since is refused, like an approval of changed content (ADR 0040). The decision is
//! the `execution.accepted` entry of the plan's run register, signed by the store's authority
//! over [`acceptance_statement`] (who, when, the tree, the note), and `audit verify` checks it
//! ([`check_entry`]). A second decision on one execution is refused, naming the first. No
//! agent-facing front end (MCP) offers accepting: like approving, it is a human's decision.

use orca_core::{AuditKind, ExecutionId, ExecutionStage, Merged, StepWorkspaces};
use orca_store::AuditLogId;
use orca_store::audit::AuditEntry;
use orca_store::signing::{Authority, SignatureRecord, acceptance_statement};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::error::{Result, ServiceError};
use crate::execution::ExecutionService;

/// A decision already taken on an execution's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// Its entry in the plan's run register.
    pub seq: u64,
    /// `execution.accepted` or `execution.discarded`.
    pub kind: AuditKind,
    /// Who decided.
    pub by: String,
    /// When (RFC 3339).
    pub at: String,
}

impl std::fmt::Display for Decided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.kind == AuditKind::ExecutionAccepted {
            "accepted"
        } else {
            "discarded"
        };
        write!(
            f,
            "{what} by {} at {} (entry {} of the plan's run register)",
            self.by, self.at, self.seq
        )
    }
}

/// Where an execution's result stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultState {
    /// Not completed, or no integration branch (it ran in place, or outside a repository).
    None,
    /// Completed with a result on its branch, waiting for a person: the result's tree.
    Awaiting {
        /// The id of the result's git tree.
        tree: String,
    },
    /// Accepted or discarded.
    Decided(Decided),
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

/// The first accept or discard of `execution` in its plan's run register.
///
/// # Errors
/// The execution or the register cannot be read.
pub async fn decided(
    executions: &ExecutionService,
    execution: ExecutionId,
) -> Result<Option<Decided>> {
    let plan_id = executions.header(execution).await?.value.info().plan_id;
    let entries = executions
        .store()
        .entries(AuditLogId::Runs { plan_id })
        .await?;
    let id = execution.to_string();
    Ok(entries.into_iter().find_map(|e| {
        let kind = AuditKind::parse(&e.kind).filter(|k| {
            matches!(
                k,
                AuditKind::ExecutionAccepted | AuditKind::ExecutionDiscarded
            )
        })?;
        (e.data.get("execution_id").and_then(Value::as_str) == Some(id.as_str())).then(|| Decided {
            seq: e.seq,
            kind,
            by: text(&e.data, "by"),
            at: text(&e.data, "at"),
        })
    }))
}

fn text(data: &Value, key: &str) -> String {
    data.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Where `execution`'s result stands.
///
/// # Errors
/// The execution, the register or the repository cannot be read.
pub async fn state(
    executions: &ExecutionService,
    workspaces: Option<&dyn StepWorkspaces>,
    execution: ExecutionId,
) -> Result<ResultState> {
    if let Some(d) = decided(executions, execution).await? {
        return Ok(ResultState::Decided(d));
    }
    let stage = executions.header(execution).await?.value.stage();
    let Some(ws) = workspaces.filter(|_| stage == ExecutionStage::Completed) else {
        return Ok(ResultState::None);
    };
    Ok(match ws.result_tree(execution).await.ok().flatten() {
        Some(tree) => ResultState::Awaiting { tree },
        None => ResultState::None,
    })
}

async fn refuse_decided(executions: &ExecutionService, execution: ExecutionId) -> Result<()> {
    if let Some(d) = decided(executions, execution).await? {
        return Err(ServiceError::BadInput(format!(
            "execution {execution} was already {d}; nothing was changed"
        )));
    }
    Ok(())
}

fn workspace_error(e: orca_core::WorkspaceError) -> ServiceError {
    ServiceError::BadInput(e.to_string())
}

/// Accepts `execution`'s result, whose tree `tree` the person was shown, into the checked-out
/// branch, then records the signed decision. Returns how it was merged and the entry's seq.
///
/// # Errors
/// Not completed, already decided, no result, a changed result, a dirty working tree, a
/// conflict: refused, nothing changed.
pub async fn accept(
    executions: &ExecutionService,
    workspaces: &dyn StepWorkspaces,
    execution: ExecutionId,
    tree: &str,
    by: &str,
    note: Option<&str>,
) -> Result<(Merged, u64)> {
    refuse_decided(executions, execution).await?;
    let header = executions.header(execution).await?;
    let stage = header.value.stage();
    if stage != ExecutionStage::Completed {
        return Err(ServiceError::ExecutionStage {
            execution,
            stage,
            why: "only a completed execution's result can be accepted",
        });
    }
    let message = format!("orca: accept execution {execution}");
    let merged = workspaces
        .accept(execution, tree, &message)
        .await
        .map_err(workspace_error)?;
    let at = OffsetDateTime::now_utc();
    let statement = acceptance_statement(execution, tree, by, at, note);
    let signature = executions.store().authority().sign(&statement);
    let data = json!({
        "execution_id": execution,
        "tree": tree,
        "by": by,
        "at": rfc3339(at),
        "note": note,
        "merged": merged,
        "signature": signature,
    });
    let seq = executions
        .record_result_decision(
            header.value.info().plan_id,
            AuditKind::ExecutionAccepted,
            data,
        )
        .await?;
    Ok((merged, seq))
}

/// Discards `execution`'s result: its branches, worktrees and refs go; audited. Returns the
/// branches removed.
///
/// # Errors
/// Already decided, or a git failure.
pub async fn discard(
    executions: &ExecutionService,
    workspaces: &dyn StepWorkspaces,
    execution: ExecutionId,
    by: &str,
    note: Option<&str>,
) -> Result<Vec<String>> {
    refuse_decided(executions, execution).await?;
    let header = executions.header(execution).await?;
    if !header.value.stage().is_terminal() {
        return Err(ServiceError::ExecutionStage {
            execution,
            stage: header.value.stage(),
            why: "stop or cancel it before discarding its result",
        });
    }
    let tree = workspaces.result_tree(execution).await.ok().flatten();
    let removed = workspaces
        .discard(execution)
        .await
        .map_err(workspace_error)?;
    executions
        .record_result_decision(
            header.value.info().plan_id,
            AuditKind::ExecutionDiscarded,
            json!({
                "execution_id": execution,
                "tree": tree,
                "by": by,
                "at": rfc3339(OffsetDateTime::now_utc()),
                "note": note,
                "removed": removed,
            }),
        )
        .await?;
    Ok(removed)
}

/// Checks an `execution.accepted` entry's signature over what it records.
///
/// # Errors
/// What is wrong with it.
pub fn check_entry(authority: &Authority, entry: &AuditEntry) -> std::result::Result<(), String> {
    let data = &entry.data;
    let execution = data
        .get("execution_id")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<ExecutionId>().ok())
        .ok_or("its execution_id is missing or malformed")?;
    let at = data
        .get("at")
        .and_then(Value::as_str)
        .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok())
        .ok_or("its time is missing or malformed")?;
    let signature = match data.get("signature") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            serde_json::from_value::<SignatureRecord>(v.clone())
                .map_err(|_| "its signature is malformed")?,
        ),
    };
    let statement = acceptance_statement(
        execution,
        &text(data, "tree"),
        &text(data, "by"),
        at,
        data.get("note").and_then(Value::as_str),
    );
    authority
        .check(&statement, signature.as_ref())
        .map_err(|e| format!("the acceptance of execution {execution}: {e}"))
}
