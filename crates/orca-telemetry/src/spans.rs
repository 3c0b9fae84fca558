//! Spans derived from an execution's events (its audit log): one trace per execution, named
//! after the OpenTelemetry GenAI semantic conventions (v1.37), orca's own attributes under
//! `orca.*`. Every span has the start and end times of the entries that mark it; a span is made
//! once the entry that ends it is in the window asked for, so a process that exports only the
//! entries it saw appended never sends a span twice.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::SystemTime;

use opentelemetry::trace::{Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use orca_core::{ExecutionId, PlanId, Usage};
use orca_services::events::ExecEvent;
use serde_json::Value;
use time::OffsetDateTime;

use crate::ids;

/// The provider and model an agent talks to (`gen_ai.provider.name`, `gen_ai.request.model`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelInfo {
    /// `openai`, `anthropic`, `ollama`… (the backend).
    pub provider: String,
    /// The model asked for.
    pub model: String,
}

/// What the spans of one window of an execution's events are made from.
#[derive(Debug, Clone)]
pub struct SpanInput<'a> {
    /// The execution's events so far, in order.
    pub events: &'a [ExecEvent],
    /// Spans ended by entries after this `seq` are made (`None`: from the start).
    pub after: Option<u64>,
    /// The plan's goal: the workflow's name.
    pub goal: &'a str,
    /// Each agent's provider and model.
    pub models: &'a BTreeMap<String, ModelInfo>,
    /// Whether answers and tool arguments/results go in (already redacted and bounded in the
    /// audit log).
    pub capture_content: bool,
}

fn time_of(at: OffsetDateTime) -> SystemTime {
    SystemTime::from(at)
}

fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("orca")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

pub(crate) struct Builder {
    exec: ExecutionId,
    spans: Vec<SpanData>,
    scope: InstrumentationScope,
}

impl Builder {
    #[expect(clippy::too_many_arguments, reason = "a span is these eight things")]
    pub(crate) fn push(
        &mut self,
        id: SpanId,
        parent: SpanId,
        kind: SpanKind,
        name: String,
        (start, end): (OffsetDateTime, OffsetDateTime),
        attributes: Vec<KeyValue>,
        error: Option<String>,
        links: Vec<Link>,
    ) {
        let end = end.max(start);
        let mut span_links = SpanLinks::default();
        span_links.links = links;
        self.spans.push(SpanData {
            span_context: SpanContext::new(
                ids::trace_id(self.exec),
                id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent,
            parent_span_is_remote: false,
            span_kind: kind,
            name: Cow::Owned(name),
            start_time: time_of(start),
            end_time: time_of(end),
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: span_links,
            status: match error {
                Some(description) => Status::error(description),
                None => Status::Unset,
            },
            instrumentation_scope: self.scope.clone(),
        });
    }
}

pub(crate) fn text(data: &Value, key: &str) -> Option<String> {
    data.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn usage_of(data: &Value) -> Option<Usage> {
    data.get("usage")
        .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok())
}

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn usage_attributes(usage: &Usage, out: &mut Vec<KeyValue>) {
    out.push(KeyValue::new(
        "gen_ai.usage.input_tokens",
        i64_of(usage.input_tokens),
    ));
    out.push(KeyValue::new(
        "gen_ai.usage.output_tokens",
        i64_of(usage.output_tokens),
    ));
    if usage.cost_micro_usd > 0 {
        #[allow(clippy::cast_precision_loss)]
        let usd = usage.cost_micro_usd as f64 / 1_000_000.0;
        out.push(KeyValue::new("orca.cost.usd", usd));
    }
}

const ATTEMPT_ENDS: [&str; 5] = [
    "task.attempt.completed",
    "task.attempt.failed",
    "task.attempt.interrupted",
    "task.attempt.abandoned",
    "task.attempt.unrecorded",
];

/// The spans whose ending entry lies in the window.
#[must_use]
pub fn derive(input: &SpanInput<'_>) -> Vec<SpanData> {
    let Some(first) = input.events.first() else {
        return Vec::new();
    };
    let exec = first.execution_id;
    let plan = first.plan_id;
    let fresh = |e: &ExecEvent| input.after.is_none_or(|a| e.seq > a);
    let mut b = Builder {
        exec,
        spans: Vec::new(),
        scope: scope(),
    };
    let root = ids::root_span(exec);
    let base = |op: &str| {
        vec![
            KeyValue::new("gen_ai.operation.name", op.to_owned()),
            KeyValue::new("orca.plan.id", plan.to_string()),
            KeyValue::new("orca.execution.id", exec.to_string()),
        ]
    };
    // step/attempt → (its start entry, its agent).
    let mut starts: BTreeMap<(String, u32), (&ExecEvent, String)> = BTreeMap::new();
    // The time of the latest entry of each attempt: where its next model turn started.
    let mut last_in_attempt: BTreeMap<(String, u32), OffsetDateTime> = BTreeMap::new();
    let mut decisions: Vec<&ExecEvent> = Vec::new();
    for e in input.events {
        let key = e.step_id.clone().zip(e.attempt);
        let attempt_span = key
            .as_ref()
            .map_or(root, |(s, a)| ids::attempt_span(exec, s, *a));
        let agent = key
            .as_ref()
            .and_then(|k| starts.get(k))
            .map(|(_, a)| a.clone())
            .or_else(|| text(&e.data, "agent"))
            .unwrap_or_default();
        let previous = key
            .as_ref()
            .and_then(|k| last_in_attempt.get(k).copied())
            .unwrap_or(e.at);
        match e.kind.as_str() {
            "task.attempt.started" => {
                if let Some(k) = key.clone() {
                    starts.insert(k, (e, text(&e.data, "agent").unwrap_or_default()));
                }
                if fresh(e) {
                    crate::waits::push(&mut b, e, root, &base);
                }
            }
            kind if ATTEMPT_ENDS.contains(&kind) && fresh(e) => {
                let Some((step, attempt)) = key.clone() else {
                    continue;
                };
                let start = starts
                    .get(&(step.clone(), attempt))
                    .map_or(e.at, |(s, _)| s.at);
                let outcome = kind.trim_start_matches("task.attempt.");
                let mut attrs = base("invoke_agent");
                attrs.push(KeyValue::new("gen_ai.agent.name", agent.clone()));
                attrs.push(KeyValue::new("orca.step.id", step.clone()));
                attrs.push(KeyValue::new("orca.attempt", i64::from(attempt)));
                attrs.push(KeyValue::new("orca.outcome", outcome.to_owned()));
                let error = (kind != "task.attempt.completed").then(|| {
                    e.data
                        .pointer("/failure/code")
                        .and_then(Value::as_str)
                        .unwrap_or(outcome)
                        .to_owned()
                });
                if let Some(err) = &error {
                    attrs.push(KeyValue::new("error.type", err.clone()));
                }
                if let Some(u) = usage_of(&e.data) {
                    usage_attributes(&u, &mut attrs);
                }
                b.push(
                    ids::attempt_span(exec, &step, attempt),
                    root,
                    SpanKind::Internal,
                    format!("invoke_agent {agent}"),
                    (start, e.at),
                    attrs,
                    error.filter(|_| kind == "task.attempt.failed"),
                    Vec::new(),
                );
            }
            "agent.answer" | "agent.turn" if fresh(e) => {
                let info = input.models.get(&agent).cloned().unwrap_or_default();
                let mut attrs = base("chat");
                attrs.push(KeyValue::new("gen_ai.agent.name", agent.clone()));
                attrs.push(KeyValue::new("gen_ai.provider.name", info.provider.clone()));
                attrs.push(KeyValue::new("gen_ai.request.model", info.model.clone()));
                attrs.push(KeyValue::new("gen_ai.response.model", info.model.clone()));
                if let Some(u) = usage_of(&e.data) {
                    usage_attributes(&u, &mut attrs);
                }
                if let Some(turn) = e.data.get("turn").and_then(Value::as_u64) {
                    attrs.push(KeyValue::new("orca.turn", i64_of(turn)));
                }
                // A turn that answered text ended it (`agent.answer`); one that only called
                // tools says why it ended (`agent.turn`).
                let finish = text(&e.data, "finish_reason").unwrap_or_else(|| "stop".to_owned());
                attrs.push(KeyValue::new(
                    "gen_ai.response.finish_reasons",
                    opentelemetry::Value::Array(
                        vec![opentelemetry::StringValue::from(finish)].into(),
                    ),
                ));
                if input.capture_content
                    && let Some(t) = text(&e.data, "text")
                {
                    attrs.push(KeyValue::new("gen_ai.output.messages", t));
                }
                b.push(
                    ids::entry_span(exec, e.seq),
                    attempt_span,
                    SpanKind::Client,
                    format!("chat {}", info.model),
                    (previous, e.at),
                    attrs,
                    None,
                    Vec::new(),
                );
            }
            "tool.call" | "tool.refused" if fresh(e) => {
                let tool = text(&e.data, "tool").unwrap_or_default();
                let mut attrs = base("execute_tool");
                attrs.push(KeyValue::new("gen_ai.tool.name", tool.clone()));
                attrs.push(KeyValue::new("gen_ai.agent.name", agent.clone()));
                let ok = e.kind == "tool.call"
                    && e.data.get("ok").and_then(Value::as_bool) != Some(false);
                let error = (!ok).then(|| {
                    if e.kind == "tool.refused" {
                        "refused"
                    } else {
                        "tool_error"
                    }
                    .to_owned()
                });
                if let Some(err) = &error {
                    attrs.push(KeyValue::new("error.type", err.clone()));
                }
                if input.capture_content {
                    if let Some(a) = e.data.get("arguments") {
                        attrs.push(KeyValue::new("gen_ai.tool.call.arguments", a.to_string()));
                    }
                    if let Some(r) = text(&e.data, "result") {
                        attrs.push(KeyValue::new("gen_ai.tool.call.result", r));
                    }
                }
                b.push(
                    ids::entry_span(exec, e.seq),
                    attempt_span,
                    SpanKind::Internal,
                    format!("execute_tool {tool}"),
                    (previous, e.at),
                    attrs,
                    error,
                    Vec::new(),
                );
            }
            "check.passed" | "check.failed" if fresh(e) => {
                let millis = e.data.get("millis").and_then(Value::as_u64).unwrap_or(0);
                let start = e.at - time::Duration::milliseconds(i64_of(millis));
                let mut attrs = base("check");
                let verdict = e
                    .data
                    .pointer("/verdict/verdict")
                    .or_else(|| e.data.get("verdict"))
                    .and_then(Value::as_str)
                    .unwrap_or(if e.kind == "check.passed" {
                        "passed"
                    } else {
                        "failed"
                    })
                    .to_owned();
                attrs.push(KeyValue::new("orca.check.verdict", verdict.clone()));
                if let Some(c) = text(&e.data, "command") {
                    attrs.push(KeyValue::new("orca.check.command", c));
                }
                if let Some(s) = &e.step_id {
                    attrs.push(KeyValue::new("orca.step.id", s.clone()));
                }
                let error = (e.kind == "check.failed").then_some(verdict);
                if let Some(err) = &error {
                    attrs.push(KeyValue::new("error.type", err.clone()));
                }
                b.push(
                    ids::entry_span(exec, e.seq),
                    attempt_span,
                    SpanKind::Internal,
                    "check".to_owned(),
                    (start, e.at),
                    attrs,
                    error,
                    Vec::new(),
                );
            }
            "decision.requested" => decisions.push(e),
            "decision.answered" if fresh(e) => {
                // The open request this answers: the latest one before it.
                if let Some(asked) = decisions.pop() {
                    let mut attrs = base("human_decision");
                    if let Some(by) = text(&e.data, "by") {
                        attrs.push(KeyValue::new("orca.decision.actor", by));
                    }
                    let kind = e
                        .data
                        .pointer("/decision/kind")
                        .or_else(|| e.data.pointer("/decision/type"))
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    if let Some(k) = kind {
                        attrs.push(KeyValue::new("orca.decision.kind", k));
                    }
                    if let Some(s) = &asked.step_id {
                        attrs.push(KeyValue::new("orca.step.id", s.clone()));
                    }
                    b.push(
                        ids::entry_span(exec, asked.seq),
                        root,
                        SpanKind::Internal,
                        "human_decision".to_owned(),
                        (asked.at, e.at),
                        attrs,
                        None,
                        Vec::new(),
                    );
                }
            }
            kind if e.is_terminal() && fresh(e) => {
                let mut attrs = base("invoke_workflow");
                attrs.push(KeyValue::new("gen_ai.workflow.name", input.goal.to_owned()));
                let outcome = kind.trim_start_matches("execution.").to_owned();
                attrs.push(KeyValue::new("orca.outcome", outcome.clone()));
                if let Some(u) = usage_of(&e.data) {
                    usage_attributes(&u, &mut attrs);
                }
                let error = (kind == "execution.failed").then(|| "failed".to_owned());
                if let Some(err) = &error {
                    attrs.push(KeyValue::new("error.type", err.clone()));
                }
                let links = forked_from(input.events)
                    .map(|from| {
                        vec![Link::with_context(SpanContext::new(
                            ids::trace_id(from),
                            ids::root_span(from),
                            TraceFlags::SAMPLED,
                            false,
                            TraceState::default(),
                        ))]
                    })
                    .unwrap_or_default();
                b.push(
                    root,
                    SpanId::INVALID,
                    SpanKind::Internal,
                    "invoke_workflow".to_owned(),
                    (first.at, e.at),
                    attrs,
                    error,
                    links,
                );
            }
            _ => {}
        }
        if let Some(k) = key {
            last_in_attempt.insert(k, e.at);
        }
    }
    b.spans
}

/// The planner's conversation that made `plan` (`orca ask`), from the plan's log: its own
/// trace (the plan id's 128 bits), a root `invoke_agent {planner}` span from the first entry to
/// the last, and a `chat` / `execute_tool` span per recorded answer and tool call under it.
#[must_use]
pub fn derive_planner(plan: PlanId, agent: &str, input: &SpanInput<'_>) -> Vec<SpanData> {
    let (Some(first), Some(last)) = (input.events.first(), input.events.last()) else {
        return Vec::new();
    };
    let exec = first.execution_id;
    let mut spans = derive(input);
    let mut b = Builder {
        exec,
        spans: Vec::new(),
        scope: scope(),
    };
    let attrs = vec![
        KeyValue::new("gen_ai.operation.name", "invoke_agent"),
        KeyValue::new("gen_ai.agent.name", agent.to_owned()),
        KeyValue::new("orca.plan.id", plan.to_string()),
        KeyValue::new("gen_ai.workflow.name", input.goal.to_owned()),
    ];
    b.push(
        ids::root_span(exec),
        SpanId::INVALID,
        SpanKind::Internal,
        format!("invoke_agent {agent}"),
        (first.at, last.at),
        attrs,
        None,
        Vec::new(),
    );
    spans.extend(b.spans);
    spans
}

/// The execution an `orca exec retry` fork came from.
fn forked_from(events: &[ExecEvent]) -> Option<ExecutionId> {
    events
        .iter()
        .find(|e| e.kind == "execution.forked")
        .and_then(|e| text(&e.data, "from_execution"))
        .and_then(|s| s.parse().ok())
}

#[cfg(test)]
mod tests;
