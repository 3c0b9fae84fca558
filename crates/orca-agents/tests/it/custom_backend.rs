//! A custom backend implemented outside the crate, with no HTTP dependency: it implements
//! `ChatBackend` and runs through the real agent loop.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use common::{TestTools, fast_settings, task};
use orca_agents::{
    Agents, BackendError, BackendSpec, ChatBackend, ChatRequest, ChatResponse, Message, Profile,
    StopReason,
};
use orca_core::{AgentId, AgentPort, Budget, Role, TaskResult, ToolCall, Usage};
use serde_json::json;

/// Echoes: first asks `lookup`, then submits what the tool answered.
#[derive(Debug, Default)]
struct EchoBackend {
    calls: AtomicU32,
}

#[async_trait]
impl ChatBackend for EchoBackend {
    fn kind(&self) -> &str {
        "echo"
    }

    fn model(&self) -> Option<&str> {
        Some("echo-1")
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if n == 0 {
            // A transient error first: the loop retries it.
            return Err(BackendError::Overloaded {
                endpoint: "echo".into(),
                message: "busy".into(),
                retry_after: None,
            });
        }
        let tool_result = request.messages.iter().rev().find_map(|m| match m {
            Message::Tool { results } => results.first().map(|r| r.content.clone()),
            _ => None,
        });
        let call = match tool_result {
            None => ToolCall {
                id: "1".into(),
                name: "lookup".into(),
                arguments: json!({"key": "echo"}),
            },
            Some(content) => ToolCall {
                id: "2".into(),
                name: "submit_result".into(),
                arguments: json!({"status": "success", "summary": content}),
            },
        };
        Ok(ChatResponse {
            text: None,
            tool_calls: vec![call],
            stop_reason: StopReason::ToolUse,
            usage: Usage {
                input_tokens: 1,
                output_tokens: 1,
                turns: 1,
                cost_micro_usd: 7,
                ..Usage::default()
            },
        })
    }
}

#[tokio::test]
async fn a_custom_backend_runs_through_the_loop() {
    let backend = Arc::new(EchoBackend::default());
    let profile = Profile {
        id: AgentId::parse("echo").unwrap(),
        role: Role::Specialist,
        description: "echoes".into(),
        backend: BackendSpec::Custom(backend.clone()),
        prompt: "echo".into(),
        workspace_tools: vec![],
        limits: Budget::UNLIMITED,
    };
    let agents = Agents::new("/tmp", [profile], fast_settings(2)).unwrap();
    let info = agents
        .agents()
        .into_iter()
        .find(|a| a.id.as_str() == "echo")
        .unwrap();
    assert_eq!(
        (info.backend.as_str(), info.model.as_deref()),
        ("echo", Some("echo-1"))
    );
    let reply = agents
        .run_task(task("echo", Budget::UNLIMITED), &TestTools::new())
        .await;
    assert!(
        matches!(&reply.outcome, TaskResult::Success(s) if s.summary == r#"{"value":"echo!"}"#),
        "{:?}",
        reply.outcome
    );
    assert_eq!(reply.usage.cost_micro_usd, 14);
    assert_eq!(backend.calls.load(Ordering::SeqCst), 3);

    // A cost budget fails closed.
    let reply = agents
        .run_task(
            task(
                "echo",
                Budget {
                    max_cost_micro_usd: Some(5),
                    ..Budget::UNLIMITED
                },
            ),
            &TestTools::new(),
        )
        .await;
    assert!(
        matches!(&reply.outcome, TaskResult::Failure(f) if f.message.contains("cost budget exceeded")),
        "{:?}",
        reply.outcome
    );
}
