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
    // Written whole to a private temp file, then published with `link`, which fails if the
    // key exists: two orca processes creating the first key at once agree on one (the loser
    // reads the winner's), and no reader ever sees a half-written key.
    static NEXT_TMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT_TMP.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp.{}.{n}", std::process::id()));
    let text = format!(
        "{HEADER}\n# public key: {}\n{}\n",
        key.public(),
        seed_to_hex(&key.seed())
    );
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(text.as_bytes())?;
            file.sync_all()
        });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(key_err(path, format!("cannot write the signing key: {e}")));
    }
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok((key, true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            load(path)?.map(|key| (key, false)).ok_or_else(|| {
                key_err(
                    path,
                    "the signing key vanished while it was created".to_owned(),
                )
            })
        }
        Err(e) => Err(key_err(path, format!("cannot create the signing key: {e}"))),
    }
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

#[cfg(test)]
mod race_tests {
    /// Eight threads create the first key at once: all get the same key, one of them created it.
    #[test]
    fn concurrent_first_use_agrees_on_one_key() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("orca").join("signing.key");
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| super::load_or_create(&path).expect("key")))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("thread"))
                .collect()
        });
        let created = results.iter().filter(|(_, c)| *c).count();
        assert_eq!(created, 1);
        let first = results[0].0.public();
        assert!(results.iter().all(|(k, _)| k.public() == first));
        let leftovers = std::fs::read_dir(path.parent().expect("dir"))
            .expect("read")
            .count();
        assert_eq!(leftovers, 1, "temp files left");
    }
}
