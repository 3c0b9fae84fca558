//! Fuzz targets (proptest; cargo-fuzz needs nightly) for what orca-agents reads from people
//! and from models: `.orca/config.toml`, OpenAI and Anthropic HTTP replies (through a local
//! wiremock server, as the adapters' parsing is private), and the structured results a model
//! submits. Every input gets a value or a clear error, never a panic.
//!
//! Seeds: `fuzz/corpus/{config,llm_openai,llm_anthropic}/`. Cases: `ORCA_FUZZ_CASES` (default
//! 16, so the normal test suite stays fast); `cargo xtask fuzz --cases N` runs more.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use orca_agents::config::Config;
use orca_agents::{AnthropicBackend, ChatBackend, ChatRequest, Message, OpenAiBackend, ToolChoice};
use proptest::prelude::*;
use serde_json::Value;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

fn cases() -> u32 {
    std::env::var("ORCA_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(16)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let interesting = prop_oneof![
        Just(b"\"".to_vec()),
        Just(b"{".to_vec()),
        Just(b"]".to_vec()),
        Just(b"null".to_vec()),
        Just(b"=".to_vec()),
        Just(b"[agents.x]\n".to_vec()),
        Just(b"-99999999999999999999".to_vec()),
        Just("é🦀\u{0}".as_bytes().to_vec()),
        Just(vec![0xff]),
        proptest::collection::vec(any::<u8>(), 1..8),
    ];
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        (any::<usize>(), interesting).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 1usize..32).prop_map(|(i, n)| Mutation::Delete(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn apply(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = bytes.len().max(1);
        match m {
            Mutation::Flip(i, x) => {
                if !bytes.is_empty() {
                    let i = i % bytes.len();
                    bytes[i] ^= x;
                }
            }
            Mutation::Insert(i, b) => {
                let i = i % (bytes.len() + 1);
                bytes.splice(i..i, b.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let i = i % len;
                let end = (i + n).min(bytes.len());
                if i < end {
                    bytes.drain(i..end);
                }
            }
            Mutation::Truncate(i) => bytes.truncate(i % len),
        }
    }
    bytes
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        Just(serde_json::json!([])),
        Just(serde_json::json!({})),
    ]
}

fn replace_value(node: &mut Value, pick: u64, with: Value) {
    let descend = !pick.is_multiple_of(3);
    let k = usize::try_from(pick / 3).unwrap_or(0);
    match node {
        Value::Object(m) if descend && !m.is_empty() => {
            let len = m.len();
            if let Some(child) = m.values_mut().nth(k % len) {
                replace_value(child, pick / 3, with);
            }
        }
        Value::Array(a) if descend && !a.is_empty() => {
            let len = a.len();
            replace_value(&mut a[k % len], pick / 3, with);
        }
        _ => *node = with,
    }
}

fn input(target: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let seeds = corpus(target);
    let n = seeds.len();
    let s1 = seeds.clone();
    let mutated = (0..n, proptest::collection::vec(mutation(), 1..6))
        .prop_map(move |(i, ms)| apply(s1[i].clone(), &ms));
    let s2 = seeds;
    let structural = (0..n, any::<u64>(), json_leaf()).prop_map(move |(i, pick, with)| {
        let Ok(mut doc) = serde_json::from_slice::<Value>(&s2[i]) else {
            return s2[i].clone();
        };
        replace_value(&mut doc, pick, with);
        serde_json::to_vec(&doc).unwrap()
    });
    prop_oneof![
        4 => mutated,
        3 => structural,
        1 => proptest::collection::vec(any::<u8>(), 0..128),
    ]
}

#[track_caller]
fn clear(message: &str) {
    assert!(!message.trim().is_empty(), "an empty error message");
    assert!(!message.contains('\n'), "a multi-line error: {message:?}");
}

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
