//! `orca ask` at a terminal ("`ask` prints the plan twice"): the planner's
//! plan is shown once — in the approval question — not also on stdout before it.

use std::io::{Read as _, Write as _};
use std::process::Stdio;

use crate::common;
use crate::common::project::Project;
use crate::e2e::FakeModels;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_at_a_terminal_shows_the_plan_once() {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/chat/completions"))
        .respond_with(FakeModels)
        .mount(&server)
        .await;
    let p = Project::new();
    let url = format!("{}/v1", server.uri());
    p.write(
        ".orca/config.toml",
        &format!(
            "[agents.planner]\nbackend = \"ollama\"\nbase_url = \"{url}\"\nmodel = \"planner-model\"\n\n\
             [agents.tester]\nbackend = \"ollama\"\nbase_url = \"{url}\"\nmodel = \"tester-model\"\n"
        ),
    );
    let (root, config) = (p.root().to_path_buf(), p.config.path().to_path_buf());
    let (screen, out, code) = tokio::task::spawn_blocking(move || {
        let (mut controller, terminal) = orca_testkit::pty::openpty();
        let mut child = {
            let mut cmd = common::isolated(&root, &config);
            cmd.args([
                "ask",
                "say hello in hello.txt and check it",
                "--on-failure",
                "stop",
            ])
            .stdin(Stdio::from(terminal.try_clone().unwrap()))
            .stderr(Stdio::from(terminal))
            .stdout(Stdio::piped());
            cmd.spawn().unwrap()
        };
        // Approve, no note.
        controller.write_all(b"approve\n\n").unwrap();
        let screen = orca_testkit::pty::record(&controller);
        let status = orca_testkit::pty::wait(&mut child, "the interactive ask");
        drop(controller);
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        (screen.join().unwrap(), out, status.code())
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{screen}\n{out}");
    let shown = format!("{screen}\n{out}");
    let times = shown.matches("Goal: greet the project").count();
    println!("the plan was shown {times} time(s)");
    assert_eq!(times, 1, "{shown}");
}
