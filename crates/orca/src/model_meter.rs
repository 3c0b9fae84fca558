//! Model progress on stderr while `orca run` / `orca ask` wait for a model: at a terminal, one
//! status line redrawn at most four times a second (the step, its turn, tokens so far and
//! tokens/s), cleared before any other line; with `--log-format json`, a JSON line at most once
//! a second per step instead. Piped human output gets no status line — only the usage line each
//! model-backed step prints when it ends.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use orca_agents::{ModelProgress, ProgressSink};
use orca_core::Usage;

use crate::term::{Style, say};

/// Whether a status line is on the screen (so the next line clears it first).
static STATUS_SHOWN: AtomicBool = AtomicBool::new(false);

/// Questions waiting for an answer at the terminal (no status line is drawn meanwhile).
static ASKING: AtomicUsize = AtomicUsize::new(0);

/// While alive, a question waits for its answer: the status line is not drawn.
pub(crate) struct Asking;

impl Asking {
    pub(crate) fn start() -> Self {
        ASKING.fetch_add(1, Ordering::SeqCst);
        Self
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        ASKING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Clears the status line, if one is shown (before any other stderr line).
pub(crate) fn clear_status(err: &mut impl Write) {
    if STATUS_SHOWN.swap(false, Ordering::SeqCst) {
        let _ = write!(err, "\r\x1b[2K");
    }
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A redrawn status line (stderr is a terminal).
    Status,
    /// JSON lines (`--log-format json`).
    Json,
    /// Only the usage line when a step ends (stderr is a pipe or file).
    Lines,
}

#[derive(Debug)]
struct Live {
    agent: String,
    turn: u32,
    tokens: u64,
    /// When this turn's first output token was seen (tokens/s counts from there).
    first: Option<(u32, Instant, Duration)>,
    elapsed: Duration,
    rate: Option<f64>,
    last_json: Option<Instant>,
}

#[derive(Debug, Default)]
struct State {
    live: BTreeMap<String, Live>,
    last_draw: Option<Instant>,
}

/// The [`ProgressSink`] of the binary.
#[derive(Debug)]
pub(crate) struct ModelMeter {
    mode: Mode,
    style: Style,
    state: Mutex<State>,
}

/// How often the status line is redrawn at most.
const DRAW_EVERY: Duration = Duration::from_millis(250);
/// How often a JSON progress line is written per step at most.
const JSON_EVERY: Duration = Duration::from_secs(1);

impl ModelMeter {
    /// The meter for this process, or none (`-q`, or `--json` without `--log-format json`).
    pub(crate) fn for_process(
        style: Style,
        quiet: bool,
        json: bool,
        json_logs: bool,
    ) -> Option<Self> {
        let mode = if json_logs {
            Mode::Json
        } else if std::io::stderr().is_terminal() {
            Mode::Status
        } else {
            Mode::Lines
        };
        (!quiet && (!json || json_logs)).then(|| Self {
            mode,
            style,
            state: Mutex::new(State::default()),
        })
    }

    fn streaming(
        &self,
        label: &str,
        agent: &str,
        turn: u32,
        (tokens, exact): (u64, bool),
        elapsed: Duration,
    ) {
        let Ok(mut s) = self.state.lock() else { return };
        let now = Instant::now();
        let live = s.live.entry(label.to_owned()).or_insert_with(|| Live {
            agent: agent.to_owned(),
            turn,
            tokens: 0,
            first: None,
            elapsed,
            rate: None,
            last_json: None,
        });
        live.turn = turn;
        live.tokens = tokens;
        live.elapsed = elapsed;
        if tokens > 0 && live.first.is_none_or(|(t, _, _)| t != turn) {
            live.first = Some((turn, now, elapsed));
        }
        live.rate = live.first.and_then(|(_, _, at)| {
            let secs = elapsed.saturating_sub(at).as_secs_f64();
            (secs >= 0.5).then(|| tokens as f64 / secs)
        });
        match self.mode {
            Mode::Lines => {}
            Mode::Json => {
                // The server's count at the end of a turn is always written: the last line
                // must not be an estimate.
                if exact || live.last_json.is_none_or(|t| now - t >= JSON_EVERY) {
                    live.last_json = Some(now);
                    json_line(&serde_json::json!({
                        "message": "model progress", "step": label, "agent": agent,
                        "turn": turn, "output_tokens": tokens,
                        "tokens_per_sec": live.rate.map(|r| (r * 10.0).round() / 10.0),
                        "elapsed_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                    }));
                }
            }
            Mode::Status => {
                if exact || s.last_draw.is_none_or(|t| now - t >= DRAW_EVERY) {
                    s.last_draw = Some(now);
                    self.draw(&s);
                }
            }
        }
    }

    fn draw(&self, s: &State) {
        let parts: Vec<String> = s
            .live
            .iter()
            .map(|(label, l)| {
                let rate = l
                    .rate
                    .map_or_else(String::new, |r| format!(", {r:.1} tok/s"));
                format!(
                    "{} [{}] turn {}: {} tokens{rate}, {:.0}s",
                    who(label),
                    l.agent,
                    l.turn,
                    l.tokens,
                    l.elapsed.as_secs_f64()
                )
            })
            .collect();
        if parts.is_empty() || ASKING.load(Ordering::SeqCst) > 0 {
            return;
        }
        let mut err = std::io::stderr().lock();
        // One screen line: a wrapped line would not be cleared by the next redraw.
        let width = crate::term::stderr_width()
            .unwrap_or(80)
            .saturating_sub(1)
            .max(20);
        let line = crate::term::clip(&format!("⋯ {}", parts.join(" | ")), width);
        let _ = write!(err, "\r\x1b[2K{}", self.style.dim(&line));
        let _ = err.flush();
        STATUS_SHOWN.store(true, Ordering::SeqCst);
    }

    /// A refused call is a line of its own: the status line alone looks like progress.
    fn refused(&self, label: &str, agent: &str, tool: &str, times: u32) {
        if self.mode == Mode::Json {
            json_line(&serde_json::json!({
                "message": "tool refused", "step": label, "agent": agent,
                "tool": tool, "times": times,
            }));
            return;
        }
        let again = if times > 1 {
            format!(" ({times} times the same call)")
        } else {
            String::new()
        };
        say(&format!(
            "  {} {}",
            self.style.dim(&format!("{} [{agent}]:", who(label))),
            self.style.dim(&format!("`{tool}` refused{again}"))
        ));
    }

    fn finished(&self, label: &str, agent: &str, usage: &Usage, elapsed: Duration) {
        let rate = {
            let Ok(mut s) = self.state.lock() else { return };
            let rate = s.live.remove(label).and_then(|l| l.rate);
            if self.mode == Mode::Status {
                clear_status(&mut std::io::stderr().lock());
                self.draw(&s);
            }
            rate
        };
        if self.mode == Mode::Json {
            json_line(&serde_json::json!({
                "message": "model usage", "step": label, "agent": agent,
                "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                "cache_read_tokens": usage.cache_read_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
                "turns": usage.turns, "cost_micro_usd": usage.cost_micro_usd,
                "elapsed_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            }));
            return;
        }
        say(&format!(
            "  {} {}",
            self.style.dim(&format!("{} [{agent}]:", who(label))),
            self.style.dim(&usage_text(usage, rate))
        ));
    }
}

/// `ask`/`plan` are the planner's calls; anything else is a step id.
fn who(label: &str) -> String {
    match label {
        "plan" => "planner".to_owned(),
        "ask" => "question".to_owned(),
        step => step.to_owned(),
    }
}

/// `1 234 tokens (in 1 000, out 234, cache read 0), 3 turns, $0.001234, 21.5 tok/s`.
pub(crate) fn usage_text(u: &Usage, rate: Option<f64>) -> String {
    let mut text = format!(
        "{} tokens (in {}, out {}",
        u.total_tokens(),
        u.input_tokens,
        u.output_tokens
    );
    if u.cache_read_tokens > 0 || u.cache_write_tokens > 0 {
        text.push_str(&format!(
            ", cache read {}, written {}",
            u.cache_read_tokens, u.cache_write_tokens
        ));
    }
    text.push_str(&format!(
        "), {}",
        orca_core::plural::count(u.turns, "turn", "turns")
    ));
    if u.cost_micro_usd > 0 {
        let c = u.cost_micro_usd;
        text.push_str(&format!(", ${}.{:06}", c / 1_000_000, c % 1_000_000));
    }
    if let Some(r) = rate {
        text.push_str(&format!(", {r:.1} tok/s"));
    }
    text
}

/// One JSON line on stderr shaped like the log lines.
fn json_line(fields: &serde_json::Value) {
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let value = serde_json::json!({
        "timestamp": now, "level": "INFO", "fields": fields, "target": "orca::progress",
    });
    let line = crate::redact::redact(&value.to_string());
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

impl ProgressSink for ModelMeter {
    fn report(&self, progress: &ModelProgress) {
        match progress {
            ModelProgress::Streaming {
                label,
                agent,
                turn,
                output_tokens,
                exact,
                elapsed,
            } => self.streaming(label, agent, *turn, (*output_tokens, *exact), *elapsed),
            ModelProgress::Finished {
                label,
                agent,
                usage,
                elapsed,
            } => self.finished(label, agent, usage, *elapsed),
            ModelProgress::ToolRefused {
                label,
                agent,
                tool,
                times,
            } => self.refused(label, agent, tool, *times),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_text_names_every_count() {
        let u = Usage {
            input_tokens: 1000,
            output_tokens: 234,
            cache_read_tokens: 50,
            cache_write_tokens: 0,
            turns: 3,
            cost_micro_usd: 1234,
        };
        assert_eq!(
            usage_text(&u, Some(21.49)),
            "1284 tokens (in 1000, out 234, cache read 50, written 0), 3 turns, $0.001234, 21.5 tok/s"
        );
    }
}
