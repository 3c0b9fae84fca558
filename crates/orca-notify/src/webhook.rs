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
        let client = reqwest::Client::builder()
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
        let name = format!(
            "webhook {index} ({format}, {}://{}{})",
            url.scheme(),
            url.host_str().unwrap_or(""),
            url.port().map(|p| format!(":{p}")).unwrap_or_default()
        );
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
