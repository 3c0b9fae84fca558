//! A webhook: the notification POSTed as JSON, or as a Slack message.

use std::time::Duration;

use serde_json::Value;

use crate::config::{WebhookConfig, WebhookFormat};
use crate::error::{ConfigError, Failure, chain};

/// One configured webhook.
#[derive(Debug, Clone)]
pub(crate) struct Webhook {
    url: reqwest::Url,
    format: WebhookFormat,
    client: reqwest::Client,
    /// How logs name it: the scheme and host only (a Slack webhook's path is its secret).
    name: String,
}

impl Webhook {
    pub(crate) fn new(
        index: usize,
        config: &WebhookConfig,
        timeout: Duration,
    ) -> Result<Self, ConfigError> {
        let field = || format!("notify.webhook[{index}].url");
        let url = reqwest::Url::parse(&config.url).map_err(|e| ConfigError {
            field: field(),
            message: format!("not a URL: {e}"),
        })?;
        let client = client_builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            // A webhook answers where it is; a redirect would carry the notification elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ConfigError {
                field: field(),
                message: format!("cannot make an HTTP client: {}", chain(&e)),
            })?;
        let format = match config.format {
            WebhookFormat::Json => "json",
            WebhookFormat::Slack => "slack",
        };
        let name = format!("webhook {index} ({format}, {})", host_of(&url));
        Ok(Self {
            url,
            format: config.format,
            client,
            name,
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) async fn send(&self, payload: &Value) -> Result<(), Failure> {
        let body = match self.format {
            WebhookFormat::Json => payload.clone(),
            WebhookFormat::Slack => crate::message::slack(payload),
        };
        let answer = self
            .client
            .post(self.url.clone())
            .json(&body)
            .send()
            .await
            // The URL may hold a secret: never in a message.
            .map_err(|e| Failure::transient(chain(&e.without_url())))?;
        let status = answer.status();
        if status.is_success() {
            return Ok(());
        }
        // A client error will not go away by itself; a timeout, throttling or a server error
        // may.
        let permanent = status.is_client_error() && !matches!(status.as_u16(), 408 | 425 | 429);
        Err(Failure {
            message: format!("answered HTTP {status}"),
            permanent,
        })
    }
}

/// `scheme://host[:port]`: what may be shown of a webhook's URL.
fn host_of(url: &reqwest::Url) -> String {
    format!(
        "{}://{}{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.port().map(|p| format!(":{p}")).unwrap_or_default()
    )
}

/// A webhook's URL as it may be shown (`orca config show`): its scheme and host, the rest —
/// path, query, user and password, where a webhook keeps its secret — as `/[redacted]`.
#[must_use]
pub fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) if u.path() == "/" && u.query().is_none() && u.username().is_empty() => host_of(&u),
        Ok(u) => format!("{}/[redacted]", host_of(&u)),
        Err(_) => "[redacted]".to_owned(),
    }
}

/// A reqwest client builder with ring installed as the process's rustls provider (once): reqwest
/// is built without a provider of its own (ADR 0053), and this crate depends on no orca crate
/// that would have installed it.
fn client_builder() -> reqwest::ClientBuilder {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Err only when a provider was installed first: that one serves.
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}

#[cfg(test)]
mod tests {
    /// reqwest has no provider of its own: a client built here must not depend on another
    /// crate having installed one first (it panicked: "No rustls crypto provider").
    #[test]
    fn a_webhook_client_builds_in_a_process_that_installed_no_provider() {
        assert!(super::client_builder().build().is_ok());
    }

    #[test]
    fn a_url_is_shown_to_its_host() {
        for (url, shown) in [
            (
                "https://hooks.slack.com/services/T0/B0/XXXX",
                "https://hooks.slack.com/[redacted]",
            ),
            ("http://127.0.0.1:9000/", "http://127.0.0.1:9000"),
            ("https://u:p@h.example/", "https://h.example/[redacted]"),
            ("https://h.example/?token=x", "https://h.example/[redacted]"),
            ("not a url SECRET", "[redacted]"),
        ] {
            assert_eq!(super::shown_url(url), shown);
        }
    }
}
