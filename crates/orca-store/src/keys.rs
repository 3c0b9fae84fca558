//! Key files: the user's signing key and trusted public keys (ADR 0013).
//!
//! The signing key lives outside every project: `$ORCA_SIGNING_KEY`, else
//! `$XDG_CONFIG_HOME/orca/signing.key`, else `~/.config/orca/signing.key`. It is created with
//! mode 0600 (its directory 0700) and refused if a group or other users can read it. Reads are
//! bounded and only regular files are read.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::signing::{PublicKey, SigningKey, seed_from_hex, seed_to_hex};

/// The largest key file read.
const MAX_KEY_FILE: u64 = 4096;

/// The first line of a key file.
const HEADER: &str = "# orca signing key (ed25519 seed). Keep it private: whoever holds it can approve plans as you.";

/// A key file that cannot be used.
#[derive(Debug, Error)]
#[error("{}: {message}", path.display())]
pub struct KeyError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong, and how to fix it.
    pub message: String,
}

fn key_err(path: &Path, message: impl Into<String>) -> KeyError {
    KeyError {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Where the user's signing key is: `ORCA_SIGNING_KEY`, else `$XDG_CONFIG_HOME/orca/signing.key`,
/// else `$HOME/.config/orca/signing.key`. `None` if none of these variables is set.
#[must_use]
pub fn default_key_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(p) = set("ORCA_SIGNING_KEY") {
        return Some(PathBuf::from(p));
    }
    let config = set("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| set("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("orca").join("signing.key"))
}

/// Reads a whole small regular file, refusing anything else.
fn read_small(path: &Path) -> Result<String, KeyError> {
    let meta = std::fs::metadata(path).map_err(|e| key_err(path, e.to_string()))?;
    if !meta.is_file() {
        return Err(key_err(path, "not a regular file"));
    }
    if meta.len() > MAX_KEY_FILE {
        return Err(key_err(
            path,
            format!("larger than {MAX_KEY_FILE} bytes: not a key file"),
        ));
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_KEY_FILE).read_to_string(&mut text))
        .map_err(|e| key_err(path, e.to_string()))?;
    Ok(text)
}

fn parse_private(path: &Path, text: &str) -> Result<SigningKey, KeyError> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .and_then(seed_from_hex)
        .map(SigningKey::from_seed)
        .ok_or_else(|| key_err(path, "not an orca signing key (expected 64 hex digits)"))
}

/// Reads the signing key at `path`, if the file exists.
///
/// # Errors
///
/// Not a regular file, readable by group or others (with how to fix it), or not a key.
pub fn load(path: &Path) -> Result<Option<SigningKey>, KeyError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(key_err(path, e.to_string())),
    };
    let mode = meta.permissions().mode() & 0o777;
    if meta.is_file() && mode & 0o077 != 0 {
        return Err(key_err(
            path,
            format!(
                "the signing key is readable by other users (mode {mode:04o}): run `chmod 600 {}`",
                path.display()
            ),
        ));
    }
    let text = read_small(path)?;
    parse_private(path, &text).map(Some)
}

/// Reads the signing key at `path`, creating a new one (mode 0600, directory 0700) if there is
/// none. Returns the key and whether it was created.
///
/// # Errors
///
/// As [`load`], or the key cannot be created.
pub fn load_or_create(path: &Path) -> Result<(SigningKey, bool), KeyError> {
    if let Some(key) = load(path)? {
        return Ok((key, false));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| key_err(dir, format!("cannot create the key's directory: {e}")))?;
    }
    let key = SigningKey::generate()
        .map_err(|e| key_err(path, format!("no random source for a new key: {e}")))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| key_err(path, format!("cannot create the signing key: {e}")))?;
    let text = format!(
        "{HEADER}\n# public key: {}\n{}\n",
        key.public(),
        seed_to_hex(&key.seed())
    );
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| key_err(path, format!("cannot write the signing key: {e}")))?;
    Ok((key, true))
}

/// Reads a trusted public key: a file holding `ed25519:<hex>` (or a signing key file, whose
/// public half is used).
///
/// # Errors
///
/// Not a regular file, too large, or holds no key.
pub fn load_public(path: &Path) -> Result<PublicKey, KeyError> {
    let text = read_small(path)?;
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or_default();
    if let Ok(key) = line.parse::<PublicKey>() {
        return Ok(key);
    }
    parse_private(path, &text).map(|k| k.public()).map_err(|_| {
        key_err(
            path,
            "holds no public key (expected `ed25519:` and 64 hex digits)",
        )
    })
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn creates_private_keys_and_refuses_readable_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cfg/orca/signing.key");
        let (key, created) = load_or_create(&path).unwrap();
        assert!(created);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (again, created) = load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(again.public(), key.public());
        assert_eq!(load_public(&path).unwrap(), key.public());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
        let pub_file = dir.path().join("k.pub");
        std::fs::write(&pub_file, format!("{}\n", key.public())).unwrap();
        assert_eq!(load_public(&pub_file).unwrap(), key.public());
        assert!(load_public(dir.path()).is_err());
    }

    #[test]
    fn key_path_prefers_the_explicit_variable() {
        let env = |k: &str| match k {
            "ORCA_SIGNING_KEY" => Some("/k".to_owned()),
            "XDG_CONFIG_HOME" => Some("/x".to_owned()),
            _ => None,
        };
        assert_eq!(default_key_path(&env), Some(PathBuf::from("/k")));
        let env = |k: &str| (k == "HOME").then(|| "/h".to_owned());
        assert_eq!(
            default_key_path(&env),
            Some(PathBuf::from("/h/.config/orca/signing.key"))
        );
    }
}
