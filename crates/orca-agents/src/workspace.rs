//! Workspace tools as a [`ToolHost`]: `read_file`, `list_files`, `search_text`, `write_file`,
//! `edit_file` (exact unique replace), `run_command` (timeout, output cap).
//!
//! Every path is confined to the project root: absolute paths and `..` are refused, and paths
//! are canonicalized (for writes, the nearest existing ancestor) and checked to stay under the
//! canonical root, so symlinks that lead out are refused too.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use orca_core::{NoTools, ToolCall, ToolError, ToolHost, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::process::{self, RunEnd, RunSpec};
use crate::profile::ALL_TOOLS;
use crate::step_env::{self, EnvPolicy};

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
const SKIPPED_DIRS: &[&str] = &[".git", "target", "node_modules", ".orca"];

/// Workspace tools rooted at a project directory, offering only the granted ones.
#[derive(Debug, Clone)]
pub struct WorkspaceTools {
    root: PathBuf,
    granted: Vec<String>,
    env: EnvPolicy,
}

impl WorkspaceTools {
    /// Tools confined to `root`; only names in `granted` that are workspace tools are offered.
    ///
    /// # Errors
    ///
    /// `root` cannot be canonicalized (it does not exist).
    pub fn new(root: &Path, granted: &[String]) -> std::io::Result<Self> {
        Ok(Self {
            root: root.canonicalize()?,
            granted: granted
                .iter()
                .filter(|g| ALL_TOOLS.contains(&g.as_str()))
                .cloned()
                .collect(),
            env: EnvPolicy::default(),
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
        for c in p.components() {
            match c {
                Component::Normal(_) | Component::CurDir => {}
                Component::ParentDir => {
                    return Err(ToolError::new(format!(
                        "path `{rel}` is refused: `..` is not allowed"
                    )));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(ToolError::new(format!(
                        "path `{rel}` is refused: absolute paths are not allowed; use a path relative to the project root"
                    )));
                }
            }
        }
        Ok(self.root.join(p))
    }

    fn check_inside(&self, rel: &str, canonical: &Path) -> Result<(), ToolError> {
        if canonical.starts_with(&self.root) {
            Ok(())
        } else {
            Err(ToolError::new(format!(
                "path `{rel}` is refused: it leads outside the project root"
            )))
        }
    }

    /// An existing path, canonicalized and confined.
    fn existing(&self, rel: &str) -> Result<PathBuf, ToolError> {
        let joined = self.lexical(rel)?;
        let canonical = joined
            .canonicalize()
            .map_err(|e| ToolError::new(format!("cannot open `{rel}`: {e}")))?;
        self.check_inside(rel, &canonical)?;
        Ok(canonical)
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
                .map_err(|e| ToolError::new(format!("path `{rel}` is refused: {e}")))?;
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
                    .map_err(|e| ToolError::new(format!("path `{rel}` is refused: {e}")))?;
                self.check_inside(rel, &canonical)?;
                let rest = joined
                    .strip_prefix(a)
                    .map_err(|_| ToolError::new("invalid path"))?;
                return Ok(canonical.join(rest));
            }
            ancestor = a.parent();
        }
        Err(ToolError::new(format!("path `{rel}` is refused")))
    }

    fn display(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned()
    }

    fn read_file(&self, args: &Value) -> Result<Value, ToolError> {
        let a: PathArgs = parse(args)?;
        let path = self.existing(&a.path)?;
        let meta = std::fs::metadata(&path)
            .map_err(|e| ToolError::new(format!("cannot read `{}`: {e}", a.path)))?;
        if meta.is_dir() {
            return Err(ToolError::new(format!(
                "`{}` is a directory; use list_files",
                a.path
            )));
        }
        if meta.len() > MAX_READ_BYTES {
            return Err(ToolError::new(format!(
                "`{}` is {} bytes, more than the {MAX_READ_BYTES} bytes read_file returns; use search_text",
                a.path,
                meta.len()
            )));
        }
        let bytes = std::fs::read(&path)
            .map_err(|e| ToolError::new(format!("cannot read `{}`: {e}", a.path)))?;
        Ok(Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    }

    fn walk(&self, start: &Path, mut visit: impl FnMut(&Path, bool) -> bool) {
        let mut stack = vec![start.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
            entries.sort_by_key(std::fs::DirEntry::file_name);
            for e in entries.into_iter().rev() {
                let Ok(ft) = e.file_type() else { continue };
                // Symlinks are listed but never followed.
                let path = e.path();
                let is_dir = ft.is_dir();
                if is_dir && SKIPPED_DIRS.contains(&e.file_name().to_string_lossy().as_ref()) {
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
            let Ok(meta) = std::fs::symlink_metadata(p) else {
                return true;
            };
            if !meta.is_file() || meta.len() > 4 * MAX_READ_BYTES {
                return true;
            }
            let Ok(text) = std::fs::read_to_string(p) else {
                return true;
            };
            for (i, line) in text.lines().enumerate() {
                if line.contains(&a.pattern) {
                    if matches.len() >= MAX_SEARCH_MATCHES {
                        truncated = true;
                        return false;
                    }
                    matches.push(json!({"file": self.display(p), "line": i + 1, "text": crate::http::shorten(line, 300)}));
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
        let a: WriteArgs = parse(args)?;
        let path = self.writable(&a.path)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                ToolError::new(format!("cannot create the directory of `{}`: {e}", a.path))
            })?;
        }
        std::fs::write(&path, a.content.as_bytes())
            .map_err(|e| ToolError::new(format!("cannot write `{}`: {e}", a.path)))?;
        Ok(json!({"written": a.path, "bytes": a.content.len()}))
    }

    fn edit_file(&self, args: &Value) -> Result<Value, ToolError> {
        let a: EditArgs = parse(args)?;
        if a.old.is_empty() {
            return Err(ToolError::new("`old` must not be empty"));
        }
        let path = self.existing(&a.path)?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ToolError::new(format!("cannot read `{}`: {e}", a.path)))?;
        let count = text.matches(&a.old).count();
        if count != 1 {
            return Err(ToolError::new(format!(
                "`old` must occur exactly once in `{}`; it occurs {count} times",
                a.path
            )));
        }
        let new_text = text.replacen(&a.old, &a.new, 1);
        std::fs::write(&path, new_text)
            .map_err(|e| ToolError::new(format!("cannot write `{}`: {e}", a.path)))?;
        Ok(json!({"edited": a.path}))
    }

    /// Runs a command for `caller`: its processes get the caller's step identity and their
    /// group is reported to it.
    async fn run_command(&self, args: &Value, caller: &dyn ToolHost) -> Result<Value, ToolError> {
        let a: CommandArgs = parse(args)?;
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
        })
        .await;
        match run.end {
            RunEnd::Exited(status) => Ok(json!({
                "exit_code": status.code(),
                "output": run.output,
            })),
            RunEnd::TimedOut => Err(ToolError::new(format!(
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
                "tool `{}` is not granted to this agent",
                call.name
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
