//! Which sandbox agents run in (ADR 0012): the `sandbox` setting of `.orca/config.toml`, or
//! `ORCA_SANDBOX`; `kernel` by default. A kernel that cannot confine is said once per run and
//! the run falls back to the tool checks; `off` is warned about at every run. Each execution
//! driven records the sandbox in its audit log.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use orca_agents::config::Config;
use orca_os::sandbox::{KernelSupport, probe};
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
        let policy = SandboxPolicy::new(requested, root, &env)
            .map_err(|e| CliError::bad_input(format!("{}: {e}", root.display())))?
            .with_writable(writable);
        if !runs_agents {
            return Ok(Self {
                policy: Arc::new(policy),
                requested,
                landlock_abi: None,
                fallback: None,
            });
        }
        let support = (requested == SandboxMode::Kernel).then(|| probe(&policy));
        let (this, warning) = Self::decide(policy, support);
        if let Some(w) = warning {
            say(&w);
        }
        Ok(this)
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
        };
        let warning = match (requested, support) {
            (SandboxMode::Off, _) => Some(
                "warning: sandbox = \"off\": agents' commands and tools are not confined and can rewrite orca's records (.orca/); set sandbox = \"kernel\" in .orca/config.toml".to_owned(),
            ),
            (SandboxMode::Kernel, Some(KernelSupport::Available { landlock_abi })) => {
                this.landlock_abi = Some(landlock_abi);
                None
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
            Some(KernelSupport::Available { landlock_abi: 7 }),
        );
        assert_eq!(s.audit_data()["effective"], "kernel");
        assert_eq!(s.audit_data()["landlock_abi"], 7);
        assert!(warning.is_none());

        let (s, warning) = Sandbox::decide(policy(SandboxMode::Off), None);
        assert_eq!(s.audit_data()["effective"], "off");
        assert!(warning.is_some_and(|w| w.contains("sandbox = \"off\"")));

        let (s, warning) = Sandbox::decide(policy(SandboxMode::Tools), None);
        assert_eq!(s.audit_data()["effective"], "tools");
        assert!(warning.is_none());
    }
}
