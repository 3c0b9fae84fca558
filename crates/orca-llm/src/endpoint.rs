//! What the three HTTP adapters share per endpoint: where it is, the model, the key and how it
//! is sent, the client, prices and streaming. One turn is [`Endpoint::turn`]: headers, post
//! (streamed or not), classify errors, parse, price.

use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::Value;

use crate::backend::ChatResponse;
use crate::error::BackendError;
use crate::http;
use crate::pricing::PriceTable;
use crate::secret::ApiKey;
use crate::stream::{self, Assemble, Framing, Streaming};

/// How the key travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Auth {
    /// `Authorization: Bearer KEY` (OpenAI and compatible servers).
    Bearer,
    /// `x-api-key: KEY` plus `anthropic-version` (Anthropic).
    Anthropic,
}

/// A model endpoint.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// Without a trailing `/`.
    pub(crate) base_url: String,
    pub(crate) model: String,
    api_key: Option<ApiKey>,
    auth: Auth,
    pub(crate) client: reqwest::Client,
    pub(crate) prices: PriceTable,
    pub(crate) streaming: Streaming,
}

/// How one wire format reads an answer.
pub(crate) struct Wire {
    /// Below the base URL (`/chat/completions`).
    pub(crate) path: &'static str,
    /// A non-streamed body.
    pub(crate) parse: fn(Value, &str) -> Result<ChatResponse, BackendError>,
    /// A fresh assembler of a streamed answer.
    pub(crate) assembler: fn() -> Box<dyn Assemble>,
    /// How the stream is cut into events.
    pub(crate) framing: Framing,
}

impl Endpoint {
    pub(crate) fn new(
        base_url: &str,
        model: &str,
        api_key: Option<ApiKey>,
        auth: Auth,
        timeout: Duration,
    ) -> Self {
        Self::with_client(base_url, model, api_key, auth, http::client(timeout))
    }

    /// An endpoint asked with `client` (roots, proxies and timeout already set).
    pub(crate) fn with_client(
        base_url: &str,
        model: &str,
        api_key: Option<ApiKey>,
        auth: Auth,
        client: reqwest::Client,
    ) -> Self {
        Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            model: model.to_owned(),
            api_key,
            auth,
            client,
            prices: PriceTable::shipped(),
            streaming: Streaming::OFF,
        }
    }

    fn headers(&self) -> Result<HeaderMap, BackendError> {
        let mut headers = HeaderMap::new();
        if self.auth == Auth::Anthropic {
            headers.insert(
                "anthropic-version",
                HeaderValue::from_static(crate::anthropic::ANTHROPIC_VERSION),
            );
        }
        let Some(key) = &self.api_key else {
            return Ok(headers);
        };
        let text = match self.auth {
            Auth::Bearer => format!("Bearer {}", key.expose()),
            Auth::Anthropic => key.expose().to_owned(),
        };
        let mut value = HeaderValue::from_str(&text).map_err(|_| BackendError::Auth {
            endpoint: self.base_url.clone(),
            status: 0,
            message: "the API key contains characters not allowed in a header".to_owned(),
        })?;
        value.set_sensitive(true);
        match self.auth {
            Auth::Bearer => headers.insert(AUTHORIZATION, value),
            Auth::Anthropic => headers.insert("x-api-key", value),
        };
        Ok(headers)
    }

    /// One model turn: `body` posted to the wire's path, the answer parsed (or assembled from
    /// the stream) and priced.
    pub(crate) async fn turn(
        &self,
        wire: &Wire,
        body: &Value,
    ) -> Result<ChatResponse, BackendError> {
        let url = format!("{}{}", self.base_url, wire.path);
        let mut headers = self.headers()?;
        crate::trace::insert(&mut headers);
        let endpoint = &self.base_url;
        let mut response = if self.streaming.enabled {
            stream::exchange(
                &self.client,
                &url,
                headers,
                body,
                endpoint,
                self.streaming.idle_timeout,
                wire,
            )
            .await?
        } else {
            crate::progress::turn_started();
            let json = http::post_json(&self.client, &url, headers, body, endpoint).await?;
            (wire.parse)(json, endpoint)?
        };
        response.usage = self.prices.priced(&self.model, response.usage);
        Ok(response)
    }
}

/// What every HTTP adapter (a struct with an `endpoint: Endpoint`, a `WIRE: Wire` and a
/// `request_body`) has in common: the price and streaming builders and the `ChatBackend`
/// impl, whose turn is [`Endpoint::turn`]. The body is `self.request_body(request)` unless
/// given as `|this, request| expression` (which may `.await`).
macro_rules! http_backend {
    ($ty:ident, $kind:literal) => {
        crate::endpoint::http_backend!($ty, $kind, |this, request| this.request_body(request));
    };
    ($ty:ident, $kind:literal, |$this:ident, $request:ident| $body:expr) => {
        impl $ty {
            /// Prices the usage of each turn with `prices` (default: the shipped table).
            #[must_use]
            pub fn with_prices(mut self, prices: crate::pricing::PriceTable) -> Self {
                self.endpoint.prices = prices;
                self
            }

            /// Asks through `client` (its TLS roots, proxies and timeout already set; see
            /// [`crate::Net`]) instead of a default one.
            #[must_use]
            pub fn with_client(mut self, client: reqwest::Client) -> Self {
                self.endpoint.client = client;
                self
            }

            /// Streams answers (`stream: true`) with an idle timeout, or not (the default).
            #[must_use]
            pub const fn with_streaming(mut self, streaming: crate::stream::Streaming) -> Self {
                self.endpoint.streaming = streaming;
                self
            }
        }

        #[async_trait::async_trait]
        impl crate::backend::ChatBackend for $ty {
            fn kind(&self) -> &str {
                $kind
            }

            fn model(&self) -> Option<&str> {
                Some(&self.endpoint.model)
            }

            async fn chat(
                &self,
                $request: &crate::backend::ChatRequest,
            ) -> Result<crate::backend::ChatResponse, crate::error::BackendError> {
                let $this = self;
                let body = $body;
                $this.endpoint.turn(&WIRE, &body).await
            }
        }
    };
}
pub(crate) use http_backend;

/// The `new` (default request timeout) and `with_timeout` constructors of an adapter whose
/// key travels as `$auth`; the adapter's `from_endpoint` fills in the rest.
macro_rules! timeout_constructors {
    ($ty:ident, $auth:expr, $base_url:literal) => {
        impl $ty {
            #[doc = concat!("A backend for `base_url` (", $base_url, "), with the default request timeout.")]
            #[must_use]
            pub fn new(
                base_url: &str,
                model: &str,
                api_key: Option<crate::secret::ApiKey>,
            ) -> Self {
                Self::with_timeout(base_url, model, api_key, crate::http::DEFAULT_REQUEST_TIMEOUT)
            }

            /// A backend with a request timeout.
            #[must_use]
            pub fn with_timeout(
                base_url: &str,
                model: &str,
                api_key: Option<crate::secret::ApiKey>,
                timeout: std::time::Duration,
            ) -> Self {
                Self::from_endpoint(crate::endpoint::Endpoint::new(
                    base_url, model, api_key, $auth, timeout,
                ))
            }
        }
    };
}
pub(crate) use timeout_constructors;
