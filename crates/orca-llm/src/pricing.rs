//! What a model call costs: a price table per model, and the cost of a turn's usage.
//!
//! Prices are per million tokens, held in micro-USD so that costs add up without floating point.
//! The shipped table holds the providers' published list prices (standard tier, no batch
//! discount) for common OpenAI and Anthropic models, as of [`PRICES_TAKEN`]; prices change, so
//! config can override or add any model (`[prices."model"]`), and a model the table does not know
//! costs 0 and is reported as unpriced (local models through Ollama or llama.cpp cost nothing).

use std::collections::BTreeMap;

use orca_core::Usage;

/// When the shipped prices were taken from the providers' pricing pages.
pub const PRICES_TAKEN: &str = "2025-08-15";

/// The price of one model, in micro-USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModelPrice {
    /// Uncached input tokens.
    pub input: u64,
    /// Output tokens (reasoning tokens included: providers bill them as output).
    pub output: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read: u64,
    /// Input tokens written to the prompt cache (Anthropic; 0 where writing is free).
    pub cache_write: u64,
}

impl ModelPrice {
    /// A price from US dollars per million tokens: input, output, cache read, cache write.
    /// Negative or non-finite values count as 0.
    #[must_use]
    pub fn from_usd_per_mtok(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Self {
        Self {
            input: micro_usd(input),
            output: micro_usd(output),
            cache_read: micro_usd(cache_read),
            cache_write: micro_usd(cache_write),
        }
    }

    /// The cost of `usage` at this price, in micro-USD (rounded to the nearest).
    #[must_use]
    pub fn cost(&self, usage: &Usage) -> u64 {
        let parts = [
            (usage.input_tokens, self.input),
            (usage.output_tokens, self.output),
            (usage.cache_read_tokens, self.cache_read),
            (usage.cache_write_tokens, self.cache_write),
        ];
        let total: u128 = parts
            .iter()
            .map(|(tokens, price)| u128::from(*tokens) * u128::from(*price))
            .sum();
        u64::try_from((total + 500_000) / 1_000_000).unwrap_or(u64::MAX)
    }
}

/// US dollars (a float: a price per million tokens, or a cost an agent reported) in micro-USD;
/// anything not finite and positive is 0.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "clamped to a non-negative finite range first"
)]
pub fn micro_usd(usd: f64) -> u64 {
    if usd.is_finite() && usd > 0.0 {
        (usd * 1_000_000.0).round().min(u64::MAX as f64) as u64
    } else {
        0
    }
}

/// Prices by model name. A model id matches the longest table key that is the whole id or a
/// prefix of it followed by `-` (`gpt-4o-2024-08-06` → `gpt-4o`, `gpt-4o-mini-…` →
/// `gpt-4o-mini`); a `provider/` prefix (`openai/gpt-4o`) is ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriceTable {
    prices: BTreeMap<String, ModelPrice>,
}

impl Default for PriceTable {
    fn default() -> Self {
        Self::shipped()
    }
}

impl PriceTable {
    /// No prices at all: every model costs 0.
    #[must_use]
    pub fn empty() -> Self {
        Self {
            prices: BTreeMap::new(),
        }
    }

    /// The shipped list prices (see [`PRICES_TAKEN`]).
    #[must_use]
    pub fn shipped() -> Self {
        // (model, input, output, cache read, cache write) in USD per million tokens.
        const SHIPPED: &[(&str, f64, f64, f64, f64)] = &[
            ("gpt-5", 1.25, 10.0, 0.125, 0.0),
            ("gpt-5-mini", 0.25, 2.0, 0.025, 0.0),
            ("gpt-5-nano", 0.05, 0.40, 0.005, 0.0),
            ("gpt-4.1", 2.0, 8.0, 0.50, 0.0),
            ("gpt-4.1-mini", 0.40, 1.60, 0.10, 0.0),
            ("gpt-4.1-nano", 0.10, 0.40, 0.025, 0.0),
            ("gpt-4o", 2.50, 10.0, 1.25, 0.0),
            ("gpt-4o-mini", 0.15, 0.60, 0.075, 0.0),
            ("o1", 15.0, 60.0, 7.50, 0.0),
            ("o3", 2.0, 8.0, 0.50, 0.0),
            ("o3-mini", 1.10, 4.40, 0.55, 0.0),
            ("o4-mini", 1.10, 4.40, 0.275, 0.0),
            ("claude-opus-4", 15.0, 75.0, 1.50, 18.75),
            ("claude-sonnet-4", 3.0, 15.0, 0.30, 3.75),
            ("claude-3-7-sonnet", 3.0, 15.0, 0.30, 3.75),
            ("claude-3-5-sonnet", 3.0, 15.0, 0.30, 3.75),
            ("claude-3-5-haiku", 0.80, 4.0, 0.08, 1.0),
            ("claude-3-haiku", 0.25, 1.25, 0.03, 0.30),
        ];
        Self {
            prices: SHIPPED
                .iter()
                .map(|(m, i, o, r, w)| {
                    (
                        (*m).to_owned(),
                        ModelPrice::from_usd_per_mtok(*i, *o, *r, *w),
                    )
                })
                .collect(),
        }
    }

    /// Sets (or replaces) the price of a model.
    pub fn set(&mut self, model: impl Into<String>, price: ModelPrice) {
        self.prices.insert(model.into(), price);
    }

    /// The price of a model, if the table knows it.
    #[must_use]
    pub fn price(&self, model: &str) -> Option<ModelPrice> {
        let id = model.rsplit('/').next().unwrap_or(model);
        self.prices
            .iter()
            .filter(|(key, _)| {
                id == key.as_str()
                    || id
                        .strip_prefix(key.as_str())
                        .is_some_and(|rest| rest.starts_with('-'))
            })
            .max_by_key(|(key, _)| key.len())
            .map(|(_, price)| *price)
    }

    /// `usage` with its cost filled in for `model` (0 when the model is not priced).
    #[must_use]
    pub fn priced(&self, model: &str, mut usage: Usage) -> Usage {
        usage.cost_micro_usd = self.price(model).map_or(0, |p| p.cost(&usage));
        usage
    }
}

/// `[prices."MODEL"]` in the config: US dollars per million tokens. `input` and `output` are
/// required; cache prices default to 0.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceSetting {
    /// Uncached input tokens.
    pub input: f64,
    /// Output tokens (reasoning tokens included).
    pub output: f64,
    /// Input tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read: f64,
    /// Input tokens written to the prompt cache.
    #[serde(default)]
    pub cache_write: f64,
}

impl PriceSetting {
    /// The first negative or non-finite price: `(field, message)`.
    ///
    /// # Errors
    ///
    /// The field and what is wrong.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        for (field, v) in [
            ("input", self.input),
            ("output", self.output),
            ("cache_read", self.cache_read),
            ("cache_write", self.cache_write),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err((
                    field,
                    format!("{v} is not a price (USD per million tokens, 0 or more)"),
                ));
            }
        }
        Ok(())
    }

    /// The price in micro-USD per million tokens.
    #[must_use]
    pub fn price(&self) -> ModelPrice {
        ModelPrice::from_usd_per_mtok(self.input, self.output, self.cache_read, self.cache_write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(model: &str, expected: Option<&str>) {
        let table = PriceTable::shipped();
        let want = expected.map(|k| table.prices[k]);
        assert_eq!(table.price(model), want, "{model}");
    }

    #[test]
    fn model_ids_find_their_family() {
        check("gpt-4o", Some("gpt-4o"));
        check("gpt-4o-2024-08-06", Some("gpt-4o"));
        check("gpt-4o-mini-2024-07-18", Some("gpt-4o-mini"));
        check("openai/gpt-4.1-mini", Some("gpt-4.1-mini"));
        check("o3-mini", Some("o3-mini"));
        check("o3-2025-04-16", Some("o3"));
        check("claude-sonnet-4-20250514", Some("claude-sonnet-4"));
        check("claude-opus-4-1-20250805", Some("claude-opus-4"));
        check("claude-3-5-haiku-20241022", Some("claude-3-5-haiku"));
        // Not guessed: a new minor version, local models.
        check("gpt-5.1", None);
        check("gpt-4o3", None);
        check("qwen2.5-coder:1.5b", None);
        check("llama3", None);
    }

    #[test]
    fn cost_counts_every_kind_of_token() {
        let price = ModelPrice::from_usd_per_mtok(3.0, 15.0, 0.30, 3.75);
        let usage = Usage {
            input_tokens: 1_000,
            output_tokens: 500,
            cache_read_tokens: 10_000,
            cache_write_tokens: 2_000,
            turns: 1,
            cost_micro_usd: 0,
        };
        // 1000·3 + 500·15 + 10000·0.30 + 2000·3.75 = 3000 + 7500 + 3000 + 7500 µUSD.
        assert_eq!(price.cost(&usage), 21_000);
        assert_eq!(
            PriceTable::shipped()
                .priced("claude-sonnet-4-x", usage)
                .cost_micro_usd,
            21_000
        );
        assert_eq!(
            PriceTable::empty()
                .priced("claude-sonnet-4-x", usage)
                .cost_micro_usd,
            0
        );
        assert_eq!(
            ModelPrice::from_usd_per_mtok(-1.0, f64::NAN, 0.0, 0.0),
            ModelPrice::default()
        );
    }

    #[test]
    fn config_can_override_and_add() {
        let mut table = PriceTable::shipped();
        table.set("gpt-4o", ModelPrice::from_usd_per_mtok(1.0, 2.0, 0.0, 0.0));
        table.set(
            "my-model",
            ModelPrice::from_usd_per_mtok(0.5, 0.5, 0.0, 0.0),
        );
        assert_eq!(
            table.price("gpt-4o-2024-08-06").map(|p| p.input),
            Some(1_000_000)
        );
        assert_eq!(table.price("my-model").map(|p| p.output), Some(500_000));
    }
}
