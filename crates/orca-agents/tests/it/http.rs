//! Both HTTP formats against local fake servers (wiremock), through the real agent loop.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use common::{TestTools, fast_settings, task};
use orca_agents::{
    Agents, ApiKey, BackendSpec, ChatBackend, ChatRequest, Message, ToolChoice, ToolResult,
};
use orca_core::{AgentPort, Budget, ErrorCode, TaskResult, ToolCall, ToolSpec};
use orca_llm::{AnthropicBackend, OpenAiBackend};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

#[derive(Clone, Copy, Debug)]
enum Fmt {
    OpenAi,
    Anthropic,
}

const BOTH: [Fmt; 2] = [Fmt::OpenAi, Fmt::Anthropic];

/// Replies in order; the last reply repeats.
struct Seq(Mutex<VecDeque<ResponseTemplate>>);

impl Respond for Seq {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let mut q = self.0.lock().unwrap();
        if q.len() > 1 {
            q.pop_front().unwrap()
        } else {
            q.front().unwrap().clone()
        }
    }
}

impl Fmt {
    fn path(self) -> &'static str {
        match self {
            Self::OpenAi => "/v1/chat/completions",
            Self::Anthropic => "/v1/messages",
        }
    }

    fn spec(self, uri: &str) -> BackendSpec {
        match self {
            Self::OpenAi => BackendSpec::OpenAi {
                base_url: format!("{uri}/v1"),
                model: "m".into(),
                api_key: Some(ApiKey::new("sk-test-openai-key")),
            },
            Self::Anthropic => BackendSpec::Anthropic {
                base_url: uri.to_owned(),
                model: "m".into(),
                api_key: Some(ApiKey::new("sk-ant-test-key")),
            },
        }
    }

    /// A model turn. `calls`: (name, arguments); a string argument is sent raw.
    fn turn(
        self,
        text: Option<&str>,
        calls: &[(&str, Value)],
        finish: &str,
        usage: bool,
    ) -> ResponseTemplate {
        let body = match self {
            Self::OpenAi => {
                let mut message = json!({"role": "assistant", "content": text});
                if !calls.is_empty() {
                    message["tool_calls"] = calls
                        .iter()
                        .enumerate()
                        .map(|(i, (name, args))| {
                            let raw = match args {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            };
                            json!({"id": format!("call_{i}"), "type": "function", "function": {"name": name, "arguments": raw}})
                        })
                        .collect();
                }
                let mut body = json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": finish}]});
                if usage {
                    body["usage"] = json!({"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 4}});
                }
                body
            }
            Self::Anthropic => {
                let mut content: Vec<Value> = Vec::new();
                if let Some(t) = text {
                    content.push(json!({"type": "text", "text": t}));
                }
                for (i, (name, args)) in calls.iter().enumerate() {
                    content.push(json!({"type": "tool_use", "id": format!("toolu_{i}"), "name": name, "input": args}));
                }
                let finish = match finish {
                    "tool_calls" => "tool_use",
                    "stop" => "end_turn",
                    other => other,
                };
                let mut body = json!({"id": "msg", "type": "message", "role": "assistant", "content": content, "stop_reason": finish});
                if usage {
                    body["usage"] = json!({"input_tokens": 6, "output_tokens": 5, "cache_read_input_tokens": 4, "cache_creation_input_tokens": 0});
                }
                body
            }
        };
        ResponseTemplate::new(200).set_body_json(body)
    }

    fn submit(self, summary: &str) -> ResponseTemplate {
        self.turn(
            None,
            &[(
                "submit_result",
                json!({"status": "success", "summary": summary}),
            )],
            "tool_calls",
            true,
        )
    }
}

async fn server(fmt: Fmt, replies: Vec<ResponseTemplate>) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(fmt.path()))
        .respond_with(Seq(Mutex::new(replies.into())))
        .mount(&server)
        .await;
    server
}

fn agents(spec: BackendSpec, max_retries: u32) -> Agents {
    Agents::new(
        "/tmp",
        [common::coder_profile(spec)],
        fast_settings(max_retries),
    )
    .unwrap()
}

async fn bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

async fn run(
    fmt: Fmt,
    server: &MockServer,
    tools: &TestTools,
    retries: u32,
) -> orca_core::Reply<TaskResult> {
    agents(fmt.spec(&server.uri()), retries)
        .run_task(task("coder", Budget::UNLIMITED), tools)
        .await
}

#[track_caller]
fn success(outcome: &TaskResult) -> &str {
    match outcome {
        TaskResult::Success(s) => &s.summary,
        other => panic!("expected success, got {other:?}"),
    }
}

#[track_caller]
fn failure(outcome: &TaskResult) -> &orca_core::TaskFailure {
    match outcome {
        TaskResult::Failure(f) => f,
        other => panic!("expected failure, got {other:?}"),
    }
}

#[tokio::test]
async fn text_only_turn_is_nudged_then_submitted() {
    for fmt in BOTH {
        let s = server(
            fmt,
            vec![
                fmt.turn(Some("I think it's done."), &[], "stop", true),
                fmt.submit("done"),
            ],
        )
        .await;
        let reply = run(fmt, &s, &TestTools::new(), 0).await;
        assert_eq!(success(&reply.outcome), "done", "{fmt:?}");
        assert_eq!(reply.usage.turns, 2);
        assert_eq!(
            reply.usage.output_tokens, 10,
            "usage summed across turns ({fmt:?})"
        );
        assert_eq!(reply.usage.cache_read_tokens, 8);
        let b = bodies(&s).await;
        assert!(
            b[1].to_string()
                .contains("You must finish by calling the `submit_result` tool"),
            "{fmt:?}"
        );
    }
}

#[tokio::test]
async fn tool_call_then_submit() {
    for fmt in BOTH {
        let s = server(
            fmt,
            vec![
                fmt.turn(None, &[("lookup", json!({"key": "k"}))], "tool_calls", true),
                fmt.submit("looked up"),
            ],
        )
        .await;
        let tools = TestTools::new();
        let reply = run(fmt, &s, &tools, 0).await;
        assert_eq!(success(&reply.outcome), "looked up");
        assert_eq!(tools.names(), ["lookup"]);
        let second = bodies(&s).await[1].to_string();
        assert!(
            second.contains(r#"{\"value\":\"k!\"}"#),
            "{fmt:?}: the tool result went back: {second}"
        );
    }
}

#[tokio::test]
async fn parallel_tool_calls_run_concurrently() {
    for fmt in BOTH {
        let s = server(
            fmt,
            vec![
                fmt.turn(
                    None,
                    &[
                        ("read_file", json!({"key": "a"})),
                        ("read_file", json!({"key": "b"})),
                    ],
                    "tool_calls",
                    true,
                ),
                fmt.submit("both"),
            ],
        )
        .await;
        let tools = TestTools::parallel(2);
        let reply = run(fmt, &s, &tools, 0).await;
        assert_eq!(success(&reply.outcome), "both");
        let second = bodies(&s).await[1].to_string();
        assert!(
            second.contains(r#"a!"#) && second.contains(r#"b!"#),
            "{second}"
        );
        assert!(!second.contains("did not run concurrently"), "{second}");
    }
}

#[tokio::test]
async fn tool_calls_with_finish_reason_stop_and_missing_usage() {
    for fmt in BOTH {
        let s = server(
            fmt,
            vec![
                fmt.turn(None, &[("lookup", json!({"key": "z"}))], "stop", false),
                fmt.turn(
                    None,
                    &[(
                        "submit_result",
                        json!({"status": "success", "summary": "ok"}),
                    )],
                    "stop",
                    false,
                ),
            ],
        )
        .await;
        let tools = TestTools::new();
        let reply = run(fmt, &s, &tools, 0).await;
        assert_eq!(success(&reply.outcome), "ok");
        assert_eq!(tools.names(), ["lookup"]);
        assert_eq!(reply.usage.total_tokens(), 0);
        assert_eq!(reply.usage.turns, 2);
    }
}

#[tokio::test]
async fn malformed_tool_arguments_go_back_to_the_model() {
    for fmt in BOTH {
        let s = server(
            fmt,
            vec![
                fmt.turn(
                    None,
                    &[("lookup", json!("{\"key\": oops"))],
                    "tool_calls",
                    true,
                ),
                fmt.submit("recovered"),
            ],
        )
        .await;
        let tools = TestTools::new();
        let reply = run(fmt, &s, &tools, 0).await;
        assert_eq!(success(&reply.outcome), "recovered");
        assert!(
            tools.names().is_empty(),
            "the host is not called with malformed arguments"
        );
        let second = bodies(&s).await[1].to_string();
        assert!(
            second.contains("are not a JSON object"),
            "{fmt:?}: {second}"
        );
    }
}

#[tokio::test]
async fn rate_limit_429_honours_retry_after() {
    for fmt in BOTH {
        let s = server(
            fmt,
            vec![
                ResponseTemplate::new(429)
                    .insert_header("retry-after", "1")
                    .set_body_json(
                        json!({"error": {"message": "slow down", "type": "rate_limit_error"}}),
                    ),
                fmt.submit("after wait"),
            ],
        )
        .await;
        let started = std::time::Instant::now();
        let reply = run(fmt, &s, &TestTools::new(), 3).await;
        assert_eq!(success(&reply.outcome), "after wait");
        assert_eq!(bodies(&s).await.len(), 2);
        // Informational, not asserted on timing: retry-after asked for 1 s.
        println!(
            "{fmt:?}: 429 with retry-after 1 took {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn quota_429_is_not_retried() {
    for fmt in BOTH {
        let s = server(
            fmt,
            vec![ResponseTemplate::new(429).set_body_json(
                json!({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}}),
            )],
        )
        .await;
        let reply = run(fmt, &s, &TestTools::new(), 3).await;
        let f = failure(&reply.outcome);
        assert_eq!(f.code, ErrorCode::AgentError);
        assert!(f.message.contains("quota"), "{}", f.message);
        assert_eq!(bodies(&s).await.len(), 1, "never retried");
    }
}

#[tokio::test]
async fn auth_401_is_not_retried() {
    for fmt in BOTH {
        let s = server(
            fmt,
            vec![
                ResponseTemplate::new(401)
                    .set_body_json(json!({"error": {"message": "invalid x-api-key"}})),
            ],
        )
        .await;
        let reply = run(fmt, &s, &TestTools::new(), 3).await;
        assert!(
            failure(&reply.outcome)
                .message
                .contains("authentication refused")
        );
        assert_eq!(bodies(&s).await.len(), 1);
    }
}

#[tokio::test]
async fn overloaded_529_is_retried() {
    for fmt in BOTH {
        let s = server(
            fmt,
            vec![
                ResponseTemplate::new(529).set_body_json(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
                fmt.submit("ok"),
            ],
        )
        .await;
        let reply = run(fmt, &s, &TestTools::new(), 2).await;
        assert_eq!(success(&reply.outcome), "ok");
        assert_eq!(bodies(&s).await.len(), 2);
    }
}

#[tokio::test]
async fn html_500_is_retried_then_reported() {
    for fmt in BOTH {
        let html = ResponseTemplate::new(502).set_body_raw(
            "<html><body><h1>502 Bad Gateway</h1></body></html>",
            "text/html",
        );
        let s = server(fmt, vec![html]).await;
        let reply = run(fmt, &s, &TestTools::new(), 2).await;
        let f = failure(&reply.outcome);
        assert!(
            f.message.contains("server error 502") && f.message.contains("HTML error page"),
            "{}",
            f.message
        );
        assert_eq!(bodies(&s).await.len(), 3, "first call + 2 retries");
    }
}

#[tokio::test]
async fn request_timeout_is_classified_and_not_resent() {
    for fmt in BOTH {
        let s = server(
            fmt,
            vec![fmt.submit("late").set_delay(Duration::from_secs(3))],
        )
        .await;
        let backend: Box<dyn ChatBackend> = match fmt {
            Fmt::OpenAi => Box::new(OpenAiBackend::with_timeout(
                &format!("{}/v1", s.uri()),
                "m",
                None,
                Duration::from_millis(200),
            )),
            Fmt::Anthropic => Box::new(AnthropicBackend::with_timeout(
                &s.uri(),
                "m",
                None,
                Duration::from_millis(200),
            )),
        };
        let err = backend.chat(&fixed_request()).await.unwrap_err();
        assert!(
            !err.is_retryable(),
            "a timed-out turn is not re-sent: {err}"
        );
        assert!(err.to_string().contains("timed out"), "{err}");
    }
}

#[tokio::test]
async fn unreachable_endpoint_gives_an_actionable_message() {
    // Port 9 (discard) on localhost: nothing listens there in the test environment.
    let agents = agents(
        BackendSpec::OpenAi {
            base_url: "http://127.0.0.1:9/v1".into(),
            model: "m".into(),
            api_key: None,
        },
        3,
    );
    let reply = agents
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await;
    let f = failure(&reply.outcome);
    assert!(
        f.message.starts_with("no model reachable at http://127.0.0.1:9/v1: start Ollama, or set ANTHROPIC_API_KEY / OPENAI_API_KEY, or configure an agent backend in .orca/config.toml"),
        "{}",
        f.message
    );
}

fn fixed_request() -> ChatRequest {
    ChatRequest {
        system: "You are the coder.".into(),
        messages: vec![
            Message::User {
                text: "Do the step.".into(),
            },
            Message::Assistant {
                text: Some("Looking.".into()),
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "lookup".into(),
                    arguments: json!({"key": "k"}),
                }],
            },
            Message::Tool {
                results: vec![ToolResult {
                    call_id: "call_1".into(),
                    name: "lookup".into(),
                    content: "{\"value\":\"k!\"}".into(),
                    is_error: false,
                }],
            },
        ],
        tools: vec![ToolSpec {
            name: "lookup".into(),
            description: "look a key up".into(),
            parameters: json!({"type": "object", "properties": {"key": {"type": "string"}}}),
        }],
        tool_choice: ToolChoice::Required,
        max_output_tokens: Some(1024),
        sampling: orca_agents::Sampling::default(),
        output_schema: None,
    }
}

#[tokio::test]
async fn exact_request_bodies_and_headers() {
    for fmt in BOTH {
        let s = server(fmt, vec![fmt.submit("x")]).await;
        let backend: Box<dyn ChatBackend> = match fmt {
            Fmt::OpenAi => Box::new(OpenAiBackend::new(
                &format!("{}/v1", s.uri()),
                "gpt-test",
                Some(ApiKey::new("sk-openai")),
            )),
            Fmt::Anthropic => Box::new(AnthropicBackend::new(
                &s.uri(),
                "claude-test",
                Some(ApiKey::new("sk-ant")),
            )),
        };
        backend.chat(&fixed_request()).await.unwrap();
        let received = s.received_requests().await.unwrap();
        let req = &received[0];
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        let header = |n: &str| req.headers.get(n).map(|v| v.to_str().unwrap().to_owned());
        match fmt {
            Fmt::OpenAi => {
                assert_eq!(header("authorization").as_deref(), Some("Bearer sk-openai"));
                insta::assert_json_snapshot!("openai_request_body", body);
            }
            Fmt::Anthropic => {
                assert_eq!(header("x-api-key").as_deref(), Some("sk-ant"));
                assert_eq!(header("anthropic-version").as_deref(), Some("2023-06-01"));
                insta::assert_json_snapshot!("anthropic_request_body", body);
            }
        }
    }
}

/// `finish_reason: length` is its own outcome: the run fails at once with what to change,
/// instead of "repairing" a cut answer until the conversation no longer fits.
#[tokio::test]
async fn a_truncated_answer_fails_at_once_naming_the_setting() {
    for fmt in BOTH {
        let finish = match fmt {
            Fmt::OpenAi => "length",
            Fmt::Anthropic => "max_tokens",
        };
        let s = server(
            fmt,
            vec![fmt.turn(Some("Here is my long ans"), &[], finish, true)],
        )
        .await;
        let reply = run(fmt, &s, &TestTools::new(), 0).await;
        let f = failure(&reply.outcome);
        assert!(
            f.message.contains("the answer was cut at") && f.message.contains("max_output_tokens"),
            "{fmt:?}: {}",
            f.message
        );
        assert_eq!(
            bodies(&s).await.len(),
            1,
            "{fmt:?}: no repair turn was sent"
        );
    }
}

/// Usage is priced by the model's family (cached tokens at their own price), and a cost budget
/// fires on it.
#[tokio::test]
async fn usage_is_priced_and_cost_budgets_fire() {
    for (fmt, model, expected) in [
        // 6 input · $2.50 + 4 cached · $1.25 + 5 output · $10 per million tokens.
        (Fmt::OpenAi, "gpt-4o-2024-08-06", 70),
        // 6 input · $3 + 4 cache reads · $0.30 + 5 output · $15 = 94.2 µUSD.
        (Fmt::Anthropic, "claude-sonnet-4-20250514", 94),
        // A local model is not priced.
        (Fmt::OpenAi, "qwen2.5-coder:1.5b", 0),
    ] {
        let s = server(fmt, vec![fmt.submit("done")]).await;
        let spec = match fmt {
            Fmt::OpenAi => BackendSpec::OpenAi {
                base_url: format!("{}/v1", s.uri()),
                model: model.into(),
                api_key: None,
            },
            Fmt::Anthropic => BackendSpec::Anthropic {
                base_url: s.uri(),
                model: model.into(),
                api_key: None,
            },
        };
        let tools = TestTools::new();
        let reply = agents(spec.clone(), 0)
            .run_task(task("coder", Budget::UNLIMITED), &tools)
            .await;
        assert_eq!(reply.usage.cost_micro_usd, expected, "{model}");
        if expected > 0 {
            let budget = Budget {
                max_cost_micro_usd: Some(expected - 1),
                ..Budget::UNLIMITED
            };
            let reply = agents(spec, 0)
                .run_task(task("coder", budget), &tools)
                .await;
            let f = failure(&reply.outcome);
            assert_eq!(f.code, ErrorCode::BudgetExceeded, "{model}: {}", f.message);
        }
    }
}

/// The output-token field and the generation settings per model family: reasoning models get
/// `max_completion_tokens` (they refuse `max_tokens`) and `reasoning_effort`.
#[test]
fn openai_request_bodies_per_model_family() {
    let mut request = fixed_request();
    request.sampling = orca_agents::Sampling {
        temperature: Some(0.2),
        top_p: None,
        seed: Some(7),
        reasoning_effort: Some(orca_agents::ReasoningEffort::Low),
    };
    let fields = |backend: OpenAiBackend| {
        let body = backend.request_body(&request);
        let keys: Vec<&str> = [
            "max_tokens",
            "max_completion_tokens",
            "temperature",
            "seed",
            "reasoning_effort",
        ]
        .into_iter()
        .filter(|k| body.get(*k).is_some())
        .collect();
        keys.join(", ")
    };
    let table: Vec<String> = [
        "gpt-4o",
        "gpt-4.1-mini",
        "o1",
        "o3-mini",
        "o4-mini-2025-04-16",
        "gpt-5",
        "openai/gpt-5-mini",
        "llama3.1:8b",
        "o3x",
    ]
    .iter()
    .map(|m| {
        format!(
            "{m}: {}",
            fields(OpenAiBackend::new("http://127.0.0.1:9/v1", m, None))
        )
    })
    .chain(std::iter::once(format!(
        "gpt-4o with token_param = max_completion_tokens: {}",
        fields(
            OpenAiBackend::new("http://127.0.0.1:9/v1", "gpt-4o", None)
                .with_token_param(orca_llm::TokenParam::MaxCompletionTokens)
        )
    )))
    .collect();
    insta::assert_snapshot!("openai_fields_per_model_family", table.join("\n"));
}
