//! `orca doctor`'s telemetry check: whether traces and metrics are exported, where to, and
//! whether the collector answers (an empty export request, without the configured headers: any
//! HTTP answer proves it is there, and no credential leaves the machine).

use serde_json::Value;

use super::live::{Level, PROBE_TIMEOUT, judged};

pub(super) async fn check(table: Option<&toml::Value>) -> Value {
    let what = "telemetry export".to_owned();
    let settings = match crate::telemetry::settings(table) {
        Ok(Some(s)) => s,
        Ok(None) => {
            return judged(
                what,
                Level::Ok,
                "off (set OTEL_EXPORTER_OTLP_ENDPOINT or `[telemetry] endpoint` to export traces and metrics)".to_owned(),
                None,
            );
        }
        Err(e) => {
            return judged(
                what,
                Level::Problem,
                e.message,
                Some("fix the OTEL_* variable or `[telemetry]` setting named".to_owned()),
            );
        }
    };
    let on = format!(
        "on: {} to {} (traces) and {} (metrics), service {:?}, message content {}",
        settings.protocol.name(),
        settings.traces_endpoint,
        settings.metrics_endpoint,
        settings.service_name,
        if settings.capture_content {
            "captured (redacted)"
        } else {
            "not captured"
        },
    );
    let answer = orca_telemetry::probe(&settings, PROBE_TIMEOUT).await;
    match answer {
        Ok(status) => judged(what, Level::Ok, format!("{on}; the collector answers (HTTP {status})"), None),
        Err(e) => judged(
            what,
            // Export never stops a run: a collector that is not there costs the traces, not the run.
            Level::Warning,
            format!(
                "{on}; the collector does not answer ({})",
                e
            ),
            Some("start the collector (for example `docker run -p 4318:4318 otel/opentelemetry-collector`), or fix OTEL_EXPORTER_OTLP_ENDPOINT, or unset it to turn export off".to_owned()),
        ),
    }
}
