//! The `shell` agent through the registry: success, failure, timeout and drop kill the group,
//! environment variables.

use crate::common;

use std::path::Path;
use std::time::Duration;

use orca_agents::Agents;
use orca_core::{AgentId, AgentPort, ErrorCode, NoTools, TaskRequest, TaskResult};

fn request(command: &str, timeout: Option<Duration>) -> TaskRequest {
    let mut request = common::shell_task(command, timeout);
    request.attempt = 2;
    request
}

/// Whether a process is gone (or a zombie waiting to be reaped).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

async fn wait_for_file(path: &Path) -> String {
    for _ in 0..500 {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never appeared", path.display());
}

async fn wait_gone(pid: i32) {
    for _ in 0..500 {
        if gone(pid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("process {pid} is still running");
}

#[tokio::test]
async fn success_summary_is_the_tail_and_output_is_full() {
    let dir = tempfile::tempdir().unwrap();
    let agents = Agents::shell_only(dir.path());
    let reply = agents
        .run_task(
            request(
                "for i in $(seq 1 30); do echo line $i; done; echo err >&2",
                None,
            ),
            &NoTools,
        )
        .await;
    let TaskResult::Success(s) = reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    // stdout and stderr are separate pipes read as data arrives: `err` may be read before the
    // 30 lines or after them, so only the last stdout line is sure to be in the tail; the
    // full output has everything.
    assert!(s.summary.contains("line 30"), "{}", s.summary);
    assert!(
        !s.summary.contains("line 5\n"),
        "summary is the tail: {}",
        s.summary
    );
    let output = s.output.unwrap();
    assert!(output.contains("line 1\n") && output.contains("line 30\n") && output.contains("err"));
}

#[tokio::test]
async fn runs_in_the_project_root() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("marker.txt"), "here").unwrap();
    let reply = Agents::shell_only(dir.path())
        .run_task(request("cat marker.txt", None), &NoTools)
        .await;
    assert!(matches!(reply.outcome, TaskResult::Success(s) if s.summary == "here"));
}

#[tokio::test]
async fn failure_reports_exit_code_and_output() {
    let dir = tempfile::tempdir().unwrap();
    let reply = Agents::shell_only(dir.path())
        .run_task(request("echo broken; exit 3", None), &NoTools)
        .await;
    let TaskResult::Failure(f) = reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    assert_eq!(f.code, ErrorCode::TaskFailed);
    assert_eq!(f.message, "exit status 3");
    assert_eq!(f.output.as_deref(), Some("broken\n"));
}

#[tokio::test]
async fn env_vars_are_set() {
    let dir = tempfile::tempdir().unwrap();
    let req = request(
        "echo $ORCA_PLAN_ID $ORCA_EXECUTION_ID $ORCA_STEP_ID $ORCA_ATTEMPT",
        None,
    );
    let expected = format!("{} {} work 2", req.plan_id, req.execution_id);
    let reply = Agents::shell_only(dir.path()).run_task(req, &NoTools).await;
    assert!(matches!(reply.outcome, TaskResult::Success(s) if s.summary == expected));
}

#[tokio::test]
async fn timeout_kills_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    let cmd = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
    let reply = Agents::shell_only(dir.path())
        .run_task(request(&cmd, Some(Duration::from_millis(300))), &NoTools)
        .await;
    let TaskResult::Failure(f) = reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    assert_eq!(f.code, ErrorCode::Timeout);
    let pid: i32 = wait_for_file(&pidfile).await.trim().parse().unwrap();
    wait_gone(pid).await;
}

#[tokio::test]
async fn dropping_the_future_kills_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    let cmd = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
    let agents = Agents::shell_only(dir.path());
    let req = request(&cmd, None);
    let run = agents.run_task(req, &NoTools);
    let watcher = wait_for_file(&pidfile);
    let pid = tokio::select! {
        _ = run => panic!("the command finished early"),
        text = watcher => text.trim().parse::<i32>().unwrap(),
    };
    // `run` has been dropped by select!.
    assert!(pid > 1);
    wait_gone(pid).await;
}

#[tokio::test]
async fn background_leftovers_do_not_hang_a_finished_step() {
    let dir = tempfile::tempdir().unwrap();
    let reply = Agents::shell_only(dir.path())
        .run_task(request("sleep 30 & echo started", None), &NoTools)
        .await;
    assert!(matches!(reply.outcome, TaskResult::Success(s) if s.summary == "started"));
}

#[tokio::test]
async fn missing_command_and_unknown_agent_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let agents = Agents::shell_only(dir.path());
    let mut req = request("true", None);
    req.step.command = None;
    let reply = agents.run_task(req, &NoTools).await;
    assert!(matches!(reply.outcome, TaskResult::Failure(f) if f.code == ErrorCode::Validation));
    let mut req = request("true", None);
    req.agent = AgentId::parse("nobody").unwrap();
    let reply = agents.run_task(req, &NoTools).await;
    assert!(matches!(reply.outcome, TaskResult::Failure(f) if f.code == ErrorCode::UnknownAgent));
    assert_eq!(agents.agents().len(), 1);
}
