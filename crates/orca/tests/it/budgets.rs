//! Budgets approved with the plan (ADR 0017), on the real `orca` binary with a
//! scripted model: a step whose usage crosses its budget stops at the turn that crossed it,
//! naming the step's budget and the overrun; the plan's budget stops the step that crosses it;
//! `plan show` prints budgets next to an estimate; and an approved budget cannot be changed
//! without a new approval (the digest check refuses the run, nothing runs).

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use serde_json::{Value, json};
use tempfile::TempDir;

struct Project {
    dir: TempDir,
    config_home: TempDir,
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn last_json(text: &str) -> Option<Value> {
    serde_json::from_str(text).ok().or_else(|| {
        text.lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v.is_object() || v.is_array())
    })
}

/// A script of `turns` model turns, each listing files and spending `tokens` input tokens;
/// the turn after them submits.
fn script(turns: usize, tokens: u64) -> Value {
    let mut all: Vec<Value> = (0..turns)
        .map(|_| {
            json!({ "tool_calls": [{ "name": "list_files", "arguments": {} }],
                    "usage": { "input_tokens": tokens } })
        })
        .collect();
    all.push(json!({ "tool_calls": [{ "name": "submit_result",
        "arguments": { "status": "success", "summary": "done" } }],
        "usage": { "input_tokens": tokens } }));
    json!({ "turns": all })
}

impl Project {
    fn new() -> Self {
        let p = Self {
            dir: tempfile::tempdir().unwrap(),
            config_home: tempfile::tempdir().unwrap(),
        };
        let out = p.run(&["init"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        // Scripted agents: each plays its own script, turn after turn, across its calls.
        std::fs::write(p.path("five.json"), script(5, 100).to_string()).unwrap();
        std::fs::write(p.path("two.json"), script(1, 100).to_string()).unwrap();
        std::fs::write(p.path("other.json"), script(1, 100).to_string()).unwrap();
        // Two answered turns, then a model that does not answer within a minute.
        let mut slow = script(2, 100);
        slow["turns"].as_array_mut().unwrap().insert(
            2,
            json!({ "error": { "kind": "overloaded", "retry_after_ms": 60_000 } }),
        );
        std::fs::write(p.path("slow.json"), slow.to_string()).unwrap();
        std::fs::write(
            p.path(".orca/config.toml"),
            "[agents.five]\nbackend = \"scripted\"\nscript = \"five.json\"\ntools = [\"list_files\"]\ndescription = \"five turns of 100 tokens\"\nmodel = \"gpt-4o\"\n\n\
             [agents.two]\nbackend = \"scripted\"\nscript = \"two.json\"\ntools = [\"list_files\"]\ndescription = \"two turns of 100 tokens\"\n\n\
             [agents.other]\nbackend = \"scripted\"\nscript = \"other.json\"\ntools = [\"list_files\"]\ndescription = \"two turns of 100 tokens\"\n\n\
             [agents.slow]\nbackend = \"scripted\"\nscript = \"slow.json\"\ntools = [\"list_files\"]\ndescription = \"two turns, then silence\"\n",
        )
        .unwrap();
        p
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = common::isolated(self.dir.path(), self.config_home.path());
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.output().unwrap()
    }

    fn json(&self, args: &[&str]) -> (i32, Value, String) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        let value = last_json(&String::from_utf8_lossy(&out.stdout))
            .unwrap_or_else(|| panic!("no JSON from {args:?}: {}", stderr(&out)));
        (code(&out), value, stderr(&out))
    }

    fn plan(&self, doc: &Value) -> String {
        let path = self.path("plan.json");
        std::fs::write(&path, doc.to_string()).unwrap();
        path.display().to_string()
    }

    /// Every entry of the execution's audit log.
    fn log(&self, exec: &str) -> Vec<Value> {
        let mut out = Vec::new();
        walk(&self.path(".orca"), &mut |p| {
            if p.to_string_lossy()
                .ends_with(&format!("{exec}.audit.jsonl"))
            {
                for line in std::fs::read_to_string(p).unwrap().lines() {
                    out.push(serde_json::from_str(line).unwrap());
                }
            }
        });
        out
    }
}

fn walk(dir: &Path, f: &mut impl FnMut(&Path)) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, f);
        } else {
            f(&p);
        }
    }
}

fn doc(steps: Vec<Value>, budget: Option<Value>) -> Value {
    let mut d = json!({ "goal": "spend tokens", "assumptions": ["a scripted model"],
        "risks": ["none"], "verification": ["the budget stops it"], "steps": steps });
    if let Some(b) = budget {
        d["budget"] = b;
    }
    d
}

/// The message of the first failure with `code` anywhere in `v`.
fn find_code(v: &Value, code: &str) -> Option<String> {
    match v {
        Value::Object(m) => {
            if m.get("code").and_then(Value::as_str) == Some(code) {
                return m.get("message").and_then(Value::as_str).map(str::to_owned);
            }
            m.values().find_map(|x| find_code(x, code))
        }
        Value::Array(a) => a.iter().find_map(|x| find_code(x, code)),
        _ => None,
    }
}

#[test]
fn a_step_crossing_its_budget_stops_at_that_turn_and_the_human_decides() {
    let p = Project::new();
    let plan = p.plan(&doc(
        vec![
            json!({ "id": "think", "agent": "five", "description": "think hard",
                     "budget": { "max_tokens": 250 } }),
        ],
        None,
    ));
    let (c, v, err) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 4, "the deviation decision waits for a human: {v} {err}");
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let (_, shown, _) = p.json(&["exec", "show", &exec]);
    let why = find_code(&shown["decision"], "budget_exceeded")
        .unwrap_or_else(|| panic!("no budget decision: {shown}"));
    println!("decision: {why}");
    assert_eq!(
        why,
        "step `think`'s budget: token budget exceeded: 300 > 250, over by 50"
    );
    // The model was called exactly until the crossing turn: 3 turns of 100, not 6.
    let failed: Vec<Value> = p
        .log(&exec)
        .into_iter()
        .filter(|e| e["data"]["step_id"] == "think" && e["data"]["usage"].is_object())
        .collect();
    assert_eq!(
        failed.len(),
        1,
        "one attempt (budget overruns are not retried)"
    );
    let turns = failed[0]["data"]["usage"]["turns"].as_u64().unwrap();
    let tokens = failed[0]["data"]["usage"]["input_tokens"].as_u64().unwrap();
    println!("model turns before the stop: {turns}, tokens: {tokens}");
    assert_eq!((turns, tokens), (3, 300));
    // The next estimate of this plan comes from what it spent.
    let plan_id = v["plan_id"].as_str().unwrap();
    let text = String::from_utf8_lossy(&p.run(&["plan", "show", plan_id]).stdout).into_owned();
    assert!(
        text.contains(
            "think: tokens ≤ 250; estimate ~300 tokens, ~$0.000000 (recorded usage of earlier runs)"
        ),
        "{text}"
    );
}

/// A step that times out keeps the usage its model already reported: the attempt's audit
/// entry counts the two answered turns (200 tokens), not zeros.
#[test]
fn a_timed_out_step_keeps_the_usage_already_reported() {
    let p = Project::new();
    let plan = p.plan(&doc(
        vec![json!({ "id": "wait", "agent": "slow", "description": "wait", "timeout_secs": 2 })],
        None,
    ));
    // The timed-out attempt is retried (the script then submits): the first one is checked.
    let (c, v, err) = p.json(&["run", &plan, "--yes", "--on-failure", "stop"]);
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let failed: Vec<Value> = p
        .log(&exec)
        .into_iter()
        .filter(|e| e["data"]["step_id"] == "wait" && e["data"]["usage"].is_object())
        .collect();
    println!("exit {c}; attempts with usage: {failed:?}");
    assert!(!failed.is_empty(), "{v} {err}");
    let entry = &failed[0];
    assert!(entry.to_string().contains("timed out"), "{entry}");
    assert_eq!(entry["data"]["usage"]["turns"], 2, "{entry}");
    assert_eq!(entry["data"]["usage"]["input_tokens"], 200, "{entry}");
}

#[test]
fn the_plans_budget_stops_the_step_that_crosses_it() {
    let p = Project::new();
    let plan = p.plan(&doc(
        vec![
            json!({ "id": "one", "agent": "two", "description": "first" }),
            json!({ "id": "two", "agent": "other", "description": "second" }),
        ],
        Some(json!({ "max_tokens": 300 })),
    ));
    let (c, v, err) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 4, "{v} {err}");
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let (_, shown, _) = p.json(&["exec", "show", &exec]);
    assert_eq!(shown["tasks"][0]["status"], "completed", "{shown}");
    let why = find_code(&shown["decision"], "budget_exceeded")
        .unwrap_or_else(|| panic!("no budget decision: {shown}"));
    println!("decision: {why}");
    assert_eq!(shown["decision"]["request"]["step_id"], "two");
    assert!(
        why.starts_with("the plan's budget: token budget exceeded: ") && why.contains("over by"),
        "{why}"
    );
}

#[test]
fn plan_show_prints_budgets_next_to_an_estimate() {
    let p = Project::new();
    let plan = p.plan(&doc(
        vec![
            json!({ "id": "think", "agent": "five", "description": "think hard",
                     "budget": { "max_tokens": 250, "max_wall_secs": 60 } }),
        ],
        Some(json!({ "max_cost_micro_usd": 2_000_000 })),
    ));
    let out = p.run(&["plan", "create", "--file", &plan]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (_, list, _) = p.json(&["plan", "list"]);
    let id = list[0]["plan_id"]
        .as_str()
        .or(list[0]["id"].as_str())
        .unwrap()
        .to_owned();
    let text = String::from_utf8_lossy(&p.run(&["plan", "show", &id]).stdout).into_owned();
    println!("{text}");
    assert!(text.contains("Budgets (approved with the plan"), "{text}");
    assert!(text.contains("plan: cost ≤ $2.000000; estimate"), "{text}");
    assert!(
        text.contains("think: tokens ≤ 250, wall ≤ 60s; estimate ~20"),
        "{text}"
    );
    let (_, shown, _) = p.json(&["plan", "show", &id]);
    assert_eq!(
        shown["budgets"]["steps"][0]["budget"]["max_tokens"], 250,
        "{shown}"
    );
}

#[test]
fn an_approved_budget_cannot_change_without_a_new_approval() {
    let p = Project::new();
    let plan = p.plan(&doc(
        vec![
            json!({ "id": "think", "agent": "two", "description": "think",
                     "budget": { "max_tokens": 250 } }),
        ],
        Some(json!({ "max_tokens": 1000 })),
    ));
    let out = p.run(&["plan", "create", "--file", &plan]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (_, list, _) = p.json(&["plan", "list"]);
    let id = list[0]["plan_id"]
        .as_str()
        .or(list[0]["id"].as_str())
        .unwrap()
        .to_owned();
    let out = p.run(&["plan", "approve", &id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let file = p.path(&format!(".orca/plans/{id}.json"));
    let original = std::fs::read_to_string(&file).unwrap();
    let mut refused = 0;
    // Raised behind orca's back: the step's budget, then the plan's, then the plan's with the
    // stored approval digest recomputed to match (the signature still covers the old one).
    for (edit, recompute) in [("step", false), ("plan", false), ("plan", true)] {
        let mut v: Value = serde_json::from_str(&original).unwrap();
        match edit {
            "step" => v["content"]["steps"][0]["budget"]["max_tokens"] = json!(1_000_000),
            _ => v["content"]["budget"]["max_tokens"] = json!(1_000_000),
        }
        if recompute {
            let content: orca_core::PlanContent =
                serde_json::from_value(v["content"].clone()).unwrap();
            v["approval"]["digest"] = json!(content.digest());
        }
        std::fs::write(&file, v.to_string()).unwrap();
        let out = p.run(&["run", &id]);
        println!(
            "{edit} budget raised (digest recomputed: {recompute}): exit {}: {}",
            code(&out),
            stderr(&out).trim()
        );
        if code(&out) == 5 {
            refused += 1;
        }
    }
    std::fs::write(&file, &original).unwrap();
    let (_, execs, _) = p.json(&["exec", "list"]);
    let ran = execs.as_array().map_or(0, Vec::len);
    println!("budget edits refused: {refused}/3, executions started: {ran}");
    assert_eq!((refused, ran), (3, 0));
}
