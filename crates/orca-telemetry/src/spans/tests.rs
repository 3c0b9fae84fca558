//! Spans derived from hand-made logs: names, parents, ids, windows.

use std::collections::BTreeSet;

use serde_json::json;

use super::*;

fn event(
    exec: ExecutionId,
    seq: u64,
    kind: &str,
    step: Option<(&str, u32)>,
    data: Value,
) -> ExecEvent {
    ExecEvent {
        format_version: 1,
        seq,
        at: OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(i64_of(seq)),
        execution_id: exec,
        plan_id: PlanId::from_uuid(exec.uuid()),
        kind: kind.to_owned(),
        parent: None,
        step_id: step.map(|s| s.0.to_owned()),
        attempt: step.map(|s| s.1),
        data,
    }
}

fn log(exec: ExecutionId, from: ExecutionId) -> Vec<ExecEvent> {
    let a = Some(("build", 1));
    vec![
        event(exec, 0, "execution.created", None, json!({})),
        event(
            exec,
            1,
            "execution.forked",
            None,
            json!({"from_execution": from.to_string()}),
        ),
        event(
            exec,
            2,
            "task.attempt.started",
            a,
            json!({"agent": "coder"}),
        ),
        event(
            exec,
            3,
            "agent.answer",
            a,
            json!({"agent": "coder", "text": "SAID-THIS",
            "usage": {"input_tokens": 7, "output_tokens": 3}}),
        ),
        event(
            exec,
            4,
            "tool.call",
            a,
            json!({"tool": "read_file", "ok": true,
            "arguments": {"path": "ARG-THIS"}}),
        ),
        event(
            exec,
            5,
            "task.attempt.failed",
            a,
            json!({"failure": {"code": "check_failed"}}),
        ),
        event(exec, 6, "decision.requested", Some(("build", 1)), json!({})),
        event(exec, 7, "decision.answered", None, json!({"by": "alice"})),
        event(exec, 8, "execution.completed", None, json!({})),
    ]
}

fn derive_all(events: &[ExecEvent], after: Option<u64>, capture: bool) -> Vec<SpanData> {
    let models = BTreeMap::from([(
        "coder".to_owned(),
        ModelInfo {
            provider: "openai".to_owned(),
            model: "m1".to_owned(),
        },
    )]);
    derive(&SpanInput {
        events,
        after,
        goal: "the goal",
        models: &models,
        capture_content: capture,
    })
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[test]
fn a_log_becomes_one_trace_of_genai_spans() {
    let (exec, from) = (ExecutionId::new(), ExecutionId::new());
    let spans = derive_all(&log(exec, from), None, false);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "chat m1",
            "execute_tool read_file",
            "invoke_agent coder",
            "human_decision",
            "invoke_workflow"
        ]
    );
    assert!(
        spans
            .iter()
            .all(|s| s.span_context.trace_id() == ids::trace_id(exec))
    );
    let root = spans.last().unwrap();
    assert_eq!(root.parent_span_id, SpanId::INVALID);
    assert_eq!(
        root.links.links[0].span_context.trace_id(),
        ids::trace_id(from)
    );
    assert_eq!(
        attr(root, "gen_ai.workflow.name").as_deref(),
        Some("the goal")
    );
    let attempt = &spans[2];
    assert_eq!(attempt.parent_span_id, ids::root_span(exec));
    assert_eq!(
        attempt.span_context.span_id(),
        ids::attempt_span(exec, "build", 1)
    );
    assert_eq!(attr(attempt, "error.type").as_deref(), Some("check_failed"));
    for child in &spans[..2] {
        assert_eq!(
            child.parent_span_id,
            attempt.span_context.span_id(),
            "{}",
            child.name
        );
    }
    assert_eq!(
        attr(&spans[0], "gen_ai.usage.input_tokens").as_deref(),
        Some("7")
    );
    assert_eq!(
        attr(&spans[0], "gen_ai.provider.name").as_deref(),
        Some("openai")
    );
    assert_eq!(
        attr(&spans[3], "orca.decision.actor").as_deref(),
        Some("alice")
    );
    let text = format!("{spans:?}");
    assert!(!text.contains("SAID-THIS") && !text.contains("ARG-THIS"));
    let captured = format!("{:?}", derive_all(&log(exec, from), None, true));
    assert!(captured.contains("SAID-THIS") && captured.contains("ARG-THIS"));
}

#[test]
fn windows_of_the_log_make_each_span_once() {
    let exec = ExecutionId::new();
    let events = log(exec, ExecutionId::new());
    let whole: BTreeSet<[u8; 8]> = derive_all(&events, None, false)
        .iter()
        .map(|s| s.span_context.span_id().to_bytes())
        .collect();
    // A process that saw entries 0..=4, then one that started after entry 4.
    let first = derive_all(&events[..5], None, false);
    let second = derive_all(&events, Some(4), false);
    let mut ids: Vec<[u8; 8]> = first
        .iter()
        .chain(&second)
        .map(|s| s.span_context.span_id().to_bytes())
        .collect();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "no span twice");
    assert_eq!(ids.into_iter().collect::<BTreeSet<_>>(), whole);
}

#[test]
fn every_model_turn_is_a_chat_span_and_waits_precede_their_attempt() {
    let exec = ExecutionId::new();
    let a = Some(("build", 1));
    let at = |seq: i64| {
        (OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(seq))
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    let events = vec![
        event(exec, 0, "execution.created", None, json!({})),
        // Ready at 0, found its lock held at 0, started at 1.
        event(
            exec,
            1,
            "task.attempt.started",
            a,
            json!({"agent": "coder", "ready_at": at(0),
                   "lock_wait": {"since": at(0), "locks": ["db"]}}),
        ),
        event(
            exec,
            2,
            "agent.turn",
            a,
            json!({"agent": "coder", "turn": 1, "finish_reason": "tool_calls",
                   "usage": {"input_tokens": 11, "output_tokens": 2}}),
        ),
        event(
            exec,
            3,
            "tool.call",
            a,
            json!({"tool": "write_file", "ok": true}),
        ),
        event(
            exec,
            4,
            "agent.answer",
            a,
            json!({"agent": "coder", "turn": 2, "text": "done",
                   "usage": {"input_tokens": 13, "output_tokens": 4}}),
        ),
        event(exec, 5, "task.attempt.completed", a, json!({})),
        event(exec, 6, "execution.completed", None, json!({})),
    ];
    let spans = derive_all(&events, None, false);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "queue wait",
            "lock wait",
            "chat m1",
            "execute_tool write_file",
            "chat m1",
            "invoke_agent coder",
            "invoke_workflow"
        ]
    );
    let attempt = ids::attempt_span(exec, "build", 1);
    let (queue, lock) = (&spans[0], &spans[1]);
    assert_eq!(queue.parent_span_id, ids::root_span(exec));
    assert_eq!(lock.parent_span_id, queue.span_context.span_id());
    assert_eq!(
        attr(lock, "orca.lock.resources").as_deref(),
        Some("[\"db\"]")
    );
    for chat in [&spans[2], &spans[4]] {
        assert_eq!(chat.parent_span_id, attempt);
    }
    assert_eq!(
        attr(&spans[2], "gen_ai.usage.input_tokens").as_deref(),
        Some("11")
    );
    assert_eq!(
        attr(&spans[4], "gen_ai.usage.input_tokens").as_deref(),
        Some("13")
    );
    assert_eq!(
        attr(&spans[2], "gen_ai.response.finish_reasons").as_deref(),
        Some("[\"tool_calls\"]")
    );
    assert_eq!(
        attr(&spans[4], "gen_ai.response.finish_reasons").as_deref(),
        Some("[\"stop\"]")
    );
    // The tool-only turn ends before its tool call, which ends before the answering turn.
    assert!(spans[2].end_time <= spans[3].end_time && spans[3].end_time <= spans[4].end_time);
    // A log without the wait fields (written before they were recorded) has no wait span.
    let mut old = events.clone();
    old[1].data = json!({"agent": "coder"});
    assert!(
        derive_all(&old, None, false)
            .iter()
            .all(|s| !s.name.ends_with(" wait"))
    );
}
