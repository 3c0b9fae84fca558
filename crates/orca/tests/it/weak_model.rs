//! The goal for small local models: the whole `ask → approve → run` flow works with a
//! model that never makes a native tool call (`tool_mode = "json"`). The fake server answers
//! as a weak model does: plain text holding one JSON object (sometimes in a fenced block, the
//! result once written bare in prose), and it checks that it was offered no native tools and
//! given the call schema as `response_format`.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

/// Requests that offered native tools, or came without a `json_schema` response format.
static BAD_REQUESTS: AtomicUsize = AtomicUsize::new(0);

struct WeakModel;

fn plan_id(messages: &[Value]) -> String {
    messages
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .find_map(|t| {
            // A plan id, not a tool name like `orca_plan_create_draft`.
            t.match_indices("plan_").find_map(|(at, _)| {
                let id: String = t[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                    .collect();
                (id.len() > 30).then_some(id)
            })
        })
        .unwrap_or_default()
}

impl wiremock::Respond for WeakModel {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let native_tools = body.get("tools").is_some_and(|t| !t.is_null());
        let schema = body["response_format"]["type"] == "json_schema";
        if native_tools || !schema {
            BAD_REQUESTS.fetch_add(1, Ordering::SeqCst);
        }
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let turns = messages.iter().filter(|m| m["role"] == "assistant").count();
        let plan = plan_id(&messages);
        let call = |tool: &str, args: Value| json!({"tool": tool, "arguments": args}).to_string();
        let text = if body["model"] == "tester-model" {
            // The result itself, in prose: accepted because it validates.
            "All good. {\"status\": \"success\", \"summary\": \"hello.txt says hello\"}".to_owned()
        } else {
            match turns {
                0 => format!(
                    "Let me start a draft.\n```json\n{}\n```",
                    call(
                        "orca_plan_create_draft",
                        json!({"goal": "greet the project", "summary": "write a file, then check it"})
                    )
                ),
                1 => call(
                    "orca_plan_set_assumptions",
                    json!({"plan_id": plan, "items": ["a POSIX shell"]}),
                ),
                2 => call(
                    "orca_plan_set_risks",
                    json!({"plan_id": plan, "items": ["none"]}),
                ),
                3 => call(
                    "orca_plan_set_verification",
                    json!({"plan_id": plan, "items": ["the tester reads hello.txt"]}),
                ),
                4 => call(
                    "orca_plan_add_step",
                    json!({"plan_id": plan, "step": {
                    "id": "write", "agent": "shell", "description": "write hello.txt",
                    "command": "echo hello > hello.txt", "depends_on": []}}),
                ),
                5 => call(
                    "orca_plan_add_step",
                    json!({"plan_id": plan, "step": {
                    "id": "check", "agent": "tester", "description": "check that hello.txt says hello",
                    "depends_on": ["write"]}}),
                ),
                6 => call("orca_plan_submit", json!({"plan_id": plan})),
                _ => format!(
                    "```json\n{}\n```",
                    call(
                        "submit_result",
                        json!({"type": "plan", "plan_id": plan, "stage": "proposal", "message": "two steps"})
                    )
                ),
            }
        };
        wiremock::ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-weak", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 20}
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_approve_run_with_a_model_that_never_calls_tools_natively() {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/chat/completions"))
        .respond_with(WeakModel)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let config_home = tempfile::tempdir().unwrap();
    let (root, home) = (dir.path().to_owned(), config_home.path().to_owned());
    let out = common::orca(&root, &home, &["init"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = format!("{}/v1", server.uri());
    std::fs::write(
        root.join(".orca/config.toml"),
        format!(
            "[defaults.generation]\ntool_mode = \"json\"\n\n\
             [agents.planner]\nbackend = \"ollama\"\nbase_url = \"{url}\"\nmodel = \"planner-model\"\n\n\
             [agents.tester]\nbackend = \"ollama\"\nbase_url = \"{url}\"\nmodel = \"tester-model\"\n"
        ),
    )
    .unwrap();
    let out = tokio::task::spawn_blocking(move || {
        common::orca(
            &root,
            &home,
            &["ask", "say hello in hello.txt and check it", "--yes"],
        )
    })
    .await
    .unwrap();
    // Model turns only (each agent's window is asked of the server first, ADR 0025).
    let requests = server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path().ends_with("/chat/completions"))
        .count();
    let bad = BAD_REQUESTS.load(Ordering::SeqCst);
    println!(
        "weak model: {requests} model requests, {bad} offering native tools or no call schema; exit {:?}",
        out.status.code()
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(bad, 0);
    assert_eq!(requests, 9, "8 planner turns and 1 tester turn");
}

/// The same flow against a real local model, when `ORCA_LIVE_BASE_URL` (up to `/v1`) and
/// `ORCA_LIVE_MODEL` are set (README: "Trying a small local model"); skipped loudly otherwise.
/// `ORCA_LIVE_TOOL_MODE` picks `json` (default) or `native`.
#[test]
fn live_ask_approve_run_with_a_local_model() {
    let (Ok(url), Ok(model)) = (
        std::env::var("ORCA_LIVE_BASE_URL"),
        std::env::var("ORCA_LIVE_MODEL"),
    ) else {
        println!("skipped: set ORCA_LIVE_BASE_URL and ORCA_LIVE_MODEL to run the live flow");
        return;
    };
    let mode = std::env::var("ORCA_LIVE_TOOL_MODE").unwrap_or_else(|_| "json".into());
    let dir = tempfile::tempdir().unwrap();
    let config_home = tempfile::tempdir().unwrap();
    let out = common::orca(dir.path(), config_home.path(), &["init"]);
    assert!(out.status.success());
    std::fs::write(
        dir.path().join(".orca/config.toml"),
        format!(
            "[defaults]\nbackend = \"openai\"\nbase_url = \"{url}\"\nmodel = \"{model}\"\n\n\
             [defaults.generation]\ntool_mode = \"{mode}\"\nmax_output_tokens = 2048\nrequest_timeout_secs = 900\ntemperature = 0.2\n"
        ),
    )
    .unwrap();
    let mut cmd = common::isolated(dir.path(), config_home.path());
    cmd.args([
        "ask",
        "Create a file hello.txt containing the word hello, using the shell agent with the command `echo hello > hello.txt`.",
        "--yes",
    ]);
    let out = cmd.output().unwrap();
    println!(
        "live {model} ({mode}): exit {:?}\n{}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt"))
            .unwrap()
            .trim(),
        "hello"
    );
}
