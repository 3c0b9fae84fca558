//! Generation settings and prices from `.orca/config.toml`, reaching the wire and the budget.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use common::{TestTools, fast_settings, task};
use orca_agents::config::Config;
use orca_agents::{Agents, ToolMode};
use orca_core::{AgentId, AgentPort, Budget, ErrorCode, TaskResult};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Answers every request with a `lookup` call carrying usage, and keeps the bodies.
struct Recorder(Mutex<Vec<Value>>);

impl Respond for &'static Recorder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.0
            .lock()
            .unwrap()
            .push(serde_json::from_slice(&request.body).unwrap());
        ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"message": {"content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{\"key\":\"k\"}"}}
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 100}
        }))
    }
}

async fn server() -> (MockServer, &'static Recorder) {
    let recorder: &'static Recorder = Box::leak(Box::new(Recorder(Mutex::new(Vec::new()))));
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(recorder)
        .mount(&server)
        .await;
    (server, recorder)
}

fn agents(root: &Path, toml: &str) -> Agents {
    let config = Config::parse(toml, Path::new(".orca/config.toml")).unwrap();
    Agents::from_config(root, &config, &|_: &str| None, fast_settings(0)).unwrap()
}

/// `[prices]` prices a local model; `max_cost_micro_usd` then fires on the second turn. Without
/// the price the same run costs 0 and runs into the turn limit instead.
#[tokio::test]
async fn a_configured_price_makes_the_cost_budget_fire() {
    let (server, _) = server().await;
    let dir = tempfile::tempdir().unwrap();
    let base = format!(
        "[agents.coder]\nbackend = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"my-local-model\"\n\n[agents.coder.limits]\nmax_turns = 5\nmax_cost_micro_usd = 3000\n# The model repeats one call: a stall would end it first.\nmax_repeats = 0\n",
        server.uri()
    );
    // 1000 input tokens at $1/Mtok + 100 output at $10/Mtok = 1000 + 1000 µUSD a turn.
    let priced = format!("{base}\n[prices.\"my-local-model\"]\ninput = 1.0\noutput = 10.0\n");
    let tools = TestTools::new();
    let reply = agents(dir.path(), &priced)
        .run_task(task("coder", Budget::UNLIMITED), &tools)
        .await;
    println!(
        "priced: {} turns, {} µUSD, outcome {:?}",
        reply.usage.turns, reply.usage.cost_micro_usd, reply.outcome
    );
    assert!(
        matches!(&reply.outcome, TaskResult::Failure(f) if f.code == ErrorCode::BudgetExceeded && f.message.contains("cost")),
        "{:?}",
        reply.outcome
    );
    assert_eq!(reply.usage.turns, 2);
    assert_eq!(reply.usage.cost_micro_usd, 4000);

    let reply = agents(dir.path(), &base)
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await;
    println!(
        "unpriced: {} turns, {} µUSD",
        reply.usage.turns, reply.usage.cost_micro_usd
    );
    assert_eq!(reply.usage.cost_micro_usd, 0);
    assert!(
        matches!(&reply.outcome, TaskResult::Failure(f) if f.message.contains("turn budget")),
        "{:?}",
        reply.outcome
    );
}

/// `[defaults.generation]` and `[agents.NAME.generation]` reach the request body.
#[tokio::test]
async fn generation_settings_reach_the_wire() {
    let (server, recorder) = server().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[defaults.generation]
temperature = 0.2
max_output_tokens = 700

[agents.coder]
backend = "openai"
base_url = "{}/v1"
model = "gpt-5-mini"

[agents.coder.limits]
max_turns = 1

[agents.coder.generation]
top_p = 0.9
seed = 7
reasoning_effort = "low"
token_param = "max_tokens"
"#,
        server.uri()
    );
    let a = agents(dir.path(), &toml);
    let g = a.generation(&AgentId::parse("coder").unwrap());
    assert_eq!(g.tool_mode, ToolMode::Native);
    let _ = a
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await;
    let body = recorder.0.lock().unwrap()[0].clone();
    for (field, want) in [
        ("temperature", json!(0.2)),
        ("top_p", json!(0.9)),
        ("seed", json!(7)),
        ("max_tokens", json!(700)),
    ] {
        assert_eq!(body[field], want, "{field} in {body}");
    }
    // `token_param = "max_tokens"` overrides the gpt-5 family's `max_completion_tokens`, and
    // `reasoning_effort` goes only with that field.
    assert!(body.get("max_completion_tokens").is_none(), "{body}");
    assert!(body.get("reasoning_effort").is_none(), "{body}");
}

/// A model that does not answer within `request_timeout_secs` is not asked again: one request,
/// one line naming the setting.
#[tokio::test]
async fn a_timed_out_turn_is_not_resent() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(3)))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[agents.coder]\nbackend = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\n\n[agents.coder.generation]\nrequest_timeout_secs = 1\n",
        server.uri()
    );
    let config = Config::parse(&toml, Path::new(".orca/config.toml")).unwrap();
    let a = Agents::from_config(dir.path(), &config, &|_: &str| None, fast_settings(4)).unwrap();
    let reply = a
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await;
    // Chat requests only (the window is asked of the server first, ADR 0025).
    let sent = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.url.path().ends_with("/chat/completions"))
        .count();
    println!(
        "timed-out turn: {sent} request(s) sent; {:?}",
        reply.outcome
    );
    assert_eq!(sent, 1, "a timed-out turn was re-sent");
    let TaskResult::Failure(f) = &reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    assert_eq!(f.code, ErrorCode::Timeout);
    assert!(f.message.contains("within 1s") && f.message.contains("request_timeout_secs"));
    assert!(!f.message.contains('\n') && !f.message.contains("AuditScope"));
}

#[test]
fn bad_generation_and_prices_name_the_field() {
    for (toml, field) in [
        (
            "[agents.coder.generation]\ntemperature = 5.0\n",
            "agents.coder.generation.temperature",
        ),
        ("[defaults.generation]\ntool_mode = \"xml\"\n", "defaults"),
        (
            "[agents.coder.generation]\nmax_output_tokens = 0\n",
            "agents.coder.generation.max_output_tokens",
        ),
        (
            "[agents.coder.generation]\nidle_timeout_secs = 0\n",
            "agents.coder.generation.idle_timeout_secs",
        ),
        ("[defaults.generation]\nstream = \"yes\"\n", "defaults"),
        (
            "[prices.\"m\"]\ninput = -1.0\noutput = 1.0\n",
            "prices.\"m\".input",
        ),
        ("[prices.\"m\"]\ninput = 1.0\n", "output"),
    ] {
        let err = Config::parse(toml, Path::new(".orca/config.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(field), "{toml}: {err}");
    }
}

/// With `context_window` set, a conversation that outgrows it is fitted (older tool results
/// left out) and, when it cannot be, fails before anything is sent.
#[tokio::test]
async fn requests_are_fitted_into_the_context_window_or_fail_unsent() {
    let (server, recorder) = server().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = |window: u64| {
        format!(
            "[agents.coder]\nbackend = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\n\n[agents.coder.limits]\nmax_turns = 4\nmax_repeats = 0\n\n[agents.coder.generation]\ncontext_window = {window}\nmax_output_tokens = 500\n",
            server.uri()
        )
    };
    // Each `lookup` result is ~3 000 tokens; a 8 000-token window holds about two of them.
    let tools = BigTools(10_000);
    let reply = agents(dir.path(), &toml(8_000))
        .run_task(task("coder", Budget::UNLIMITED), &tools)
        .await;
    let bodies = recorder.0.lock().unwrap().clone();
    let largest = bodies.iter().map(|b| b.to_string().len()).max().unwrap();
    let elided: usize = bodies
        .iter()
        .map(|b| b.to_string().matches("left out to fit").count())
        .sum();
    println!(
        "window 8000: {} requests, largest body {largest} bytes, {elided} elided results; {:?}",
        bodies.len(),
        reply.outcome
    );
    assert_eq!(bodies.len(), 4, "every turn was sent");
    assert!(largest < 8_000 * 4, "a body outgrew the window: {largest}");
    assert!(elided > 0);

    recorder.0.lock().unwrap().clear();
    let reply = agents(dir.path(), &toml(600))
        .run_task(task("coder", Budget::UNLIMITED), &tools)
        .await;
    let sent = recorder.0.lock().unwrap().len();
    println!("window 600: {sent} requests sent; {:?}", reply.outcome);
    assert_eq!(sent, 0);
    assert!(
        matches!(&reply.outcome, TaskResult::Failure(f) if f.message.contains("context window") && f.message.contains("context_window")),
        "{:?}",
        reply.outcome
    );
}

/// Offers `lookup`, answering with `.0` characters.
struct BigTools(usize);

#[async_trait::async_trait]
impl orca_core::ToolHost for BigTools {
    fn specs(&self) -> Vec<orca_core::ToolSpec> {
        vec![orca_core::ToolSpec {
            name: "lookup".into(),
            description: "look a key up".into(),
            parameters: json!({"type": "object"}),
        }]
    }

    async fn call(&self, _: &orca_core::ToolCall) -> Result<Value, orca_core::ToolError> {
        Ok(Value::String("y".repeat(self.0)))
    }
}

/// `AGENTS.md` reaches a model-backed specialist's system prompt (the planner's goes through
/// the same `with_instructions`); `project_instructions = false` keeps it out.
#[tokio::test]
async fn project_instructions_reach_planner_and_specialists_unless_off() {
    let (server, recorder) = server().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("AGENTS.md"), "MARKER-use-tabs").unwrap();
    let toml = format!(
        "[agents.coder]\nbackend = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\n\n[agents.coder.limits]\nmax_turns = 1\n",
        server.uri()
    );
    let seen = |off: bool| {
        let toml = if off {
            format!("project_instructions = false\n{toml}")
        } else {
            toml.clone()
        };
        let dir = dir.path().to_owned();
        async move {
            recorder.0.lock().unwrap().clear();
            let _ = agents(&dir, &toml)
                .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
                .await;
            let body = recorder.0.lock().unwrap()[0].clone();
            body["messages"][0]["content"]
                .as_str()
                .unwrap()
                .contains("MARKER-use-tabs")
        }
    };
    assert!(
        seen(false).await,
        "AGENTS.md missing from the specialist's prompt"
    );
    assert!(
        !seen(true).await,
        "project_instructions = false was ignored"
    );
}
