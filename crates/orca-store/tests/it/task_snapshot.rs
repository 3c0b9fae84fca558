//! An execution's tasks as one snapshot file plus the write-ahead log (ADR 0056): no file per
//! task, no copy per transition, an ended execution whole in its snapshot, and executions of
//! the older layout (a file per task) read as they are and converted by their next compaction.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};

use crate::common::*;
use orca_core::{StepId, Task};
use orca_store::audit::NewAuditEntry;
use orca_store::{
    AuditLogId, AuditStore, ExecutionStore, FileStore, PlanStore, Revision, StoreError,
};
use serde_json::json;

/// Every file under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

fn wal_of(snapshot: &Path) -> PathBuf {
    snapshot.with_file_name("tasks.wal.jsonl")
}

#[tokio::test]
async fn a_run_of_many_tasks_writes_one_task_file_and_an_ended_one_is_whole_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let plan = approved("many", 40);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, mut tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    let id = exec.id();
    let snapshot = store.tasks_path(plan.id(), id);
    let exec_dir = snapshot.parent().unwrap().to_path_buf();
    assert_eq!(files(&exec_dir), ["tasks.json"], "one file for 40 tasks");
    let me = holder("m");
    for i in 0..tasks.len() {
        for _ in 0..2 {
            let next = next_task(&plan, &tasks, i, &me);
            let stored = store.task(id, tasks[i].step_id()).await.unwrap().revision;
            store.update_task(id, &next, stored).await.unwrap();
            tasks[i] = next;
        }
    }
    // 80 transitions: in the log, not copied into any file per task.
    let after: Vec<String> = files(&exec_dir)
        .into_iter()
        .filter(|f| !f.ends_with(".lock"))
        .collect();
    assert_eq!(after, ["tasks.json", "tasks.wal.jsonl"]);
    let created = std::fs::read(&snapshot).unwrap();
    let log = AuditLogId::Execution {
        plan_id: plan.id(),
        execution_id: id,
    };
    store
        .append(log, NewAuditEntry::new("execution.ended", json!({})))
        .await
        .unwrap();
    store.seal(log).await.unwrap();
    // Sealed: the log folded into the snapshot and emptied.
    assert_eq!(std::fs::read(wal_of(&snapshot)).unwrap(), b"");
    assert_ne!(std::fs::read(&snapshot).unwrap(), created);
    let fresh = FileStore::open(dir.path()).unwrap();
    let snap = fresh.execution(id).await.unwrap();
    assert_eq!(snap.task_values(), tasks);
    assert!(snap.tasks.iter().all(|t| t.revision == Revision(3)));
    assert!(fresh.verify(log).await.unwrap().is_intact());
    println!("40 tasks, 80 transitions: 1 task file; ended: log empty, snapshot whole");
}

/// Rewrites an execution into the older layout: `tasks/{step}.json` per task, no snapshot.
fn to_legacy(snapshot: &Path) -> Vec<PathBuf> {
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(snapshot).unwrap()).unwrap();
    let dir = snapshot.with_file_name("tasks");
    std::fs::create_dir(&dir).unwrap();
    let mut written = Vec::new();
    for record in doc["tasks"].as_array().unwrap() {
        let path = dir.join(format!("{}.json", record["step_id"].as_str().unwrap()));
        std::fs::write(&path, serde_json::to_string_pretty(record).unwrap() + "\n").unwrap();
        written.push(path);
    }
    std::fs::remove_file(snapshot).unwrap();
    written
}

#[tokio::test]
async fn an_execution_of_the_file_per_task_layout_is_read_and_converted_by_its_next_lease() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let plan = approved("legacy", 3);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, mut tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    let id = exec.id();
    let snapshot = store.tasks_path(plan.id(), id);
    let legacy = to_legacy(&snapshot);
    let me = holder("l");
    let next = next_task(&plan, &tasks, 1, &me);
    store.update_task(id, &next, Revision::FIRST).await.unwrap();
    tasks[1] = next;
    let fresh = FileStore::open(dir.path()).unwrap();
    assert_eq!(fresh.execution(id).await.unwrap().task_values(), tasks);
    // A missing task file of that layout is named.
    let kept = std::fs::read(&legacy[2]).unwrap();
    std::fs::remove_file(&legacy[2]).unwrap();
    match fresh.execution(id).await.unwrap_err() {
        StoreError::Corrupt { path, message } => {
            assert_eq!(path, legacy[2], "{message}");
        }
        other => panic!("{other}"),
    }
    std::fs::write(&legacy[2], kept).unwrap();
    // The next lease compacts: one snapshot, the per-task files gone, the same tasks.
    let _lease = fresh.acquire_lease(id, &holder("l")).await.unwrap();
    assert!(snapshot.is_file());
    assert!(!snapshot.with_file_name("tasks").exists());
    assert_eq!(std::fs::read(wal_of(&snapshot)).unwrap(), b"");
    let again = FileStore::open(dir.path()).unwrap();
    let snap = again.execution(id).await.unwrap();
    assert_eq!(snap.task_values(), tasks);
    let revisions: Vec<u64> = snap.tasks.iter().map(|t| t.revision.0).collect();
    assert_eq!(revisions, [1, 2, 1]);
    let step: StepId = "s1".parse().unwrap();
    let t = again.task(id, &step).await.unwrap();
    assert!(matches!(t.value, Task::Running(_)), "{:?}", t.value);
    println!("older layout: read as it was, converted by the lease: 3 task files -> 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_never_sees_tasks_go_back_while_the_log_is_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let plan = approved("compacting", 3);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, mut tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    let id = exec.id();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (reader_stop, root) = (stop.clone(), dir.path().to_path_buf());
    // Another store (as another process would): every read's revisions never go back.
    let reader = tokio::spawn(async move {
        let other = FileStore::open(&root).unwrap();
        let (mut reads, mut backwards) = (0u32, 0u32);
        let mut last = [0u64; 3];
        while !reader_stop.load(std::sync::atomic::Ordering::SeqCst) {
            let snap = other.execution(id).await.unwrap();
            for (i, t) in snap.tasks.iter().enumerate() {
                backwards += u32::from(t.revision.0 < last[i]);
                last[i] = t.revision.0;
            }
            reads += 1;
        }
        (reads, backwards)
    });
    let me = holder("c");
    for _ in 0..40 {
        for i in 0..tasks.len() {
            let next = next_task(&plan, &tasks, i, &me);
            let stored = store.task(id, tasks[i].step_id()).await.unwrap().revision;
            store.update_task(id, &next, stored).await.unwrap();
            tasks[i] = next;
        }
        // A lease taken compacts: a new snapshot, then a new, empty log.
        drop(store.acquire_lease(id, &holder("c")).await.unwrap());
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (reads, backwards) = reader.await.unwrap();
    println!("{reads} reads during 40 compactions: {backwards} went back");
    assert!(reads > 0);
    assert_eq!(backwards, 0);
}
