//! The exporter: a batch span processor with a bounded queue and a periodic metric reader, both
//! sending OTLP over HTTP through [`crate::client::Client`]; shut down with a bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanProcessor as _,
};

use crate::client::{self, Client};
use crate::config::{Protocol, TelemetrySettings};
use crate::ledger::{Acking, Ledger};
use crate::metrics::Instruments;

/// Spans queued at most before new ones are dropped (bounded memory when the collector is
/// down).
const MAX_QUEUE: usize = 2048;

/// Export in progress for this process. Cheap to share (`Arc` inside).
#[derive(Debug, Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: TelemetrySettings,
    spans: BatchSpanProcessor,
    meters: SdkMeterProvider,
    instruments: Instruments,
    health: Arc<AtomicU8>,
    metrics_health: Arc<AtomicU8>,
    started: std::time::Instant,
    /// Where following an execution starts, when this process wrote to its log before driving
    /// it (`exec decide`): the last `seq` before that write.
    marks: std::sync::Mutex<std::collections::BTreeMap<orca_core::ExecutionId, Option<u64>>>,
    /// What the collector acknowledged, per execution.
    ledger: Arc<Ledger>,
    /// Held while spans are counted and queued, so the count matches the queue's order.
    queueing: std::sync::Mutex<()>,
}

fn protocol(p: Protocol) -> opentelemetry_otlp::Protocol {
    match p {
        Protocol::HttpProtobuf => opentelemetry_otlp::Protocol::HttpBinary,
        Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
    }
}

impl Telemetry {
    /// Starts the exporters (nothing is sent until spans or metrics are recorded). `marks`: the
    /// directory where what the collector acknowledged of each execution is kept, so the next
    /// process that follows it sends what this one could not (`None`: not kept).
    ///
    /// # Errors
    ///
    /// The HTTP client or an exporter cannot be built (a message naming the endpoint).
    pub fn start(
        settings: TelemetrySettings,
        runtime: tokio::runtime::Handle,
        marks: Option<std::path::PathBuf>,
    ) -> Result<Self, String> {
        tracing::debug!("telemetry: starting");
        let http = orca_llm::http_client_builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(3)))
            .build()
            .map_err(|e| format!("telemetry: cannot build the HTTP client: {e}"))?;
        let health = Arc::new(AtomicU8::new(client::UNKNOWN));
        let metrics_health = Arc::new(AtomicU8::new(client::UNKNOWN));
        let warned = Arc::default();
        let client = Client::new(
            http.clone(),
            runtime.clone(),
            Arc::clone(&health),
            Arc::clone(&warned),
        );
        let metrics_client = Client::new(http, runtime, Arc::clone(&metrics_health), warned);
        let headers: std::collections::HashMap<String, String> = settings
            .headers
            .0
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let span_exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client.clone())
            .with_protocol(protocol(settings.protocol))
            .with_endpoint(settings.traces_endpoint.clone())
            .with_headers(headers.clone())
            .with_timeout(settings.timeout)
            .build()
            .map_err(|e| format!("telemetry: {}: {e}", settings.traces_endpoint))?;
        let metric_exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_http_client(metrics_client)
            .with_protocol(protocol(settings.protocol))
            .with_endpoint(settings.metrics_endpoint.clone())
            .with_headers(headers)
            .with_timeout(settings.timeout)
            .build()
            .map_err(|e| format!("telemetry: {}: {e}", settings.metrics_endpoint))?;
        let resource = Resource::builder_empty()
            .with_service_name(settings.service_name.clone())
            .with_attributes(
                settings
                    .resource
                    .iter()
                    .filter(|(k, _)| k.as_str() != "service.name")
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
            )
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let ledger = Arc::new(Ledger::new(marks));
        let span_exporter = Acking {
            inner: span_exporter,
            ledger: Arc::clone(&ledger),
        };
        let mut spans = BatchSpanProcessor::builder(span_exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(MAX_QUEUE)
                    .with_scheduled_delay(Duration::from_secs(1))
                    .build(),
            )
            .build();
        spans.set_resource(&resource);
        let meters = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_reader(
                PeriodicReader::builder(metric_exporter)
                    .with_interval(Duration::from_secs(10))
                    .build(),
            )
            .build();
        // One empty export request at once, so that by the exit it is known whether the
        // collector answers (a run is never made to wait for it).
        let started = std::time::Instant::now();
        let warm_up = client.clone();
        let (url, content_type) = (
            settings.traces_endpoint.clone(),
            match settings.protocol {
                Protocol::HttpProtobuf => "application/x-protobuf",
                Protocol::HttpJson => "application/json",
            },
        );
        let mut request = opentelemetry_http::Request::builder()
            .method("POST")
            .uri(url)
            .header("content-type", content_type);
        for (k, v) in &settings.headers.0 {
            request = request.header(k.as_str(), v.as_str());
        }
        let body = if settings.protocol == Protocol::HttpJson {
            opentelemetry_http::Bytes::from_static(b"{}")
        } else {
            opentelemetry_http::Bytes::new()
        };
        if let Ok(request) = request.body(body) {
            tokio::spawn(async move {
                use opentelemetry_http::HttpClient as _;
                let _ = warm_up.send_bytes(request).await;
            });
        }
        let instruments = Instruments::new(&meters.meter("orca"));
        tracing::debug!("telemetry: started");
        Ok(Self {
            inner: Arc::new(Inner {
                settings,
                spans,
                meters,
                instruments,
                health,
                metrics_health,
                started,
                marks: std::sync::Mutex::default(),
                ledger,
                queueing: std::sync::Mutex::default(),
            }),
        })
    }

    /// The settings in force.
    #[must_use]
    pub fn settings(&self) -> &TelemetrySettings {
        &self.inner.settings
    }

    /// Marks where following `exec` starts: `last`, the last `seq` of its log before this
    /// process writes to it (the first mark of an execution wins).
    pub fn mark(&self, exec: orca_core::ExecutionId, last: Option<u64>) {
        let mut marks = self
            .inner
            .marks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        marks.entry(exec).or_insert(last);
    }

    /// The mark of `exec`, if this process set one.
    pub(crate) fn mark_of(&self, exec: orca_core::ExecutionId) -> Option<Option<u64>> {
        self.inner
            .marks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&exec)
            .copied()
    }

    /// Counts decisions asked (`+1` each) and answered (`-1` each) since the last call.
    pub fn decisions(&self, delta: i64) {
        self.inner.instruments.decisions(delta);
    }

    /// When `exec`'s oldest open decision was asked (`None`: none is open), for the age of
    /// the decisions pending.
    pub fn open_decision(
        &self,
        exec: orca_core::ExecutionId,
        asked: Option<std::time::SystemTime>,
    ) {
        self.inner.instruments.open_decision(exec, asked);
    }

    /// Queues spans (and their metrics) for export; never blocks (a full queue drops them).
    pub fn record(&self, spans: Vec<SpanData>) {
        self.queue(None, spans);
    }

    /// Queues the spans of `exec`'s log up to `seq`: once all are exported, the next process
    /// that follows `exec` starts after `seq` ([`Telemetry::acknowledged`]).
    pub fn record_window(&self, exec: orca_core::ExecutionId, seq: u64, spans: Vec<SpanData>) {
        self.queue(Some((exec, seq)), spans);
    }

    fn queue(&self, window: Option<(orca_core::ExecutionId, u64)>, spans: Vec<SpanData>) {
        self.inner.instruments.record(&spans);
        let _order = self
            .inner
            .queueing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.inner.ledger.queued(window, spans.len());
        for span in spans {
            self.inner.spans.on_end(span);
        }
    }

    /// The `seq` of `exec`'s log up to which every span was acknowledged by the collector, by
    /// this process or an earlier one.
    #[must_use]
    pub fn acknowledged(&self, exec: orca_core::ExecutionId) -> Option<u64> {
        self.inner.ledger.acknowledged(exec)
    }

    /// Sends what is queued, waiting at most the flush bound (2 s) for a collector that has
    /// answered, until a second after the start for one that has not answered yet, and not at
    /// all for one that failed: what is not sent by then is abandoned, so a collector that is
    /// down or hanging costs the exit almost nothing. Traces and metrics are judged apart (a
    /// collector that refuses metrics still gets the last spans).
    pub async fn shutdown(&self) {
        let inner = Arc::clone(&self.inner);
        let span_health = inner.health.load(Ordering::Relaxed);
        // Metrics not sent yet: judged by what the traces' endpoint did.
        let metric_health = match inner.metrics_health.load(Ordering::Relaxed) {
            client::UNKNOWN => span_health,
            known => known,
        };
        let (span_bound, metric_bound) = (self.bound(span_health), self.bound(metric_health));
        tracing::debug!(?span_bound, ?metric_bound, "telemetry: flushing");
        let other = Arc::clone(&inner);
        // Spans and metrics flush side by side, each within its bound, on threads of their own:
        // a flush still waiting when the bound passes is left behind (the process's exit ends
        // it), never waited for by the runtime's shutdown.
        let spans = detached(move || {
            let _ = inner.spans.shutdown_with_timeout(span_bound);
        });
        let meters = detached(move || {
            let _ = other.meters.shutdown_with_timeout(metric_bound);
        });
        // Each done when flushed, its bound passed, or an export of it failed meanwhile (the
        // rest would fail too: abandoned at once).
        let wait = |done: tokio::sync::oneshot::Receiver<()>, bound, health: Arc<AtomicU8>| async move {
            let failed = async {
                while health.load(Ordering::Relaxed) != client::FAILED {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            };
            let _ = tokio::time::timeout(bound + Duration::from_millis(20), async {
                tokio::select! {
                    _ = done => {}
                    () = failed => {}
                }
            })
            .await;
        };
        tokio::join!(
            wait(spans, span_bound, Arc::clone(&self.inner.health)),
            wait(meters, metric_bound, Arc::clone(&self.inner.metrics_health)),
        );
        tracing::debug!("telemetry: flushed or abandoned");
    }

    /// How long the exit waits for a signal whose endpoint is in `health`.
    fn bound(&self, health: u8) -> Duration {
        match health {
            client::ANSWERED => self.inner.settings.flush_bound,
            client::FAILED => Duration::from_millis(1),
            // Not answered yet: a collector that has not answered the first request within a
            // second hangs; what is left of that second is the bound.
            _ => Duration::from_secs(1)
                .saturating_sub(self.inner.started.elapsed())
                .max(Duration::from_millis(1)),
        }
    }
}

/// Asks the traces endpoint whether it is there: an empty export request, without the
/// configured headers (no credential leaves the machine; a 401 proves it is there too).
/// `Ok(status)` for any HTTP answer, else what went wrong.
///
/// # Errors
///
/// No HTTP answer within `timeout`.
pub async fn probe(settings: &TelemetrySettings, timeout: Duration) -> Result<u16, String> {
    let (content_type, body) = match settings.protocol {
        Protocol::HttpProtobuf => ("application/x-protobuf", Vec::new()),
        Protocol::HttpJson => ("application/json", b"{}".to_vec()),
    };
    let client = orca_llm::http_client_builder()
        .timeout(timeout)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    match client
        .post(&settings.traces_endpoint)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
    {
        Ok(r) => Ok(r.status().as_u16()),
        Err(e) if e.is_timeout() => Err("no answer in time".to_owned()),
        Err(_) => Err("cannot connect".to_owned()),
    }
}

/// Runs `f` on a thread of its own; the receiver answers once it returned (or at once when no
/// thread could be started: the sender is dropped with the closure).
fn detached(f: impl FnOnce() + Send + 'static) -> tokio::sync::oneshot::Receiver<()> {
    let (done, finished) = tokio::sync::oneshot::channel();
    let _ = std::thread::Builder::new()
        .name("orca-telemetry-flush".to_owned())
        .spawn(move || {
            f();
            let _ = done.send(());
        });
    finished
}
