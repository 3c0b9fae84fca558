//! Fuzz targets (proptest; cargo-fuzz needs nightly) for what orca-agents reads from people
//! and from models: `.orca/config.toml`, OpenAI and Anthropic HTTP replies (through a local
//! wiremock server, as the adapters' parsing is private), and the structured results a model
//! submits. Every input gets a value or a clear error, never a panic.
//!
//! Seeds: `fuzz/corpus/{config,llm_openai,llm_anthropic}/`. Cases: `ORCA_FUZZ_CASES` (default
//! 16, so the normal test suite stays fast); `cargo xtask fuzz --cases N` runs more.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::sync::{Arc, Mutex};

use orca_agents::config::Config;
use orca_agents::{ChatBackend, ChatRequest, Message, ToolChoice};
use orca_llm::{AnthropicBackend, OpenAiBackend};
use proptest::prelude::*;
use serde_json::Value;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

#[path = "../../../../fuzz/engine.rs"]
mod engine;

use engine::*;

/// Serves whatever body is put in it.
#[derive(Clone, Default)]
struct Body(Arc<Mutex<Vec<u8>>>);

impl Respond for Body {
    fn respond(&self, _request: &Request) -> ResponseTemplate {
        ResponseTemplate::new(200)
            .insert_header("content-type", "application/json")
            .set_body_bytes(self.0.lock().unwrap().clone())
    }
}

struct Server {
    rt: tokio::runtime::Runtime,
    body: Body,
    openai: OpenAiBackend,
    anthropic: AnthropicBackend,
    _server: MockServer,
}

fn server() -> Server {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let body = Body::default();
    let server = rt.block_on(async {
        let s = MockServer::start().await;
        Mock::given(wiremock::matchers::method("POST"))
            .respond_with(body.clone())
            .mount(&s)
            .await;
        s
    });
    let openai = OpenAiBackend::new(&format!("{}/v1", server.uri()), "gpt-test", None);
    let anthropic = AnthropicBackend::new(&server.uri(), "claude-test", None);
    Server {
        rt,
        body,
        openai,
        anthropic,
        _server: server,
    }
}

fn request() -> ChatRequest {
    ChatRequest {
        system: "You are the coder.".into(),
        messages: vec![Message::User {
            text: "Do the step.".into(),
        }],
        tools: Vec::new(),
        tool_choice: ToolChoice::Auto,
        max_output_tokens: Some(100),
        sampling: orca_agents::Sampling::default(),
        output_schema: None,
    }
}

fn reply(server: &Server, backend: &dyn ChatBackend, body: Vec<u8>) -> Result<(), String> {
    *server.body.0.lock().unwrap() = body;
    server
        .rt
        .block_on(backend.chat(&request()))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn config_files(bytes in input("config")) {
        let text = String::from_utf8_lossy(&bytes);
        if let Err(e) = Config::parse(&text, Path::new(".orca/config.toml")) {
            let message = e.to_string();
            prop_assert!(message.starts_with(".orca/config.toml: "), "{message}");
            prop_assert!(!message.trim_start_matches(".orca/config.toml: ").trim().is_empty(), "{message:?}");
            clear(&message);
        }
    }

    #[test]
    fn submitted_results(bytes in input("llm_openai")) {
        // What a model submits through the forced tool: any JSON value.
        if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
            for candidate in [v.clone(), v["choices"][0]["message"].clone()] {
                if let Err(e) = orca_agents::schema::parse_task_result(&candidate) { clear(&e); }
                if let Err(e) = orca_agents::schema::parse_planner_response(&candidate) { clear(&e); }
                if let Err(e) = orca_agents::schema::parse_answer(&candidate) { clear(&e); }
            }
        }
    }
}

/// One server for all the HTTP cases of a test (starting one per case would dominate).
#[test]
fn openai_replies() {
    let s = server();
    let mut runner = proptest::test_runner::TestRunner::new(config());
    runner
        .run(&input("llm_openai"), |body| {
            if let Err(e) = reply(&s, &s.openai, body) {
                clear(&e);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn anthropic_replies() {
    let s = server();
    let mut runner = proptest::test_runner::TestRunner::new(config());
    runner
        .run(&input("llm_anthropic"), |body| {
            if let Err(e) = reply(&s, &s.anthropic, body) {
                clear(&e);
            }
            Ok(())
        })
        .unwrap();
}

/// The seeds themselves parse, so mutations start from real replies.
#[test]
fn seeds_are_valid() {
    let s = server();
    for body in corpus("llm_openai") {
        reply(&s, &s.openai, body).unwrap();
    }
    for body in corpus("llm_anthropic") {
        reply(&s, &s.anthropic, body).unwrap();
    }
    for text in corpus("config") {
        Config::parse(std::str::from_utf8(&text).unwrap(), Path::new("c.toml")).unwrap();
    }
}
