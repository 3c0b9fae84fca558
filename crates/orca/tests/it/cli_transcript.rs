//! A command-line agent's own tools in the audit log: a fake Claude Code (a shell
//! script printing what `claude -p --output-format stream-json --verbose` prints) runs its own
//! `Bash` tool, whose output holds a secret planted in orca's environment, then answers. The
//! step's `exec logs` must show the tool use (as the agent's own, not a gated call) before the
//! answer, with its input and output, the secret redacted everywhere (counted: 0 leaks), and
//! the log must verify.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use common::project::{Project, code, stderr, stdout};
use serde_json::{Value, json};

const SECRET: &str = "vk7PLANTEDcli-9931-river-stone";
const SECRET_VAR: &str = "CLI_TRANSCRIPT_PASSWORD";

/// What the fake program prints: the stream of a run that used `Bash` once, then answered.
fn stream() -> String {
    let session = "0d5c9f4e-1111-4222-8333-944445555666";
    let lines = [
        json!({"type": "system", "subtype": "init", "session_id": session, "tools": ["Bash"]}),
        json!({"type": "assistant", "session_id": session, "message": {"content": [
            {"type": "text", "text": "Looking at the notes first."},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash",
             "input": {"command": "cat notes.txt"}}]}}),
        json!({"type": "user", "session_id": session, "message": {"content": [
            {"type": "tool_result", "tool_use_id": "toolu_1",
             "content": format!("NOTES-OUTPUT the password: {SECRET}")}]}}),
        json!({"type": "assistant", "session_id": session, "message": {"content": [
            {"type": "text", "text": "Done.\n```json\n{\"status\":\"success\",\"summary\":\"read the notes\"}\n```"}]}}),
        json!({"type": "result", "subtype": "success", "is_error": false, "session_id": session,
               "result": "Done.\n```json\n{\"status\":\"success\",\"summary\":\"read the notes\"}\n```",
               "num_turns": 2, "total_cost_usd": 0.001,
               "usage": {"input_tokens": 20, "output_tokens": 10}}),
    ];
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn files(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else {
            let body = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            out.push((path.display().to_string(), body));
        }
    }
}

#[test]
fn a_cli_agents_own_tools_are_recorded_in_order_and_redacted() {
    let p = Project::new();
    let program = p.root().join("fake-claude");
    let out = p.root().join("stream.jsonl");
    std::fs::write(&out, stream()).unwrap();
    std::fs::write(
        &program,
        format!("#!/bin/sh\ncat > /dev/null\ncat '{}'\n", out.display()),
    )
    .unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = p.root().join(".orca/config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[agents.coder]\nbackend = \"claude-code\"\ncommand = \"{}\"\n\
         description = \"codes\"\nmodel = \"claude-sonnet-4-5\"\n",
        program.display()
    ));
    std::fs::write(&config, text).unwrap();
    let plan = p.write(
        "plan.json",
        &json!({
            "goal": "read the notes", "summary": "one command-line agent step",
            "assumptions": ["a fake claude"], "risks": ["none"], "verification": ["the logs"],
            "steps": [{"id": "read", "agent": "coder", "description": "read the notes",
                       "depends_on": []}]
        })
        .to_string(),
    );
    let env = [(SECRET_VAR, SECRET), ("NO_COLOR", "1")];
    let ran = p.run_env(&env, &["--json", "run", plan.to_str().unwrap(), "--yes"]);
    assert_eq!(code(&ran), 0, "{}\n{}", stdout(&ran), stderr(&ran));
    let exec = serde_json::from_str::<Value>(&stdout(&ran)).unwrap()["execution_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let logs = p.run_env(&env, &["exec", "logs", &exec]);
    let shown = stdout(&logs);
    println!("{shown}");
    assert_eq!(code(&logs), 0, "{}", stderr(&logs));
    let tool_at = shown.find("own tool Bash {\"command\":\"cat notes.txt\"} → ok");
    let output_at = shown.find("NOTES-OUTPUT the password:");
    let first_answer_at = shown.find("Looking at the notes first.");
    let last_answer_at = shown.find("Done.");
    assert!(
        first_answer_at < tool_at && tool_at < output_at && output_at < last_answer_at,
        "answer, own tool, its output, answer, in that order: {shown}"
    );
    assert!(first_answer_at.is_some());

    let (c, json_logs) = {
        let out = p.run_env(&env, &["--json", "exec", "logs", &exec]);
        (code(&out), stdout(&out))
    };
    assert_eq!(c, 0);
    let doc: Value = serde_json::from_str(&json_logs).unwrap();
    let kinds: Vec<String> = doc
        .pointer("/steps/0/attempts/0/transcript")
        .or_else(|| doc.pointer("/attempts/0/transcript"))
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|i| i["type"].as_str().unwrap_or("?").to_owned())
                .collect()
        })
        .unwrap_or_default();
    println!("transcript kinds: {kinds:?}");
    assert_eq!(
        kinds,
        ["agent.answer", "agent.tool", "agent.answer"],
        "{json_logs}"
    );

    let verify = p.run_env(&env, &["audit", "verify"]);
    assert_eq!(code(&verify), 0, "{}", stdout(&verify));

    let mut outputs = vec![
        ("run".to_owned(), stdout(&ran) + &stderr(&ran)),
        ("exec logs".to_owned(), shown.clone() + &stderr(&logs)),
        ("exec logs --json".to_owned(), json_logs),
    ];
    files(&p.root().join(".orca"), &mut outputs);
    let leaks: Vec<&String> = outputs
        .iter()
        .filter(|(_, body)| body.contains(SECRET))
        .map(|(name, _)| name)
        .collect();
    println!(
        "cli transcript: {} leaks in {} outputs",
        leaks.len(),
        outputs.len()
    );
    assert!(leaks.is_empty(), "{leaks:?}");
}
