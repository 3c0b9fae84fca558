//! The sandbox of the processes agents start (shell steps, `run_command`, command-line agents).
//!
//! Three modes ([`SandboxMode`]): `kernel` confines each child with the kernel, `tools` keeps
//! only the tool-level checks ([`crate::protected`]), `off` keeps neither (loud: the caller warns).
//!
//! In `kernel` mode, between fork and exec the child
//! 1. enters a new user and mount namespace — and, where the kernel allows, a new PID namespace
//!    ([`pid_ns`]) — keeping its uid and gid and losing every capability outside them,
//! 2. makes its copy of the mount tree private, bind-mounts the project's `.orca/` read-only
//!    over itself, and hides the user's orca config directories (an empty read-only tmpfs), the
//!    signing key and the configured key and env files (`/dev/null`, read-only) — these mounts
//!    exist only for the child,
//! 3. binds the repository's shared git state read-only (its config, hooks, `info/`, the refs
//!    but its own branch's, other worktrees: [`git_state`]),
//! 4. in its own PID namespace, forks the namespace's init, which mounts a fresh `/proc` and
//!    forks the step itself,
//! 5. sets `no_new_privs` and restricts itself with a Landlock ruleset prepared by the parent:
//!    read and execute everywhere, write only in the project root, a fresh per-step temporary
//!    directory (its `TMPDIR`), the extra writable paths of the policy, `/dev/shm` and the usual
//!    `/dev` nodes; no signals to processes outside the sandbox (Landlock ABI 6).
//!
//! Landlock only grants, so a writable project root would make `.orca/` writable with it; the
//! read-only bind mounts are what take it back, and Landlock forbids the child to unmount or
//! remount anything. See ADRs 0012 and 0041.

mod git_state;
mod hook;
pub mod pid_ns;
mod ref_watch;

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    Scope, path_beneath_rules,
};

use self::hook::{Hook, MountOp};
use crate::protected::{PathGuard, protected_paths, signing_key_path};

/// How agent processes are confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// Landlock and a mount namespace (falls back to `tools` where the kernel cannot).
    #[default]
    Kernel,
    /// Tool-level path checks only.
    Tools,
    /// No confinement beyond the project root.
    Off,
}

impl SandboxMode {
    /// The name used in config and `ORCA_SANDBOX`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Kernel => "kernel",
            Self::Tools => "tools",
            Self::Off => "off",
        }
    }
}

impl std::fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SandboxMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "kernel" => Ok(Self::Kernel),
            "tools" => Ok(Self::Tools),
            "off" => Ok(Self::Off),
            other => Err(format!(
                "unknown sandbox mode \"{other}\" (expected kernel, tools or off)"
            )),
        }
    }
}

/// The sandbox could not be set up for a child.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The kernel has no usable Landlock.
    #[error("landlock is not available in this kernel")]
    NoLandlock,
    /// Building the Landlock ruleset failed.
    #[error("cannot build the landlock ruleset: {0}")]
    Ruleset(String),
    /// A path of the policy cannot be used.
    #[error("cannot use {path} in the sandbox: {message}")]
    Path {
        /// The path.
        path: String,
        /// Why.
        message: String,
    },
    /// The per-step temporary directory cannot be created.
    #[error("cannot create the temporary directory {path}: {message}")]
    Temp {
        /// The path.
        path: String,
        /// Why.
        message: String,
    },
}

/// What agent processes may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    mode: SandboxMode,
    root: PathBuf,
    protected: Vec<PathBuf>,
    writable: Vec<PathBuf>,
    temp_base: PathBuf,
    home: Option<PathBuf>,
    key: Option<PathBuf>,
    /// Files hidden besides the signing key (configured key and env files).
    hidden: Vec<PathBuf>,
    /// Each child in a PID namespace of its own (where the kernel allows; see [`probe`]).
    pid_namespace: bool,
    /// The user's own git config (`~/.gitconfig`, `~/.config/git`, `$XDG_CONFIG_HOME/git`):
    /// read-only to children where it lies in a writable place (a project holding the home).
    user_git: Vec<PathBuf>,
}

impl SandboxPolicy {
    /// A policy for the project at `root` (canonicalized), protecting `.orca`, the user's orca
    /// config directories and the signing key (from `env`: `HOME`, `XDG_CONFIG_HOME`,
    /// `ORCA_SIGNING_KEY`); per-step temporary directories are made under `TMPDIR` (or `/tmp`).
    ///
    /// # Errors
    ///
    /// `root` cannot be canonicalized.
    pub fn new(
        mode: SandboxMode,
        root: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> std::io::Result<Self> {
        let root = root.canonicalize()?;
        let temp_base = env("TMPDIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute() && p.is_dir())
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        Ok(Self {
            mode,
            protected: protected_paths(&root, env),
            key: signing_key_path(&root, env),
            root,
            writable: Vec::new(),
            temp_base,
            home: env("HOME").map(PathBuf::from).filter(|p| p.is_absolute()),
            hidden: Vec::new(),
            pid_namespace: true,
            user_git: user_git_config(env),
        })
    }

    /// The same policy hiding more files from children, as the signing key is: configured key
    /// and env files (absolute). They are protected paths too (the tools refuse them).
    #[must_use]
    pub fn with_hidden(mut self, files: impl IntoIterator<Item = PathBuf>) -> Self {
        for f in files {
            if !self.hidden.contains(&f) {
                self.hidden.push(f.clone());
            }
            if !self.protected.contains(&f) {
                self.protected.push(f);
            }
        }
        self
    }

    /// The files hidden besides orca's own (see [`SandboxPolicy::with_hidden`]).
    #[must_use]
    pub fn hidden(&self) -> &[PathBuf] {
        &self.hidden
    }

    /// The same policy with or without a PID namespace per child (`kernel` mode only).
    #[must_use]
    pub const fn with_pid_namespace(mut self, on: bool) -> Self {
        self.pid_namespace = on;
        self
    }

    /// Whether each child gets a PID namespace of its own (`kernel` mode only).
    #[must_use]
    pub const fn pid_namespace(&self) -> bool {
        self.pid_namespace && matches!(self.mode, SandboxMode::Kernel)
    }

    /// The same policy with extra writable paths (absolute; ones that do not exist are skipped
    /// when a child starts).
    #[must_use]
    pub fn with_writable(mut self, paths: impl IntoIterator<Item = PathBuf>) -> Self {
        self.writable.extend(paths);
        self
    }

    /// The same policy with directories under the home directory writable (a command-line
    /// agent's own state). Nothing is added without a home directory.
    #[must_use]
    pub fn with_home_dirs(self, dirs: &[&str]) -> Self {
        let extra: Vec<PathBuf> = self
            .home
            .iter()
            .flat_map(|h| dirs.iter().map(move |d| h.join(d)))
            .collect();
        self.with_writable(extra)
    }

    /// The same policy in another mode (the fallback when the kernel cannot confine).
    #[must_use]
    pub fn with_mode(mut self, mode: SandboxMode) -> Self {
        self.mode = mode;
        self
    }

    /// The mode.
    #[must_use]
    pub const fn mode(&self) -> SandboxMode {
        self.mode
    }

    /// The canonical project root.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The protected paths: `.orca`, the user's orca config, the signing key.
    #[must_use]
    pub fn protected(&self) -> &[PathBuf] {
        &self.protected
    }

    /// The extra writable paths.
    #[must_use]
    pub fn writable(&self) -> &[PathBuf] {
        &self.writable
    }

    /// The tool-level rule of this policy (`off`: the project root only).
    #[must_use]
    pub fn guard(&self) -> PathGuard {
        match self.mode {
            SandboxMode::Off => PathGuard::new(&self.root, &[]),
            SandboxMode::Kernel | SandboxMode::Tools => PathGuard::new(&self.root, &self.protected),
        }
    }
}

/// Where the user's own git config may be, from `env`.
fn user_git_config(env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let absolute = |k: &str| {
        env(k)
            .filter(|v| !v.trim().is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let mut out = Vec::new();
    if let Some(home) = absolute("HOME") {
        out.push(home.join(".gitconfig"));
        out.push(home.join(".config").join("git"));
    }
    if let Some(xdg) = absolute("XDG_CONFIG_HOME") {
        out.push(xdg.join("git"));
    }
    out
}

/// Whether a step gets a PID namespace of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidNamespace {
    /// It does: it sees only its own processes, and they all end with its attempt.
    Own,
    /// It does not (the kernel refused; why): its processes are a process group, and one that
    /// leaves the group (`setsid`) can outlive the step.
    Unavailable {
        /// What failed.
        reason: String,
    },
}

/// Whether the kernel sandbox works here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelSupport {
    /// It works: a probe child was confined and could not write `.orca/`.
    Available {
        /// The Landlock ABI version of the kernel.
        landlock_abi: i64,
        /// Whether a confined child gets a PID namespace of its own.
        pid_namespace: PidNamespace,
    },
    /// It does not; why.
    Unavailable {
        /// What failed.
        reason: String,
    },
}

/// The Landlock ABI version of the running kernel (0: none).
#[must_use]
pub fn landlock_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    #[expect(
        unsafe_code,
        reason = "landlock_create_ruleset has no wrapper in std or libc"
    )]
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the call only returns
    // a number; no memory is read or written.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    v.max(0)
}

/// Probes the kernel sandbox: a child confined by `policy` (as if in `kernel` mode) must start
/// and must find the project's `.orca/` not writable; with a PID namespace, it must also find
/// no trace of this process in its `/proc`. Where the namespace fails and the rest works, the
/// sandbox is available without it.
#[must_use]
pub fn probe(policy: &SandboxPolicy) -> KernelSupport {
    let abi = landlock_abi();
    if abi < 1 {
        return KernelSupport::Unavailable {
            reason: "the kernel has no Landlock (or it is disabled)".to_owned(),
        };
    }
    let policy = policy.clone().with_mode(SandboxMode::Kernel);
    let pid_namespace = if policy.pid_namespace {
        match probe_once(&policy.clone().with_pid_namespace(true)) {
            Ok(()) => PidNamespace::Own,
            Err(reason) => PidNamespace::Unavailable { reason },
        }
    } else {
        PidNamespace::Unavailable {
            reason: "turned off".to_owned(),
        }
    };
    if pid_namespace == PidNamespace::Own {
        return KernelSupport::Available {
            landlock_abi: abi,
            pid_namespace,
        };
    }
    match probe_once(&policy.with_pid_namespace(false)) {
        Ok(()) => KernelSupport::Available {
            landlock_abi: abi,
            pid_namespace,
        },
        Err(reason) => KernelSupport::Unavailable { reason },
    }
}

/// One confined probe child.
fn probe_once(policy: &SandboxPolicy) -> Result<(), String> {
    let mut script = String::from("test -d .orca && test ! -w .orca");
    if policy.pid_namespace {
        script.push_str(&format!(
            " && test -d /proc/self && test ! -d /proc/{}",
            std::process::id()
        ));
    }
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &script])
        .current_dir(&policy.root)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let (hook, _confined) = match prepare(policy, &policy.root) {
        // The probe makes no refs: what appears beside the branch meanwhile is not its doing.
        Ok(Some((hook, mut confined))) => {
            confined.refs = None;
            (hook, confined)
        }
        Ok(None) => return Err("nothing to confine".to_owned()),
        Err(e) => return Err(e.to_string()),
    };
    install_std(&mut cmd, hook);
    match cmd.status() {
        Ok(st) if st.success() => Ok(()),
        Ok(st) if policy.pid_namespace => Err(format!(
            "a probe in its own PID namespace failed ({st}): the namespace or its /proc could not be made"
        )),
        Ok(st) => Err(format!("a confined probe could still write .orca/ ({st})")),
        Err(e) if policy.pid_namespace && e.raw_os_error() == Some(libc::ENOSPC) => Err(
            "the kernel refuses new PID namespaces here (user.max_pid_namespaces is 0 or reached)"
                .to_owned(),
        ),
        Err(e) => Err(format!(
            "a confined probe could not start (user or PID namespaces may be disabled): {e}"
        )),
    }
}

/// What lives as long as a confined child: its temporary directory, removed on drop, and the
/// directory of the checked-out branch's ref, settled on drop (see [`ref_watch`]).
#[derive(Debug, Default)]
pub struct Confined {
    temp: Option<PathBuf>,
    refs: Option<ref_watch::RefWatch>,
}

impl Confined {
    /// Once the child has ended: moves the refs it made beside its branch out of `refs/`;
    /// returns what was moved (`refs/heads/x -> destination`), for the child's output.
    pub fn settle(&mut self) -> Vec<String> {
        self.refs.take().map(|w| w.settle()).unwrap_or_default()
    }
}

impl Drop for Confined {
    fn drop(&mut self) {
        let moved = self.settle();
        if !moved.is_empty() {
            tracing::warn!(
                ?moved,
                "refs a step made beside its branch were moved out of refs/"
            );
        }
        if let Some(t) = self.temp.take() {
            let _ = std::fs::remove_dir_all(&t);
        }
    }
}

/// Confines `cmd`, which runs in `cwd`, per `policy`: in `kernel` mode, sets `TMPDIR` to a
/// fresh directory and installs the pre-exec hook; otherwise does nothing. Keep the returned
/// guard until the child has ended.
///
/// # Errors
///
/// The ruleset or the temporary directory cannot be made.
pub fn confine(
    cmd: &mut tokio::process::Command,
    policy: Option<&SandboxPolicy>,
    cwd: &Path,
) -> Result<Confined, SandboxError> {
    let Some(policy) = policy else {
        return Ok(Confined::default());
    };
    let Some((hook, confined)) = prepare(policy, cwd)? else {
        return Ok(Confined::default());
    };
    if let Some(t) = &confined.temp {
        cmd.env("TMPDIR", t);
    }
    let hook = Arc::new(hook);
    #[expect(
        unsafe_code,
        reason = "pre_exec is unsafe: the hook runs between fork and exec"
    )]
    // SAFETY: the hook makes only raw system calls (unshare, open/write/close, mount,
    // mount_setattr, prctl, fork, waitpid, landlock_restrict_self) on data prepared before the
    // fork; it does not allocate, lock or touch state shared with other threads.
    unsafe {
        cmd.pre_exec(move || hook.apply());
    }
    Ok(confined)
}

fn install_std(cmd: &mut std::process::Command, hook: Hook) {
    use std::os::unix::process::CommandExt as _;
    #[expect(
        unsafe_code,
        reason = "pre_exec is unsafe: the hook runs between fork and exec"
    )]
    // SAFETY: as in `confine`: raw system calls on data prepared before the fork only.
    unsafe {
        cmd.pre_exec(move || hook.apply());
    }
}

fn cstring(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| SandboxError::Path {
        path: path.display().to_string(),
        message: "it holds a NUL byte".to_owned(),
    })
}

/// The hook and the guard of a kernel-mode policy for a child started in `cwd`; `None` in the
/// other modes.
fn prepare(policy: &SandboxPolicy, cwd: &Path) -> Result<Option<(Hook, Confined)>, SandboxError> {
    if policy.mode != SandboxMode::Kernel {
        return Ok(None);
    }
    let git = git_state::protect(cwd);
    let temp = policy.temp_base.join(format!(
        "orca-step-{}-{:016x}",
        std::process::id(),
        fastrand::u64(..)
    ));
    {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&temp)
            .map_err(|e| SandboxError::Temp {
                path: temp.display().to_string(),
                message: e.to_string(),
            })?;
    }
    let mut confined = Confined {
        temp: Some(temp.clone()),
        refs: None,
    };

    let abi = ABI::V5;
    let ruleset_error = |e: landlock::RulesetError| SandboxError::Ruleset(e.to_string());
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(ruleset_error)?
        .scope(Scope::Signal)
        .map_err(ruleset_error)?
        .create()
        .map_err(ruleset_error)?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
        .map_err(ruleset_error)?
        .add_rules(path_beneath_rules(
            [policy.root.as_path(), temp.as_path(), Path::new("/dev/shm")]
                .into_iter()
                .chain(policy.writable.iter().map(PathBuf::as_path))
                .chain(git.writable.iter().map(PathBuf::as_path)),
            AccessFs::from_all(abi),
        ))
        .map_err(ruleset_error)?
        .add_rules(path_beneath_rules(
            [
                "/dev/null",
                "/dev/zero",
                "/dev/full",
                "/dev/random",
                "/dev/urandom",
                "/dev/tty",
            ],
            AccessFs::from_file(abi),
        ))
        .map_err(ruleset_error)?;
    let ruleset: Option<OwnedFd> = created.into();
    let ruleset = ruleset.ok_or(SandboxError::NoLandlock)?;

    // Outer paths first, so a mount inside another lands on top of it.
    // A protected directory that does not exist cannot be covered by a mount, and a step that
    // may write where it would be could create it (a project root holding the home directory,
    // a writable `~`): orca's own directories are made first (empty, 0700), then covered.
    let writable_areas: Vec<&Path> = std::iter::once(policy.root.as_path())
        .chain(policy.writable.iter().map(PathBuf::as_path))
        .collect();
    for p in &policy.protected {
        let is_orca_dir = policy.key.as_ref() != Some(p)
            && p.file_name().is_some_and(|n| n == "orca" || n == ".orca");
        if is_orca_dir
            && std::fs::symlink_metadata(p).is_err()
            && writable_areas.iter().any(|w| p.starts_with(w))
        {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(p)
                .map_err(|e| SandboxError::Path {
                    path: p.display().to_string(),
                    message: format!("cannot create it to cover it: {e}"),
                })?;
        }
    }
    let mut protected: Vec<PathBuf> = policy
        .protected
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    protected.sort_by_key(|p| p.components().count());
    protected.dedup();
    let records = policy.root.join(".orca");
    let mut mounts = Vec::new();
    for p in protected {
        let Ok(meta) = std::fs::metadata(&p) else {
            continue;
        };
        let c = cstring(&p)?;
        mounts.push(if p == records {
            MountOp::ReadOnly(c)
        } else if meta.is_dir() {
            MountOp::HideDir(c)
        } else {
            MountOp::HideFile(c)
        });
    }
    // The repository's shared state, where the child could write it (a repository above the
    // project, outside every writable place, is left alone): what must exist to be covered is
    // made first (empty), then the pins, then the read-only binds, outer first.
    let reachable: Vec<PathBuf> = writable_areas
        .iter()
        .flat_map(|w| [w.to_path_buf(), w.canonicalize().unwrap_or_default()])
        .chain(git.writable.iter().cloned())
        .filter(|w| !w.as_os_str().is_empty())
        .collect();
    let reachable = |p: &Path| reachable.iter().any(|w| p.starts_with(w));
    for dir in git.create_dirs.iter().filter(|d| reachable(d)) {
        if std::fs::symlink_metadata(dir).is_err() {
            let _ = std::fs::create_dir(dir);
        }
    }
    for file in git.create_files.iter().filter(|f| reachable(f)) {
        if std::fs::symlink_metadata(file).is_err() {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(file);
        }
    }
    for p in git.pins.iter().filter(|p| reachable(p)) {
        if std::fs::symlink_metadata(p).is_ok() {
            mounts.push(MountOp::Pin(cstring(p)?));
        }
    }
    for p in git.read_only.iter().filter(|p| reachable(p)) {
        if std::fs::symlink_metadata(p).is_ok() {
            mounts.push(MountOp::ReadOnlyTop(cstring(p)?));
        }
    }
    confined.refs = git.watch.filter(|w| reachable(w.dir()));
    // The user's own git config, where a step could write it: the user's git would run what
    // a step planted there.
    for p in &policy.user_git {
        if std::fs::symlink_metadata(p).is_ok() && writable_areas.iter().any(|w| p.starts_with(w)) {
            mounts.push(MountOp::ReadOnlyTop(cstring(p)?));
        }
    }
    if policy.pid_namespace {
        pid_ns::prepare();
    }
    #[expect(unsafe_code, reason = "getuid/getgid have no safe wrapper in std")]
    // SAFETY: getuid and getgid take no arguments and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    Ok(Some((
        Hook {
            ruleset,
            mounts,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            pid_namespace: policy.pid_namespace,
            cwd: cwd.canonicalize().ok().map(|c| cstring(&c)).transpose()?,
        },
        confined,
    )))
}
