//! What orca last wrote, kept outside the project: for each audit log of a project, how many
//! entries it had and the hash of the last, signed with the user's key. A step (or anyone
//! with write access to the project) can delete a record or restore `.orca/` from an older
//! copy; the chain of each log still verifies then, but it is shorter, older or gone. The
//! checkpoint catches that: `audit verify` reports it, and `run`, `exec resume` and
//! `exec decide` refuse to act on a rolled-back execution (exit 5).
//!
//! The file lives in the user's state directory (`$ORCA_STATE_DIR`, else
//! `$XDG_STATE_HOME/orca`, else `~/.local/state/orca`), under `checkpoints/`, one per project
//! and signing key (named by a digest of both). A project verified by another user or on another machine
//! has none: it verifies as before, and `audit verify` says the rollback check was not possible.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use orca_core::{Digest, ExecutionId, PlanId};
use orca_store::{PublicKey, SignatureRecord};
use serde::{Deserialize, Serialize};

use crate::app::App;
use crate::exit::CliError;

const FORMAT_VERSION: u32 = 1;

/// One log as the checkpoint saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Seen {
    entries: u64,
    head: String,
}

/// The signed file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Checkpoint {
    format_version: u32,
    project: String,
    logs: BTreeMap<String, Seen>,
    signature: Option<SignatureRecord>,
}

impl Checkpoint {
    /// The bytes the signature covers.
    fn statement(&self) -> Vec<u8> {
        let mut text = format!(
            "orca checkpoint v{}\n{}\n",
            self.format_version, self.project
        );
        for (log, seen) in &self.logs {
            text.push_str(&format!("{log} {} {}\n", seen.entries, seen.head));
        }
        text.into_bytes()
    }
}

/// A log found missing, shorter or rewritten against the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rollback {
    /// The log (`plan:…`, `runs:…`, `exec:…`).
    pub(crate) log: String,
    /// What is wrong.
    pub(crate) problem: String,
}

/// What the check found.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// No checkpoint for this project here (another user or machine): nothing to compare.
    NotPossible(String),
    /// Every log the checkpoint knows is there, at least as long, with the same entry at the
    /// position it saw last.
    Intact,
    /// What went missing or back in time.
    RolledBack(Vec<Rollback>),
}

/// orca's state directory (`ORCA_STATE_DIR`, `$XDG_STATE_HOME/orca`, `~/.local/state/orca`).
pub(crate) fn state_dir() -> Option<PathBuf> {
    let set = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    set("ORCA_STATE_DIR")
        .or_else(|| set("XDG_STATE_HOME").map(|d| d.join("orca")))
        .or_else(|| set("HOME").map(|h| h.join(".local").join("state").join("orca")))
}

/// The checkpoint of the project at `root` kept for the user's key `key`: one per project and
/// key, so another key (a new one, another user's under the same state directory) starts its
/// own instead of finding one it did not sign.
fn file_for(root: &Path, key: &PublicKey) -> Option<PathBuf> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut named = root.as_os_str().as_encoded_bytes().to_vec();
    named.push(0);
    named.extend_from_slice(key.to_string().as_bytes());
    let digest = Digest::of_bytes(&named);
    let name: String = digest
        .to_string()
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(32)
        .collect();
    Some(
        state_dir()?
            .join("checkpoints")
            .join(format!("{name}.json")),
    )
}

/// One log as it is now: its id and the hash of every entry, in order.
struct Now {
    hashes: Vec<String>,
}

impl Now {
    fn seen(&self) -> Seen {
        Seen {
            entries: self.hashes.len() as u64,
            head: self.hashes.last().cloned().unwrap_or_default(),
        }
    }

    /// Whether this log still holds, at the position the checkpoint saw last, the entry it saw
    /// there (the log is the one orca wrote, perhaps longer).
    fn extends(&self, seen: &Seen) -> bool {
        seen.entries == 0
            || usize::try_from(seen.entries - 1)
                .ok()
                .and_then(|at| self.hashes.get(at))
                .is_some_and(|h| *h == seen.head)
    }
}

/// Every log of the store with the hashes of its entries.
async fn current(app: &App) -> Result<BTreeMap<String, Now>, CliError> {
    let store = app.store();
    let mut out = BTreeMap::new();
    for id in store.audit_logs().await? {
        let hashes = store
            .entries(id)
            .await?
            .iter()
            .map(|e| e.hash.to_string())
            .collect();
        out.insert(id.to_string(), Now { hashes });
    }
    Ok(out)
}

fn read(path: &Path) -> Option<Checkpoint> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

/// Compares the project's logs with the checkpoint.
///
/// # Errors
///
/// The store cannot be read.
pub(crate) async fn check(app: &App) -> Result<Outcome, CliError> {
    let authority = app.store().authority();
    let Some(key) = authority.public_key() else {
        return Ok(Outcome::NotPossible(
            "no signing key of yours is at hand to check the checkpoint with".to_owned(),
        ));
    };
    let Some(path) = file_for(app.root(), &key) else {
        return Ok(Outcome::NotPossible(
            "no state directory (set XDG_STATE_HOME or HOME)".to_owned(),
        ));
    };
    if !path.exists() {
        return Ok(Outcome::NotPossible(
            "orca has no checkpoint of this project for this user on this machine".to_owned(),
        ));
    }
    let Some(checkpoint) = read(&path) else {
        return Ok(Outcome::RolledBack(vec![Rollback {
            log: path.display().to_string(),
            problem: "the checkpoint file cannot be read".to_owned(),
        }]));
    };
    let signed_by_me = checkpoint
        .signature
        .as_ref()
        .is_some_and(|s| s.is_valid_for(&checkpoint.statement()) && key == s.key);
    if !signed_by_me {
        return Ok(Outcome::RolledBack(vec![Rollback {
            log: path.display().to_string(),
            problem: "the checkpoint is not signed by your key".to_owned(),
        }]));
    }
    let now = current(app).await?;
    let mut found = Vec::new();
    for (log, seen) in &checkpoint.logs {
        let problem = match now.get(log) {
            None => format!(
                "is missing (orca last wrote it with {})",
                orca_core::plural::count(seen.entries, "entry", "entries")
            ),
            Some(cur) if (cur.hashes.len() as u64) < seen.entries => format!(
                "has {}; orca last wrote {} (rolled back or cut)",
                orca_core::plural::count(cur.hashes.len(), "entry", "entries"),
                seen.entries
            ),
            Some(cur) if !cur.extends(seen) => format!(
                "entry {} is not the one orca last wrote (rewritten, or restored from an older copy)",
                seen.entries - 1
            ),
            Some(_) => continue,
        };
        found.push(Rollback {
            log: log.clone(),
            problem,
        });
    }
    Ok(if found.is_empty() {
        Outcome::Intact
    } else {
        Outcome::RolledBack(found)
    })
}

/// Records the project's logs as they are now, signed, if the user's key can sign. Logs the
/// checkpoint knew and the store no longer has are kept as they were (a deletion stays
/// reported until the records come back).
pub(crate) async fn record(app: &App) -> Result<(), CliError> {
    let authority = app.store().authority();
    let Some(key) = authority.public_key() else {
        return Ok(());
    };
    let Some(path) = file_for(app.root(), &key) else {
        return Ok(());
    };
    let mut logs: BTreeMap<String, Seen> = read(&path).map(|c| c.logs).unwrap_or_default();
    for (log, now) in current(app).await? {
        // Only a log that extends what orca last wrote moves on: one found shorter, rewritten
        // or restored stays as the checkpoint saw it, and stays reported.
        if logs.get(&log).is_none_or(|old| now.extends(old)) {
            logs.insert(log, now.seen());
        }
    }
    let mut checkpoint = Checkpoint {
        format_version: FORMAT_VERSION,
        project: app.root().display().to_string(),
        logs,
        signature: None,
    };
    checkpoint.signature = authority.sign(&checkpoint.statement());
    let text = serde_json::to_string_pretty(&checkpoint)
        .map_err(|e| CliError::internal(format!("checkpoint: {e}")))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let io = |e: std::io::Error| {
        CliError::internal(format!(
            "cannot write the checkpoint {}: {e}",
            path.display()
        ))
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let tmp = dir.join(format!(".{}.tmp", std::process::id()));
    crate::settings::write_private(&tmp, &text).map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(io)?;
    Ok(())
}

/// Refuses (exit 5) to act on `exec` of `plan` when the checkpoint says its records went
/// missing or back in time.
///
/// # Errors
///
/// The execution's or its plan's logs were rolled back; the store cannot be read.
pub(crate) async fn refuse_rolled_back(
    app: &App,
    plan: PlanId,
    exec: ExecutionId,
) -> Result<(), CliError> {
    let Outcome::RolledBack(found) = check(app).await? else {
        return Ok(());
    };
    let plan_id = plan.to_string();
    let exec_id = exec.to_string();
    let mine: Vec<&Rollback> = found
        .iter()
        .filter(|r| {
            r.log.contains(&plan_id) || r.log.contains(&exec_id) || r.log.ends_with(".json")
        })
        .collect();
    if let Some(first) = mine.first() {
        return Err(CliError::with(
            crate::exit::Exit::Tampered,
            format!(
                "{}: {} — refusing to act on {exec}: its records went missing or back in time since orca last wrote them; see `orca audit verify --all`",
                first.log, first.problem
            ),
        ));
    }
    Ok(())
}

/// Forgets the checkpoint of the project at `root` for `authority`'s key: called when orca
/// makes the project's `.orca/` anew (`init`, or the first command there), where there is no
/// past to protect — a project deleted and made again at the same path starts afresh.
pub(crate) fn forget(root: &Path, authority: &orca_store::Authority) {
    if let Some(path) = authority.public_key().and_then(|key| file_for(root, &key)) {
        let _ = std::fs::remove_file(path);
    }
}
