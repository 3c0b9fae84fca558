//! What the HTTP adapters share: the client, posting JSON, and classifying errors.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::error::BackendError;

/// The default time limit of one HTTP request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// A reqwest client builder whose TLS uses ring, rustls's crypto provider for the whole
/// process (installed once, here, as the process default: reqwest is built without one of
/// its own, so that one provider serves the model backends, the telemetry exporter, the
/// PostgreSQL store and the web server). Every HTTP client orca builds starts here.
pub fn client_builder() -> reqwest::ClientBuilder {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Err only when another provider was installed first: that one serves, as it should.
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}

/// The client of a backend built directly (`OpenAiBackend::new`…), outside a config: the
/// system's roots and reqwest's own reading of the proxy variables. Agents built from a
/// config get theirs from [`crate::net::Net::client`] instead (a `ca_file`, explicit proxies).
/// If the system's roots cannot be loaded, https requests fail with a certificate error (and a
/// warning says why) rather than the whole client silently becoming another one.
pub(crate) fn client(timeout: Duration) -> reqwest::Client {
    let builder = || {
        client_builder()
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(10))
    };
    builder().build().unwrap_or_else(|err| {
        tracing::warn!(
            "the system's root certificates could not be loaded ({}); https model endpoints will fail",
            crate::net::error_chain(&err)
        );
        builder()
            .tls_certs_only([])
            .build()
            .unwrap_or_else(|_| reqwest::Client::new())
    })
}

/// Asks `url` with a GET carrying no credentials (`orca doctor`), through `net` (the agent's
/// roots and proxy): the HTTP status of any answer (a 401 too: the endpoint is reachable), or
/// one line saying why there was none (a certificate not trusted is said so).
///
/// # Errors
///
/// No answer within `timeout`, no connection, or a client that cannot be built.
pub async fn probe(net: &crate::net::Net, url: &str, timeout: Duration) -> Result<u16, String> {
    let client = net.client(timeout).map_err(|e| e.to_string())?;
    match client.get(url).send().await {
        Ok(resp) => Ok(resp.status().as_u16()),
        Err(e) if e.is_timeout() => Err(format!("no answer within {}s", timeout.as_secs())),
        Err(e) if e.is_connect() => Err(crate::net::connect_failure(&e)),
        Err(e) => Err(shorten(&crate::net::error_chain(&e), 200)),
    }
}

/// Posts `body` and returns the JSON response, or a classified error. Header values are never
/// logged (they carry keys).
pub(crate) async fn post_json(
    client: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    body: &Value,
    endpoint: &str,
) -> Result<Value, BackendError> {
    tracing::debug!(endpoint, "model request");
    let headers_sent = headers.clone();
    let response = client
        .post(url)
        .headers(headers)
        .json(body)
        .send()
        .await
        .map_err(|e| transport_error(&e, endpoint))?;
    let status = response.status().as_u16();
    let retry_after = retry_after(response.headers());
    let text = response
        .text()
        .await
        .map_err(|e| transport_error(&e, endpoint))?;
    // A provider may echo the key it refused: no body text leaves here unredacted.
    let text = body_redactor(&headers_sent).redact(&text);
    if !(200..300).contains(&status) {
        return Err(classify(status, retry_after, &text, endpoint));
    }
    json_body(&text, endpoint)
}

/// A response body as JSON.
pub(crate) fn json_body(text: &str, endpoint: &str) -> Result<Value, BackendError> {
    serde_json::from_str(text).map_err(|e| BackendError::InvalidResponse {
        endpoint: endpoint.to_owned(),
        message: format!("the body is not JSON ({e}): {}", shorten(text, 200)),
    })
}

/// A redactor knowing the credentials sent in `headers` (`Authorization`, `x-api-key`…).
pub(crate) fn body_redactor(headers: &HeaderMap) -> orca_core::redact::Redactor {
    let mut secrets = Vec::new();
    for (name, value) in headers {
        if (orca_core::redact::is_secret_key(name.as_str()) || name.as_str() == "api-key")
            && let Ok(v) = value.to_str()
        {
            secrets.push(v.to_owned());
            if let Some((_, token)) = v.split_once(' ') {
                secrets.push(token.to_owned());
            }
        }
    }
    orca_core::redact::Redactor::new().with_secrets(secrets)
}

pub(crate) fn transport_error(err: &reqwest::Error, endpoint: &str) -> BackendError {
    if err.is_timeout() {
        BackendError::Timeout {
            endpoint: endpoint.to_owned(),
        }
    } else if err.is_connect() {
        crate::net::connect_error(err, endpoint)
    } else if err.is_decode() || err.is_body() {
        BackendError::InvalidResponse {
            endpoint: endpoint.to_owned(),
            message: "the response body could not be read".to_owned(),
        }
    } else {
        BackendError::Unreachable {
            endpoint: endpoint.to_owned(),
            message: "the request could not be sent".to_owned(),
        }
    }
}

/// `retry-after` (seconds) or `retry-after-ms`.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .get(name)?
            .to_str()
            .ok()
            .map(str::trim)
            .map(str::to_owned)
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let secs = get("retry-after")?.parse::<f64>().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// Classifies a non-2xx response.
pub(crate) fn classify(
    status: u16,
    retry_after: Option<Duration>,
    body: &str,
    endpoint: &str,
) -> BackendError {
    let endpoint = endpoint.to_owned();
    let message = error_message(body);
    let lower = body.to_ascii_lowercase();
    let quota = lower.contains("insufficient_quota")
        || lower.contains("billing")
        || lower.contains("credit balance")
        || lower.contains("exceeded your current quota");
    match status {
        401 | 403 => BackendError::Auth {
            endpoint,
            status,
            message,
        },
        429 if quota => BackendError::Quota { endpoint, message },
        429 => BackendError::RateLimited {
            endpoint,
            message,
            retry_after,
        },
        529 => BackendError::Overloaded {
            endpoint,
            message,
            retry_after,
        },
        500..=599 => BackendError::Server {
            endpoint,
            status,
            message,
            retry_after,
        },
        _ if quota => BackendError::Quota { endpoint, message },
        400 | 413 | 422 if is_context_length(&lower) => {
            BackendError::ContextLength { endpoint, message }
        }
        _ => BackendError::Refused {
            endpoint,
            status,
            message,
        },
    }
}

/// Context-length refusals as OpenAI, Anthropic, vLLM, llama.cpp and Ollama word them.
fn is_context_length(lower_body: &str) -> bool {
    [
        "context_length_exceeded",
        "maximum context length",
        "context length",
        "context window",
        "exceeds the available context size",
        "prompt is too long",
        "too many tokens",
    ]
    .iter()
    .any(|m| lower_body.contains(m))
}

/// The provider's error message from a body: `error.message`, `message`, or the shortened text.
fn error_message(body: &str) -> String {
    let trimmed = body.trim_start();
    if trimmed.starts_with('<') {
        return format!("an HTML error page ({} bytes)", body.len());
    }
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let m = v
            .pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("error"))
            .and_then(Value::as_str);
        if let Some(m) = m {
            return shorten(m, 300);
        }
    }
    if trimmed.is_empty() {
        return "empty body".to_owned();
    }
    shorten(trimmed, 300)
}

/// At most `max` characters of `text`, on one line (control characters become spaces), so an
/// error quoting a body stays one line.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    let one_line = |c: char| if c.is_control() { ' ' } else { c };
    if text.chars().count() <= max {
        return text.chars().map(one_line).collect();
    }
    let mut s: String = text.chars().take(max).map(one_line).collect();
    s.push('…');
    s
}

/// A JSON answer read as the adapter's wire type; a body of another shape is an invalid
/// response naming what did not fit.
///
/// # Errors
///
/// The body does not have the shape of `T`.
pub(crate) fn decode_shape<T: serde::de::DeserializeOwned>(
    body: serde_json::Value,
    endpoint: &str,
) -> Result<T, BackendError> {
    serde_json::from_value(body).map_err(|e| BackendError::InvalidResponse {
        endpoint: endpoint.to_owned(),
        message: format!("unexpected response shape: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(status: u16, body: &str, expect: &str, retryable: bool) {
        let e = classify(status, None, body, "http://x");
        let name = format!("{e:?}");
        assert!(name.starts_with(expect), "{status} {body}: got {name}");
        assert_eq!(e.is_retryable(), retryable, "{name}");
    }

    #[test]
    fn classification() {
        check(
            429,
            r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
            "RateLimited",
            true,
        );
        check(
            429,
            r#"{"error":{"message":"You exceeded your current quota","code":"insufficient_quota"}}"#,
            "Quota",
            false,
        );
        check(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            "Overloaded",
            true,
        );
        check(500, "<html><body>Bad gateway</body></html>", "Server", true);
        check(503, "", "Server", true);
        check(401, r#"{"error":{"message":"bad key"}}"#, "Auth", false);
        check(403, "forbidden", "Auth", false);
        check(
            400,
            r#"{"error":{"message":"Your credit balance is too low"}}"#,
            "Quota",
            false,
        );
        check(
            400,
            r#"{"error":{"message":"bad request"}}"#,
            "Refused",
            false,
        );
        check(
            400,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","code":"context_length_exceeded"}}"#,
            "ContextLength",
            false,
        );
        check(
            400,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#,
            "ContextLength",
            false,
        );
        check(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
            "ContextLength",
            false,
        );
        let html = classify(502, None, "<!DOCTYPE html><html>…</html>", "http://x");
        assert!(html.to_string().contains("HTML error page"), "{html}");
    }

    #[test]
    fn retry_after_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), None);
    }
}
