//! Metrics, recorded from the spans as they are made: the GenAI client metrics
//! (`gen_ai.client.token.usage`, `gen_ai.client.operation.duration`) and orca's own (attempts by
//! outcome, step duration, queue wait, lock wait, decision wait, decisions pending and the age
//! of the oldest, cost), with the spans' attributes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, ObservableGauge, UpDownCounter};
use opentelemetry_sdk::trace::SpanData;
use orca_core::ExecutionId;

#[derive(Debug, Clone)]
pub(crate) struct Instruments {
    token_usage: Histogram<u64>,
    operation_duration: Histogram<f64>,
    attempts: Counter<u64>,
    step_duration: Histogram<f64>,
    decision_wait: Histogram<f64>,
    decisions_pending: UpDownCounter<i64>,
    cost: Counter<f64>,
    queue_wait: Histogram<f64>,
    lock_wait: Histogram<f64>,
    /// When each followed execution's oldest open decision was asked.
    open_decisions: Arc<Mutex<BTreeMap<ExecutionId, SystemTime>>>,
    _decision_age: ObservableGauge<f64>,
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
        let open_decisions: Arc<Mutex<BTreeMap<ExecutionId, SystemTime>>> = Arc::default();
        let open = Arc::clone(&open_decisions);
        let decision_age = meter
            .f64_observable_gauge("orca.decisions.pending.age")
            .with_unit("s")
            .with_description("Age of the oldest decision asked and not answered yet")
            .with_callback(move |gauge| {
                let oldest = open
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .values()
                    .min()
                    .copied();
                let age = oldest
                    .and_then(|t| SystemTime::now().duration_since(t).ok())
                    .map_or(0.0, |d| d.as_secs_f64());
                gauge.observe(age, &[]);
            })
            .build();
        Self {
            queue_wait: meter
                .f64_histogram("orca.queue.wait")
                .with_unit("s")
                .with_description("Time from a step ready to run to its attempt's start")
                .build(),
            lock_wait: meter
                .f64_histogram("orca.lock.wait")
                .with_unit("s")
                .with_description("Time a step waited for a resource lock held elsewhere")
                .build(),
            open_decisions,
            _decision_age: decision_age,
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

    /// When `exec`'s oldest open decision was asked (`None`: none is open).
    pub(crate) fn open_decision(&self, exec: ExecutionId, asked: Option<SystemTime>) {
        let mut open = self
            .open_decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match asked {
            Some(t) => open.insert(exec, t),
            None => open.remove(&exec),
        };
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
                "queue_wait" => {
                    self.queue_wait
                        .record(secs, &dims(span, &["gen_ai.agent.name", "orca.step.id"]));
                }
                "lock_wait" => {
                    self.lock_wait.record(secs, &dims(span, &["orca.step.id"]));
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
