//! A command-line agent's intermediate messages reach its caller: every message a
//! fake Codex or opencode prints is handed to `ToolHost::model_answered`, in order, final
//! answer last — what the gate records as `agent.answer` entries for `orca exec logs`.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::os::unix::fs::PermissionsExt as _;
use std::sync::Mutex;

use async_trait::async_trait;
use orca_agents::{Agents, BackendSpec, CliKind, CliSpec, Profile};
use orca_core::{
    AgentId, AgentPort, Budget, Role, TaskResult, ToolCall, ToolError, ToolHost, ToolSpec, Usage,
};
use serde_json::Value;

/// Offers nothing; keeps every answer it is told of.
#[derive(Default)]
struct Answers(Mutex<Vec<(u32, String)>>);

#[async_trait]
impl ToolHost for Answers {
    fn specs(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    async fn call(&self, call: &ToolCall) -> Result<Value, ToolError> {
        Err(ToolError::new(format!("no tool `{}`", call.name)))
    }

    async fn model_answered(&self, turn: u32, text: &str, _usage: &Usage) {
        self.0.lock().unwrap().push((turn, text.to_owned()));
    }
}

async fn answers(kind: CliKind, body: &str) -> (TaskResult, Vec<(u32, String)>) {
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("agent");
    std::fs::write(&program, format!("#!/bin/sh\ncat > /dev/null\n{body}\n")).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let profile = Profile {
        id: AgentId::parse("coder").unwrap(),
        role: Role::Specialist,
        description: "codes".into(),
        backend: BackendSpec::Cli(CliSpec {
            program: program.display().to_string(),
            model: Some("some-model".into()),
            ..CliSpec::new(kind)
        }),
        prompt: "You are the coder.".into(),
        workspace_tools: vec![],
        limits: Budget::UNLIMITED,
    };
    let agents = Agents::new(dir.path(), [profile], common::fast_settings(0)).unwrap();
    let host = Answers::default();
    let reply = agents
        .run_task(common::task("coder", Budget::UNLIMITED), &host)
        .await;
    let seen = host.0.lock().unwrap().clone();
    (reply.outcome, seen)
}

#[tokio::test]
async fn codex_messages_are_handed_over_in_order() {
    let body = r#"echo '{"type":"thread.started","thread_id":"abc"}'
echo '{"type":"item.completed","item":{"type":"agent_message","text":"First I look at main.rs"}}'
echo '{"type":"item.completed","item":{"type":"command_execution","command":"ls"}}'
echo '{"type":"item.completed","item":{"type":"agent_message","text":"Fixed the bug in main.rs"}}'
echo '{"type":"turn.completed","usage":{"input_tokens":10,"output_tokens":9}}'"#;
    let (outcome, seen) = answers(CliKind::Codex, body).await;
    println!("codex answers handed over: {}", seen.len());
    assert!(matches!(outcome, TaskResult::Success(_)), "{outcome:?}");
    assert_eq!(
        seen,
        [
            (1, "First I look at main.rs".to_owned()),
            (2, "Fixed the bug in main.rs".to_owned())
        ]
    );
}

#[tokio::test]
async fn opencode_text_parts_are_handed_over_in_order() {
    let body = r#"echo '{"type":"text","part":{"text":"Reading the docs"}}'
echo '{"type":"text","part":{"text":"Done: docs updated"}}'
echo '{"type":"step_finish","part":{"tokens":{"input":5,"output":6,"cache":{"read":0,"write":0}},"cost":0.001}}'"#;
    let (_, seen) = answers(CliKind::Opencode, body).await;
    println!("opencode answers handed over: {}", seen.len());
    let texts: Vec<&str> = seen.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(texts, ["Reading the docs", "Done: docs updated"]);
}

#[tokio::test]
async fn a_flood_of_messages_is_recorded_up_to_the_limit() {
    // 1,500 messages: at most 1,000 are handed over (each would be a durable audit write).
    let body = r#"i=0
while [ $i -lt 1500 ]; do
  echo "{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":\"message $i\"}}"
  i=$((i+1))
done
echo '{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}'"#;
    let (_, seen) = answers(CliKind::Codex, body).await;
    println!("messages printed: 1500, handed over: {}", seen.len());
    assert_eq!(seen.len(), 1000);
    assert_eq!(seen[0].1, "message 0");
}
