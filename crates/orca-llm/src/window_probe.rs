//! A model's context window asked from its server when the config does not give one
//! (ADR 0025): llama.cpp `GET /props` (`default_generation_settings.n_ctx`), vLLM
//! `GET /v1/models` (`max_model_len`), Ollama `POST /api/show` (the `num_ctx` parameter, else
//! `model_info["<arch>.context_length"]`; through an OpenAI-compatible URL only after
//! `GET /api/version` says the server is Ollama, so that no other server gets a POST). Asked once per run per server and model (cached in
//! memory, unknown answers too), each request under a short timeout; a server that says
//! nothing leaves the window unknown (requests are then not fitted, as before). No key is sent
//! with these questions (as `orca doctor`'s probes): llama.cpp and Ollama answer them without
//! one; a vLLM started with `--api-key` does not, and its window stays unknown.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

/// How long one question to the server may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The context Ollama gives a model through its OpenAI-compatible endpoint when the model sets
/// no `num_ctx` (its `OLLAMA_CONTEXT_LENGTH` default; that endpoint cannot change it).
pub const OLLAMA_DEFAULT_NUM_CTX: u64 = 4096;

/// The largest `num_ctx` orca asks of Ollama's native API on its own when the config gives no
/// window (a model's full trained context can need more memory than the machine has); set
/// `context_window` to go above it.
pub const OLLAMA_NATIVE_MAX_DEFAULT: u64 = 16_384;

/// Which API the server is asked through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ServerApi {
    /// An OpenAI-compatible endpoint (llama.cpp, vLLM, Ollama's `/v1`…).
    OpenAiCompatible,
    /// Ollama's native API (orca sets `num_ctx` itself).
    OllamaNative,
}

/// Where a window comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WindowSource {
    /// `generation.context_window` in the config.
    Configured,
    /// llama.cpp `GET /props`.
    LlamaCppProps,
    /// vLLM `GET /v1/models` (`max_model_len`).
    VllmModels,
    /// Ollama `POST /api/show`: the model's `num_ctx` parameter.
    OllamaNumCtx,
    /// Ollama `POST /api/show`: the model's trained context (native API), at most
    /// [`OLLAMA_NATIVE_MAX_DEFAULT`].
    OllamaContextLength {
        /// The trained context, when it was more than orca asks for.
        capped_from: Option<u64>,
    },
    /// Ollama's default context through its OpenAI-compatible endpoint.
    OllamaDefault,
}

/// A known window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownWindow {
    /// Tokens.
    pub tokens: u64,
    /// Where it comes from.
    pub source: WindowSource,
}

impl std::fmt::Display for KnownWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let from = match self.source {
            WindowSource::Configured => "configured: generation.context_window".to_owned(),
            WindowSource::LlamaCppProps => {
                "asked: llama.cpp GET /props default_generation_settings.n_ctx".to_owned()
            }
            WindowSource::VllmModels => "asked: vLLM GET /v1/models max_model_len".to_owned(),
            WindowSource::OllamaNumCtx => "asked: Ollama POST /api/show, num_ctx".to_owned(),
            WindowSource::OllamaContextLength { capped_from: None } => {
                "asked: Ollama POST /api/show, context_length; sent as num_ctx".to_owned()
            }
            WindowSource::OllamaContextLength {
                capped_from: Some(n),
            } => format!(
                "asked: Ollama POST /api/show, context_length {n}, capped; sent as num_ctx; set generation.context_window for more"
            ),
            WindowSource::OllamaDefault => format!(
                "Ollama's default for its OpenAI endpoint ({OLLAMA_DEFAULT_NUM_CTX} unless the model sets num_ctx); use api = \"ollama\" to choose it"
            ),
        };
        write!(f, "{} tokens ({from})", self.tokens)
    }
}

/// The server's root: `base_url` without a trailing `/v1`.
#[must_use]
pub fn server_root(base_url: &str) -> &str {
    let b = base_url.trim_end_matches('/');
    b.strip_suffix("/v1").unwrap_or(b)
}

/// Hosts that are asked nothing (cloud APIs whose windows orca cannot read this way).
#[must_use]
pub fn is_cloud(base_url: &str) -> bool {
    ["api.openai.com", "api.anthropic.com"]
        .iter()
        .any(|h| base_url.contains(h))
}

/// What a window is asked for: the API, the server's root and the model.
type AskedModel = (ServerApi, String, String);

/// The windows asked so far in this run.
#[derive(Debug, Default)]
pub struct Windows {
    cache: tokio::sync::Mutex<BTreeMap<AskedModel, Option<KnownWindow>>>,
    asked: std::sync::atomic::AtomicUsize,
}

impl Windows {
    /// An empty cache.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// How many HTTP questions were sent (for tests: asked once per run).
    #[must_use]
    pub fn questions_sent(&self) -> usize {
        self.asked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The window of `model` at `base_url` (asked once; later calls answer from the cache).
    pub async fn window(
        &self,
        client: &reqwest::Client,
        api: ServerApi,
        base_url: &str,
        model: &str,
    ) -> Option<KnownWindow> {
        if is_cloud(base_url) {
            return None;
        }
        let k = (api, server_root(base_url).to_owned(), model.to_owned());
        let mut cache = self.cache.lock().await;
        if let Some(hit) = cache.get(&k) {
            return *hit;
        }
        let found = self.ask(client, &k).await;
        match &found {
            Some(w) if w.source == WindowSource::OllamaDefault => tracing::warn!(
                "{model} at {base_url} runs with Ollama's default context of {} tokens through its OpenAI endpoint; orca fits requests to it. For a larger window set api = \"ollama\" (orca then sends num_ctx) with generation.context_window",
                w.tokens
            ),
            Some(w) => tracing::debug!(model, base_url, window = %w, "context window"),
            None => tracing::debug!(model, base_url, "the server did not say its context window"),
        }
        cache.insert(k, found);
        found
    }

    async fn ask(
        &self,
        client: &reqwest::Client,
        (api, root, model): &AskedModel,
    ) -> Option<KnownWindow> {
        let (api, root, model) = (*api, root.as_str(), model.as_str());
        if api == ServerApi::OpenAiCompatible {
            if let Some(v) = self.get(client, &format!("{root}/props")).await
                && let Some(n) = parse_llama_props(&v)
            {
                return Some(KnownWindow {
                    tokens: n,
                    source: WindowSource::LlamaCppProps,
                });
            }
            if let Some(v) = self.get(client, &format!("{root}/v1/models")).await
                && let Some(n) = parse_vllm_models(&v, model)
            {
                return Some(KnownWindow {
                    tokens: n,
                    source: WindowSource::VllmModels,
                });
            }
            // Only a server that says it is Ollama is asked with a POST.
            let version = self.get(client, &format!("{root}/api/version")).await?;
            version.get("version").and_then(Value::as_str)?;
        }
        let show = self.show(client, root, model).await?;
        // Only an answer shaped like Ollama's says anything.
        if !["model_info", "parameters", "details"]
            .iter()
            .any(|k| show.get(k).is_some())
        {
            return None;
        }
        let (num_ctx, trained) = parse_ollama_show(&show);
        Some(match (api, num_ctx, trained) {
            (_, Some(n), _) => KnownWindow {
                tokens: n,
                source: WindowSource::OllamaNumCtx,
            },
            (ServerApi::OllamaNative, None, Some(t)) => KnownWindow {
                tokens: t.min(OLLAMA_NATIVE_MAX_DEFAULT),
                source: WindowSource::OllamaContextLength {
                    capped_from: (t > OLLAMA_NATIVE_MAX_DEFAULT).then_some(t),
                },
            },
            (ServerApi::OpenAiCompatible, None, t) => KnownWindow {
                tokens: t.map_or(OLLAMA_DEFAULT_NUM_CTX, |t| t.min(OLLAMA_DEFAULT_NUM_CTX)),
                source: WindowSource::OllamaDefault,
            },
            (ServerApi::OllamaNative, None, None) => return None,
        })
    }

    fn count(&self) {
        self.asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    async fn get(&self, client: &reqwest::Client, url: &str) -> Option<Value> {
        self.count();
        let req = client.get(url).timeout(PROBE_TIMEOUT);
        json_of(req.send().await.ok()?).await
    }

    async fn show(&self, client: &reqwest::Client, root: &str, model: &str) -> Option<Value> {
        self.count();
        let req = client
            .post(format!("{root}/api/show"))
            .timeout(PROBE_TIMEOUT)
            .json(&json!({"model": model}));
        json_of(req.send().await.ok()?).await
    }
}

async fn json_of(resp: reqwest::Response) -> Option<Value> {
    if !resp.status().is_success() {
        return None;
    }
    // Bounded: a window answer is small; a huge body is not one.
    let bytes = resp.bytes().await.ok()?;
    if bytes.len() > 4 * 1024 * 1024 {
        return None;
    }
    serde_json::from_slice(&bytes).ok()
}

fn positive(v: Option<&Value>) -> Option<u64> {
    v.and_then(Value::as_u64).filter(|n| *n > 0)
}

/// llama.cpp `/props`: `default_generation_settings.n_ctx` (older servers: top-level `n_ctx`).
#[must_use]
pub fn parse_llama_props(v: &Value) -> Option<u64> {
    positive(v.pointer("/default_generation_settings/n_ctx")).or_else(|| positive(v.get("n_ctx")))
}

/// vLLM `/v1/models`: the `max_model_len` of the entry whose `id` is `model` (or of the only
/// entry).
#[must_use]
pub fn parse_vllm_models(v: &Value, model: &str) -> Option<u64> {
    let data = v.get("data")?.as_array()?;
    let entry = data
        .iter()
        .find(|e| e.get("id").and_then(Value::as_str) == Some(model))
        .or_else(|| (data.len() == 1).then(|| &data[0]))?;
    positive(entry.get("max_model_len"))
}

/// Ollama `/api/show`: the `num_ctx` parameter (from the model's Modelfile) and the trained
/// context, `model_info["<general.architecture>.context_length"]`.
#[must_use]
pub fn parse_ollama_show(v: &Value) -> (Option<u64>, Option<u64>) {
    let num_ctx = v
        .get("parameters")
        .and_then(Value::as_str)
        .and_then(|p| {
            p.lines().find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some("num_ctx"))
                    .then(|| w.next()?.parse::<u64>().ok())
                    .flatten()
            })
        })
        .filter(|n| *n > 0);
    let info = v.get("model_info");
    let arch = info
        .and_then(|i| i.get("general.architecture"))
        .and_then(Value::as_str);
    let trained = arch
        .and_then(|a| positive(info?.get(format!("{a}.context_length").as_str())))
        .or_else(|| {
            info?.as_object()?.iter().find_map(|(k, v)| {
                k.ends_with(".context_length")
                    .then(|| positive(Some(v)))
                    .flatten()
            })
        });
    (num_ctx, trained)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_and_shapes() {
        assert_eq!(server_root("http://h:11434/v1/"), "http://h:11434");
        assert_eq!(server_root("http://h:8080"), "http://h:8080");
        assert_eq!(
            parse_llama_props(&json!({"default_generation_settings": {"n_ctx": 4096}})),
            Some(4096)
        );
        assert_eq!(parse_llama_props(&json!({"n_ctx": 0})), None);
        let models = json!({"object": "list", "data": [
            {"id": "a", "max_model_len": 8192}, {"id": "b", "max_model_len": 32768}]});
        assert_eq!(parse_vllm_models(&models, "b"), Some(32768));
        assert_eq!(parse_vllm_models(&models, "c"), None);
        let show = json!({
            "parameters": "stop                           \"<|im_start|>\"\nnum_ctx                        8192",
            "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}
        });
        assert_eq!(parse_ollama_show(&show), (Some(8192), Some(32768)));
        assert_eq!(
            parse_ollama_show(&json!({"model_info": {"llama.context_length": 131072}})),
            (None, Some(131_072))
        );
    }
}
