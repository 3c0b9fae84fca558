//! `api = "ollama"`: Ollama's native `/api/chat` (ADR 0025) — request bodies as snapshots, and
//! whole steps against a fake Ollama answering in its recorded shapes: `num_ctx` always sent
//! (configured, or asked from `/api/show` once), tool calls, usage, `done_reason: "length"`,
//! and `format` for `tool_mode = "json"`.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common::{TestTools, fast_settings, task};

use std::path::Path;
use std::sync::Mutex;

use orca_agents::config::Config;
use orca_agents::{
    Agents, ChatRequest, Message, ReasoningEffort, Sampling, ToolChoice, ToolResult,
};
use orca_core::{AgentPort, Budget, TaskResult, ToolCall, ToolSpec};
use orca_llm::OllamaBackend;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

fn request() -> ChatRequest {
    ChatRequest {
        system: "You are the coder.".into(),
        messages: vec![
            Message::User {
                text: "Read a.txt".into(),
            },
            Message::Assistant {
                text: Some("Reading it.".into()),
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "read_file".into(),
                    arguments: json!({"path": "a.txt"}),
                }],
            },
            Message::Tool {
                results: vec![ToolResult {
                    call_id: "call_1".into(),
                    name: "read_file".into(),
                    content: "{\"content\":\"hello\"}".into(),
                    is_error: false,
                }],
            },
        ],
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        }],
        tool_choice: ToolChoice::Required,
        max_output_tokens: Some(2048),
        sampling: Sampling {
            temperature: Some(0.2),
            top_p: Some(0.9),
            seed: Some(7),
            reasoning_effort: Some(ReasoningEffort::Low),
        },
        output_schema: None,
    }
}

/// The wire format: system first, tool calls with object arguments, tool results by name,
/// Ollama's function tools, and the options (`num_ctx`, `num_predict`, sampling; no
/// `reasoning_effort`, which Ollama does not take).
#[test]
fn request_bodies() {
    let b = OllamaBackend::new(
        "http://127.0.0.1:11434/v1",
        "qwen2.5-coder:1.5b",
        None,
        orca_llm::http_client_builder().build().unwrap(),
    );
    insta::assert_json_snapshot!(
        "ollama_native_tools",
        b.request_body(&request(), Some(8192))
    );
    let mut json_mode = request();
    json_mode.tools.clear();
    json_mode.output_schema = Some(
        json!({"anyOf": [{"type": "object", "properties": {"tool": {"const": "read_file"}}}]}),
    );
    json_mode.sampling = Sampling::default();
    json_mode.max_output_tokens = None;
    insta::assert_json_snapshot!("ollama_native_json_mode", b.request_body(&json_mode, None));
}

/// Answers `/api/chat` in order (the last repeats), keeping the bodies.
struct Chat {
    replies: Mutex<Vec<Value>>,
    bodies: Mutex<Vec<Value>>,
}

impl Respond for &'static Chat {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.bodies
            .lock()
            .unwrap()
            .push(serde_json::from_slice(&request.body).unwrap());
        let mut q = self.replies.lock().unwrap();
        let body = if q.len() > 1 {
            q.remove(0)
        } else {
            q[0].clone()
        };
        ResponseTemplate::new(200).set_body_json(body)
    }
}

/// An `/api/chat` answer (Ollama 0.x, `stream: false`).
fn ollama_turn(content: &str, calls: &[(&str, Value)], done_reason: &str) -> Value {
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(|(n, a)| json!({"function": {"name": n, "arguments": a}}))
            .collect();
    }
    json!({"model": "qwen2.5-coder:1.5b", "created_at": "2025-05-01T10:00:00.000000Z",
        "message": message, "done_reason": done_reason, "done": true,
        "total_duration": 5_000_000_000_u64, "load_duration": 20_000_000,
        "prompt_eval_count": 300, "prompt_eval_duration": 1_000_000_000,
        "eval_count": 40, "eval_duration": 3_000_000_000_u64})
}

async fn fake_ollama(replies: Vec<Value>) -> (MockServer, &'static Chat) {
    let s = MockServer::start().await;
    let chat: &'static Chat = Box::leak(Box::new(Chat {
        replies: Mutex::new(replies),
        bodies: Mutex::new(Vec::new()),
    }));
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(chat)
        .mount(&s)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/show"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "parameters": "stop \"<|im_end|>\"",
            "details": {"family": "qwen2"},
            "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}})))
        .mount(&s)
        .await;
    (s, chat)
}

fn agents(root: &Path, base_url: &str, extra: &str) -> Agents {
    let text = format!(
        "[agents.coder]\nbackend = \"ollama\"\napi = \"ollama\"\nbase_url = \"{base_url}\"\nmodel = \"qwen2.5-coder:1.5b\"\n{extra}"
    );
    let config = Config::parse(&text, Path::new(".orca/config.toml")).unwrap();
    Agents::from_config(root, &config, &|_| None, fast_settings(0)).unwrap()
}

async fn shows(s: &MockServer) -> usize {
    s.received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.url.path() == "/api/show")
        .count()
}

/// A whole step: a tool call, then the result; `num_ctx` on every request (the asked window,
/// capped, asked once; or the configured one, not asked); usage from the counts.
#[tokio::test]
async fn a_step_runs_on_native_ollama_with_num_ctx() {
    let dir = tempfile::tempdir().unwrap();
    for (extra, num_ctx, asked) in [
        ("", 16384, 1),
        (
            "[agents.coder.generation]\ncontext_window = 8192\n",
            8192,
            0,
        ),
    ] {
        let (s, chat) = fake_ollama(vec![
            ollama_turn("", &[("lookup", json!({"key": "k"}))], "stop"),
            ollama_turn(
                "",
                &[(
                    "submit_result",
                    json!({"status": "success", "summary": "done natively"}),
                )],
                "stop",
            ),
        ])
        .await;
        // A base URL with /v1 (as for the OpenAI endpoint) is taken to the server's root.
        let a = agents(dir.path(), &format!("{}/v1", s.uri()), extra);
        let tools = TestTools::new();
        let reply = a.run_task(task("coder", Budget::UNLIMITED), &tools).await;
        assert!(
            matches!(&reply.outcome, TaskResult::Success(r) if r.summary == "done natively"),
            "{:?}",
            reply.outcome
        );
        assert_eq!(tools.names(), ["lookup"]);
        let bodies = chat.bodies.lock().unwrap().clone();
        let sent: Vec<u64> = bodies
            .iter()
            .map(|b| b["options"]["num_ctx"].as_u64().unwrap_or(0))
            .collect();
        let show_count = shows(&s).await;
        println!(
            "ollama native {extra:?}: {} requests, num_ctx sent {sent:?}, /api/show asked {show_count}, usage in {} out {}",
            bodies.len(),
            reply.usage.input_tokens,
            reply.usage.output_tokens
        );
        assert!(sent.iter().all(|n| *n == num_ctx), "{sent:?}");
        assert_eq!(show_count, asked);
        assert_eq!(
            (reply.usage.input_tokens, reply.usage.output_tokens),
            (600, 80)
        );
        // The tool result went back as a tool message named after the tool.
        let last = &bodies[1]["messages"];
        let tool_msg = last
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool")
            .unwrap();
        assert_eq!(tool_msg["tool_name"], "lookup");
        // Streaming is on by default; this fake answers a plain JSON body, which is accepted.
        assert_eq!(bodies[0]["stream"], true);
        assert!(bodies[0]["tools"].as_array().unwrap().len() >= 2);
    }
}

/// `done_reason: "length"` is the truncation outcome, not a forgotten result.
#[tokio::test]
async fn length_is_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let (s, chat) = fake_ollama(vec![ollama_turn(
        "and then the plan goes on",
        &[],
        "length",
    )])
    .await;
    let a = agents(dir.path(), &s.uri(), "");
    let reply = a
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await;
    let TaskResult::Failure(f) = &reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    println!(
        "ollama length: {} request(s); {}",
        chat.bodies.lock().unwrap().len(),
        f.message
    );
    assert!(f.message.contains("cut at"), "{}", f.message);
    assert_eq!(chat.bodies.lock().unwrap().len(), 1);
}

/// `tool_mode = "json"`: no native tools, the schema of the allowed calls in `format`, and a
/// call written as JSON text is run.
#[tokio::test]
async fn json_mode_sends_format() {
    let dir = tempfile::tempdir().unwrap();
    let (s, chat) = fake_ollama(vec![
        ollama_turn(
            "{\"tool\": \"lookup\", \"arguments\": {\"key\": \"k\"}}",
            &[],
            "stop",
        ),
        ollama_turn(
            "{\"tool\": \"submit_result\", \"arguments\": {\"status\": \"success\", \"summary\": \"json mode\"}}",
            &[],
            "stop",
        ),
    ])
    .await;
    let a = agents(
        dir.path(),
        &s.uri(),
        "[agents.coder.generation]\ntool_mode = \"json\"\n",
    );
    let tools = TestTools::new();
    let reply = a.run_task(task("coder", Budget::UNLIMITED), &tools).await;
    assert!(
        matches!(&reply.outcome, TaskResult::Success(r) if r.summary == "json mode"),
        "{:?}",
        reply.outcome
    );
    let bodies = chat.bodies.lock().unwrap().clone();
    let with_format = bodies
        .iter()
        .filter(|b| b["format"].to_string().contains("submit_result") && b.get("tools").is_none())
        .count();
    println!(
        "ollama json mode: {with_format}/{} requests with format and no tools",
        bodies.len()
    );
    assert_eq!(with_format, bodies.len());
    assert_eq!(tools.names(), ["lookup"]);
}

/// Without a config and without keys, the local Ollama fallback speaks the native API (so its
/// window is what orca sends as `num_ctx`); with a key, the provider's API as before.
#[test]
fn the_zero_config_ollama_fallback_is_native() {
    use orca_agents::{LoopSettings, WireApi};
    let planner = orca_core::AgentId::planner();
    let none = Agents::with_defaults("/p", &|_| None, LoopSettings::default());
    assert_eq!(none.generation(&planner).api, WireApi::Ollama);
    let key = |k: &str| (k == "OPENAI_API_KEY").then(|| "sk-x".to_owned());
    let openai = Agents::with_defaults("/p", &key, LoopSettings::default());
    assert_eq!(openai.generation(&planner).api, WireApi::Chat);
    // The same through a config that names no backend; not when it names one.
    let dir = tempfile::tempdir().unwrap();
    for (text, api) in [
        ("project_instructions = false\n", WireApi::Ollama),
        ("[defaults]\nbackend = \"ollama\"\n", WireApi::Chat),
        (
            "[defaults]\nbase_url = \"http://127.0.0.1:8080/v1\"\n",
            WireApi::Chat,
        ),
    ] {
        let config = Config::parse(text, Path::new(".orca/config.toml")).unwrap();
        let a =
            Agents::from_config(dir.path(), &config, &|_| None, LoopSettings::default()).unwrap();
        assert_eq!(a.generation(&planner).api, api, "{text}");
    }
}
