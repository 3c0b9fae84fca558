//! The suite format (`SUITE/suite.toml`, `docs/eval.md`): tasks, each a directory copied fresh
//! for every trial, a request or a plan, and a hidden check; and the suite's digest.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use orca_core::Digest;
use serde::Deserialize;

use crate::exit::CliError;

/// The default time a trial may take, end to end.
const DEFAULT_TIMEOUT_SECS: u64 = 900;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    name: String,
    /// A config (`.orca/config.toml`) every trial gets: the agents' setup.
    #[serde(default)]
    config: Option<PathBuf>,
    #[serde(default, rename = "task")]
    tasks: Vec<TaskFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskFile {
    id: String,
    repo: PathBuf,
    request: String,
    #[serde(default)]
    plan: Option<PathBuf>,
    check: PathBuf,
    #[serde(default)]
    timeout_secs: Option<u64>,
}

/// A suite, read and checked: every path exists and is inside the suite's directory.
#[derive(Debug, Clone)]
pub(crate) struct Suite {
    pub(crate) name: String,
    /// The suite's directory, absolute.
    pub(crate) dir: PathBuf,
    pub(crate) config: Option<PathBuf>,
    pub(crate) tasks: Vec<Task>,
}

/// One task of a suite (paths absolute).
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub(crate) id: String,
    pub(crate) repo: PathBuf,
    pub(crate) request: String,
    pub(crate) plan: Option<PathBuf>,
    pub(crate) check: PathBuf,
    pub(crate) timeout_secs: u64,
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// `path` (relative to the suite) resolved inside `dir`, or why not.
fn inside(dir: &Path, path: &Path, what: &str) -> Result<PathBuf, String> {
    if path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
    {
        return Err(format!(
            "{what} `{}` must be a path inside the suite's directory (relative, without `..`)",
            path.display()
        ));
    }
    let full = dir.join(path);
    if !full.exists() {
        return Err(format!("{what} `{}` does not exist", path.display()));
    }
    Ok(full)
}

impl Suite {
    /// Reads `SUITE/suite.toml` (or the file itself when `path` names one).
    pub(crate) fn load(path: &Path) -> Result<Self, CliError> {
        let file = if path.is_dir() {
            path.join("suite.toml")
        } else {
            path.to_path_buf()
        };
        let text = std::fs::read_to_string(&file).map_err(|e| {
            CliError::bad_input(format!("{}: cannot read the suite: {e}", file.display()))
        })?;
        let parsed: SuiteFile = toml::from_str(&text).map_err(|e| {
            CliError::bad_input(format!("{}: not a valid suite: {e}", file.display()))
        })?;
        let dir = file
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
            .canonicalize()
            .map_err(|e| CliError::bad_input(format!("{}: {e}", file.display())))?;
        let bad = |msg: String| CliError::bad_input(format!("{}: {msg}", file.display()));
        if !valid_id(&parsed.name) {
            return Err(bad(format!(
                "name `{}`: use lowercase letters, digits, `-` and `_`",
                parsed.name
            )));
        }
        if parsed.tasks.is_empty() {
            return Err(bad("no [[task]]".to_owned()));
        }
        let config = match &parsed.config {
            Some(c) => Some(inside(&dir, c, "config").map_err(bad)?),
            None => None,
        };
        let mut seen = BTreeSet::new();
        let mut tasks = Vec::with_capacity(parsed.tasks.len());
        for t in parsed.tasks {
            let at = |msg: String| bad(format!("task `{}`: {msg}", t.id));
            if !valid_id(&t.id) {
                return Err(at(
                    "id: use lowercase letters, digits, `-` and `_`".to_owned()
                ));
            }
            if !seen.insert(t.id.clone()) {
                return Err(at("a second task with this id".to_owned()));
            }
            let repo = inside(&dir, &t.repo, "repo").map_err(at)?;
            if !repo.is_dir() {
                return Err(at(format!(
                    "repo `{}` is not a directory",
                    t.repo.display()
                )));
            }
            let check = inside(&dir, &t.check, "check").map_err(at)?;
            let plan = match &t.plan {
                Some(p) => Some(inside(&dir, p, "plan").map_err(at)?),
                None => None,
            };
            // What is inside `repo` reaches the agents: the check and the plan's file must not.
            for (what, path) in [("check", Some(&check)), ("plan", plan.as_ref())] {
                if let Some(path) = path
                    && path.starts_with(&repo)
                {
                    return Err(at(format!(
                        "{what} `{}` is inside repo `{}`: the agents would see it",
                        path.display(),
                        t.repo.display()
                    )));
                }
            }
            if t.request.trim().is_empty() {
                return Err(at("request is empty".to_owned()));
            }
            let timeout_secs = t.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
            if timeout_secs == 0 {
                return Err(at("timeout_secs must be at least 1".to_owned()));
            }
            tasks.push(Task {
                id: t.id,
                repo,
                request: t.request,
                plan,
                check,
                timeout_secs,
            });
        }
        Ok(Self {
            name: parsed.name,
            dir,
            config,
            tasks,
        })
    }

    /// The digest of every file under the suite's directory (its relative path and content),
    /// so a report names exactly the tasks, repos, plans and checks it measured.
    pub(crate) fn digest(&self) -> Result<Digest, CliError> {
        let mut files = BTreeMap::new();
        collect(&self.dir, &self.dir, &mut files)?;
        let map: serde_json::Map<String, serde_json::Value> = files
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        Ok(Digest::of_canonical_value(&serde_json::Value::Object(map)))
    }
}

fn collect(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) -> Result<(), CliError> {
    let read_err = |p: &Path, e: std::io::Error| {
        CliError::bad_input(format!("{}: cannot read it: {e}", p.display()))
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| read_err(dir, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| read_err(dir, e))?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| read_err(&path, e))?;
        let rel = path
            .strip_prefix(base)
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned();
        if kind.is_dir() {
            if entry.file_name() == ".git" {
                continue;
            }
            collect(base, &path, out)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&path).map_err(|e| read_err(&path, e))?;
            out.insert(rel, format!("symlink:{}", target.display()));
        } else {
            let bytes = std::fs::read(&path).map_err(|e| read_err(&path, e))?;
            out.insert(rel, Digest::of_bytes(&bytes).to_string());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::valid_id;

    #[test]
    fn ids_are_plain_names() {
        for ok in ["add-reverse", "a_1", "x"] {
            assert!(valid_id(ok), "{ok}");
        }
        for bad in ["", "Add", "a/b", "../x", "a b", &"x".repeat(65)] {
            assert!(!valid_id(bad), "{bad}");
        }
    }
}
