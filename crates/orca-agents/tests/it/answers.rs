//! The agent loop hands every text answer to its caller (`ToolHost::model_answered`, issue
//! 15), in order, with the turn and that turn's usage — also the answer of a turn that then
//! exceeds the budget (what the model said last is what a person debugging wants to read).
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::sync::Mutex;

use async_trait::async_trait;
use orca_agents::{Agents, BackendSpec, Profile};
use orca_core::{
    AgentId, AgentPort, Budget, Role, TaskResult, ToolCall, ToolError, ToolHost, ToolSpec, Usage,
};
use serde_json::{Value, json};

/// Offers `lookup`; keeps every answer it is told of.
#[derive(Default)]
struct Answers(Mutex<Vec<(u32, String, u64)>>);

#[async_trait]
impl ToolHost for Answers {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "lookup".into(),
            description: "looks a key up".into(),
            parameters: json!({"type": "object", "properties": {"key": {"type": "string"}}}),
        }]
    }

    async fn call(&self, _call: &ToolCall) -> Result<Value, ToolError> {
        Ok(json!("v"))
    }

    async fn model_answered(&self, turn: u32, text: &str, usage: &Usage) {
        self.0
            .lock()
            .unwrap()
            .push((turn, text.to_owned(), usage.input_tokens));
    }
}

async fn run(turns: Value, budget: Budget) -> (TaskResult, Vec<(u32, String, u64)>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("script.json");
    std::fs::write(&path, json!({"turns": turns}).to_string()).unwrap();
    let profile = Profile {
        id: AgentId::parse("coder").unwrap(),
        role: Role::Specialist,
        description: "test".into(),
        backend: BackendSpec::Scripted { path },
        prompt: "prompt".into(),
        workspace_tools: vec![],
        limits: Budget::UNLIMITED,
    };
    let agents = Agents::new(dir.path(), [profile], common::fast_settings(0)).unwrap();
    let host = Answers::default();
    let reply = agents.run_task(common::task("coder", budget), &host).await;
    let seen = host.0.lock().unwrap().clone();
    (reply.outcome, seen)
}

fn turn(text: Option<&str>, call: Option<(&str, Value)>, input: u64) -> Value {
    let calls: Vec<Value> = call
        .into_iter()
        .map(|(name, arguments)| json!({"name": name, "arguments": arguments}))
        .collect();
    json!({"text": text, "tool_calls": calls,
           "usage": {"input_tokens": input, "output_tokens": 1}})
}

#[tokio::test]
async fn every_text_answer_reaches_the_caller_in_order() {
    let (outcome, seen) = run(
        json!([
            turn(
                Some("first I look k up"),
                Some(("lookup", json!({"key": "k"}))),
                10
            ),
            turn(None, Some(("lookup", json!({"key": "j"}))), 20),
            turn(Some("   "), Some(("lookup", json!({"key": "i"}))), 30),
            turn(
                Some("k is v; done"),
                Some((
                    "submit_result",
                    json!({"status": "success", "summary": "k is v"})
                )),
                40
            ),
        ]),
        Budget::UNLIMITED,
    )
    .await;
    assert!(matches!(outcome, TaskResult::Success(_)), "{outcome:?}");
    println!("answers handed over: {}", seen.len());
    // Turns without text (or only white space) are not answers.
    assert_eq!(
        seen,
        [
            (1, "first I look k up".to_owned(), 10),
            (4, "k is v; done".to_owned(), 40)
        ]
    );
}

#[tokio::test]
async fn the_answer_of_a_turn_over_budget_is_handed_over_too() {
    let (outcome, seen) = run(
        json!([
            turn(Some("looking"), Some(("lookup", json!({"key": "k"}))), 100),
            turn(
                Some("still looking"),
                Some(("lookup", json!({"key": "k"}))),
                100
            ),
        ]),
        Budget {
            max_tokens: Some(150),
            ..Budget::UNLIMITED
        },
    )
    .await;
    assert!(matches!(outcome, TaskResult::Failure(_)), "{outcome:?}");
    let texts: Vec<&str> = seen.iter().map(|(_, t, _)| t.as_str()).collect();
    assert_eq!(texts, ["looking", "still looking"]);
}
