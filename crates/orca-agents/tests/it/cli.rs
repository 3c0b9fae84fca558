//! Command-line agents with fake executables (sh scripts in a tempdir): success, error, hang,
//! garbage, non-zero exit; for Claude Code, Codex and opencode output formats. Invocation
//! contracts (stdin, permissions, sessions, timeouts) are in `cli_invocation.rs`.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use common::{TestTools, fast_settings, task};
use orca_agents::{Agents, BackendSpec, CliKind, CliSpec, Profile};
use orca_core::{AgentId, AgentPort, Budget, ErrorCode, QuestionRequest, Role, TaskResult};

fn fake(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn agents(dir: &Path, kind: CliKind, program: String) -> Agents {
    let profile = Profile {
        id: AgentId::parse("coder").unwrap(),
        role: Role::Specialist,
        description: "codes".into(),
        backend: BackendSpec::Cli(CliSpec {
            program,
            model: Some("some-model".into()),
            ..CliSpec::new(kind)
        }),
        prompt: "You are the coder.".into(),
        workspace_tools: vec![],
        limits: Budget::UNLIMITED,
    };
    Agents::new(dir, [profile], fast_settings(0)).unwrap()
}

async fn run(
    kind: CliKind,
    body: &str,
    timeout: Option<Duration>,
) -> (orca_core::Reply<TaskResult>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let program = fake(dir.path(), "agent", body);
    let mut req = task("coder", Budget::UNLIMITED);
    req.timeout = timeout;
    let reply = agents(dir.path(), kind, program)
        .run_task(req, &TestTools::new())
        .await;
    (reply, dir)
}

#[track_caller]
fn failure(outcome: &TaskResult) -> &orca_core::TaskFailure {
    match outcome {
        TaskResult::Failure(f) => f,
        other => panic!("expected failure, got {other:?}"),
    }
}

#[tokio::test]
async fn claude_code_success_with_args_and_usage() {
    let body = r#"printf '%s\n' "$@" > args.txt
cat > prompt.txt
printf '%s\n' '{"type":"result","subtype":"success","is_error":false,"result":"All done.\n```json\n{\"status\":\"success\",\"summary\":\"added tests\",\"relevant_files\":[\"t.rs\"]}\n```","total_cost_usd":0.002,"num_turns":4,"usage":{"input_tokens":10,"output_tokens":20,"cache_read_input_tokens":30,"cache_creation_input_tokens":40}}'"#;
    let (reply, dir) = run(CliKind::ClaudeCode, body, None).await;
    let TaskResult::Success(s) = &reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    assert_eq!(s.summary, "added tests");
    assert_eq!(s.relevant_files, ["t.rs"]);
    assert_eq!(
        (
            reply.usage.cost_micro_usd,
            reply.usage.turns,
            reply.usage.cache_write_tokens
        ),
        (2000, 4, 40)
    );
    let args = std::fs::read_to_string(dir.path().join("args.txt")).unwrap();
    let args: Vec<&str> = args.lines().collect();
    assert_eq!(
        args,
        [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-mode",
            "acceptEdits",
            "--model",
            "some-model"
        ],
        "no prompt among the arguments"
    );
    let prompt = std::fs::read_to_string(dir.path().join("prompt.txt")).unwrap();
    assert!(
        prompt.contains("do the work"),
        "the prompt, on stdin, carries the step"
    );
}

#[tokio::test]
async fn claude_code_error_result() {
    let (reply, _d) = run(
        CliKind::ClaudeCode,
        r#"echo '{"type":"result","subtype":"error_max_turns","is_error":true,"result":"hit max turns"}'"#,
        None,
    )
    .await;
    let f = failure(&reply.outcome);
    assert_eq!(f.code, ErrorCode::AgentError);
    assert_eq!(f.cause.as_deref(), Some("hit max turns"));
}

#[tokio::test]
async fn codex_jsonl_with_unknown_lines() {
    let body = r#"echo 'Reading prompt from stdin...'
echo '{"type":"thread.started","thread_id":"abc"}'
echo '{"type":"item.completed","item":{"type":"command_execution","command":"ls"}}'
echo '{"type":"item.completed","item":{"type":"agent_message","text":"Fixed the bug in main.rs"}}'
echo '{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":40,"output_tokens":9}}'"#;
    let (reply, _d) = run(CliKind::Codex, body, None).await;
    assert!(
        matches!(&reply.outcome, TaskResult::Success(s) if s.summary == "Fixed the bug in main.rs"),
        "{:?}",
        reply.outcome
    );
    assert_eq!(
        (reply.usage.input_tokens, reply.usage.cache_read_tokens),
        (60, 40)
    );
}

#[tokio::test]
async fn opencode_events_and_error_event() {
    let body = r#"echo '{"type":"text","part":{"text":"Done: docs updated"}}'
echo '{"type":"step_finish","part":{"tokens":{"input":5,"output":6,"cache":{"read":0,"write":0}},"cost":0.001}}'"#;
    let (reply, _d) = run(CliKind::Opencode, body, None).await;
    assert!(
        matches!(&reply.outcome, TaskResult::Success(s) if s.summary == "Done: docs updated"),
        "{:?}",
        reply.outcome
    );
    let (reply, _d) = run(CliKind::Opencode, r#"echo '{"type":"error","error":{"name":"APIError","data":{"message":"model not found"}}}'"#, None).await;
    assert_eq!(
        failure(&reply.outcome).cause.as_deref(),
        Some("model not found")
    );
}

#[tokio::test]
async fn garbage_output_is_a_parse_error() {
    for kind in [CliKind::ClaudeCode, CliKind::Codex, CliKind::Opencode] {
        let (reply, _d) = run(kind, "echo 'this is not json'; echo '{\"half\":'", None).await;
        let f = failure(&reply.outcome);
        assert_eq!(f.code, ErrorCode::ParseError, "{kind:?}");
        assert!(f.output.as_deref().unwrap().contains("this is not json"));
    }
}

#[tokio::test]
async fn non_zero_exit_is_a_failure_with_output() {
    let (reply, _d) = run(CliKind::Codex, "echo 'auth failed' >&2; exit 2", None).await;
    let f = failure(&reply.outcome);
    assert_eq!(f.code, ErrorCode::AgentError);
    assert!(f.message.contains("exited with status 2"), "{}", f.message);
    assert!(f.cause.as_deref().unwrap().contains("auth failed"));
}

#[tokio::test]
async fn hang_times_out_and_the_group_is_killed() {
    let (reply, dir) = run(
        CliKind::ClaudeCode,
        "sleep 30 & echo $! > child.pid; wait",
        Some(Duration::from_millis(300)),
    )
    .await;
    assert_eq!(failure(&reply.outcome).code, ErrorCode::Timeout);
    let pid: i32 = std::fs::read_to_string(dir.path().join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for _ in 0..500 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty()
            || stat
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("child {pid} of the hung agent survived");
}

#[tokio::test]
async fn missing_executable_and_questions() {
    let dir = tempfile::tempdir().unwrap();
    let a = agents(
        dir.path(),
        CliKind::ClaudeCode,
        dir.path().join("nope").display().to_string(),
    );
    let reply = a
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await;
    assert!(failure(&reply.outcome).message.contains("is it installed"));

    let program = fake(
        dir.path(),
        "ans",
        r#"echo '{"type":"result","is_error":false,"result":"42"}'"#,
    );
    let a = agents(dir.path(), CliKind::ClaudeCode, program);
    let reply = a
        .ask(
            QuestionRequest {
                agent: AgentId::parse("coder").unwrap(),
                question: "q".into(),
                session: None,
                budget: Budget::UNLIMITED,
            },
            &TestTools::new(),
        )
        .await;
    assert_eq!(reply.outcome.unwrap().answer, "42");
}
