//! Stalls on the real binary: a model step that reads the same file again and again ends its
//! attempt `stalled` after three requests, not its whole turn budget; the failure names the
//! tool and its arguments in `exec show` and the events; the next attempt's first request
//! tells the model what it repeated; `config show` lists the stall limits.

use crate::common::last_json;
use crate::common::project::{Project, code, stderr, stdout};

use serde_json::{Value, json};

/// A model that reads `notes.txt` in every turn, whatever it is told.
struct Looper;

impl wiremock::Respond for Looper {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let call = orca_testkit::fake_model::tool_call(
            "call_read",
            "read_file",
            &json!({"path": "notes.txt"}),
        );
        wiremock::ResponseTemplate::new(200).set_body_json(orca_testkit::fake_model::tool_calls(
            "chatcmpl-loop",
            &body["model"],
            vec![call],
        ))
    }
}

/// A model that reads `f0.txt`, `f1.txt`, `f2.txt`, then the same again, and again.
struct Cycler;

impl wiremock::Respond for Cycler {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let turn = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        let call = orca_testkit::fake_model::tool_call(
            &format!("call_{turn}"),
            "read_file",
            &json!({"path": format!("f{}.txt", turn % 3)}),
        );
        wiremock::ResponseTemplate::new(200).set_body_json(orca_testkit::fake_model::tool_calls(
            "chatcmpl-cycle",
            &body["model"],
            vec![call],
        ))
    }
}

/// The text of the first user message of a chat request.
fn first_user_message(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_model_ends_stalled_and_the_next_attempt_is_told() {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/chat/completions"))
        .respond_with(Looper)
        .mount(&server)
        .await;
    let p = Project::new();
    p.write("notes.txt", "the notes\n");
    p.write(
        ".orca/config.toml",
        &format!(
            "[agents.looper]\nbackend = \"ollama\"\nbase_url = \"{}/v1\"\nmodel = \"looper-model\"\ndescription = \"reads\"\ntools = [\"read_file\"]\n\n[agents.looper.limits]\nmax_turns = 40\n",
            server.uri()
        ),
    );
    let plan = p.write(
        "plan.json",
        &json!({"goal": "read the notes", "summary": "one model step", "assumptions": ["a model"],
            "risks": ["none"], "verification": ["none"],
            "steps": [{"id": "read", "agent": "looper", "description": "read notes.txt", "depends_on": []}]})
        .to_string(),
    );
    let plan = plan.display().to_string();
    let root = p.root().to_path_buf();
    let config = p.config.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        crate::common::orca(&root, &config, &["--json", "run", &plan, "--yes"])
    })
    .await
    .unwrap();
    let (c, ran) = last_json(&out, &["run"]);
    assert_eq!(
        c,
        4,
        "both attempts stalled; a human decides: {ran} {}",
        stderr(&out)
    );
    let exec = ran["execution_id"].as_str().unwrap().to_owned();

    let requests: Vec<Value> = server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path() == "/v1/chat/completions")
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    println!(
        "requests to the fake model: {} (two attempts; the turn budget was 40 each)",
        requests.len()
    );
    assert_eq!(requests.len(), 6, "three requests per attempt");

    // The second attempt starts with what the first repeated.
    let first = first_user_message(&requests[0]);
    let second = first_user_message(&requests[3]);
    println!("the second attempt's first message:\n{second}");
    // What the model reads is a contract: snapshotted, the plan's id redacted.
    let plan_id = ran["plan_id"].as_str().unwrap();
    insta::assert_snapshot!(
        "stalled_next_attempt_message",
        second.replace(plan_id, "[plan]")
    );
    assert!(!first.contains("Earlier attempts"), "{first}");
    assert!(
        second.contains("## Earlier attempts of this step"),
        "{second}"
    );
    assert!(
        second.contains(
            "attempt 1: stalled: called `read_file` 3 times in a row with the same arguments"
        ),
        "{second}"
    );

    // `exec show` and the events carry the typed code and the message.
    let (_, shown) = p.json(&["exec", "show", &exec]);
    let text = shown.to_string();
    assert!(text.contains("\"code\":\"stalled\""), "{shown}");
    let out = p.run(&["exec", "show", &exec]);
    let shown_text = stdout(&out);
    println!("{shown_text}");
    assert!(shown_text.contains("stalled"), "{shown_text}");
    assert!(shown_text.contains("read_file"), "{shown_text}");
    let out = p.run(&["--json", "events", &exec]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let failed: Vec<Value> = stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "task.attempt.failed")
        .collect();
    println!("task.attempt.failed events: {}", failed.len());
    assert_eq!(failed.len(), 2);
    for e in &failed {
        assert_eq!(e["data"]["failure"]["code"], "stalled", "{e}");
        let message = e["data"]["failure"]["message"].as_str().unwrap();
        // The tool, not its arguments (the next attempt copied a quoted call).
        assert!(
            message.contains("`read_file`") && !message.contains("notes.txt"),
            "{message}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rereading_the_same_files_ends_stalled_after_the_configured_stall_turns() {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/chat/completions"))
        .respond_with(Cycler)
        .mount(&server)
        .await;
    let p = Project::new();
    for i in 0..3 {
        p.write(&format!("f{i}.txt"), &format!("file {i}\n"));
    }
    p.write(
        ".orca/config.toml",
        &format!(
            "[agents.cycler]\nbackend = \"ollama\"\nbase_url = \"{}/v1\"\nmodel = \"cycler-model\"\ndescription = \"reads\"\ntools = [\"read_file\"]\n\n[agents.cycler.limits]\nstall_turns = 3\n",
            server.uri()
        ),
    );
    let plan = p.write(
        "plan.json",
        &json!({"goal": "read three files", "summary": "one model step", "assumptions": ["a model"],
            "risks": ["none"], "verification": ["none"],
            "steps": [{"id": "read", "agent": "cycler", "description": "read the files", "depends_on": []}]})
        .to_string(),
    );
    let plan = plan.display().to_string();
    let root = p.root().to_path_buf();
    let config = p.config.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        crate::common::orca(&root, &config, &["--json", "run", &plan, "--yes"])
    })
    .await
    .unwrap();
    let (c, ran) = last_json(&out, &["run"]);
    assert_eq!(c, 4, "{ran} {}", stderr(&out));
    let requests = server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path() == "/v1/chat/completions")
        .count();
    println!(
        "requests to the fake model: {requests} (two attempts: 3 new reads + 3 idle turns each)"
    );
    assert_eq!(requests, 2 * (3 + 3));
    let exec = ran["execution_id"].as_str().unwrap().to_owned();
    let (_, shown) = p.json(&["exec", "show", &exec]);
    let text = shown.to_string();
    assert!(text.contains("\"code\":\"stalled\""), "{shown}");
    assert!(text.contains("3 turns in a row only read"), "{shown}");
}

#[test]
fn config_show_lists_the_stall_limits_and_bad_ones_name_the_field() {
    let p = Project::new();
    p.write(
        ".orca/config.toml",
        "[agents.coder.limits]\nmax_repeats = 4\nstall_turns = 6\nidle_secs = 120\n",
    );
    let (c, shown) = p.json(&["config", "show"]);
    assert_eq!(c, 0, "{shown}");
    let settings = shown["settings"].as_array().unwrap();
    let value = |key: &str| {
        settings
            .iter()
            .find(|s| s["key"] == key)
            .map(|s| s["value"].clone())
            .unwrap_or_else(|| panic!("no {key} in {shown}"))
    };
    assert_eq!(value("agents.coder.limits.max_repeats"), 4);
    assert_eq!(value("agents.coder.limits.stall_turns"), 6);
    assert_eq!(value("agents.coder.limits.idle_secs"), 120);

    for (text, says) in [
        (
            "[agents.coder.limits]\nmax_repeats = 1\n",
            "agents.coder.limits.max_repeats: must be 0 (off) or at least 2",
        ),
        (
            "[agents.coder.limits]\nidle_secs = -5\n",
            "agents.coder.limits.idle_secs: must be a whole number",
        ),
    ] {
        p.write(".orca/config.toml", text);
        let out = p.run(&["plan", "list"]);
        println!("{}", stderr(&out).trim());
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        assert!(stderr(&out).contains("config.toml"), "{}", stderr(&out));
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
    }
}
