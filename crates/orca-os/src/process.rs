//! Child processes in their own process group: output capture with a cap, a timeout (clamped
//! to [`MAX_TIMEOUT`]), and a guard that ends the whole group — SIGTERM, a grace period,
//! SIGKILL — when the run ends early or its future is dropped. Each group carries a watchdog
//! that kills it if orca dies (see [`crate::process_group`], ADR 0010).

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, SystemTime};

use orca_core::ToolHost;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

pub use crate::idle::IdleLimit;
use crate::process_group;
use crate::process_group::MAX_TIMEOUT;

/// Output kept of a child process (stdout and stderr interleaved): the last `OUTPUT_CAP` bytes.
pub const OUTPUT_CAP: usize = 1024 * 1024;

/// How long to wait for the pipes to close once the group has been killed.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Ends a process group when dropped, unless disarmed: SIGTERM to the group, then SIGKILL
/// once the leader has exited or the grace period is over (in the background: a drop cannot
/// wait). See [`crate::process_group`].
#[derive(Debug)]
pub(crate) struct GroupGuard {
    pgid: Option<i32>,
    /// Between SIGTERM and SIGKILL.
    grace: Duration,
}

impl GroupGuard {
    pub(crate) const fn new(pgid: Option<i32>, grace: Duration) -> Self {
        Self { pgid, grace }
    }

    /// Kills the group now with SIGKILL (idempotent: the group id is forgotten).
    pub(crate) fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            process_group::signal_group(pgid, libc::SIGKILL);
        }
    }

    /// Ends the group gracefully: SIGTERM, up to the grace period for the leader to exit,
    /// then SIGKILL to whatever is left (idempotent).
    pub(crate) async fn terminate(&mut self, child: &mut tokio::process::Child) {
        let Some(pgid) = self.pgid else {
            return;
        };
        process_group::signal_group(pgid, libc::SIGTERM);
        let _ = tokio::time::timeout(self.grace, child.wait()).await;
        self.kill();
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            process_group::terminate_in_background(pgid, self.grace);
        }
    }
}

/// Output kept from a child: the tail, with a count of the bytes dropped before it.
#[derive(Debug, Default)]
pub(crate) struct OutputBuf {
    bytes: Vec<u8>,
    dropped: u64,
    cap: usize,
}

impl OutputBuf {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            bytes: Vec::new(),
            dropped: 0,
            cap,
        }
    }

    pub(crate) fn push(&mut self, data: &[u8]) {
        self.bytes.extend_from_slice(data);
        // Trim in batches so long outputs stay linear.
        if self.bytes.len() > self.cap.saturating_mul(2).max(4096) {
            let excess = self.bytes.len() - self.cap;
            self.bytes.drain(..excess);
            self.dropped += excess as u64;
        }
    }

    /// The kept text (lossy UTF-8), prefixed with a note if the start was dropped.
    pub(crate) fn text(&self) -> String {
        let mut dropped = self.dropped;
        let mut bytes = self.bytes.as_slice();
        if bytes.len() > self.cap {
            let excess = bytes.len() - self.cap;
            bytes = &bytes[excess..];
            dropped += excess as u64;
        }
        let body = String::from_utf8_lossy(bytes);
        if dropped > 0 {
            format!("[… {dropped} bytes of earlier output omitted …]\n{body}")
        } else {
            body.into_owned()
        }
    }
}

/// How a child run ended.
#[derive(Debug)]
pub enum RunEnd {
    /// It exited.
    Exited(ExitStatus),
    /// The timeout was reached; the group was ended (SIGTERM, grace, SIGKILL).
    TimedOut,
    /// It could not be started.
    SpawnFailed(std::io::Error),
    /// It printed nothing and changed no file for its idle limit (see
    /// [`run_captured_watched`]); the group was ended (SIGTERM, grace, SIGKILL).
    Idle(Duration),
}

/// The result of [`run_captured`].
#[derive(Debug)]
pub struct RunOutput {
    pub end: RunEnd,
    /// Stdout and stderr, interleaved as they arrived, capped.
    pub output: String,
    /// Stdout alone, capped (for parsing JSON output).
    pub stdout: String,
}

/// What to run.
pub struct RunSpec<'a> {
    pub program: &'a str,
    pub args: Vec<String>,
    pub cwd: &'a Path,
    /// The complete environment of the child (it inherits nothing).
    pub env: Vec<(String, String)>,
    pub timeout: Option<Duration>,
    pub cap: usize,
    /// Told the group id and leader start time as soon as the process is started
    /// ([`ToolHost::process_started`]), so it can record them durably. A shell command
    /// (`sh -c`) waits at a gate until that has returned.
    pub owner: Option<&'a dyn ToolHost>,
    /// The sandbox to run it in (see [`crate::sandbox`]); `None`: unconfined.
    pub sandbox: Option<&'a crate::sandbox::SandboxPolicy>,
    /// Bytes written to the child's stdin, which is then closed (a prompt: no argument-length
    /// limit); `None`: stdin is `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// How long its group gets between SIGTERM and SIGKILL when the run ends early
    /// ([`crate::process_group::DEFAULT_KILL_GRACE`] unless the run says otherwise).
    pub kill_grace: Duration,
    /// Stdout and stderr through one pipe, so that the output keeps the order the child wrote
    /// it in (two pipes read at once cannot); [`RunOutput::stdout`] then holds both. Off for
    /// a program whose stdout is parsed apart from its stderr.
    pub interleave: bool,
}

impl std::fmt::Debug for RunSpec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSpec")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("timeout", &self.timeout)
            .field("cap", &self.cap)
            .field("sandbox", &self.sandbox)
            .field("stdin_bytes", &self.stdin.as_ref().map(Vec::len))
            .finish_non_exhaustive()
    }
}

/// Spawns `cmd`, retrying a few times when exec fails with "text file busy" (ETXTBSY).
///
/// That error is transient: it happens when the executable was just written and another thread
/// of this process forked while the write descriptor was open, so the child holds it until its
/// own exec. Freshly written agent scripts (and tests running in parallel) hit it; cargo retries
/// the same way.
async fn spawn_retrying_busy(cmd: &mut Command) -> std::io::Result<tokio::process::Child> {
    let mut delay = Duration::from_millis(10);
    for _ in 0..6 {
        match cmd.spawn() {
            Err(err) if err.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                tokio::time::sleep(delay).await;
                delay = delay.saturating_mul(2);
            }
            other => return other,
        }
    }
    cmd.spawn()
}

/// Runs a program in its own process group, capturing output. The group is killed on timeout,
/// after the main process exits (leftover background children), and when this future is dropped.
pub async fn run_captured(spec: RunSpec<'_>) -> RunOutput {
    run_captured_watched(spec, None).await
}

/// Files modified this long before the last sign of life still count as new: a file's time
/// comes from a coarser clock than [`SystemTime::now`].
const MTIME_SLACK: Duration = Duration::from_millis(100);

/// As [`run_captured`], also ending the run as [`RunEnd::Idle`] when it shows no sign of life
/// (output, or a file modified under [`IdleLimit::tree`]) for [`IdleLimit::after`].
pub async fn run_captured_watched(spec: RunSpec<'_>, idle: Option<IdleLimit<'_>>) -> RunOutput {
    let mut cmd = Command::new(spec.program);
    cmd.current_dir(spec.cwd)
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .process_group(0)
        // The guard ends the group (gracefully); a plain SIGKILL to the leader on drop would
        // cut the grace period short.
        .kill_on_drop(false);
    // A shell command owned by a caller starts behind a gate: it reads one line from fd 3
    // before it runs, so its group is recorded before it does any work.
    let gate = match (spec.owner, spec.program, spec.args.as_slice()) {
        (Some(_), "sh", [flag, script]) if flag == "-c" => process_group::Gate::new()
            .map(|g| (g, format!("{}\n{script}", process_group::GATE_PREAMBLE))),
        _ => None,
    };
    match &gate {
        Some((_, gated)) => cmd.args(["-c", gated.as_str()]),
        None => cmd.args(&spec.args),
    };
    // One pipe for both streams keeps their order; the parent's copies of its write end are
    // closed once the child is started (with `cmd`), so the read end sees the end of output.
    let merged = if spec.interleave {
        match std::io::pipe().and_then(|(r, w)| Ok((r, w.try_clone()?, w))) {
            Ok((reader, out, err)) => {
                cmd.stdout(out).stderr(err);
                Some(reader)
            }
            Err(err) => {
                return RunOutput {
                    end: RunEnd::SpawnFailed(err),
                    output: String::new(),
                    stdout: String::new(),
                };
            }
        }
    } else {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        None
    };
    // `spec.env` is the complete environment (an allowlist, see `step_env`): nothing of
    // orca's own environment leaks through.
    cmd.env_clear();
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    // Process ownership first (the watchdog is forked before the sandbox applies: it stays
    // outside it, where a confined step cannot signal it), then the sandbox.
    // A step in a PID namespace of its own does not get them: all its processes end with its
    // attempt (the lock, held by orca, outlives them), and a descriptor opened outside the
    // sandbox could be opened again for writing through `/proc/self/fd` (ADR 0041).
    let held = if spec
        .sandbox
        .is_some_and(crate::sandbox::SandboxPolicy::pid_namespace)
    {
        Vec::new()
    } else {
        spec.owner.map(ToolHost::held_fds).unwrap_or_default()
    };
    let hook = process_group::before_exec_hook(gate.as_ref().map(|(g, _)| g.read_fd()), held);
    #[expect(
        unsafe_code,
        reason = "pre_exec is unsafe: the hook must be async-signal-safe"
    )]
    // SAFETY: the hook only makes async-signal-safe calls (see `before_exec_hook`).
    unsafe {
        cmd.pre_exec(hook);
    }
    // Kept until the child has ended: its per-step temporary directory.
    let mut confined = match crate::sandbox::confine(&mut cmd, spec.sandbox, spec.cwd) {
        Ok(confined) => confined,
        Err(err) => {
            return RunOutput {
                end: RunEnd::SpawnFailed(std::io::Error::other(err)),
                output: String::new(),
                stdout: String::new(),
            };
        }
    };
    let mut child = match spawn_retrying_busy(&mut cmd).await {
        Ok(child) => child,
        Err(err) => {
            return RunOutput {
                end: RunEnd::SpawnFailed(err),
                output: String::new(),
                stdout: String::new(),
            };
        }
    };
    drop(cmd);
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    let mut guard = GroupGuard::new(pgid, spec.kill_grace);
    if let (Some(owner), Some(group)) = (spec.owner, child.id().and_then(process_group::group_of)) {
        owner.process_started(group).await;
    }
    if let Some((gate, _)) = gate {
        // Recorded: the command may start (a gate dropped unopened makes it exit 125).
        gate.open();
    }
    if let (Some(mut pipe), Some(bytes)) = (child.stdin.take(), spec.stdin) {
        // In its own task: a child that reads slowly (or never) must not stall the output
        // loop. The pipe closes when the task ends, so the child sees end of input; a child
        // that exits without reading makes the write fail (EPIPE), which is not an error here.
        tokio::spawn(async move {
            let _ = pipe.write_all(&bytes).await;
            let _ = pipe.shutdown().await;
        });
    }
    let mut stdout: Option<Box<dyn AsyncRead + Unpin + Send>> = match merged {
        Some(reader) => {
            match tokio::net::unix::pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(
                reader,
            )) {
                Ok(r) => Some(Box::new(r)),
                Err(err) => {
                    guard.kill();
                    return RunOutput {
                        end: RunEnd::SpawnFailed(err),
                        output: String::new(),
                        stdout: String::new(),
                    };
                }
            }
        }
        None => child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn AsyncRead + Unpin + Send>),
    };
    let mut stderr = child.stderr.take();
    let mut all = OutputBuf::new(spec.cap);
    let mut out_only = OutputBuf::new(spec.cap);
    let mut buf_out = vec![0u8; 16 * 1024];
    let mut buf_err = vec![0u8; 16 * 1024];

    let deadline = spec
        .timeout
        .map(|t| tokio::time::Instant::now() + t.min(MAX_TIMEOUT));
    let sleep = async move {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(sleep);
    let mut status: Option<ExitStatus> = None;
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    // The last sign of life, on both clocks (files carry wall-clock times).
    let mut alive = (tokio::time::Instant::now(), SystemTime::now());

    loop {
        if status.is_some() && stdout.is_none() && stderr.is_none() {
            break;
        }
        let dd = drain_deadline;
        let drain = async move {
            match dd {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let idle_at = idle.map(|l| alive.0 + l.after.min(MAX_TIMEOUT));
        let silent = async move {
            match idle_at {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            n = read_some(&mut stdout, &mut buf_out), if stdout.is_some() => match n {
                Some(n) => {
                    alive = (tokio::time::Instant::now(), SystemTime::now());
                    all.push(&buf_out[..n]);
                    out_only.push(&buf_out[..n]);
                }
                None => stdout = None,
            },
            n = read_some(&mut stderr, &mut buf_err), if stderr.is_some() => match n {
                Some(n) => {
                    alive = (tokio::time::Instant::now(), SystemTime::now());
                    all.push(&buf_err[..n]);
                }
                None => stderr = None,
            },
            () = silent, if status.is_none() => {
                let Some(limit) = idle else { continue };
                let now = (tokio::time::Instant::now(), SystemTime::now());
                let since = alive.1.checked_sub(MTIME_SLACK).unwrap_or(alive.1);
                let changed = match limit.tree.map(Path::to_path_buf) {
                    Some(tree) => tokio::task::spawn_blocking(move || crate::idle::modified_since(&tree, since))
                        .await
                        .unwrap_or(true),
                    None => false,
                };
                if changed {
                    alive = now;
                    continue;
                }
                guard.terminate(&mut child).await;
                let _ = tokio::time::timeout(DRAIN_GRACE, child.wait()).await;
                let out = RunOutput { end: RunEnd::Idle(limit.after), output: all.text(), stdout: out_only.text() };
                return settled(out, &mut confined);
            },
            st = child.wait(), if status.is_none() => {
                match st {
                    Ok(st) => status = Some(st),
                    Err(err) => {
                        tracing::warn!(%err, "waiting for child failed");
                        guard.kill();
                        return RunOutput { end: RunEnd::SpawnFailed(err), output: all.text(), stdout: out_only.text() };
                    }
                }
                // Leftover background processes would keep the pipes open: end them.
                guard.kill();
                drain_deadline = Some(tokio::time::Instant::now() + DRAIN_GRACE);
            },
            () = &mut sleep, if status.is_none() => {
                guard.terminate(&mut child).await;
                // Reap the direct child; the pipes close with the group.
                let _ = tokio::time::timeout(DRAIN_GRACE, child.wait()).await;
                let out = RunOutput { end: RunEnd::TimedOut, output: all.text(), stdout: out_only.text() };
                return settled(out, &mut confined);
            },
            () = drain => break,
        }
    }
    let end = status.map_or_else(
        || RunEnd::SpawnFailed(std::io::Error::other("no exit status")),
        RunEnd::Exited,
    );
    let out = RunOutput {
        end,
        output: all.text(),
        stdout: out_only.text(),
    };
    settled(out, &mut confined)
}

/// The output of a child that has ended, with what its sandbox put right afterwards: refs it
/// made beside the checked-out branch, moved out of `refs/` (ADR 0042).
fn settled(mut out: RunOutput, confined: &mut crate::sandbox::Confined) -> RunOutput {
    let moved = confined.settle();
    if !moved.is_empty() {
        out.output.push_str(&format!(
            "\norca: a step may commit only to the checked-out branch; refs made beside it were moved out of refs/:\n  {}\n",
            moved.join("\n  ")
        ));
    }
    out
}

async fn read_some<R: AsyncRead + Unpin>(reader: &mut Option<R>, buf: &mut [u8]) -> Option<usize> {
    let r = reader.as_mut()?;
    match r.read(buf).await {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(n),
    }
}

/// The last `max_lines` lines of `text`, at most `max_bytes` bytes (cut at a char boundary).
pub fn tail(text: &str, max_lines: usize, max_bytes: usize) -> String {
    let trimmed = text.trim_end();
    let mut start = trimmed.len();
    let mut lines = 0;
    for (i, c) in trimmed.char_indices().rev() {
        if c == '\n' {
            lines += 1;
            if lines >= max_lines {
                break;
            }
        }
        start = i;
    }
    let mut out = &trimmed[start..];
    if out.len() > max_bytes {
        let mut cut = out.len() - max_bytes;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = &out[cut..];
    }
    out.to_owned()
}

#[cfg(test)]
mod tests;
