//! The pre-exec half of the kernel sandbox: what the child does between fork and exec, with
//! raw system calls on data [`super::prepare`] made before the fork (ADR 0012, ADR 0041).

use std::ffi::CString;
use std::os::fd::{AsRawFd as _, OwnedFd};

use super::pid_ns;

/// One mount the child makes.
#[derive(Debug)]
pub(super) enum MountOp {
    /// Bind the directory over itself, read-only (with everything mounted under it).
    ReadOnly(CString),
    /// Bind a path over itself, writable: pins it (a mount point cannot be renamed or
    /// removed) and keeps it writable inside a later [`MountOp::ReadOnlyTop`].
    Pin(CString),
    /// Bind a path over itself (with what is mounted under it) and make only that mount
    /// read-only: pins made before inside it stay writable.
    ReadOnlyTop(CString),
    /// Cover a directory with an empty read-only tmpfs.
    HideDir(CString),
    /// Cover a file with `/dev/null`, read-only.
    HideFile(CString),
}

/// Everything the child needs, prepared before the fork.
#[derive(Debug)]
pub(super) struct Hook {
    pub(super) ruleset: OwnedFd,
    pub(super) mounts: Vec<MountOp>,
    pub(super) uid_map: Vec<u8>,
    pub(super) gid_map: Vec<u8>,
    pub(super) pid_namespace: bool,
    /// The child's working directory, entered again once the mounts are made: the one entered
    /// before them still names the directory beneath them, where the read-only binds are not.
    pub(super) cwd: Option<CString>,
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
    pub(super) fn apply(&self) -> std::io::Result<()> {
        // SAFETY (every block below): each call takes integers and pointers to NUL-terminated
        // strings or buffers owned by `self`, alive for the call; none keeps a pointer.
        unsafe {
            let pid = if self.pid_namespace {
                libc::CLONE_NEWPID
            } else {
                0
            };
            check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | pid).into())?;
            // Kept across the new credentials (as before them): the leader dies with orca.
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0).into())?;
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
                        bind(path, true)?;
                        read_only(path, true)?;
                    }
                    MountOp::Pin(path) => bind(path, true)?,
                    MountOp::ReadOnlyTop(path) => {
                        bind(path, true)?;
                        read_only(path, false)?;
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
                        read_only(path, true)?;
                    }
                }
            }
            if let Some(cwd) = &self.cwd {
                check(libc::chdir(cwd.as_ptr()).into())?;
            }
            if self.pid_namespace {
                // Returns in the step's process only (the leader and the init never return).
                pid_ns::enter()?;
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

/// Binds `path` over itself (`recursive`: with the mounts under it).
#[expect(unsafe_code, reason = "mount has no safe wrapper in std")]
fn bind(path: &CString, recursive: bool) -> std::io::Result<()> {
    let flags = if recursive {
        libc::MS_BIND | libc::MS_REC
    } else {
        libc::MS_BIND
    };
    // SAFETY: `path` is NUL-terminated and outlives the call; the other pointers are null.
    check(
        unsafe {
            libc::mount(
                path.as_ptr(),
                path.as_ptr(),
                std::ptr::null(),
                flags,
                std::ptr::null(),
            )
        }
        .into(),
    )
}

/// Makes the mount at `path` read-only (`recursive`: and those under it), leaving its other
/// flags alone.
#[expect(unsafe_code, reason = "mount_setattr has no wrapper in std or libc")]
fn read_only(path: &CString, recursive: bool) -> std::io::Result<()> {
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
            if recursive {
                libc::AT_RECURSIVE as libc::c_uint
            } else {
                0
            },
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
