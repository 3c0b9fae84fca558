//! Process groups that live and die with their run (ADR 0010): the watchdog forked into every
//! group, graceful termination (SIGTERM to the group, a grace period, SIGKILL), the leader's
//! start time, and ending the groups a dead runner recorded.
//!
//! Every step process is the leader of its own process group. Before it execs, the leader
//! (still a copy of orca) sets a parent-death signal (SIGKILL) and forks a **watchdog**: a
//! member of the group that closes every descriptor but the read end of a pipe whose write end
//! only orca holds, ignores SIGTERM/SIGINT/SIGHUP, and blocks on that pipe. When orca dies —
//! however it dies — the kernel closes the write end, the watchdog's read returns, and it sends
//! SIGKILL to the whole group (itself included). While it lives it also pins the group id, so a
//! delayed `kill(-pgid)` can never hit a recycled id.
//!
//! What this cannot catch: a process that leaves the group (`setsid`, `setpgid`) escapes both
//! the watchdog and the group kill. In the kernel sandbox each step also gets a PID namespace
//! of its own ([`crate::sandbox::pid_ns`], ADR 0041), whose end takes such a process with it;
//! without one, only a cgroup would hold it (see ADR 0010).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use orca_core::{ProcessGroup, ReapOutcome};

/// The default grace period between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);

/// The longest wall-clock limit a child process gets: larger timeouts are clamped to this.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Graceful terminations still under way in background threads (see [`settle`]).
static TERMINATING: AtomicUsize = AtomicUsize::new(0);

/// Waits (at most `max`) until the graceful terminations started by dropped runs are over:
/// the binary calls it before it exits, so a step's grace period is honoured (when orca exits,
/// every watchdog ends its group at once).
pub async fn settle(max: Duration) {
    let start = Instant::now();
    while TERMINATING.load(Ordering::Acquire) > 0 && start.elapsed() < max {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The read end of the liveness pipe (the write end is held, close-on-exec, by this process
/// only and never written to), or `None` if it could not be made.
fn liveness_pipe() -> Option<i32> {
    static PIPE: OnceLock<Option<(i32, i32)>> = OnceLock::new();
    PIPE.get_or_init(|| {
        let mut fds = [0i32; 2];
        #[expect(unsafe_code, reason = "pipe2 has no safe wrapper in std")]
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        if rc == 0 {
            // Both ends stay open for the life of the process (never closed on purpose).
            Some((fds[0], fds[1]))
        } else {
            tracing::warn!(
                error = %std::io::Error::last_os_error(),
                "cannot make the liveness pipe: step processes will not have a watchdog"
            );
            None
        }
    })
    .map(|(read, _write)| read)
}

/// The first line of a gated shell command: wait for one line on fd 3, close it, go on; at
/// end of file (orca let go without opening the gate) exit 125 without doing anything.
pub(crate) const GATE_PREAMBLE: &str = "IFS= read -r _ <&3 || exit 125; exec 3<&-";

/// A pipe whose read end a gated command gets as fd 3: it starts when a line is written.
#[derive(Debug)]
pub(crate) struct Gate {
    read: std::os::fd::OwnedFd,
    write: std::os::fd::OwnedFd,
}

impl Gate {
    pub(crate) fn new() -> Option<Self> {
        use std::os::fd::FromRawFd as _;
        let mut fds = [0i32; 2];
        #[expect(unsafe_code, reason = "pipe2 has no safe wrapper in std")]
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill; on success both are
        // new descriptors we own (wrapped at once).
        unsafe {
            if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return None;
            }
            Some(Self {
                read: std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                write: std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            })
        }
    }

    pub(crate) fn read_fd(&self) -> i32 {
        use std::os::fd::AsRawFd as _;
        self.read.as_raw_fd()
    }

    /// Lets the command start.
    pub(crate) fn open(self) {
        use std::io::Write as _;
        let mut file = std::fs::File::from(self.write);
        let _ = file.write_all(b"go\n");
    }
}

/// What the step leader runs between fork and exec: its own group (again, idempotent), a
/// parent-death signal, a check that orca is still there, the watchdog fork, and the gate as
/// fd 3 if there is one.
/// `held`: descriptors the command inherits (its resource locks: they stay held while any
/// process of the step lives).
pub(crate) fn before_exec_hook(
    gate: Option<i32>,
    held: Vec<i32>,
) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
    let parent = i32::try_from(std::process::id()).unwrap_or(0);
    let pipe = liveness_pipe();
    move || {
        #[expect(
            unsafe_code,
            reason = "setpgid, prctl, getppid, fork have no safe wrappers"
        )]
        // SAFETY: runs in the forked child before exec: only async-signal-safe calls (setpgid,
        // prctl, getppid, fork, and in the watchdog read/close/kill/signal/_exit), no
        // allocation, no locks.
        unsafe {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The leader dies with the thread that forked it (a runtime worker thread, which
            // lives as long as the runtime); the watchdog covers the rest of the group.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if parent != 0 && libc::getppid() != parent {
                // orca died between fork and here: do not start the step at all.
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            if let Some(read_fd) = pipe {
                let pgid = libc::getpid();
                // Closed (close-on-exec) when this leader execs or exits: tells the watchdog
                // whether the step started at all.
                let mut exec_pipe = [0i32; 2];
                if libc::pipe2(exec_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let pid = libc::fork();
                if pid < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if pid == 0 {
                    watchdog(read_fd, exec_pipe[0], pgid);
                }
                libc::close(exec_pipe[0]);
            }
            // Nothing of orca's reaches the command but what is meant for it: every descriptor
            // from 3 up is made close-on-exec (those orca inherited from its own parent too),
            // then the held ones and the gate are made inheritable again.
            cloexec_from(3);
            // After the fork: fd 3 may have been the liveness pipe, which the leader no longer
            // needs. dup2 clears close-on-exec on the copy; a gate already at 3 is cleared by
            // hand.
            for &fd in &held {
                // Kept across exec; one at 3 is copied out of the gate's way first.
                let rc = if fd == 3 && gate.is_some() {
                    libc::fcntl(3, libc::F_DUPFD, 10)
                } else {
                    libc::fcntl(fd, libc::F_SETFD, 0)
                };
                if rc < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            let moved = match gate {
                Some(3) => libc::fcntl(3, libc::F_SETFD, 0),
                Some(fd) => libc::dup2(fd, 3),
                None => 0,
            };
            if moved < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// The watchdog's whole life: never returns.
#[expect(unsafe_code, reason = "raw libc calls in a forked child")]
unsafe fn watchdog(read_fd: i32, exec_fd: i32, pgid: i32) -> ! {
    // SAFETY: async-signal-safe calls only, in a single-threaded forked child.
    unsafe {
        // Named so that `ps` (and a test) can tell it apart: `orca-watchdog`.
        libc::prctl(libc::PR_SET_NAME, c"orca-watchdog".as_ptr(), 0, 0, 0);
        for sig in [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        close_all_but(read_fd, exec_fd);
        let mut byte = 0u8;
        // First: did the leader exec? Its end of `exec_fd` closes when it execs or exits. If it
        // is gone (the exec failed, e.g. "text file busy" and a retry), the watchdog ends the
        // group — itself — rather than wait for orca to exit.
        while libc::read(exec_fd, (&raw mut byte).cast(), 1) < 0
            && *libc::__errno_location() == libc::EINTR
        {}
        libc::close(exec_fd);
        // A leader that is exiting has closed its files before it is reparented: give that a
        // moment before asking who the parent is.
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 200_000_000,
        };
        libc::nanosleep(&raw const pause, std::ptr::null_mut());
        if libc::getppid() != pgid {
            // The leader is gone: its exec failed (the group is this watchdog alone), it ended
            // quickly (orca ends its leftovers anyway), or it died with orca (its parent-death
            // signal): in every case what is left of the group goes now.
            libc::kill(-pgid, libc::SIGKILL);
            libc::_exit(0);
        }
        // Until orca dies (the pipe's end of file), or the leader does: a leader that waits
        // for a PID namespace's init (`sandbox::pid_ns`) outlives the step's own exec, so the
        // check above is not enough to catch a step that never started.
        let mut fds = libc::pollfd {
            fd: read_fd,
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            let ready = libc::poll(&raw mut fds, 1, 1000);
            if ready == 0 {
                if libc::getppid() != pgid {
                    break;
                }
                continue;
            }
            if ready < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                break;
            }
            let n = libc::read(read_fd, (&raw mut byte).cast(), 1);
            if n == 0 {
                break;
            }
            if n < 0 && *libc::__errno_location() != libc::EINTR {
                break;
            }
        }
        libc::kill(-pgid, libc::SIGKILL);
        libc::_exit(0)
    }
}

/// Marks every descriptor from `first` up close-on-exec (`close_range` with
/// `CLOSE_RANGE_CLOEXEC`, or one by one up to the descriptor limit on older kernels).
#[expect(unsafe_code, reason = "raw libc calls in a forked child")]
unsafe fn cloexec_from(first: u32) {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    // SAFETY: close_range, getrlimit and fcntl take integers and a stack buffer.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, u32::MAX, CLOSE_RANGE_CLOEXEC) == 0 {
            return;
        }
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) == 0 {
            limit.rlim_cur.min(65_536)
        } else {
            65_536
        };
        let top = i32::try_from(top).unwrap_or(65_536);
        for fd in i32::try_from(first).unwrap_or(3)..top {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// Closes every descriptor but `a` and `b` (it holds no copy of orca's lease, locks, pipes).
#[expect(unsafe_code, reason = "raw libc calls in a forked child")]
pub(crate) unsafe fn close_all_but(a: i32, b: i32) {
    let (lo, hi) = (a.min(b), a.max(b));
    let (Ok(lo), Ok(hi)) = (u32::try_from(lo), u32::try_from(hi)) else {
        return;
    };
    // SAFETY: close_range/close only take integers.
    unsafe {
        let mut failed = false;
        for (from, to) in [
            (0, lo.checked_sub(1)),
            (lo + 1, hi.checked_sub(1)),
            (hi + 1, Some(u32::MAX)),
        ] {
            if let Some(to) = to
                && from <= to
                && libc::syscall(libc::SYS_close_range, from, to, 0u32) != 0
            {
                failed = true;
            }
        }
        if failed {
            for fd in 0..65_536i32 {
                if fd != a && fd != b {
                    libc::close(fd);
                }
            }
        }
    }
}

/// Sends `signal` to every process of group `pgid` (no-op for ids ≤ 1). Whether any member was
/// there to receive it.
pub(crate) fn signal_group(pgid: i32, signal: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    #[expect(unsafe_code, reason = "libc::kill has no safe wrapper in std")]
    // SAFETY: `kill` only takes integers; a negative pid addresses the process group (its id
    // is > 1, checked above).
    let rc = unsafe { libc::kill(-pgid, signal) };
    tracing::debug!(pgid, signal, rc, "signalled process group");
    rc == 0
}

/// SIGKILL to every process of group `pgid` (a child started as a group leader by
/// [`own_group`]). Whether any member was there to receive it.
pub fn kill_group(pgid: u32) -> bool {
    i32::try_from(pgid).is_ok_and(|pgid| signal_group(pgid, libc::SIGKILL))
}

/// SIGTERM to one process (`pid` > 1). `Ok` also when it is already gone.
///
/// # Errors
///
/// The pid is not a single process (≤ 1 or too large), or the kernel refused the signal.
pub fn terminate_process(pid: u32) -> std::io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .filter(|p| *p > 1)
        .ok_or_else(|| std::io::Error::other(format!("bad pid {pid}")))?;
    #[expect(unsafe_code, reason = "libc::kill has no safe wrapper in std")]
    // SAFETY: `kill` only takes integers; `pid` > 1 names one process.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(e);
        }
    }
    Ok(())
}

/// Makes `cmd` the leader of a process group of its own, with the watchdog every child of
/// orca gets: when orca dies, however it dies, the whole group is killed. For helpers orca
/// starts outside a step (notifiers, probes); steps go through
/// [`crate::process::run_captured`]. The caller kills the group ([`kill_group`], the child's
/// pid) once the child has ended: the watchdog stays in it until then.
pub fn own_group(cmd: &mut tokio::process::Command) {
    own_group_blocking(cmd.as_std_mut());
}

/// [`own_group`] for a blocking `std` command (a key command run while the config is read).
pub fn own_group_blocking(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    cmd.process_group(0);
    let hook = before_exec_hook(None, Vec::new());
    #[expect(
        unsafe_code,
        reason = "pre_exec is unsafe: the hook must be async-signal-safe"
    )]
    // SAFETY: the hook only makes async-signal-safe calls (see `before_exec_hook`).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Whether group `pgid` has any member left (zombies included).
fn group_alive(pgid: i32) -> bool {
    signal_group(pgid, 0)
}

/// Whether process `pid` is running (not gone, not a zombie).
fn running(pid: i32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|state| state != "Z"))
}

/// Whether any process of group `pgid` still runs (zombies, which only wait to be reaped, do
/// not count), from `/proc/*/stat` (field 5 is the group).
fn members_running(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat_fields)
        .any(|f| {
            f.first().is_some_and(|state| state != "Z" && state != "X")
                && f.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
        })
}

/// The fields of `/proc/<pid>/stat` after the command name (so index 0 is field 3, `state`).
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = text.get(text.rfind(')')? + 1..)?;
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// The start time of process `pid` (clock ticks since boot, `/proc/<pid>/stat` field 22).
#[must_use]
pub fn start_time_of(pid: i32) -> Option<u64> {
    stat_fields(pid)?.get(22 - 3)?.parse().ok()
}

/// The group record of a just-spawned leader.
pub(crate) fn group_of(pid: u32) -> Option<ProcessGroup> {
    let pgid = i32::try_from(pid).ok()?;
    Some(ProcessGroup {
        pgid,
        start_time: start_time_of(pgid)?,
    })
}

/// Ends a group whose run was dropped (stop, Ctrl-C, cancellation): SIGTERM to the group now,
/// then, in a background thread, SIGKILL as soon as the leader has exited or the grace period
/// is over. The watchdog (a member that ignores SIGTERM) keeps the group id from being reused
/// meanwhile.
pub(crate) fn terminate_in_background(pgid: i32, grace: Duration) {
    if !signal_group(pgid, libc::SIGTERM) {
        return;
    }
    TERMINATING.fetch_add(1, Ordering::AcqRel);
    let spawned = std::thread::Builder::new()
        .name(format!("orca-term-{pgid}"))
        .spawn(move || {
            let start = Instant::now();
            while running(pgid) && start.elapsed() < grace {
                std::thread::sleep(Duration::from_millis(20));
            }
            signal_group(pgid, libc::SIGKILL);
            // SIGKILL is delivered asynchronously: on a loaded machine a member can still run
            // for a moment. `settle` (and so orca's exit) waits until none does.
            let killed = Instant::now();
            while members_running(pgid) && killed.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(10));
            }
            TERMINATING.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        signal_group(pgid, libc::SIGKILL);
        TERMINATING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Ends the groups a dead runner recorded: for each, checks the leader's start time (a pid
/// now running something else is [`ReapOutcome::PidReused`] and left alone), sends SIGTERM to
/// the group, waits up to the grace period for it to empty, sends SIGKILL, and waits for the
/// members to be gone.
pub async fn reap_groups(groups: &[ProcessGroup], grace: Duration) -> Vec<ReapOutcome> {
    let mut out = Vec::with_capacity(groups.len());
    for group in groups {
        let group = *group;
        let outcome = tokio::task::spawn_blocking(move || reap_one(group, grace))
            .await
            .unwrap_or(ReapOutcome::Survived);
        out.push(outcome);
    }
    out
}

fn reap_one(group: ProcessGroup, grace: Duration) -> ReapOutcome {
    let pgid = group.pgid;
    if pgid <= 1 {
        return ReapOutcome::Gone;
    }
    match start_time_of(pgid) {
        // The leader's pid runs something else now. (A pid is never reused while it is still
        // the id of a live group, so a leader-less group with members is still ours.)
        Some(started) if started != group.start_time => return ReapOutcome::PidReused,
        _ => {}
    }
    if !group_alive(pgid) {
        return ReapOutcome::Gone;
    }
    signal_group(pgid, libc::SIGTERM);
    let wait = |limit: Duration| {
        let start = Instant::now();
        while group_alive(pgid) && start.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(20));
        }
        !group_alive(pgid)
    };
    if wait(grace) {
        return ReapOutcome::Killed;
    }
    signal_group(pgid, libc::SIGKILL);
    if wait(Duration::from_secs(5)) {
        ReapOutcome::Killed
    } else {
        ReapOutcome::Survived
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_of_this_process_is_stable_and_a_missing_pid_has_none() {
        let me = i32::try_from(std::process::id()).unwrap();
        let a = start_time_of(me).unwrap();
        assert_eq!(start_time_of(me), Some(a));
        assert_eq!(start_time_of(i32::MAX), None);
    }

    #[test]
    fn a_reused_pid_is_left_alone() {
        let me = i32::try_from(std::process::id()).unwrap();
        let start = start_time_of(me).unwrap();
        let fake = ProcessGroup {
            pgid: me,
            start_time: start + 1,
        };
        assert_eq!(
            reap_one(fake, Duration::from_millis(10)),
            ReapOutcome::PidReused
        );
    }

    /// Watchdogs whose leader is gone (their parent is not their group's leader).
    fn stray_watchdogs() -> usize {
        let mut n = 0;
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Some((head, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            if head.ends_with("(orca-watchdog") && f.first() != Some(&"Z") && f.get(1) != f.get(2) {
                n += 1;
            }
        }
        n
    }

    /// A spawn whose exec fails (a missing program, or "text file busy" before a retry)
    /// leaves no watchdog behind.
    #[tokio::test]
    async fn a_failed_exec_leaves_no_watchdog() {
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..3 {
            let out = crate::process::run_captured(crate::process::RunSpec {
                program: "/nonexistent/orca-test-program",
                args: vec![],
                cwd: dir.path(),
                env: vec![],
                timeout: Some(Duration::from_secs(5)),
                cap: 1024,
                owner: None,
                sandbox: None,
                stdin: None,
                kill_grace: DEFAULT_KILL_GRACE,
                interleave: false,
            })
            .await;
            assert!(matches!(out.end, crate::process::RunEnd::SpawnFailed(_)));
        }
        let start = Instant::now();
        while stray_watchdogs() > 0 && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(stray_watchdogs(), 0);
    }
}
