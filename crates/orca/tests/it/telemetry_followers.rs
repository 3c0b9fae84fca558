//! OpenTelemetry export of what other processes than `orca run` drive or decide, into the real
//! OTLP receiver: a run driven by `orca worker` on a shared PostgreSQL store is the
//! execution's trace, with its queue and lock waits (two steps that need one lock: the second
//! waits for the first); a decision made on `orca serve`'s web page is its span, with the
//! actor, exported by the run it restarts, without a span sent twice; so is one answered by an
//! agent over MCP.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as NumberValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use orca_testkit::otlp::{Receiver, attr};
use serde_json::{Value, json};

use crate::common::isolated;
use crate::pg_workers::{detached, on, verify_exported};
use crate::web_support::{self, Server, client, eventually, get, nonce, post};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn secs(s: &Span) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "durations of seconds")]
    let d = s.end_time_unix_nano.saturating_sub(s.start_time_unix_nano) as f64;
    d / 1e9
}

fn by_name<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// The spans of `exec`'s trace, and what to print of them; asserts none was sent twice.
fn trace_of(receiver: &Receiver, exec: &str) -> (Vec<Span>, String) {
    let got = receiver.received();
    assert_eq!(got.undecodable, 0);
    let uuid = exec.trim_start_matches("exec_").replace('-', "");
    let traces: BTreeSet<String> = got.spans.iter().map(|(s, _)| hex(&s.trace_id)).collect();
    assert_eq!(traces, BTreeSet::from([uuid]), "one trace: the execution's");
    let spans: Vec<Span> = got.spans.into_iter().map(|(s, _)| s).collect();
    let ids: BTreeSet<Vec<u8>> = spans.iter().map(|s| s.span_id.clone()).collect();
    let names: BTreeMap<&str, usize> = spans.iter().fold(BTreeMap::new(), |mut m, s| {
        *m.entry(s.name.as_str()).or_default() += 1;
        m
    });
    let said = format!(
        "trace {traces:?} (execution {exec}): {} spans, {} distinct: {names:?}",
        spans.len(),
        ids.len()
    );
    assert_eq!(ids.len(), spans.len(), "a span was exported twice: {said}");
    (spans, said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_exports_the_trace_with_its_queue_and_lock_waits() {
    let receiver = Receiver::start().await;
    let endpoint = receiver.url.clone();
    let (exec, root_dir, metrics) = tokio::task::block_in_place(|| {
        let server = orca_testkit::postgres::Throwaway::shared().unwrap_or_else(|e| panic!("{e}"));
        let url = tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(server.create_database())
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (root, cfg) = (dir.path().join("p"), dir.path().join("cfg"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&cfg).unwrap();
        assert_eq!(on(&url, &root, &cfg, &["init"]).status.code(), Some(0));
        // `first` and `second` both need the lock `db`: whichever starts second waits for it.
        let step = |id: &str, deps: &[&str]| {
            json!({ "id": id, "agent": "shell", "description": format!("run {id}"),
                    "command": "sleep 1", "depends_on": deps, "locks": ["db"] })
        };
        let doc = json!({
            "goal": "two steps, one lock", "assumptions": ["a shell"], "risks": ["none"],
            "verification": ["exit 0"],
            "steps": [step("first", &[]), step("second", &[]),
                      { "id": "after", "agent": "shell", "description": "run after",
                        "command": "true", "depends_on": ["first", "second"] }]
        });
        let exec = detached(&url, &root, &cfg, "locks.json", &doc);
        let out = isolated(&root, &cfg)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .args([
                "--store",
                &url,
                "--json",
                "worker",
                "--poll",
                "1",
                "--until-idle",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let shown = on(&url, &root, &cfg, &["--json", "exec", "show", &exec]);
        let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
        assert_eq!(shown["stage"], "completed", "{shown}");
        // The entries that now say when a step was ready and waited for its lock keep the
        // chain verifiable.
        verify_exported(&url, &root, &cfg);
        (exec, dir, receiver.received().metrics)
    });
    drop(root_dir);
    let (spans, said) = trace_of(&receiver, &exec);
    println!("{said}");
    let root = by_name(&spans, "invoke_workflow");
    assert_eq!(root.len(), 1, "the worker's run has its root span");
    let root = root[0];
    let attempts = by_name(&spans, "invoke_agent shell");
    assert_eq!(attempts.len(), 3, "an attempt span per step");
    let queued = by_name(&spans, "queue wait");
    assert_eq!(queued.len(), 3, "a queue wait before every attempt");
    for q in &queued {
        assert_eq!(q.parent_span_id, root.span_id);
    }
    let locked = by_name(&spans, "lock wait");
    println!(
        "queue waits (s): {:?}; lock waits (s): {:?}",
        queued
            .iter()
            .map(|s| format!("{}={:.3}", attr(s, "orca.step.id").unwrap(), secs(s)))
            .collect::<Vec<_>>(),
        locked
            .iter()
            .map(|s| format!("{:.3}", secs(s)))
            .collect::<Vec<_>>()
    );
    assert_eq!(locked.len(), 1, "the second of the two waited for the lock");
    let lock = locked[0];
    assert_eq!(attr(lock, "orca.lock.resources").as_deref(), Some("db"));
    let waiter = attr(lock, "orca.step.id").unwrap();
    let its_queue = queued
        .iter()
        .find(|q| attr(q, "orca.step.id").as_deref() == Some(waiter.as_str()))
        .unwrap();
    assert_eq!(
        lock.parent_span_id, its_queue.span_id,
        "within its queue wait"
    );
    // It waited about the other step's `sleep 1`.
    assert!(secs(lock) > 0.5, "lock wait {:.3} s", secs(lock));
    let names: BTreeSet<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
    println!("metrics: {names:?}");
    for name in ["orca.queue.wait", "orca.lock.wait", "orca.step.attempts"] {
        assert!(names.contains(name), "{name} in {names:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_made_on_the_web_is_its_span_with_the_actor() {
    let receiver = Receiver::start().await;
    let endpoint = receiver.url.clone();
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())];
    let p = web_support::Project::new();
    let token = p.token("alice");
    // A step that fails until the file `ok` exists: the run waits for a decision.
    let plan = p.proposal("flaky", &web_support::plan(&[("flaky", "test -e ok", &[])]));
    let first = tokio::task::block_in_place(|| {
        isolated(&p.root, &p.home)
            .envs(env)
            .args(["--json", "run", &plan, "--yes", "--max-attempts", "1"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    });
    assert_eq!(first.status.code(), Some(4), "{first:?}");
    let exec = serde_json::from_slice::<Value>(&first.stdout).unwrap()["execution_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let got = receiver.received();
    let before = got.spans.len();
    // The run that stopped to ask exported the decision pending and its age.
    let names: BTreeSet<&str> = got.metrics.iter().map(|m| m.name.as_str()).collect();
    println!("metrics of the run that asked: {names:?}");
    assert!(names.contains("orca.decisions.pending"), "{names:?}");
    let age = got
        .metrics
        .iter()
        .find(|m| m.name == "orca.decisions.pending.age")
        .and_then(|m| match &m.data {
            Some(Data::Gauge(g)) => g.data_points.last().and_then(|p| match p.value {
                Some(NumberValue::AsDouble(v)) => Some(v),
                _ => None,
            }),
            _ => None,
        })
        .expect("the age of the decision pending");
    println!("age of the decision pending at the run's exit: {age:.3} s");
    assert!(age > 0.0, "{age}");
    std::fs::write(p.root.join("ok"), "").unwrap();
    let server = Server::start_env(&p, &[], &env);
    let c = client();
    let page_url = server.url(&format!("/executions/{exec}"));
    let (_, page) = get(&c, &page_url, &token).await;
    let n = nonce(&page, Some(&format!("/executions/{exec}/decide")));
    let (status, body, _) = post(
        &c,
        &server.url(&format!("/executions/{exec}/decide")),
        &token,
        &[("nonce", &n), ("decision", "retry")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The run the web page restarts exports, and exits once the trace's root is sent.
    let start = Instant::now();
    eventually(Duration::from_secs(90), "the root span", || {
        let got = receiver.received();
        async move {
            got.spans
                .iter()
                .any(|(s, _)| s.name == "invoke_workflow")
                .then_some(())
        }
    })
    .await;
    println!(
        "spans before the decision: {before}; the root arrived {:.1} s after it",
        start.elapsed().as_secs_f64()
    );
    let (spans, said) = trace_of(&receiver, &exec);
    println!("{said}");
    let decisions = by_name(&spans, "human_decision");
    assert_eq!(decisions.len(), 1, "the decision's span");
    let d = decisions[0];
    println!(
        "decision span: actor {:?}, {:.3} s",
        attr(d, "orca.decision.actor"),
        secs(d)
    );
    assert_eq!(attr(d, "orca.decision.actor").as_deref(), Some("web:alice"));
    let root = by_name(&spans, "invoke_workflow")[0];
    assert_eq!(d.parent_span_id, root.span_id);
    let attempts: BTreeSet<String> = by_name(&spans, "invoke_agent shell")
        .iter()
        .map(|s| attr(s, "orca.attempt").unwrap())
        .collect();
    assert_eq!(attempts, BTreeSet::from(["1".to_owned(), "2".to_owned()]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_answered_over_mcp_is_its_span_with_the_actor() {
    use crate::mcp_support::{self, Human, ok, watch_until};
    let receiver = Receiver::start().await;
    let endpoint = receiver.url.clone();
    let p = mcp_support::Project::new();
    let (client, _) = p
        .connect_with(
            "otel-client",
            Human::Absent,
            &[],
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())],
        )
        .await;
    let doc = mcp_support::plan_doc(json!([
        {"id": "flaky", "agent": "shell", "description": "fails once, then succeeds",
         "command": "if [ -f .failed-once ]; then echo recovered; else touch .failed-once; exit 1; fi",
         "max_attempts": 1}
    ]));
    let created = ok(&client, "plan_create", json!({"document": doc.to_string()})).await;
    let plan = created["plan_id"].as_str().unwrap().to_owned();
    assert!(p.orca(&["plan", "approve", &plan]).status.success());
    // The driver the MCP server starts inherits its environment: it exports.
    let run = ok(&client, "plan_run", json!({"plan": plan})).await;
    let exec = run["execution_id"].as_str().unwrap().to_owned();
    let mut events = Vec::new();
    watch_until(&client, &exec, &mut events, |w| {
        w["decision"].is_object() || w["ended"] == true
    })
    .await;
    let answered = ok(
        &client,
        "decision_answer",
        json!({"execution": exec, "action": "retry"}),
    )
    .await;
    assert_eq!(answered["by"], "mcp:otel-client");
    let ended = watch_until(&client, &exec, &mut events, |w| w["ended"] == true).await;
    assert_eq!(ended["stage"], "completed", "{ended}");
    eventually(Duration::from_secs(60), "the root span", || {
        let got = receiver.received();
        async move {
            got.spans
                .iter()
                .any(|(s, _)| s.name == "invoke_workflow")
                .then_some(())
        }
    })
    .await;
    let (spans, said) = trace_of(&receiver, &exec);
    println!("{said}");
    let decisions = by_name(&spans, "human_decision");
    assert_eq!(decisions.len(), 1, "the decision's span");
    println!(
        "decision span: actor {:?}, {:.3} s",
        attr(decisions[0], "orca.decision.actor"),
        secs(decisions[0])
    );
    assert_eq!(
        attr(decisions[0], "orca.decision.actor").as_deref(),
        Some("mcp:otel-client")
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_made_over_mcp_is_the_planners_trace_named_by_the_plan() {
    use crate::mcp_support::{self, Human, ok};
    let receiver = Receiver::start().await;
    let endpoint = receiver.url.clone();
    let p = mcp_support::Project::new();
    let _planner = mcp_support::planner::serve_for(&p.root).await;
    let (client, _) = p
        .connect_with(
            "otel-client",
            Human::Absent,
            &[],
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())],
        )
        .await;
    let planned = ok(
        &client,
        "plan_from_request",
        json!({"request": "say hello in hello.txt"}),
    )
    .await;
    let plan = planned["plan_id"].as_str().unwrap().to_owned();
    let uuid = plan.trim_start_matches("plan_").replace('-', "");
    // Sent while the session goes on (batched), or at the latest when it closes.
    client.cancel().await.unwrap();
    eventually(Duration::from_secs(60), "the planner's root span", || {
        let got = receiver.received();
        async move {
            got.spans
                .iter()
                .any(|(s, _)| s.name == "invoke_agent planner")
                .then_some(())
        }
    })
    .await;
    let spans: Vec<Span> = receiver
        .received()
        .spans
        .into_iter()
        .map(|(s, _)| s)
        .filter(|s| hex(&s.trace_id) == uuid)
        .collect();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    println!("plan_from_request's trace {uuid}: {names:?}");
    let root = by_name(&spans, "invoke_agent planner");
    assert_eq!(root.len(), 1, "{names:?}");
    assert_eq!(
        attr(root[0], "orca.plan.id").as_deref(),
        Some(plan.as_str())
    );
    let chats = by_name(&spans, "chat planner-model");
    assert!(!chats.is_empty(), "the model's requests: {names:?}");
    let tools: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name.starts_with("execute_tool orca_plan_"))
        .collect();
    assert!(!tools.is_empty(), "{names:?}");
    assert!(
        chats
            .iter()
            .chain(tools.iter())
            .all(|s| s.parent_span_id == root[0].span_id),
        "every request and tool call under the planner's span"
    );
}
