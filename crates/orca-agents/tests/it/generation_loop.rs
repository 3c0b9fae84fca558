//! A model caught in a generation loop (the same text over and over): the turn is stopped as
//! soon as the loop is plain, not at the output cap, and the failure says it was a loop and
//! what to do next, not "raise `max_output_tokens`". The fake server streams a looping answer
//! and then goes silent: an orca that did not stop would wait for the idle timeout instead.

use orca_agents::GenerationSettings;
use orca_core::{AgentPort, Budget, ErrorCode, TaskResult};
use serde_json::{Value, json};

use crate::common::{TestTools, task};
use crate::fake_stream::{FakeStream, Reply, sse};
use crate::streaming::{Fmt, agents, failure_of};

/// One Chat Completions chunk carrying `delta` (and a finish reason, if the turn ends there).
fn chunk(delta: Value, finish: Value) -> (&'static str, Value) {
    (
        "",
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
    )
}

/// One coder step against the fake server at `url`.
async fn one_step(url: &str, settings: GenerationSettings) -> orca_core::Reply<TaskResult> {
    agents(Fmt::Chat, url, settings)
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await
}

/// A Chat Completions stream: `blocks` copies of `block` as text deltas, then silence.
fn looping_stream(block: &str, blocks: usize) -> String {
    let chunk = |delta: Value| chunk(delta, Value::Null);
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}))];
    events.extend((0..blocks).map(|_| chunk(json!({ "content": block }))));
    sse(&events)
}

#[tokio::test]
async fn a_looping_answer_is_stopped_early_and_named_a_loop() {
    let block = "def main():\n    print(f\"Hello, {args.name}!\")\n\n";
    let blocks = 2_000;
    let body = looping_stream(block, blocks);
    let server = FakeStream::start(vec![Reply::Stream {
        stall_after: Some(body.len()),
        pieces: vec![512],
        body,
    }])
    .await;
    let reply = one_step(
        &server.url,
        GenerationSettings {
            idle_timeout_secs: Some(120),
            max_output_tokens: Some(100_000),
            ..GenerationSettings::default()
        },
    )
    .await;
    let tokens = reply.usage.output_tokens;
    let input = reply.usage.input_tokens;
    let f = failure_of(reply.outcome);
    assert_eq!(f.code, ErrorCode::AgentError, "{f}");
    assert!(f.message.contains("generation loop"), "{}", f.message);
    assert!(f.message.contains("edit_file"), "{}", f.message);
    assert!(
        !f.message.contains("raise `max_output_tokens`"),
        "{}",
        f.message
    );
    // Stopped within a few looks of the loop becoming plain, not after 2,000 copies.
    let streamed = blocks * block.len() / 4;
    assert!(
        tokens > 0 && tokens * 20 < streamed as u64,
        "{tokens} of {streamed}"
    );
    assert_eq!(server.count(), 1, "the looping turn was not sent again");
    // The server's usage never came: the prompt is estimated from the request sent (it was
    // counted as 0 input tokens, and a looping turn looked free in `orca eval`).
    let sent = server.bodies()[0].to_string().len() as u64;
    assert!(
        input > sent / 8 && input <= sent / 4,
        "{input} input tokens estimated for a request of {sent} bytes"
    );
    println!(
        "looping answer: stopped after ~{tokens} output tokens of ~{streamed} the server would \
         send; ~{input} input tokens estimated for a request of {sent} bytes"
    );
}

#[tokio::test]
async fn a_long_answer_cut_at_its_cap_still_says_raise_the_cap() {
    // Control: varied text up to the cap is a long answer, not a loop.
    let text: String = (0..300)
        .map(|i| format!("line {i}: value {} ", i * 37 % 101))
        .collect();
    let events = vec![
        chunk(json!({"role": "assistant", "content": text}), Value::Null),
        chunk(json!({}), json!("length")),
    ];
    let server = FakeStream::start(vec![Reply::stream(sse(&events))]).await;
    let reply = one_step(
        &server.url,
        GenerationSettings {
            max_output_tokens: Some(2048),
            ..GenerationSettings::default()
        },
    )
    .await;
    let f = failure_of(reply.outcome);
    assert!(
        f.message.contains("raise `max_output_tokens`"),
        "{}",
        f.message
    );
    assert!(!f.message.contains("loop"), "{}", f.message);
}

#[tokio::test]
async fn an_answer_trailing_off_into_newlines_is_read_as_ended_and_the_model_asked_again() {
    // As the 1.5B model answered natively: a result written as text, then newlines to its cap.
    let prose = "```json\n{\"status\": \"success\", \"summary\": \"fixed\"}\n```\n";
    let chunk = |delta: Value| chunk(delta, Value::Null);
    let mut events = vec![chunk(json!({"role": "assistant", "content": prose}))];
    events.extend((0..3_000).map(|_| chunk(json!({ "content": "\n" }))));
    let body = sse(&events);
    let submit = json!({
        "id": "c2", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "submit_result",
                "arguments": json!({"status": "success", "summary": "fixed"}).to_string()}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    });
    let server = FakeStream::start(vec![
        Reply::Stream {
            stall_after: Some(body.len()),
            pieces: vec![512],
            body,
        },
        Reply::json(200, &submit),
    ])
    .await;
    let reply = one_step(
        &server.url,
        GenerationSettings {
            idle_timeout_secs: Some(120),
            ..GenerationSettings::default()
        },
    )
    .await;
    assert!(
        matches!(reply.outcome, orca_core::TaskResult::Success(_)),
        "{:?}",
        reply.outcome
    );
    assert_eq!(server.count(), 2, "asked again after the newlines");
    // The second request carries the first answer without its newlines, and the repair.
    let second = server.bodies()[1].to_string();
    assert!(!second.contains("\\n\\n\\n\\n"), "{second}");
    assert!(second.contains("submit_result"), "{second}");
}
