//! The operator's CLI as a person and a script see it: short unique ids, honest
//! progress and summaries, output discipline, the JSON contract and the commands added for
//! daily use. Every test drives the real binary in temp dirs (`common::isolated`).

use crate::common;

use serde_json::Value;

use common::project::{Project, code, one_step, plan_doc, stderr, stdout};

/// Every `plan_…` / `exec_…` token in `text`.
fn id_tokens(text: &str, prefix: &str) -> Vec<String> {
    text.match_indices(prefix)
        .map(|(i, _)| {
            text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect::<String>()
        })
        .filter(|t| t.len() > prefix.len())
        .collect()
}

// ids created close together share their first (timestamp) digits. Every id a table
// shows is made of its last digits (≥ 8 hex, see `short_ids.rs`) and names exactly one plan;
// an ambiguous typed prefix exits 2 listing the candidates.
#[test]
fn short_ids_are_unique_and_an_ambiguous_prefix_lists_the_candidates() {
    let p = Project::new();
    let ids: Vec<String> = (0..4)
        .map(|i| p.create(&format!("p{i}.json"), &one_step(&format!("plan {i}"))))
        .collect();
    let out = p.run(&["plan", "list"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let shown = id_tokens(&stdout(&out), "plan_");
    assert_eq!(shown.len(), ids.len(), "{}", stdout(&out));
    let mut not_unique = 0;
    for short in &shown {
        assert!(short.len() >= "plan_".len() + 8, "{short}");
        assert!(
            short.len() < ids[0].len(),
            "a short id, not the full one: {short}"
        );
        if ids
            .iter()
            .filter(|id| {
                let hex = &short["plan_".len()..];
                id.starts_with(short.as_str()) || id.ends_with(hex)
            })
            .count()
            != 1
        {
            not_unique += 1;
        }
    }
    println!("short ids shown: {shown:?}; not unique: {not_unique}");
    assert_eq!(not_unique, 0);

    // Created within a second of each other: the first 8 hex digits (a timestamp) are shared.
    let common_prefix = &ids[0][.."plan_".len() + 8];
    if ids.iter().all(|id| id.starts_with(common_prefix)) {
        let out = p.run(&["plan", "show", common_prefix]);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("ambiguous"), "{err}");
        let listed = id_tokens(&err, "plan_")
            .into_iter()
            .filter(|t| t != common_prefix)
            .count();
        assert_eq!(listed, ids.len(), "every candidate listed: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }

    // Messages use the short id too, and it resolves.
    let out = p.run(&["plan", "approve", &shown[0]]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let said = stdout(&out);
    assert!(
        ids.iter().all(|id| !said.contains(id.as_str())),
        "no full id in a message: {said}"
    );
    assert!(
        id_tokens(&said, "plan_")
            .iter()
            .all(|t| t.len() < ids[0].len())
    );
}

/// Lines whose parentheses do not balance.
fn unbalanced(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.matches('(').count() != l.matches(')').count())
        .collect()
}

// the progress line of a step is its meaningful last line; parentheses close; a
// failure retried by a human is no longer counted; a recorded `--no-run` decision is not shown
// as still waiting; `plan show` shows who approved, when, and the digest.
#[test]
fn progress_and_summaries_are_honest() {
    let p = Project::new();
    let doc = plan_doc(
        "honest progress",
        &[
            (
                "build",
                "echo compiling; echo linking; echo 'done: built 3 files'",
                &[],
            ),
            // Fails its two attempts, succeeds on the third (after a human's retry).
            (
                "flaky",
                "n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; echo try $n; [ $n -ge 3 ]",
                &["build"],
            ),
        ],
    );
    let file = p.write("honest.json", &doc);
    let out = p.run(&["run", file.to_str().unwrap(), "--yes"]);
    assert_eq!(code(&out), 4, "waits for a decision: {}", stderr(&out));
    let err = stderr(&out);
    let build_line = err.lines().find(|l| l.contains("✓ build")).unwrap();
    assert!(build_line.ends_with("done: built 3 files"), "{build_line}");
    let exec = id_tokens(&err, "exec_").into_iter().next().unwrap();

    // Recorded, not run: nothing waits for a person any more.
    let out = p.run(&["exec", "decide", &exec, "retry", "--no-run"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let shown = stdout(&p.run(&["exec", "show", &exec]));
    assert!(!shown.contains("Waiting:"), "{shown}");
    assert!(shown.contains("Decided:   retry"), "{shown}");

    let out = p.run(&["exec", "resume", &exec]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let last_progress = err.lines().rev().find(|l| l.contains(" done, ")).unwrap();
    assert!(
        !last_progress.contains("failed"),
        "the retried step no longer counts: {err}"
    );
    let shown = stdout(&p.run(&["exec", "show", &exec]));
    assert!(shown.contains("done: built 3 files"), "{shown}");

    let plan = id_tokens(&shown, "plan_").into_iter().next().unwrap();
    let plan_text = stdout(&p.run(&["plan", "show", &plan]));
    for needle in ["Approved:  by user", "(--yes) at 20", "Digest:    sha256:"] {
        assert!(plan_text.contains(needle), "{needle}: {plan_text}");
    }

    let mut bad = Vec::new();
    for text in [&err, &shown, &plan_text] {
        bad.extend(unbalanced(text).into_iter().map(str::to_owned));
        bad.extend(
            text.lines()
                .filter(|l| l.ends_with(' '))
                .map(|l| format!("trailing space: {l}")),
        );
    }
    println!("unbalanced or trailing-space lines: {}", bad.len());
    assert!(bad.is_empty(), "{bad:#?}");
}

// a step ended by `exec cancel` is cancelled, not failed.
#[test]
fn a_cancelled_step_is_not_a_failed_one() {
    let p = Project::new();
    let doc = plan_doc("cancel me", &[("slow", "touch started; sleep 60", &[])]);
    let file = p.write("slow.json", &doc);
    let mut cmd = common::isolated(p.root(), p.config.path());
    let child = cmd
        .args(["run", file.to_str().unwrap(), "--yes", "--kill-grace", "1"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !p.root().join("started").exists() {
        assert!(start.elapsed().as_secs() < 60, "the step never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (c, list) = p.json(&["exec", "list"]);
    assert_eq!(c, 0);
    let exec = list[0]["execution_id"].as_str().unwrap().to_owned();
    let out = p.run(&["exec", "cancel", &exec]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let run = child.wait_with_output().unwrap();
    let err = stderr(&run);
    let failed_lines = err.lines().filter(|l| l.contains("failed")).count();
    println!("progress lines saying failed after a cancel: {failed_lines}\n{err}");
    assert_eq!(failed_lines, 0, "{err}");
    let shown = stdout(&p.run(&["exec", "show", &exec]));
    let row = shown.lines().find(|l| l.starts_with("slow")).unwrap();
    assert!(!row.contains("failed"), "{row}");
}

// data on stdout, progress on stderr; no colour in a pipe even when stderr is a
// terminal; `--log-format json` makes stderr pure JSON lines; `-q` prints no hints; tables fit
// `COLUMNS`.
#[test]
fn output_discipline() {
    let p = Project::new();
    let long_goal = format!("a goal {}", "that goes on and on ".repeat(8));
    let doc = plan_doc(&long_goal, &[("only", "echo done", &[])]);
    let file = p.write("plan.json", &doc);

    // -q: the result line only, no hint anywhere.
    let out = p.run(&["-q", "plan", "create", "--file", file.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 1, "{}", stdout(&out));
    assert!(!stdout(&out).contains("next:") && !stderr(&out).contains("next:"));
    // Without -q the hint goes to stderr, the result to stdout.
    let out = p.run(&["plan", "create", "--file", file.to_str().unwrap()]);
    assert!(!stdout(&out).contains("next:"), "{}", stdout(&out));
    assert!(stderr(&out).contains("next:"), "{}", stderr(&out));

    // --log-format json: every stderr line is a JSON object, progress included.
    let out = p.run(&[
        "--log-format",
        "json",
        "-v",
        "run",
        file.to_str().unwrap(),
        "--yes",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let not_json: Vec<&str> = err
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).map_or(true, |v| !v.is_object()))
        .collect();
    println!(
        "stderr lines that are not JSON with --log-format json: {}",
        not_json.len()
    );
    assert!(not_json.is_empty(), "{not_json:#?}");
    assert!(err.contains("✓ only"), "progress is there, as JSON: {err}");

    // Tables fit COLUMNS.
    let out = p.run_env(&[("COLUMNS", "70")], &["plan", "list"]);
    let listed = stdout(&out);
    let too_wide: Vec<&str> = listed.lines().filter(|l| l.chars().count() > 70).collect();
    println!("plan list lines wider than 70 columns: {}", too_wide.len());
    assert!(too_wide.is_empty(), "{too_wide:#?}");
    assert!(listed.contains('…'), "{listed}");

    // stderr is a terminal, stdout a pipe: the data carries no escape codes.
    let (_controller, terminal) = orca_testkit::pty::openpty();
    let mut cmd = common::isolated(p.root(), p.config.path());
    cmd.env_remove("NO_COLOR")
        .args(["audit", "verify"])
        .stdin(std::process::Stdio::null())
        .stderr(terminal);
    let out = cmd.output().unwrap();
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let escapes = stdout(&out).matches('\x1b').count();
    println!("escape codes in piped stdout: {escapes}");
    assert_eq!(escapes, 0, "{:?}", stdout(&out));

    // Log lines asked for with ORCA_LOG, stderr a pipe (redirected to a file): no escape codes
    // either, NO_COLOR or not.
    let mut cmd = common::isolated(p.root(), p.config.path());
    cmd.env_remove("NO_COLOR")
        .env("ORCA_LOG", "debug")
        .args(["exec", "list"])
        .stdin(std::process::Stdio::null());
    let out = cmd.output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("DEBUG"),
        "ORCA_LOG=debug logs something: {err}"
    );
    let escapes = err.matches('\x1b').count();
    println!("escape codes in piped log lines: {escapes}");
    assert_eq!(escapes, 0, "{err:?}");
}

// every `--json` output carries `format_version` (first key; in a list, on every
// item) and names the same thing with the same key: `plan_id`, `execution_id`, `agent_id`,
// `step_id` — never a bare `id` at the top of an output or a list item.
#[test]
fn json_outputs_are_versioned_and_use_one_key_per_thing() {
    let p = Project::new();
    let file = p.write("plan.json", &one_step("json contract"));
    let plan = p.create("plan2.json", &one_step("json contract 2"));
    let (c, ran) = p.json(&["run", file.to_str().unwrap(), "--yes"]);
    assert_eq!(c, 0, "{ran}");
    let exec = ran["execution_id"].as_str().unwrap().to_owned();
    let commands: Vec<Vec<&str>> = vec![
        vec!["init"],
        vec!["plan", "list"],
        vec!["plan", "show", &plan],
        vec!["plan", "approve", &plan],
        vec!["exec", "list"],
        vec!["exec", "show", &exec],
        vec!["agents", "list"],
        vec!["audit", "verify"],
        vec!["doctor"],
    ];
    let mut problems = Vec::new();
    let mut check = |what: &str, v: &Value| {
        let objects: Vec<&Value> = match v {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        for o in objects {
            let Some(map) = o.as_object() else {
                problems.push(format!("{what}: not an object: {o}"));
                continue;
            };
            if map.keys().next().map(String::as_str) != Some("format_version") {
                problems.push(format!("{what}: format_version is not the first key"));
            }
            if map.contains_key("id") {
                problems.push(format!("{what}: a bare `id`"));
            }
        }
    };
    check("run", &ran);
    for args in &commands {
        let (c, v) = p.json(args);
        // doctor exits 7 here: no model server runs at the default endpoint.
        let want = if args == &["doctor"] { 7 } else { 0 };
        assert_eq!(c, want, "{args:?}: {v}");
        check(&args.join(" "), &v);
    }
    println!("JSON contract problems: {}", problems.len());
    assert!(problems.is_empty(), "{problems:#?}");
}

// a plan created from a file and sent back with `request-changes` was a dead end.
// `plan revise` creates the next revision (superseding it, audited); a bad document changes
// nothing; a proposal it revises can no longer be approved.
#[test]
fn plan_revise_creates_the_next_revision() {
    let p = Project::new();
    let first = p.create("v1.json", &one_step("version one"));
    let out = p.run(&[
        "plan",
        "request-changes",
        &first,
        "--feedback",
        "add a check",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // An invalid revision: exit 2, no plan added.
    let bad = p.write("bad.json", "{\"goal\": \"\"}");
    let out = p.run(&["plan", "revise", &first, "--file", bad.to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert_eq!(p.json(&["plan", "list"]).1.as_array().unwrap().len(), 1);

    let v2 = p.write(
        "v2.json",
        &plan_doc(
            "version two",
            &[
                ("only", "echo ok", &[]),
                ("check", "echo checked", &["only"]),
            ],
        ),
    );
    let (c, revised) = p.json(&["plan", "revise", &first, "--file", v2.to_str().unwrap()]);
    assert_eq!(c, 0, "{revised}");
    assert_eq!(revised["supersedes"], first.as_str());
    assert_eq!(revised["stage"], "proposal");
    let second = revised["plan_id"].as_str().unwrap().to_owned();
    let mut shape = revised.clone();
    shape["plan_id"] = "[plan_id]".into();
    shape["supersedes"] = "[plan_id]".into();
    insta::assert_json_snapshot!("plan_revise", shape);

    let (_, shown) = p.json(&["plan", "show", &second]);
    assert_eq!(shown["supersedes"], first.as_str());
    let text = stdout(&p.run(&["plan", "show", &second]));
    assert!(text.contains("Revises:"), "{text}");

    // Revising a proposal rejects it: only the revision can be approved.
    let (c, third) = p.json(&["plan", "revise", &second, "--file", v2.to_str().unwrap()]);
    assert_eq!(c, 0, "{third}");
    assert_eq!(third["superseded_stage"], "rejected");
    let out = p.run(&["plan", "approve", &second]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let out = p.run(&["audit", "verify"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}
