//! The signing key and the trust roots of this process (ADR 0013).
//!
//! The key is the user's, outside every project (`ORCA_SIGNING_KEY`, else
//! `$XDG_CONFIG_HOME/orca/signing.key`, else `~/.config/orca/signing.key`); it is created by
//! `orca init` and by the commands that approve or seal. Trusted keys are that key and the
//! `--trusted-key` files. Nothing under the project's `.orca/` can be a trust root.

use std::path::{Path, PathBuf};

use orca_store::{Authority, PublicKey, SigningKey, keys};

use crate::exit::CliError;

/// Whether a command may create the signing key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyUse {
    /// Approves or seals: create the key if there is none.
    Sign,
    /// Only reads and verifies: use the key if there is one.
    Verify,
}

fn inside_store(root: &Path, path: &Path) -> bool {
    let store = root.join(orca_store::STORE_DIR);
    let store = store.canonicalize().unwrap_or(store);
    let path = path
        .parent()
        .and_then(|d| d.canonicalize().ok())
        .map_or_else(
            || path.to_path_buf(),
            |d| d.join(path.file_name().unwrap_or_default()),
        );
    path.starts_with(&store)
}

/// The key file's path, if one can be named.
pub(crate) fn key_path() -> Option<PathBuf> {
    keys::default_key_path(&|k| std::env::var(k).ok())
}

/// Loads (or creates) the signing key and the trusted keys. Returns the authority and, if the
/// key was just created, its path.
pub(crate) fn authority(
    root: &Path,
    trusted: &[PathBuf],
    key_use: KeyUse,
) -> Result<(Authority, Option<PathBuf>), CliError> {
    let mut created = None;
    let key: Option<SigningKey> = match key_path() {
        None if key_use == KeyUse::Sign => {
            return Err(CliError::bad_input(
                "there is no place for your signing key: set ORCA_SIGNING_KEY to a file outside the project, or XDG_CONFIG_HOME or HOME",
            ));
        }
        None => None,
        Some(path) => {
            if inside_store(root, &path) {
                return Err(CliError::bad_input(format!(
                    "{}: the signing key must live outside the project's .orca/ (agents' steps run there); set ORCA_SIGNING_KEY or XDG_CONFIG_HOME elsewhere",
                    path.display()
                )));
            }
            match key_use {
                KeyUse::Sign => {
                    let (key, new) = keys::load_or_create(&path)
                        .map_err(|e| CliError::bad_input(e.to_string()))?;
                    if new {
                        created = Some(path);
                    }
                    Some(key)
                }
                KeyUse::Verify => {
                    keys::load(&path).map_err(|e| CliError::bad_input(e.to_string()))?
                }
            }
        }
    };
    let mut others: Vec<PublicKey> = Vec::new();
    for file in trusted {
        if inside_store(root, file) {
            return Err(CliError::bad_input(format!(
                "--trusted-key {}: a key inside the project's .orca/ cannot be a trust root (anything that writes there could vouch for itself)",
                file.display()
            )));
        }
        others.push(
            keys::load_public(file)
                .map_err(|e| CliError::bad_input(format!("--trusted-key {e}")))?,
        );
    }
    Ok((Authority::new(key, others), created))
}

/// The authority, also trusting the policy admin keys the user's config names.
pub(crate) fn with_policy_admins(
    authority: Authority,
    settings: &crate::settings::layers::ApprovalSettings,
) -> Result<Authority, CliError> {
    let mut admins = Vec::new();
    for text in &settings.policy_admin_keys {
        admins.push(text.parse::<PublicKey>().map_err(|e| {
            CliError::bad_input(format!("approval.policy_admin_key `{text}`: {e}"))
        })?);
    }
    Ok(authority.with_policy_admins(admins))
}

/// The approval policy the user's config names, verified with its admin keys; `None` when it
/// names none. A policy that does not verify refuses the command (exit 5): nothing is approved
/// or run under it.
pub(crate) fn approval_policy(
    root: &Path,
    settings: &crate::settings::layers::ApprovalSettings,
    authority: &Authority,
    agents: &orca_agents::Agents,
    isolation: Option<orca_core::Isolation>,
) -> Result<Option<std::sync::Arc<orca_services::policy::PolicyContext>>, CliError> {
    use orca_core::AgentPort as _;
    let Some(path) = &settings.policy else {
        return Ok(None);
    };
    let canonical_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let canonical = path.canonicalize().unwrap_or_else(|_| path.clone());
    if canonical.starts_with(&canonical_root) {
        return Err(CliError::bad_input(format!(
            "approval.policy {}: the policy must be kept outside the project (anything that writes there could change it)",
            path.display()
        )));
    }
    let signed = orca_services::policy::SignedPolicy::load(path, authority)
        .map_err(|e| CliError::with(crate::exit::Exit::Tampered, e.to_string()))?;
    let backends = agents
        .agents()
        .into_iter()
        .filter_map(|a| {
            let kind = agents.profile(&a.id)?.backend.kind().to_owned();
            Some((a.id.to_string(), kind))
        })
        .collect();
    let around = orca_services::policy::Surroundings {
        project: root.file_name().map(|n| n.to_string_lossy().into_owned()),
        backends,
        isolation,
    };
    let requester = orca_core::Requester {
        name: crate::app::user(),
        key: authority.public_key().map(|k| k.to_string()),
    };
    Ok(Some(std::sync::Arc::new(
        orca_services::policy::PolicyContext {
            signed,
            around,
            requester,
        },
    )))
}
