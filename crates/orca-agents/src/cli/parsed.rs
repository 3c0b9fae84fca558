//! What is read from a command-line agent's output: its final answer, its transcript (messages
//! and the tools its own program ran, in order), usage, session and denials.

use orca_core::{AgentToolUse, Usage};
use serde_json::Value;

use super::str_at;

/// What was parsed from the agent's output.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Parsed {
    /// The final answer.
    pub(super) text: Option<String>,
    /// What the agent said and did, in order: every text message the model wrote (Claude
    /// Code's `assistant` text, Codex's `agent_message` items, opencode's `text` parts; the
    /// final answer last) and every tool its own program ran.
    pub(super) said: Vec<Said>,
    /// An error the agent reported (a failed run).
    pub(super) error: Option<String>,
    /// Warnings that did not fail the run (Codex "Reconnecting…"), kept for the cause.
    pub(super) warnings: Vec<String>,
    pub(super) usage: Usage,
    /// Whether the agent reported a cost (else it is priced from the table).
    pub(super) cost_reported: bool,
    /// The agent's own session id.
    pub(super) session: Option<String>,
    /// Tools whose use was denied by the agent's permission rules.
    pub(super) denials: Vec<String>,
}

/// The most messages and tool uses of one run recorded in the audit log (each is a durable
/// write; a program printing thousands of lines must not flood the log).
pub(super) const MAX_SAID: usize = 1000;

/// One item of an agent's transcript, as its program printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Said {
    /// A text message of the model.
    Answer(String),
    /// A tool the program ran itself.
    Tool(AgentToolUse),
}

impl Parsed {
    /// Notes a text message of the model (blank ones are not messages).
    pub(super) fn answered(&mut self, text: &str) {
        if !text.trim().is_empty() {
            self.said.push(Said::Answer(text.to_owned()));
        }
    }

    /// The text messages, in order.
    #[cfg(test)]
    pub(super) fn answers(&self) -> Vec<String> {
        self.said
            .iter()
            .filter_map(|s| match s {
                Said::Answer(a) => Some(a.clone()),
                Said::Tool(_) => None,
            })
            .collect()
    }

    /// The tools the program ran, in order.
    #[cfg(test)]
    pub(super) fn tools(&self) -> Vec<&AgentToolUse> {
        self.said
            .iter()
            .filter_map(|s| match s {
                Said::Tool(t) => Some(t),
                Said::Answer(_) => None,
            })
            .collect()
    }

    /// Keeps the session id `v` names at one of `paths`, if it names one.
    pub(super) fn session_from(&mut self, v: &Value, paths: &[&str]) {
        if let Some(id) = str_at(v, paths) {
            self.session = Some(id);
        }
    }

    /// Notes that the agent's permission rules refused `tool` (each tool named once).
    pub(super) fn denied(&mut self, tool: String) {
        if !self.denials.contains(&tool) {
            self.denials.push(tool);
        }
    }
}
