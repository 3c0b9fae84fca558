//! Shared test helpers.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test file uses a different subset"
)]
#![expect(clippy::unwrap_used, reason = "tests")]

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use orca_agents::{LoopSettings, RetryPolicy};
use orca_core::{
    AgentId, Budget, ExecutionId, PlanId, Step, StepId, TaskContext, TaskRequest, ToolCall,
    ToolError, ToolHost, ToolSpec,
};
use serde_json::{Value, json};

/// A task request for `agent`.
pub fn task(agent: &str, budget: Budget) -> TaskRequest {
    let plan_id = PlanId::new();
    let step_id = StepId::parse("work").unwrap();
    TaskRequest {
        agent: AgentId::parse(agent).unwrap(),
        execution_id: ExecutionId::new(),
        plan_id,
        step: Step::new(
            step_id.clone(),
            AgentId::parse(agent).unwrap(),
            "do the work",
        ),
        attempt: 1,
        context: TaskContext {
            plan_id,
            plan_goal: "a goal".into(),
            step_id,
            step_index: 0,
            total_steps: 1,
            dependencies: vec![],
            relevant_files: vec![],
            previous_attempts: vec![],
            omitted: 0,
        },
        budget,
        timeout: None,
        workdir: None,
    }
}

/// A task request for the `shell` agent running `command` (step `work`, attempt 1).
pub fn shell_task(command: &str, timeout: Option<std::time::Duration>) -> TaskRequest {
    let mut request = task(AgentId::SHELL, Budget::UNLIMITED);
    request.step = request.step.with_command(command);
    request.timeout = timeout;
    request
}

/// The `coder` specialist on `backend`, with a one-line prompt and no workspace tools.
pub fn coder_profile(backend: orca_agents::BackendSpec) -> orca_agents::Profile {
    orca_agents::Profile {
        id: AgentId::parse("coder").unwrap(),
        role: orca_core::Role::Specialist,
        description: "codes".into(),
        backend,
        prompt: "You are the coder.".into(),
        workspace_tools: vec![],
        limits: Budget::UNLIMITED,
    }
}

/// Loop settings with fast retries.
pub fn fast_settings(max_retries: u32) -> LoopSettings {
    LoopSettings {
        retry: RetryPolicy {
            max_retries,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(2),
        },
        ..LoopSettings::default()
    }
}

/// A tool host offering `lookup` (answers `{"value": <key>!}`; `read_file` answers the same
/// and is one of the tools the loop runs concurrently) and recording calls. With
/// `parallel`, each call waits until `parallel` calls are in flight at once.
pub struct TestTools {
    pub calls: Mutex<Vec<ToolCall>>,
    pub barrier: Option<tokio::sync::Barrier>,
    /// What `model_answered` was told, in order.
    pub answers: Mutex<Vec<String>>,
    /// What `agent_tool_used` was told, in order.
    pub own_tools: Mutex<Vec<orca_core::AgentToolUse>>,
}

impl TestTools {
    pub fn new() -> Self {
        Self {
            calls: Mutex::new(Vec::new()),
            barrier: None,
            answers: Mutex::new(Vec::new()),
            own_tools: Mutex::new(Vec::new()),
        }
    }

    pub fn parallel(n: usize) -> Self {
        Self {
            calls: Mutex::new(Vec::new()),
            barrier: Some(tokio::sync::Barrier::new(n)),
            answers: Mutex::new(Vec::new()),
            own_tools: Mutex::new(Vec::new()),
        }
    }

    pub fn names(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.name.clone())
            .collect()
    }
}

#[async_trait]
impl ToolHost for TestTools {
    fn specs(&self) -> Vec<ToolSpec> {
        ["lookup", "read_file"]
            .into_iter()
            .map(|name| ToolSpec {
                name: name.into(),
                description: "look a key up".into(),
                parameters: json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}),
            })
            .collect()
    }

    async fn call(&self, call: &ToolCall) -> Result<Value, ToolError> {
        self.calls.lock().unwrap().push(call.clone());
        if let Some(b) = &self.barrier {
            // A guard against a deadlock if calls ran one at a time: the test then fails on the
            // error below, it does not hang.
            if tokio::time::timeout(Duration::from_secs(10), b.wait())
                .await
                .is_err()
            {
                return Err(ToolError::new("calls did not run concurrently"));
            }
        }
        match call.name.as_str() {
            "lookup" | "read_file" => {
                Ok(json!({"value": format!("{}!", call.arguments["key"].as_str().unwrap_or("?"))}))
            }
            other => Err(ToolError::new(format!(
                "tool `{other}` is not granted to this agent"
            ))),
        }
    }

    async fn model_answered(&self, _turn: u32, text: &str, _usage: &orca_core::Usage) {
        self.answers.lock().unwrap().push(text.to_owned());
    }

    async fn agent_tool_used(&self, used: &orca_core::AgentToolUse) {
        self.own_tools.lock().unwrap().push(used.clone());
    }
}
