//! Streamed answers of the three HTTP wire formats, from a raw fake server that cuts the bytes
//! at awkward places (inside UTF-8 characters, inside `\r\n`): the assembled turn must equal
//! the non-streamed answer; a stalled stream hits the idle timeout and is not re-sent; an error
//! event is one readable error; a 429 before the stream still honours `retry-after`.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orca_agents::{
    Agents, ApiKey, BackendError, BackendSpec, ChatBackend, ChatRequest, ChatResponse,
    GenerationSettings, Message, ModelProgress, ProgressSink, StopReason, ToolChoice,
};

use orca_core::{AgentPort, Budget, ErrorCode, TaskResult, ToolSpec};
use orca_llm::{AnthropicBackend, OpenAiBackend, PriceTable, ResponsesBackend, Streaming};
use serde_json::{Value, json};

use crate::common::{TestTools, coder_profile, fast_settings, task};
use crate::fake_stream::{FakeStream, Reply, sse};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fmt {
    Chat,
    Messages,
    Responses,
}

const ALL: [Fmt; 3] = [Fmt::Chat, Fmt::Messages, Fmt::Responses];
const TEXT_A: &str = "Hé";
const TEXT_B: &str = "llo ✓ — \u{1F600}";
const ARGS: &str = r#"{"path":"src/é.rs","n":2}"#;

fn streaming(idle: Duration) -> Streaming {
    Streaming {
        enabled: true,
        idle_timeout: idle,
    }
}

const KEY: &str = "sk-test-stream-key-0123";
const T: Duration = Duration::from_secs(30);

fn backend(fmt: Fmt, url: &str, s: Streaming) -> Box<dyn ChatBackend> {
    let (key, v1) = (Some(ApiKey::new(KEY)), format!("{url}/v1"));
    match fmt {
        Fmt::Chat => Box::new(OpenAiBackend::with_timeout(&v1, "gpt-4o", key, T).with_streaming(s)),
        Fmt::Messages => {
            Box::new(AnthropicBackend::with_timeout(url, "claude-opus-4", key, T).with_streaming(s))
        }
        Fmt::Responses => Box::new(ResponsesBackend::new(&v1, "gpt-5", key, T).with_streaming(s)),
    }
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

/// The non-streamed body of a turn: text, one `read_file` call (unless `cut`), usage; `cut`:
/// the answer was cut at the token cap.
fn whole(fmt: Fmt, cut: bool) -> Value {
    let text = format!("{TEXT_A}{TEXT_B}");
    match fmt {
        Fmt::Chat => {
            let mut message = json!({"role": "assistant", "content": text, "refusal": null});
            if !cut {
                message["tool_calls"] = json!([{"id": "call_a", "type": "function",
                    "function": {"name": "read_file", "arguments": ARGS}}]);
            }
            json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
                "choices": [{"index": 0, "message": message, "logprobs": null,
                    "finish_reason": if cut { "length" } else { "tool_calls" }}],
                "usage": {"prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240,
                    "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
                    "completion_tokens_details": {"reasoning_tokens": 0}}})
        }
        Fmt::Messages => {
            let mut content = vec![json!({"type": "text", "text": text})];
            if !cut {
                content.push(
                    json!({"type": "tool_use", "id": "toolu_a", "name": "read_file",
                    "input": serde_json::from_str::<Value>(ARGS).unwrap()}),
                );
            }
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-opus-4",
                "content": content, "stop_reason": if cut { "max_tokens" } else { "tool_use" },
                "stop_sequence": null,
                "usage": {"input_tokens": 50, "cache_creation_input_tokens": 1000,
                    "cache_read_input_tokens": 2000, "output_tokens": 40}})
        }
        Fmt::Responses => {
            let mut output = vec![
                json!({"type": "reasoning", "id": "rs_1", "summary": []}),
                json!({"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}),
            ];
            if !cut {
                output.push(
                    json!({"type": "function_call", "id": "fc_1", "call_id": "call_a",
                    "name": "read_file", "arguments": ARGS, "status": "completed"}),
                );
            }
            let mut r = json!({"id": "resp_1", "object": "response", "model": "gpt-5",
                "status": if cut { "incomplete" } else { "completed" },
                "output": output,
                "usage": {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1024},
                    "output_tokens": 40, "output_tokens_details": {"reasoning_tokens": 16},
                    "total_tokens": 1240}});
            if cut {
                r["incomplete_details"] = json!({"reason": "max_output_tokens"});
            }
            r
        }
    }
}

/// The same turn as the provider streams it (recorded shapes).
fn events(fmt: Fmt, cut: bool) -> String {
    let (a1, a2) = ARGS.split_at(12);
    match fmt {
        Fmt::Chat => {
            let chunk = |delta: Value, finish: Value| {
                (
                    "",
                    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                    "model": "gpt-4o", "system_fingerprint": "fp_1",
                    "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
                    "usage": null}),
                )
            };
            let mut ev = vec![
                chunk(
                    json!({"role": "assistant", "content": "", "refusal": null}),
                    Value::Null,
                ),
                chunk(json!({"content": TEXT_A}), Value::Null),
                chunk(json!({"content": TEXT_B}), Value::Null),
            ];
            if !cut {
                ev.push(chunk(
                    json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                    "function": {"name": "read_file", "arguments": ""}}]}),
                    Value::Null,
                ));
                ev.push(chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": a1}}]}),
                    Value::Null,
                ));
                ev.push(chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": a2}}]}),
                    Value::Null,
                ));
            }
            ev.push(chunk(
                json!({}),
                json!(if cut { "length" } else { "tool_calls" }),
            ));
            ev.push((
                "",
                json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                "model": "gpt-4o", "choices": [],
                "usage": whole(fmt, cut)["usage"].clone()}),
            ));
            let mut s = sse(&ev);
            s.push_str("data: [DONE]\r\n\r\n");
            s
        }
        Fmt::Messages => {
            let mut ev = vec![
                (
                    "message_start",
                    json!({"type": "message_start", "message": {"id": "msg_1",
                    "type": "message", "role": "assistant", "model": "claude-opus-4", "content": [],
                    "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": 50, "cache_creation_input_tokens": 1000,
                        "cache_read_input_tokens": 2000, "output_tokens": 1}}}),
                ),
                (
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
                ),
                ("ping", json!({"type": "ping"})),
                (
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": TEXT_A}}),
                ),
                (
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": TEXT_B}}),
                ),
                (
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 0}),
                ),
            ];
            if !cut {
                ev.extend([
                    ("content_block_start", json!({"type": "content_block_start", "index": 1,
                        "content_block": {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {}}})),
                    ("content_block_delta", json!({"type": "content_block_delta", "index": 1,
                        "delta": {"type": "input_json_delta", "partial_json": ""}})),
                    ("content_block_delta", json!({"type": "content_block_delta", "index": 1,
                        "delta": {"type": "input_json_delta", "partial_json": a1}})),
                    ("content_block_delta", json!({"type": "content_block_delta", "index": 1,
                        "delta": {"type": "input_json_delta", "partial_json": a2}})),
                    ("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
                ]);
            }
            ev.push(("message_delta", json!({"type": "message_delta",
                "delta": {"stop_reason": if cut { "max_tokens" } else { "tool_use" }, "stop_sequence": null},
                "usage": {"output_tokens": 40}})));
            ev.push(("message_stop", json!({"type": "message_stop"})));
            sse(&ev)
        }
        Fmt::Responses => {
            let full = whole(fmt, cut);
            let out = full["output"].as_array().unwrap().clone();
            let mut created = full.clone();
            created["status"] = json!("in_progress");
            created["output"] = json!([]);
            created["usage"] = Value::Null;
            let mut seq = 0;
            let mut ev = Vec::new();
            let mut push = |name: &'static str, mut data: Value| {
                data["type"] = json!(name);
                data["sequence_number"] = json!(seq);
                seq += 1;
                ev.push((name, data));
            };
            push("response.created", json!({"response": created}));
            push(
                "response.output_item.added",
                json!({"output_index": 0, "item": out[0]}),
            );
            push(
                "response.output_item.done",
                json!({"output_index": 0, "item": out[0]}),
            );
            push(
                "response.output_item.added",
                json!({"output_index": 1, "item":
                {"type": "message", "id": "msg_1", "status": "in_progress", "role": "assistant", "content": []}}),
            );
            push(
                "response.content_part.added",
                json!({"output_index": 1, "item_id": "msg_1",
                "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
            );
            push(
                "response.output_text.delta",
                json!({"output_index": 1, "item_id": "msg_1",
                "content_index": 0, "delta": TEXT_A}),
            );
            push(
                "response.output_text.delta",
                json!({"output_index": 1, "item_id": "msg_1",
                "content_index": 0, "delta": TEXT_B}),
            );
            push(
                "response.output_item.done",
                json!({"output_index": 1, "item": out[1]}),
            );
            if !cut {
                push(
                    "response.output_item.added",
                    json!({"output_index": 2, "item":
                    {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "read_file",
                     "arguments": "", "status": "in_progress"}}),
                );
                push(
                    "response.function_call_arguments.delta",
                    json!({"output_index": 2, "item_id": "fc_1", "delta": a1}),
                );
                push(
                    "response.function_call_arguments.delta",
                    json!({"output_index": 2, "item_id": "fc_1", "delta": a2}),
                );
                push(
                    "response.function_call_arguments.done",
                    json!({"output_index": 2, "item_id": "fc_1", "arguments": ARGS}),
                );
                push(
                    "response.output_item.done",
                    json!({"output_index": 2, "item": out[2]}),
                );
            }
            push(
                if cut {
                    "response.incomplete"
                } else {
                    "response.completed"
                },
                json!({"response": full}),
            );
            sse(&ev)
        }
    }
}

async fn streamed(fmt: Fmt, body: String) -> (ChatResponse, usize) {
    let server = FakeStream::start(vec![Reply::stream(body)]).await;
    let r = backend(fmt, &server.url, streaming(Duration::from_secs(10)))
        .chat(&request())
        .await
        .unwrap();
    (r, server.count())
}

async fn not_streamed(fmt: Fmt, body: &Value) -> (ChatResponse, Value) {
    let server = FakeStream::start(vec![Reply::json(200, body)]).await;
    let r = backend(fmt, &server.url, Streaming::OFF)
        .chat(&request())
        .await
        .unwrap();
    (r, server.bodies()[0].clone())
}

#[tokio::test]
async fn streamed_turns_equal_the_non_streamed_answer_in_every_format() {
    let mut compared = 0;
    for fmt in ALL {
        for cut in [false, true] {
            let (plain, sent) = not_streamed(fmt, &whole(fmt, cut)).await;
            assert_ne!(sent.get("stream"), Some(&json!(true)), "{fmt:?}");
            let (streamed, requests) = streamed(fmt, events(fmt, cut)).await;
            assert_eq!(requests, 1);
            assert_eq!(streamed, plain, "{fmt:?} cut={cut}");
            assert_eq!(
                streamed.text.as_deref(),
                Some(format!("{TEXT_A}{TEXT_B}").as_str())
            );
            assert!(streamed.usage.cost_micro_usd > 0, "{fmt:?}: priced");
            if cut {
                assert_eq!(streamed.stop_reason, StopReason::MaxTokens, "{fmt:?}");
            } else {
                assert_eq!(streamed.tool_calls.len(), 1);
                assert_eq!(
                    streamed.tool_calls[0].arguments,
                    json!({"path": "src/é.rs", "n": 2})
                );
            }
            compared += 1;
        }
    }
    println!("streamed == non-streamed: {compared} of 6 turns");
    assert_eq!(compared, 6);
}

#[tokio::test]
async fn every_byte_split_of_a_stream_assembles_the_same_turn() {
    // One piece size at a time, 1 to 9 bytes: every boundary of a 1-byte split is hit.
    for fmt in ALL {
        let (plain, _) = not_streamed(fmt, &whole(fmt, false)).await;
        for size in [1, 2, 3, 4, 9] {
            let server = FakeStream::start(vec![Reply::Stream {
                body: events(fmt, false),
                pieces: vec![size],
                stall_after: None,
            }])
            .await;
            let r = backend(fmt, &server.url, streaming(Duration::from_secs(10)))
                .chat(&request())
                .await
                .unwrap();
            assert_eq!(r, plain, "{fmt:?} pieces of {size}");
        }
    }
}

#[tokio::test]
async fn a_server_that_ignores_stream_gets_its_json_read() {
    for fmt in ALL {
        let body = whole(fmt, false);
        let (plain, _) = not_streamed(fmt, &body).await;
        let server = FakeStream::start(vec![Reply::json(200, &body)]).await;
        let r = backend(fmt, &server.url, streaming(Duration::from_secs(10)))
            .chat(&request())
            .await
            .unwrap();
        assert_eq!(r, plain, "{fmt:?}");
        assert_eq!(server.bodies()[0]["stream"], json!(true), "{fmt:?}");
    }
}

pub(crate) fn agents(fmt: Fmt, url: &str, settings: GenerationSettings) -> Agents {
    let key = Some(ApiKey::new("sk-test-stream-key-0123"));
    let spec = match fmt {
        Fmt::Chat | Fmt::Responses => BackendSpec::OpenAi {
            base_url: format!("{url}/v1"),
            model: "gpt-4o".into(),
            api_key: key,
        },
        Fmt::Messages => BackendSpec::Anthropic {
            base_url: url.to_owned(),
            model: "claude-opus-4".into(),
            api_key: key,
        },
    };
    let profile = coder_profile(spec);
    let mut generation = settings.resolve();
    if fmt == Fmt::Responses {
        generation.api = orca_agents::WireApi::Responses;
    }
    let mut agents = Agents::new("/tmp", [], fast_settings(4)).unwrap();
    agents
        .insert_with(profile, generation, &PriceTable::shipped())
        .unwrap();
    agents
}

/// A step allowed one model turn.
async fn one_turn(agents: &Agents) -> orca_core::Reply<TaskResult> {
    let budget = Budget {
        max_turns: Some(1),
        ..Budget::UNLIMITED
    };
    agents
        .run_task(task("coder", budget), &TestTools::new())
        .await
}

pub(crate) fn failure_of(result: TaskResult) -> orca_core::TaskFailure {
    match result {
        TaskResult::Failure(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stalled_stream_hits_the_idle_timeout_once_and_is_not_re_sent() {
    let mut not_resent = 0;
    for fmt in ALL {
        let body = events(fmt, false);
        let server = FakeStream::start(vec![Reply::Stream {
            stall_after: Some(body.len() / 2),
            body,
            pieces: vec![7],
        }])
        .await;
        let agents = agents(
            fmt,
            &server.url,
            GenerationSettings {
                idle_timeout_secs: Some(1),
                ..GenerationSettings::default()
            },
        );
        let started = Instant::now();
        let reply = agents
            .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
            .await;
        let f = failure_of(reply.outcome);
        assert_eq!(f.code, ErrorCode::Timeout, "{fmt:?}: {f}");
        assert!(
            f.message
                .contains("sent nothing for 1 s (idle_timeout_secs)"),
            "{fmt:?}: {}",
            f.message
        );
        assert!(!f.message.contains('\n'), "one line: {}", f.message);
        // Generous: the idle timeout is 1 s; a loaded CI box may add a lot.
        let took = started.elapsed();
        assert!(took < Duration::from_secs(20), "{fmt:?}");
        println!(
            "{fmt:?}: stalled stream → {} request(s), failed after {took:.2?} (idle timeout 1 s)",
            server.count()
        );
        assert_eq!(server.count(), 1, "{fmt:?}: the stalled turn was re-sent");
        not_resent += 1;
    }
    assert_eq!(not_resent, 3);
}

#[tokio::test]
async fn an_error_event_mid_stream_is_one_readable_error() {
    let cases = [
        (
            Fmt::Chat,
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hé\"}}]}\r\n\r\ndata: {\"error\":{\"message\":\"the engine crashed: sk-test-stream-key-0123\",\"type\":\"server_error\"}}\r\n\r\n",
        ),
        (
            Fmt::Messages,
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[],\"usage\":{\"input_tokens\":5}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the engine crashed: sk-test-stream-key-0123\"}}\n\n",
        ),
        (
            Fmt::Responses,
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"status\":\"in_progress\",\"output\":[]}}\n\nevent: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"the engine crashed: sk-test-stream-key-0123\"}}}\n\n",
        ),
    ];
    for (fmt, body) in cases {
        let server = FakeStream::start(vec![Reply::stream(body)]).await;
        let err = backend(fmt, &server.url, streaming(Duration::from_secs(10)))
            .chat(&request())
            .await
            .unwrap_err();
        let line = err.to_string();
        println!("{fmt:?}: {line}");
        assert!(
            matches!(err, BackendError::StreamFailed { .. }),
            "{fmt:?}: {err:?}"
        );
        assert!(
            line.contains("failed mid-answer: the engine crashed"),
            "{line}"
        );
        assert!(
            !line.contains("sk-test-stream-key-0123"),
            "the key is redacted: {line}"
        );
        assert!(!line.contains('\n'));
        // Through the loop: one failure, one request.
        let agents = agents(fmt, &server.url, GenerationSettings::default());
        let f = failure_of(
            agents
                .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
                .await
                .outcome,
        );
        assert!(f.message.contains("the engine crashed"), "{f}");
        assert_eq!(server.count(), 2, "{fmt:?}: one request each, not re-sent");
    }
}

#[tokio::test]
async fn a_429_before_the_stream_honours_retry_after() {
    for fmt in ALL {
        let server = FakeStream::start(vec![
            Reply::Whole {
                status: 429,
                content_type: "application/json",
                headers: vec![("retry-after", "1".to_owned())],
                body: json!({"error": {"message": "slow down", "type": "rate_limit_error"}})
                    .to_string(),
            },
            Reply::stream(events(fmt, false)),
        ])
        .await;
        let agents = agents(fmt, &server.url, GenerationSettings::default());
        let started = Instant::now();
        // The scripted turn calls read_file; the loop then asks again (the same stream) and
        // gets no submit, so the outcome is a failure — what counts here is the wait.
        let _ = one_turn(&agents).await;
        let waited = started.elapsed();
        println!(
            "{fmt:?}: 429 then stream → {} requests, {waited:?}",
            server.count()
        );
        assert_eq!(server.count(), 2, "{fmt:?}");
        assert!(waited >= Duration::from_millis(900), "{fmt:?}: {waited:?}");
        assert!(server.bodies()[1]["stream"] == json!(true));
    }
}

#[derive(Debug, Default)]
struct Sink(Mutex<Vec<ModelProgress>>);

impl ProgressSink for Sink {
    fn report(&self, p: &ModelProgress) {
        self.0.lock().unwrap().push(p.clone());
    }
}

#[tokio::test]
async fn progress_is_reported_while_streaming_and_usage_when_the_step_ends() {
    let server = FakeStream::start(vec![Reply::Stream {
        body: events(Fmt::Chat, false),
        pieces: vec![1],
        stall_after: None,
    }])
    .await;
    let sink = Arc::new(Sink::default());
    let agents =
        agents(Fmt::Chat, &server.url, GenerationSettings::default()).with_progress(sink.clone());
    let _ = one_turn(&agents).await;
    let seen = sink.0.lock().unwrap().clone();
    let streaming: Vec<_> = seen
        .iter()
        .filter_map(|p| match p {
            ModelProgress::Streaming {
                label,
                output_tokens,
                turn,
                ..
            } => Some((label.clone(), *output_tokens, *turn)),
            _ => None,
        })
        .collect();
    println!("progress reports: {}", seen.len());
    assert!(!streaming.is_empty(), "{seen:?}");
    assert!(streaming.iter().all(|(l, _, t)| l == "work" && *t == 1));
    // The last report of the turn carries the server's count.
    assert_eq!(streaming.last().unwrap().1, 40);
    let finished: Vec<_> = seen
        .iter()
        .filter_map(|p| match p {
            ModelProgress::Finished { usage, .. } => Some(*usage),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 1, "{seen:?}");
    assert_eq!(finished[0].output_tokens, 40);
    assert!(finished[0].cost_micro_usd > 0);
}

#[test]
fn streamed_request_bodies_per_format() {
    let s = streaming(Duration::from_secs(60));
    let bodies = json!({
        "chat": OpenAiBackend::new("http://x/v1", "gpt-4o", None).with_streaming(s).request_body(&request()),
        "messages": AnthropicBackend::new("http://x", "claude-opus-4", None).with_streaming(s).request_body(&request()),
        "responses": ResponsesBackend::new("http://x/v1", "gpt-5", None, Duration::from_secs(1)).with_streaming(s).request_body(&request()),
        "chat_off": OpenAiBackend::new("http://x/v1", "gpt-4o", None).request_body(&request())["stream"],
        "messages_off": AnthropicBackend::new("http://x", "claude-opus-4", None).request_body(&request()).get("stream"),
        "responses_off": ResponsesBackend::new("http://x/v1", "gpt-5", None, Duration::from_secs(1)).request_body(&request()).get("stream"),
    });
    insta::assert_json_snapshot!(bodies);
}

/// `stream` in the config: on by default (the request asks for a stream), off with
/// `stream = false` (one JSON answer, no `stream_options`).
#[tokio::test]
async fn the_stream_setting_reaches_the_request() {
    let mut seen = Vec::new();
    for setting in ["", "stream = false\n"] {
        let server = FakeStream::start(vec![Reply::json(200, &whole(Fmt::Chat, false))]).await;
        let toml = format!(
            "[agents.coder]\nbackend = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\n\n[agents.coder.generation]\ncontext_window = 32768\n{setting}",
            server.url
        );
        let config =
            orca_agents::config::Config::parse(&toml, std::path::Path::new(".orca/config.toml"))
                .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let a =
            Agents::from_config(dir.path(), &config, &|_: &str| None, fast_settings(0)).unwrap();
        let _ = one_turn(&a).await;
        let body = server.bodies()[0].clone();
        seen.push((body["stream"].clone(), body.get("stream_options").cloned()));
    }
    assert_eq!(
        seen,
        vec![
            (json!(true), Some(json!({"include_usage": true}))),
            (json!(false), None)
        ]
    );
}

/// A long answer (20,000 deltas, ~1 MB of events) assembles in time linear in its size.
#[tokio::test]
async fn a_long_stream_assembles_quickly() {
    let delta = |t: &str| {
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"content": t}}]})
        )
    };
    let mut body: String = (0..20_000).map(|i| delta(&format!("wörd{i} "))).collect();
    body.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    let bytes = body.len();
    // 4 KiB pieces: the time is the client's, not the fake server's writing.
    let server = FakeStream::start(vec![Reply::Stream {
        body,
        pieces: vec![4093],
        stall_after: None,
    }])
    .await;
    let started = Instant::now();
    let r = backend(Fmt::Chat, &server.url, streaming(Duration::from_secs(10)))
        .chat(&request())
        .await
        .unwrap();
    let took = started.elapsed();
    println!("{bytes} bytes of events (20000 deltas) assembled in {took:.2?}");
    assert_eq!(r.text.unwrap().matches("wörd").count(), 20_000);
    assert!(took < Duration::from_secs(60), "{took:?}");
}
