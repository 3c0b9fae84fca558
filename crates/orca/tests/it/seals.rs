//! Every terminal transition seals its log, signed (ADR 0013): a plan's log at approval and
//! rejection, an execution's when it completes, and when `exec stop` ends it with no process
//! driving it. Counts the unsealed logs of ended things (must be 0).

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::path::Path;

use common::orca;
use serde_json::{Value, json};

fn plan_doc(second: &str) -> String {
    json!({
        "goal": "g", "summary": "s", "assumptions": ["a"], "risks": ["r"], "verification": ["v"],
        "steps": [
            { "id": "a", "agent": "shell", "description": "a", "command": "echo a", "depends_on": [] },
            { "id": "b", "agent": "shell", "description": "b", "command": second, "depends_on": ["a"], "max_attempts": 1 }
        ]
    })
    .to_string()
}

fn created(root: &Path, config: &Path, name: &str, doc: &str) -> String {
    std::fs::write(root.join(name), doc).unwrap();
    let out = orca(root, config, &["--json", "plan", "create", "--file", name]);
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["plan_id"].as_str().unwrap().to_owned()
}

fn seal(path: &Path) -> Option<Value> {
    std::fs::read_to_string(path)
        .ok()
        .map(|t| serde_json::from_str(&t).unwrap())
}

#[test]
fn every_terminal_transition_seals_its_log_with_a_signature() {
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    assert!(
        cfg.join("orca/signing.key").is_file(),
        "init creates the key outside the project"
    );
    let plans = root.join(".orca/plans");
    let mut ended = Vec::new();

    // Approved and run to completion.
    let done = created(root, cfg, "done.json", &plan_doc("echo b"));
    assert_eq!(
        orca(root, cfg, &["plan", "approve", &done]).status.code(),
        Some(0)
    );
    ended.push(plans.join(&done).join("plan.audit.seal.json"));
    let out = orca(root, cfg, &["--json", "run", &done]);
    assert_eq!(out.status.code(), Some(0));
    let x: Value = serde_json::from_slice(&out.stdout).unwrap();
    let x = x["execution_id"].as_str().unwrap().to_owned();
    ended.push(
        plans
            .join(&done)
            .join("executions")
            .join(format!("{x}.audit.seal.json")),
    );

    // Rejected.
    let no = created(root, cfg, "no.json", &plan_doc("echo b"));
    assert_eq!(
        orca(root, cfg, &["plan", "reject", &no]).status.code(),
        Some(0)
    );
    ended.push(plans.join(&no).join("plan.audit.seal.json"));

    // Waiting for a decision, then cancelled with nobody driving it.
    let stuck = created(root, cfg, "stuck.json", &plan_doc("exit 1"));
    let out = orca(root, cfg, &["--json", "run", &stuck, "--yes"]);
    assert_eq!(out.status.code(), Some(4));
    let y: Value = serde_json::from_slice(&out.stdout).unwrap();
    let y = y["execution_id"].as_str().unwrap().to_owned();
    let stuck_seal = plans
        .join(&stuck)
        .join("executions")
        .join(format!("{y}.audit.seal.json"));
    assert!(seal(&stuck_seal).is_none(), "a waiting run is not sealed");
    // Ended for good by `exec cancel` (`exec stop` only interrupts a driver: ADR 0010).
    assert_eq!(
        orca(root, cfg, &["exec", "cancel", &y]).status.code(),
        Some(0)
    );
    ended.push(stuck_seal);

    let unsealed: Vec<_> = ended.iter().filter(|p| seal(p).is_none()).collect();
    println!(
        "unsealed logs of ended plans and executions: {}/{}",
        unsealed.len(),
        ended.len()
    );
    assert!(unsealed.is_empty(), "{unsealed:?}");
    for p in &ended {
        let s = seal(p).unwrap();
        assert!(s["log"].is_object(), "{p:?} names its log");
        assert!(s["signature"]["signature"].is_string(), "{p:?} is signed");
    }
    let out = orca(root, cfg, &["audit", "verify", "--all"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
