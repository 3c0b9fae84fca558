//! Sessions of command-line agents: the agent's own id (Claude Code `session_id`, Codex
//! `thread_id`, opencode `sessionID`) as an orca [`SessionId`], back again for resuming, the
//! note a person resumes it with, and Codex's running thread totals (ADR 0020).

use orca_core::{SessionId, Usage};

use super::{CliAgent, CliKind};

impl CliAgent {
    /// The session id orca hands out for a native one.
    pub(super) fn session_for(&self, native: &str) -> SessionId {
        if let Ok(id) = format!("sess_{native}").parse::<SessionId>() {
            return id;
        }
        let mut map = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((id, _)) = map.iter().find(|(_, n)| n.as_str() == native) {
            return *id;
        }
        let id = SessionId::new();
        map.insert(id, native.to_owned());
        id
    }

    /// The native session id of one orca handed out.
    pub(super) fn native_session(&self, id: SessionId) -> Option<String> {
        let map = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(native) = map.get(&id) {
            return Some(native.clone());
        }
        match self.spec.kind {
            CliKind::ClaudeCode | CliKind::Codex => {
                id.to_string().strip_prefix("sess_").map(str::to_owned)
            }
            // A declared program keeps no session orca knows of.
            CliKind::Opencode | CliKind::Declared => None,
        }
    }

    /// How a person resumes a session, for the step record.
    pub(super) fn resume_note(&self, native: &str) -> String {
        let how = match self.spec.kind {
            CliKind::ClaudeCode => format!("claude --resume {native}"),
            CliKind::Codex => format!("codex resume {native}"),
            CliKind::Opencode => format!("opencode --session {native}"),
            CliKind::Declared => format!("{} (its own session {native})", self.spec.program),
        };
        format!(
            "{} session {native} (resume: `{how}`)",
            self.spec.kind.as_str()
        )
    }
}

/// The tokens of `now` not already in `before` (turns are counted per run, not summed).
pub(super) fn usage_since(before: &Usage, now: &Usage) -> Usage {
    Usage {
        input_tokens: now.input_tokens.saturating_sub(before.input_tokens),
        output_tokens: now.output_tokens.saturating_sub(before.output_tokens),
        cache_read_tokens: now
            .cache_read_tokens
            .saturating_sub(before.cache_read_tokens),
        cache_write_tokens: now
            .cache_write_tokens
            .saturating_sub(before.cache_write_tokens),
        turns: now.turns,
        cost_micro_usd: now.cost_micro_usd.saturating_sub(before.cost_micro_usd),
    }
}
