//! An OTLP/HTTP receiver built on the official wire types (`opentelemetry-proto`): it serves
//! `/v1/traces` and `/v1/metrics` in protobuf and JSON on a free loopback port, and keeps what
//! it was sent — every body's bytes as they arrived, the decoded spans and metrics, the
//! request headers — for a test to search.

use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

/// What the receiver was sent.
#[derive(Debug, Default, Clone)]
pub struct Received {
    /// Every request body, as it arrived.
    pub bodies: Vec<Vec<u8>>,
    /// The content types of the requests.
    pub content_types: Vec<String>,
    /// Every request's headers (`name: value`).
    pub headers: Vec<Vec<(String, String)>>,
    /// The spans, in arrival order, with their resource's attributes (`key=value`).
    pub spans: Vec<(Span, Vec<String>)>,
    /// The metrics, in arrival order.
    pub metrics: Vec<Metric>,
    /// Bodies that did not decode.
    pub undecodable: usize,
}

type Shared = Arc<Mutex<Received>>;

/// A running receiver; stops when dropped.
#[derive(Debug)]
pub struct Receiver {
    /// `http://127.0.0.1:PORT` (the base of `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub url: String,
    got: Shared,
    task: tokio::task::JoinHandle<()>,
}

fn keep(got: &Shared, headers: &HeaderMap, body: &Bytes) -> (bool, Received) {
    let mut g = got.lock().unwrap_or_else(PoisonError::into_inner);
    g.bodies.push(body.to_vec());
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    g.content_types.push(ct.clone());
    g.headers.push(
        headers
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
    );
    (ct.contains("json"), g.clone())
}

fn answer(json: bool) -> impl IntoResponse {
    if json {
        ([(header::CONTENT_TYPE, "application/json")], b"{}".to_vec())
    } else {
        (
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            Vec::new(),
        )
    }
}

async fn traces(State(got): State<Shared>, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    let (json, _) = keep(&got, &headers, &body);
    let decoded = if json {
        serde_json::from_slice::<ExportTraceServiceRequest>(&body).ok()
    } else {
        ExportTraceServiceRequest::decode(body.as_ref()).ok()
    };
    let mut g = got.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(req) = decoded else {
        g.undecodable += 1;
        return (StatusCode::BAD_REQUEST, answer(json)).into_response();
    };
    for rs in req.resource_spans {
        let resource: Vec<String> = rs
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .map(|kv| format!("{}={}", kv.key, value_text(kv.value.as_ref())))
            .collect();
        for ss in rs.scope_spans {
            for span in ss.spans {
                g.spans.push((span, resource.clone()));
            }
        }
    }
    answer(json).into_response()
}

async fn metrics(State(got): State<Shared>, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    let (json, _) = keep(&got, &headers, &body);
    let decoded = if json {
        serde_json::from_slice::<ExportMetricsServiceRequest>(&body).ok()
    } else {
        ExportMetricsServiceRequest::decode(body.as_ref()).ok()
    };
    let mut g = got.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(req) = decoded else {
        g.undecodable += 1;
        return (StatusCode::BAD_REQUEST, answer(json)).into_response();
    };
    for rm in req.resource_metrics {
        for sm in rm.scope_metrics {
            g.metrics.extend(sm.metrics);
        }
    }
    answer(json).into_response()
}

/// An attribute value as text (strings bare, arrays joined with `,`).
#[must_use]
pub fn value_text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    match v.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(n)) => n.to_string(),
        Some(Value::DoubleValue(n)) => n.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::ArrayValue(a)) => a
            .values
            .iter()
            .map(|v| value_text(Some(v)))
            .collect::<Vec<_>>()
            .join(","),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// A span's attribute as text, if it has it.
#[must_use]
pub fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| value_text(kv.value.as_ref()))
}

impl Receiver {
    /// Starts on a free loopback port.
    ///
    /// # Panics
    ///
    /// No port can be bound.
    pub async fn start() -> Self {
        #[expect(clippy::unwrap_used, reason = "test support")]
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        #[expect(clippy::unwrap_used, reason = "test support")]
        let url = format!("http://{}", listener.local_addr().unwrap());
        let got: Shared = Arc::default();
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(Arc::clone(&got));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, got, task }
    }

    /// What it was sent so far.
    #[must_use]
    pub fn received(&self) -> Received {
        self.got
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
