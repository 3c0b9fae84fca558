//! Where and how to export: the standard `OTEL_*` variables over the config's `[telemetry]`
//! table. Export is on only when an endpoint is set and `OTEL_SDK_DISABLED` is not `true`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// A wrong setting: names the variable or field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// The variable (`OTEL_EXPORTER_OTLP_PROTOCOL`) or field (`[telemetry] protocol`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// The OTLP encoding over HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `http/protobuf` (the default).
    HttpProtobuf,
    /// `http/json`.
    HttpJson,
}

impl Protocol {
    /// The name the variable uses.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::HttpProtobuf => "http/protobuf",
            Self::HttpJson => "http/json",
        }
    }

    fn parse(text: &str, field: &str) -> Result<Self, ConfigError> {
        match text.trim() {
            "http/protobuf" => Ok(Self::HttpProtobuf),
            "http/json" => Ok(Self::HttpJson),
            "grpc" => Err(ConfigError {
                field: field.to_owned(),
                message: "grpc is not supported (orca exports OTLP over HTTP only, see ADR 0048): \
                          use http/protobuf (the default; a collector listens on port 4318) or \
                          http/json"
                    .to_owned(),
            }),
            other => Err(ConfigError {
                field: field.to_owned(),
                message: format!("{other:?} is not a protocol: use http/protobuf or http/json"),
            }),
        }
    }
}

/// Request headers (`OTEL_EXPORTER_OTLP_HEADERS`): they may hold credentials, so their values
/// are never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers(pub BTreeMap<String, String>);

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, "[redacted]")))
            .finish()
    }
}

impl Headers {
    /// The values, for the redactor to learn.
    #[must_use]
    pub fn values(&self) -> Vec<String> {
        self.0.values().filter(|v| !v.is_empty()).cloned().collect()
    }
}

/// The resolved export settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetrySettings {
    /// Where spans go (`…/v1/traces`).
    pub traces_endpoint: String,
    /// Where metrics go (`…/v1/metrics`).
    pub metrics_endpoint: String,
    /// The encoding.
    pub protocol: Protocol,
    /// Extra request headers (secret values).
    pub headers: Headers,
    /// `service.name` (`orca` by default).
    pub service_name: String,
    /// More resource attributes (`OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: BTreeMap<String, String>,
    /// Whether model answers and tool arguments/results go into spans (redacted and bounded as
    /// in the audit log); off by default.
    pub capture_content: bool,
    /// One request's time limit (`OTEL_EXPORTER_OTLP_TIMEOUT`, milliseconds; 10 s).
    pub timeout: Duration,
    /// How long the exit waits for the last export before abandoning it (2 s).
    pub flush_bound: Duration,
}

/// The `[telemetry]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default)]
    traces_endpoint: Option<String>,
    #[serde(default)]
    metrics_endpoint: Option<String>,
    #[serde(default)]
    protocol: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    service_name: Option<String>,
    #[serde(default)]
    resource_attributes: BTreeMap<String, String>,
    #[serde(default)]
    disabled: Option<bool>,
    #[serde(default)]
    capture_message_content: Option<bool>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// `k1=v1,k2=v2` (W3C baggage-like, values percent-decoded), as the OTel variables use.
fn parse_pairs(text: &str, field: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = part.split_once('=') else {
            return Err(ConfigError {
                field: field.to_owned(),
                // The value may be a credential: only its key side is named.
                message: format!(
                    "an entry without '=' (expected key=value,…) near {:?}",
                    part.chars().take(12).collect::<String>()
                ),
            });
        };
        out.insert(percent_decode(k.trim()), percent_decode(v.trim()));
    }
    Ok(out)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn truthy(text: &str) -> bool {
    text.trim().eq_ignore_ascii_case("true")
}

fn signal_url(base: &str, path: &str) -> String {
    format!("{}/{path}", base.trim_end_matches('/'))
}

fn check_url(url: &str, field: &str) -> Result<(), ConfigError> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(ConfigError {
            field: field.to_owned(),
            message: format!("{url:?} is not an http:// or https:// URL"),
        })
    }
}

/// The settings in force, or `None` when export is off (no endpoint, or disabled).
///
/// # Errors
///
/// A malformed table, protocol, header list or URL, named.
pub fn resolve(
    table: Option<&toml::Value>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<TelemetrySettings>, ConfigError> {
    let table: Table = match table {
        Some(v) => v
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError {
                field: "[telemetry]".to_owned(),
                message: e.message().trim().to_owned(),
            })?,
        None => Table::default(),
    };
    let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let disabled = env("OTEL_SDK_DISABLED").map_or(table.disabled.unwrap_or(false), |v| truthy(&v));
    if disabled {
        return Ok(None);
    }
    // Each URL with the variable or field it came from, for errors.
    let named = |var: &str, field: &str, from_table: Option<String>| {
        env(var)
            .map(|v| (v, var.to_owned()))
            .or_else(|| from_table.map(|v| (v, format!("[telemetry] {field}"))))
    };
    let base = named("OTEL_EXPORTER_OTLP_ENDPOINT", "endpoint", table.endpoint);
    if let Some((url, field)) = &base {
        check_url(url, field)?;
    }
    let base = base.map(|(url, _)| url);
    let traces = named(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "traces_endpoint",
        table.traces_endpoint,
    );
    let metrics = named(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "metrics_endpoint",
        table.metrics_endpoint,
    );
    for (url, field) in traces.iter().chain(&metrics) {
        check_url(url, field)?;
    }
    let traces = traces
        .map(|(url, _)| url)
        .or_else(|| base.as_deref().map(|b| signal_url(b, "v1/traces")));
    let metrics = metrics
        .map(|(url, _)| url)
        .or_else(|| base.as_deref().map(|b| signal_url(b, "v1/metrics")));
    if traces.is_none() && metrics.is_none() {
        return Ok(None);
    }
    // A signal without its own endpoint goes next to the other's.
    let traces_endpoint = traces
        .clone()
        .or_else(|| {
            metrics
                .as_deref()
                .map(|m| m.replace("/v1/metrics", "/v1/traces"))
        })
        .unwrap_or_default();
    let metrics_endpoint = metrics
        .or_else(|| {
            traces
                .as_deref()
                .map(|t| t.replace("/v1/traces", "/v1/metrics"))
        })
        .unwrap_or_default();
    let protocol = match env("OTEL_EXPORTER_OTLP_PROTOCOL") {
        Some(p) => Protocol::parse(&p, "OTEL_EXPORTER_OTLP_PROTOCOL")?,
        None => match table.protocol.as_deref() {
            Some(p) => Protocol::parse(p, "[telemetry] protocol")?,
            None => Protocol::HttpProtobuf,
        },
    };
    let mut headers = table.headers;
    if let Some(h) = env("OTEL_EXPORTER_OTLP_HEADERS") {
        headers.extend(parse_pairs(&h, "OTEL_EXPORTER_OTLP_HEADERS")?);
    }
    let mut resource = table.resource_attributes;
    if let Some(r) = env("OTEL_RESOURCE_ATTRIBUTES") {
        resource.extend(parse_pairs(&r, "OTEL_RESOURCE_ATTRIBUTES")?);
    }
    let service_name = env("OTEL_SERVICE_NAME")
        .or(table.service_name)
        .or_else(|| resource.get("service.name").cloned())
        .unwrap_or_else(|| "orca".to_owned());
    let capture_content = env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .map_or(table.capture_message_content.unwrap_or(false), |v| {
            truthy(&v)
        });
    let timeout_ms = match env("OTEL_EXPORTER_OTLP_TIMEOUT") {
        Some(t) => t.trim().parse::<u64>().map_err(|_| ConfigError {
            field: "OTEL_EXPORTER_OTLP_TIMEOUT".to_owned(),
            message: format!("{t:?} is not a number of milliseconds"),
        })?,
        None => table.timeout_ms.unwrap_or(10_000),
    };
    Ok(Some(TelemetrySettings {
        traces_endpoint,
        metrics_endpoint,
        protocol,
        headers: Headers(headers),
        service_name,
        resource,
        capture_content,
        timeout: Duration::from_millis(timeout_ms.max(1)),
        flush_bound: Duration::from_secs(2),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn off_without_an_endpoint_or_when_disabled() {
        assert_eq!(resolve(None, &env_of(&[])), Ok(None));
        let on = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")];
        assert!(resolve(None, &env_of(&on)).unwrap().is_some());
        let off = [on[0], ("OTEL_SDK_DISABLED", "true")];
        assert_eq!(resolve(None, &env_of(&off)), Ok(None));
    }

    #[test]
    fn variables_over_the_table_and_signal_paths() {
        let table: toml::Value = toml::from_str(
            "endpoint = \"http://collector:4318/\"\nprotocol = \"http/json\"\nservice_name = \"x\"\n[headers]\nauthorization = \"Bearer table\"\n",
        )
        .unwrap();
        let s = resolve(
            Some(&table),
            &env_of(&[
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "authorization=Bearer%20env,x-a=b",
                ),
                ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:1/custom"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.traces_endpoint, "http://collector:4318/v1/traces");
        assert_eq!(s.metrics_endpoint, "http://m:1/custom");
        assert_eq!(s.protocol, Protocol::HttpJson);
        assert_eq!(s.service_name, "x");
        assert_eq!(s.headers.0["authorization"], "Bearer env");
        assert!(!format!("{s:?}").contains("Bearer"), "{s:?}");
    }

    #[test]
    fn grpc_and_nonsense_are_refused_by_name() {
        let e = resolve(
            None,
            &env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ]),
        )
        .unwrap_err();
        assert_eq!(e.field, "OTEL_EXPORTER_OTLP_PROTOCOL");
        assert!(e.message.contains("http/protobuf"), "{e}");
        let table: toml::Value = toml::from_str("endpoint = \"localhost:4318\"").unwrap();
        let e = resolve(Some(&table), &env_of(&[])).unwrap_err();
        assert!(e.to_string().contains("not an http"), "{e}");
        assert_eq!(e.field, "[telemetry] endpoint");
        let table: toml::Value = toml::from_str("endpont = \"http://x\"").unwrap();
        assert!(resolve(Some(&table), &env_of(&[])).is_err());
    }
}
