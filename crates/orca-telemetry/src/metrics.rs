//! Metrics, recorded from the spans as they are made: the GenAI client metrics
//! (`gen_ai.client.token.usage`, `gen_ai.client.operation.duration`) and orca's own (attempts by
//! outcome, step duration, decision wait, cost), with the spans' attributes.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, UpDownCounter};
use opentelemetry_sdk::trace::SpanData;

#[derive(Debug, Clone)]
pub(crate) struct Instruments {
    token_usage: Histogram<u64>,
    operation_duration: Histogram<f64>,
    attempts: Counter<u64>,
    step_duration: Histogram<f64>,
    decision_wait: Histogram<f64>,
    decisions_pending: UpDownCounter<i64>,
    cost: Counter<f64>,
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a opentelemetry::Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn int(span: &SpanData, key: &str) -> Option<u64> {
    match attr(span, key) {
        Some(opentelemetry::Value::I64(n)) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// The attributes a metric point carries: the low-cardinality ones of its span.
fn dims(span: &SpanData, keys: &[&str]) -> Vec<KeyValue> {
    span.attributes
        .iter()
        .filter(|kv| keys.contains(&kv.key.as_str()))
        .cloned()
        .collect()
}

impl Instruments {
    pub(crate) fn new(meter: &Meter) -> Self {
        Self {
            token_usage: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Tokens used per model request")
                .build(),
            operation_duration: meter
                .f64_histogram("gen_ai.client.operation.duration")
                .with_unit("s")
                .with_description("Duration of a model request")
                .build(),
            attempts: meter
                .u64_counter("orca.step.attempts")
                .with_unit("{attempt}")
                .with_description("Step attempts by outcome")
                .build(),
            step_duration: meter
                .f64_histogram("orca.step.duration")
                .with_unit("s")
                .with_description("Duration of a step attempt")
                .build(),
            decision_wait: meter
                .f64_histogram("orca.decision.wait")
                .with_unit("s")
                .with_description("Time from a decision asked to answered")
                .build(),
            decisions_pending: meter
                .i64_up_down_counter("orca.decisions.pending")
                .with_unit("{decision}")
                .with_description("Decisions asked and not answered yet")
                .build(),
            cost: meter
                .f64_counter("orca.cost")
                .with_unit("USD")
                .with_description("Cost of model requests")
                .build(),
        }
    }

    /// Decisions asked (`+1`) and answered (`-1`) in a window of the log.
    pub(crate) fn decisions(&self, delta: i64) {
        if delta != 0 {
            self.decisions_pending.add(delta, &[]);
        }
    }

    pub(crate) fn record(&self, spans: &[SpanData]) {
        for span in spans {
            let secs = span
                .end_time
                .duration_since(span.start_time)
                .map_or(0.0, |d| d.as_secs_f64());
            let op = match attr(span, "gen_ai.operation.name") {
                Some(opentelemetry::Value::String(s)) => s.as_str().to_owned(),
                _ => continue,
            };
            match op.as_str() {
                "chat" => {
                    let keys = [
                        "gen_ai.operation.name",
                        "gen_ai.provider.name",
                        "gen_ai.request.model",
                        "gen_ai.response.model",
                        "gen_ai.agent.name",
                    ];
                    let base = dims(span, &keys);
                    self.operation_duration.record(secs, &base);
                    for (key, kind) in [
                        ("gen_ai.usage.input_tokens", "input"),
                        ("gen_ai.usage.output_tokens", "output"),
                    ] {
                        if let Some(n) = int(span, key) {
                            let mut a = base.clone();
                            a.push(KeyValue::new("gen_ai.token.type", kind));
                            self.token_usage.record(n, &a);
                        }
                    }
                }
                "invoke_agent" => {
                    let a = dims(
                        span,
                        &[
                            "gen_ai.agent.name",
                            "orca.step.id",
                            "orca.outcome",
                            "error.type",
                        ],
                    );
                    self.attempts.add(1, &a);
                    self.step_duration.record(secs, &a);
                    if let Some(opentelemetry::Value::F64(usd)) = attr(span, "orca.cost.usd") {
                        self.cost
                            .add(*usd, &dims(span, &["gen_ai.agent.name", "orca.step.id"]));
                    }
                }
                "human_decision" => {
                    self.decision_wait
                        .record(secs, &dims(span, &["orca.decision.kind"]));
                }
                _ => {}
            }
        }
    }
}
