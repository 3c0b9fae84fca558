//! `[agents.NAME.limits]` (and `[defaults.limits]`): the budget that fails closed with
//! `budget_exceeded`, and when an agent that has stopped making progress ends `stalled`
//! (see [`crate::stall`]).

use std::time::Duration;

use orca_core::Budget;
use serde::Deserialize;

use crate::stall::StallLimits;

/// An agent's limits as written (a missing field is `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitSettings {
    /// Total tokens.
    pub max_tokens: Option<u64>,
    /// Cost in millionths of a US dollar.
    pub max_cost_micro_usd: Option<u64>,
    /// Model turns.
    pub max_turns: Option<u32>,
    /// Wall-clock seconds.
    pub max_wall_secs: Option<u64>,
    /// The same tool call with the same result this many times in a row stalls (0: off).
    pub max_repeats: Option<u32>,
    /// This many turns in a row that only re-read what was already read stall (0: off).
    pub stall_turns: Option<u32>,
    /// A command-line agent printing nothing and changing no file this long stalls (0: off).
    pub idle_secs: Option<u64>,
}

impl LimitSettings {
    /// The budget part.
    #[must_use]
    pub const fn budget(&self) -> Budget {
        Budget {
            max_tokens: self.max_tokens,
            max_cost_micro_usd: self.max_cost_micro_usd,
            max_turns: self.max_turns,
            max_wall_secs: self.max_wall_secs,
        }
    }

    /// Whether any budget field is set (a `[limits]` table with only stall settings leaves the
    /// budget as it was).
    #[must_use]
    pub const fn sets_budget(&self) -> bool {
        self.max_tokens.is_some()
            || self.max_cost_micro_usd.is_some()
            || self.max_turns.is_some()
            || self.max_wall_secs.is_some()
    }

    /// The stall limits: these settings over `base` (field by field).
    #[must_use]
    pub fn stall_over(&self, base: StallLimits) -> StallLimits {
        StallLimits {
            max_repeats: self.max_repeats.unwrap_or(base.max_repeats),
            stall_turns: self.stall_turns.unwrap_or(base.stall_turns),
            idle: match self.idle_secs {
                Some(0) => None,
                Some(secs) => Some(Duration::from_secs(secs)),
                None => base.idle,
            },
        }
    }

    /// The first bad value, as (field, message).
    pub(super) fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.max_repeats == Some(1) {
            return Err((
                "max_repeats",
                "must be 0 (off) or at least 2: 1 would stop every call".to_owned(),
            ));
        }
        if let Some(secs) = self.idle_secs
            && secs > MAX_IDLE_SECS
        {
            return Err((
                "idle_secs",
                format!("{secs} is more than {MAX_IDLE_SECS} (a week); use 0 to turn it off"),
            ));
        }
        Ok(())
    }
}

/// The fields of a `[limits]` table.
const FIELDS: &[&str] = &[
    "max_tokens",
    "max_cost_micro_usd",
    "max_turns",
    "max_wall_secs",
    "max_repeats",
    "stall_turns",
    "idle_secs",
];

/// Checks a `[limits]` table as written, before it is read, so that an error names the field
/// (`limits.max_repeats`) rather than only the agent: the first problem as (field under
/// `limits`, message).
pub(super) fn check_table(value: &toml::Value) -> Result<(), (String, String)> {
    let Some(table) = value.as_table() else {
        return Err((String::new(), "must be a table".to_owned()));
    };
    for (key, v) in table {
        if !FIELDS.contains(&key.as_str()) {
            return Err((
                String::new(),
                format!(
                    "unknown field `{key}` (expected one of: {})",
                    FIELDS.join(", ")
                ),
            ));
        }
        let max = if matches!(key.as_str(), "max_turns" | "max_repeats" | "stall_turns") {
            i64::from(u32::MAX)
        } else {
            i64::MAX
        };
        match v.as_integer() {
            Some(n) if (0..=max).contains(&n) => {}
            _ => {
                return Err((
                    format!(".{key}"),
                    format!("must be a whole number from 0 to {max}, not {v}"),
                ));
            }
        }
    }
    Ok(())
}

/// The largest `idle_secs` accepted.
const MAX_IDLE_SECS: u64 = 7 * 24 * 3600;
