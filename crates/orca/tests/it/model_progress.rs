//! Progress while a model streams: `orca run` against a fake model that
//! streams its answer slowly. With stderr a pipe there is no control code and no status line,
//! only the step's usage line; with `--log-format json` every stderr line is JSON, progress
//! included; at a terminal the status line is drawn (and cleared).
#![expect(clippy::unwrap_used, reason = "tests")]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common;
use crate::common::project::Project;

/// A model that streams `words` words of text, 40 ms apart, then calls `submit_result`.
fn stream_body(words: usize) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\r\n\r\n",
            json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let mut parts = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for i in 0..words {
        parts.push(chunk(json!({"content": format!("wörd{i} ")}), Value::Null));
    }
    let args = json!({"status": "success", "summary": "streamed and done"}).to_string();
    parts.push(chunk(
        json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "submit_result", "arguments": args}}]}),
        Value::Null,
    ));
    parts.push(chunk(json!({}), json!("tool_calls")));
    parts.push(format!(
        "data: {}\r\n\r\ndata: [DONE]\r\n\r\n",
        json!({"choices": [], "usage": {"prompt_tokens": 300, "completion_tokens": 45}})
    ));
    parts
}

/// Serves every request with the slow stream of 30 words; counts them.
fn start_model() -> (String, Arc<AtomicUsize>) {
    start_model_of(30)
}

/// Serves every request with a slow stream of `words` words; counts them.
fn start_model_of(words: usize) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            let Ok(mut socket) = socket else { continue };
            let seen = seen.clone();
            std::thread::spawn(move || {
                // The request: header lines up to a blank one, then content-length bytes.
                let mut reader = BufReader::new(socket.try_clone().unwrap());
                let mut length = 0;
                for line in reader.by_ref().lines() {
                    let Ok(line) = line else { return };
                    if line.is_empty() {
                        break;
                    }
                    if let Some((name, value)) = line.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; length];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                seen.fetch_add(1, Ordering::SeqCst);
                let _ = socket.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
                );
                for part in stream_body(words) {
                    if socket.write_all(part.as_bytes()).is_err() {
                        return;
                    }
                    let _ = socket.flush();
                    std::thread::sleep(Duration::from_millis(40));
                }
            });
        }
    });
    (url, count)
}

fn project(url: &str) -> (Project, String) {
    let p = Project::new();
    p.write(
        ".orca/config.toml",
        &format!(
            // A window given: nothing asks the server for one (only chat turns are counted).
            "[agents.coder]\nbackend = \"ollama\"\nbase_url = \"{url}\"\nmodel = \"m\"\n\n\
             [agents.coder.generation]\ncontext_window = 32768\n"
        ),
    );
    let plan = json!({
        "goal": "stream", "summary": "one model step", "assumptions": ["none"],
        "risks": ["none"], "verification": ["the result"],
        "steps": [{"id": "work", "agent": "coder", "description": "say something", "depends_on": []}],
    })
    .to_string();
    let id = p.create("plan.json", &plan);
    (p, id)
}

#[test]
fn piped_stderr_has_no_progress_control_codes_and_json_logs_stay_json() {
    let (url, requests) = start_model();

    // stderr a pipe, human logs.
    let (p, plan) = project(&url);
    let out = p.run(&["run", &plan, "--yes"]);
    let err = common::project::stderr(&out);
    assert_eq!(common::project::code(&out), 0, "{err}");
    let controls = err.matches(['\x1b', '\r']).count();
    println!("piped stderr: {controls} control characters\n{err}");
    assert_eq!(controls, 0, "{err:?}");
    assert!(!err.contains('⋯'), "no status line on a pipe: {err}");
    // The step's usage after it ends.
    assert!(
        err.contains("work [coder]: 345 tokens (in 300, out 45), 1 turn"),
        "{err}"
    );

    // --log-format json: every line JSON, progress among them. A stream of 10 words ends
    // about 0.2 s after its first progress line, well within the one-a-second limit.
    let (short_url, short_requests) = start_model_of(10);
    let (p, plan) = project(&short_url);
    let out = p.run(&["--log-format", "json", "run", &plan, "--yes"]);
    let err = common::project::stderr(&out);
    assert_eq!(common::project::code(&out), 0, "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    let parsed: Vec<Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let progress = parsed
        .iter()
        .filter(|v| v["fields"]["message"] == "model progress")
        .count();
    let usage: Vec<&Value> = parsed
        .iter()
        .filter(|v| v["fields"]["message"] == "model usage")
        .collect();
    println!(
        "json stderr: {} lines, {} not JSON, {progress} progress, {} usage",
        lines.len(),
        lines.len() - parsed.len(),
        usage.len()
    );
    assert_eq!(parsed.len(), lines.len(), "{err}");
    assert!(progress >= 1, "{err}");
    // The last progress line of the turn is the server's count (45), not the estimate made
    // while it streamed (one a content event, or a token per four characters), whatever the
    // one-a-second limit of progress lines.
    let shown: Vec<&Value> = parsed
        .iter()
        .filter(|v| v["fields"]["message"] == "model progress")
        .map(|v| &v["fields"]["output_tokens"])
        .collect();
    println!("progress lines' output tokens: {shown:?} (the server reported 45)");
    assert_eq!(shown.last().copied(), Some(&json!(45)), "{err}");
    assert_eq!(usage.len(), 1, "{err}");
    assert_eq!(usage[0]["fields"]["output_tokens"], 45);
    assert_eq!(usage[0]["fields"]["step"], "work");
    assert_eq!(
        requests.load(Ordering::SeqCst) + short_requests.load(Ordering::SeqCst),
        2,
        "one streamed turn per run"
    );

    // -q: nothing about the model.
    let (p, plan) = project(&url);
    let out = p.run(&["-q", "run", &plan, "--yes"]);
    let err = common::project::stderr(&out);
    assert!(!err.contains("tokens"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_terminal_the_status_line_shows_tokens_and_is_cleared() {
    let (url, _) = start_model();
    let (p, plan) = project(&url);
    let (root, config) = (p.root().to_path_buf(), p.config.path().to_path_buf());
    let (screen, code) = tokio::task::spawn_blocking(move || {
        let (controller, terminal) = orca_testkit::pty::openpty();
        let mut child = {
            let mut cmd = common::isolated(&root, &config);
            cmd.args(["run", &plan, "--yes"])
                .stdin(Stdio::null())
                .stderr(Stdio::from(terminal))
                .stdout(Stdio::piped());
            cmd.spawn().unwrap()
        };
        let screen = orca_testkit::pty::record(&controller);
        let status = orca_testkit::pty::wait(&mut child, "the run");
        drop(controller);
        (screen.join().unwrap(), status.code())
    })
    .await
    .unwrap();
    let drawn = screen.matches("⋯ work [coder] turn 1:").count();
    println!("status line drawn {drawn} time(s)");
    assert_eq!(code, Some(0), "{screen}");
    assert!(drawn >= 1, "{screen:?}");
    assert!(screen.contains("tokens"), "{screen:?}");
    // Cleared before the usage line and the ✓ line.
    assert!(screen.contains("\r\x1b[2K"), "{screen:?}");
}
