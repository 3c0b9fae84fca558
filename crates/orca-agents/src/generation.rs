//! Per-agent generation settings: the output-token cap of a turn, the request timeout,
//! streaming and its idle timeout, sampling, the token parameter's name and the tool mode. Written in `.orca/config.toml` as
//! `[defaults.generation]` or `[agents.NAME.generation]` (an agent's table wins field by field),
//! resolved into a [`Generation`] the registry hands to the backend and the agent loop.

use std::time::Duration;

use serde::Deserialize;

use crate::agent_loop::LoopSettings;
use orca_llm::backend::{ReasoningEffort, Sampling};
use orca_llm::openai::TokenParam;
use orca_llm::{DEFAULT_IDLE_TIMEOUT, Streaming};

/// How the model makes its tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// The provider's native tool calls (the default).
    #[default]
    Native,
    /// For models whose native tool calls are unreliable (small local models): no native tools
    /// are offered; the server is asked for output constrained to a JSON schema of the allowed
    /// calls (`response_format` with `json_schema`), and a JSON object in the text (bare or in
    /// a fenced block) is taken as the call when it validates.
    Json,
}

/// The wire format of an OpenAI-compatible backend (`api = "…"` in an agent's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireApi {
    /// Chat Completions (`/chat/completions`), what every compatible server speaks.
    #[default]
    Chat,
    /// The Responses API (`/responses`), which Codex-class models need.
    Responses,
    /// Ollama's native `/api/chat`, which takes the context size (`options.num_ctx`).
    Ollama,
}

/// The `token_param` setting: which field carries the output-token cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenParamSetting {
    /// By model family.
    Auto,
    /// `max_tokens`.
    MaxTokens,
    /// `max_completion_tokens`.
    MaxCompletionTokens,
}

impl From<TokenParamSetting> for TokenParam {
    fn from(s: TokenParamSetting) -> Self {
        match s {
            TokenParamSetting::Auto => Self::Auto,
            TokenParamSetting::MaxTokens => Self::MaxTokens,
            TokenParamSetting::MaxCompletionTokens => Self::MaxCompletionTokens,
        }
    }
}

/// `[agents.NAME.generation]` as written; every field optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationSettings {
    /// The output-token cap of one turn (default 8192).
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// How long one model request may take, in seconds (default 300). A request that times
    /// out is not re-sent.
    #[serde(default)]
    pub request_timeout_secs: Option<u64>,
    /// Sampling temperature (0 to 2).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling (above 0, at most 1).
    #[serde(default)]
    pub top_p: Option<f64>,
    /// A sampling seed (OpenAI-compatible servers).
    #[serde(default)]
    pub seed: Option<u64>,
    /// `minimal`, `low`, `medium`, `high` (OpenAI reasoning models only).
    #[serde(default)]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// `auto` (default), `max_tokens`, `max_completion_tokens` (OpenAI-compatible only).
    #[serde(default)]
    pub token_param: Option<TokenParamSetting>,
    /// `native` (default) or `json`.
    #[serde(default)]
    pub tool_mode: Option<ToolMode>,
    /// The model's context window in tokens: requests are fitted into it (older tool results
    /// left out) or fail clearly instead of being cut by the server.
    #[serde(default)]
    pub context_window: Option<u64>,
    /// Stream answers (default true; `false` for servers that cannot stream).
    #[serde(default)]
    pub stream: Option<bool>,
    /// A streamed answer that sends nothing for this many seconds is given up, and the turn
    /// is not re-sent (default 60).
    #[serde(default)]
    pub idle_timeout_secs: Option<u64>,
}

impl GenerationSettings {
    /// These settings, with `base`'s where these have none.
    #[must_use]
    pub fn merged_over(&self, base: &Self) -> Self {
        Self {
            max_output_tokens: self.max_output_tokens.or(base.max_output_tokens),
            request_timeout_secs: self.request_timeout_secs.or(base.request_timeout_secs),
            temperature: self.temperature.or(base.temperature),
            top_p: self.top_p.or(base.top_p),
            seed: self.seed.or(base.seed),
            reasoning_effort: self.reasoning_effort.or(base.reasoning_effort),
            token_param: self.token_param.or(base.token_param),
            tool_mode: self.tool_mode.or(base.tool_mode),
            context_window: self.context_window.or(base.context_window),
            stream: self.stream.or(base.stream),
            idle_timeout_secs: self.idle_timeout_secs.or(base.idle_timeout_secs),
        }
    }

    /// The first field with a value that is not allowed: `(field, message)`.
    ///
    /// # Errors
    ///
    /// The field name (below `generation.`) and what is wrong.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.max_output_tokens == Some(0) {
            return Err(("max_output_tokens", "must be at least 1".to_owned()));
        }
        if self.context_window.is_some_and(|w| w < 512) {
            return Err(("context_window", "must be at least 512 tokens".to_owned()));
        }
        if self.idle_timeout_secs == Some(0) {
            return Err(("idle_timeout_secs", "must be at least 1".to_owned()));
        }
        if self.request_timeout_secs == Some(0) {
            return Err(("request_timeout_secs", "must be at least 1".to_owned()));
        }
        if let Some(t) = self.temperature
            && !(t.is_finite() && (0.0..=2.0).contains(&t))
        {
            return Err(("temperature", format!("{t} is not between 0 and 2")));
        }
        if let Some(p) = self.top_p
            && !(p.is_finite() && p > 0.0 && p <= 1.0)
        {
            return Err(("top_p", format!("{p} is not above 0 and at most 1")));
        }
        Ok(())
    }

    /// The resolved settings.
    #[must_use]
    pub fn resolve(&self) -> Generation {
        let default = Generation::default();
        Generation {
            max_output_tokens: self.max_output_tokens,
            request_timeout: self
                .request_timeout_secs
                .map_or(default.request_timeout, Duration::from_secs),
            sampling: Sampling {
                temperature: self.temperature,
                top_p: self.top_p,
                seed: self.seed,
                reasoning_effort: self.reasoning_effort,
            },
            token_param: self.token_param.map_or(TokenParam::Auto, TokenParam::from),
            tool_mode: self.tool_mode.unwrap_or_default(),
            context_window: self.context_window,
            api: WireApi::Chat,
            streaming: Streaming {
                enabled: self.stream.unwrap_or(true),
                idle_timeout: self
                    .idle_timeout_secs
                    .map_or(DEFAULT_IDLE_TIMEOUT, Duration::from_secs),
            },
        }
    }
}

/// An agent's resolved generation settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Generation {
    /// The output-token cap of one turn (`None`: the loop's, 8192 by default).
    pub max_output_tokens: Option<u32>,
    /// How long one model request may take.
    pub request_timeout: Duration,
    /// Sampling settings sent with every turn.
    pub sampling: Sampling,
    /// The output-token field (OpenAI-compatible backends).
    pub token_param: TokenParam,
    /// How the model makes tool calls.
    pub tool_mode: ToolMode,
    /// The model's context window in tokens, if known.
    pub context_window: Option<u64>,
    /// The wire format (OpenAI-compatible backends).
    pub api: WireApi,
    /// Whether answers stream, and the idle timeout of a stream (HTTP backends).
    pub streaming: Streaming,
}

impl Generation {
    /// `settings` with these generation settings: the output cap and sampling fields that are
    /// set replace the loop's; the tool mode `json` replaces `native`.
    #[must_use]
    pub fn apply_to(&self, mut settings: LoopSettings) -> LoopSettings {
        if let Some(max) = self.max_output_tokens {
            settings.max_output_tokens = Some(max);
        }
        let mine = self.sampling;
        let loop_s = settings.sampling;
        settings.sampling = Sampling {
            temperature: mine.temperature.or(loop_s.temperature),
            top_p: mine.top_p.or(loop_s.top_p),
            seed: mine.seed.or(loop_s.seed),
            reasoning_effort: mine.reasoning_effort.or(loop_s.reasoning_effort),
        };
        if self.tool_mode == ToolMode::Json {
            settings.tool_mode = ToolMode::Json;
        }
        settings.request_timeout = Some(self.request_timeout);
        settings.idle_timeout = self
            .streaming
            .enabled
            .then_some(self.streaming.idle_timeout);
        if self.context_window.is_some() {
            settings.context_window = self.context_window;
        }
        settings
    }
}

impl Default for Generation {
    fn default() -> Self {
        Self {
            max_output_tokens: None,
            request_timeout: orca_llm::DEFAULT_REQUEST_TIMEOUT,
            sampling: Sampling::default(),
            token_param: TokenParam::Auto,
            tool_mode: ToolMode::Native,
            context_window: None,
            api: WireApi::Chat,
            streaming: Streaming::ON,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_fields_win_and_bad_values_are_named() {
        let base = GenerationSettings {
            max_output_tokens: Some(1000),
            temperature: Some(0.5),
            ..GenerationSettings::default()
        };
        let mine = GenerationSettings {
            temperature: Some(0.1),
            tool_mode: Some(ToolMode::Json),
            ..GenerationSettings::default()
        };
        let g = mine.merged_over(&base).resolve();
        assert_eq!(g.max_output_tokens, Some(1000));
        let applied = g.apply_to(LoopSettings::default());
        assert_eq!(applied.max_output_tokens, Some(1000));
        assert_eq!(applied.tool_mode, ToolMode::Json);
        assert_eq!(g.sampling.temperature, Some(0.1));
        assert_eq!(g.tool_mode, ToolMode::Json);
        assert_eq!(g.request_timeout, orca_llm::DEFAULT_REQUEST_TIMEOUT);
        assert_eq!(g.streaming, Streaming::ON);
        let off = GenerationSettings {
            stream: Some(false),
            idle_timeout_secs: Some(5),
            ..GenerationSettings::default()
        }
        .merged_over(&base)
        .resolve();
        assert!(!off.streaming.enabled);
        assert_eq!(off.streaming.idle_timeout, Duration::from_secs(5));
        for (bad, field) in [
            (
                GenerationSettings {
                    temperature: Some(3.0),
                    ..GenerationSettings::default()
                },
                "temperature",
            ),
            (
                GenerationSettings {
                    top_p: Some(0.0),
                    ..GenerationSettings::default()
                },
                "top_p",
            ),
            (
                GenerationSettings {
                    idle_timeout_secs: Some(0),
                    ..GenerationSettings::default()
                },
                "idle_timeout_secs",
            ),
            (
                GenerationSettings {
                    max_output_tokens: Some(0),
                    ..GenerationSettings::default()
                },
                "max_output_tokens",
            ),
        ] {
            assert_eq!(bad.validate().unwrap_err().0, field);
        }
    }
}
