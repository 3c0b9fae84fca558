//! Stalls of the model loop against a fake OpenAI-compatible server and the real workspace
//! tools: a model that repeats itself ends `stalled` after a few requests, naming what it
//! repeated; a model making progress is never stopped; turns that only re-read what was read
//! end `stalled` after `stall_turns`; the limits come from `[agents.NAME.limits]`.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::sync::Arc;

use orca_agents::{Agents, BackendSpec, StallLimits, WorkspaceTools};
use orca_core::{AgentId, AgentPort, Budget, ErrorCode, TaskFailure, TaskResult};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use crate::common::{coder_profile, fast_settings, task};

/// What the model calls in turn `n` (0-based); `None`: it submits a success.
type Script = Arc<dyn Fn(usize) -> Option<(&'static str, Value)> + Send + Sync>;

struct Model(Script);

impl wiremock::Respond for Model {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let turn = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        let (name, args) = (self.0)(turn).unwrap_or_else(|| {
            (
                "submit_result",
                json!({"status": "success", "summary": format!("done after {turn} turns")}),
            )
        });
        let call = orca_testkit::fake_model::tool_call(&format!("call_{turn}"), name, &args);
        ResponseTemplate::new(200).set_body_json(orca_testkit::fake_model::tool_calls(
            "chatcmpl-stall",
            &body["model"],
            vec![call],
        ))
    }
}

/// Runs one task of `coder` (with the workspace tools) against a fake server playing
/// `script`, under `limits`; the outcome and the number of requests the server received.
async fn run(root: &Path, script: Script, limits: StallLimits) -> (TaskResult, usize, u32) {
    let (outcome, requests, turns) = run_recorded(root, script, limits).await;
    (outcome, requests.len(), turns)
}

/// Keeps the refused calls reported to the progress display (what the terminal shows).
#[derive(Debug, Default)]
struct Refusals(std::sync::Mutex<Vec<(String, u32)>>);

impl orca_agents::ProgressSink for Refusals {
    fn report(&self, p: &orca_agents::ModelProgress) {
        if let orca_agents::ModelProgress::ToolRefused { tool, times, .. } = p {
            self.0.lock().unwrap().push((tool.clone(), *times));
        }
    }
}

thread_local! {
    /// The refusals the last [`run_recorded`] of this thread showed.
    static LAST_REFUSALS: std::cell::RefCell<Vec<(String, u32)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// [`run`], with the bodies of the requests the server received.
async fn run_recorded(
    root: &Path,
    script: Script,
    limits: StallLimits,
) -> (TaskResult, Vec<Value>, u32) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Model(script))
        .mount(&server)
        .await;
    let mut profile = coder_profile(BackendSpec::OpenAi {
        base_url: format!("{}/v1", server.uri()),
        model: "m".into(),
        api_key: None,
    });
    profile.workspace_tools = vec!["read_file".into(), "write_file".into()];
    let settings = orca_agents::LoopSettings {
        default_max_turns: 100,
        ..fast_settings(0)
    };
    let refusals = Arc::new(Refusals::default());
    let mut agents = Agents::new(root, [profile], settings)
        .unwrap()
        .with_progress(refusals.clone());
    agents.set_stall_limits(&AgentId::parse("coder").unwrap(), limits);
    let tools =
        WorkspaceTools::new(root, &["read_file".to_owned(), "write_file".to_owned()]).unwrap();
    let reply = agents
        .run_task(task("coder", Budget::UNLIMITED), &tools)
        .await;
    let requests = server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap_or(Value::Null))
        .collect();
    let shown = refusals.0.lock().unwrap().clone();
    LAST_REFUSALS.with(|l| *l.borrow_mut() = shown);
    (reply.outcome, requests, reply.usage.turns)
}

#[track_caller]
fn stalled(outcome: &TaskResult) -> &TaskFailure {
    match outcome {
        TaskResult::Failure(f) if f.code == ErrorCode::Stalled => f,
        other => panic!("expected a stalled failure, got {other:?}"),
    }
}

#[track_caller]
fn succeeded(outcome: &TaskResult) {
    assert!(
        matches!(outcome, TaskResult::Success(_)),
        "expected a success, got {outcome:?}"
    );
}

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "some notes\n").unwrap();
    for i in 0..20 {
        std::fs::write(dir.path().join(format!("f{i}.txt")), format!("file {i}\n")).unwrap();
    }
    dir
}

#[tokio::test]
async fn the_same_read_twenty_times_stalls_at_the_third() {
    let dir = project();
    let script: Script =
        Arc::new(|turn| (turn < 20).then(|| ("read_file", json!({"path": "notes.txt"}))));
    let (outcome, requests, turns) = run(dir.path(), script, StallLimits::DEFAULT).await;
    let f = stalled(&outcome);
    println!(
        "requests to the fake server: {requests} (turns {turns}); failure: {}",
        f.message
    );
    assert_eq!(
        requests, 3,
        "ended after the third identical call, not 20 (or 40) turns"
    );
    // The tool, not its arguments: the message reaches the next attempt, and a small model
    // repeated the call it quoted.
    assert!(
        f.message.contains("`read_file`") && !f.message.contains(r#"{"path":"notes.txt"}"#),
        "the message names the tool, not its arguments: {}",
        f.message
    );
    assert!(f.message.contains("3 times in a row"), "{}", f.message);

    // max_repeats = 5: five requests; 0: off, the script runs out and submits.
    let script: Script =
        Arc::new(|turn| (turn < 20).then(|| ("read_file", json!({"path": "notes.txt"}))));
    let five = StallLimits {
        max_repeats: 5,
        stall_turns: 0,
        ..StallLimits::DEFAULT
    };
    let (outcome, requests, _) = run(dir.path(), Arc::clone(&script), five).await;
    stalled(&outcome);
    println!("max_repeats = 5: {requests} requests");
    assert_eq!(requests, 5);
    let (outcome, requests, _) = run(dir.path(), script, StallLimits::OFF).await;
    println!("checks off: {requests} requests");
    succeeded(&outcome);
    assert_eq!(requests, 21, "20 reads, then the submit");
}

/// A small model repeats a refused call between calls that make progress (what a 1.5B model
/// did 23 and 36 times): no two alike in a row, never an idle turn, so only counting refusals
/// over the whole conversation stops it. The second refusal tells the model it is repeating
/// itself; the third ends the attempt, naming the call and the error.
#[tokio::test]
async fn a_refused_call_repeated_between_progress_stalls_at_the_third_refusal() {
    let dir = project();
    // `run_command` is not granted (the coder here has read_file and write_file only).
    let script: Script = Arc::new(|turn| {
        (turn < 46).then(|| {
            if turn % 2 == 0 {
                ("run_command", json!({"command": "cargo test"}))
            } else {
                (
                    "write_file",
                    json!({"path": "notes.txt", "content": format!("version {turn}\n")}),
                )
            }
        })
    });
    let (outcome, requests, _) = run_recorded(dir.path(), script, StallLimits::DEFAULT).await;
    let f = stalled(&outcome);
    let told: Vec<usize> = requests
        .iter()
        .enumerate()
        .filter(|(_, body)| {
            body["messages"]
                .as_array()
                .and_then(|m| m.last())
                .is_some_and(|m| {
                    m["content"]
                        .as_str()
                        .is_some_and(|c| c.contains("This exact call was refused 2 times"))
                })
        })
        .map(|(i, _)| i + 1)
        .collect();
    println!(
        "requests to the fake server: {} (the script had 46 turns); told of the repeat in request {told:?}; failure: {}",
        requests.len(),
        f.message
    );
    assert_eq!(
        requests.len(),
        5,
        "refused at turns 1, 3 and 5: ended at the fifth"
    );
    assert_eq!(
        told,
        [4],
        "the request after the second refusal says it was repeated"
    );
    // The refusal says how to fix the call: which tools there are.
    assert!(
        f.message.contains("call one of read_file, write_file"),
        "{}",
        f.message
    );
    // The progress display shows each refusal, with its count: not normal progress.
    let shown = LAST_REFUSALS.with(|l| l.borrow().clone());
    println!("refusals shown: {shown:?}");
    let run_command = |n| ("run_command".to_owned(), n);
    assert_eq!(shown, [run_command(1), run_command(2), run_command(3)]);
    assert!(
        f.message.contains("`run_command` 3 times")
            && f.message.contains("was refused the same way"),
        "{}",
        f.message
    );
    // The control: the same calls with the checks off run the whole script.
    let script: Script = Arc::new(|turn| {
        (turn < 46).then(|| {
            if turn % 2 == 0 {
                ("run_command", json!({"command": "cargo test"}))
            } else {
                (
                    "write_file",
                    json!({"path": "notes.txt", "content": format!("v{turn}\n")}),
                )
            }
        })
    });
    let (outcome, requests, _) = run_recorded(dir.path(), script, StallLimits::OFF).await;
    println!("checks off: {} requests", requests.len());
    succeeded(&outcome);
    assert_eq!(requests.len(), 47);
}

#[tokio::test]
async fn a_model_making_progress_is_never_stopped() {
    let dir = project();
    // Twenty distinct reads.
    let script: Script = Arc::new(|turn| {
        (turn < 20).then(|| ("read_file", json!({"path": format!("f{turn}.txt")})))
    });
    let (outcome, requests, _) = run(dir.path(), script, StallLimits::DEFAULT).await;
    println!("twenty distinct reads: {requests} requests");
    succeeded(&outcome);
    assert_eq!(requests, 21);

    // The same read twenty times, each after a write that changed the file.
    let script: Script = Arc::new(|turn| {
        (turn < 40).then(|| {
            if turn % 2 == 0 {
                (
                    "write_file",
                    json!({"path": "notes.txt", "content": format!("version {turn}\n")}),
                )
            } else {
                ("read_file", json!({"path": "notes.txt"}))
            }
        })
    });
    let (outcome, requests, _) = run(dir.path(), script, StallLimits::DEFAULT).await;
    println!("read after write, twenty times: {requests} requests");
    succeeded(&outcome);
    assert_eq!(requests, 41);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
        "version 38\n"
    );
}

#[tokio::test]
async fn turns_that_only_reread_stall_after_stall_turns() {
    let dir = project();
    // f0, f1, f2, then f0, f1, f2 … again: no two reads alike in a row, so no repeat; from
    // the fourth turn on every read was already read with the same result.
    let cycle: Script = Arc::new(|turn| {
        (turn < 30).then(|| ("read_file", json!({"path": format!("f{}.txt", turn % 3)})))
    });
    let (outcome, requests, _) = run(dir.path(), Arc::clone(&cycle), StallLimits::DEFAULT).await;
    let f = stalled(&outcome);
    println!("re-reading three files: {requests} requests; {}", f.message);
    assert_eq!(requests, 3 + 5, "three new reads, then five idle turns");
    assert!(f.message.contains("5 turns in a row"), "{}", f.message);
    assert!(f.message.contains("`read_file`"), "{}", f.message);
    let eight = StallLimits {
        stall_turns: 8,
        ..StallLimits::DEFAULT
    };
    let (outcome, requests, _) = run(dir.path(), cycle, eight).await;
    stalled(&outcome);
    assert_eq!(requests, 3 + 8);

    // The control: the same cycle with a write every third turn is progress.
    let with_writes: Script = Arc::new(|turn| {
        (turn < 30).then(|| match turn % 3 {
            2 => (
                "write_file",
                json!({"path": "out.txt", "content": format!("{turn}")}),
            ),
            n => ("read_file", json!({"path": format!("f{n}.txt")})),
        })
    });
    let (outcome, requests, _) = run(dir.path(), with_writes, StallLimits::DEFAULT).await;
    println!("re-reading with writes between: {requests} requests");
    succeeded(&outcome);
    assert_eq!(requests, 31);
}

#[test]
fn stall_limits_come_from_the_agents_limits() {
    use orca_agents::config::Config;
    let file = Path::new(".orca/config.toml");
    let config = Config::parse(
        "[defaults.limits]\nstall_turns = 9\n\n[agents.coder.limits]\nmax_repeats = 4\nidle_secs = 30\nmax_turns = 7\n\n[agents.reviewer.limits]\nidle_secs = 0\nmax_repeats = 0\n",
        file,
    )
    .unwrap();
    let coder = AgentId::parse("coder").unwrap();
    let reviewer = AgentId::parse("reviewer").unwrap();
    let tester = AgentId::parse("tester").unwrap();
    let base = StallLimits::DEFAULT;
    assert_eq!(
        config.stall_limits(&coder, base),
        StallLimits {
            max_repeats: 4,
            stall_turns: 9,
            idle: Some(std::time::Duration::from_secs(30)),
        }
    );
    assert_eq!(
        config.stall_limits(&reviewer, base),
        StallLimits {
            max_repeats: 0,
            stall_turns: 9,
            idle: None,
        }
    );
    assert_eq!(config.stall_limits(&tester, base).max_repeats, 3);
    // The budget part still reaches the profile.
    let profiles = config.profiles(Path::new("."), &|_| None).unwrap();
    let limits = profiles.iter().find(|p| p.id == coder).unwrap().limits;
    assert_eq!(limits.max_turns, Some(7));

    for (text, field, says) in [
        (
            "[agents.coder.limits]\nmax_repeats = 1\n",
            "agents.coder.limits.max_repeats",
            "at least 2",
        ),
        (
            "[agents.coder.limits]\nmax_repeats = -1\n",
            "agents.coder.limits.max_repeats",
            "whole number",
        ),
        (
            "[agents.coder.limits]\nstall_turns = \"five\"\n",
            "agents.coder.limits.stall_turns",
            "\"five\"",
        ),
        (
            "[agents.coder.limits]\nidle_secs = 99999999\n",
            "agents.coder.limits.idle_secs",
            "a week",
        ),
        (
            "[defaults.limits]\nmax_repeat = 3\n",
            "defaults.limits",
            "unknown field `max_repeat`",
        ),
    ] {
        let err = Config::parse(text, file).unwrap_err().to_string();
        println!("{err}");
        assert!(err.contains(".orca/config.toml"), "names the file: {err}");
        assert!(err.contains(field), "names {field}: {err}");
        assert!(err.contains(says), "says {says}: {err}");
    }
}

/// A fake Claude Code (`body` after reading its prompt) run as `coder` with `idle`; the
/// outcome and how long it took.
async fn cli_run(body: &str, idle: std::time::Duration) -> (TaskResult, std::time::Duration) {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("agent");
    std::fs::write(&program, format!("#!/bin/sh\ncat > /dev/null\n{body}\n")).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let profile = coder_profile(BackendSpec::Cli(orca_agents::CliSpec {
        program: program.display().to_string(),
        ..orca_agents::CliSpec::new(orca_agents::CliKind::ClaudeCode)
    }));
    let mut agents = Agents::new(dir.path(), [profile], fast_settings(0)).unwrap();
    agents.set_stall_limits(
        &AgentId::parse("coder").unwrap(),
        StallLimits {
            idle: Some(idle),
            ..StallLimits::DEFAULT
        },
    );
    let started = std::time::Instant::now();
    let reply = agents
        .run_task(
            task("coder", Budget::UNLIMITED),
            &crate::common::TestTools::new(),
        )
        .await;
    (reply.outcome, started.elapsed())
}

const RESULT_LINE: &str = r#"printf '%s\n' '{"type":"result","subtype":"success","is_error":false,"result":"```json\n{\"status\":\"success\",\"summary\":\"done\"}\n```"}'"#;

#[tokio::test]
async fn a_silent_command_line_agent_stalls_after_idle_secs() {
    let idle = std::time::Duration::from_secs(1);
    let (outcome, took) = cli_run(&format!("sleep 30\n{RESULT_LINE}"), idle).await;
    let f = stalled(&outcome);
    println!("silent agent ended after {took:?}: {}", f.message);
    assert!(
        took < std::time::Duration::from_secs(10),
        "not the 30 s sleep: {took:?}"
    );
    assert!(
        f.message.contains("printed nothing and changed no file")
            && f.message.contains("1 s (idle_secs)"),
        "{}",
        f.message
    );

    // Printing a line every 0.3 s for 3 s (ten times the limit): never idle.
    let steady = format!(
        "i=0\nwhile [ $i -lt 10 ]; do echo '{{\"type\":\"system\",\"n\":'$i'}}'; sleep 0.3; i=$((i+1)); done\n{RESULT_LINE}"
    );
    let (outcome, took) = cli_run(&steady, idle).await;
    println!("steady printer: {took:?}");
    succeeded(&outcome);
    assert!(
        took >= std::time::Duration::from_secs(2),
        "it ran its course: {took:?}"
    );

    // Printing nothing but writing a file every 0.3 s: changing files is a sign of life too.
    let writer = format!(
        "i=0\nwhile [ $i -lt 10 ]; do echo $i > progress.txt; sleep 0.3; i=$((i+1)); done\n{RESULT_LINE}"
    );
    let (outcome, took) = cli_run(&writer, idle).await;
    println!("silent writer: {took:?}");
    succeeded(&outcome);
    assert!(
        took >= std::time::Duration::from_secs(2),
        "it ran its course: {took:?}"
    );
}
