//! Child processes in their own process group: output capture with a cap, a timeout, and a
//! guard that kills the whole group when the run ends early or its future is dropped.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

/// Output kept of a child process (stdout and stderr interleaved): the last `OUTPUT_CAP` bytes.
pub const OUTPUT_CAP: usize = 1024 * 1024;

/// How long to wait for the pipes to close once the group has been killed.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Kills a process group (SIGKILL to `-pgid`) when dropped, unless disarmed.
#[derive(Debug)]
pub(crate) struct GroupGuard {
    pgid: Option<i32>,
}

impl GroupGuard {
    pub(crate) const fn new(pgid: Option<i32>) -> Self {
        Self { pgid }
    }

    /// Kills the group now (idempotent: the group id is forgotten).
    pub(crate) fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            kill_group(pgid);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

fn kill_group(pgid: i32) {
    if pgid <= 1 {
        return;
    }
    #[expect(unsafe_code, reason = "libc::kill has no safe wrapper in std")]
    // SAFETY: `kill` only takes integers; a negative pid addresses the process group we
    // created with `process_group(0)` (its id is the child's pid, checked > 1 above).
    let rc = unsafe { libc::kill(-pgid, libc::SIGKILL) };
    tracing::debug!(pgid, rc, "killed process group");
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
pub(crate) enum RunEnd {
    /// It exited.
    Exited(ExitStatus),
    /// The timeout was reached; the group was killed.
    TimedOut,
    /// It could not be started.
    SpawnFailed(std::io::Error),
}

/// The result of [`run_captured`].
#[derive(Debug)]
pub(crate) struct RunOutput {
    pub(crate) end: RunEnd,
    /// Stdout and stderr, interleaved as they arrived, capped.
    pub(crate) output: String,
    /// Stdout alone, capped (for parsing JSON output).
    pub(crate) stdout: String,
}

/// What to run.
#[derive(Debug)]
pub(crate) struct RunSpec<'a> {
    pub(crate) program: &'a str,
    pub(crate) args: Vec<String>,
    pub(crate) cwd: &'a Path,
    /// The complete environment of the child (it inherits nothing).
    pub(crate) env: Vec<(String, String)>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) cap: usize,
    /// The sandbox to run it in (see [`crate::sandbox`]); `None`: unconfined.
    pub(crate) sandbox: Option<&'a crate::sandbox::SandboxPolicy>,
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
pub(crate) async fn run_captured(spec: RunSpec<'_>) -> RunOutput {
    let mut cmd = Command::new(spec.program);
    cmd.args(&spec.args)
        .current_dir(spec.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // `spec.env` is the complete environment (an allowlist, see `step_env`): nothing of
    // orca's own environment leaks through.
    cmd.env_clear();
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    // Kept until the child has ended: its per-step temporary directory.
    let _confined = match crate::sandbox::confine(&mut cmd, spec.sandbox) {
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
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    let mut guard = GroupGuard::new(pgid);
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let mut all = OutputBuf::new(spec.cap);
    let mut out_only = OutputBuf::new(spec.cap);
    let mut buf_out = vec![0u8; 16 * 1024];
    let mut buf_err = vec![0u8; 16 * 1024];

    let deadline = spec.timeout.map(|t| tokio::time::Instant::now() + t);
    let sleep = async move {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(sleep);
    let mut status: Option<ExitStatus> = None;
    let mut drain_deadline: Option<tokio::time::Instant> = None;

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
        tokio::select! {
            n = read_some(&mut stdout, &mut buf_out), if stdout.is_some() => match n {
                Some(n) => {
                    all.push(&buf_out[..n]);
                    out_only.push(&buf_out[..n]);
                }
                None => stdout = None,
            },
            n = read_some(&mut stderr, &mut buf_err), if stderr.is_some() => match n {
                Some(n) => all.push(&buf_err[..n]),
                None => stderr = None,
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
                guard.kill();
                // Reap the direct child; the pipes close with the group.
                let _ = tokio::time::timeout(DRAIN_GRACE, child.wait()).await;
                return RunOutput { end: RunEnd::TimedOut, output: all.text(), stdout: out_only.text() };
            },
            () = drain => break,
        }
    }
    let end = status.map_or_else(
        || RunEnd::SpawnFailed(std::io::Error::other("no exit status")),
        RunEnd::Exited,
    );
    RunOutput {
        end,
        output: all.text(),
        stdout: out_only.text(),
    }
}

async fn read_some<R: AsyncRead + Unpin>(reader: &mut Option<R>, buf: &mut [u8]) -> Option<usize> {
    let r = reader.as_mut()?;
    match r.read(buf).await {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(n),
    }
}

/// The last `max_lines` lines of `text`, at most `max_bytes` bytes (cut at a char boundary).
pub(crate) fn tail(text: &str, max_lines: usize, max_bytes: usize) -> String {
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
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_last_lines_and_bytes() {
        let text: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let t = tail(&text, 20, 2048);
        assert!(t.starts_with("line 11\n"), "{t}");
        assert!(t.ends_with("line 30"));
        assert_eq!(tail("abcdef", 20, 3), "def");
        assert_eq!(tail("", 20, 3), "");
        assert_eq!(tail("é漢字", 20, 4), "字");
    }

    #[test]
    fn output_buf_keeps_the_tail_and_counts_drops() {
        let mut b = OutputBuf::new(10);
        for _ in 0..1000 {
            b.push(b"0123456789");
        }
        b.push(b"ABCDEFGHIJ");
        let t = b.text();
        assert!(t.ends_with("\nABCDEFGHIJ"), "{t}");
        assert!(t.contains("10000 bytes of earlier output omitted"), "{t}");
    }

    /// An executable still open for writing cannot be exec'd (ETXTBSY); the spawn waits for
    /// the writer to close it instead of failing.
    #[tokio::test]
    async fn busy_executable_is_retried_until_its_writer_closes_it() {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .open(&path)
            .unwrap();
        file.write_all(b"#!/bin/sh\necho ran\n").unwrap();
        // Still open for writing: exec would fail with "text file busy" now.
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(file);
        });
        let program = path.display().to_string();
        let out = run_captured(RunSpec {
            program: &program,
            args: vec![],
            cwd: dir.path(),
            env: vec![],
            timeout: Some(Duration::from_secs(10)),
            cap: 1024,
            sandbox: None,
        })
        .await;
        closer.join().unwrap();
        assert!(
            matches!(out.end, RunEnd::Exited(st) if st.success()),
            "{:?}",
            out.end
        );
        assert_eq!(out.stdout.trim(), "ran");
    }
}
