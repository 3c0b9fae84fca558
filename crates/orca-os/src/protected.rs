//! The paths a step must never reach, and the guard of the agent tools: inside the canonical
//! project root, never into orca's records (`<root>/.orca`) nor the user's orca config, state
//! or signing key. (The kernel sandbox, `crate::sandbox::confine`, hides the same paths.)
//!
//! Paths are compared after resolving `..` and symlinks, component by component and without
//! regard to ASCII case (a `.ORCA` on a case-insensitive filesystem is the same directory).
//! Files are opened first and checked after: the real path of the open descriptor (read back
//! from `/proc/self/fd`) must pass the same rule, so a symlink swapped in between the check and
//! the open cannot redirect the tool. Regular files with more than one hard link are refused:
//! another name of the same inode may live in `.orca`, and nothing cheap tells where.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Component, Path, PathBuf};

use orca_core::ToolError;

/// The rule: inside `root`, outside every protected path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathGuard {
    root: PathBuf,
    protected: Vec<PathBuf>,
}

/// Components of a path, ASCII-lowercased, for a case-insensitive prefix test.
fn folded(path: &Path) -> Vec<String> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().to_ascii_lowercase()),
            Component::RootDir => Some("/".to_owned()),
            _ => None,
        })
        .collect()
}

fn starts_with_folded(path: &Path, prefix: &Path) -> bool {
    let (p, q) = (folded(path), folded(prefix));
    p.len() >= q.len() && p[..q.len()] == q[..]
}

impl PathGuard {
    /// A rule for the canonical `root` and the `protected` paths (each is also kept in its
    /// canonical form when it exists).
    #[must_use]
    pub fn new(root: &Path, protected: &[PathBuf]) -> Self {
        let mut all = Vec::new();
        for p in protected {
            if !all.contains(p) {
                all.push(p.clone());
            }
            if let Ok(c) = p.canonicalize()
                && !all.contains(&c)
            {
                all.push(c);
            }
        }
        Self {
            root: root.to_path_buf(),
            protected: all,
        }
    }

    /// The protected paths.
    #[must_use]
    pub fn protected(&self) -> &[PathBuf] {
        &self.protected
    }

    /// Whether `path` (absolute, resolved) is one of the protected paths or under one.
    #[must_use]
    pub fn is_protected(&self, path: &Path) -> bool {
        self.protected.iter().any(|p| starts_with_folded(path, p))
    }

    /// Checks a resolved path: inside the root and not protected.
    ///
    /// # Errors
    ///
    /// A refusal naming `rel` and the reason.
    pub fn check(&self, rel: &str, resolved: &Path) -> Result<(), ToolError> {
        if !resolved.starts_with(&self.root) {
            return Err(ToolError::refused(format!(
                "path `{rel}` is refused: it leads outside the project root"
            )));
        }
        if self.is_protected(resolved) {
            return Err(ToolError::refused(format!(
                "path `{rel}` is refused: it leads into orca's records or the user's orca config, which agents may not read or write"
            )));
        }
        Ok(())
    }

    /// Checks an open file: where its descriptor really is, and its hard links.
    fn check_open(&self, rel: &str, file: &File) -> Result<std::fs::Metadata, ToolError> {
        let real =
            std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).map_err(|e| {
                ToolError::refused(format!(
                    "path `{rel}` is refused: cannot check where it leads (is /proc mounted?): {e}"
                ))
            })?;
        self.check(rel, &real)?;
        let meta = file
            .metadata()
            .map_err(|e| ToolError::new(format!("cannot read `{rel}`: {e}")))?;
        if meta.is_file() && meta.nlink() > 1 {
            return Err(ToolError::refused(format!(
                "path `{rel}` is refused: it has {} hard links, and another name of the same file could be inside orca's records; work on a copy",
                meta.nlink()
            )));
        }
        Ok(meta)
    }

    /// Opens an existing regular file for reading (the last component is never followed) and
    /// checks it. A directory is reported as such; other kinds (FIFOs, devices) are refused.
    ///
    /// # Errors
    ///
    /// A refusal, or the error of the open.
    pub fn open_read(&self, rel: &str, path: &Path) -> Result<(File, u64), ToolError> {
        self.open_existing(rel, path, false)
    }

    /// The same, for reading and writing.
    ///
    /// # Errors
    ///
    /// A refusal, or the error of the open.
    pub fn open_rw(&self, rel: &str, path: &Path) -> Result<(File, u64), ToolError> {
        self.open_existing(rel, path, true)
    }

    fn open_existing(&self, rel: &str, path: &Path, write: bool) -> Result<(File, u64), ToolError> {
        let file = OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| open_error(rel, &e))?;
        let meta = self.check_open(rel, &file)?;
        if meta.is_dir() {
            return Err(ToolError::new(format!("`{rel}` is a directory")));
        }
        if !meta.is_file() {
            return Err(ToolError::refused(format!(
                "path `{rel}` is refused: it is not a regular file"
            )));
        }
        Ok((file, meta.len()))
    }

    /// Opens (creating it if needed) the file `name` in the existing directory `dir` for
    /// writing, without truncating it: the directory is pinned by a descriptor and checked, the
    /// name is never followed, and an existing file must be a regular file with one link.
    ///
    /// # Errors
    ///
    /// A refusal, or the error of the open.
    pub fn create_write(&self, rel: &str, dir: &Path, name: &str) -> Result<File, ToolError> {
        let dir_file = self.make_dirs(rel, dir)?;
        let path = format!("/proc/self/fd/{}/{name}", dir_file.as_raw_fd());
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| open_error(rel, &e))?;
        let meta = self.check_open(rel, &file)?;
        if !meta.is_file() {
            return Err(ToolError::refused(format!(
                "path `{rel}` is refused: it is not a regular file"
            )));
        }
        Ok(file)
    }

    /// Opens the directory `dir`, creating the missing ones on the way one at a time: each is
    /// made inside its parent's checked descriptor and opened without following a link, so a
    /// directory swapped for a symlink meanwhile cannot lead the creation elsewhere.
    fn make_dirs(&self, rel: &str, dir: &Path) -> Result<File, ToolError> {
        let mut missing = Vec::new();
        let mut existing = dir;
        while std::fs::symlink_metadata(existing).is_err() {
            let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                return Err(ToolError::refused(format!("path `{rel}` is refused")));
            };
            missing.push(name.to_owned());
            existing = parent;
        }
        let mut current = self.open_dir(rel, existing)?;
        for name in missing.iter().rev() {
            let path = PathBuf::from(format!("/proc/self/fd/{}", current.as_raw_fd())).join(name);
            match std::fs::create_dir(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(ToolError::new(format!(
                        "cannot create the directory of `{rel}`: {e}"
                    )));
                }
            }
            let next = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
                .open(&path)
                .map_err(|e| open_error(rel, &e))?;
            self.check_open(rel, &next)?;
            current = next;
        }
        Ok(current)
    }

    /// Opens a directory and checks where it really is. Read its entries through
    /// [`PathGuard::dir_path`] so they come from the directory checked.
    ///
    /// # Errors
    ///
    /// A refusal, or the error of the open.
    pub fn open_dir(&self, rel: &str, dir: &Path) -> Result<File, ToolError> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(dir)
            .map_err(|e| open_error(rel, &e))?;
        self.check_open(rel, &file)?;
        Ok(file)
    }

    /// The path that names an open directory itself (not whatever its name leads to now).
    #[must_use]
    pub fn dir_path(dir: &File) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()))
    }
}

fn open_error(rel: &str, e: &std::io::Error) -> ToolError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        ToolError::refused(format!(
            "path `{rel}` is refused: it changed into a symbolic link while being opened"
        ))
    } else {
        ToolError::new(format!("cannot open `{rel}`: {e}"))
    }
}

/// The paths agents may not touch, from the project root and an environment lookup: the
/// project's `.orca`, `$XDG_CONFIG_HOME/orca`, `$HOME/.config/orca`, the file
/// `ORCA_SIGNING_KEY` names, and orca's state (`$ORCA_STATE_DIR`, `$XDG_STATE_HOME/orca`,
/// `$HOME/.local/state/orca`: the checkpoint of what orca last wrote).
#[must_use]
pub fn protected_paths(root: &Path, env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut out = vec![root.join(".orca")];
    let nonempty = |k: &str| env(k).filter(|v| !v.trim().is_empty()).map(PathBuf::from);
    if let Some(x) = nonempty("XDG_CONFIG_HOME").filter(|p| p.is_absolute()) {
        out.push(x.join("orca"));
    }
    if let Some(home) = nonempty("HOME").filter(|p| p.is_absolute()) {
        out.push(home.join(".config").join("orca"));
    }
    out.extend(signing_key_path(root, env));
    // orca's state: the signed checkpoint of what it last wrote (rollback detection).
    if let Some(x) = nonempty("ORCA_STATE_DIR").filter(|p| p.is_absolute()) {
        out.push(x);
    }
    if let Some(x) = nonempty("XDG_STATE_HOME").filter(|p| p.is_absolute()) {
        out.push(x.join("orca"));
    }
    if let Some(home) = nonempty("HOME").filter(|p| p.is_absolute()) {
        out.push(home.join(".local").join("state").join("orca"));
    }
    out
}

/// The file `ORCA_SIGNING_KEY` names, if set (relative to the project root if relative).
#[must_use]
pub fn signing_key_path(root: &Path, env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let key = env("ORCA_SIGNING_KEY").filter(|v| !v.trim().is_empty())?;
    let key = PathBuf::from(key);
    Some(if key.is_absolute() {
        key
    } else {
        root.join(key)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_prefixes_ignore_case_and_whole_components() {
        let g = PathGuard::new(Path::new("/p"), &[PathBuf::from("/p/.orca")]);
        assert!(g.is_protected(Path::new("/p/.orca")));
        assert!(g.is_protected(Path::new("/p/.ORCA/plans/x.json")));
        assert!(g.is_protected(Path::new("/p/.Orca")));
        assert!(!g.is_protected(Path::new("/p/.orcax")));
        assert!(!g.is_protected(Path::new("/p/src/.orca-notes")));
        assert!(g.check("x", Path::new("/q/x")).unwrap_err().refused);
    }

    #[test]
    fn protected_paths_from_env() {
        let env = |k: &str| match k {
            "HOME" => Some("/home/u".to_owned()),
            "XDG_CONFIG_HOME" => Some("/cfg".to_owned()),
            "ORCA_SIGNING_KEY" => Some("/keys/k".to_owned()),
            _ => None,
        };
        let got = protected_paths(Path::new("/p"), &env);
        assert_eq!(
            got,
            [
                "/p/.orca",
                "/cfg/orca",
                "/home/u/.config/orca",
                "/keys/k",
                "/home/u/.local/state/orca"
            ]
            .map(PathBuf::from)
            .to_vec()
        );
    }
}
