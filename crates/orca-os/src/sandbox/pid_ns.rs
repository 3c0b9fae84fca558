//! A PID namespace per step (ADR 0041): the step sees no process but its own, and when its
//! attempt ends everything in the namespace dies, daemons included.
//!
//! The sandbox's pre-exec hook runs in the step's group leader `L` (a forked copy of orca, in
//! orca's PID namespace: the process orca waits for and signals). After
//! `unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID)` and the mounts, [`enter`] forks:
//!
//! ```text
//! orca ─ L (leader, outside; waits, reports)
//!          └─ I (pid 1: the namespace's init; mounts /proc, reaps)
//!               └─ S (the step: Landlock, then exec)
//! ```
//!
//! * `I` mounts a fresh `/proc`, forks `S`, then only reaps; when `S` exits it hands `S`'s wait
//!   status to `L` through a pipe and exits — and the kernel kills every process left in the
//!   namespace (`setsid` and double-forked daemons included). It dies with `L` (parent-death
//!   signal), `L` dies with orca (parent-death signal, set by the process-group hook) and the
//!   group's watchdog covers the windows between.
//! * `L` and `I` never exec: both close every descriptor (they hold no lock, pipe or gate of
//!   the step), ignore the asynchronous signals (the step's group still gets orca's SIGTERM;
//!   `S` and its children act on it), are not dumpable and dump no core, and `I` wipes its copy
//!   of orca's command line and environment. `I` is not under Landlock, so the confined step
//!   can neither trace nor signal it: its memory (a copy of orca's) stays out of reach.
//! * `L` exits as `S` did (the same code, or the same signal), so orca reports the step as
//!   before.

use std::sync::OnceLock;

/// Where orca's command line and environment strings are (`/proc/self/stat` fields 48–51),
/// read once before any fork.
fn arg_env_area() -> Option<(usize, usize, usize, usize)> {
    static AREA: OnceLock<Option<(usize, usize, usize, usize)>> = OnceLock::new();
    *AREA.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let after = stat.get(stat.rfind(')')? + 1..)?;
        let fields: Vec<usize> = after
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        // `after` starts at field 3.
        let field = |n: usize| fields.get(n - 3).copied().filter(|v| *v != 0);
        Some((field(48)?, field(49)?, field(50)?, field(51)?))
    })
}

/// Reads what [`enter`] needs before the fork (it may not allocate or read files after).
pub(crate) fn prepare() {
    let _ = arg_env_area();
}

/// Signals that are synchronous faults keep their default action; every other catchable one
/// is ignored (orca's own handlers, inherited through fork, must never run in `L` or `I`),
/// except SIGCHLD, which must stay at its default for `waitpid` to work.
#[expect(unsafe_code, reason = "signal dispositions through libc")]
unsafe fn quiet_signals() {
    const FAULTS: [i32; 6] = [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGTRAP,
        libc::SIGSYS,
    ];
    // SAFETY: signal() takes integers and a disposition constant.
    unsafe {
        for sig in 1..=libc::SIGRTMAX() {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let action = if sig == libc::SIGCHLD || FAULTS.contains(&sig) {
                libc::SIG_DFL
            } else {
                libc::SIG_IGN
            };
            libc::signal(sig, action);
        }
    }
}

/// No core file, no tracing by the same user: `L` and `I` are copies of orca's memory.
#[expect(unsafe_code, reason = "prctl and setrlimit through libc")]
unsafe fn not_dumpable() {
    let none = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: integer arguments and a pointer to a live struct.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::setrlimit(libc::RLIMIT_CORE, &raw const none);
    }
}

#[expect(unsafe_code, reason = "sigprocmask through libc")]
unsafe fn set_mask(how: i32, block_all: bool) {
    // SAFETY: a sigset on the stack, filled or emptied before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        if block_all {
            libc::sigfillset(&raw mut set);
        } else {
            libc::sigemptyset(&raw mut set);
        }
        libc::sigprocmask(how, &raw const set, std::ptr::null_mut());
    }
}

/// Exits the way a child with wait status `status` ended: the same code, or the same signal.
#[expect(unsafe_code, reason = "raw exit and signal calls in a forked child")]
unsafe fn exit_like(status: i32) -> ! {
    // SAFETY: integer arguments only; the process ends here.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            libc::signal(sig, libc::SIG_DFL);
            set_mask(libc::SIG_SETMASK, false);
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            1
        })
    }
}

/// Waits for `pid`, retrying on EINTR; its wait status, or `None` if it is not a child.
#[expect(unsafe_code, reason = "waitpid through libc")]
unsafe fn wait_for(pid: i32) -> Option<i32> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a live int for waitpid to fill.
        let r = unsafe { libc::waitpid(pid, &raw mut status, 0) };
        if r == pid {
            return Some(status);
        }
        // SAFETY: reading errno of this thread.
        if r < 0 && unsafe { *libc::__errno_location() } != libc::EINTR {
            return None;
        }
    }
}

/// Runs in `L` after the namespaces are made: forks the namespace's init, which forks the
/// step. Returns only in the step's process (`Ok`), which goes on to confine itself and exec;
/// `L` and `I` never return. An error is the hook's error (the spawn fails with it).
#[expect(
    unsafe_code,
    reason = "fork, mount, pipe and process control in a forked child"
)]
pub(crate) fn enter() -> std::io::Result<()> {
    // SAFETY: runs between fork and exec in a single-threaded child: only async-signal-safe
    // system calls on integers, static C strings and stack buffers; no allocation.
    unsafe {
        set_mask(libc::SIG_SETMASK, true);
        let mut pipe = [0i32; 2];
        if libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            let e = std::io::Error::last_os_error();
            set_mask(libc::SIG_SETMASK, false);
            return Err(e);
        }
        let init = libc::fork();
        if init < 0 {
            let e = std::io::Error::last_os_error();
            set_mask(libc::SIG_SETMASK, false);
            return Err(e);
        }
        if init > 0 {
            leader(init, pipe[0], pipe[1]);
        }
        // I: pid 1 of the new namespace.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ) != 0
        {
            let e = std::io::Error::last_os_error();
            set_mask(libc::SIG_SETMASK, false);
            return Err(e);
        }
        let step = libc::fork();
        if step < 0 {
            let e = std::io::Error::last_os_error();
            set_mask(libc::SIG_SETMASK, false);
            return Err(e);
        }
        if step > 0 {
            namespace_init(step, pipe[1]);
        }
        // S: the step.
        libc::close(pipe[0]);
        libc::close(pipe[1]);
        set_mask(libc::SIG_SETMASK, false);
    }
    Ok(())
}

/// `L`: waits for the init, then exits the way the step did.
#[expect(unsafe_code, reason = "raw process control in a forked child")]
unsafe fn leader(init: i32, read: i32, write: i32) -> ! {
    // SAFETY: async-signal-safe calls on integers and stack buffers only.
    unsafe {
        libc::close(write);
        quiet_signals();
        not_dumpable();
        crate::process_group::close_all_but(read, read);
        set_mask(libc::SIG_SETMASK, false);
        let own = wait_for(init).unwrap_or(libc::SIGKILL);
        let mut step = 0i32;
        let n = loop {
            let n = libc::read(read, (&raw mut step).cast(), std::mem::size_of::<i32>());
            if n >= 0 || *libc::__errno_location() != libc::EINTR {
                break n;
            }
        };
        let size = isize::try_from(std::mem::size_of::<i32>()).unwrap_or(4);
        exit_like(if n == size { step } else { own })
    }
}

/// `I`: reaps every process of the namespace until the step exits, hands its status to `L`,
/// and exits (the kernel then kills whatever is left in the namespace).
#[expect(unsafe_code, reason = "raw process control in a forked child")]
unsafe fn namespace_init(step: i32, write: i32) -> ! {
    // SAFETY: async-signal-safe calls on integers, static strings and the memory of this
    // process's own copy of orca's command line (never read again here).
    unsafe {
        quiet_signals();
        not_dumpable();
        libc::prctl(libc::PR_SET_NAME, c"init".as_ptr(), 0, 0, 0);
        if let Some((arg_start, arg_end, env_start, env_end)) = arg_env_area() {
            for (start, end) in [(arg_start, arg_end), (env_start, env_end)] {
                if end > start {
                    std::ptr::write_bytes(
                        std::ptr::with_exposed_provenance_mut::<u8>(start),
                        0,
                        end - start,
                    );
                }
            }
        }
        crate::process_group::close_all_but(write, write);
        set_mask(libc::SIG_SETMASK, false);
        let mut status = 0i32;
        loop {
            let r = libc::waitpid(-1, &raw mut status, 0);
            if r == step {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                status = 0;
                break;
            }
        }
        libc::write(
            write,
            (&raw const status).cast(),
            std::mem::size_of::<i32>(),
        );
        libc::_exit(0)
    }
}
