//! Stalls: an agent that has stopped making progress ends its attempt `stalled` before it
//! spends its budget, with a message naming what it repeated (the next attempt reads it).
//!
//! For the model loop, after each turn's tool calls have run:
//!
//! - **Repeats.** The calls of a conversation form one sequence, in the order the model gave
//!   them (`submit_result` aside). A call *repeats* the one before it when it has the same
//!   tool, the same arguments (as canonical JSON) and got the same result (text and error
//!   flag). `max_repeats` identical calls in a row stall. A call that changed something in
//!   between (a write, a command) breaks the row, and so does a read whose result changed.
//! - **Refusals repeated.** A call refused (an error result) counts against its tool,
//!   arguments and error wherever it comes in the conversation, not only in a row: a small
//!   model interleaves the same refused call with others. From the second identical refusal
//!   the error the model reads says how often it was already refused; `max_repeats` identical
//!   refusals stall.
//! - **Turns that change nothing.** A turn is *idle* when it made at least one tool call,
//!   every call was to a read-only tool ([`ToolAccess::Read`]), and every call's tool,
//!   arguments and result had all been seen before in this conversation. `stall_turns` idle
//!   turns in a row stall. A turn with any other call (a write, a command, a question to a
//!   human, a plan edit) or any new result is progress and starts the count again.
//!
//! A command-line agent stalls when it prints nothing and changes no file in its working
//! directory for `idle` (see the CLI runtime).

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use orca_core::{ToolAccess, ToolCall};
use orca_llm::backend::ToolResult;

/// How long a stalled agent may go on; `0` turns a model check off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StallLimits {
    /// Identical calls (tool, arguments, result) in a row that stall; 0: off, else at least 2.
    pub max_repeats: u32,
    /// Idle turns in a row (only reads, only results already seen) that stall; 0: off.
    pub stall_turns: u32,
    /// A command-line agent that prints nothing and changes no file for this long stalls;
    /// `None`: off.
    pub idle: Option<Duration>,
}

impl StallLimits {
    /// The defaults: 3 repeats, 5 idle turns, 10 minutes without output or file change.
    pub const DEFAULT: Self = Self {
        max_repeats: 3,
        stall_turns: 5,
        idle: Some(Duration::from_secs(600)),
    };

    /// No stall checks.
    pub const OFF: Self = Self {
        max_repeats: 0,
        stall_turns: 0,
        idle: None,
    };
}

impl Default for StallLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Characters of a repeated call's arguments named in the message.
const MAX_ARGUMENT_CHARS: usize = 200;

/// A call as compared: tool, canonical arguments, and a hash of its result.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Seen {
    tool: String,
    arguments: String,
    result: u64,
}

impl Seen {
    fn new(call: &ToolCall, result: &ToolResult) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        result.content.hash(&mut h);
        result.is_error.hash(&mut h);
        Self {
            tool: call.name.clone(),
            arguments: orca_core::format::canonical_json(&call.arguments),
            result: h.finish(),
        }
    }
}

/// Watches one conversation of the agent loop for stalls.
#[derive(Debug)]
pub(crate) struct Detector {
    limits: StallLimits,
    /// The last call and how many times in a row it has been made.
    last: Option<(Seen, u32)>,
    seen: HashSet<Seen>,
    /// Refused calls (error results) and how many times each was made.
    refused: HashMap<Seen, u32>,
    idle_turns: u32,
}

impl Detector {
    pub(crate) fn new(limits: StallLimits) -> Self {
        Self {
            limits,
            last: None,
            seen: HashSet::new(),
            refused: HashMap::new(),
            idle_turns: 0,
        }
    }

    /// Takes one turn's calls with their results and the access of their tools (in the order
    /// the model gave them, `submit_result` left out); `Some(message)` when the conversation
    /// has stalled.
    pub(crate) fn turn(
        &mut self,
        calls: &[(&ToolCall, &ToolResult, Option<ToolAccess>)],
    ) -> Option<String> {
        if calls.is_empty() {
            return None;
        }
        let mut idle = true;
        let mut stalled = None;
        for (call, result, access) in calls {
            let seen = Seen::new(call, result);
            let run = match &self.last {
                Some((last, n)) if *last == seen => n + 1,
                _ => 1,
            };
            if stalled.is_none() && self.limits.max_repeats >= 2 && run >= self.limits.max_repeats {
                stalled = Some(format!(
                    "called `{}` {run} times in a row with the same arguments and got the same result each time; do something else (read another file, change the approach) or submit a failure",
                    call.name,
                ));
            }
            if result.is_error {
                let times = self.refused.entry(seen.clone()).or_insert(0);
                *times += 1;
                if stalled.is_none()
                    && self.limits.max_repeats >= 2
                    && *times >= self.limits.max_repeats
                {
                    // Not the arguments: this message reaches the next attempt, and a small
                    // model's first call there was the one it quoted.
                    stalled = Some(format!(
                        "called `{}` {times} times with the same arguments and was refused the same way each time: {} — do what that says instead of the same call, or submit a failure",
                        call.name,
                        clip(result.content.trim_start_matches("error: ")),
                    ));
                }
            }
            idle &= *access == Some(ToolAccess::Read) && self.seen.contains(&seen);
            self.last = Some((seen.clone(), run));
            self.seen.insert(seen);
        }
        if stalled.is_some() {
            return stalled;
        }
        self.idle_turns = if idle { self.idle_turns + 1 } else { 0 };
        if self.limits.stall_turns > 0 && self.idle_turns >= self.limits.stall_turns {
            let (last, _) = self.last.as_ref()?;
            return Some(format!(
                "{} turns in a row only read what had already been read, with the same results (the last: `{}` with {}); do something else or submit a failure",
                self.idle_turns,
                last.tool,
                clip(&last.arguments),
            ));
        }
        None
    }
}

/// The note added to a refused call's error when the same call was refused before (so the
/// model reads that it is repeating itself), or `None` the first time.
fn repeated_refusal(times: u32, limit: u32) -> Option<String> {
    (times >= 2).then(|| {
        let left = if limit >= 2 {
            format!(
                "; after {limit} the attempt ends as stalled",
            )
        } else {
            String::new()
        };
        format!(
            "\n\nThis exact call was refused {times} times{left}. Do not repeat it: change it as the error says, or do something else."
        )
    })
}

impl Detector {
    /// After [`Self::turn`]: a refused call is shown on the progress display with how many
    /// times it was refused, and a repeated one says so in the error the model reads.
    pub(crate) fn annotate_refusal(&self, call: &ToolCall, result: &mut ToolResult) {
        if !result.is_error {
            return;
        }
        let times = self
            .refused
            .get(&Seen::new(call, result))
            .copied()
            .unwrap_or(0);
        if times > 0 {
            orca_llm::progress::tool_refused(&call.name, times);
        }
        if let Some(note) = repeated_refusal(times, self.limits.max_repeats) {
            tracing::info!(tool = %call.name, times, "a refused call was repeated");
            result.content.push_str(&note);
        }
    }
}

fn clip(text: &str) -> String {
    if text.chars().count() <= MAX_ARGUMENT_CHARS {
        return text.to_owned();
    }
    let cut: String = text.chars().take(MAX_ARGUMENT_CHARS).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: args,
        }
    }

    fn result(content: &str) -> ToolResult {
        ToolResult {
            call_id: "c".into(),
            name: "t".into(),
            content: content.into(),
            is_error: false,
        }
    }

    /// Feeds one call per turn; the turn (1-based) that stalled, if any.
    #[track_caller]
    fn stalls_at(limits: StallLimits, turns: &[(&str, Value, &str)]) -> Option<usize> {
        let mut d = Detector::new(limits);
        for (i, (name, args, out)) in turns.iter().enumerate() {
            let access = if name.starts_with("read") {
                Some(ToolAccess::Read)
            } else {
                Some(ToolAccess::Write)
            };
            let (c, r) = (call(name, args.clone()), result(out));
            if d.turn(&[(&c, &r, access)]).is_some() {
                return Some(i + 1);
            }
        }
        None
    }

    #[test]
    fn repeats_stall_at_the_limit_and_only_identical_ones_count() {
        let same = |n| vec![("read_file", json!({"path": "a"}), "A"); n];
        assert_eq!(stalls_at(StallLimits::DEFAULT, &same(20)), Some(3));
        // Keys in another order are the same arguments.
        let reordered = [
            ("read_file", json!({"path": "a", "n": 1}), "A"),
            ("read_file", json!({"n": 1, "path": "a"}), "A"),
            ("read_file", json!({"path": "a", "n": 1}), "A"),
        ];
        assert_eq!(stalls_at(StallLimits::DEFAULT, &reordered), Some(3));
        // A different result each time: the file changes under it (a log being written).
        let changing: Vec<_> = ["1", "2", "3", "4", "5", "6"]
            .iter()
            .map(|r| ("read_file", json!({"path": "a"}), *r))
            .collect();
        assert_eq!(stalls_at(StallLimits::DEFAULT, &changing), None);
        // Off.
        assert_eq!(stalls_at(StallLimits::OFF, &same(20)), None);
    }

    #[test]
    fn idle_turns_stall_and_progress_resets_them() {
        // a, b, then a, b, a … again: every read after the second was already seen.
        let alternating: Vec<_> = (0..20)
            .map(|i| {
                let p = if i % 2 == 0 { "a" } else { "b" };
                ("read_file", json!({ "path": p }), p)
            })
            .collect();
        assert_eq!(stalls_at(StallLimits::DEFAULT, &alternating), Some(7));
        // A write every fourth turn: never five idle turns in a row.
        let with_writes: Vec<_> = (0..40)
            .map(|i| match i % 4 {
                3 => ("write_file", json!({"path": "c", "n": i}), "ok"),
                n => {
                    let p = ["a", "b", "a"][n];
                    ("read_file", json!({ "path": p }), p)
                }
            })
            .collect();
        assert_eq!(stalls_at(StallLimits::DEFAULT, &with_writes), None);
    }
}
