//! A task's lock (ADR 0037: one byte of the execution's `exec.lock`, an open-file-description
//! lock) keeps its writers in turn across store handles that share nothing in memory, as two
//! processes would: a compare-and-swap read and its append are never interleaved with another
//! writer's, so no revision is written twice and no acknowledged update is lost — while
//! writers of other tasks of the same execution go on beside them.

use std::collections::BTreeSet;
use std::sync::Arc;

use orca_core::Task;
use orca_store::{ExecutionStore, FileStore, PlanStore, Revision};

use crate::common::{approved, holder, new_execution, next_task, plan_of};

/// Writers per task, updates per writer, tasks written at once.
const WRITERS: usize = 4;
const UPDATES: usize = 20;
const TASKS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_of_one_task_through_separate_handles_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let setup = FileStore::open(dir.path()).unwrap();
    let plan = approved("lock", TASKS);
    let (exec, tasks) = new_execution(&plan);
    setup.create_plan(&plan_of(&plan)).await.unwrap();
    setup.create_execution(&exec, &tasks).await.unwrap();
    let plan = Arc::new(plan);
    let id = exec.id();

    let mut joins = tokio::task::JoinSet::new();
    for index in 0..TASKS {
        for w in 0..WRITERS {
            // Its own handle: no in-process queue, cache or lock shared with the others.
            let store = FileStore::open(dir.path()).unwrap();
            let plan = Arc::clone(&plan);
            joins.spawn(async move {
                let me = holder(&format!("w{w}"));
                let mut acked = Vec::new();
                let mut conflicts = 0usize;
                while acked.len() < UPDATES {
                    let snap = store.execution(id).await.unwrap();
                    let tasks: Vec<Task> = snap.task_values();
                    let next = next_task(&plan, &tasks, index, &me);
                    match store
                        .update_task(id, &next, snap.tasks[index].revision)
                        .await
                    {
                        Ok(rev) => acked.push(rev.0),
                        Err(e) if e.is_conflict() => conflicts += 1,
                        Err(e) => panic!("writer {w} of task {index}: {e}"),
                    }
                }
                (index, acked, conflicts)
            });
        }
    }
    let mut per_task = vec![BTreeSet::new(); TASKS];
    let mut written_twice = 0usize;
    let mut conflicts = 0usize;
    for (index, acked, c) in joins.join_all().await {
        conflicts += c;
        for rev in acked {
            if !per_task[index].insert(rev) {
                written_twice += 1;
            }
        }
    }

    // Read back by a fresh handle (task files merged with the write-ahead log).
    let fresh = FileStore::open(dir.path()).unwrap();
    let snap = fresh.execution(id).await.unwrap();
    let total = (WRITERS * UPDATES) as u64;
    let mut lost = 0u64;
    for (index, revisions) in per_task.iter().enumerate() {
        let last = snap.tasks[index].revision;
        lost += (1 + total).saturating_sub(last.0);
        assert_eq!(
            revisions.iter().copied().collect::<Vec<_>>(),
            (2..=1 + total).collect::<Vec<_>>(),
            "task {index}: the acknowledged revisions are not exactly 2..={}",
            1 + total
        );
        assert_eq!(last, Revision(1 + total), "task {index}");
    }
    // The write-ahead log holds each (step, revision) once.
    let wal = walk_for(dir.path(), "tasks.wal.jsonl");
    let mut seen = BTreeSet::new();
    let mut duplicate_records = 0usize;
    for line in std::fs::read_to_string(&wal).unwrap().lines() {
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = (record["step"].to_string(), record["revision"].to_string());
        if record.get("step").is_some() && !seen.insert(key) {
            duplicate_records += 1;
        }
    }
    eprintln!(
        "task lock: {} updates of {TASKS} tasks by {} handles, {conflicts} conflicts retried; revisions written twice: {written_twice}, duplicate log records: {duplicate_records}, updates lost: {lost}",
        total * TASKS as u64,
        WRITERS * TASKS,
    );
    assert_eq!(written_twice + duplicate_records, 0);
    assert_eq!(lost, 0);
}

fn walk_for(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let entries = std::fs::read_dir(dir).expect("a directory of the store");
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            let found = walk_for(&path, name);
            if !found.as_os_str().is_empty() {
                return found;
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return path;
        }
    }
    std::path::PathBuf::new()
}
