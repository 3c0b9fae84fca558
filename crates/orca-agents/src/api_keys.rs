//! Where a backend's key comes from: an environment variable (`api_key_env`), a file
//! (`api_key_file`, which must be private: mode 0600 or stricter, as ssh requires of its keys),
//! or a command (`api_key_cmd = "pass show openai"`, run without a shell, its output bounded
//! and its time limited). Keys are never printed: [`KeyStatus`] shows the source and whether a
//! key is there, masked.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

/// The largest key file or key command output read.
pub const MAX_KEY_BYTES: u64 = 64 * 1024;
/// How long a key command may run.
pub const KEY_COMMAND_TIMEOUT: Duration = Duration::from_secs(15);

/// Where a key comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "from")]
pub enum KeySource {
    /// An environment variable (its name).
    Env(String),
    /// A file (its path).
    File(PathBuf),
    /// A command (as written).
    Command(String),
    /// The backend needs no key (a local endpoint, a command-line agent, the shell).
    None,
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Env(name) => write!(f, "env {name}"),
            Self::File(path) => write!(f, "file {}", path.display()),
            Self::Command(cmd) => write!(f, "command `{cmd}`"),
            Self::None => f.write_str("none"),
        }
    }
}

/// What `orca doctor` shows of a key: its source and whether it is there, masked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyStatus {
    /// Where it comes from.
    pub source: KeySource,
    /// Whether a key was found.
    pub present: bool,
    /// The key's public prefix (`sk-ant-`, `ghp_`…) and length, never a secret character:
    /// `sk-ant-…(108 chars)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub masked: Option<String>,
}

impl std::fmt::Display for KeyStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.source, self.present, &self.masked) {
            (KeySource::None, _, _) => f.write_str("no key needed"),
            (source, true, Some(m)) => write!(f, "{source} (set, {m})"),
            (source, true, None) => write!(f, "{source} (set)"),
            (source, false, _) => write!(f, "{source} (NOT SET)"),
        }
    }
}

/// A key shown without any secret character: its well-known prefix, if it has one, and its
/// length.
#[must_use]
pub fn mask(key: &str) -> String {
    const PREFIXES: &[&str] = &[
        "sk-ant-",
        "sk-proj-",
        "sk-",
        "github_pat_",
        "ghp_",
        "gho_",
        "ghs_",
        "ghu_",
        "xoxb-",
        "xoxp-",
        "AKIA",
        "ASIA",
    ];
    let len = key.chars().count();
    match PREFIXES.iter().find(|p| key.starts_with(**p)) {
        Some(p) => format!("{p}…({len} chars)"),
        None => format!("…({len} chars)"),
    }
}

/// Refuses a file holding a secret that others may read: group or world permission bits
/// (as ssh does with private keys). The message says how to fix it.
///
/// # Errors
///
/// The file cannot be inspected, or is readable (or writable) by group or others.
pub fn check_private(path: &Path, what: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{what} {} holds a secret but is accessible by group or others (mode {mode:04o}); orca refuses to use it: run `chmod 600 {}`",
            path.display(),
            path.display()
        ));
    }
    Ok(())
}

/// Reads a private file holding a secret (at most [`MAX_KEY_BYTES`]).
///
/// # Errors
///
/// Unreadable, too large, or not private ([`check_private`]).
pub fn read_private_file(path: &Path, what: &str) -> Result<String, String> {
    check_private(path, what)?;
    let file = std::fs::File::open(path)
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_KEY_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_KEY_BYTES {
        return Err(format!(
            "{what} {} is larger than {MAX_KEY_BYTES} bytes",
            path.display()
        ));
    }
    Ok(text)
}

/// Reads a key file: the file's text, trimmed.
///
/// # Errors
///
/// As [`read_private_file`], or the file is empty.
pub fn read_key_file(path: &Path) -> Result<String, String> {
    let text = read_private_file(path, "key file")?;
    let key = text.trim();
    if key.is_empty() {
        return Err(format!("key file {} is empty", path.display()));
    }
    Ok(key.to_owned())
}

/// Splits a key command into words, without a shell: whitespace separates, `'…'` and `"…"`
/// group (no expansion, no pipes; write `sh -c '…'` to get a shell).
///
/// # Errors
///
/// An unclosed quote, or no words.
pub fn split_command(cmd: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in cmd.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err("an unclosed quote".to_owned());
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err("an empty command".to_owned());
    }
    Ok(words)
}

/// [`run_key_command`] with [`KEY_COMMAND_TIMEOUT`], run at most once per process for the
/// same command and directory (agents sharing `[defaults]` share one run: a password manager
/// is asked once).
///
/// # Errors
///
/// As [`run_key_command`].
pub fn run_key_command_once(cmd: &str, cwd: &Path) -> Result<String, String> {
    type Cache = std::collections::HashMap<(String, PathBuf), Result<String, String>>;
    static CACHE: std::sync::LazyLock<std::sync::Mutex<Cache>> =
        std::sync::LazyLock::new(std::sync::Mutex::default);
    let key = (cmd.to_owned(), cwd.to_path_buf());
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    cache
        .entry(key)
        .or_insert_with(|| run_key_command(cmd, cwd, KEY_COMMAND_TIMEOUT))
        .clone()
}

/// Runs a key command in `cwd` without a shell (with orca's environment: password managers
/// need their agents) and returns its first line of output, trimmed. Output is bounded by
/// [`MAX_KEY_BYTES`], time by `timeout`; stderr is discarded (it is never printed), and
/// errors never quote the output.
///
/// # Errors
///
/// The command cannot run, fails, times out, or prints nothing.
pub fn run_key_command(cmd: &str, cwd: &Path, timeout: Duration) -> Result<String, String> {
    let words = split_command(cmd).map_err(|e| format!("key command `{cmd}`: {e}"))?;
    let mut command = Command::new(&words[0]);
    command
        .args(&words[1..])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // Its own process group with orca's watchdog: it dies with orca, and whatever it leaves
    // running is killed with its group once it has answered.
    orca_os::process_group::own_group_blocking(&mut command);
    let mut child = command
        .spawn()
        .map_err(|e| format!("key command `{cmd}` cannot run: {e}"))?;
    let group = child.id();
    let Some(stdout) = child.stdout.take() else {
        orca_os::process_group::kill_group(group);
        return Err(format!("key command `{cmd}`: no output pipe"));
    };
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.take(MAX_KEY_BYTES + 1).read_to_end(&mut out);
        out
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= timeout => {
                orca_os::process_group::kill_group(group);
                let _ = child.wait();
                return Err(format!(
                    "key command `{cmd}` timed out after {}s and was killed",
                    timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => {
                orca_os::process_group::kill_group(group);
                return Err(format!("key command `{cmd}`: {e}"));
            }
        }
    };
    orca_os::process_group::kill_group(group);
    let out = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(format!(
            "key command `{cmd}` failed ({status}); its output is not shown"
        ));
    }
    if out.len() as u64 > MAX_KEY_BYTES {
        return Err(format!(
            "key command `{cmd}` printed more than {MAX_KEY_BYTES} bytes"
        ));
    }
    let text = String::from_utf8_lossy(&out);
    let key = text.lines().next().unwrap_or("").trim();
    if key.is_empty() {
        return Err(format!("key command `{cmd}` printed nothing"));
    }
    Ok(key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_split_without_a_shell() {
        assert_eq!(
            split_command("pass show 'open ai'  x\"y z\"").unwrap(),
            ["pass", "show", "open ai", "xy z"]
        );
        assert!(split_command("  ").is_err());
        assert!(split_command("a 'b").is_err());
    }

    #[test]
    fn key_commands_are_bounded() {
        let dir = std::env::temp_dir();
        assert_eq!(
            run_key_command("printf 'sk-abc\\nrest'", &dir, KEY_COMMAND_TIMEOUT).unwrap(),
            "sk-abc"
        );
        let e = run_key_command(
            "sh -c 'printf sk-le; echo ak; exit 3'",
            &dir,
            KEY_COMMAND_TIMEOUT,
        )
        .unwrap_err();
        assert!(!e.contains("sk-leak") && e.contains("failed"), "{e}");
        let e = run_key_command("sleep 30", &dir, Duration::from_millis(200)).unwrap_err();
        assert!(e.contains("timed out"), "{e}");
        assert!(run_key_command("true", &dir, KEY_COMMAND_TIMEOUT).is_err());
        // What a key command leaves running goes with its group once it has answered: the
        // answer does not wait for it (it holds stdout), and nothing of it outlives orca.
        let started = std::time::Instant::now();
        let key = run_key_command(
            "sh -c 'sleep 30 & echo sk-from-a-forking-command'",
            &dir,
            KEY_COMMAND_TIMEOUT,
        )
        .unwrap();
        assert_eq!(key, "sk-from-a-forking-command");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn masks_show_no_secret_character() {
        assert_eq!(mask("sk-ant-api03-SECRET"), "sk-ant-…(19 chars)");
        assert_eq!(mask("hunter2hunter2"), "…(14 chars)");
    }

    #[test]
    fn readable_key_files_are_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, "sk-key-123456\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_key_file(&path).unwrap_err();
        assert!(e.contains("chmod 600") && e.contains("0644"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_key_file(&path).unwrap(), "sk-key-123456");
    }
}
