//! A custom agent backend, written outside the library crates.
//!
//! `RuleBackend` implements `orca_agents::ChatBackend` with no HTTP at all: on its first turn it
//! lists the project's files with the `list_files` workspace tool (through orca's gate, which
//! checks the grant and audits the call); on its second it submits a result through the forced
//! `submit_result` tool. It is registered as a custom specialist `rules` and runs a two-step
//! plan end to end on the file store, with the audit log verified at the end.
//!
//! Run it: `cargo run -p orca --example custom_backend`

use std::sync::Arc;

use async_trait::async_trait;
use orca_agents::{
    Agents, BackendError, BackendSpec, ChatBackend, ChatRequest, ChatResponse, LoopSettings,
    Message, Profile, StopReason, WorkspaceTools,
};
use orca_core::{
    AgentId, AgentPort, Budget, PlanContent, Role, Step, StepId, ToolCall, ToolHost, Usage,
};
use orca_services::{NoHuman, Orca, Quiet, RunConfig};
use orca_store::FileStore;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A deterministic "model": list files, then report how many there are.
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
            None if request.tools.iter().any(|t| t.name == "list_files") => ToolCall {
                id: "list".into(),
                name: "list_files".into(),
                arguments: json!({ "path": "." }),
            },
            other => ToolCall {
                id: "submit".into(),
                name: "submit_result".into(),
                arguments: json!({
                    "status": "success",
                    "summary": format!("looked at the project: {} bytes of listing", other.map_or(0, |l| l.len())),
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

fn slug(s: &str) -> StepId {
    StepId::parse(s).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("hello.txt"), "hi\n")?;

    // The custom agent, next to the built-in `shell`.
    let rules = Profile {
        id: AgentId::parse("rules")?,
        role: Role::Specialist,
        description: "a rule-based agent that needs no model".into(),
        backend: BackendSpec::Custom(Arc::new(RuleBackend)),
        prompt: "You are a rule-based agent.".into(),
        workspace_tools: vec!["list_files".into()],
        limits: Budget::UNLIMITED,
    };
    let agents: Arc<dyn AgentPort> =
        Arc::new(Agents::new(dir.path(), [rules], LoopSettings::default())?);
    let workspace: Arc<dyn ToolHost> =
        Arc::new(WorkspaceTools::new(dir.path(), &["list_files".to_owned()])?);
    let store = Arc::new(FileStore::open(dir.path())?);
    let orca = Orca::new(
        store.clone(),
        agents,
        Arc::new(NoHuman),
        Some(workspace),
        Budget::UNLIMITED,
    );

    let content = PlanContent {
        goal: "look at the project with a custom backend".into(),
        summary: None,
        steps: vec![
            Step::new(slug("look"), AgentId::parse("rules")?, "look at the files"),
            Step::new(slug("count"), AgentId::shell(), "count the files")
                .with_command("ls | wc -l"),
        ],
        assumptions: vec!["none".into()],
        risks: vec!["none".into()],
        verification: vec!["both steps complete".into()],
        isolation: None,
        budget: None,
    };
    let proposal = orca.planning.create_proposal(content, None).await?;
    orca.planning
        .approve(proposal.id(), "example", None)
        .await?;
    let (_, execution) = orca.executions.create(proposal.id()).await?;
    let holder = orca_core::Holder {
        pid: std::process::id(),
        host: "example".into(),
        token: "t".into(),
    };
    let report = orca
        .runner(RunConfig::new(holder), Arc::new(Quiet))
        .run(execution, CancellationToken::new())
        .await?;

    let snapshot = orca.executions.get(execution).await?;
    let mut out = format!("outcome: {:?}\n", report.outcome);
    for task in &snapshot.tasks {
        let summary = task
            .value
            .success()
            .map(|s| s.summary.clone())
            .unwrap_or_default();
        out.push_str(&format!(
            "  {} {}: {}\n",
            task.value.step_id(),
            task.value.status(),
            summary.trim()
        ));
    }
    use orca_store::AuditStore as _;
    let log = orca_services::ExecutionService::log(proposal.id(), execution);
    out.push_str(&format!("audit: {:?}\n", store.verify(log).await?));
    std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes())?;
    Ok(())
}
