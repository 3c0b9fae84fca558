//! Which command-line agent, and what each needs: its backend name, program, state
//! directories and permission modes.

/// Which command-line agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CliKind {
    /// Claude Code.
    ClaudeCode,
    /// OpenAI Codex CLI.
    Codex,
    /// opencode.
    Opencode,
    /// Any other program, from its declaration (`backend = "cli"`, [`Declaration`](super::Declaration)).
    Declared,
}

impl CliKind {
    /// The backend name used in config (`claude-code`, `codex`, `opencode`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude-code",
            Self::Codex => "codex",
            Self::Opencode => "opencode",
            Self::Declared => "cli",
        }
    }

    /// Where the agent keeps its own state, relative to the home directory: writable in the
    /// kernel sandbox besides the project.
    #[must_use]
    pub const fn state_dirs(self) -> &'static [&'static str] {
        match self {
            Self::ClaudeCode => &[".claude", ".cache/claude", ".config/claude"],
            Self::Codex => &[".codex"],
            Self::Opencode => &[
                ".local/share/opencode",
                ".local/state/opencode",
                ".config/opencode",
                ".cache/opencode",
            ],
            // Declared by the agent's config (`Declaration::state_dirs`).
            Self::Declared => &[],
        }
    }

    /// The default executable.
    #[must_use]
    pub const fn default_program(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude",
            Self::Codex => "codex",
            Self::Opencode => "opencode",
            // `command` is required by the config.
            Self::Declared => "",
        }
    }

    /// The permission mode used when the config names none: the one that lets the agent edit
    /// the project without asking (Claude Code `acceptEdits`, Codex `workspace-write`,
    /// opencode `auto`).
    #[must_use]
    pub const fn default_permission_mode(self) -> &'static str {
        match self {
            Self::ClaudeCode => "acceptEdits",
            Self::Codex => "workspace-write",
            Self::Opencode => "auto",
            // Its own flags, in `args`.
            Self::Declared => "",
        }
    }

    /// The permission modes accepted in config.
    #[must_use]
    pub const fn permission_modes(self) -> &'static [&'static str] {
        match self {
            // `claude --help`: acceptEdits, auto, bypassPermissions, default, dontAsk, plan.
            Self::ClaudeCode => &[
                "acceptEdits",
                "auto",
                "bypassPermissions",
                "default",
                "dontAsk",
                "plan",
            ],
            // `codex exec -s`.
            Self::Codex => &["read-only", "workspace-write", "danger-full-access"],
            // `auto`: `opencode run --auto`; `ask`: without it ("ask" permissions are rejected);
            // `plan`: its read-only `plan` agent, without `--auto`.
            Self::Opencode => &["auto", "ask", "plan"],
            Self::Declared => &[],
        }
    }

    /// The kind named by a config backend name.
    #[must_use]
    pub fn from_backend(name: &str) -> Option<Self> {
        match name {
            "claude-code" => Some(Self::ClaudeCode),
            "codex" => Some(Self::Codex),
            "opencode" => Some(Self::Opencode),
            "cli" => Some(Self::Declared),
            _ => None,
        }
    }
}
