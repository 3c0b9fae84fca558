//! `orca ask` when its planner cannot finish: a model server answering 500 ends with the
//! documented exit code of a failed piece of work (3) and a message naming the server's
//! error, not "internal error" (1); Ctrl-C while the planner works exits 130 saying nothing
//! was approved or run; a planner that failed before it made a plan leaves its conversation
//! (its tool calls, redacted) in a file the failure names.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::project::{Project, code, stderr, stdout};

fn planner_config(p: &Project, base_url: &str) {
    p.write(
        ".orca/config.toml",
        &format!(
            "[agents.planner]\nbackend = \"ollama\"\nbase_url = \"{base_url}/v1\"\nmodel = \"planner-model\"\n"
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_server_answering_500_exits_3_with_its_message() {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(500).set_body_json(
            serde_json::json!({"error": {"message": "model crashed: out of memory"}}),
        ))
        .mount(&server)
        .await;
    let p = Project::new();
    planner_config(&p, &server.uri());
    let root = p.root().to_path_buf();
    let config = p.config.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        crate::common::orca(&root, &config, &["ask", "say hello in hello.txt"])
    })
    .await
    .unwrap();
    let requests = server.received_requests().await.unwrap_or_default().len();
    let err = stderr(&out);
    println!("exit {}; {requests} requests; stderr: {err}", code(&out));
    assert!(requests >= 1, "the model server was asked");
    assert_eq!(code(&out), 3, "{}{err}", stdout(&out));
    assert!(err.contains("the planner failed"), "{err}");
    assert!(err.contains("out of memory"), "the server's message: {err}");
    assert!(!err.contains("internal error"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_while_the_planner_works_exits_130_with_a_message() {
    // A model that never answers within the test.
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_delay(Duration::from_secs(600)))
        .mount(&server)
        .await;
    let p = Project::new();
    planner_config(&p, &server.uri());
    let mut cmd = crate::common::isolated(p.root(), p.config.path());
    cmd.args(["ask", "say hello in hello.txt"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    // Wait until the planner's request reached the server.
    let started = Instant::now();
    while server
        .received_requests()
        .await
        .unwrap_or_default()
        .is_empty()
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no request reached the model"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let err = stderr(&out);
    println!("exit {:?} after Ctrl-C; stderr: {err}", out.status.code());
    assert_eq!(code(&out), 130, "{}{err}", stdout(&out));
    assert!(err.contains("interrupted (Ctrl-C)"), "{err}");
    assert!(err.contains("nothing was approved or run"), "{err}");
}

/// A planner model that reads `notes.txt` in every turn, whatever it is told.
struct ReadsForever;

impl wiremock::Respond for ReadsForever {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: serde_json::Value =
            serde_json::from_slice(&request.body).unwrap_or(serde_json::Value::Null);
        let call = orca_testkit::fake_model::tool_call(
            "call_read",
            "read_file",
            &serde_json::json!({"path": "notes.txt"}),
        );
        wiremock::ResponseTemplate::new(200).set_body_json(orca_testkit::fake_model::tool_calls(
            "chatcmpl-reads",
            &body["model"],
            vec![call],
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_that_fails_before_a_plan_leaves_its_conversation_redacted() {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(ReadsForever)
        .mount(&server)
        .await;
    let p = Project::new();
    planner_config(&p, &server.uri());
    // A secret orca knows (from its environment), planted in the file the planner reads.
    let secret = "tok-7f3a9c1e5b2d4086a1c3e5f7";
    p.write("notes.txt", &format!("deploy with {secret}\n"));
    let out = crate::common::isolated(p.root(), p.config.path())
        .env("DEPLOY_SERVICE_TOKEN", secret)
        .args(["--json", "ask", "tidy the notes"])
        .output()
        .unwrap();
    let err = stderr(&out);
    println!("exit {}; stderr: {err}", code(&out));
    assert_eq!(code(&out), 3, "{}{err}", stdout(&out));
    assert!(err.contains("stalled"), "{err}");
    let printed = stdout(&out);
    let line: serde_json::Value = serde_json::Deserializer::from_str(&printed)
        .into_iter::<serde_json::Value>()
        .filter_map(Result::ok)
        .find(|v| v["type"] == "planner_failed")
        .unwrap_or_else(|| panic!("no planner_failed line: {}", stdout(&out)));
    let kept = std::path::PathBuf::from(
        line["conversation"]
            .as_str()
            .unwrap_or_else(|| panic!("no conversation kept: {line}")),
    );
    assert!(
        kept.starts_with(p.root().join(".orca/planner")),
        "{}",
        kept.display()
    );
    assert!(
        err.contains(&kept.display().to_string()),
        "the failure names it: {err}"
    );
    let text = std::fs::read_to_string(&kept).unwrap();
    println!("{text}");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "planner_conversation");
    assert_eq!(lines[0]["request"], "tidy the notes");
    assert_eq!(lines[0]["failure"]["code"], "stalled");
    let reads = lines
        .iter()
        .filter(|l| l["kind"] == "tool.call" && l["data"]["tool"] == "read_file")
        .count();
    assert_eq!(reads, 3, "each of the three reads, in order");
    assert!(text.contains("deploy with"), "the results are kept: {text}");
    let leaks = [text.as_str(), &stdout(&out), &err]
        .iter()
        .filter(|t| t.contains(secret))
        .count();
    println!("outputs holding the planted secret: {leaks}");
    assert_eq!(leaks, 0);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
}
