//! An optional live test against a real OpenAI-compatible endpoint. It runs only when
//! `ORCA_LIVE_OPENAI_BASE_URL` is set (with `ORCA_LIVE_OPENAI_MODEL`, and the key, if any, in
//! `ORCA_LIVE_OPENAI_API_KEY`); otherwise it prints that it was skipped and passes.

use crate::common;

use common::{TestTools, fast_settings, task};
use orca_agents::{Agents, ApiKey, BackendSpec, Profile};
use orca_core::{AgentId, AgentPort, Budget, Role, TaskResult};

#[tokio::test]
async fn live_openai_compatible_endpoint() {
    let Ok(base_url) = std::env::var("ORCA_LIVE_OPENAI_BASE_URL") else {
        println!(
            "skipped: set ORCA_LIVE_OPENAI_BASE_URL (and ORCA_LIVE_OPENAI_MODEL) to run the live test"
        );
        return;
    };
    let model = std::env::var("ORCA_LIVE_OPENAI_MODEL").unwrap_or_else(|_| "qwen2.5-coder".into());
    let api_key = std::env::var("ORCA_LIVE_OPENAI_API_KEY")
        .ok()
        .map(ApiKey::new);
    let profile = Profile {
        id: AgentId::parse("coder").unwrap(),
        role: Role::Specialist,
        description: "live".into(),
        backend: BackendSpec::OpenAi { base_url, model, api_key },
        prompt: "You are a test agent. Call the lookup tool with key \"x\", then submit a success whose summary is the value it returned.".into(),
        workspace_tools: vec![],
        limits: Budget::UNLIMITED,
    };
    let agents = Agents::new("/tmp", [profile], fast_settings(3)).unwrap();
    let reply = agents
        .run_task(
            task(
                "coder",
                Budget {
                    max_turns: Some(8),
                    ..Budget::UNLIMITED
                },
            ),
            &TestTools::new(),
        )
        .await;
    println!("live reply: {reply:?}");
    assert!(
        matches!(reply.outcome, TaskResult::Success(_)),
        "{:?}",
        reply.outcome
    );
}
