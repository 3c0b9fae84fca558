//! What the binary provides: starting a process that drives an execution, and telling who
//! drives one now. `orca-mcp` spawns nothing itself and names no concrete store.

use orca_core::redact::Redactor;
use orca_core::{ExecutionId, ExecutionStage, Plan};
use orca_store::LeaseInfo;
use serde_json::Value;

/// A driver process started for an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launched {
    /// Its process id.
    pub pid: u32,
}

/// The binary's side of the server.
pub trait Host: Send + Sync + std::fmt::Debug + 'static {
    /// Starts a process orca owns that drives `execution` until it ends or waits for a human
    /// (the MCP request returns at once; the run does not depend on the MCP session).
    ///
    /// # Errors
    ///
    /// A message saying why the process could not start.
    fn launch(&self, execution: ExecutionId) -> Result<Launched, String>;

    /// Who drives the execution now (`{"state": "running" | "interrupted", …}`), `None` when
    /// nothing does and nothing should (ended, or never started).
    fn driver(
        &self,
        execution: ExecutionId,
        stage: ExecutionStage,
        lease: Option<&LeaseInfo>,
    ) -> Option<Value>;

    /// The planner made `plan` from a request (`plan_from_request`), its conversation recorded
    /// in the plan's log: the binary exports it as the planner's trace when telemetry is on.
    /// Nothing by default.
    fn planned<'a>(
        &'a self,
        plan: &'a Plan,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        let _ = plan;
        Box::pin(async {})
    }

    /// The plan as a human approves it (what the terminal shows before its approval
    /// question: the steps, and what each step's environment will hold).
    fn describe_plan(&self, plan: &Plan) -> String {
        orca_services::hitl::render_plan(plan)
    }
}

/// How the server talks to people.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The project root, as shown in the commands the server hands to a human.
    pub root: String,
    /// The decision inbox (`orca serve`), if the user configured one.
    pub inbox_url: Option<String>,
    /// The binary's redactor: every tool result and resource passes through it.
    pub redactor: Redactor,
    /// Whether `plan_ask_human` may take a human's answer through MCP elicitation (off: it
    /// only returns the command, for users who do not trust their host's UI with approvals).
    pub elicitation: Elicitation,
}

/// Whether approvals may come through the host's UI (MCP elicitation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Elicitation {
    /// The host is asked when it can ask.
    Allowed,
    /// Never: the host is not asked, and `plan_ask_human` answers with this reason (what
    /// turned it off) and the command and inbox for the human.
    Off(String),
}

impl Elicitation {
    /// Turned off by `orca mcp --no-elicitation`.
    #[must_use]
    pub fn off_by_flag() -> Self {
        Self::Off(
            "approvals through the host are turned off (orca mcp --no-elicitation)".to_owned(),
        )
    }
}

impl Settings {
    /// The command a human runs to approve `plan`.
    #[must_use]
    pub fn approve_command(&self, plan: &str) -> String {
        format!(
            "orca --root {} plan approve {plan}",
            shell_quote(&self.root)
        )
    }
}

/// Quotes a path for a POSIX shell when it needs it.
fn shell_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@".contains(c))
    {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approve_command_quotes_odd_roots() {
        let s = |root: &str| Settings {
            root: root.to_owned(),
            inbox_url: None,
            redactor: Redactor::new(),
            elicitation: Elicitation::Allowed,
        };
        assert_eq!(
            s("/tmp/p").approve_command("plan_1"),
            "orca --root /tmp/p plan approve plan_1"
        );
        assert_eq!(
            s("/tmp/it's here").approve_command("plan_1"),
            r"orca --root '/tmp/it'\''s here' plan approve plan_1"
        );
    }
}
