//! The step environment is an allowlist for every process a step starts: the shell agent, a
//! command-line agent (which gets its profile's names), and `run_command` (outside a step:
//! the base and the config's names; inside a step: also the agent's and the step's names).
//! Planted keys are counted in what each process saw.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use common::{fast_settings, task};
use orca_agents::{
    Agents, BackendError, BackendSpec, ChatBackend, ChatRequest, ChatResponse, CliKind, CliSpec,
    Profile, StopReason, WorkspaceTools,
};
use orca_core::{AgentId, AgentPort, Budget, Role, TaskResult, ToolCall, ToolHost, Usage};
use orca_os::EnvPolicy;
use serde_json::json;

const PLANTED: &[(&str, &str)] = &[
    ("OPENAI_API_KEY", "sk-planted-openai-000000"),
    ("ANTHROPIC_API_KEY", "sk-ant-planted-111111"),
    ("GITHUB_TOKEN", "ghp_planted22222222222222222222222222"),
    ("AWS_SECRET_ACCESS_KEY", "planted-aws-secret-3333"),
];

fn policy() -> EnvPolicy {
    let mut vars: Vec<(String, String)> = PLANTED
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    vars.push(("PATH".into(), std::env::var("PATH").unwrap()));
    vars.push(("HOME".into(), "/nonexistent".into()));
    vars.push(("CONFIG_NAMED".into(), "config-value".into()));
    let mut p = EnvPolicy::from_vars(vars).with_config_names(["CONFIG_NAMED".to_owned()]);
    p.set_agent_names(
        AgentId::parse("coder").unwrap(),
        vec!["ANTHROPIC_API_KEY".into()],
    );
    p
}

/// The planted variables `env_text` shows, except those in `allowed`.
fn seen(env_text: &str, allowed: &[&str]) -> Vec<String> {
    PLANTED
        .iter()
        .filter(|(k, v)| {
            !allowed.contains(k) && (env_text.contains(&format!("{k}=")) || env_text.contains(v))
        })
        .map(|(k, _)| (*k).to_owned())
        .collect()
}

fn profile(backend: BackendSpec, tools: Vec<String>) -> Profile {
    Profile {
        id: AgentId::parse("coder").unwrap(),
        role: Role::Specialist,
        description: "codes".into(),
        backend,
        prompt: "You are the coder.".into(),
        workspace_tools: tools,
        limits: Budget::UNLIMITED,
    }
}

fn fake_cli(dir: &Path) -> String {
    let path = dir.join("agent");
    std::fs::write(
        &path,
        "#!/bin/sh\nenv > cli-env.txt\nprintf '%s\\n' '{\"type\":\"result\",\"is_error\":false,\"result\":\"ok\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn a_cli_agent_gets_its_profile_names_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let program = fake_cli(dir.path());
    let backend = BackendSpec::Cli(CliSpec {
        program,
        ..CliSpec::new(CliKind::ClaudeCode)
    });
    let agents = Agents::new(dir.path(), [profile(backend, vec![])], fast_settings(0))
        .unwrap()
        .with_env_policy(policy());
    let mut req = task("coder", Budget::UNLIMITED);
    req.step.env = vec!["GITHUB_TOKEN".into()];
    let reply = agents.run_task(req, &common::TestTools::new()).await;
    assert!(
        matches!(reply.outcome, TaskResult::Success(_)),
        "{:?}",
        reply.outcome
    );
    let env = std::fs::read_to_string(dir.path().join("cli-env.txt")).unwrap();
    let leaked = seen(&env, &["ANTHROPIC_API_KEY", "GITHUB_TOKEN"]);
    eprintln!(
        "cli agent: planted variables it was not given: {}",
        leaked.len()
    );
    assert!(leaked.is_empty(), "{leaked:?}");
    assert!(
        env.contains("ANTHROPIC_API_KEY=sk-ant-planted-111111"),
        "{env}"
    );
    assert!(env.contains("GITHUB_TOKEN=ghp_planted"), "{env}");
    assert!(
        env.contains("CONFIG_NAMED=config-value") && env.contains("ORCA_STEP_ID=work"),
        "{env}"
    );
}

#[tokio::test]
async fn the_shell_agent_gets_only_the_step_names() {
    let dir = tempfile::tempdir().unwrap();
    let agents = Agents::shell_only(dir.path()).with_env_policy(policy());
    let mut req = task("shell", Budget::UNLIMITED);
    req.step.command = Some("env".into());
    req.step.env = vec!["AWS_SECRET_ACCESS_KEY".into()];
    let reply = agents.run_task(req, &common::TestTools::new()).await;
    let TaskResult::Success(s) = reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    let out = s.output.unwrap();
    let leaked = seen(&out, &["AWS_SECRET_ACCESS_KEY"]);
    eprintln!(
        "shell agent: planted variables it was not given: {}",
        leaked.len()
    );
    assert!(leaked.is_empty(), "{leaked:?}");
    assert!(
        out.contains("AWS_SECRET_ACCESS_KEY=planted-aws-secret-3333"),
        "{out}"
    );
}

/// A model that calls `run_command env` once, then submits.
#[derive(Debug, Default)]
struct RunsEnv {
    turns: Mutex<u32>,
    output: Arc<Mutex<String>>,
}

#[async_trait]
impl ChatBackend for RunsEnv {
    fn kind(&self) -> &str {
        "test"
    }

    fn model(&self) -> Option<&str> {
        None
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError> {
        let mut turns = self.turns.lock().unwrap();
        *turns += 1;
        let call = if *turns == 1 {
            ToolCall {
                id: "1".into(),
                name: "run_command".into(),
                arguments: json!({"command": "env"}),
            }
        } else {
            if let Some(orca_agents::Message::Tool { results }) = request.messages.last() {
                *self.output.lock().unwrap() = results[0].content.clone();
            }
            ToolCall {
                id: "2".into(),
                name: "submit_result".into(),
                arguments: json!({"status": "success", "summary": "ran env"}),
            }
        };
        Ok(ChatResponse {
            text: None,
            tool_calls: vec![call],
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
        })
    }
}

#[tokio::test]
async fn run_command_gets_the_base_config_agent_and_step_names_only() {
    let dir = tempfile::tempdir().unwrap();
    let tools = WorkspaceTools::new(dir.path(), &["run_command".to_owned()])
        .unwrap()
        .with_env_policy(policy());
    // Outside a step: the base and the config's names.
    let out = tools
        .call(&ToolCall {
            id: "x".into(),
            name: "run_command".into(),
            arguments: json!({"command": "env"}),
        })
        .await
        .unwrap()
        .to_string();
    let leaked = seen(&out, &[]);
    eprintln!(
        "run_command outside a step: planted variables seen: {}",
        leaked.len()
    );
    assert!(leaked.is_empty(), "{leaked:?}");
    assert!(out.contains("CONFIG_NAMED=config-value"), "{out}");

    // Inside a step of `coder`: also the profile's and the step's names.
    let backend = Arc::new(RunsEnv::default());
    let output = Arc::clone(&backend.output);
    let agents = Agents::new(
        dir.path(),
        [profile(
            BackendSpec::Custom(backend),
            vec!["run_command".into()],
        )],
        fast_settings(0),
    )
    .unwrap()
    .with_env_policy(policy());
    let mut req = task("coder", Budget::UNLIMITED);
    req.step.env = vec!["GITHUB_TOKEN".into()];
    let reply = agents.run_task(req, &tools).await;
    assert!(
        matches!(reply.outcome, TaskResult::Success(_)),
        "{:?}",
        reply.outcome
    );
    let out = output.lock().unwrap().clone();
    let leaked = seen(&out, &["ANTHROPIC_API_KEY", "GITHUB_TOKEN"]);
    eprintln!(
        "run_command inside a step: planted variables it was not given: {}",
        leaked.len()
    );
    assert!(leaked.is_empty(), "{leaked:?}");
    assert!(
        out.contains("GITHUB_TOKEN=ghp_planted") && out.contains("ANTHROPIC_API_KEY="),
        "{out}"
    );
}
