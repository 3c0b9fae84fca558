//! The file store redacts what it writes with the redactor it was opened with: task records,
//! execution headers and audit entries never hold a known secret, and a secret that happens to
//! equal an identifier does not make a document unreadable.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::collections::BTreeSet;

use common::*;
use orca_core::redact::Redactor;
use orca_core::{AgentId, DraftPlan, PlanId, Step, StepId, Task, TaskSuccess};
use orca_store::audit::NewAuditEntry;
use orca_store::{AuditLogId, AuditStore, ExecutionStore, FileStore, PlanStore, Revision};
use serde_json::json;

const SECRET: &str = "deploy-production-2";

#[tokio::test]
async fn known_secrets_never_reach_the_files_and_documents_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open_with_redactor(
        dir.path(),
        orca_store::signing::Authority::permissive(),
        Redactor::new().with_secrets([SECRET]),
    )
    .unwrap();
    // A step whose id equals the secret: identifiers are kept, so everything reads back.
    let mut d = DraftPlan::new(PlanId::new(), now());
    d.set_goal("ship");
    d.set_assumptions(vec!["a".into()]);
    d.set_risks(vec!["r".into()]);
    d.set_verification(vec!["v".into()]);
    let step = StepId::parse(SECRET).unwrap();
    d.add_step(
        Step::new(step.clone(), AgentId::shell(), "deploy").with_command("true"),
        None,
    )
    .unwrap();
    let agents: BTreeSet<AgentId> = [AgentId::shell()].into_iter().collect();
    let plan = d
        .submit(&agents, now())
        .unwrap()
        .approve("alice", None, now());
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    let running = next_task(&plan, &tasks, 0, &holder("r"));
    store
        .update_task(exec.id(), &running, Revision::FIRST)
        .await
        .unwrap();
    let Task::Running(r) = running else {
        unreachable!()
    };
    let mut success =
        TaskSuccess::with_summary(format!("pushed with {SECRET} and sk-proj-abcdefghijklmnop"));
    success.output = Some(format!(
        "Authorization: Bearer {SECRET}\nGITHUB_TOKEN={SECRET}\n"
    ));
    store
        .update_task(exec.id(), &r.complete(success, now()).into(), Revision(2))
        .await
        .unwrap();
    let log = AuditLogId::Execution {
        plan_id: plan.id(),
        execution_id: exec.id(),
    };
    store
        .append(
            log,
            NewAuditEntry::new(
                "task.completed",
                json!({"summary": format!("x {SECRET} y")}),
            ),
        )
        .await
        .unwrap();

    // Everything reads back, with the identifier intact and the text redacted.
    let snap = store.execution(exec.id()).await.unwrap();
    assert_eq!(snap.tasks[0].value.step_id(), &step);
    let Task::Completed(done) = &snap.tasks[0].value else {
        panic!("{:?}", snap.tasks[0].value)
    };
    let text = serde_json::to_string(done).unwrap();
    assert!(text.contains("[redacted]"), "{text}");
    let entries = store.entries(log).await.unwrap();
    assert_eq!(entries[0].data["summary"], "x [redacted] y");
    assert!(store.verify(log).await.unwrap().is_intact());

    // No file but the plan (stored as approved: its digest covers it) holds the secret in text.
    let mut leaks = 0;
    let mut files = 0;
    for entry in walk(&dir.path().join(".orca")) {
        let body = std::fs::read_to_string(&entry).unwrap_or_default();
        files += 1;
        let is_plan = entry.extension().is_some_and(|e| e == "json")
            && entry.parent().is_some_and(|p| p.ends_with("plans"));
        let hits = body.matches(SECRET).count();
        // Identifiers may hold it (the step id, the task file name); free text may not.
        let allowed = if is_plan {
            hits
        } else {
            body.matches(&format!("\"{SECRET}\"")).count()
        };
        if hits > allowed {
            leaks += hits - allowed;
            eprintln!("LEAK in {}: {body}", entry.display());
        }
        assert!(!body.contains("abcdefghijklmnop"), "{}", entry.display());
    }
    eprintln!("{files} files searched; leaks of the known secret in free text: {leaks}");
    assert_eq!(leaks, 0);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}
