//! Ollama's native `/api/chat` streamed (NDJSON, one object a line) from the raw fake server
//! that cuts bytes anywhere (inside UTF-8 characters): the assembled turn equals the
//! non-streamed answer (text, tool calls, usage, `length`); a stalled stream hits the idle
//! timeout after exactly one request; an `{"error": …}` line is one readable error;
//! `stream = false` sends `"stream": false`.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::time::Duration;

use orca_agents::config::Config;
use orca_agents::{
    Agents, BackendError, ChatBackend, ChatRequest, ChatResponse, Message, StopReason, ToolChoice,
};
use orca_core::{AgentPort, Budget, ErrorCode, TaskResult, ToolSpec};
use orca_llm::{OllamaBackend, Streaming};
use serde_json::{Value, json};

use crate::common::{TestTools, fast_settings, task};
use crate::fake_stream::{FakeStream, Reply};

const TEXT_A: &str = "Hé";
const TEXT_B: &str = "llo ✓ — \u{1F600}";

fn streaming(idle: Duration) -> Streaming {
    Streaming {
        enabled: true,
        idle_timeout: idle,
    }
}

fn backend(url: &str, s: Streaming) -> OllamaBackend {
    OllamaBackend::new(
        url,
        "qwen2.5-coder:1.5b",
        None,
        orca_llm::http_client_builder().build().unwrap(),
    )
    .with_context_window(Some(8192))
    .with_streaming(s)
}

fn request() -> ChatRequest {
    ChatRequest {
        system: "You are the coder.".into(),
        messages: vec![Message::User { text: "go".into() }],
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "reads".into(),
            parameters: json!({"type": "object"}),
        }],
        tool_choice: ToolChoice::Required,
        max_output_tokens: Some(256),
        sampling: orca_agents::Sampling::default(),
        output_schema: None,
    }
}

fn call() -> Value {
    json!({"function": {"name": "read_file", "arguments": {"path": "src/é.rs", "n": 2}}})
}

/// The non-streamed body (Ollama 0.x): text, one call unless `cut` (then `length`), counts.
fn whole(cut: bool) -> Value {
    let mut message = json!({"role": "assistant", "content": format!("{TEXT_A}{TEXT_B}")});
    if !cut {
        message["tool_calls"] = json!([call()]);
    }
    json!({"model": "qwen2.5-coder:1.5b", "created_at": "2025-05-01T10:00:00Z",
        "message": message, "done": true, "done_reason": if cut { "length" } else { "stop" },
        "total_duration": 5, "prompt_eval_count": 300, "eval_count": 40})
}

/// The same answer streamed: two content deltas, the call whole in its own chunk, the last
/// object with the counts.
fn lines(cut: bool) -> String {
    let chunk = |message: Value| {
        json!({"model": "qwen2.5-coder:1.5b", "created_at": "2025-05-01T10:00:00Z",
            "message": message, "done": false})
    };
    let mut out = vec![
        chunk(json!({"role": "assistant", "content": TEXT_A})),
        chunk(json!({"role": "assistant", "content": TEXT_B})),
    ];
    if !cut {
        out.push(chunk(
            json!({"role": "assistant", "content": "", "tool_calls": [call()]}),
        ));
    }
    out.push(
        json!({"model": "qwen2.5-coder:1.5b", "created_at": "2025-05-01T10:00:01Z",
        "message": {"role": "assistant", "content": ""}, "done": true,
        "done_reason": if cut { "length" } else { "stop" },
        "total_duration": 5, "prompt_eval_count": 300, "eval_count": 40}),
    );
    out.iter().map(|v| format!("{v}\n")).collect()
}

fn ndjson(body: String, pieces: Vec<usize>, stall_after: Option<usize>) -> Reply {
    Reply::Ndjson {
        body,
        pieces,
        stall_after,
    }
}

/// Ollama sends calls without ids; orca makes up a fresh one each answer, so ids are left out
/// of the comparison.
fn without_ids(mut r: ChatResponse) -> ChatResponse {
    for c in &mut r.tool_calls {
        assert!(c.id.starts_with("call_orca_"), "{}", c.id);
        c.id.clear();
    }
    r
}

async fn not_streamed(body: &Value) -> (ChatResponse, Value) {
    let server = FakeStream::start(vec![Reply::json(200, body)]).await;
    let r = backend(&server.url, Streaming::OFF)
        .chat(&request())
        .await
        .unwrap();
    (r, server.bodies()[0].clone())
}

#[tokio::test]
async fn streamed_ollama_turns_equal_the_non_streamed_answer() {
    let mut compared = 0;
    for cut in [false, true] {
        let (plain, sent) = not_streamed(&whole(cut)).await;
        assert_eq!(sent["stream"], json!(false), "stream off says so");
        let server =
            FakeStream::start(vec![ndjson(lines(cut), vec![1, 2, 3, 5, 7, 64], None)]).await;
        let streamed = backend(&server.url, streaming(Duration::from_secs(10)))
            .chat(&request())
            .await
            .unwrap();
        assert_eq!(server.count(), 1);
        assert_eq!(server.bodies()[0]["stream"], json!(true));
        assert_eq!(server.bodies()[0]["options"]["num_ctx"], json!(8192));
        assert_eq!(
            without_ids(streamed.clone()),
            without_ids(plain),
            "cut={cut}"
        );
        assert_eq!(
            streamed.text.as_deref(),
            Some(format!("{TEXT_A}{TEXT_B}").as_str())
        );
        assert_eq!(
            (streamed.usage.input_tokens, streamed.usage.output_tokens),
            (300, 40)
        );
        if cut {
            assert_eq!(streamed.stop_reason, StopReason::MaxTokens);
        } else {
            assert_eq!(streamed.stop_reason, StopReason::ToolUse);
            assert_eq!(
                streamed.tool_calls[0].arguments,
                json!({"path": "src/é.rs", "n": 2})
            );
        }
        compared += 1;
    }
    println!("ollama streamed == non-streamed: {compared} of 2 turns");
    assert_eq!(compared, 2);
}

#[tokio::test]
async fn every_byte_split_of_an_ollama_stream_assembles_the_same_turn() {
    let (plain, _) = not_streamed(&whole(false)).await;
    let mut splits = 0;
    for size in [1, 2, 3, 4, 9] {
        let server = FakeStream::start(vec![ndjson(lines(false), vec![size], None)]).await;
        let r = backend(&server.url, streaming(Duration::from_secs(10)))
            .chat(&request())
            .await
            .unwrap();
        assert_eq!(
            without_ids(r),
            without_ids(plain.clone()),
            "pieces of {size}"
        );
        splits += 1;
    }
    println!("ollama: {splits} piece sizes (1 byte cuts inside every UTF-8 character) agree");
}

#[tokio::test]
async fn an_ollama_server_that_ignores_stream_gets_its_json_read() {
    let (plain, _) = not_streamed(&whole(false)).await;
    let server = FakeStream::start(vec![Reply::json(200, &whole(false))]).await;
    let r = backend(&server.url, streaming(Duration::from_secs(10)))
        .chat(&request())
        .await
        .unwrap();
    assert_eq!(without_ids(r), without_ids(plain));
}

fn agents(root: &Path, base_url: &str, extra: &str) -> Agents {
    let text = format!(
        "[agents.coder]\nbackend = \"ollama\"\napi = \"ollama\"\nbase_url = \"{base_url}\"\nmodel = \"qwen2.5-coder:1.5b\"\n[agents.coder.generation]\ncontext_window = 8192\n{extra}"
    );
    let config = Config::parse(&text, Path::new(".orca/config.toml")).unwrap();
    Agents::from_config(root, &config, &|_| None, fast_settings(0)).unwrap()
}

fn failure_of(result: TaskResult) -> orca_core::TaskFailure {
    match result {
        TaskResult::Failure(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stalled_ollama_stream_hits_the_idle_timeout_once() {
    let dir = tempfile::tempdir().unwrap();
    let body = lines(false);
    let server = FakeStream::start(vec![ndjson(body.clone(), vec![7], Some(body.len() / 2))]).await;
    let a = agents(dir.path(), &server.url, "idle_timeout_secs = 1\n");
    let reply = a
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await;
    let f = failure_of(reply.outcome);
    println!("ollama stalled stream → {} request(s): {f}", server.count());
    assert_eq!(f.code, ErrorCode::Timeout, "{f}");
    assert!(f.message.contains("idle_timeout_secs"), "{}", f.message);
    assert_eq!(server.count(), 1, "the stalled turn was re-sent");
}

#[tokio::test]
async fn an_error_line_mid_ollama_stream_is_one_readable_error() {
    let body = format!(
        "{}\n{}\n",
        json!({"message": {"role": "assistant", "content": "Hé"}, "done": false}),
        json!({"error": "model runner has unexpectedly stopped"})
    );
    let server = FakeStream::start(vec![ndjson(body, vec![3], None)]).await;
    let err = backend(&server.url, streaming(Duration::from_secs(10)))
        .chat(&request())
        .await
        .unwrap_err();
    let line = err.to_string();
    println!("ollama error line: {line}");
    assert!(matches!(err, BackendError::StreamFailed { .. }), "{err:?}");
    assert!(
        line.contains("model runner has unexpectedly stopped"),
        "{line}"
    );
    assert!(!line.contains('\n'));
    assert_eq!(server.count(), 1);
}

#[tokio::test]
async fn the_stream_setting_reaches_the_ollama_request() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    for (extra, expected) in [("stream = false\n", false), ("", true)] {
        let server = FakeStream::start(vec![Reply::json(
            200,
            &json!({
            "message": {"role": "assistant", "content": "",
                "tool_calls": [{"function": {"name": "submit_result",
                    "arguments": {"status": "success", "summary": "ok"}}}]},
            "done": true, "done_reason": "stop"}),
        )])
        .await;
        let a = agents(dir.path(), &server.url, extra);
        let reply = a
            .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
            .await;
        assert!(
            matches!(reply.outcome, TaskResult::Success(_)),
            "{:?}",
            reply.outcome
        );
        let sent = server.bodies()[0]["stream"].clone();
        seen.push(sent.clone());
        assert_eq!(sent, json!(expected), "{extra:?}");
    }
    println!("ollama stream sent: {seen:?}");
}
