//! A custom agent backend, written outside orca, running a plan through `orca-embed`.
//!
//! `RuleBackend` implements `ChatBackend` with no HTTP at all: on its first turn it lists the
//! project's files with the `list_files` workspace tool (through orca's gate, which checks the
//! grant and audits the call); on its second it submits a result through the forced
//! `submit_result` tool. It is registered as a custom specialist `rules`; a two-step plan is
//! proposed, approved and run on the file store, and its audit log verified.
//!
//! Run it: `cargo run -p orca-embed --example custom_backend`

use std::sync::Arc;

use async_trait::async_trait;
use orca_embed::{
    AgentId, BackendError, BackendSpec, Budget, ChatBackend, ChatRequest, ChatResponse, Error,
    Message, PlanContent, Profile, Project, Role, Step, StepId, StopReason, ToolCall, Usage,
};
use serde_json::json;

/// A deterministic "model": list files, then report how many bytes of listing it saw.
#[derive(Debug)]
struct RuleBackend;

#[async_trait]
impl ChatBackend for RuleBackend {
    fn kind(&self) -> &str {
        "rules"
    }

    fn model(&self) -> Option<&str> {
        Some("rules-1")
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError> {
        let listed = request.messages.iter().rev().find_map(|m| match m {
            Message::Tool { results } => results.first().map(|r| r.content.clone()),
            _ => None,
        });
        let call = match listed {
            None => ToolCall {
                id: "list".into(),
                name: "list_files".into(),
                arguments: json!({ "path": "." }),
            },
            Some(listing) => ToolCall {
                id: "submit".into(),
                name: "submit_result".into(),
                arguments: json!({
                    "status": "success",
                    "summary": format!("looked at the project: {} bytes of listing", listing.len()),
                    "key_findings": ["the rule backend ran without any model"],
                }),
            },
        };
        Ok(ChatResponse {
            text: None,
            tool_calls: vec![call],
            stop_reason: StopReason::ToolUse,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 5,
                turns: 1,
                ..Usage::default()
            },
        })
    }
}

/// Runs the example in `dir`; returns what it prints.
pub(crate) async fn run(dir: &std::path::Path) -> Result<String, Error> {
    let project = Project::builder(dir)
        .agent(Profile {
            id: AgentId::parse("rules")?,
            role: Role::Specialist,
            description: "a rule-based agent that needs no model".into(),
            backend: BackendSpec::Custom(Arc::new(RuleBackend)),
            prompt: "You are a rule-based agent.".into(),
            workspace_tools: vec!["list_files".into()],
            limits: Budget::UNLIMITED,
        })
        .open()?;
    let plan = project
        .propose(PlanContent {
            goal: "look at the project with a custom backend".into(),
            summary: None,
            steps: vec![
                Step::new(
                    StepId::parse("look")?,
                    AgentId::parse("rules")?,
                    "look at the files",
                ),
                Step::new(StepId::parse("count")?, AgentId::shell(), "count the files")
                    .with_command("ls | wc -l"),
            ],
            assumptions: vec!["none".into()],
            risks: vec!["none".into()],
            verification: vec!["both steps complete".into()],
            checks: Vec::new(),
            isolation: None,
            budget: None,
        })
        .await?;
    project.approve(plan, "example").await?;
    let finished = project.run(plan).await?;

    let mut out = format!("outcome: {:?}\n", finished.outcome());
    for step in finished.steps() {
        let summary = step.summary().unwrap_or_default().trim();
        out.push_str(&format!("  {} {}: {summary}\n", step.step(), step.status()));
    }
    out.push_str(&format!("audit verified: {}\n", finished.verified()));
    Ok(out)
}

#[tokio::main]
#[allow(
    dead_code,
    reason = "the test includes this file and calls `run` alone"
)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("hello.txt"), "hi\n")?;
    let out = run(dir.path()).await?;
    std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes())?;
    Ok(())
}
