//! The commands added for daily use: `events`, `exec logs`, `exec retry`,
//! `audit show`, the list filters and the totals of `exec show`, each through the real binary
//! in temp dirs, with its JSON shape snapshot-tested (ids, times and durations redacted).

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::project::{Project, code, one_step, plan_doc, stderr, stdout};
use serde_json::Value;

/// Ids, times and durations replaced so a shape is stable.
fn shape(v: &Value) -> Value {
    match v {
        Value::String(s) if s.contains(&format!("{}/.tmp", tmp())) => Value::String(untemp(s)),
        Value::String(s) if s.starts_with("plan_") => "[plan_id]".into(),
        Value::String(s) if s.starts_with("exec_") => "[exec_id]".into(),
        Value::String(s) if s.starts_with("sha256:") => "[digest]".into(),
        Value::String(s) if s.len() >= 20 && s.as_bytes()[4] == b'-' && s.ends_with('Z') => {
            "[time]".into()
        }
        Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if k.ends_with("_ms") || k == "pid" {
                        "[n]".into()
                    } else if k == "data" && v.get("holder").is_some() {
                        "[holder]".into()
                    } else {
                        shape(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn tmp() -> String {
    std::env::temp_dir()
        .display()
        .to_string()
        .trim_end_matches('/')
        .to_owned()
}

/// `s` with every temp dir (`$TMPDIR/.tmpXXXXXX`) replaced by `[tmp]`.
fn untemp(s: &str) -> String {
    let prefix = format!("{}/.tmp", tmp());
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(&prefix) {
        out.push_str(&rest[..i]);
        let after = &rest[i + prefix.len()..];
        let n = after
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .count();
        out.push_str("[tmp]");
        rest = &after[n..];
    }
    out.push_str(rest);
    out
}

/// Runs `doc` with `--yes` and the given failure policy; the execution id and the exit code.
fn run(p: &Project, name: &str, doc: &str, on_failure: &str) -> (String, i32) {
    let file = p.write(name, doc);
    let (c, v) = p.json(&[
        "run",
        file.to_str().unwrap(),
        "--yes",
        "--on-failure",
        on_failure,
    ]);
    (v["execution_id"].as_str().unwrap().to_owned(), c)
}

fn event_lines(text: &str) -> (Vec<Value>, usize) {
    let mut bad = 0;
    let events = text
        .lines()
        .filter_map(|l| {
            let v = serde_json::from_str::<Value>(l)
                .ok()
                .filter(Value::is_object);
            if v.is_none() {
                bad += 1;
            }
            v
        })
        .collect();
    (events, bad)
}

// `orca events EXEC`: one JSON object per line, versioned, seq gap-free from 0, the step and
// attempt of every attempt's event; the same stream from any process, every time.
#[test]
fn events_is_a_stable_json_lines_stream() {
    let p = Project::new();
    let (exec, c) = run(
        &p,
        "two.json",
        &plan_doc(
            "two steps",
            &[("a", "echo did a", &[]), ("b", "echo did b", &["a"])],
        ),
        "stop",
    );
    assert_eq!(c, 0);
    let out = p.run(&["events", &exec]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (events, bad) = event_lines(&stdout(&out));
    println!(
        "events: {}, lines that are not a JSON object: {bad}",
        events.len()
    );
    assert_eq!(bad, 0);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["format_version"], 1, "{e}");
        assert_eq!(e["seq"], i, "gap-free from 0: {e}");
        assert_eq!(e["execution_id"], exec.as_str());
    }
    let kinds: Vec<String> = events
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["type"].as_str().unwrap(),
                e["step_id"].as_str().unwrap_or("-")
            )
        })
        .collect();
    insta::assert_json_snapshot!("events_two_steps", kinds);
    let completed = events
        .iter()
        .find(|e| e["type"] == "task.attempt.completed" && e["step_id"] == "b")
        .unwrap();
    insta::assert_json_snapshot!("event_attempt_completed", shape(completed));
    // The same stream again, from another process.
    assert_eq!(stdout(&p.run(&["events", &exec])), stdout(&out));
}

// `events --follow` from another process while the run waits: it prints as things happen and
// ends by itself when the execution ends.
#[test]
fn events_follow_ends_with_the_run() {
    let p = Project::new();
    let doc = plan_doc(
        "a gated step",
        &[(
            "gated",
            "touch started; while [ ! -f go ]; do sleep 0.05; done; echo went",
            &[],
        )],
    );
    let file = p.write("gated.json", &doc);
    let mut run = common::isolated(p.root(), p.config.path());
    let run = run
        .args(["run", file.to_str().unwrap(), "--yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !p.root().join("started").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the step never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, list) = p.json(&["exec", "list"]);
    let exec = list[0]["execution_id"].as_str().unwrap().to_owned();
    let mut follow = common::isolated(p.root(), p.config.path());
    let follow = follow
        .args(["events", &exec, "--follow"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(p.root().join("go"), "").unwrap();
    let followed = follow.wait_with_output().unwrap();
    let mut run = run;
    assert!(run.wait().unwrap().success());
    let (events, bad) = event_lines(&stdout(&followed));
    let after = event_lines(&stdout(&p.run(&["events", &exec]))).0;
    println!(
        "followed {} events (bad lines {bad}); {} in the log afterwards",
        events.len(),
        after.len()
    );
    assert_eq!(bad, 0);
    assert_eq!(events.last().unwrap()["type"], "execution.completed");
    assert_eq!(events, after[..events.len()].to_vec());
}

// `exec logs`: each attempt's output, failed ones included; an unknown step exits 2 naming the
// steps; `--json` has every attempt.
#[test]
fn exec_logs_shows_each_attempts_output() {
    let p = Project::new();
    let (exec, c) = run(
        &p,
        "logs.json",
        &plan_doc(
            "logs",
            &[
                ("ok", "echo first line; echo SECOND-LINE", &[]),
                ("bad", "echo going wrong; exit 7", &["ok"]),
            ],
        ),
        "stop",
    );
    assert_eq!(c, 3);
    let out = p.run(&["exec", "logs", &exec]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "── ok attempt 1",
        "│ SECOND-LINE",
        "── bad attempt 2 failed",
        "│ going wrong",
        "exit status 7",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let out = p.run(&["exec", "logs", &exec, "bad"]);
    assert!(
        !stdout(&out).contains("SECOND-LINE"),
        "only the step asked for"
    );
    let out = p.run(&["exec", "logs", &exec, "nope"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("ok, bad"), "{}", stderr(&out));
    let (c, v) = p.json(&["exec", "logs", &exec, "bad"]);
    assert_eq!(c, 0);
    insta::assert_json_snapshot!("exec_logs_json", shape(&v));
}

// `exec retry`: a new execution that reuses the completed steps (they do not run again), runs
// the failed one and what follows; `--from` re-runs a step and its dependents; both audited;
// the record verifies.
#[test]
fn exec_retry_forks_reusing_recorded_results() {
    let p = Project::new();
    let doc = plan_doc(
        "retry",
        &[
            ("first", "echo x >> first.runs; echo first done", &[]),
            ("flaky", "echo x >> flaky.runs; test -f fixed", &["first"]),
            ("last", "echo x >> last.runs; echo last done", &["flaky"]),
        ],
    );
    let (exec, c) = run(&p, "retry.json", &doc, "stop");
    assert_eq!(c, 3, "failed");
    std::fs::write(p.root().join("fixed"), "").unwrap();
    let (c, ran) = p.json(&["exec", "retry", &exec]);
    assert_eq!(c, 0, "{ran}");
    let fork = ran["execution_id"].as_str().unwrap().to_owned();
    assert_ne!(fork, exec);
    assert_eq!(ran["stage"], "completed");
    insta::assert_json_snapshot!("exec_retry_json", shape(&ran));
    let runs = |name: &str| {
        std::fs::read_to_string(p.root().join(name))
            .unwrap_or_default()
            .lines()
            .count()
    };
    println!(
        "runs: first {}, flaky {}, last {}",
        runs("first.runs"),
        runs("flaky.runs"),
        runs("last.runs")
    );
    assert_eq!(runs("first.runs"), 1, "a reused step does not run again");
    assert_eq!(
        runs("flaky.runs"),
        3,
        "two failed attempts, then the retry's"
    );
    assert_eq!(runs("last.runs"), 1);
    let events = event_lines(&stdout(&p.run(&["events", &fork]))).0;
    let forked = events
        .iter()
        .find(|e| e["type"] == "execution.forked")
        .unwrap();
    assert_eq!(forked["data"]["from_execution"], exec.as_str());
    assert_eq!(forked["data"]["reused"], serde_json::json!(["first"]));

    // --from first: everything runs again.
    let (c, again) = p.json(&["exec", "retry", &fork, "--from", "first"]);
    assert_eq!(c, 0, "{again}");
    assert_eq!(runs("first.runs"), 2);
    assert_eq!(runs("last.runs"), 2);
    let out = p.run(&["exec", "retry", &fork, "--from", "nope"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let out = p.run(&["audit", "verify"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
}

// `audit show`: the execution's causal tree (an attempt's end under its start) and a plan's
// lifecycle with its runs.
#[test]
fn audit_show_draws_the_timeline_as_a_tree() {
    let p = Project::new();
    let (exec, c) = run(&p, "one.json", &one_step("audit show"), "stop");
    assert_eq!(c, 0);
    let out = p.run(&["audit", "show", &exec]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let started = text
        .lines()
        .find(|l| l.contains("task.attempt.started"))
        .unwrap();
    let done = text
        .lines()
        .find(|l| l.contains("task.attempt.completed"))
        .unwrap();
    let indent = |l: &str| l.find("task.attempt").unwrap();
    assert!(
        indent(done) > indent(started),
        "the end sits under the start:\n{text}"
    );
    assert!(started.contains("[only #1]"), "{started}");
    let (c, v) = p.json(&["audit", "show", &exec]);
    assert_eq!(c, 0);
    let plan = v["plan_id"].as_str().unwrap().to_owned();
    insta::assert_json_snapshot!("audit_show_exec_json", shape(&v));
    let text = stdout(&p.run(&["audit", "show", &plan]));
    for needle in [
        "Lifecycle:",
        "plan.created",
        "plan.approved",
        "Runs:",
        "execution.created",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
}

// `--status`, `--since`, `--limit` on lists, and bad values exit 2 naming the option.
#[test]
fn list_filters() {
    let p = Project::new();
    let ids: Vec<String> = (0..3)
        .map(|i| p.create(&format!("p{i}.json"), &one_step(&format!("plan {i}"))))
        .collect();
    assert_eq!(code(&p.run(&["plan", "approve", &ids[1]])), 0);
    let count = |args: &[&str]| {
        let (c, v) = p.json(args);
        assert_eq!(c, 0, "{args:?}: {v}");
        v.as_array().unwrap().len()
    };
    assert_eq!(count(&["plan", "list", "--status", "approved"]), 1);
    assert_eq!(count(&["plan", "list", "--status", "proposal"]), 2);
    assert_eq!(count(&["plan", "list", "--limit", "2"]), 2);
    assert_eq!(count(&["plan", "list", "--since", "1h"]), 3);
    assert_eq!(
        count(&["plan", "list", "--since", "2099-01-01T00:00:00Z"]),
        0
    );
    let (c, ran) = p.json(&["run", &ids[1]]);
    assert_eq!(c, 0, "{ran}");
    assert_eq!(count(&["exec", "list", "--status", "completed"]), 1);
    assert_eq!(count(&["exec", "list", "--status", "failed"]), 0);
    for (args, needle) in [
        (vec!["plan", "list", "--status", "bogus"], "--status bogus"),
        (
            vec!["exec", "list", "--since", "3 weeks"],
            "--since 3 weeks",
        ),
        (vec!["plan", "list", "--limit", "0"], "--limit 0"),
    ] {
        let out = p.run(&args);
        assert_eq!(code(&out), 2, "{args:?}");
        assert!(stderr(&out).contains(needle), "{}", stderr(&out));
    }
}

// Timings, tokens and cost per step and in total: `exec show` (text and JSON) and the run's
// summary.
#[test]
fn exec_show_has_time_tokens_and_cost() {
    let p = Project::new();
    let (exec, c) = run(
        &p,
        "t.json",
        &plan_doc("totals", &[("nap", "sleep 0.3; echo napped", &[])]),
        "stop",
    );
    assert_eq!(c, 0);
    let (_, shown) = p.json(&["exec", "show", &exec]);
    let total = &shown["totals"]["total"];
    assert_eq!(total["attempts"], 1);
    assert!(total["duration_ms"].as_u64().unwrap() >= 250, "{total}");
    assert_eq!(total["usage"]["input_tokens"], 0);
    assert!(
        shown["totals"]["steps"]["nap"]["duration_ms"]
            .as_u64()
            .unwrap()
            >= 250
    );
    let text = stdout(&p.run(&["exec", "show", &exec]));
    assert!(
        text.contains("TIME") && text.contains("TOKENS") && text.contains("COST"),
        "{text}"
    );
    assert!(text.contains("Total:     1 attempt, 0."), "{text}");
    // A run of shell steps called no model: no usage or cost in the total.
    assert!(!text.contains("model turn"), "{text}");
}

// The user's config under the project's, `ORCA_*` over both; `config show` says where each
// value comes from; a bad user config exits 2 naming its file.
#[test]
fn config_layers_and_config_show() {
    let p = Project::new();
    let user_dir = p.config.path().join("orca");
    std::fs::create_dir_all(&user_dir).unwrap();
    let user = user_dir.join("config.toml");
    std::fs::write(
        &user,
        "[defaults]\nbackend = \"ollama\"\nmodel = \"user-model\"\n",
    )
    .unwrap();
    let model_of = |env: &[(&str, &str)]| {
        let mut args = vec!["--json", "agents", "list"];
        args.truncate(3);
        let out = p.run_env(env, &args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let planner = v
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent_id"] == "planner")
            .unwrap()
            .clone();
        (
            planner["model"].as_str().unwrap().to_owned(),
            planner["backend"].as_str().unwrap().to_owned(),
        )
    };
    assert_eq!(
        model_of(&[]),
        ("user-model".to_owned(), "ollama".to_owned())
    );
    let (c, shown) = p.json(&["config", "show"]);
    assert_eq!(c, 0);
    let source = |shown: &Value, key: &str| {
        shown["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["key"] == key)
            .map(|s| s["source"].as_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    assert!(
        source(&shown, "defaults.model").starts_with("user config"),
        "{shown}"
    );

    // The project's setting wins over the user's; the user's other settings stay.
    let project = p.root().join(".orca/config.toml");
    let mut text = std::fs::read_to_string(&project).unwrap();
    text.push_str("\n[defaults]\nmodel = \"project-model\"\n");
    std::fs::write(&project, text).unwrap();
    assert_eq!(
        model_of(&[]),
        ("project-model".to_owned(), "ollama".to_owned())
    );
    // The environment wins over both.
    assert_eq!(model_of(&[("ORCA_MODEL", "env-model")]).0, "env-model");
    let out = p.run_env(&[("ORCA_MODEL", "env-model")], &["config", "show"]);
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.starts_with("defaults.model"))
        .unwrap();
    assert!(
        line.contains("env-model") && line.contains("environment ORCA_MODEL"),
        "{line}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("defaults.backend"))
        .unwrap();
    assert!(line.contains("user config"), "{line}");
    insta::assert_json_snapshot!("config_show_user_only", shape(&shown));

    // A bad user config: exit 2, naming the file.
    std::fs::write(&user, "[defaults]\nmodle = \"typo\"\n").unwrap();
    let out = p.run(&["agents", "list"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains(user.to_str().unwrap()),
        "{}",
        stderr(&out)
    );
}

// `exec logs --follow` from another process: it waits for the step and prints its output when
// the attempt ends, then ends with the run.
#[test]
fn exec_logs_follow_waits_for_the_step() {
    let p = Project::new();
    let doc = plan_doc(
        "follow logs",
        &[(
            "gated",
            "echo before; touch started; while [ ! -f go ]; do sleep 0.05; done; echo after",
            &[],
        )],
    );
    let file = p.write("gated.json", &doc);
    let mut run = common::isolated(p.root(), p.config.path());
    let mut run = run
        .args(["run", file.to_str().unwrap(), "--yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !p.root().join("started").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the step never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, list) = p.json(&["exec", "list"]);
    let exec = list[0]["execution_id"].as_str().unwrap().to_owned();
    let mut logs = common::isolated(p.root(), p.config.path());
    let logs = logs
        .args(["exec", "logs", &exec, "gated", "--follow"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(p.root().join("go"), "").unwrap();
    let out = logs.wait_with_output().unwrap();
    assert!(run.wait().unwrap().success());
    let text = stdout(&out);
    println!("{text}");
    for needle in [
        "── gated attempt 1 [shell] started",
        "── gated attempt 1 completed",
        "│ before",
        "│ after",
    ] {
        assert!(text.contains(needle), "{needle}: {text}{}", stderr(&out));
    }
}

/// `orca doctor` probes what a run needs: an endpoint that answers (even 401) is
/// reachable, a closed port is a problem, a command-line agent's program is found with its
/// version, the store is writable and left as it was, the sandbox is named — and no key is
/// sent to any endpoint.
#[test]
fn doctor_checks_endpoints_programs_store_and_sandbox() {
    use std::io::{Read as _, Write as _};
    let p = Project::new();
    // An endpoint that answers every request 401 and records what it was sent.
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = server.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for stream in server.incoming().flatten() {
            let mut stream = stream;
            let mut buf = [0u8; 4096];
            let n = stream.read(&mut buf).unwrap_or(0);
            seen2
                .lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
            let _ = stream.write_all(
                b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    // A port nobody listens on.
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!(
        "[agents.up]\ndescription = \"up\"\nrole = \"specialist\"\nbackend = \"openai\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:{up}/v1\"\napi_key_env = \"DOCTOR_TEST_KEY\"\n\n\
         [agents.down]\ndescription = \"down\"\nrole = \"specialist\"\nbackend = \"openai\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:{down}/v1\"\n\n\
         [agents.cc]\ndescription = \"cc\"\nrole = \"specialist\"\nbackend = \"claude-code\"\ncommand = \"/bin/echo\"\n"
    );
    p.write(".orca/config.toml", &config);
    let before: Vec<_> = std::fs::read_dir(p.root().join(".orca"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let secret = "sk-doctor-test-0123456789abcdef";
    let out = p.run_env(&[("DOCTOR_TEST_KEY", secret)], &["--json", "doctor"]);
    // The endpoint that is down is a problem a run would meet: exit 7, counted, with a next step.
    assert_eq!(code(&out), 7, "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = v["checks"].as_array().unwrap();
    let find = |prefix: &str| {
        checks
            .iter()
            .find(|c| c["check"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no check {prefix}: {checks:?}"))
            .clone()
    };
    let up_check = find(&format!("endpoint http://127.0.0.1:{up}/v1/models"));
    let down_check = find(&format!("endpoint http://127.0.0.1:{down}/v1/models"));
    let program = find("/bin/echo (claude-code)");
    let store = find("store");
    let sandbox = find("sandbox");
    assert_eq!(up_check["ok"], true, "{up_check}");
    assert!(up_check["detail"].as_str().unwrap().contains("401"));
    assert_eq!(down_check["ok"], false, "{down_check}");
    assert_eq!(down_check["level"], "problem", "{down_check}");
    assert!(
        down_check["next"]
            .as_str()
            .is_some_and(|n| n.contains("base_url"))
    );
    // The endpoint that is down, and the default one nobody runs here.
    assert_eq!(v["problems"], 2, "{v}");
    assert_eq!(program["ok"], true, "{program}");
    assert_eq!(store["ok"], true, "{store}");
    assert!(sandbox["detail"].as_str().is_some());
    let after: Vec<_> = std::fs::read_dir(p.root().join(".orca"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let sent = seen.lock().unwrap().clone();
    let keys_sent = usize::from(sent.contains(secret));
    println!(
        "doctor: {} checks, problems {}, keys sent to endpoints {keys_sent}, files left in .orca {}",
        checks.len(),
        checks.iter().filter(|c| c["ok"] == false).count(),
        after.len().saturating_sub(before.len())
    );
    assert_eq!(keys_sent, 0, "doctor sent the key: {sent}");
    assert_eq!(before.len(), after.len(), "doctor left files in .orca");
    // The text report says the same in words.
    let text = p.run_env(&[("DOCTOR_TEST_KEY", secret)], &["doctor"]);
    let text = stdout(&text);
    assert!(text.contains("PROBLEM  endpoint"), "{text}");
    assert!(text.contains("   next: start the model server"), "{text}");
    assert!(text.contains("2 problems found (exit 7)"), "{text}");
    assert!(!text.contains(secret));
}
