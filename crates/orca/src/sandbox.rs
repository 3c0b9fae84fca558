//! Which sandbox agents run in (ADR 0012): the `sandbox` setting of `.orca/config.toml`, or
//! `ORCA_SANDBOX`; `kernel` by default. A kernel that cannot confine is said once per run and
//! the run falls back to the tool checks; `off` is warned about at every run; a kernel that
//! confines but gives no PID namespace is said too (steps' processes are then process groups,
//! ADR 0041). Each execution driven records the sandbox in its audit log.
//!
//! The configured key and env files (`api_key_file`, `env_file`) are hidden from steps like the
//! signing key; one inside the project (but outside `.orca/`) is refused by every command that
//! runs agents: steps work there, and git copies what it tracks into their worktrees.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use orca_agents::config::Config;
use orca_os::sandbox::{KernelSupport, PidNamespace, probe};
use orca_os::{SandboxMode, SandboxPolicy};
use serde_json::{Value, json};

use crate::exit::CliError;
use crate::term::say;

/// The sandbox of this run.
pub(crate) struct Sandbox {
    /// What agents run under.
    pub(crate) policy: Arc<SandboxPolicy>,
    requested: SandboxMode,
    landlock_abi: Option<i64>,
    fallback: Option<String>,
    /// Why steps get no PID namespace of their own (`None`: they do, or nothing was probed).
    no_pid_namespace: Option<String>,
    /// The configured key and env files: each with its setting and whether it is refused.
    key_files: Vec<KeyFile>,
}

/// A configured file holding secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyFile {
    /// The setting naming it (`agents.coder.api_key_file`, `env_file`).
    pub(crate) setting: String,
    /// Where it is.
    pub(crate) path: PathBuf,
    /// It lies in the project, outside `.orca/`: refused.
    pub(crate) in_project: bool,
}

impl KeyFile {
    /// What `doctor` and a refusal say of it.
    pub(crate) fn describe(&self) -> String {
        if self.in_project {
            format!(
                "{}: {} lies inside the project, where steps can read it and git can copy it into their worktrees; orca refuses to run agents until it is moved outside the project (for example ~/.config/orca/, which steps never see)",
                self.setting,
                self.path.display()
            )
        } else {
            format!(
                "{}: {} is hidden from steps (like the signing key)",
                self.setting,
                self.path.display()
            )
        }
    }
}

/// The key and env files `config` names, resolved as they are read (`~/…` in the home
/// directory, relative to the project root otherwise).
fn key_files(root: &Path, config: Option<&Config>) -> Vec<KeyFile> {
    let Some(config) = config else {
        return Vec::new();
    };
    let mut named: Vec<(String, &Path)> = Vec::new();
    if let Some(f) = &config.env_file {
        named.push(("env_file".to_owned(), f));
    }
    if let Some(f) = &config.defaults.api_key_file {
        named.push(("defaults.api_key_file".to_owned(), f));
    }
    for (id, s) in &config.agents {
        if let Some(f) = &s.api_key_file {
            named.push((format!("agents.{id}.api_key_file"), f));
        }
    }
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let root = root.as_path();
    let records = root.join(".orca");
    named
        .into_iter()
        .filter_map(|(setting, file)| {
            let path = if setting == "env_file" {
                root.join(file)
            } else {
                expand(file).map(|p| root.join(p))?
            };
            // Compared as it resolves (a symlink into the project is in the project).
            let real = path.canonicalize().unwrap_or_else(|_| path.clone());
            let in_project = (real.starts_with(root) || path.starts_with(root))
                && !real.starts_with(&records)
                && !path.starts_with(&records);
            Some(KeyFile {
                setting,
                path: real,
                in_project,
            })
        })
        .collect()
}

/// The requested mode: `ORCA_SANDBOX`, else the config, else `kernel`.
fn requested(config: Option<&Config>) -> Result<SandboxMode, CliError> {
    match std::env::var("ORCA_SANDBOX") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|e: String| CliError::bad_input(format!("ORCA_SANDBOX: {e}"))),
        _ => Ok(config.and_then(|c| c.sandbox).unwrap_or_default()),
    }
}

/// `~/x` with the home directory.
fn expand(path: &Path) -> Option<PathBuf> {
    let text = path.to_string_lossy();
    match text.strip_prefix('~') {
        Some(rest) => {
            let home = std::env::var_os("HOME").map(PathBuf::from)?;
            Some(home.join(rest.trim_start_matches('/')))
        }
        None => Some(path.to_path_buf()),
    }
}

impl Sandbox {
    /// The sandbox for `root`. With `runs_agents`, the kernel is probed (once) and the
    /// warnings are printed.
    pub(crate) fn open(
        root: &Path,
        config: Option<&Config>,
        runs_agents: bool,
    ) -> Result<Self, CliError> {
        let requested = requested(config)?;
        let env = |k: &str| std::env::var(k).ok();
        let writable: Vec<PathBuf> = config
            .map(|c| {
                c.sandbox_writable
                    .iter()
                    .filter_map(|p| expand(p))
                    .collect()
            })
            .unwrap_or_default();
        let key_files = key_files(root, config);
        let policy = SandboxPolicy::new(requested, root, &env)
            .map_err(|e| CliError::bad_input(format!("{}: {e}", root.display())))?
            .with_writable(writable)
            .with_hidden(key_files.iter().map(|k| k.path.clone()));
        if !runs_agents {
            return Ok(Self {
                policy: Arc::new(policy),
                requested,
                landlock_abi: None,
                fallback: None,
                no_pid_namespace: None,
                key_files,
            });
        }
        if let Some(refused) = key_files.iter().find(|k| k.in_project) {
            return Err(CliError::bad_input(refused.describe()));
        }
        let support = (requested == SandboxMode::Kernel).then(|| probe(&policy));
        let (mut this, warning) = Self::decide(policy, support);
        this.key_files = key_files;
        if let Some(w) = warning {
            say(&w);
        }
        Ok(this)
    }

    /// The configured key and env files.
    pub(crate) fn key_files(&self) -> &[KeyFile] {
        &self.key_files
    }

    /// What `doctor` says of the kernel sandbox and the PID namespace: each a check (what,
    /// whether fine, detail), from a probe made now (`kernel` mode only).
    pub(crate) fn doctor(&self) -> Vec<(String, bool, String)> {
        let requested = self.requested;
        let support = (requested == SandboxMode::Kernel).then(|| probe(&self.policy));
        let (this, _) = Self::decide(self.policy.as_ref().clone(), support);
        let data = this.audit_data();
        let effective = data["effective"].as_str().unwrap_or("unknown").to_owned();
        let sandbox = match data["fallback_reason"].as_str() {
            Some(why) => format!("{effective} (asked for {}: {why})", requested.as_str()),
            None => effective.clone(),
        };
        let pid = match (data["pid_namespace"].as_bool(), data["pid_namespace_unavailable"].as_str()) {
            (Some(true), _) => (
                true,
                "each step in its own PID namespace: it sees only its own processes, and they all end with its attempt".to_owned(),
            ),
            (_, Some(why)) => (
                false,
                format!("process groups only ({why}): a process a step leaves behind with setsid can outlive it"),
            ),
            _ => (
                false,
                "process groups only (no kernel sandbox): a process a step leaves behind with setsid can outlive it".to_owned(),
            ),
        };
        vec![
            (
                "sandbox".to_owned(),
                effective == requested.as_str(),
                sandbox,
            ),
            ("step processes".to_owned(), pid.0, pid.1),
        ]
    }

    /// The sandbox a run gets from the requested policy and, in `kernel` mode, the probe's
    /// verdict; with the warning line to print, if any.
    fn decide(policy: SandboxPolicy, support: Option<KernelSupport>) -> (Self, Option<String>) {
        let requested = policy.mode();
        let mut this = Self {
            policy: Arc::new(policy),
            requested,
            landlock_abi: None,
            fallback: None,
            no_pid_namespace: None,
            key_files: Vec::new(),
        };
        let warning = match (requested, support) {
            (SandboxMode::Off, _) => Some(
                "warning: sandbox = \"off\": agents' commands and tools are not confined and can rewrite orca's records (.orca/); set sandbox = \"kernel\" in .orca/config.toml".to_owned(),
            ),
            (
                SandboxMode::Kernel,
                Some(KernelSupport::Available {
                    landlock_abi,
                    pid_namespace,
                }),
            ) => {
                this.landlock_abi = Some(landlock_abi);
                match pid_namespace {
                    PidNamespace::Own => None,
                    PidNamespace::Unavailable { reason } => {
                        this.policy = Arc::new(
                            this.policy.as_ref().clone().with_pid_namespace(false),
                        );
                        let line = format!(
                            "warning: steps get no PID namespace of their own ({reason}); a process a step leaves behind (setsid) can outlive it"
                        );
                        this.no_pid_namespace = Some(reason);
                        Some(line)
                    }
                }
            }
            (SandboxMode::Kernel, Some(KernelSupport::Unavailable { reason })) => {
                this.policy = Arc::new(this.policy.as_ref().clone().with_mode(SandboxMode::Tools));
                let line = format!(
                    "warning: the kernel sandbox is unavailable ({reason}); agents run with the tool checks only"
                );
                this.fallback = Some(reason);
                Some(line)
            }
            _ => None,
        };
        (this, warning)
    }

    /// The data of the `sandbox` audit entry of an execution.
    pub(crate) fn audit_data(&self) -> Value {
        json!({
            "requested": self.requested.as_str(),
            "effective": self.policy.mode().as_str(),
            "landlock_abi": self.landlock_abi,
            "fallback_reason": self.fallback,
            "protected": self.policy.protected(),
            "writable": self.policy.writable(),
            "pid_namespace": self.policy.pid_namespace() && self.landlock_abi.is_some(),
            "pid_namespace_unavailable": self.no_pid_namespace,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(mode: SandboxMode) -> SandboxPolicy {
        SandboxPolicy::new(mode, Path::new("/"), &|_| None).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Where the kernel cannot confine, the run says so, falls back to the tool checks and the
    /// audit entry records why; `off` is warned about; a working kernel is silent.
    #[test]
    fn fallback_and_off_are_said_and_recorded() {
        let (s, warning) = Sandbox::decide(
            policy(SandboxMode::Kernel),
            Some(KernelSupport::Unavailable {
                reason: "no landlock".to_owned(),
            }),
        );
        assert_eq!(s.policy.mode(), SandboxMode::Tools);
        let data = s.audit_data();
        assert_eq!(data["requested"], "kernel");
        assert_eq!(data["effective"], "tools");
        assert_eq!(data["fallback_reason"], "no landlock");
        assert!(warning.is_some_and(|w| w.contains("kernel sandbox is unavailable (no landlock)")));

        let (s, warning) = Sandbox::decide(
            policy(SandboxMode::Kernel),
            Some(KernelSupport::Available {
                landlock_abi: 7,
                pid_namespace: PidNamespace::Own,
            }),
        );
        assert_eq!(s.audit_data()["effective"], "kernel");
        assert_eq!(s.audit_data()["landlock_abi"], 7);
        assert_eq!(s.audit_data()["pid_namespace"], true);
        assert!(warning.is_none());

        let (s, warning) = Sandbox::decide(
            policy(SandboxMode::Kernel),
            Some(KernelSupport::Available {
                landlock_abi: 7,
                pid_namespace: PidNamespace::Unavailable {
                    reason: "no /proc".to_owned(),
                },
            }),
        );
        assert_eq!(s.audit_data()["effective"], "kernel");
        assert_eq!(s.audit_data()["pid_namespace"], false);
        assert_eq!(s.audit_data()["pid_namespace_unavailable"], "no /proc");
        assert!(!s.policy.pid_namespace());
        assert!(warning.is_some_and(|w| w.contains("no PID namespace of their own (no /proc)")));

        let (s, warning) = Sandbox::decide(policy(SandboxMode::Off), None);
        assert_eq!(s.audit_data()["effective"], "off");
        assert!(warning.is_some_and(|w| w.contains("sandbox = \"off\"")));

        let (s, warning) = Sandbox::decide(policy(SandboxMode::Tools), None);
        assert_eq!(s.audit_data()["effective"], "tools");
        assert!(warning.is_none());
    }
}
