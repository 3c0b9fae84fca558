//! Daily commands as a new user types them, each in a fresh project: `plan validate` lists
//! every wrong field at once with the name a typo away; `plan create FILE` takes the file as
//! `run FILE` does; `run FILE` run again without a terminal reuses the proposal it made instead
//! of piling up identical ones; `plan approve` of an approved plan says so, with the next step.

use crate::common::project::{Project, code, one_step, stderr, stdout};

#[test]
fn plan_validate_lists_every_wrong_field_with_a_suggestion() {
    let p = Project::new();
    let file = p.write(
        "typos.json",
        r#"{"goal":"g","summry":"s","steps":[
            {"id":"a","agnt":"shell","description":"d","command":"x"},
            {"id":"b","agent":"shel","description":"d","command":"x","dependson":["a"]}],
          "assumptions":["a"],"risks":["r"]}"#,
    );
    let out = p.run(&["plan", "validate", file.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(code(&out), 2, "{text}{}", stderr(&out));
    for expected in [
        "unknown field `summry` (did you mean `summary`?)",
        "missing field `verification`",
        "step `a`: unknown field `agnt` (did you mean `agent`?)",
        "step `a`: missing field `agent`",
        "step `b`: unknown field `dependson` (did you mean `depends_on`?)",
    ] {
        assert!(text.contains(expected), "`{expected}` not in:\n{text}");
    }
    // Nothing missing: the rest is validated too, as if the unknown fields were not there.
    let file = p.write(
        "agent.json",
        r#"{"goal":"g","steps":[{"id":"a","agent":"shel","description":"d","command":"x","extra":1}],
          "assumptions":["a"],"risks":["r"],"verification":["v"]}"#,
    );
    let (c, v) = p.json(&["plan", "validate", file.to_str().unwrap()]);
    assert_eq!(c, 2, "{v}");
    assert_eq!(
        v["problems"],
        serde_json::json!([
            "step `a`: unknown field `extra`",
            "step `a`: unknown agent `shel` (did you mean `shell`?)"
        ])
    );
    // The same on `plan create`, which writes nothing.
    let out = p.run(&["plan", "create", file.to_str().unwrap()]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("unknown field `extra`"),
        "{}",
        stderr(&out)
    );
    assert_eq!(p.json(&["plan", "list"]).1, serde_json::json!([]));
}

#[test]
fn run_of_a_file_again_reuses_its_waiting_proposal() {
    let p = Project::new();
    let file = p.write("plan.json", &one_step("reuse"));
    let file = file.to_str().unwrap();
    // Without a terminal and without --yes the run waits for approval (exit 4), twice.
    for _ in 0..2 {
        assert_eq!(code(&p.run(&["run", file])), 4);
    }
    let (_, plans) = p.json(&["plan", "list"]);
    assert_eq!(plans.as_array().unwrap().len(), 1, "{plans}");
    // `plan create` is asked for a new proposal: it makes one.
    assert_eq!(code(&p.run(&["plan", "create", file])), 0);
    let (_, plans) = p.json(&["plan", "list"]);
    assert_eq!(plans.as_array().unwrap().len(), 2, "{plans}");
    // Approved, a new run of the file is a new proposal again (an approval is not reused).
    let id = plans[0]["plan_id"].as_str().unwrap().to_owned();
    assert_eq!(code(&p.run(&["plan", "approve", &id])), 0);
    let other = plans[1]["plan_id"].as_str().unwrap().to_owned();
    assert_eq!(code(&p.run(&["plan", "approve", &other])), 0);
    assert_eq!(code(&p.run(&["run", file])), 4);
    let (_, plans) = p.json(&["plan", "list"]);
    assert_eq!(plans.as_array().unwrap().len(), 3, "{plans}");
}

#[test]
fn approving_an_approved_plan_says_so_and_what_is_next() {
    let p = Project::new();
    let id = p.create("plan.json", &one_step("twice"));
    assert_eq!(code(&p.run(&["plan", "approve", &id])), 0);
    let out = p.run(&["plan", "approve", &id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("is already approved"),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("next: orca run"), "{}", stderr(&out));
    // Another digest meant: refused, nothing changes.
    let other = format!("sha256:{}", "0".repeat(64));
    let out = p.run(&["plan", "approve", &id, "--digest", &other]);
    assert_eq!(code(&out), 6, "{}", stderr(&out));
    assert!(stderr(&out).contains("nothing was approved"));
}

/// A step's stdout and stderr are recorded in the order it wrote them (one pipe for both):
/// 200 lines alternating between the two come back from `exec logs` as written.
#[test]
fn a_steps_output_keeps_the_order_of_stdout_and_stderr() {
    let p = Project::new();
    let script = "i=0; while [ $i -lt 100 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done";
    let file = p.write(
        "order.json",
        &crate::common::project::plan_doc("order", &[("talk", script, &[])]),
    );
    let (c, v) = p.json(&["run", file.to_str().unwrap(), "--yes"]);
    assert_eq!(c, 0, "{v}");
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let (c, logs) = p.json(&["exec", "logs", &exec, "talk"]);
    assert_eq!(c, 0, "{logs}");
    let expected: String = (0..100).map(|i| format!("out{i}\nerr{i}\n")).collect();
    let output = logs["steps"][0]["attempts"][0]["output"]
        .as_str()
        .unwrap_or_default();
    let out_of_order = output
        .lines()
        .zip(expected.lines())
        .filter(|(a, b)| a != b)
        .count();
    println!("lines out of order in a step's recorded output: {out_of_order} of 200");
    assert_eq!(output, expected);
}

/// An interrupted attempt's duration is its own (from its start to the stop), in `audit show`
/// and `exec show`, not the time since the execution began: a first step of 2 s, then a second
/// stopped about 1 s into its attempt.
#[test]
fn an_interrupted_attempt_is_timed_from_its_own_start() {
    use crate::escape_support::{Site, Step};
    let site = Site::new(false);
    let started = site.mark("started").display().to_string();
    let plan = site.plan(
        "timed",
        &[
            Step::new("first", "sleep 2".to_owned(), None),
            Step {
                after: &["first"],
                ..Step::new("second", format!("echo up > {started}; sleep 60"), None)
            },
        ],
    );
    let mut run = site.spawn(&[], &["run", &plan, "--yes"]);
    site.wait_mark("started", "up");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let exec = site.only_exec();
    let stop = site.orca(&[], &["exec", "stop", &exec]);
    assert!(stop.status.success(), "{stop:?}");
    let _ = run.wait();
    let shown = site.orca(&[], &["audit", "show", &exec]);
    let text = String::from_utf8_lossy(&shown.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains("task.attempt.interrupted"))
        .unwrap_or_else(|| panic!("no interruption in:\n{text}"));
    let seconds = |after: &str| -> f64 {
        let at = line
            .find(after)
            .unwrap_or_else(|| panic!("{after:?} in {line}"))
            + after.len();
        line[at..]
            .split('s')
            .next()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no seconds after {after:?} in {line}"))
    };
    let (since_start, took) = (seconds("+"), seconds(" in "));
    let (_, v) = site.json(&[], &["exec", "show", &exec]);
    let ms = v["totals"]["steps"]["second"]["duration_ms"]
        .as_u64()
        .unwrap_or(0);
    println!(
        "interrupted attempt: {took:.3} s in audit show, {ms} ms in exec show; {since_start:.3} s since the execution began"
    );
    assert!(took >= 0.9 && since_start - took >= 1.9, "{line}");
    assert!(
        ms >= 900 && (ms as f64) < (since_start - 1.9) * 1000.0,
        "{v}"
    );
}

/// An agent host that starts `orca mcp --root DIR` for a directory without `.orca/` gets a
/// working server (the project is made, as `orca init` would), not a closed connection; a
/// read-only command there says which `init` to run.
#[test]
fn the_mcp_server_starts_for_a_named_root_without_a_project() {
    use std::io::{BufRead as _, Write as _};
    let dir = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let root = dir.path().join("fresh");
    std::fs::create_dir_all(&root).unwrap();
    let out = crate::common::orca(&root, config.path(), &["plan", "list"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("run `orca init --root"),
        "{}",
        stderr(&out)
    );
    let mut cmd = crate::common::isolated(&root, config.path());
    cmd.arg("mcp")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut server = cmd.spawn().unwrap();
    let mut stdin = server.stdin.take().unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
    )
    .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    drop(stdin);
    let _ = server.kill();
    let _ = server.wait();
    let answer: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not an MCP answer ({e}): {line:?}"));
    assert_eq!(answer["result"]["serverInfo"]["name"], "orca", "{answer}");
    assert!(root.join(".orca").is_dir());
}

/// One word per state on every surface of the command line: a run stopped with `exec stop`
/// is `interrupted` in `exec show` (text and `--json`), `exec list` and its `--status` filter;
/// a run waiting for a decision is `awaiting decision` / `awaiting_decision` everywhere.
#[test]
fn states_have_one_word_on_every_surface() {
    use crate::escape_support::{Site, Step};
    let site = Site::new(false);
    let started = site.mark("started").display().to_string();
    let slow = site.plan(
        "slow",
        &[Step::new(
            "slow",
            format!("echo up > {started}; sleep 60"),
            None,
        )],
    );
    let mut run = site.spawn(&[], &["run", &slow, "--yes"]);
    site.wait_mark("started", "up");
    let stopped = site.only_exec();
    assert!(site.orca(&[], &["exec", "stop", &stopped]).status.success());
    let _ = run.wait();
    let failing = site.outside.join("failing.json");
    std::fs::write(
        &failing,
        serde_json::json!({
            "goal": "fail once", "assumptions": ["a"], "risks": ["r"], "verification": ["v"],
            "steps": [{ "id": "bad", "agent": "shell", "description": "fails",
                        "command": "exit 1", "max_attempts": 1 }]
        })
        .to_string(),
    )
    .unwrap();
    let failing = failing.display().to_string();
    let (c, v) = site.json(&[], &["run", &failing, "--yes"]);
    assert_eq!(c, 4, "{v}");
    let waiting = v["execution_id"].as_str().unwrap().to_owned();
    assert_eq!(v["status"], "awaiting_decision", "{v}");
    let mut mismatches = Vec::new();
    for (exec, token, words) in [
        (&stopped, "interrupted", "interrupted"),
        (&waiting, "awaiting_decision", "awaiting decision"),
    ] {
        let text =
            String::from_utf8_lossy(&site.orca(&[], &["exec", "show", exec]).stdout).into_owned();
        if !text
            .lines()
            .next()
            .unwrap_or("")
            .ends_with(&format!("({words})"))
        {
            mismatches.push(format!("exec show: {}", text.lines().next().unwrap_or("")));
        }
        let (_, shown) = site.json(&[], &["exec", "show", exec]);
        if shown["status"] != token {
            mismatches.push(format!("exec show --json: {}", shown["status"]));
        }
        let listed =
            String::from_utf8_lossy(&site.orca(&[], &["exec", "list"]).stdout).into_owned();
        let short = &exec[exec.len() - 8..];
        if !listed
            .lines()
            .any(|l| l.contains(short) && l.contains(&format!(" {words} ")))
        {
            mismatches.push(format!("exec list: {listed}"));
        }
        for filter in [token, words] {
            let (_, found) = site.json(&[], &["exec", "list", "--status", filter]);
            let ids: Vec<&str> = found
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e["execution_id"].as_str())
                        .collect()
                })
                .unwrap_or_default();
            if ids != [exec.as_str()] {
                mismatches.push(format!("--status {filter}: {ids:?}"));
            }
        }
    }
    println!(
        "state words that disagree between surfaces: {}",
        mismatches.len()
    );
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

/// `exec retry` of a run waiting for a decision ends the source (`stopped`, naming the retry):
/// it no longer waits in `exec list` once its work goes on elsewhere.
#[test]
fn a_retried_run_no_longer_waits_for_a_decision() {
    use crate::escape_support::Site;
    let site = Site::new(false);
    let flag = site.mark("failed-once").display().to_string();
    let plan = site.outside.join("flaky.json");
    std::fs::write(
        &plan,
        serde_json::json!({
            "goal": "fail once", "assumptions": ["a"], "risks": ["r"], "verification": ["v"],
            "steps": [{ "id": "flaky", "agent": "shell", "description": "fails once",
                        "command": format!("test -e {flag} || {{ touch {flag}; exit 1; }}"),
                        "max_attempts": 1 }]
        })
        .to_string(),
    )
    .unwrap();
    let (c, v) = site.json(&[], &["run", &plan.display().to_string(), "--yes"]);
    assert_eq!(c, 4, "{v}");
    let source = v["execution_id"].as_str().unwrap().to_owned();
    let (c, v) = site.json(&[], &["exec", "retry", &source]);
    assert_eq!(c, 0, "{v}");
    let (_, shown) = site.json(&[], &["exec", "show", &source]);
    assert_eq!(shown["status"], "stopped", "{shown}");
    let (_, waiting) = site.json(&[], &["exec", "list", "--status", "awaiting_decision"]);
    assert_eq!(waiting, serde_json::json!([]), "{waiting}");
    let (c, _) = site.json(&[], &["audit", "verify", "--all"]);
    assert_eq!(c, 0);
}
