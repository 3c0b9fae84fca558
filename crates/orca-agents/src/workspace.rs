//! Workspace tools as a [`ToolHost`]: `read_file`, `list_files`, `search_text`, `write_file`,
//! `edit_file` (exact unique replace), `run_command` (timeout, output cap).
//!
//! Every path is confined to the project root: absolute paths and `..` are refused, and paths
//! are canonicalized (for writes, the nearest existing ancestor) and checked to stay under the
//! canonical root, so symlinks that lead out are refused too. Orca's records (`.orca/`) and the
//! user's orca config and signing key are refused as well, whatever the case or the link that
//! leads there, and files are checked again once open ([`orca_os::protected`]). `run_command` runs
//! under the [`SandboxPolicy`] given with [`WorkspaceTools::with_policy`].

use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use orca_core::{NoTools, ToolCall, ToolError, ToolHost, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::profile::ALL_TOOLS;

mod guessed;
use orca_os::process::{self, RunEnd, RunSpec};
use orca_os::protected::PathGuard;
use orca_os::sandbox::{SandboxMode, SandboxPolicy};
use orca_os::step_env::{self, EnvPolicy};

/// Largest file `read_file` returns.
pub const MAX_READ_BYTES: u64 = 256 * 1024;
/// Most entries `list_files` returns.
pub const MAX_LIST_ENTRIES: usize = 1000;
/// Most matches `search_text` returns.
pub const MAX_SEARCH_MATCHES: usize = 200;
/// Output kept of `run_command` (its tail).
pub const MAX_COMMAND_OUTPUT: usize = 64 * 1024;
/// Default and largest `run_command` timeout.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
const MAX_COMMAND_TIMEOUT_SECS: u64 = 1800;
/// Largest file `edit_file` rewrites.
const MAX_EDIT_BYTES: u64 = 4 * MAX_READ_BYTES;
const SKIPPED_DIRS: &[&str] = &[".git", "target", "node_modules", ".orca"];

/// Workspace tools rooted at a project directory, offering only the granted ones.
#[derive(Debug, Clone)]
pub struct WorkspaceTools {
    root: PathBuf,
    granted: Vec<String>,
    env: EnvPolicy,
    guard: PathGuard,
    policy: Option<Arc<SandboxPolicy>>,
    /// How long a `run_command`'s group gets between SIGTERM and SIGKILL.
    kill_grace: std::time::Duration,
}

impl WorkspaceTools {
    /// Tools confined to `root` (and kept out of `root/.orca`); only names in `granted` that
    /// are workspace tools are offered.
    ///
    /// # Errors
    ///
    /// `root` cannot be canonicalized (it does not exist).
    pub fn new(root: &Path, granted: &[String]) -> std::io::Result<Self> {
        let root = root.canonicalize()?;
        Ok(Self {
            guard: PathGuard::new(&root, &[root.join(".orca")]),
            root,
            granted: granted
                .iter()
                .filter(|g| ALL_TOOLS.contains(&g.as_str()))
                .cloned()
                .collect(),
            env: EnvPolicy::default(),
            policy: None,
            kill_grace: orca_os::process_group::DEFAULT_KILL_GRACE,
        })
    }

    /// Sets which environment variables `run_command` passes on (builder style): the base
    /// allowlist, the config's names and, while a step's agent runs, the names of its profile
    /// and of the step.
    #[must_use]
    pub fn with_env_policy(mut self, policy: EnvPolicy) -> Self {
        self.env = policy;
        self
    }

    /// The same tools under `policy`: its protected paths are refused (none in `off` mode) and
    /// `run_command` runs confined by it.
    #[must_use]
    pub fn with_policy(mut self, policy: Arc<SandboxPolicy>) -> Self {
        self.guard = policy.guard();
        self.policy = Some(policy);
        self
    }

    /// The same tools, giving a `run_command` that must end early `grace` between SIGTERM and
    /// SIGKILL (default [`orca_os::process_group::DEFAULT_KILL_GRACE`]).
    #[must_use]
    pub const fn with_kill_grace(mut self, grace: std::time::Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// The canonical root.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn lexical(&self, rel: &str) -> Result<PathBuf, ToolError> {
        let p = Path::new(rel);
        if rel.is_empty() {
            return Ok(self.root.clone());
        }
        if rel.contains('\0') {
            return Err(ToolError::refused(format!(
                "path {rel:?} is refused: it holds a NUL byte"
            )));
        }
        for c in p.components() {
            match c {
                Component::Normal(_) | Component::CurDir => {}
                Component::ParentDir => {
                    return Err(ToolError::refused(format!(
                        "path `{rel}` is refused: `..` is not allowed"
                    )));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(ToolError::refused(format!(
                        "path `{rel}` is refused: absolute paths are not allowed; use a path relative to the project root"
                    )));
                }
            }
        }
        let joined = self.root.join(p);
        self.check_inside(rel, &joined)?;
        Ok(joined)
    }

    fn check_inside(&self, rel: &str, canonical: &Path) -> Result<(), ToolError> {
        self.guard.check(rel, canonical)
    }

    /// An existing path, canonicalized and confined. A path that does not exist is checked
    /// through its nearest existing ancestor first, so a refused place is refused, not
    /// reported as missing.
    fn existing(&self, rel: &str) -> Result<PathBuf, ToolError> {
        let joined = self.lexical(rel)?;
        match joined.canonicalize() {
            Ok(canonical) => {
                self.check_inside(rel, &canonical)?;
                Ok(canonical)
            }
            Err(e) => {
                if !rel.is_empty() {
                    self.writable(rel)?;
                }
                if e.kind() == std::io::ErrorKind::NotFound {
                    return Err(ToolError::new(self.not_found(rel)));
                }
                Err(ToolError::new(format!("cannot open `{rel}`: {e}")))
            }
        }
    }

    /// A path to write: its nearest existing ancestor (and the file itself, if it exists) are
    /// canonicalized and confined.
    fn writable(&self, rel: &str) -> Result<PathBuf, ToolError> {
        let joined = self.lexical(rel)?;
        if rel.is_empty() {
            return Err(ToolError::new("a file path is required"));
        }
        if let Ok(meta) = std::fs::symlink_metadata(&joined) {
            let canonical = joined
                .canonicalize()
                .map_err(|e| ToolError::refused(format!("path `{rel}` is refused: {e}")))?;
            self.check_inside(rel, &canonical)?;
            if meta.is_dir() {
                return Err(ToolError::new(format!("`{rel}` is a directory")));
            }
            return Ok(canonical);
        }
        let mut ancestor = joined.parent();
        while let Some(a) = ancestor {
            if std::fs::symlink_metadata(a).is_ok() {
                let canonical = a
                    .canonicalize()
                    .map_err(|e| ToolError::refused(format!("path `{rel}` is refused: {e}")))?;
                self.check_inside(rel, &canonical)?;
                let rest = joined
                    .strip_prefix(a)
                    .map_err(|_| ToolError::new("invalid path"))?;
                return Ok(canonical.join(rest));
            }
            ancestor = a.parent();
        }
        Err(ToolError::refused(format!("path `{rel}` is refused")))
    }

    fn display(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned()
    }

    fn read_file(&self, args: &Value) -> Result<Value, ToolError> {
        let a: PathArgs = parse(args)?;
        let (path, instead) = self.existing_or_only(&a.path)?;
        let shown = instead.as_deref().unwrap_or(&a.path);
        if path.is_dir() {
            return Err(ToolError::new(format!(
                "`{shown}` is a directory; use list_files"
            )));
        }
        let (file, len) = self.guard.open_read(shown, &path)?;
        if len > MAX_READ_BYTES {
            return Err(ToolError::new(format!(
                "`{shown}` is {len} bytes, more than the {MAX_READ_BYTES} bytes read_file returns; use search_text",
            )));
        }
        let bytes = read_bounded(file, MAX_READ_BYTES, shown)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Ok(match instead {
            None => Value::String(text),
            Some(only) => json!({
                "path": only,
                "note": format!("`{}` does not exist: this is `{only}`, the project's only file of that name; use that path", a.path),
                "content": text,
            }),
        })
    }

    /// Visits the entries under `start` (sorted, depth first). Each directory is opened and
    /// checked before its entries are read; symlinks are listed but never followed; orca's
    /// records and the skipped directories are not entered.
    fn walk(&self, start: &Path, mut visit: impl FnMut(&Path, bool) -> bool) {
        let mut stack = vec![start.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(handle) = self.guard.open_dir(&self.display(&dir), &dir) else {
                continue;
            };
            let Ok(entries) = std::fs::read_dir(PathGuard::dir_path(&handle)) else {
                continue;
            };
            let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
            entries.sort_by_key(std::fs::DirEntry::file_name);
            for e in entries.into_iter().rev() {
                let Ok(ft) = e.file_type() else { continue };
                let name = e.file_name();
                let path = dir.join(&name);
                let is_dir = ft.is_dir();
                if self.guard.is_protected(&path) {
                    continue;
                }
                if is_dir
                    && SKIPPED_DIRS
                        .iter()
                        .any(|s| s.eq_ignore_ascii_case(&name.to_string_lossy()))
                {
                    continue;
                }
                if !visit(&path, is_dir) {
                    return;
                }
                if is_dir {
                    stack.push(path);
                }
            }
        }
    }

    fn list_files(&self, args: &Value) -> Result<Value, ToolError> {
        let a: OptPathArgs = parse(args)?;
        let start = self.existing(a.path.as_deref().unwrap_or(""))?;
        let mut files = Vec::new();
        let mut truncated = false;
        self.walk(&start, |p, is_dir| {
            if files.len() >= MAX_LIST_ENTRIES {
                truncated = true;
                return false;
            }
            let mut name = self.display(p);
            if is_dir {
                name.push('/');
            }
            files.push(name);
            true
        });
        files.sort();
        Ok(json!({"files": files, "truncated": truncated}))
    }

    fn search_text(&self, args: &Value) -> Result<Value, ToolError> {
        let a: SearchArgs = parse(args)?;
        if a.pattern.is_empty() {
            return Err(ToolError::new("`pattern` must not be empty"));
        }
        let start = self.existing(a.path.as_deref().unwrap_or(""))?;
        let mut matches = Vec::new();
        let mut truncated = false;
        let mut search_file = |p: &Path| {
            // Checked once open; hard-linked, oversized and non-text files are skipped.
            let Ok((file, len)) = self.guard.open_read(&self.display(p), p) else {
                return true;
            };
            if len > 4 * MAX_READ_BYTES {
                return true;
            }
            let Ok(bytes) = read_bounded(file, 4 * MAX_READ_BYTES, "") else {
                return true;
            };
            let Ok(text) = String::from_utf8(bytes) else {
                return true;
            };
            for (i, line) in text.lines().enumerate() {
                if line.contains(&a.pattern) {
                    if matches.len() >= MAX_SEARCH_MATCHES {
                        truncated = true;
                        return false;
                    }
                    matches.push(json!({"file": self.display(p), "line": i + 1, "text": one_line(line, 300)}));
                }
            }
            true
        };
        if start.is_file() {
            search_file(&start);
        } else {
            self.walk(&start, |p, is_dir| is_dir || search_file(p));
        }
        Ok(json!({"matches": matches, "truncated": truncated}))
    }

    fn write_file(&self, args: &Value) -> Result<Value, ToolError> {
        let mut a: WriteArgs = parse(args)?;
        let path = self.writable(&a.path)?;
        let unescaped = guessed::escaped_twice(&a.content).map(|c| a.content = c);
        // A model that rewrites a file unchanged believes it fixed something: say it did not.
        // Unchanged but for trailing whitespace counts too (and the file is left as it is):
        // a json-mode model reads files without their last newline and copies them back so.
        if let Ok((file, len)) = self.guard.open_read(&a.path, &path)
            && len.abs_diff(a.content.len() as u64) <= 64
            && read_bounded(file, len, &a.path).is_ok_and(|b| {
                b == a.content.as_bytes()
                    || b.trim_ascii_end() == a.content.as_bytes().trim_ascii_end()
            })
        {
            return Ok(json!({
                "written": a.path,
                "unchanged": "the file already had this content (whitespace at its end aside): nothing changed",
            }));
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(ToolError::new(format!("`{}` is not a file path", a.path)));
        };
        // A new file named like files the project has elsewhere: most often a guessed
        // directory (`src/greet.py` beside the project's `greet.py`). Written, and said.
        let elsewhere = if path.exists() {
            Vec::new()
        } else {
            self.same_named(&a.path)
        };
        let mut file = self
            .guard
            .create_write(&a.path, parent, &name.to_string_lossy())?;
        file.set_len(0)
            .and_then(|()| file.write_all(a.content.as_bytes()))
            .map_err(|e| ToolError::new(format!("cannot write `{}`: {e}", a.path)))?;
        if unescaped.is_some() {
            let note = "the content's line breaks came as `\\n` text (escaped twice) and no real \
                        one: written as line breaks (with `\\\"`, `\\t` and `\\\\` undone too)";
            return Ok(json!({"written": a.path, "bytes": a.content.len(), "note": note}));
        }
        if elsewhere.is_empty() {
            return Ok(json!({"written": a.path, "bytes": a.content.len()}));
        }
        let names: Vec<String> = elsewhere.iter().map(|p| format!("`{p}`")).collect();
        Ok(json!({
            "written": a.path,
            "bytes": a.content.len(),
            "note": format!("a new file; the project also has {}: if you meant to change that one, write or edit that path", names.join(", ")),
        }))
    }

    fn edit_file(&self, args: &Value) -> Result<Value, ToolError> {
        let mut a: EditArgs = parse(args)?;
        if a.old.is_empty() {
            return Err(ToolError::new("`old` must not be empty"));
        }
        if a.old == a.new {
            return Err(ToolError::new(
                "`old` and `new` are the same text: nothing would change; put the changed text in `new`",
            ));
        }
        let (path, instead) = self.existing_or_only(&a.path)?;
        let asked = a.path.clone();
        if let Some(only) = &instead {
            a.path.clone_from(only);
        }
        let (mut file, len) = self.guard.open_rw(&a.path, &path)?;
        if len > MAX_EDIT_BYTES {
            return Err(ToolError::new(format!(
                "`{}` is {len} bytes, more than the {MAX_EDIT_BYTES} bytes edit_file rewrites",
                a.path
            )));
        }
        let mut text = String::new();
        (&mut file)
            .take(MAX_EDIT_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| ToolError::new(format!("cannot read `{}`: {e}", a.path)))?;
        let count = text.matches(&a.old).count();
        let mut notes = Vec::new();
        if count == 0
            && let Some((old, new)) = guessed::quotes_swapped(&text, &a.old, &a.new)
        {
            // In json mode a double quote inside `old` must be escaped; small models write
            // single ones instead.
            notes.push("`old` was found with double quotes where it had single ones; `new` was written with double quotes too".to_owned());
            a.old = old;
            a.new = new;
        } else if count != 1 {
            return Err(ToolError::new(guessed::not_once(
                &a.path, &text, &a.old, &a.new, count,
            )));
        }
        let new_text = text.replacen(&a.old, &a.new, 1);
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(new_text.as_bytes()))
            .map_err(|e| ToolError::new(format!("cannot write `{}`: {e}", a.path)))?;
        if let Some(only) = &instead {
            notes.insert(0, format!("`{asked}` does not exist: edited `{only}`, the project's only file of that name; use that path"));
        }
        let mut result = json!({ "edited": a.path });
        if !notes.is_empty() {
            result["note"] = Value::String(notes.join("; "));
        }
        Ok(result)
    }

    /// Runs a command for `caller`: its processes get the caller's step identity and their
    /// group is reported to it.
    async fn run_command(&self, args: &Value, caller: &dyn ToolHost) -> Result<Value, ToolError> {
        let a: CommandArgs = parse(args)?;
        if a.command.contains('\0') {
            return Err(ToolError::refused(
                "the command is refused: it holds a NUL byte, which no shell can run",
            ));
        }
        if let Some(policy) = self.policy.as_deref()
            && policy.mode() == SandboxMode::Tools
            && let Some(p) = self.mentioned_protected(&a.command)
        {
            return Err(ToolError::refused(format!(
                "the command is refused: it names {p}, which agents may not touch (the kernel sandbox is off, so commands naming orca's records are refused outright)"
            )));
        }
        let timeout = a.timeout_secs.map_or(DEFAULT_COMMAND_TIMEOUT, |s| {
            Duration::from_secs(s.clamp(1, MAX_COMMAND_TIMEOUT_SECS))
        });
        let identity = caller
            .step_identity()
            .map(|id| id.env())
            .unwrap_or_default();
        let env = match step_env::current_step() {
            Some((agent, names)) => self.env.build(&agent, &names, identity),
            None => self.env.build(&orca_core::AgentId::shell(), &[], identity),
        };
        let run = process::run_captured(RunSpec {
            program: "sh",
            args: vec!["-c".to_owned(), a.command.clone()],
            cwd: &self.root,
            env,
            timeout: Some(timeout),
            cap: MAX_COMMAND_OUTPUT,
            owner: Some(caller),
            sandbox: self.policy.as_deref(),
            stdin: None,
            kill_grace: self.kill_grace,
            interleave: true,
        })
        .await;
        match run.end {
            RunEnd::Exited(status) if !status.success() => {
                let mut result = json!({ "exit_code": status.code(), "output": run.output });
                if let Some(note) = self.guessed_in_command(&a.command) {
                    result["note"] = Value::String(note);
                }
                Ok(result)
            }
            RunEnd::Exited(status) => Ok(json!({
                "exit_code": status.code(),
                "output": run.output,
            })),
            RunEnd::TimedOut | RunEnd::Idle(_) => Err(ToolError::new(format!(
                "`{}` timed out after {}s and was killed; output so far:\n{}",
                a.command,
                timeout.as_secs(),
                run.output
            ))),
            RunEnd::SpawnFailed(e) => {
                Err(ToolError::new(format!("cannot run `{}`: {e}", a.command)))
            }
        }
    }
}

impl WorkspaceTools {
    /// In `tools` mode (no kernel sandbox), a best-effort screen of a command's text: the
    /// first protected path it names (`.orca`, the config dir), case-insensitively.
    fn mentioned_protected(&self, command: &str) -> Option<String> {
        let lower = command.to_ascii_lowercase();
        if lower.contains(".orca") {
            return Some("`.orca`".to_owned());
        }
        self.guard
            .protected()
            .iter()
            .map(|p| p.display().to_string())
            .find(|p| lower.contains(&p.to_ascii_lowercase()))
            .map(|p| format!("`{p}`"))
    }
}

/// Reads at most `max` bytes of an open file.
fn read_bounded(file: std::fs::File, max: u64, rel: &str) -> Result<Vec<u8>, ToolError> {
    let mut bytes = Vec::new();
    file.take(max)
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::new(format!("cannot read `{rel}`: {e}")))?;
    Ok(bytes)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OptPathArgs {
    #[serde(default)]
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old: String,
    new: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandArgs {
    command: String,
    #[serde(default)]
    timeout_secs: Option<u64>,
}

fn parse<T: serde::de::DeserializeOwned>(args: &Value) -> Result<T, ToolError> {
    serde_json::from_value(args.clone())
        .map_err(|e| ToolError::new(format!("invalid arguments: {e}")))
}

fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters,
    }
}

/// The specs of every workspace tool.
#[must_use]
pub fn all_specs() -> Vec<ToolSpec> {
    let path = json!({"type": "string", "description": "a path relative to the project root"});
    vec![
        spec(
            "read_file",
            "Read a text file of the project.",
            json!({
            "type": "object", "properties": {"path": path}, "required": ["path"], "additionalProperties": false}),
        ),
        spec(
            "list_files",
            "List files under a directory of the project (recursively; .git, target, node_modules skipped).",
            json!({
            "type": "object", "properties": {"path": path}, "additionalProperties": false}),
        ),
        spec(
            "search_text",
            "Find lines containing an exact text in the project's files.",
            json!({
            "type": "object", "properties": {"pattern": {"type": "string"}, "path": path},
            "required": ["pattern"], "additionalProperties": false}),
        ),
        spec(
            "write_file",
            "Create or overwrite a file of the project.",
            json!({
            "type": "object", "properties": {"path": path, "content": {"type": "string"}},
            "required": ["path", "content"], "additionalProperties": false}),
        ),
        spec(
            "edit_file",
            "Replace the one exact occurrence of `old` with `new` in a file.",
            json!({
            "type": "object", "properties": {"path": path, "old": {"type": "string"}, "new": {"type": "string"}},
            "required": ["path", "old", "new"], "additionalProperties": false}),
        ),
        spec(
            "run_command",
            "Run a shell command in the project root (sh -c); returns exit code and output (tail, capped).",
            json!({
            "type": "object", "properties": {"command": {"type": "string"},
                "timeout_secs": {"type": "integer", "minimum": 1, "description": "default 120"}},
            "required": ["command"], "additionalProperties": false}),
        ),
    ]
}

#[async_trait]
impl ToolHost for WorkspaceTools {
    fn specs(&self) -> Vec<ToolSpec> {
        all_specs()
            .into_iter()
            .filter(|s| self.granted.contains(&s.name))
            .collect()
    }

    async fn call(&self, call: &ToolCall) -> Result<Value, ToolError> {
        self.call_for(call, &NoTools).await
    }

    async fn call_for(&self, call: &ToolCall, caller: &dyn ToolHost) -> Result<Value, ToolError> {
        if !self.granted.contains(&call.name) {
            tracing::warn!(tool = %call.name, "workspace tool refused: not granted");
            return Err(ToolError::new(format!(
                "tool `{}` is not granted to this agent; do not call it again: call one of {} or finish with `submit_result`",
                call.name,
                self.granted.join(", ")
            )));
        }
        let result = match call.name.as_str() {
            "read_file" => self.read_file(&call.arguments),
            "list_files" => self.list_files(&call.arguments),
            "search_text" => self.search_text(&call.arguments),
            "write_file" => self.write_file(&call.arguments),
            "edit_file" => self.edit_file(&call.arguments),
            "run_command" => self.run_command(&call.arguments, caller).await,
            other => Err(ToolError::new(format!("unknown tool `{other}`"))),
        };
        if let Err(e) = &result {
            tracing::debug!(tool = %call.name, error = %e, "workspace tool failed");
        }
        result
    }
}

/// `text` on one line (control characters as spaces), at most `max` characters and `…`.
fn one_line(text: &str, max: usize) -> String {
    let flat = |c: char| if c.is_control() { ' ' } else { c };
    let mut s: String = text.chars().take(max).map(flat).collect();
    if text.chars().nth(max).is_some() {
        s.push('…');
    }
    s
}
