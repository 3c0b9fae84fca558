//! A fake OpenAI-compatible planner (127.0.0.1, port 0): it builds a one-step shell plan with
//! the plan tools and submits it as a proposal. It answers from the conversation so far.

use serde_json::{Value, json};

pub(crate) struct FakePlanner;

fn find_id(text: &str, prefix: &str) -> Option<String> {
    text.match_indices(prefix).find_map(|(i, _)| {
        let body: String = text[i + prefix.len()..]
            .chars()
            .take_while(|c| c.is_ascii_hexdigit() || *c == '-')
            .collect();
        (body.len() == 36).then(|| format!("{prefix}{body}"))
    })
}

impl wiremock::Respond for FakePlanner {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let turns = messages.iter().filter(|m| m["role"] == "assistant").count();
        let plan_id = messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .find_map(|m| find_id(m["content"].as_str()?, "plan_"))
            .unwrap_or_default();
        let calls: Vec<(&str, Value)> = match turns {
            0 => vec![(
                "orca_plan_create_draft",
                json!({"goal": "greet the project", "summary": "write a file"}),
            )],
            1 => vec![
                (
                    "orca_plan_set_assumptions",
                    json!({"plan_id": plan_id, "items": ["a POSIX shell"]}),
                ),
                (
                    "orca_plan_set_risks",
                    json!({"plan_id": plan_id, "items": ["none"]}),
                ),
                (
                    "orca_plan_set_verification",
                    json!({"plan_id": plan_id, "items": ["hello.txt exists"]}),
                ),
                (
                    "orca_plan_add_step",
                    json!({"plan_id": plan_id, "step": {
                        "id": "write", "agent": "shell", "description": "write hello.txt",
                        "command": "echo hello > hello.txt", "depends_on": []}}),
                ),
                ("orca_plan_submit", json!({"plan_id": plan_id})),
            ],
            _ => vec![(
                "submit_result",
                json!({"type": "plan", "plan_id": plan_id, "stage": "proposal", "message": "one step"}),
            )],
        };
        let tool_calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                orca_testkit::fake_model::tool_call(&format!("call_{turns}_{i}"), name, args)
            })
            .collect();
        wiremock::ResponseTemplate::new(200).set_body_json(orca_testkit::fake_model::tool_calls(
            "chatcmpl-test",
            &body["model"],
            tool_calls,
        ))
    }
}

/// A started fake planner, and the project at `root` configured to plan with it.
pub(crate) async fn serve_for(root: &std::path::Path) -> wiremock::MockServer {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/chat/completions"))
        .respond_with(FakePlanner)
        .mount(&server)
        .await;
    std::fs::write(
        root.join(".orca/config.toml"),
        format!(
            "[agents.planner]\nbackend = \"ollama\"\nbase_url = \"{}/v1\"\nmodel = \"planner-model\"\n",
            server.uri()
        ),
    )
    .unwrap();
    server
}
