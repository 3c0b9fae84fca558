//! An execution's audit log for people, whatever draws it: `audit show` (text), the web's audit
//! page (HTML). Each entry sits under its parent — execution → task attempt → model answer /
//! tool call — with the time since the log began, how long an ended attempt took, and a few
//! words saying what it records ([`detail`]). Also here: what a step's attempts left
//! ([`attempt_output`]) and the words for a transcript entry's outcome, shared by `exec logs`
//! and the web's step page. Pure: no store, no clock.

use std::collections::BTreeMap;

use orca_core::{AttemptOutcome, Task};
use orca_store::ExecutionSnapshot;
use serde_json::Value;
use time::{Duration, OffsetDateTime};

use crate::events::{ExecEvent, attempt_starts, start_of};

/// How long the attempt an entry ends took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Took {
    /// From the attempt's start to this entry (it ended the attempt).
    Ran(Duration),
    /// Recorded by the driver that took over: when the dead one's attempt ended is not known,
    /// only how long after its start it was found.
    FoundAfter(Duration),
}

/// One entry of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Node<'a> {
    /// The entry.
    pub event: &'a ExecEvent,
    /// How many ancestors it has in the log (0: a root).
    pub depth: usize,
    /// The time since the log's first entry.
    pub since_start: Duration,
    /// How long the attempt it ends took, when it ends one.
    pub took: Option<Took>,
    /// A few words saying what it records ([`detail`]).
    pub detail: String,
}

/// The entries of one execution's log (in log order) as a tree, in log order: each with its
/// depth under its parent, its offset from the first entry and, for an entry that ends an
/// attempt, how long the attempt took.
#[must_use]
pub fn tree(events: &[ExecEvent]) -> Vec<Node<'_>> {
    let Some(first) = events.first() else {
        return Vec::new();
    };
    let mut depth: BTreeMap<u64, usize> = BTreeMap::new();
    let at: BTreeMap<u64, OffsetDateTime> = events.iter().map(|e| (e.seq, e.at)).collect();
    let starts = attempt_starts(events);
    events
        .iter()
        .map(|e| {
            let d = e.parent.and_then(|p| depth.get(&p)).map_or(0, |d| d + 1);
            depth.insert(e.seq, d);
            let since = start_of(e, &starts, &at).map(|s| e.at - s);
            let took = match (e.kind.as_str(), since) {
                ("task.attempt.started", _) | (_, None) => None,
                ("task.attempt.abandoned" | "task.attempt.unrecorded", Some(s)) => {
                    Some(Took::FoundAfter(s))
                }
                (kind, Some(s)) if kind.starts_with("task.attempt.") => Some(Took::Ran(s)),
                _ => None,
            };
            Node {
                event: e,
                depth: d,
                since_start: e.at - first.at,
                took,
                detail: detail(&e.kind, &e.data),
            }
        })
        .collect()
}

/// What an entry says, in a few words (at most 100 characters).
#[must_use]
pub fn detail(kind: &str, data: &Value) -> String {
    let s = |k: &str| data.get(k).and_then(Value::as_str).map(str::to_owned);
    let mut parts = Vec::new();
    if let Some(by) = s("by") {
        parts.push(format!("by {by}"));
        if kind == "plan.approved" && crate::approval::through_agent_host(&by) {
            parts.push("through an agent host (MCP elicitation)".to_owned());
        }
    }
    match kind {
        "task.attempt.started" => {
            if let Some(agent) = s("agent") {
                parts.push(format!("agent {agent}"));
            }
        }
        kind if is_transcript(kind) => parts.extend(transcript_detail(kind, data)),
        "task.attempt.failed" => {
            if let Some(m) = data
                .get("failure")
                .and_then(|f| f.get("message"))
                .and_then(Value::as_str)
            {
                parts.push(m.to_owned());
            }
        }
        "task.attempt.completed" => {
            if let Some(summary) = s("summary") {
                parts.push(headline(&summary));
            }
        }
        _ => {
            for key in ["reason", "note", "feedback"] {
                if let Some(v) = s(key) {
                    parts.push(format!("{key}: {v}"));
                }
            }
        }
    }
    clip(&parts.join(" · "), 100)
}

/// The kinds that make up an agent's transcript: the model's answers, tool calls with their
/// results, a command-line agent's own tools, and checks.
#[must_use]
pub fn is_transcript(kind: &str) -> bool {
    matches!(
        kind,
        "agent.answer"
            | "tool.call"
            | "tool.refused"
            | "agent.tool"
            | "check.passed"
            | "check.failed"
    )
}

fn str_of<'a>(data: &'a Value, key: &str) -> Option<&'a str> {
    data.get(key).and_then(Value::as_str)
}

/// A transcript entry in a few words, for the tree.
fn transcript_detail(kind: &str, data: &Value) -> Vec<String> {
    let mut parts = Vec::new();
    if kind == "agent.answer" {
        if let Some(turn) = data.get("turn").and_then(Value::as_u64) {
            parts.push(format!("turn {turn}"));
        }
        if let Some(t) = str_of(data, "text") {
            parts.push(headline(t));
        }
        return parts;
    }
    if let Some(tool) = str_of(data, "tool") {
        parts.push(tool.to_owned());
    }
    if let Some(err) = str_of(data, "error").or_else(|| str_of(data, "reason")) {
        parts.push(format!("error: {err}"));
    } else if kind == "agent.tool" {
        let ok = data.get("ok").and_then(Value::as_bool) != Some(false);
        parts.push(
            if ok {
                "ok (its own tool)"
            } else {
                "failed (its own tool)"
            }
            .to_owned(),
        );
    } else if let Some(r) = str_of(data, "result") {
        let bytes = data.get("bytes").and_then(Value::as_u64).unwrap_or(0);
        parts.push(format!("ok ({bytes} bytes): {}", headline(r)));
    }
    parts
}

/// How a tool call ended, in words: `refused: …`, `error: …` or `ok (N bytes)`.
#[must_use]
pub fn tool_outcome(kind: &str, data: &Value) -> String {
    if kind == "tool.refused" {
        format!("refused: {}", str_of(data, "reason").unwrap_or(""))
    } else if let Some(err) = str_of(data, "error") {
        format!("error: {err}")
    } else {
        match data.get("bytes").and_then(Value::as_u64) {
            Some(n) => format!("ok ({n} bytes)"),
            None => "ok".to_owned(),
        }
    }
}

/// How a check ended, in words: `passed`, `failed: STATUS`, `failed: timed out after Ns`, or
/// `did not run: …`.
#[must_use]
pub fn check_outcome(data: &Value) -> String {
    match str_of(data, "verdict") {
        Some("passed") => "passed".to_owned(),
        Some("failed") => format!("failed: {}", str_of(data, "status").unwrap_or("?")),
        Some("timed_out") => format!(
            "failed: timed out after {}s",
            data.get("after_secs").and_then(Value::as_u64).unwrap_or(0)
        ),
        _ => format!("did not run: {}", str_of(data, "reason").unwrap_or("?")),
    }
}

/// The input and output tokens of an answer's turn, when it reported any (a command-line
/// agent reports usage per run, not per message).
#[must_use]
pub fn answer_tokens(data: &Value) -> Option<(u64, u64)> {
    data.get("usage")
        .map(|u| {
            let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
            (n("input_tokens"), n("output_tokens"))
        })
        .filter(|(i, o)| i + o > 0)
}

/// "… (recorded in part: the first 4 KB of N bytes)" when the recorded text is a prefix of
/// what was said.
#[must_use]
pub fn cut_note(data: &Value) -> Option<String> {
    let truncated = data.get("truncated").and_then(Value::as_bool) == Some(true);
    let bytes = data.get("bytes").and_then(Value::as_u64)?;
    truncated.then(|| format!("… (recorded in part: the first 4 KB of {bytes} bytes)"))
}

/// Whether `e` ends an attempt (completed, failed or interrupted).
#[must_use]
pub fn ends_attempt(e: &ExecEvent) -> bool {
    matches!(
        e.kind.as_str(),
        "task.attempt.completed" | "task.attempt.failed" | "task.attempt.interrupted"
    )
}

/// The output an attempt left in the task record: a failed attempt's failure output, or the
/// result's output for the attempt that completed the task.
#[must_use]
pub fn attempt_output(
    snap: &ExecutionSnapshot,
    step: &str,
    attempt: Option<u32>,
) -> Option<String> {
    let task = snap
        .tasks
        .iter()
        .map(|t| &t.value)
        .find(|t| t.step_id().as_str() == step)?;
    let number = attempt?;
    let record = task.attempts().iter().find(|a| a.number == number);
    match (task, record.map(|r| &r.outcome)) {
        (_, Some(AttemptOutcome::Failed { failure })) => failure.output.clone(),
        (Task::Completed(c), Some(AttemptOutcome::Succeeded) | None) => c.result.output.clone(),
        _ => None,
    }
}

/// The line a text's reader wants first: its last `summary:` line, else its last non-empty
/// line, at most 100 characters.
#[must_use]
pub fn headline(text: &str) -> String {
    let lines = || text.lines().map(str::trim).filter(|l| !l.is_empty());
    let line = lines()
        .rev()
        .find_map(|l| {
            l.get(..8)
                .filter(|p| p.eq_ignore_ascii_case("summary:"))
                .and_then(|_| l.get(8..))
                .map(str::trim)
        })
        .or_else(|| lines().next_back())
        .unwrap_or("");
    clip(line, 100)
}

/// At most `max` characters; a cut is marked `…` and closes the parentheses it opened.
#[must_use]
pub fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    let open = cut
        .matches('(')
        .count()
        .saturating_sub(cut.matches(')').count());
    cut.push_str(&")".repeat(open));
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use orca_core::{Digest, ExecutionId, PlanId};
    use orca_store::AuditEntry;
    use serde_json::json;

    fn entry(seq: u64, parent: Option<u64>, kind: &str, data: Value) -> AuditEntry {
        AuditEntry {
            seq,
            at: OffsetDateTime::UNIX_EPOCH + Duration::seconds(i64::try_from(seq).unwrap_or(0)),
            parent,
            kind: kind.to_owned(),
            data,
            prev: Digest::of_bytes(b""),
            hash: Digest::of_bytes(b""),
        }
    }

    #[test]
    fn entries_sit_under_their_parents_and_an_ended_attempt_says_how_long_it_took() {
        let entries = vec![
            entry(0, None, "execution.started", json!({})),
            entry(
                1,
                Some(0),
                "task.attempt.started",
                json!({"step_id": "a", "attempt": 1, "agent": "shell"}),
            ),
            entry(
                2,
                Some(1),
                "tool.call",
                json!({"tool": "read_file", "result": "hello", "bytes": 5}),
            ),
            entry(
                4,
                Some(1),
                "task.attempt.completed",
                json!({"step_id": "a", "attempt": 1, "summary": "done\nsummary: all `good`"}),
            ),
            entry(
                5,
                Some(0),
                "task.attempt.abandoned",
                json!({"step_id": "a", "attempt": 1}),
            ),
        ];
        let events = crate::events::from_entries(PlanId::new(), ExecutionId::new(), &entries);
        let nodes = tree(&events);
        let depths: Vec<usize> = nodes.iter().map(|n| n.depth).collect();
        assert_eq!(depths, [0, 1, 2, 2, 1]);
        assert_eq!(nodes[3].took, Some(Took::Ran(Duration::seconds(3))));
        assert_eq!(nodes[4].took, Some(Took::FoundAfter(Duration::seconds(4))));
        assert_eq!(nodes[1].took, None);
        assert_eq!(nodes[4].since_start, Duration::seconds(5));
        assert_eq!(nodes[1].detail, "agent shell");
        assert_eq!(nodes[2].detail, "read_file · ok (5 bytes): hello");
        assert_eq!(nodes[3].detail, "all `good`");
        assert!(tree(&[]).is_empty());
    }

    #[test]
    fn a_cut_closes_its_parentheses() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("a (bcdef", 5), "a (b…)");
    }
}
