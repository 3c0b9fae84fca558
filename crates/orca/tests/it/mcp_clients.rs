//! `orca mcp` driven by the MCP clients people use, installed from the registries by
//! `.ci/mcp-clients.sh` (pinned): the official Python SDK (its stdio client, on the handshake
//! revision and on the stateless 2026-07-28 one, with an elicitation callback that plays the
//! human) and the MCP Inspector's CLI (which sends every `--tool-arg` as text unless the
//! tool's input schema says otherwise). `mcp_support` plays these parts with rmcp, the
//! server's own library; these tests are what keeps the server honest with someone else's.
//!
//! They skip, saying why, only when the installer could not run (no python3/npm, no registry);
//! with `CI` set a missing client fails the test instead.

#![expect(clippy::unwrap_used, reason = "tests may unwrap")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::mcp_support::{Project, simple_plan};

/// Where the installer puts the clients: the workspace's own `target/`, whatever
/// `CARGO_TARGET_DIR` says (`.ci/setup` installs there before the build).
fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-clients")
}

struct Clients {
    python: PathBuf,
    inspector: PathBuf,
}

/// The installed clients (installing them once per test run, which is quick when they are
/// there), or `None` with the reason printed when they cannot be had here.
#[expect(clippy::print_stdout, reason = "a skip says why")]
fn clients() -> Option<&'static Clients> {
    static CLIENTS: OnceLock<Result<Clients, String>> = OnceLock::new();
    let got = CLIENTS.get_or_init(|| {
        let dir = clients_dir();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/mcp-clients.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .output()
            .map_err(|e| format!("bash {}: {e}", script.display()))?;
        match out.status.code() {
            Some(0) => Ok(Clients {
                python: dir.join("venv/bin/python"),
                inspector: dir.join("npm/node_modules/.bin/mcp-inspector"),
            }),
            Some(3) => Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
            _ => panic!(
                "{} failed ({}): {}{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    });
    match got {
        Ok(c) => Some(c),
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set and the MCP clients are missing: {why}"
            );
            println!("SKIPPED: the MCP clients could not be installed here: {why}");
            None
        }
    }
}

fn orca_bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("orca")
}

const PY_CLIENT: &str = include_str!("mcp_clients/python_client.py");

/// One session of the Python SDK (see `mcp_clients/python_client.py`); its report.
fn python_session(c: &Clients, p: &Project, mode: &str, human: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("python_client.py");
    std::fs::write(&script, PY_CLIENT).unwrap();
    let out = Command::new(&c.python)
        .arg(&script)
        .arg(orca_bin())
        .arg(&p.root)
        .arg(&p.config_home)
        .arg(mode)
        .arg(human)
        .arg(simple_plan().to_string())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "no report from the Python client ({e}; {}): {stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Checks one report of the Python client: every tool described by the current spec, every
/// answer valid against its tool's output schema, one question asked with the digest shown.
#[expect(clippy::print_stdout, reason = "the test prints its counts")]
fn check_report(report: &Value, protocol: &str, approved: bool) {
    println!(
        "python sdk {protocol} ({}): tools checked {}, with outputSchema {}, with annotations {}, \
         answers validated {}, schema violations {} (control {}), problems {}, questions asked {}, \
         events read {}",
        if approved { "accept" } else { "decline" },
        report["tools_checked"],
        report["with_output_schema"],
        report["with_annotations"],
        report["structured_checked"],
        report["schema_violations"].as_array().map_or(0, Vec::len),
        report["control_violations"],
        report["problems"].as_array().map_or(0, Vec::len),
        report["asked"],
        report["events_read"],
    );
    assert_eq!(report["problems"], json!([]), "{report:#}");
    // Control: a made-up watch answer with a cursor as text and five fields missing.
    assert!(
        report["control_violations"].as_u64() >= Some(6),
        "{report:#}"
    );
    assert_eq!(report["schema_violations"], json!([]), "{report:#}");
    assert_eq!(report["protocol"], protocol, "{report:#}");
    let tools = report["tools_checked"].as_u64().unwrap();
    // Control: the server has a dozen tools; a listing of none would check nothing.
    assert!(tools >= 10, "{report:#}");
    assert_eq!(report["with_output_schema"], tools);
    assert_eq!(report["with_annotations"], tools);
    assert!(
        report["structured_checked"].as_u64().unwrap() >= 7,
        "{report:#}"
    );
    assert_eq!(report["asked"], 1, "{report:#}");
    assert_eq!(report["approved"], approved, "{report:#}");
    let shown = report["shown_digest"].as_str().unwrap();
    if approved {
        // The approval binds the digest the human was shown, and it is the plan's.
        assert_eq!(report["answer_digest"], shown, "{report:#}");
        assert_eq!(report["show_digest"], shown, "{report:#}");
        assert_eq!(report["stage"], "completed", "{report:#}");
        assert!(report["events_read"].as_u64().unwrap() > 0, "{report:#}");
    }
}

/// After a session: the stage of its plan through the CLI, its approver, and the audit log.
fn check_project(p: &Project, report: &Value, approved: bool) {
    let plan = report["plan_id"].as_str().unwrap();
    let shown = p.json(&["plan", "show", plan]);
    let by_host = shown
        .to_string()
        .contains("mcp-elicitation:python-sdk-host");
    if approved {
        assert_ne!(p.stage(plan), "proposal", "{shown:#}");
        assert!(by_host, "{shown:#}");
        assert!(p.root.join("hello.txt").exists());
    } else {
        assert_eq!(p.stage(plan), "proposal", "{shown:#}");
        assert!(!by_host, "{shown:#}");
    }
    let verify = p.orca(&["audit", "verify"]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

fn python_both_answers(mode: &str, protocol: &str) {
    let Some(c) = clients() else { return };
    let p = Project::new();
    let declined = python_session(c, &p, mode, "decline");
    check_report(&declined, protocol, false);
    check_project(&p, &declined, false);
    let accepted = python_session(c, &p, mode, "accept");
    check_report(&accepted, protocol, true);
    check_project(&p, &accepted, true);
}

/// The Python SDK on the initialize handshake (2025-11-25): elicitation is a server request.
#[test]
fn python_sdk_on_the_handshake_revision() {
    python_both_answers("legacy", "2025-11-25");
}

/// The Python SDK on 2026-07-28 (`server/discover`, elicitation as an `input_required` round
/// the SDK fulfils through the same callback and retries).
#[test]
fn python_sdk_on_the_stateless_revision() {
    python_both_answers("2026-07-28", "2026-07-28");
}

/// The Inspector's CLI on `p`: its exit status and the JSON it printed.
fn inspect(c: &Clients, p: &Project, args: &[&str]) -> (Output, Value) {
    let home = p.config_home.join("inspector-home");
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new(&c.inspector)
        .arg("--cli")
        .arg(orca_bin())
        .args(["--root".as_ref(), p.root.as_os_str(), "mcp".as_ref()])
        .args([
            "-e",
            &format!("XDG_CONFIG_HOME={}", p.config_home.display()),
        ])
        .args([
            "-e",
            &format!("XDG_STATE_HOME={}", p.config_home.join("state").display()),
        ])
        .args(["--format", "json"])
        .args(args)
        .env("HOME", &home)
        .env("MCP_CATALOG_PATH", home.join("mcp.json"))
        .env("MCP_CLIENT_CONFIG_PATH", home.join("client.json"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    // `--format json` prints `{"result": ...}` or `{"error": ...}`.
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let value = printed.get("result").cloned().unwrap_or(printed);
    (out, value)
}

fn inspect_ok(c: &Clients, p: &Project, args: &[&str]) -> Value {
    let (out, value) = inspect(c, p, args);
    assert!(
        out.status.success() && !value.is_null(),
        "inspector {args:?} ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    value
}

/// A tool call's structured answer, failing on a tool error.
fn tool_ok(c: &Clients, p: &Project, tool: &str, args: &[&str]) -> Value {
    let mut all = vec!["--method", "tools/call", "--tool-name", tool];
    if !args.is_empty() {
        all.push("--tool-arg");
        all.extend_from_slice(args);
    }
    let value = inspect_ok(c, p, &all);
    assert_ne!(value["isError"], true, "{tool} {args:?}: {value:#}");
    assert!(
        value["structuredContent"].is_object(),
        "{tool} {args:?}: no structuredContent: {value:#}"
    );
    value["structuredContent"].clone()
}

/// The Inspector's CLI: the tool listing passes its portability check (`--strict`), calls
/// with `key=value` arguments (text the Inspector coerces by the input schema) work for ids
/// and integer cursors alike, and the resources list and read.
#[test]
fn inspector_cli_lists_calls_and_coerces_text_arguments() {
    let Some(c) = clients() else { return };
    let p = Project::new();
    let (strict, listed) = inspect(c, &p, &["--method", "tools/list", "--strict"]);
    let tools = listed["tools"].as_array().cloned().unwrap_or_default();
    println!(
        "inspector tools/list --strict: exit {:?}, tools {}",
        strict.status.code(),
        tools.len(),
    );
    // Each problem it finds is a paragraph opening `Warning: tool "NAME"` (or `Error:`).
    let stderr = String::from_utf8_lossy(&strict.stderr);
    let flagged =
        stderr.matches("Warning: tool \"").count() + stderr.matches("Error: tool \"").count();
    println!("inspector schema portability problems: {flagged}");
    assert!(strict.status.success(), "{stderr}");
    assert_eq!(flagged, 0, "{stderr}");
    // Control: the same check on a server with an argument of any type (`{}`) flags it, so
    // the 0 above is the check finding nothing, not a check that did not run.
    let control = Command::new(&c.inspector)
        .arg("--cli")
        .arg(&c.python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_clients/vague_server.py"))
        .args(["--format", "json", "--method", "tools/list", "--strict"])
        .env("HOME", p.config_home.join("inspector-home"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let control_flagged = String::from_utf8_lossy(&control.stderr)
        .matches("Warning: tool \"echo\"")
        .count();
    println!("control (an argument of any type): flagged {control_flagged}");
    assert_eq!(
        control_flagged,
        1,
        "{}",
        String::from_utf8_lossy(&control.stderr)
    );
    assert!(tools.len() >= 10, "{listed:#}");
    let bare: Vec<&str> = tools
        .iter()
        .filter(|t| t["outputSchema"].is_null() || t["annotations"].is_null())
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        bare.is_empty(),
        "without outputSchema or annotations: {bare:?}"
    );

    let doc = json!({ "document": simple_plan() }).to_string();
    let created = inspect_ok(
        c,
        &p,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "plan_create",
            "--tool-args-json",
            &doc,
        ],
    );
    let plan = created["structuredContent"]["plan_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created:#}"))
        .to_owned();
    let mut calls = 0;
    for arg in [format!("plan_id={plan}"), format!("plan={plan}")] {
        let shown = tool_ok(c, &p, "plan_show", &[&arg]);
        assert!(shown.to_string().contains(&plan), "plan_show: {shown:#}");
        calls += 1;
    }
    let listed = tool_ok(c, &p, "plan_list", &[]);
    assert!(listed.to_string().contains(&plan), "plan_list: {listed:#}");
    let none = tool_ok(c, &p, "execution_list", &[&format!("plan_id={plan}")]);
    assert_eq!(none["executions"], json!([]), "{none:#}");
    calls += 2;
    // plan_ask_human without elicitation (the Inspector's CLI declares none): the human's
    // command, and no suggestion to call plan_ask_human again.
    let asked = tool_ok(c, &p, "plan_ask_human", &[&format!("plan_id={plan}")]);
    calls += 1;
    assert_eq!(asked["approved"], false, "{asked:#}");
    assert!(!asked.to_string().contains("plan_ask_human"), "{asked:#}");
    assert_eq!(p.stage(&plan), "proposal");

    let out = p.orca(&["plan", "approve", &plan]);
    assert!(out.status.success(), "{out:?}");
    let ran = tool_ok(c, &p, "plan_run", &[&format!("plan_id={plan}")]);
    calls += 1;
    let exec = ran["execution_id"].as_str().unwrap().to_owned();
    let mut cursor = 0;
    let mut ended = false;
    for _ in 0..30 {
        let watched = tool_ok(
            c,
            &p,
            "execution_watch",
            &[
                &format!("execution_id={exec}"),
                &format!("cursor={cursor}"),
                "wait_seconds=2",
            ],
        );
        calls += 1;
        cursor = watched["next_cursor"].as_u64().unwrap();
        if watched["ended"] == true {
            assert_eq!(watched["stage"], "completed", "{watched:#}");
            ended = true;
            break;
        }
    }
    assert!(ended, "the run did not end");
    // A cursor past the end, typed as on a command line: read as 18, nothing new.
    let later = tool_ok(
        c,
        &p,
        "execution_watch",
        &[&format!("execution={exec}"), "cursor=18"],
    );
    calls += 1;
    assert_eq!(
        later["next_cursor"].as_u64(),
        Some(cursor.max(18)),
        "{later:#}"
    );
    tool_ok(
        c,
        &p,
        "step_output",
        &[&format!("execution_id={exec}"), "step_id=hello"],
    );
    calls += 1;
    // The same on the stateless revision.
    let modern = inspect_ok(
        c,
        &p,
        &[
            "--protocol-era",
            "modern",
            "--method",
            "tools/call",
            "--tool-name",
            "execution_watch",
            "--tool-arg",
            &format!("execution_id={exec}"),
            "cursor=18",
        ],
    );
    calls += 1;
    assert_eq!(modern["structuredContent"]["ended"], true, "{modern:#}");

    let resources = inspect_ok(c, &p, &["--method", "resources/list"]);
    let uris: Vec<&str> = resources["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert!(
        uris.contains(&format!("orca://plans/{plan}").as_str()),
        "{resources:#}"
    );
    assert!(
        uris.contains(&format!("orca://executions/{exec}").as_str()),
        "{resources:#}"
    );
    let read = inspect_ok(
        c,
        &p,
        &[
            "--method",
            "resources/read",
            "--uri",
            &format!("orca://plans/{plan}"),
        ],
    );
    assert!(read.to_string().contains(&plan), "{read:#}");
    println!(
        "inspector: tools {}, tool calls answered {calls}, resources {}, resource read 1",
        tools.len(),
        uris.len()
    );
}
