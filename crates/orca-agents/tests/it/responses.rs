//! `api = "responses"`: the OpenAI Responses API against a fake server answering in its shapes,
//! through the real loop.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::path::Path;
use std::sync::Mutex;

use common::{TestTools, fast_settings, task};
use orca_agents::config::Config;
use orca_agents::{Agents, WireApi};
use orca_core::{AgentId, AgentPort, Budget, TaskResult};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Answers with the given bodies in order, keeping the requests.
struct Seq {
    replies: Mutex<Vec<ResponseTemplate>>,
    bodies: Mutex<Vec<Value>>,
}

impl Respond for &'static Seq {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.bodies
            .lock()
            .unwrap()
            .push(serde_json::from_slice(&request.body).unwrap());
        let mut q = self.replies.lock().unwrap();
        if q.len() > 1 {
            q.remove(0)
        } else {
            q[0].clone()
        }
    }
}

async fn serve(replies: Vec<ResponseTemplate>) -> (MockServer, &'static Seq) {
    let seq: &'static Seq = Box::leak(Box::new(Seq {
        replies: Mutex::new(replies),
        bodies: Mutex::new(Vec::new()),
    }));
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(seq)
        .mount(&server)
        .await;
    (server, seq)
}

fn call(name: &str, args: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "resp_1", "object": "response", "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "id": "fc_1", "call_id": format!("call_{name}"), "name": name, "arguments": args.to_string()}
        ],
        "usage": {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 200},
                  "output_tokens": 100, "output_tokens_details": {"reasoning_tokens": 60}, "total_tokens": 1100}
    }))
}

fn agents(root: &Path, uri: &str, extra: &str) -> Agents {
    let toml = format!(
        "[agents.coder]\nbackend = \"openai\"\napi = \"responses\"\nbase_url = \"{uri}/v1\"\nmodel = \"gpt-5-codex\"\n\n[agents.coder.generation]\nmax_output_tokens = 900\nreasoning_effort = \"low\"\ntemperature = 0.3\n{extra}"
    );
    let config = Config::parse(&toml, Path::new(".orca/config.toml")).unwrap();
    Agents::from_config(root, &config, &|_: &str| None, fast_settings(0)).unwrap()
}

#[tokio::test]
async fn a_task_runs_over_the_responses_api_with_tool_calls_usage_and_cost() {
    let (server, seq) = serve(vec![
        call("lookup", json!({"key": "k"})),
        call(
            "submit_result",
            json!({"status": "success", "summary": "done"}),
        ),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let a = agents(dir.path(), &server.uri(), "");
    assert_eq!(
        a.generation(&AgentId::parse("coder").unwrap()).api,
        WireApi::Responses
    );
    let tools = TestTools::new();
    let reply = a.run_task(task("coder", Budget::UNLIMITED), &tools).await;
    assert!(
        matches!(&reply.outcome, TaskResult::Success(s) if s.summary == "done"),
        "{:?}",
        reply.outcome
    );
    assert_eq!(tools.names(), ["lookup"]);
    let u = reply.usage;
    println!(
        "responses api: {} turns, input {} (+{} cached), output {}, cost {} µUSD",
        u.turns, u.input_tokens, u.cache_read_tokens, u.output_tokens, u.cost_micro_usd
    );
    assert_eq!(
        (
            u.turns,
            u.input_tokens,
            u.cache_read_tokens,
            u.output_tokens
        ),
        (2, 1600, 400, 200)
    );
    // gpt-5 prices (1.25 / 10 / 0.125 USD per Mtok): 1600·1.25 + 400·0.125 + 200·10 µUSD.
    assert_eq!(u.cost_micro_usd, 2000 + 50 + 2000);
    let bodies = seq.bodies.lock().unwrap().clone();
    let first = &bodies[0];
    assert_eq!(first["store"], json!(false));
    assert_eq!(first["max_output_tokens"], json!(900));
    assert_eq!(first["reasoning"], json!({"effort": "low"}));
    assert!(
        first.get("temperature").is_none(),
        "reasoning models refuse it: {first}"
    );
    assert!(first["instructions"].as_str().unwrap().contains("coder"));
    assert!(
        first["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "submit_result" && t["type"] == "function")
    );
    let input = bodies[1]["input"].as_array().unwrap();
    assert!(
        input
            .iter()
            .any(|i| i["type"] == "function_call" && i["call_id"] == "call_lookup")
    );
    assert!(
        input
            .iter()
            .any(|i| i["type"] == "function_call_output" && i["call_id"] == "call_lookup")
    );
}

#[tokio::test]
async fn responses_errors_and_truncation_are_one_actionable_line() {
    let (server, _) = serve(vec![ResponseTemplate::new(400).set_body_json(json!({
        "error": {"message": "Unsupported parameter: 'temperature' is not supported with this model.",
                  "type": "invalid_request_error", "param": "temperature", "code": "unsupported_parameter"}
    }))])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let reply = agents(dir.path(), &server.uri(), "")
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await;
    let TaskResult::Failure(f) = &reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    println!("400: {}", f.message);
    assert!(f.message.contains("status 400") && f.message.contains("Unsupported parameter"));
    assert!(!f.message.contains('\n'));

    let (server, _) = serve(vec![ResponseTemplate::new(200).set_body_json(json!({
        "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
        "output": [{"type": "reasoning", "summary": []}],
        "usage": {"input_tokens": 10, "output_tokens": 900}
    }))])
    .await;
    let reply = agents(dir.path(), &server.uri(), "")
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await;
    let TaskResult::Failure(f) = &reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    println!("cut: {}", f.message);
    assert!(f.message.contains("cut at 900") && f.message.contains("max_output_tokens"));
    let sent = server.received_requests().await.unwrap().len();
    assert_eq!(sent, 1, "a cut answer is not repaired");
}
