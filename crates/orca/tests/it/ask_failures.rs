//! `orca ask` when its planner cannot finish: a model server answering 500 ends with the
//! documented exit code of a failed piece of work (3) and a message naming the server's
//! error, not "internal error" (1); Ctrl-C while the planner works exits 130 saying nothing
//! was approved or run.

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
