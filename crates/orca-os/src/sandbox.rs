//! The sandbox of the processes agents start (shell steps, `run_command`, command-line agents).
//!
//! Three modes ([`SandboxMode`]): `kernel` confines each child with the kernel, `tools` keeps
//! only the tool-level checks ([`crate::confine`]), `off` keeps neither (loud: the caller warns).
//!
//! In `kernel` mode, between fork and exec the child
//! 1. enters a new user and mount namespace (it keeps its uid and gid, and loses every
//!    capability outside the namespace — a root caller too),
//! 2. makes its copy of the mount tree private, bind-mounts the project's `.orca/` read-only
//!    over itself, and hides the user's orca config directories (an empty read-only tmpfs) and
//!    the signing key file (`/dev/null`, read-only) — these mounts exist only for the child,
//! 3. sets `no_new_privs` and restricts itself with a Landlock ruleset prepared by the parent:
//!    read and execute everywhere, write only in the project root, a fresh per-step temporary
//!    directory (its `TMPDIR`), the extra writable paths of the policy, `/dev/shm` and the usual
//!    `/dev` nodes; no signals to processes outside the sandbox (Landlock ABI 6).
//!
//! Landlock only grants, so a writable project root would make `.orca/` writable with it; the
//! read-only bind mount is what takes it back, and Landlock forbids the child to unmount or
//! remount anything. See ADR 0012.

use std::ffi::CString;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    Scope, path_beneath_rules,
};

use crate::confine::{PathGuard, protected_paths, signing_key_path};

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
        })
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

/// Whether the kernel sandbox works here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelSupport {
    /// It works: a probe child was confined and could not write `.orca/`.
    Available {
        /// The Landlock ABI version of the kernel.
        landlock_abi: i64,
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
/// and must find the project's `.orca/` not writable.
#[must_use]
pub fn probe(policy: &SandboxPolicy) -> KernelSupport {
    let abi = landlock_abi();
    if abi < 1 {
        return KernelSupport::Unavailable {
            reason: "the kernel has no Landlock (or it is disabled)".to_owned(),
        };
    }
    let policy = policy.clone().with_mode(SandboxMode::Kernel);
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "test -d .orca && test ! -w .orca"])
        .current_dir(&policy.root)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let (hook, _confined) = match prepare(&policy) {
        Ok(Some(prepared)) => prepared,
        Ok(None) => {
            return KernelSupport::Unavailable {
                reason: "nothing to confine".to_owned(),
            };
        }
        Err(e) => {
            return KernelSupport::Unavailable {
                reason: e.to_string(),
            };
        }
    };
    install_std(&mut cmd, hook);
    match cmd.status() {
        Ok(st) if st.success() => KernelSupport::Available { landlock_abi: abi },
        Ok(st) => KernelSupport::Unavailable {
            reason: format!("a confined probe could still write .orca/ ({st})"),
        },
        Err(e) => KernelSupport::Unavailable {
            reason: format!(
                "a confined probe could not start (user namespaces may be disabled): {e}"
            ),
        },
    }
}

/// What lives as long as a confined child: its temporary directory, removed on drop.
#[derive(Debug, Default)]
pub struct Confined {
    temp: Option<PathBuf>,
}

impl Drop for Confined {
    fn drop(&mut self) {
        if let Some(t) = self.temp.take() {
            let _ = std::fs::remove_dir_all(&t);
        }
    }
}

/// Confines `cmd` per `policy`: in `kernel` mode, sets `TMPDIR` to a fresh directory and
/// installs the pre-exec hook; otherwise does nothing. Keep the returned guard until the child
/// has ended.
///
/// # Errors
///
/// The ruleset or the temporary directory cannot be made.
pub fn confine(
    cmd: &mut tokio::process::Command,
    policy: Option<&SandboxPolicy>,
) -> Result<Confined, SandboxError> {
    let Some(policy) = policy else {
        return Ok(Confined::default());
    };
    let Some((hook, confined)) = prepare(policy)? else {
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
    // mount_setattr, prctl, landlock_restrict_self) on data prepared before the fork; it does
    // not allocate, lock or touch state shared with other threads.
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

/// One mount the child makes.
#[derive(Debug)]
enum MountOp {
    /// Bind the directory over itself, read-only.
    ReadOnly(CString),
    /// Cover a directory with an empty read-only tmpfs.
    HideDir(CString),
    /// Cover a file with `/dev/null`, read-only.
    HideFile(CString),
}

/// Everything the child needs, prepared before the fork.
#[derive(Debug)]
struct Hook {
    ruleset: OwnedFd,
    mounts: Vec<MountOp>,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

fn cstring(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| SandboxError::Path {
        path: path.display().to_string(),
        message: "it holds a NUL byte".to_owned(),
    })
}

/// The hook and the guard of a kernel-mode policy; `None` in the other modes.
fn prepare(policy: &SandboxPolicy) -> Result<Option<(Hook, Confined)>, SandboxError> {
    if policy.mode != SandboxMode::Kernel {
        return Ok(None);
    }
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
    let confined = Confined {
        temp: Some(temp.clone()),
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
                .chain(policy.writable.iter().map(PathBuf::as_path)),
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
    #[expect(unsafe_code, reason = "getuid/getgid have no safe wrapper in std")]
    // SAFETY: getuid and getgid take no arguments and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    Ok(Some((
        Hook {
            ruleset,
            mounts,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        },
        confined,
    )))
}

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;

fn check(rc: libc::c_long) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Hook {
    /// Runs in the child between fork and exec: raw system calls only.
    #[expect(
        unsafe_code,
        reason = "namespace, mount, prctl and landlock calls have no safe wrapper"
    )]
    fn apply(&self) -> std::io::Result<()> {
        // SAFETY (every block below): each call takes integers and pointers to NUL-terminated
        // strings or buffers owned by `self`, alive for the call; none keeps a pointer.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS).into())?;
            write_proc(c"/proc/self/setgroups", b"deny")?;
            write_proc(c"/proc/self/uid_map", &self.uid_map)?;
            write_proc(c"/proc/self/gid_map", &self.gid_map)?;
            check(
                libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                )
                .into(),
            )?;
            for op in &self.mounts {
                match op {
                    MountOp::ReadOnly(path) => {
                        check(
                            libc::mount(
                                path.as_ptr(),
                                path.as_ptr(),
                                std::ptr::null(),
                                libc::MS_BIND | libc::MS_REC,
                                std::ptr::null(),
                            )
                            .into(),
                        )?;
                        read_only(path)?;
                    }
                    MountOp::HideDir(path) => check(
                        libc::mount(
                            c"tmpfs".as_ptr(),
                            path.as_ptr(),
                            c"tmpfs".as_ptr(),
                            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                            c"size=4k,mode=0500".as_ptr().cast(),
                        )
                        .into(),
                    )?,
                    MountOp::HideFile(path) => {
                        check(
                            libc::mount(
                                c"/dev/null".as_ptr(),
                                path.as_ptr(),
                                std::ptr::null(),
                                libc::MS_BIND,
                                std::ptr::null(),
                            )
                            .into(),
                        )?;
                        read_only(path)?;
                    }
                }
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
            check(libc::syscall(
                libc::SYS_landlock_restrict_self,
                self.ruleset.as_raw_fd(),
                0u32,
            ))?;
        }
        Ok(())
    }
}

/// Makes the mount at `path` (and those under it) read-only, leaving its other flags alone.
#[expect(unsafe_code, reason = "mount_setattr has no wrapper in std or libc")]
fn read_only(path: &CString) -> std::io::Result<()> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is NUL-terminated and `attr` is a `struct mount_attr` of the size passed;
    // both outlive the call.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    })
}

/// Writes `data` to a file of `/proc/self` with raw calls.
#[expect(
    unsafe_code,
    reason = "open/write/close without allocation, between fork and exec"
)]
fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    // SAFETY: `path` is NUL-terminated, `data` is a live buffer of the length passed, and the
    // descriptor is closed before returning.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n < 0 || n.unsigned_abs() != data.len() {
            return Err(err);
        }
    }
    Ok(())
}
