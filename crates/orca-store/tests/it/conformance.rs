//! One conformance suite, instantiated for every backend, plus file-backend specifics
//! (corrupt files, layout, the listing cache, torn audit lines, tampering).

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::path::Path;

use common::*;
use orca_core::PlanId;
use orca_store::audit::NewAuditEntry;
use orca_store::{
    AuditLogId, AuditStore, ExecutionStore, FileStore, MemoryStore, PlanStore, StoreError,
    VerifyReport,
};
use serde_json::json;

orca_store::store_conformance!(memory, (MemoryStore::new(), ()));
orca_store::store_conformance!(file, {
    let dir = tempfile::tempdir().unwrap();
    (FileStore::open(dir.path()).unwrap(), dir)
});

// ----- file backend specifics -----

fn file_store() -> (FileStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (FileStore::open(dir.path()).unwrap(), dir)
}

/// Two stores on one directory (as two processes would be) appending at once: the flock keeps
/// the chain whole across their group commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_append_to_one_log_at_once() {
    let (a, dir) = file_store();
    let b = FileStore::open(dir.path()).unwrap();
    let log = AuditLogId::Plan {
        plan_id: PlanId::new(),
    };
    let mut joins = tokio::task::JoinSet::new();
    for i in 0..40u64 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        joins.spawn(async move {
            store
                .append(log, NewAuditEntry::new("n", json!({ "i": i })))
                .await
                .unwrap()
                .seq
        });
    }
    let mut seqs = joins.join_all().await;
    seqs.sort_unstable();
    assert_eq!(seqs, (0..40).collect::<Vec<_>>());
    assert_eq!(
        a.verify(log).await.unwrap(),
        VerifyReport::Intact {
            entries: 40,
            sealed: false
        }
    );
}

#[tokio::test]
async fn corrupt_truncated_foreign_and_newer_files_are_named_and_listing_goes_on() {
    let (store, _dir) = file_store();
    let good = draft("good");
    store.create_plan(&good.clone().into()).await.unwrap();
    let valid = std::fs::read_to_string(store.plan_path(good.id())).unwrap();
    let cases = [
        ("garbage", "\u{0}\u{1}not json".to_owned()),
        ("not valid JSON", valid[..valid.len() / 2].to_owned()),
        (
            "missing field `format_version`",
            r#"{"name": "some other tool", "revision": 1}"#.to_owned(),
        ),
        (
            "unsupported format_version 2",
            valid.replace("\"format_version\": 1", "\"format_version\": 2"),
        ),
        ("revision", valid.replace("\"revision\": 1,", "")),
    ];
    let mut bad = Vec::new();
    for (needle, text) in &cases {
        let id = PlanId::new();
        std::fs::write(store.plan_path(id), text).unwrap();
        bad.push((id, *needle));
    }
    let listing = store.list_plans().await.unwrap();
    assert_eq!(listing.items.len(), 1);
    assert_eq!(listing.items[0].plan_id, good.id());
    assert_eq!(
        listing.problems.len(),
        cases.len(),
        "{:?}",
        listing.problems
    );
    for (id, needle) in &bad {
        let path = store.plan_path(*id);
        let p = listing
            .problems
            .iter()
            .find(|p| p.location == path.display().to_string())
            .unwrap();
        if *needle != "garbage" {
            assert!(
                p.message.contains(needle),
                "{} does not mention {needle}",
                p.message
            );
        }
        match store.plan(*id).await.unwrap_err() {
            StoreError::Corrupt { path: p, .. } => assert_eq!(p, path),
            other => panic!("{other}"),
        }
    }
    // A plan file holding another plan.
    let other = PlanId::new();
    std::fs::copy(store.plan_path(good.id()), store.plan_path(other)).unwrap();
    assert!(matches!(
        store.plan(other).await.unwrap_err(),
        StoreError::Corrupt { .. }
    ));
}

#[tokio::test]
async fn corrupt_task_record_is_named() {
    let (store, _dir) = file_store();
    let plan = approved("t", 2);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    let path = store.tasks_path(plan.id(), exec.id());
    let good = std::fs::read_to_string(&path).unwrap();
    // Cut short, one record of another step in place of s1's, s1's record missing, the file
    // removed: each is named, by file and (where it is one task's) by step.
    let other_step = good.replacen("\"step_id\":\"s1\"", "\"step_id\":\"s9\"", 1);
    let without_s1 = {
        let mut doc: serde_json::Value = serde_json::from_str(&good).unwrap();
        doc["tasks"].as_array_mut().unwrap().pop();
        doc.to_string()
    };
    for (bad, says) in [
        (
            "{\"tasks\": [{\"revision\": 1, \"status\": \"pending\"".to_owned(),
            "not valid JSON",
        ),
        (other_step, "no record of task s1"),
        (without_s1, "no record of task s1"),
        (String::new(), "not valid JSON"),
    ] {
        assert_ne!(bad, good);
        std::fs::write(&path, &bad).unwrap();
        match store.execution(exec.id()).await.unwrap_err() {
            StoreError::Corrupt { path: p, message } => {
                assert_eq!(p, path);
                assert!(message.contains(says), "{message}");
            }
            other => panic!("{other}"),
        }
        let listing = store.list_executions(None).await.unwrap();
        assert!(listing.items.is_empty());
        assert_eq!(listing.problems.len(), 1);
    }
    std::fs::remove_file(&path).unwrap();
    match store.execution(exec.id()).await.unwrap_err() {
        StoreError::Corrupt { path: p, message } => {
            assert_eq!(p, path);
            assert!(message.contains("missing"), "{message}");
        }
        other => panic!("{other}"),
    }
    std::fs::write(&path, &good).unwrap();
    assert_eq!(store.execution(exec.id()).await.unwrap().tasks.len(), 2);
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        out.push(e.path());
        if e.file_type().unwrap().is_dir() {
            walk(&e.path(), out);
        }
    }
}

#[tokio::test]
async fn layout_is_human_readable_and_stays_inside_dot_orca() {
    let (store, dir) = file_store();
    let plan = approved("layout", 2);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    let log = AuditLogId::Execution {
        plan_id: plan.id(),
        execution_id: exec.id(),
    };
    store
        .append(log, NewAuditEntry::new("x", json!({})))
        .await
        .unwrap();
    store.seal(log).await.unwrap();
    let _lease = store.acquire_lease(exec.id(), &holder("l")).await.unwrap();
    let _locks = store
        .try_lock_resources(&["db".to_owned()], &holder("l"))
        .await
        .unwrap();
    store.list_plans().await.unwrap();

    let top: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(top, [std::ffi::OsString::from(".orca")]);
    let p = plan.id();
    let e = exec.id();
    let root = dir.path().join(".orca");
    for rel in [
        format!("plans/{p}.json"),
        format!("plans/{p}/executions/{e}.json"),
        format!("plans/{p}/executions/{e}/tasks.json"),
        format!("plans/{p}/executions/{e}.audit.jsonl"),
        format!("plans/{p}/executions/{e}.audit.seal.json"),
        format!("plans/{p}/executions/{e}.lease"),
        format!("executions/{e}"),
        "cache/plan-list.json".to_owned(),
    ] {
        assert!(root.join(&rel).is_file(), "missing {rel}");
    }
    let text = std::fs::read_to_string(root.join(format!("plans/{p}.json"))).unwrap();
    assert!(text.starts_with("{\n  \"revision\": 1,\n"), "{text}");
    let mut all = Vec::new();
    walk(&root, &mut all);
    assert!(
        all.iter().all(|p| !p.to_string_lossy().ends_with(".tmp")),
        "{all:?}"
    );
}

#[tokio::test]
async fn execution_is_found_by_id_alone_even_without_the_index() {
    let (store, dir) = file_store();
    let plan = approved("idx", 1);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    std::fs::remove_file(
        dir.path()
            .join(".orca/executions")
            .join(exec.id().to_string()),
    )
    .unwrap();
    let fresh = FileStore::open(dir.path()).unwrap();
    assert_eq!(
        fresh.execution(exec.id()).await.unwrap().execution.value,
        exec
    );
    // A wrong index is not trusted either.
    std::fs::write(
        dir.path()
            .join(".orca/executions")
            .join(exec.id().to_string()),
        PlanId::new().to_string(),
    )
    .unwrap();
    let fresh = FileStore::open(dir.path()).unwrap();
    assert_eq!(
        fresh.execution(exec.id()).await.unwrap().execution.value,
        exec
    );
}

#[tokio::test]
async fn listing_cache_is_validated_and_rebuilt() {
    let (store, dir) = file_store();
    let mut d = draft("before");
    store.create_plan(&d.clone().into()).await.unwrap();
    assert_eq!(store.list_plans().await.unwrap().items[0].goal, "before");
    // Changed behind the store's back, same size: the stamp (inode, mtime, ctime) differs.
    let path = store.plan_path(d.id());
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("before", "after!");
    std::fs::write(&path, text).unwrap();
    let fresh = FileStore::open(dir.path()).unwrap();
    assert_eq!(fresh.list_plans().await.unwrap().items[0].goal, "after!");
    // An update and a new execution through the store.
    d.set_goal("third");
    let rev = store.plan(d.id()).await.unwrap().revision;
    store.update_plan(&d.clone().into(), rev).await.unwrap();
    assert_eq!(store.list_plans().await.unwrap().items[0].goal, "third");
    // A corrupt cache is ignored and rewritten; a deleted plan disappears.
    let cache = dir.path().join(".orca/cache/plan-list.json");
    std::fs::write(&cache, "{ torn").unwrap();
    assert_eq!(store.list_plans().await.unwrap().items[0].goal, "third");
    assert!(serde_json::from_slice::<serde_json::Value>(&std::fs::read(&cache).unwrap()).is_ok());
    let plan = approved("runs", 1);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    assert_eq!(store.list_plans().await.unwrap().items[0].executions, 0);
    let (exec, tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    assert_eq!(store.list_plans().await.unwrap().items[0].executions, 1);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(store.list_plans().await.unwrap().items.len(), 1);
}

async fn sample_log(n: usize) -> (FileStore, tempfile::TempDir, AuditLogId) {
    let (store, dir) = file_store();
    let log = AuditLogId::Plan {
        plan_id: PlanId::new(),
    };
    for i in 0..n {
        store
            .append(log, NewAuditEntry::new("e", json!({ "i": i })))
            .await
            .unwrap();
    }
    (store, dir, log)
}

fn edit_lines(path: &Path, f: impl FnOnce(&mut Vec<String>)) {
    let mut lines: Vec<String> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    f(&mut lines);
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(path, text).unwrap();
}

#[track_caller]
fn assert_tampered(report: VerifyReport, seq: u64, needle: &str) {
    match report {
        VerifyReport::Tampered { seq: s, problem } => {
            assert_eq!(s, seq, "{problem}");
            assert!(problem.contains(needle), "{problem}");
        }
        other => panic!("not detected: {other:?}"),
    }
}

#[tokio::test]
async fn torn_last_audit_line_is_ignored_then_truncated() {
    let (store, _dir, log) = sample_log(2).await;
    let path = store.audit_path(log);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"seq\":2,\"at\":\"20").unwrap();
    drop(f);
    assert_eq!(store.entries(log).await.unwrap().len(), 2);
    assert_eq!(
        store.verify(log).await.unwrap(),
        VerifyReport::Intact {
            entries: 2,
            sealed: false
        }
    );
    let e = store
        .append(log, NewAuditEntry::new("after", json!({})))
        .await
        .unwrap();
    assert_eq!(e.seq, 2);
    assert_eq!(
        store.verify(log).await.unwrap(),
        VerifyReport::Intact {
            entries: 3,
            sealed: false
        }
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
}

#[tokio::test]
async fn tampering_changed_entry_is_located() {
    let (store, _dir, log) = sample_log(5).await;
    edit_lines(&store.audit_path(log), |l| {
        l[3] = l[3].replace("\"i\":3", "\"i\":7")
    });
    assert_tampered(store.verify(log).await.unwrap(), 3, "changed");
    // A log that does not verify gives no entries to go on with.
    let (report, entries) = store.verified_entries(log).await.unwrap();
    assert_tampered(report, 3, "changed");
    assert!(entries.is_empty());
}

#[tokio::test]
async fn tampering_removed_entry_is_located() {
    let (store, _dir, log) = sample_log(5).await;
    edit_lines(&store.audit_path(log), |l| {
        l.remove(1);
    });
    assert_tampered(store.verify(log).await.unwrap(), 1, "removed");
}

#[tokio::test]
async fn tampering_reordered_entries_are_located() {
    let (store, _dir, log) = sample_log(5).await;
    edit_lines(&store.audit_path(log), |l| l.swap(2, 4));
    assert_tampered(store.verify(log).await.unwrap(), 2, "reordered");
}

#[tokio::test]
async fn tampering_inserted_entry_is_located() {
    let (store, _dir, log) = sample_log(5).await;
    let entries = store.entries(log).await.unwrap();
    let forged = orca_store::audit::next_entry(
        Some(&entries[2]),
        NewAuditEntry::new("forged", json!({})),
        now(),
    );
    edit_lines(&store.audit_path(log), |l| {
        l.insert(3, serde_json::to_string(&forged).unwrap())
    });
    assert_tampered(store.verify(log).await.unwrap(), 3, "inserted");
}

#[tokio::test]
async fn tampering_truncated_tail_after_seal_is_located() {
    let (store, _dir, log) = sample_log(5).await;
    store.seal(log).await.unwrap();
    edit_lines(&store.audit_path(log), |l| l.truncate(3));
    assert_tampered(store.verify(log).await.unwrap(), 3, "truncated");
}

#[tokio::test]
async fn secrets_never_reach_the_file() {
    let (store, _dir, log) = sample_log(0).await;
    store
        .append(log, NewAuditEntry::new("agent.call", json!({"headers": {"Authorization": "Bearer tok123"}, "key": "sk-ant-api03-abcdefghij"})))
        .await
        .unwrap();
    let text = std::fs::read_to_string(store.audit_path(log)).unwrap();
    assert!(
        !text.contains("tok123") && !text.contains("abcdefghij"),
        "{text}"
    );
}
