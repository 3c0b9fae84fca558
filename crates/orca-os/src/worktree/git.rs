//! Running `git` for [`super::GitWorktrees`]: orca's own short commands, which run outside the
//! sandbox, so nothing a step can write may steer them (ADR 0041).
//!
//! git runs programs named in its configuration: hooks (`.git/hooks`, `core.hooksPath`,
//! `hook.<name>.command`), `core.fsmonitor`, the filter, diff and merge drivers that
//! `.gitattributes` selects (`filter.<x>.clean|smudge|process`, `diff.<x>.textconv|command`,
//! `merge.<x>.driver`), `diff.external`, pagers, editors, credential helpers, signing programs,
//! and through transports ssh and remote helpers. Each of orca's commands therefore gets:
//!
//! * an environment of its own: `PATH`, the home and locale variables, nothing else of orca's
//!   (no key, no `GIT_*` that would redirect it), with `GIT_CONFIG_NOSYSTEM`,
//!   `GIT_CONFIG_GLOBAL=/dev/null` and `GIT_ATTR_NOSYSTEM` so that only the repository's own
//!   config is read, and no pager, editor, prompt, replace refs or lazy fetch;
//! * fixed settings on the command line ([`FIXED`]), which win over every config file: no
//!   hooks, no fsmonitor, no attributes file, no external diff, no signing, no transport;
//! * for every driver or hook **named in the repository's config** (read first, with the same
//!   settings: `git config --list --includes`), an empty command in its place, so that an
//!   attribute selecting it runs nothing.
//!
//! A command in a worktree directory first checks that the directory's `.git` file points into
//! the repository's own `worktrees/` (a step could otherwise point it at a repository it made).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use orca_core::WorkspaceError;
use tokio::process::Command;

/// Settings given to every git orca runs, on its command line (they win over config files).
pub(crate) const FIXED: &[&str] = &[
    "user.name=orca",
    "user.email=orca@localhost",
    "core.fsmonitor=false",
    "core.useBuiltinFSMonitor=false",
    "core.hooksPath=/dev/null",
    "core.attributesFile=/dev/null",
    "core.pager=cat",
    "core.editor=:",
    "core.askPass=",
    "core.sshCommand=false",
    "core.untrackedCache=false",
    "sequence.editor=:",
    "credential.helper=",
    "diff.external=",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "log.showSignature=false",
    "merge.verifySignatures=false",
    "merge.stat=false",
    "submodule.recurse=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "protocol.allow=never",
];

/// Variables of orca's environment a git command keeps (with `LC_*`).
const KEPT_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "XDG_CONFIG_HOME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
];

/// Variables every git command gets.
const SET_ENV: &[(&str, &str)] = &[
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_ATTR_NOSYSTEM", "1"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_PAGER", "cat"),
    ("PAGER", "cat"),
    ("GIT_EDITOR", ":"),
    ("GIT_NO_REPLACE_OBJECTS", "1"),
    ("GIT_NO_LAZY_FETCH", "1"),
    ("GIT_PROTOCOL_FROM_USER", "0"),
];

/// The command-line setting that makes config key `key` (as `git config --list` prints it)
/// run nothing, if it names a program git may run.
pub(crate) fn neutralized(key: &str) -> Vec<String> {
    let lower = key.to_ascii_lowercase();
    let (Some((section, rest)), Some(last)) = (lower.split_once('.'), lower.rsplit('.').next())
    else {
        return Vec::new();
    };
    // `section.sub.last` with the subsection as written (it is case-sensitive).
    let sub = key
        .get(section.len() + 1..key.len().saturating_sub(last.len() + 1))
        .filter(|_| rest.contains('.'));
    let Some(sub) = sub else {
        return match (section, last) {
            // `pager.<cmd>` has no subsection: `pager.log = evil`.
            ("pager", _) => vec![format!("{key}=false")],
            _ => Vec::new(),
        };
    };
    match (section, last) {
        ("filter", "clean" | "smudge" | "process") => vec![
            format!("filter.{sub}.{last}="),
            format!("filter.{sub}.required=false"),
        ],
        ("diff", "textconv" | "command") | ("merge", "driver") | ("trailer", "command" | "cmd") => {
            vec![format!("{section}.{sub}.{last}=")]
        }
        ("credential", "helper") => vec![format!("credential.{sub}.helper=")],
        ("hook", "command") => vec![
            format!("hook.{sub}.command=true"),
            format!("hook.{sub}.enabled=false"),
        ],
        _ => Vec::new(),
    }
}

/// The user's own ignore file (`core.excludesFile` of the global config), which orca's git
/// keeps reading: it only lists patterns.
fn global_excludes() -> Option<&'static str> {
    static FILE: OnceLock<Option<String>> = OnceLock::new();
    FILE.get_or_init(|| {
        let mut cmd = std::process::Command::new("git");
        cmd.env_clear();
        for (k, v) in std::env::vars_os() {
            if ["PATH", "HOME", "XDG_CONFIG_HOME"].contains(&k.to_string_lossy().as_ref()) {
                cmd.env(k, v);
            }
        }
        let out = cmd
            .args(["-C", "/", "config", "--global", "--path", "--get"])
            .arg("core.excludesFile")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (out.status.success() && !path.is_empty() && !path.contains('\n')).then_some(path)
    })
    .as_deref()
}

/// A git command with orca's environment and fixed settings, in `dir`.
fn command(dir: &Path, extra: &[String]) -> Command {
    let mut cmd = Command::new("git");
    cmd.env_clear();
    for (k, v) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if KEPT_ENV.contains(&name.as_ref()) || name.starts_with("LC_") {
            cmd.env(k, v);
        }
    }
    cmd.envs(SET_ENV.iter().copied());
    cmd.arg("--no-pager").arg("-C").arg(dir);
    for setting in FIXED {
        cmd.arg("-c").arg(setting);
    }
    if let Some(file) = global_excludes() {
        cmd.arg("-c").arg(format!("core.excludesFile={file}"));
    }
    for setting in extra {
        cmd.arg("-c").arg(setting);
    }
    cmd.stdin(std::process::Stdio::null()).kill_on_drop(true);
    cmd
}

/// The settings that neutralize every driver and hook the config in `dir` names.
async fn neutralizing(dir: &Path) -> Result<Vec<String>, WorkspaceError> {
    let out = command(dir, &[])
        .args(["config", "--list", "--includes", "--name-only", "-z"])
        .output()
        .await
        .map_err(|e| WorkspaceError::Git(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(WorkspaceError::Git(format!(
            "cannot read the git config in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let mut settings: Vec<String> = out
        .stdout
        .split(|b| *b == 0)
        .filter_map(|k| std::str::from_utf8(k).ok())
        .flat_map(neutralized)
        .collect();
    settings.sort();
    settings.dedup();
    Ok(settings)
}

/// Creates the parent directory of `dir`.
pub(super) async fn create_parent(dir: &Path) -> Result<(), WorkspaceError> {
    if let Some(parent) = dir.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| WorkspaceError::Git(format!("cannot create {}: {e}", parent.display())))?;
    }
    Ok(())
}

/// The files a merge left unmerged in the worktree `dir` (empty when there is no conflict).
pub(super) async fn unmerged(dir: &Path) -> Vec<String> {
    git(
        dir,
        &[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--name-only",
            "--diff-filter=U",
        ],
    )
    .await
    .unwrap_or_default()
    .lines()
    .filter(|l| !l.is_empty())
    .map(str::to_owned)
    .collect()
}

/// Checks that the linked worktree `dir` belongs to the repository whose common git directory
/// is `common`: its `.git` file must name a directory under `<common>/worktrees/`.
pub(super) fn check_gitfile(dir: &Path, common: &Path) -> Result<(), WorkspaceError> {
    let file = dir.join(".git");
    let refused = |why: String| {
        WorkspaceError::Git(format!("refusing to run git in {}: {why}", dir.display()))
    };
    let meta = std::fs::symlink_metadata(&file)
        .map_err(|e| refused(format!("cannot read its .git file: {e}")))?;
    if !meta.is_file() {
        return Err(refused("its .git is not a file".to_owned()));
    }
    let text = std::fs::read_to_string(&file)
        .map_err(|e| refused(format!("cannot read its .git file: {e}")))?;
    let target = text
        .trim_end()
        .strip_prefix("gitdir: ")
        .map(PathBuf::from)
        .ok_or_else(|| refused("its .git file names no gitdir".to_owned()))?;
    let target = if target.is_absolute() {
        target
    } else {
        dir.join(target)
    };
    let inside = target
        .canonicalize()
        .ok()
        .zip(common.join("worktrees").canonicalize().ok())
        .is_some_and(|(t, w)| t.parent() == Some(w.as_path()));
    if inside {
        Ok(())
    } else {
        Err(refused(format!(
            "its .git file points at {}, outside the repository's worktrees",
            target.display()
        )))
    }
}

/// Runs `git` in `dir` and returns its standard output; a non-zero exit is an error holding
/// the command and its standard error. See the module documentation for what it runs with.
pub(super) async fn git(dir: &Path, args: &[&str]) -> Result<String, WorkspaceError> {
    run(dir, None, args).await
}

/// [`git`] with `GIT_INDEX_FILE` set to `index`: a temporary index of orca's own, so the
/// repository's index is never read as the one to update nor written.
pub(super) async fn git_with_index(
    dir: &Path,
    index: &Path,
    args: &[&str],
) -> Result<String, WorkspaceError> {
    run(dir, Some(index), args).await
}

/// [`git`]'s standard output whether or not it succeeded (`git merge-tree` reports conflicts
/// with a non-zero exit); empty if it cannot run.
pub(super) async fn git_status_output(dir: &Path, args: &[&str]) -> String {
    let Ok(extra) = neutralizing(dir).await else {
        return String::new();
    };
    command(dir, &extra)
        .args(args)
        .output()
        .await
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default()
}

async fn run(dir: &Path, index: Option<&Path>, args: &[&str]) -> Result<String, WorkspaceError> {
    let extra = neutralizing(dir).await?;
    let mut cmd = command(dir, &extra);
    if let Some(index) = index {
        cmd.env("GIT_INDEX_FILE", index);
    }
    let out = cmd
        .args(args)
        .output()
        .await
        .map_err(|e| WorkspaceError::Git(format!("cannot run git: {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(WorkspaceError::Git(format!(
            "git {} failed in {}: {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drivers_and_hooks_named_in_config_are_emptied() {
        assert_eq!(
            neutralized("filter.Evil.clean"),
            ["filter.Evil.clean=", "filter.Evil.required=false"]
        );
        assert_eq!(
            neutralized("filter.a.b.process"),
            ["filter.a.b.process=", "filter.a.b.required=false"]
        );
        assert_eq!(neutralized("diff.x.textconv"), ["diff.x.textconv="]);
        assert_eq!(neutralized("diff.x.command"), ["diff.x.command="]);
        assert_eq!(neutralized("merge.x.driver"), ["merge.x.driver="]);
        assert_eq!(
            neutralized("credential.https://h.helper"),
            ["credential.https://h.helper="]
        );
        assert_eq!(
            neutralized("hook.lint.command"),
            ["hook.lint.command=true", "hook.lint.enabled=false"]
        );
        assert_eq!(neutralized("pager.log"), ["pager.log=false"]);
        assert!(neutralized("user.name").is_empty());
        assert!(neutralized("diff.x.binary").is_empty());
        assert!(neutralized("remote.origin.url").is_empty());
        assert!(neutralized("core").is_empty());
    }
}
