//! What OpenTelemetry export costs per step, apart from the run: a log of model steps (each a
//! start with its queue and lock waits, a tool-only turn, a tool call, an answering turn, a
//! check and the end), read window by window as a follower does, and
//!
//! - `derive`: the spans of each step's window derived from the whole log so far (a look per
//!   step, the worst case: a follower looks once a second, whatever number of steps ended);
//! - `export`: the same, queued into the real exporter, sent over OTLP/HTTP (protobuf) to a
//!   real receiver (`orca_testkit::otlp`) and flushed at the end.
//!
//! Prints the median per step over the repetitions. `cargo bench -p orca-telemetry --bench
//! export_bench [-- STEPS REPS]` (defaults 200 and 7).

#![expect(clippy::unwrap_used, clippy::print_stdout, reason = "a benchmark")]

use std::collections::BTreeMap;
use std::time::Instant;

use orca_core::{ExecutionId, PlanId};
use orca_services::events::ExecEvent;
use orca_telemetry::spans::derive;
use orca_telemetry::{ModelInfo, SpanInput, Telemetry};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

fn log(exec: ExecutionId, steps: usize) -> (Vec<ExecEvent>, Vec<u64>) {
    let t0 = OffsetDateTime::now_utc();
    let mut events = Vec::new();
    let mut ends = Vec::new();
    let mut push = |kind: &str, step: Option<(String, u32)>, data: Value| {
        let seq = events.len() as u64;
        events.push(ExecEvent {
            format_version: 1,
            seq,
            at: t0 + time::Duration::milliseconds(i64::try_from(seq).unwrap() * 10),
            execution_id: exec,
            plan_id: PlanId::from_uuid(exec.uuid()),
            kind: kind.to_owned(),
            parent: None,
            step_id: step.as_ref().map(|s| s.0.clone()),
            attempt: step.map(|s| s.1),
            data,
        });
        seq
    };
    push("execution.created", None, json!({}));
    let usage = json!({"input_tokens": 1200, "output_tokens": 80});
    for i in 0..steps {
        let s = Some((format!("step-{i}"), 1));
        let at = (t0 + time::Duration::milliseconds(i64::try_from(i).unwrap()))
            .format(&Rfc3339)
            .unwrap();
        push(
            "task.attempt.started",
            s.clone(),
            json!({"agent": "coder", "ready_at": at, "lock_wait": {"since": at, "locks": ["db"]}}),
        );
        push(
            "agent.turn",
            s.clone(),
            json!({"agent": "coder", "turn": 1, "finish_reason": "tool_calls", "usage": usage}),
        );
        push(
            "tool.call",
            s.clone(),
            json!({"agent": "coder", "tool": "write_file", "ok": true}),
        );
        push(
            "agent.answer",
            s.clone(),
            json!({"agent": "coder", "turn": 2, "text": "done", "usage": usage}),
        );
        push(
            "check.passed",
            s.clone(),
            json!({"millis": 12, "command": "cargo test"}),
        );
        ends.push(push(
            "task.attempt.completed",
            s,
            json!({"usage": {"input_tokens": 2400, "output_tokens": 160}}),
        ));
    }
    ends.push(push("execution.completed", None, json!({})));
    (events, ends)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The spans of every step's window, as a follower looking once per step makes them.
fn windows(
    events: &[ExecEvent],
    ends: &[u64],
    models: &BTreeMap<String, ModelInfo>,
) -> Vec<Vec<opentelemetry_sdk::trace::SpanData>> {
    let mut after = None;
    ends.iter()
        .map(|&end| {
            let upto = usize::try_from(end).unwrap() + 1;
            let spans = derive(&SpanInput {
                events: &events[..upto],
                after,
                goal: "bench",
                models,
                capture_content: false,
            });
            after = Some(end);
            spans
        })
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let steps = args.first().copied().unwrap_or(200);
    let reps = args.get(1).copied().unwrap_or(7);
    let models = BTreeMap::from([(
        "coder".to_owned(),
        ModelInfo {
            provider: "openai".to_owned(),
            model: "m1".to_owned(),
        },
    )]);
    let mut derive_us = Vec::new();
    let mut export_us = Vec::new();
    let mut spans_sent = 0;
    for _ in 0..reps {
        let exec = ExecutionId::new();
        let (events, ends) = log(exec, steps);
        let start = Instant::now();
        let derived = windows(&events, &ends, &models);
        derive_us.push(start.elapsed().as_secs_f64() * 1e6 / steps as f64);
        let n: usize = derived.iter().map(Vec::len).sum();

        let receiver = orca_testkit::otlp::Receiver::start().await;
        let url = receiver.url.clone();
        let settings = orca_telemetry::config::resolve(None, &|k: &str| {
            (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| url.clone())
        })
        .unwrap()
        .unwrap();
        let marks = std::env::temp_dir().join(format!("orca-bench-{exec}"));
        let telemetry = Telemetry::start(
            settings,
            tokio::runtime::Handle::current(),
            Some(marks.clone()),
        )
        .unwrap();
        // Let the warm-up request answer, as it does while a run's first step works.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let start = Instant::now();
        for (w, &end) in windows(&events, &ends, &models).into_iter().zip(&ends) {
            telemetry.record_window(exec, end, w);
        }
        telemetry.shutdown().await;
        export_us.push(start.elapsed().as_secs_f64() * 1e6 / steps as f64);
        let got = receiver.received().spans.len();
        assert_eq!(got, n, "every span reached the receiver");
        spans_sent = got;
        let _ = std::fs::remove_dir_all(marks);
    }
    println!(
        "{steps} model steps ({} spans each), median of {reps}: derive {:.1} µs per step, derive + queue + send + flush {:.1} µs per step ({spans_sent} spans received)",
        spans_sent / steps.max(1),
        median(derive_us),
        median(export_us)
    );
}
