//! The HTTP client the OTLP exporters send through: the workspace's reqwest, driven on orca's
//! own tokio runtime (the SDK's export threads have none), with a time limit per request and
//! one warning for the first failure: a collector that is down, slow or refusing never stops or
//! slows the run, and is reported once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// What is known of the collector: nothing yet, it answered, or an export failed.
pub(crate) const UNKNOWN: u8 = 0;
pub(crate) const ANSWERED: u8 = 1;
pub(crate) const FAILED: u8 = 2;

#[derive(Debug, Clone)]
pub(crate) struct Client {
    inner: reqwest::Client,
    runtime: tokio::runtime::Handle,
    /// What is known of this signal's endpoint (traces and metrics apart: a collector that
    /// takes traces and refuses metrics must not cost the traces their flush).
    health: Arc<AtomicU8>,
    /// Whether the one warning was given (shared by the signals).
    warned: Arc<std::sync::atomic::AtomicBool>,
}

impl Client {
    pub(crate) fn new(
        inner: reqwest::Client,
        runtime: tokio::runtime::Handle,
        health: Arc<AtomicU8>,
        warned: Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        Self {
            inner,
            runtime,
            health,
            warned,
        }
    }

    fn warn_once(&self, url: &str, what: &str) {
        self.health.store(FAILED, Ordering::Relaxed);
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "telemetry: export to {url} failed ({what}); the run goes on, further export failures are not reported"
            );
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let url = request.uri().to_string();
        let request = reqwest::Request::try_from(request)?;
        let inner = self.inner.clone();
        let sent = self
            .runtime
            .spawn(async move {
                let response = inner.execute(request).await?;
                let status = response.status();
                let headers = response.headers().clone();
                let body = response.bytes().await?;
                Ok::<_, reqwest::Error>((status, headers, body))
            })
            .await;
        let (status, headers, body) = match sent {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                let what = if e.is_timeout() {
                    "no answer in time".to_owned()
                } else if e.is_connect() {
                    "cannot connect".to_owned()
                } else {
                    "request failed".to_owned()
                };
                self.warn_once(&url, &what);
                return Err(Box::new(e));
            }
            Err(e) => return Err(Box::new(e)),
        };
        if status.is_success() {
            let _ = self.health.compare_exchange(
                UNKNOWN,
                ANSWERED,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        } else {
            self.warn_once(&url, &format!("HTTP {status}"));
        }
        let mut response = Response::builder().status(status.as_u16());
        for (k, v) in &headers {
            response = response.header(k.as_str(), v.as_bytes());
        }
        Ok(response.body(body)?)
    }
}
