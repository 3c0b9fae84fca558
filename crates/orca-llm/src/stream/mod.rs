//! Streamed model answers: reading a `text/event-stream` response with an idle timeout,
//! reporting progress, and assembling the events of each wire format into the same
//! [`ChatResponse`] the non-streaming body gives (each assembler rebuilds that body and hands
//! it to its adapter's parser, so the two paths cannot drift apart).

pub(crate) mod chat;
pub(crate) mod messages;
pub(crate) mod ndjson;
pub(crate) mod ollama;
pub(crate) mod responses;
pub(crate) mod sse;

use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;

use crate::backend::ChatResponse;
use crate::endpoint::Wire;
use crate::error::BackendError;
use crate::http;
use ndjson::NdjsonParser;
use sse::{SseEvent, SseParser};

/// How an endpoint is asked: streamed or not, and how long a stream may stay silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Streaming {
    /// Ask for a streamed answer (`stream: true`).
    pub enabled: bool,
    /// A stream that sends nothing for this long is given up (not re-sent).
    pub idle_timeout: Duration,
}

/// The default idle timeout of a stream.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

impl Streaming {
    /// Streaming on, with the default idle timeout.
    pub const ON: Self = Self {
        enabled: true,
        idle_timeout: DEFAULT_IDLE_TIMEOUT,
    };
    /// Streaming off: one JSON body per turn.
    pub const OFF: Self = Self {
        enabled: false,
        idle_timeout: DEFAULT_IDLE_TIMEOUT,
    };
}

/// What an event did to the answer.
pub(crate) enum Flow {
    /// More is coming.
    More,
    /// The answer is complete (the rest of the stream is not read).
    Done,
}

/// An error the server reported inside the stream.
pub(crate) struct StreamFailure {
    /// The provider's error type or code (`overloaded_error`, `rate_limit_exceeded`…).
    pub(crate) kind: Option<String>,
    /// The provider's message.
    pub(crate) message: String,
}

impl StreamFailure {
    /// From an `{"error": {"type"|"code", "message"}}` object (or one at the top level).
    pub(crate) fn from_json(v: &Value) -> Self {
        let e = v.get("error").filter(|e| e.is_object()).unwrap_or(v);
        let kind = e
            .get("type")
            .or_else(|| e.get("code"))
            .and_then(Value::as_str)
            .filter(|k| *k != "error")
            .map(str::to_owned);
        let message = e
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| http::shorten(&e.to_string(), 300), str::to_owned);
        Self { kind, message }
    }
}

/// The kind of a failure that is a malformed stream, not a provider's error.
pub(crate) const INVALID: &str = "orca_invalid_stream";

/// Builds one wire format's answer from its events.
pub(crate) trait Assemble: Send {
    /// Takes one event.
    ///
    /// # Errors
    ///
    /// The server reported an error in the stream, or an event does not parse.
    fn event(&mut self, event: &SseEvent) -> Result<Flow, StreamFailure>;

    /// The output so far.
    fn produced(&self) -> Produced;

    /// Whether the answer so far ends in a generation loop (its text, or the arguments of its
    /// last tool call). Formats that do not say keep streaming to the cap.
    fn looping(&self) -> Option<crate::repetition::Loop> {
        None
    }

    /// Ends the answer here: as if cut at the output cap (`finish_reason` "length"), or, `cut`
    /// false, as if the model had stopped (what it repeats is whitespace: the answer is over).
    fn end(&mut self, cut: bool) {
        let _ = cut;
    }

    /// The answer, as the non-streaming body would have given it.
    ///
    /// # Errors
    ///
    /// The stream ended before the answer was complete, or its parts do not fit together.
    fn finish(self: Box<Self>, endpoint: &str) -> Result<ChatResponse, BackendError>;
}

/// A fresh assembler, boxed (what [`crate::endpoint::Wire`] keeps).
pub(crate) fn boxed<A: Assemble + Default + 'static>() -> Box<dyn Assemble> {
    Box::new(A::default())
}

/// Output counted while it streams: characters of text and tool arguments, content events.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Produced {
    chars: usize,
    events: usize,
}

impl Produced {
    /// One content event carrying `text`.
    pub(crate) fn text(&mut self, text: &str) {
        self.chars += text.chars().count();
        self.events += 1;
    }

    /// Characters of output so far.
    pub(crate) const fn chars(self) -> usize {
        self.chars
    }

    /// One content event whose text is not shown (reasoning).
    pub(crate) fn hidden(&mut self) {
        self.events += 1;
    }

    /// An estimate of the output tokens so far: one a content event (what llama.cpp and OpenAI
    /// send), or one per four characters, whichever is more.
    fn tokens(self) -> u64 {
        u64::try_from(self.chars.div_ceil(4).max(self.events)).unwrap_or(u64::MAX)
    }
}

/// An event's data as JSON, with its type: the data's `type` field, else the `event:` name.
pub(crate) fn typed(event: &SseEvent) -> Result<(Value, String), StreamFailure> {
    let v = data_json(event)?;
    let kind = v
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or(&event.name)
        .to_owned();
    Ok((v, kind))
}

/// How a streamed answer is cut into events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Server-sent events (`text/event-stream`): OpenAI, Anthropic, the Responses API.
    Sse,
    /// One JSON object a line (`application/x-ndjson`): Ollama's native API.
    Ndjson,
}

impl Framing {
    /// The media type asked for and recognised.
    const fn media_type(self) -> &'static str {
        match self {
            Self::Sse => "text/event-stream",
            Self::Ndjson => "application/x-ndjson",
        }
    }
}

/// The reader of one framing.
enum Reader {
    Sse(SseParser),
    Ndjson(NdjsonParser),
}

impl Reader {
    fn new(framing: Framing) -> Self {
        match framing {
            Framing::Sse => Self::Sse(SseParser::default()),
            Framing::Ndjson => Self::Ndjson(NdjsonParser::default()),
        }
    }

    fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, String> {
        match self {
            Self::Sse(p) => p.push(bytes),
            Self::Ndjson(p) => p.push(bytes),
        }
    }

    fn finish(&mut self) -> Option<SseEvent> {
        match self {
            Self::Sse(p) => p.finish(),
            Self::Ndjson(p) => p.finish(),
        }
    }
}

/// How many characters of output between two looks for a generation loop.
const LOOK_EVERY: usize = 512;

/// How often progress is reported at most.
const REPORT_EVERY: Duration = Duration::from_millis(250);

/// Posts `body` asking for a stream and assembles the answer. A server that answers with a
/// plain JSON body instead (it ignores `stream`) is parsed as the non-streamed answer.
pub(crate) async fn exchange(
    client: &reqwest::Client,
    url: &str,
    mut headers: HeaderMap,
    body: &Value,
    endpoint: &str,
    idle: Duration,
    wire: &Wire,
) -> Result<ChatResponse, BackendError> {
    let mut assembler = (wire.assembler)();
    tracing::debug!(endpoint, "model request (streamed)");
    let redactor = http::body_redactor(&headers);
    let media_type = wire.framing.media_type();
    headers.insert(ACCEPT, HeaderValue::from_static(media_type));
    let sent = Instant::now();
    crate::progress::turn_started();
    let mut response = client
        .post(url)
        .headers(headers)
        .json(body)
        .send()
        .await
        .map_err(|e| http::transport_error(&e, endpoint))?;
    let status = response.status().as_u16();
    let is_stream = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains(media_type));
    if !(200..300).contains(&status) || !is_stream {
        let retry_after = http::retry_after(response.headers());
        let text = read_rest(&mut response, endpoint, idle).await?;
        let text = redactor.redact(&text);
        if !(200..300).contains(&status) {
            return Err(http::classify(status, retry_after, &text, endpoint));
        }
        return (wire.parse)(http::json_body(&text, endpoint)?, endpoint);
    }
    let mut parser = Reader::new(wire.framing);
    let mut last_report = Instant::now();
    let mut ended = false;
    let mut looked_at = 0;
    let mut looped = None;
    while !ended {
        let chunk = match tokio::time::timeout(idle, response.chunk()).await {
            Err(_) => {
                return Err(BackendError::Stalled {
                    endpoint: endpoint.to_owned(),
                    idle,
                });
            }
            Ok(Err(e)) => return Err(http::transport_error(&e, endpoint)),
            Ok(Ok(None)) => {
                ended = true;
                parser.finish().into_iter().collect()
            }
            Ok(Ok(Some(bytes))) => parser.push(&bytes).map_err(|m| invalid(endpoint, m))?,
        };
        for event in &chunk {
            match assembler.event(event) {
                Ok(Flow::More) => {}
                Ok(Flow::Done) => ended = true,
                Err(f) => return Err(stream_error(f, &redactor, endpoint)),
            }
            if ended {
                break;
            }
        }
        // A loop is looked for every so often, not at every event (each look reads the tail).
        let chars = assembler.produced().chars();
        if !ended && chars >= looked_at + LOOK_EVERY {
            looked_at = chars;
            looped = assembler.looping();
            if let Some(found) = looped {
                // Stopped here, not at the cap: the server is left (it stops generating when
                // the connection closes) and the turn ends as if cut — or as if finished, when
                // all it repeats is whitespace.
                assembler.end(!found.whitespace);
                ended = true;
            }
        }
        if last_report.elapsed() >= REPORT_EVERY {
            last_report = Instant::now();
            crate::progress::streaming(assembler.produced().tokens(), sent.elapsed(), false);
        }
    }
    let estimate = assembler.produced().tokens();
    let mut answer = assembler.finish(endpoint)?;
    if let Some(found) = looped {
        tracing::debug!(endpoint, %found, "stopped a looping answer");
        // The server's usage never came: the output counted so far stands for it, and the
        // request's text for the prompt (an estimate; a turn is never counted as free).
        if answer.usage.output_tokens == 0 {
            answer.usage.output_tokens = estimate;
        }
        if answer.usage.input_tokens == 0 {
            answer.usage.input_tokens = prompt_estimate(body);
        }
    }
    let reported = answer.usage.output_tokens;
    crate::progress::streaming(
        if reported > 0 { reported } else { estimate },
        sent.elapsed(),
        reported > 0,
    );
    Ok(answer)
}

/// An estimate of the input tokens of a request: one per four characters of its text (every
/// string and key of the body: messages, tool schemas, the answer's schema), as the output is
/// estimated while it streams.
fn prompt_estimate(body: &Value) -> u64 {
    fn chars(v: &Value) -> usize {
        match v {
            Value::String(s) => s.chars().count(),
            Value::Array(a) => a.iter().map(chars).sum(),
            Value::Object(o) => o.iter().map(|(k, v)| k.chars().count() + chars(v)).sum(),
            Value::Null | Value::Bool(_) | Value::Number(_) => 1,
        }
    }
    u64::try_from(chars(body).div_ceil(4)).unwrap_or(u64::MAX)
}

/// The rest of a body as text, each read bounded by the idle timeout.
async fn read_rest(
    response: &mut reqwest::Response,
    endpoint: &str,
    idle: Duration,
) -> Result<String, BackendError> {
    let mut bytes = Vec::new();
    loop {
        match tokio::time::timeout(idle, response.chunk()).await {
            Err(_) => {
                return Err(BackendError::Stalled {
                    endpoint: endpoint.to_owned(),
                    idle,
                });
            }
            Ok(Err(e)) => return Err(http::transport_error(&e, endpoint)),
            Ok(Ok(None)) => return Ok(String::from_utf8_lossy(&bytes).into_owned()),
            Ok(Ok(Some(b))) => bytes.extend_from_slice(&b),
        }
    }
}

fn invalid(endpoint: &str, message: impl Into<String>) -> BackendError {
    BackendError::InvalidResponse {
        endpoint: endpoint.to_owned(),
        message: message.into(),
    }
}

/// An error event as a backend error: overload and rate limits stay retryable like their HTTP
/// statuses; anything else ends the turn with the provider's message.
fn stream_error(
    f: StreamFailure,
    redactor: &orca_core::redact::Redactor,
    endpoint: &str,
) -> BackendError {
    let message = http::shorten(&redactor.redact(&f.message), 300);
    let endpoint = endpoint.to_owned();
    let kind = f.kind.unwrap_or_default().to_ascii_lowercase();
    if kind == INVALID {
        BackendError::InvalidResponse { endpoint, message }
    } else if kind.contains("overloaded") {
        BackendError::Overloaded {
            endpoint,
            message,
            retry_after: None,
        }
    } else if kind.contains("rate_limit") {
        BackendError::RateLimited {
            endpoint,
            message,
            retry_after: None,
        }
    } else {
        let message = if kind.is_empty() {
            message
        } else {
            format!("{message} ({kind})")
        };
        BackendError::StreamFailed { endpoint, message }
    }
}

/// Parses an event's data as JSON.
pub(crate) fn data_json(event: &SseEvent) -> Result<Value, StreamFailure> {
    serde_json::from_str(&event.data).map_err(|e| StreamFailure {
        kind: Some(INVALID.to_owned()),
        message: format!(
            "an event is not JSON ({e}): {}",
            http::shorten(&event.data, 200)
        ),
    })
}
