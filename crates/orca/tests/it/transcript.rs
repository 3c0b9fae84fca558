//! An agent's transcript: a fake model server (127.0.0.1, port 0) scripts a
//! specialist that answers with text, calls a tool that fails, then one that succeeds, then one
//! whose result is far over the 4 KB bound, then submits. `exec logs` must show all of it in
//! order, `--follow` must print an answer while the step is still running, `audit show` must
//! show the new entries, and a secret planted in orca's environment, in a tool result and in a
//! model answer must appear in NO output and no file under `.orca/` — not even a piece of it
//! where a result was cut. The leaks are counted and printed (0). `audit verify` passes after.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Planted in orca's environment under a secret-like name (no known shape: only its exact
/// value can be redacted), in a file a tool reads, and in a model answer.
const SECRET: &str = "zqPLANTEDpw-4417-horse-battery";
const SECRET_VAR: &str = "LOGS_TEST_PASSWORD";
/// The size of the file whose read is far over the bound.
const BIG: usize = 100_000;

/// The scripted model: what it answers in each turn (by the number of assistant messages so
/// far). The last turn waits until the test releases it, so the step is still running while
/// `--follow` is read.
struct Script {
    released: AtomicBool,
    waiting: AtomicBool,
    requests: AtomicUsize,
}

fn call(id: &str, name: &str, args: &Value) -> Value {
    json!({"id": id, "type": "function",
        "function": {"name": name, "arguments": args.to_string()}})
}

impl Script {
    fn answer(&self, body: &Value) -> Value {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let turns = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        let (text, calls) = match turns {
            0 => (
                format!("ANSWER-ONE: I will read the notes; the password is {SECRET}."),
                vec![call("c0", "read_file", &json!({"path": "missing.txt"}))],
            ),
            1 => (
                "ANSWER-TWO: that file is missing, so I read notes.txt.".to_owned(),
                vec![call("c1", "read_file", &json!({"path": "notes.txt"}))],
            ),
            2 => (
                "ANSWER-THREE: now the big file.".to_owned(),
                vec![call("c2", "read_file", &json!({"path": "big.txt"}))],
            ),
            _ => {
                self.waiting.store(true, Ordering::SeqCst);
                let start = Instant::now();
                while !self.released.load(Ordering::SeqCst)
                    && start.elapsed() < Duration::from_secs(120)
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                (
                    "ANSWER-FOUR: done reading.".to_owned(),
                    vec![call(
                        "c3",
                        "submit_result",
                        &json!({"status": "success", "summary": "read the notes and the big file"}),
                    )],
                )
            }
        };
        json!({
            "id": "chatcmpl-transcript", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": text, "tool_calls": calls}}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 7}
        })
    }
}

/// One HTTP exchange: the request's JSON body in, `script`'s answer out, connection closed.
fn serve(mut stream: TcpStream, script: &Script) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let answer = script.answer(&body).to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
        answer.len()
    );
}

fn start_server(script: Arc<Script>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let script = script.clone();
            std::thread::spawn(move || serve(stream, &script));
        }
    });
    port
}

struct Project {
    dir: tempfile::TempDir,
    config: tempfile::TempDir,
}

impl Project {
    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// `orca` isolated, with the secret in its environment.
    fn cmd(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = common::isolated(self.root(), self.config.path());
        cmd.args(args)
            .env(SECRET_VAR, SECRET)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn files(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push((
                path.clone(),
                String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned(),
            ));
        }
    }
}

/// Every (output, form) where the secret, or a piece of it of 8 characters or more, appears.
fn leaks(outputs: &[(String, String)]) -> Vec<String> {
    let pieces: Vec<&str> = (0..=SECRET.len() - 8).map(|i| &SECRET[i..i + 8]).collect();
    let mut found = Vec::new();
    for (name, body) in outputs {
        if let Some(p) = pieces.iter().find(|p| body.contains(*p)) {
            found.push(format!("`{p}` in {name}"));
        }
    }
    found
}

/// Waits until `read` holds `needle` (a reader thread appends to it), or a minute passes.
fn wait_for(read: &Mutex<String>, needle: &str) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if read.lock().unwrap().contains(needle) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
#[expect(clippy::too_many_lines, reason = "one scenario, checked step by step")]
fn exec_logs_shows_answers_and_tool_results_in_order_bounded_and_redacted() {
    let script = Arc::new(Script {
        released: AtomicBool::new(false),
        waiting: AtomicBool::new(false),
        requests: AtomicUsize::new(0),
    });
    let port = start_server(script.clone());
    let p = Project {
        dir: tempfile::tempdir().unwrap(),
        config: tempfile::tempdir().unwrap(),
    };
    assert!(p.run(&["init"]).status.success());
    std::fs::write(
        p.root().join(".orca/config.toml"),
        format!(
            "[agents.reader]\nbackend = \"ollama\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\n\
             model = \"scripted\"\nrole = \"specialist\"\ndescription = \"reads files\"\n\
             tools = [\"read_file\"]\n"
        ),
    )
    .unwrap();
    std::fs::write(
        p.root().join("notes.txt"),
        format!("NOTES-RESULT line one\nthe password: {SECRET}\n"),
    )
    .unwrap();
    // The secret straddles the 4 KB bound: a cut inside it must not keep a piece of it.
    // A cut at the bound without the whole-word rule would keep its first 12 characters.
    let mut big = "filler ".repeat(4084 / 7 + 1);
    big.truncate(4083);
    big.push(' ');
    big.push_str(SECRET);
    while big.len() < BIG {
        big.push_str(" more filler");
    }
    std::fs::write(p.root().join("big.txt"), &big).unwrap();
    std::fs::write(
        p.root().join("plan.json"),
        json!({
            "goal": "read the notes", "summary": "one agent step",
            "assumptions": ["a fake model"], "risks": ["none"], "verification": ["the logs"],
            "steps": [{"id": "read", "agent": "reader", "description": "read the notes",
                       "depends_on": []}]
        })
        .to_string(),
    )
    .unwrap();

    let mut outputs: Vec<(String, String)> = Vec::new();
    let run = p.cmd(&["run", "plan.json", "--yes"]).spawn().unwrap();
    // The step is running, its model held in the last turn.
    let start = Instant::now();
    while !script.waiting.load(Ordering::SeqCst) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the model was never asked a fourth time ({} requests)",
            script.requests.load(Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let list = p.run(&["--json", "exec", "list"]);
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    let exec = list[0]["execution_id"].as_str().unwrap().to_owned();

    // `--follow` prints the answers while the step still runs (the model is held).
    let mut follow = p
        .cmd(&["exec", "logs", &exec, "read", "--follow"])
        .spawn()
        .unwrap();
    let followed = Arc::new(Mutex::new(String::new()));
    let reader = {
        let followed = followed.clone();
        let stdout = follow.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let line = line.unwrap_or_default();
                let mut f = followed.lock().unwrap();
                f.push_str(&line);
                f.push('\n');
            }
        })
    };
    let early = wait_for(&followed, "ANSWER-THREE");
    let still_running = !script.released.load(Ordering::SeqCst);
    println!(
        "--follow printed the third answer before the step ended: {}",
        early && still_running
    );
    assert!(
        early,
        "--follow printed no answer: {}",
        followed.lock().unwrap()
    );
    script.released.store(true, Ordering::SeqCst);
    let run = run.wait_with_output().unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    outputs.push(("run stdout".into(), text(&run)));
    outputs.push((
        "run stderr".into(),
        String::from_utf8_lossy(&run.stderr).into_owned(),
    ));
    let follow = follow.wait_with_output().unwrap();
    reader.join().unwrap();
    let followed = followed.lock().unwrap().clone();
    assert!(follow.status.success());
    assert!(followed.contains("ANSWER-FOUR"), "{followed}");
    outputs.push(("exec logs --follow".into(), followed));

    // `exec logs`: everything, in order.
    let logs = p.run(&["exec", "logs", &exec]);
    assert!(logs.status.success());
    let shown = text(&logs);
    println!("{shown}");
    let order = [
        "── read attempt 1 [reader] started",
        "answer (turn 1, reader, 40 in / 7 out tokens):",
        "ANSWER-ONE",
        "tool read_file {\"path\":\"missing.txt\"} → error:",
        "ANSWER-TWO",
        "tool read_file {\"path\":\"notes.txt\"} → ok",
        "│ NOTES-RESULT line one",
        "ANSWER-THREE",
        "tool read_file {\"path\":\"big.txt\"} → ok (",
        "recorded in part: the first 4 KB of",
        "ANSWER-FOUR",
        "── read attempt 1 completed",
    ];
    let mut at = 0;
    let mut out_of_order = 0;
    for needle in order {
        match shown[at..].find(needle) {
            Some(i) => at += i + needle.len(),
            None => {
                println!("NOT FOUND IN ORDER: {needle}");
                out_of_order += 1;
            }
        }
    }
    println!("transcript items missing or out of order: {out_of_order}");
    assert_eq!(out_of_order, 0);
    outputs.push(("exec logs".into(), shown.clone()));

    // `--json`: the transcript, the big result bounded with its original length.
    let json_out = p.run(&["--json", "exec", "logs", &exec]);
    let v: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    outputs.push(("exec logs --json".into(), text(&json_out)));
    let items = v["steps"][0]["attempts"][0]["transcript"]
        .as_array()
        .unwrap()
        .clone();
    let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "agent.answer",
            "tool.call",
            "agent.answer",
            "tool.call",
            "agent.answer",
            "tool.call",
            "agent.answer"
        ]
    );
    assert_eq!(items[1]["ok"], false);
    assert_eq!(items[3]["ok"], true);
    let bigcall = &items[5];
    let recorded = bigcall["result"].as_str().unwrap().len();
    println!(
        "big result: {} bytes read, {recorded} recorded, truncated {}",
        bigcall["bytes"], bigcall["truncated"]
    );
    assert_eq!(bigcall["bytes"].as_u64(), Some(big.len() as u64));
    assert_eq!(bigcall["truncated"], true);
    assert!(recorded <= 4096 && recorded > 3000, "{recorded}");
    let mut shape = v.clone();
    crate::transcript::normalize(&mut shape);
    insta::assert_json_snapshot!("exec_logs_transcript_json", shape);

    // `audit show` shows the new entries in the tree.
    let show = p.run(&["audit", "show", &exec]);
    let tree = text(&show);
    println!("{tree}");
    assert!(
        tree.contains("agent.answer") && tree.contains("ok (") && tree.contains("error:"),
        "{tree}"
    );
    outputs.push(("audit show".into(), tree));
    let show = p.run(&["--json", "audit", "show", &exec]);
    outputs.push(("audit show --json".into(), text(&show)));

    let verify = p.run(&["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify));
    outputs.push(("audit verify".into(), text(&verify)));

    // No line of the execution's audit log is much over the bound.
    let mut store = Vec::new();
    files(&p.root().join(".orca"), &mut store);
    let longest = store
        .iter()
        .filter(|(path, _)| path.to_string_lossy().ends_with(".audit.jsonl"))
        .flat_map(|(_, body)| body.lines().map(str::len).collect::<Vec<_>>())
        .max()
        .unwrap_or(0);
    println!("longest audit line: {longest} bytes (a {BIG}-byte result was read)");
    assert!(longest < 4096 + 2048, "{longest}");
    for (path, body) in store {
        outputs.push((path.display().to_string(), body));
    }

    // The secret was there to leak (the outputs were redacted, not empty).
    let all: String = outputs.iter().map(|(_, b)| b.as_str()).collect();
    assert!(all.contains("[redacted]"), "nothing was redacted");
    let found = leaks(&outputs);
    println!(
        "transcript: {} leaks in {} outputs ({} bytes)",
        found.len(),
        outputs.len(),
        all.len()
    );
    for l in &found {
        println!("  LEAK: {l}");
    }
    assert_eq!(found.len(), 0);
}

/// Replaces what differs between runs (ids, times, sizes) for the snapshot.
pub(crate) fn normalize(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                match k.as_str() {
                    "execution_id" => *x = json!("[exec_id]"),
                    "at" | "started_at" | "finished_at" if !x.is_null() => *x = json!("[time]"),
                    "result" if x.as_str().is_some_and(|s| s.len() > 200) => {
                        *x = json!(format!("[{} bytes]", x.as_str().unwrap().len()));
                    }
                    _ => normalize(x),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}
