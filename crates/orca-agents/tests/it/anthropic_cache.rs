//! The saving of Anthropic prompt caching on a 10-turn agent loop. A fake
//! Messages server caches as Anthropic documents it — a prefix (tools, system, messages) is
//! written at a `cache_control` breakpoint and read back by a later request starting with it —
//! and reports `cache_creation_input_tokens` / `cache_read_input_tokens` (about 4 characters a
//! token). The run's cost (shipped claude-sonnet-4 prices) is compared with the same tokens all
//! billed as input.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::collections::HashSet;
use std::sync::Mutex;

use common::{fast_settings, task};
use orca_agents::{Agents, ApiKey, BackendSpec, built_in_profiles};
use orca_core::{AgentPort, Budget, TaskResult, ToolCall, ToolError, ToolHost, ToolSpec};
use orca_llm::PriceTable;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const TURNS: usize = 10;

struct CachingServer {
    cached: Mutex<HashSet<String>>,
}

fn strip_cache_control(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "cache_control")
                .map(|(k, v)| (k.clone(), strip_cache_control(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_cache_control).collect()),
        other => other.clone(),
    }
}

fn tokens(s: &str) -> u64 {
    (s.len() as u64).div_ceil(4)
}

impl Respond for &'static CachingServer {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let text = request_text(&body);
        let has_marker = text.contains("cache_control");
        let clean = strip_cache_control(&body);
        let head = format!("{}{}", clean["tools"], clean["system"]);
        let messages = clean["messages"].as_array().cloned().unwrap_or_default();
        // Every block boundary is a prefix a later request can read back.
        let mut prefixes = vec![head.clone()];
        let mut acc = head;
        for m in &messages {
            acc.push_str(&m.to_string());
            prefixes.push(acc.clone());
        }
        let total = tokens(&acc);
        let mut cached = self.cached.lock().unwrap();
        let read = if has_marker {
            prefixes
                .iter()
                .rev()
                .find(|p| cached.contains(*p))
                .map_or(0, |p| tokens(p))
        } else {
            0
        };
        let write = if has_marker {
            cached.insert(prefixes[0].clone());
            cached.insert(acc.clone());
            total - read
        } else {
            0
        };
        let turn = messages.iter().filter(|m| m["role"] == "assistant").count();
        let (name, input) = if turn + 1 < TURNS {
            ("lookup", json!({"key": format!("k{turn}")}))
        } else {
            (
                "submit_result",
                json!({"status": "success", "summary": "done"}),
            )
        };
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "tool_use", "id": format!("toolu_{turn}"), "name": name, "input": input}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": total - read - write, "output_tokens": 60,
                      "cache_creation_input_tokens": write, "cache_read_input_tokens": read}
        }))
    }
}

fn request_text(body: &Value) -> String {
    body.to_string()
}

/// `lookup` answers 3 000 characters, like a file read.
struct FileLikeTools;

#[async_trait::async_trait]
impl ToolHost for FileLikeTools {
    fn specs(&self) -> Vec<ToolSpec> {
        ["lookup", "read_file", "list_files", "search_text"]
            .into_iter()
            .map(|name| ToolSpec {
                name: name.into(),
                description: "look something up in the project and return what was found".into(),
                parameters: json!({"type": "object", "properties": {"key": {"type": "string"}}}),
            })
            .collect()
    }

    async fn call(&self, call: &ToolCall) -> Result<Value, ToolError> {
        Ok(Value::String(format!(
            "{}: {}",
            call.arguments,
            "z".repeat(3_000)
        )))
    }
}

#[tokio::test]
async fn prompt_caching_saving_on_a_ten_turn_loop() {
    let server_state: &'static CachingServer = Box::leak(Box::new(CachingServer {
        cached: Mutex::new(HashSet::new()),
    }));
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(server_state)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let backend = BackendSpec::Anthropic {
        base_url: server.uri(),
        model: "claude-sonnet-4-5".into(),
        api_key: Some(ApiKey::new("sk-ant-test")),
    };
    let coder = built_in_profiles(&backend)
        .into_iter()
        .find(|p| p.id.as_str() == "coder")
        .unwrap();
    let agents = Agents::new(dir.path(), [coder], fast_settings(0)).unwrap();
    let reply = agents
        .run_task(task("coder", Budget::UNLIMITED), &FileLikeTools)
        .await;
    assert!(
        matches!(reply.outcome, TaskResult::Success(_)),
        "{:?}",
        reply.outcome
    );
    let u = reply.usage;
    let price = PriceTable::shipped().price("claude-sonnet-4-5").unwrap();
    let uncached = orca_core::Usage {
        input_tokens: u.input_tokens + u.cache_read_tokens + u.cache_write_tokens,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        ..u
    };
    let without = price.cost(&uncached);
    let saving = 100.0 * (1.0 - u.cost_micro_usd as f64 / without as f64);
    println!(
        "anthropic caching, {} turns: input {} + cache write {} + cache read {}, output {}; cost {} µUSD with caching vs {} µUSD without: {saving:.0}% saved",
        u.turns,
        u.input_tokens,
        u.cache_write_tokens,
        u.cache_read_tokens,
        u.output_tokens,
        u.cost_micro_usd,
        without
    );
    assert_eq!(u.turns, TURNS as u32);
    assert!(u.cache_read_tokens > 0, "nothing was read from the cache");
    assert!(saving > 40.0, "caching saved only {saving:.0}%");
}
