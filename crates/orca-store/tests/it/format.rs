//! The on-disk format is a contract (other tools, git diffs, older and newer orca read it):
//! one snapshot of the layout and of each kind of file, ids, times and hashes redacted.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use common::holder;
use orca_core::{
    AgentId, ContextLimits, DraftPlan, ExecutionId, Holder, PendingExecution, PlanId, Step, Task,
    build_context,
};
use orca_store::{
    AuditLogId, AuditStore, ExecutionStore, FileStore, NewAuditEntry, PlanStore, Revision,
};
use serde_json::json;
use time::macros::datetime;

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for e in entries {
        let rel = e.path().strip_prefix(root).unwrap().display().to_string();
        if e.file_type().unwrap().is_dir() {
            out.push(format!("{rel}/"));
            walk(root, &e.path(), out);
        } else {
            out.push(rel);
        }
    }
}

fn redact_entry(line: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
    for key in ["at", "prev", "hash", "merkle_root", "acquired_at"] {
        if let Some(x) = v.get_mut(key) {
            *x = json!(format!("[{key}]"));
        }
    }
    if let Some(h) = v.get_mut("holder") {
        h["pid"] = json!(0);
        h["token"] = json!("[token]");
    }
    serde_json::to_string_pretty(&v).unwrap()
}

#[tokio::test]
async fn on_disk_format() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let at = datetime!(2026-11-20 12:00 UTC);
    let plan_id = PlanId::new();
    let mut d = DraftPlan::new(plan_id, at);
    d.set_goal("build and test");
    d.set_assumptions(vec!["a POSIX shell".into()]);
    d.set_risks(vec!["none".into()]);
    d.set_verification(vec!["tests pass".into()]);
    d.add_step(
        Step::new("build".parse().unwrap(), AgentId::shell(), "build").with_command("make"),
        None,
    )
    .unwrap();
    let agents: BTreeSet<AgentId> = [AgentId::shell()].into_iter().collect();
    let plan = d.submit(&agents, at).unwrap().approve("alice", None, at);
    store.create_plan(&plan.clone().into()).await.unwrap();
    let exec_id = ExecutionId::new();
    let (pending, tasks) = PendingExecution::new(exec_id, &plan, at);
    store
        .create_execution(&pending.clone().into(), &tasks)
        .await
        .unwrap();
    let task_at_creation = std::fs::read_to_string(store.tasks_path(plan_id, exec_id)).unwrap();
    let log = AuditLogId::Execution {
        plan_id,
        execution_id: exec_id,
    };
    store
        .append(
            log,
            NewAuditEntry::new("execution.started", json!({"by": "alice"})),
        )
        .await
        .unwrap();
    store
        .append(
            log,
            NewAuditEntry::new("agent.call", json!({"agent": "shell", "api_key": "k"}))
                .with_parent(Some(0)),
        )
        .await
        .unwrap();
    store.seal(log).await.unwrap();
    store
        .append(
            AuditLogId::Plan { plan_id },
            NewAuditEntry::new("plan.approved", json!({})),
        )
        .await
        .unwrap();
    let _lease = store.acquire_lease(exec_id, &holder("fmt")).await.unwrap();
    // One transition: the execution's task write-ahead log (ADR 0015).
    store
        .update_execution(&pending.start(at).into(), Revision::FIRST)
        .await
        .unwrap();
    let Task::Pending(first) = tasks[0].clone() else {
        panic!("a new task is pending")
    };
    let ctx = build_context(
        plan_id,
        plan.content(),
        0,
        &tasks,
        &ContextLimits::default(),
    )
    .unwrap();
    let me = Holder {
        pid: 1,
        host: "host".into(),
        token: "token".into(),
    };
    store
        .update_task(exec_id, &first.start(ctx, me, at).into(), Revision::FIRST)
        .await
        .unwrap();
    let _locks = store
        .try_lock_resources(&["db".to_owned()], &holder("fmt"))
        .await
        .unwrap();
    store.list_plans().await.unwrap();

    let root = dir.path().join(".orca");
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    let read = |rel: String| std::fs::read_to_string(root.join(rel)).unwrap();
    let mut out = String::new();
    out.push_str("# layout\n");
    out.push_str(&files.join("\n"));
    out.push_str("\n\n# plans/{plan}.json\n");
    out.push_str(&read(format!("plans/{plan_id}.json")));
    out.push_str("\n# plans/{plan}/executions/{exec}.json\n");
    out.push_str(&read(format!("plans/{plan_id}/executions/{exec_id}.json")));
    out.push_str("\n# plans/{plan}/executions/{exec}/tasks.json\n");
    out.push_str(&task_at_creation);
    out.push_str("\n# plans/{plan}/executions/{exec}/tasks.wal.jsonl (line 1)\n");
    out.push_str(
        read(format!(
            "plans/{plan_id}/executions/{exec_id}/tasks.wal.jsonl"
        ))
        .lines()
        .next()
        .unwrap(),
    );
    out.push('\n');
    out.push_str("\n# plans/{plan}/executions/{exec}.audit.jsonl (line 2)\n");
    out.push_str(&redact_entry(
        read(format!("plans/{plan_id}/executions/{exec_id}.audit.jsonl"))
            .lines()
            .nth(1)
            .unwrap(),
    ));
    out.push_str("\n\n# plans/{plan}/executions/{exec}.audit.seal.json\n");
    out.push_str(&redact_entry(&read(format!(
        "plans/{plan_id}/executions/{exec_id}.audit.seal.json"
    ))));
    out.push_str("\n\n# plans/{plan}/executions/{exec}.lease\n");
    out.push_str(&redact_entry(&read(format!(
        "plans/{plan_id}/executions/{exec_id}.lease"
    ))));
    out.push('\n');
    let out = out
        .replace(&plan_id.to_string(), "{plan}")
        .replace(&exec_id.to_string(), "{exec}")
        .replace(&plan.digest().to_string(), "[digest]");
    insta::assert_snapshot!(out);
}
