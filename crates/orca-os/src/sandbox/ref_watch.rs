//! Refs a step makes beside its own branch, in place (ADR 0042).
//!
//! A step working in the user's checkout commits to the checked-out branch: git writes
//! `refs/heads/<branch>.lock` and renames it over `refs/heads/<branch>`, so the directory of
//! that ref must stay writable, and a directory that takes new files takes any name. The
//! branches already in that directory are bound read-only over themselves ([`super::git_state`]);
//! what is new in it when the child has ended — a branch or a directory of branches made beside
//! the checked-out one — is moved out of `refs/` into `<git dir>/orca-quarantine/<stamp>/`, where
//! git no longer sees it and the user can look at it, and is reported. Nothing is deleted: a
//! branch the user made there during the step is moved, not lost.
//!
//! The quarantine directory is made by orca before the child starts and bound read-only for it,
//! so the child cannot replace it with a link; `rename` moves an entry without following it.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The directory of the checked-out branch's ref, as it was before a child started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefWatch {
    /// The common git directory.
    common: PathBuf,
    /// The directory holding the branch's loose ref (`<common>/refs/heads/…`).
    dir: PathBuf,
    /// The branch's own file name in `dir`.
    own: OsString,
    /// The names in `dir` before the child started.
    before: BTreeSet<OsString>,
}

/// Where moved refs go: `<common>/orca-quarantine`.
pub(crate) fn quarantine_dir(common: &Path) -> PathBuf {
    common.join("orca-quarantine")
}

fn names(dir: &Path) -> Option<BTreeSet<OsString>> {
    Some(
        std::fs::read_dir(dir)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect(),
    )
}

impl RefWatch {
    /// What `dir` holds now; `None` when it cannot be read.
    pub(crate) fn snapshot(common: &Path, dir: &Path, own: OsString) -> Option<Self> {
        Some(Self {
            common: common.to_path_buf(),
            dir: dir.to_path_buf(),
            own,
            before: names(dir)?,
        })
    }

    /// The directory watched.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether `name` is the branch's own ref or git's lock of it.
    fn is_own(&self, name: &OsString) -> bool {
        let mut lock = self.own.clone();
        lock.push(".lock");
        *name == self.own || *name == lock
    }

    /// Moves what is new in the directory into the quarantine; returns each moved ref as
    /// `refs/heads/… -> <destination>` (empty when nothing was new).
    pub(crate) fn settle(&self) -> Vec<String> {
        let Some(now) = names(&self.dir) else {
            return Vec::new();
        };
        let new: Vec<&OsString> = now
            .iter()
            .filter(|n| !self.before.contains(*n) && !self.is_own(n))
            .collect();
        if new.is_empty() {
            return Vec::new();
        }
        let quarantine = quarantine_dir(&self.common);
        // A real directory only (orca made it; the child saw it read-only).
        let usable = std::fs::symlink_metadata(&quarantine).is_ok_and(|m| m.file_type().is_dir());
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let batch = quarantine.join(format!("{stamp}-{:08x}", fastrand::u32(..)));
        let rel_dir = self.dir.strip_prefix(&self.common).unwrap_or(&self.dir);
        let mut moved = Vec::new();
        for name in new {
            let from = self.dir.join(name);
            let shown = rel_dir.join(name).display().to_string();
            let to = batch.join(rel_dir).join(name);
            let result = if usable {
                std::fs::create_dir_all(batch.join(rel_dir))
                    .and_then(|()| std::fs::rename(&from, &to))
            } else {
                Err(std::io::Error::other(format!(
                    "{} is not a directory orca made",
                    quarantine.display()
                )))
            };
            match result {
                Ok(()) => moved.push(format!("{shown} -> {}", to.display())),
                Err(e) => {
                    tracing::warn!(path = %from.display(), error = %e, "cannot move a ref a step made");
                    moved.push(format!("{shown} (left in place: {e})"));
                }
            }
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_names_are_moved_and_the_branch_and_its_lock_stay() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let common = tmp.path().join(".git");
        let heads = common.join("refs/heads");
        std::fs::create_dir_all(&heads).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(quarantine_dir(&common)).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(heads.join("main"), "a\n").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(heads.join("other"), "b\n").unwrap_or_else(|e| panic!("{e}"));
        let watch = RefWatch::snapshot(&common, &heads, "main".into())
            .unwrap_or_else(|| panic!("snapshot"));
        assert!(watch.settle().is_empty());
        std::fs::write(heads.join("main.lock"), "c\n").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(heads.join("planted"), "d\n").unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(heads.join("new/deeper")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(heads.join("new/deeper/x"), "e\n").unwrap_or_else(|e| panic!("{e}"));
        let moved = watch.settle();
        assert_eq!(moved.len(), 2, "{moved:?}");
        let left = names(&heads).unwrap_or_default();
        let want: BTreeSet<OsString> = ["main", "main.lock", "other"]
            .into_iter()
            .map(OsString::from)
            .collect();
        assert_eq!(left, want);
        // Moved, not lost.
        let kept: Vec<_> = walk(&quarantine_dir(&common));
        assert!(
            kept.iter().any(|p| p.ends_with("refs/heads/planted")),
            "{kept:?}"
        );
        assert!(
            kept.iter().any(|p| p.ends_with("refs/heads/new/deeper/x")),
            "{kept:?}"
        );
    }

    #[test]
    fn a_linked_quarantine_is_not_used() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let common = tmp.path().join(".git");
        let heads = common.join("refs/heads");
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&heads).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(&elsewhere).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&elsewhere, quarantine_dir(&common))
            .unwrap_or_else(|e| panic!("{e}"));
        let watch = RefWatch::snapshot(&common, &heads, "main".into())
            .unwrap_or_else(|| panic!("snapshot"));
        std::fs::write(heads.join("planted"), "d\n").unwrap_or_else(|e| panic!("{e}"));
        let moved = watch.settle();
        assert!(moved[0].contains("left in place"), "{moved:?}");
        assert!(walk(&elsewhere).is_empty());
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out
    }
}
