//! The exporter: a batch span processor with a bounded queue and a periodic metric reader, both
//! sending OTLP over HTTP through [`crate::client::Client`]; shut down with a bound.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanProcessor as _,
};

use crate::client::Client;
use crate::config::{Protocol, TelemetrySettings};
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
}

fn protocol(p: Protocol) -> opentelemetry_otlp::Protocol {
    match p {
        Protocol::HttpProtobuf => opentelemetry_otlp::Protocol::HttpBinary,
        Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
    }
}

impl Telemetry {
    /// Starts the exporters (nothing is sent until spans or metrics are recorded).
    ///
    /// # Errors
    ///
    /// The HTTP client or an exporter cannot be built (a message naming the endpoint).
    pub fn start(
        settings: TelemetrySettings,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(3)))
            .build()
            .map_err(|e| format!("telemetry: cannot build the HTTP client: {e}"))?;
        let warned = Arc::new(AtomicBool::new(false));
        let client = Client::new(http, runtime, warned);
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
            .with_http_client(client)
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
                    .with_interval(Duration::from_secs(30))
                    .build(),
            )
            .build();
        let instruments = Instruments::new(&meters.meter("orca"));
        Ok(Self {
            inner: Arc::new(Inner {
                settings,
                spans,
                meters,
                instruments,
            }),
        })
    }

    /// The settings in force.
    #[must_use]
    pub fn settings(&self) -> &TelemetrySettings {
        &self.inner.settings
    }

    /// Queues spans (and their metrics) for export; never blocks (a full queue drops them).
    pub fn record(&self, spans: Vec<SpanData>) {
        self.inner.instruments.record(&spans);
        for span in spans {
            self.inner.spans.on_end(span);
        }
    }

    /// Sends what is queued, waiting at most the flush bound (2 s); what is not sent by then is
    /// abandoned.
    pub async fn shutdown(&self) {
        let inner = Arc::clone(&self.inner);
        let bound = inner.settings.flush_bound;
        let flushing = tokio::task::spawn_blocking(move || {
            let _ = inner.spans.shutdown_with_timeout(bound);
            let _ = inner.meters.shutdown_with_timeout(bound);
        });
        // Both waits are bounded; this one too in case either is not.
        let _ = tokio::time::timeout(bound * 2 + Duration::from_millis(200), flushing).await;
    }
}
