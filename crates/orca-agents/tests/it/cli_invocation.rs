//! The invocation contract of the command-line agents, with fake executables: the prompt on
//! stdin (a 200 KB one too), permission denials that fail the step although the agent says
//! "success", Codex retry notices that do not fail it, a Codex waiting for the network forever
//! ended by the hard timeout, opencode's empty answer, session ids kept, cost priced when the
//! agent reports none. Against the real programs: `real_clis.rs`.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{TestTools, fast_settings, task};
use orca_agents::{Agents, BackendSpec, CliKind, CliSpec, Profile};
use orca_core::{
    AgentId, AgentPort as _, Budget, ErrorCode, QuestionRequest, Reply, Role, TaskResult,
};

fn agents(dir: &Path, spec: CliSpec) -> Agents {
    let profile = Profile {
        id: AgentId::parse("coder").unwrap(),
        role: Role::Specialist,
        description: "codes".into(),
        backend: BackendSpec::Cli(spec),
        prompt: "You are the coder.".into(),
        workspace_tools: vec![],
        limits: Budget::UNLIMITED,
    };
    Agents::new(dir, [profile], fast_settings(0)).unwrap()
}

/// Runs `body` as a fake `kind` agent (a sh script) with `edit` applied to its spec.
async fn run_with(
    kind: CliKind,
    body: &str,
    task_text: Option<String>,
    edit: impl FnOnce(&mut CliSpec),
) -> (Reply<TaskResult>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut spec = CliSpec {
        program: path.display().to_string(),
        ..CliSpec::new(kind)
    };
    edit(&mut spec);
    let mut req = task("coder", Budget::UNLIMITED);
    if let Some(text) = task_text {
        req.step = orca_core::Step::new(req.step.id.clone(), req.agent.clone(), text);
    }
    let reply = agents(dir.path(), spec)
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

const CLAUDE_OK: &str = r#"{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"904d3be4-5293-4bfc-bf1e-0b3f866b02eb","total_cost_usd":0.000276,"num_turns":2,"usage":{"input_tokens":22,"output_tokens":14},"permission_denials":[]}"#;

#[tokio::test]
async fn a_200_kb_prompt_goes_through_stdin_for_every_agent() {
    let big = "x".repeat(200 * 1024);
    let mut ok = 0;
    for kind in [CliKind::ClaudeCode, CliKind::Codex, CliKind::Opencode] {
        let answer = match kind {
            CliKind::Codex => {
                r#"{"type":"item.completed","item":{"type":"agent_message","text":"done"}}"#
            }
            CliKind::Opencode => r#"{"type":"text","part":{"text":"done"}}"#,
            _ => CLAUDE_OK,
        };
        let body = format!("cat > prompt.txt\nprintf '%s\\n' \"$@\" > args.txt\necho '{answer}'");
        let (reply, dir) = run_with(kind, &body, Some(big.clone()), |_| {}).await;
        assert!(
            matches!(reply.outcome, TaskResult::Success(_)),
            "{kind:?}: {:?}",
            reply.outcome
        );
        let prompt = std::fs::read_to_string(dir.path().join("prompt.txt")).unwrap();
        let args = std::fs::read_to_string(dir.path().join("args.txt")).unwrap();
        assert!(
            prompt.contains(&big),
            "{kind:?}: the whole task reached stdin"
        );
        assert!(args.len() < 1024, "{kind:?}: no prompt in the arguments");
        ok += 1;
    }
    println!("200 KB prompts through stdin: {ok}/3");
}

#[tokio::test]
async fn claude_denials_fail_the_step_despite_success() {
    let body = r#"echo '{"type":"result","subtype":"success","is_error":false,"result":"Done.","session_id":"d01b3789-ec4e-4d8b-96dd-116490230061","total_cost_usd":0,"num_turns":2,"permission_denials":[{"tool_name":"Write","tool_use_id":"toolu_1","tool_input":{"file_path":"/p/hello.txt"}}]}'"#;
    let (reply, _d) = run_with(CliKind::ClaudeCode, body, None, |s| {
        s.permission_mode = Some("default".into());
    })
    .await;
    let f = failure(&reply.outcome);
    assert_eq!(f.code, ErrorCode::ToolRefused);
    assert!(f.message.contains("Write"), "{}", f.message);
    assert!(f.message.contains("\"default\""), "{}", f.message);
    assert_eq!(
        reply.session.unwrap().to_string(),
        "sess_d01b3789-ec4e-4d8b-96dd-116490230061"
    );
}

#[tokio::test]
async fn codex_reconnect_notices_do_not_fail_a_run() {
    let body = r#"echo '{"type":"thread.started","thread_id":"01a20910-34ac-7790-a888-dbf4da697c59"}'
echo '{"type":"error","message":"Reconnecting... 1/5 (stream disconnected before completion)"}'
echo '{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"Done."}}'
echo '{"type":"turn.completed","usage":{"input_tokens":1000000,"cached_input_tokens":0,"output_tokens":0}}'"#;
    let (reply, _d) = run_with(CliKind::Codex, body, None, |s| {
        s.model = Some("gpt-5".into());
    })
    .await;
    let TaskResult::Success(s) = &reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    assert!(
        s.notes
            .as_deref()
            .unwrap()
            .contains("codex session 01a20910-34ac-7790-a888-dbf4da697c59"),
        "{:?}",
        s.notes
    );
    // Codex reports no cost: one million gpt-5 input tokens at the shipped $1.25.
    assert_eq!(reply.usage.cost_micro_usd, 1_250_000);
}

#[tokio::test]
async fn codex_waiting_for_the_network_forever_is_ended_by_the_hard_timeout() {
    let body = r#"echo '{"type":"thread.started","thread_id":"01a20910-421f-7aa0-b5d3-365df27efbbb"}'
echo '{"type":"turn.started"}'
while :; do echo '{"type":"error","message":"Reconnecting... waiting for network (Connection failed: error sending request)"}'; sleep 1; done"#;
    let started = Instant::now();
    let (reply, _d) = run_with(CliKind::Codex, body, None, |s| {
        s.timeout = Some(Duration::from_secs(2));
    })
    .await;
    let f = failure(&reply.outcome);
    assert_eq!(f.code, ErrorCode::Timeout);
    assert!(f.message.contains("within 2 s"), "{}", f.message);
    assert!(
        f.cause.as_deref().unwrap().contains("waiting for network"),
        "{:?}",
        f.cause
    );
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[tokio::test]
async fn opencode_empty_answer_with_exit_0_is_a_failure() {
    let body = r#"echo '{"type":"step_start","sessionID":"ses_x"}'
echo '{"type":"step_finish","sessionID":"ses_x","part":{"tokens":{"input":3,"output":1},"cost":0}}'"#;
    let (reply, _d) = run_with(CliKind::Opencode, body, None, |_| {}).await;
    let f = failure(&reply.outcome);
    assert_eq!(f.code, ErrorCode::ParseError);
    assert!(
        f.message.contains("without a final answer"),
        "{}",
        f.message
    );
    assert!(
        f.cause
            .as_deref()
            .unwrap()
            .contains("opencode session ses_x")
    );
    assert_eq!(reply.usage.input_tokens, 3, "usage of a failed run is kept");
}

#[tokio::test]
async fn an_opencode_session_is_resumed_by_ask() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent");
    let body = r#"printf '%s\n' "$@" >> args.txt
echo '{"type":"text","sessionID":"ses_abc","part":{"text":"an answer"}}'"#;
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let a = agents(
        dir.path(),
        CliSpec {
            program: path.display().to_string(),
            ..CliSpec::new(CliKind::Opencode)
        },
    );
    let ask = |session| QuestionRequest {
        agent: AgentId::parse("coder").unwrap(),
        question: "q".into(),
        session,
        budget: Budget::UNLIMITED,
    };
    let first = a.ask(ask(None), &TestTools::new()).await;
    let session = first.outcome.unwrap().session_id.unwrap();
    let second = a.ask(ask(Some(session)), &TestTools::new()).await;
    assert_eq!(second.outcome.unwrap().session_id, Some(session));
    let args = std::fs::read_to_string(dir.path().join("args.txt")).unwrap();
    assert!(args.contains("--session\nses_abc"), "{args}");
    let unknown = a
        .ask(ask(Some(orca_core::SessionId::new())), &TestTools::new())
        .await;
    assert_eq!(
        unknown.outcome.unwrap_err().code,
        ErrorCode::SessionNotFound
    );
}

#[tokio::test]
async fn a_resumed_codex_thread_reports_only_its_own_usage() {
    // Codex reports the running total of a resumed thread (recorded: 100 then 150 input).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent");
    let body = r#"n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count
echo '{"type":"thread.started","thread_id":"01a2092b-e6de-7fd1-a3be-3895eed25023"}'
echo '{"type":"item.completed","item":{"type":"agent_message","text":"an answer"}}'
echo "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":$((n*50+50)),\"cached_input_tokens\":$((n*20+20)),\"output_tokens\":$((n*9+9))}}""#;
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let a = agents(
        dir.path(),
        CliSpec {
            program: path.display().to_string(),
            ..CliSpec::new(CliKind::Codex)
        },
    );
    let ask = |session| QuestionRequest {
        agent: AgentId::parse("coder").unwrap(),
        question: "q".into(),
        session,
        budget: Budget::UNLIMITED,
    };
    let first = a.ask(ask(None), &TestTools::new()).await;
    assert_eq!(
        (first.usage.input_tokens, first.usage.output_tokens),
        (60, 18)
    );
    let session = first.outcome.unwrap().session_id;
    let second = a.ask(ask(session), &TestTools::new()).await;
    assert_eq!(
        (
            second.usage.input_tokens,
            second.usage.cache_read_tokens,
            second.usage.output_tokens
        ),
        (30, 20, 9),
        "the second run's share of the thread total"
    );
}
