//! The process runner's tests: output capture, timeouts, groups, busy executables.

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
        owner: None,
        sandbox: None,
        stdin: None,
        kill_grace: crate::process_group::DEFAULT_KILL_GRACE,
        interleave: false,
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

fn sh(dir: &Path, script: &str, timeout: Option<Duration>) -> RunSpec<'static> {
    let cwd: &'static Path = Box::leak(dir.to_path_buf().into_boxed_path());
    RunSpec {
        program: "sh",
        args: vec!["-c".to_owned(), script.to_owned()],
        cwd,
        env: vec![],
        timeout,
        cap: 4096,
        owner: None,
        sandbox: None,
        stdin: None,
        kill_grace: crate::process_group::DEFAULT_KILL_GRACE,
        interleave: false,
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_owned()))
        .is_some_and(|r| !r.starts_with('Z'))
}

/// A `timeout_secs` near `u64::MAX` used to overflow `Instant + Duration` and panic.
#[tokio::test]
async fn a_huge_timeout_is_clamped_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_captured(sh(
        dir.path(),
        "echo ok",
        Some(Duration::from_secs(u64::MAX)),
    ))
    .await;
    assert!(
        matches!(out.end, RunEnd::Exited(st) if st.success()),
        "{:?}",
        out.end
    );
    assert_eq!(out.stdout.trim(), "ok");
}

/// Records the groups it is told about, slowly: the command must not start before.
struct Recorder {
    seen: std::sync::Mutex<Vec<orca_core::ProcessGroup>>,
    marker: std::path::PathBuf,
    early: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl ToolHost for Recorder {
    fn specs(&self) -> Vec<orca_core::ToolSpec> {
        Vec::new()
    }
    async fn call(
        &self,
        _: &orca_core::ToolCall,
    ) -> Result<serde_json::Value, orca_core::ToolError> {
        Err(orca_core::ToolError::new("none"))
    }
    async fn process_started(&self, group: orca_core::ProcessGroup) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if self.marker.exists() {
            self.early.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        self.seen.lock().unwrap().push(group);
    }
}

/// The spawn reports the group id and the leader's start time, and a shell command does
/// not start before the report has returned (the durable record comes first).
#[tokio::test]
async fn the_group_is_reported_before_the_command_starts() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Recorder {
        seen: std::sync::Mutex::new(Vec::new()),
        marker: dir.path().join("started"),
        early: std::sync::atomic::AtomicBool::new(false),
    };
    let mut spec = sh(
        dir.path(),
        "touch started; echo $$",
        Some(Duration::from_secs(10)),
    );
    spec.owner = Some(&recorder);
    let out = run_captured(spec).await;
    assert!(
        matches!(out.end, RunEnd::Exited(st) if st.success()),
        "{:?} {}",
        out.end,
        out.output
    );
    let groups = recorder.seen.lock().unwrap().clone();
    assert_eq!(groups.len(), 1);
    assert_eq!(out.stdout.trim(), groups[0].pgid.to_string());
    assert!(groups[0].start_time > 0);
    let early = recorder.early.load(std::sync::atomic::Ordering::SeqCst);
    assert!(!early, "the command ran before it was recorded");
    assert!(dir.path().join("started").exists());
}

/// On timeout the group gets SIGTERM first: a step that traps it can clean up; one that
/// ignores it (and its grandchildren) is SIGKILLed after the grace period.
#[tokio::test]
async fn timeout_is_sigterm_then_sigkill_for_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let script = "trap 'echo got-term > term.txt; exit 0' TERM; \
                  sh -c 'trap \"\" TERM; echo $$ > stubborn.pid; while :; do sleep 0.05; done' & \
                  while :; do sleep 0.05; done";
    let spec = RunSpec {
        kill_grace: Duration::from_millis(500),
        ..sh(dir.path(), script, Some(Duration::from_millis(700)))
    };
    let out = run_captured(spec).await;
    assert!(matches!(out.end, RunEnd::TimedOut), "{:?}", out.end);
    let term = std::fs::read_to_string(dir.path().join("term.txt")).unwrap_or_default();
    assert_eq!(term.trim(), "got-term", "the leader saw SIGTERM");
    let stubborn: i32 = std::fs::read_to_string(dir.path().join("stubborn.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(stubborn) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(stubborn), "a child ignoring SIGTERM was SIGKILLed");
}

/// Dropping the run (stop, Ctrl-C) ends every process of the group, grandchildren too.
#[tokio::test]
async fn dropping_the_run_ends_grandchildren() {
    let dir = tempfile::tempdir().unwrap();
    let script = "sleep 60 & echo $! >> kids; sleep 60 & echo $! >> kids; echo up > up; wait";
    let run = run_captured(sh(dir.path(), script, None));
    let up = dir.path().join("up");
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::pin!(run);
        loop {
            tokio::select! {
                _ = &mut run => break,
                () = tokio::time::sleep(Duration::from_millis(20)) => {
                    if up.exists() { break; }
                }
            }
        }
    })
    .await;
    let kids: Vec<i32> = std::fs::read_to_string(dir.path().join("kids"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(kids.len(), 2);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while kids.iter().any(|k| alive(*k)) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = kids.iter().filter(|k| alive(**k)).count();
    println!("grandchildren alive after the drop: {left}");
    assert_eq!(left, 0);
}

/// Interleaved, stdout and stderr keep the order the child wrote them in, line by line.
#[tokio::test]
async fn interleaved_output_keeps_the_order_it_was_written_in() {
    let dir = tempfile::tempdir().unwrap();
    let script = "i=0; while [ $i -lt 300 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done";
    let out = run_captured(RunSpec {
        interleave: true,
        ..sh(dir.path(), script, Some(Duration::from_secs(30)))
    })
    .await;
    assert!(
        matches!(out.end, RunEnd::Exited(s) if s.success()),
        "{:?}",
        out.end
    );
    let expected: String = (0..300).map(|i| format!("out{i}\nerr{i}\n")).collect();
    assert_eq!(out.output, expected);
    assert_eq!(out.stdout, expected, "interleaved, stdout holds both");
}
