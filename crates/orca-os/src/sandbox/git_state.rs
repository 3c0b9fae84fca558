//! The repository state a step may not write (ADR 0041): what of the git directory of the
//! repository a step runs in is bound read-only over itself, and which holes stay writable.
//!
//! In place (the step works in the user's checkout), the common git directory stays writable —
//! the index, `HEAD`, objects and reflogs are the step's work — but its `config`, `hooks/`,
//! `info/`, `refs/` (all but the directory of the checked-out branch, and even there every
//! subdirectory), `packed-refs`, `worktrees/`, `orca-worktrees/`, `modules/` and
//! `objects/info/` are read-only, and the directory itself is pinned by a bind mount so that it
//! cannot be renamed away and replaced.
//!
//! In one of orca's worktrees (`<common>/orca-worktrees/<exec>/steps/<step>`), the whole common
//! directory is read-only but for the step's own: its worktree, its administrative directory
//! (`worktrees/<id>`, whose `commondir` and `gitdir` stay read-only), the directory of its
//! branch's ref and reflog, and `objects/`. The worktree's `.git` file is read-only in both.
//!
//! Everything here is found by reading the file system (no git runs): the `.git` entry above
//! the step's directory, `commondir`, and the `HEAD` of its worktree.

use std::path::{Path, PathBuf};

use super::ref_watch::{RefWatch, quarantine_dir};

/// What the sandbox does to a repository's git state for one child.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct GitState {
    /// Bound over themselves, writable: pins (against rename) and holes in read-only parts.
    pub(crate) pins: Vec<PathBuf>,
    /// Bound over themselves read-only (that mount only: the pins inside stay writable).
    pub(crate) read_only: Vec<PathBuf>,
    /// Directories the step must be able to write (its worktree and its git state), for the
    /// Landlock rules when they lie outside the project root.
    pub(crate) writable: Vec<PathBuf>,
    /// Directories and files to create before they are covered, so that a step cannot create
    /// them (`hooks/`, `info/`, an empty `packed-refs`).
    pub(crate) create_dirs: Vec<PathBuf>,
    pub(crate) create_files: Vec<PathBuf>,
    /// In place: the directory of the checked-out branch's ref as it was, so that what a child
    /// made beside the branch is moved away when it has ended.
    pub(crate) watch: Option<RefWatch>,
}

/// The repository around `dir`: its worktree's top, its administrative git directory and the
/// common git directory (the same for the main worktree).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Repo {
    top: PathBuf,
    admin: PathBuf,
    common: PathBuf,
    /// The top's `.git` is a file (a linked worktree, or a submodule's checkout).
    gitfile: bool,
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim_end().to_owned())
}

/// The repository holding `dir`, from the nearest `.git` above it.
fn find(dir: &Path) -> Option<Repo> {
    let dir = dir.canonicalize().ok()?;
    for top in dir.ancestors() {
        let dot = top.join(".git");
        let Ok(meta) = std::fs::symlink_metadata(&dot) else {
            continue;
        };
        if meta.is_dir() {
            let common = dot.canonicalize().ok()?;
            return Some(Repo {
                top: top.to_path_buf(),
                admin: common.clone(),
                common,
                gitfile: false,
            });
        }
        if meta.is_file() {
            let target = PathBuf::from(read_trimmed(&dot)?.strip_prefix("gitdir: ")?);
            let admin = top.join(target).canonicalize().ok()?;
            let common = match read_trimmed(&admin.join("commondir")) {
                Some(c) => admin.join(c).canonicalize().ok()?,
                None => admin.clone(),
            };
            return Some(Repo {
                top: top.to_path_buf(),
                admin,
                common,
                gitfile: true,
            });
        }
        return None;
    }
    None
}

/// The loose ref the worktree's `HEAD` names (`None`: detached, or not a branch).
fn branch_ref(repo: &Repo) -> Option<PathBuf> {
    let head = read_trimmed(&repo.admin.join("HEAD"))?;
    let name = head.strip_prefix("ref: ")?;
    if !name.starts_with("refs/heads/") || name.split('/').any(|c| c == ".." || c.is_empty()) {
        return None;
    }
    Some(repo.common.join(name))
}

/// The directory holding the loose ref the worktree's `HEAD` names.
fn branch_dir(repo: &Repo) -> Option<PathBuf> {
    Some(branch_ref(repo)?.parent()?.to_path_buf())
}

/// The regular files of `dir` but `own` and git's lock files: the branches beside it.
fn sibling_refs(dir: &Path, own: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.path())
                .filter(|p| p != own && p.extension().is_none_or(|x| x != "lock"))
                .collect()
        })
        .unwrap_or_default()
}

/// The subdirectories of `dir` (none if it cannot be read).
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// What to protect for a child started in `dir`; nothing outside a git repository.
pub(crate) fn protect(dir: &Path) -> GitState {
    let Some(repo) = find(dir) else {
        return GitState::default();
    };
    let c = &repo.common;
    let mut state = GitState::default();
    let exists = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    let own_branch = branch_dir(&repo).filter(|d| d.is_dir());
    let orca_worktrees = c.join("orca-worktrees");
    let isolated = repo.gitfile && repo.top.starts_with(&orca_worktrees);
    if isolated {
        state.read_only.push(c.clone());
        state.pins.push(repo.top.clone());
        state.pins.push(repo.admin.clone());
        state.pins.push(c.join("objects"));
        if let Some(b) = &own_branch {
            // The step's branch is alone in its directory (`orca-step/<exec>/<step>/work`).
            state.pins.push(b.clone());
            if let Ok(rel) = b.strip_prefix(c) {
                let log = c.join("logs").join(rel);
                if log.is_dir() {
                    state.pins.push(log);
                }
            }
        }
        state.writable.clone_from(&state.pins);
    } else {
        state.pins.push(c.clone());
        for name in ["hooks", "info"] {
            state.create_dirs.push(c.join(name));
            state.read_only.push(c.join(name));
        }
        state.create_files.push(c.join("packed-refs"));
        for name in [
            "config",
            "config.worktree",
            "refs",
            "packed-refs",
            "worktrees",
            "orca-worktrees",
            "modules",
            "reftable",
            "shallow",
            "commondir",
        ] {
            let p = c.join(name);
            if exists(&p) {
                state.read_only.push(p);
            }
        }
        if let Some(b) = &own_branch
            && b.starts_with(c.join("refs"))
            && let Some(own) = branch_ref(&repo)
        {
            // The branch's directory stays writable (git renames the new ref over the old),
            // but the branches already beside it do not, and what is made there is moved away
            // when the child has ended.
            state.pins.push(b.clone());
            state.read_only.extend(sibling_refs(b, &own));
            let quarantine = quarantine_dir(c);
            state.create_dirs.push(quarantine.clone());
            state.read_only.push(quarantine);
            state.watch = own
                .file_name()
                .and_then(|name| RefWatch::snapshot(c, b, name.to_os_string()));
        }
        if repo.admin != *c {
            // The user's own linked worktree: its administrative directory is its work.
            state.pins.push(repo.admin.clone());
        }
    }
    // Inside the writable holes, what still must not move.
    let objects_info = c.join("objects").join("info");
    if objects_info.is_dir() {
        state.read_only.push(objects_info);
    }
    if let Some(b) = &own_branch {
        state.read_only.extend(subdirs(b));
    }
    if repo.admin != *c {
        for name in ["commondir", "gitdir", "config.worktree"] {
            let p = repo.admin.join(name);
            if exists(&p) {
                state.read_only.push(p);
            }
        }
    }
    if repo.gitfile {
        state.read_only.push(repo.top.join(".git"));
    }
    let depth = |p: &PathBuf| p.components().count();
    state.pins.sort_by_key(depth);
    state.pins.dedup();
    state.read_only.sort_by_key(depth);
    state.read_only.dedup();
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .env_remove("GIT_DIR")
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn in_place_and_in_an_orca_worktree() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let top = tmp.path().canonicalize().unwrap_or_else(|e| panic!("{e}"));
        git(&top, &["init", "--quiet", "--initial-branch=main"]);
        std::fs::write(top.join("f"), "x").unwrap_or_else(|e| panic!("{e}"));
        git(&top, &["add", "f"]);
        git(&top, &["commit", "--quiet", "-m", "base"]);
        git(&top, &["branch", "other"]);
        let c = top.join(".git");

        let s = protect(&top);
        assert_eq!(s.pins, [c.clone(), c.join("refs/heads")]);
        // The branches beside the checked-out one are read-only; new ones are watched.
        assert!(s.read_only.contains(&c.join("refs/heads/other")), "{s:?}");
        assert!(!s.read_only.contains(&c.join("refs/heads/main")), "{s:?}");
        assert!(s.read_only.contains(&c.join("orca-quarantine")), "{s:?}");
        assert!(s.watch.is_some());
        for p in ["config", "hooks", "info", "refs"] {
            assert!(s.read_only.contains(&c.join(p)), "{p}: {s:?}");
        }
        assert!(s.writable.is_empty());

        let wt = c.join("orca-worktrees/e/steps/a");
        std::fs::create_dir_all(wt.parent().unwrap_or(&wt)).unwrap_or_else(|e| panic!("{e}"));
        git(
            &top,
            &[
                "worktree",
                "add",
                "--quiet",
                "-b",
                "orca-step/e/a/work",
                &wt.display().to_string(),
            ],
        );
        let s = protect(&wt);
        assert_eq!(s.read_only.first(), Some(&c), "{s:?}");
        assert!(s.pins.contains(&wt));
        assert!(s.pins.contains(&c.join("worktrees/a")));
        assert!(
            s.pins.contains(&c.join("refs/heads/orca-step/e/a")),
            "{s:?}"
        );
        assert!(s.read_only.contains(&wt.join(".git")));
        assert!(s.read_only.contains(&c.join("worktrees/a/commondir")));
        // In place again: orca's branches are read-only subdirectories of refs/heads.
        let s = protect(&top);
        assert!(
            s.read_only.contains(&c.join("refs/heads/orca-step")),
            "{s:?}"
        );
        assert!(protect(Path::new("/")).pins.is_empty());
    }
}
