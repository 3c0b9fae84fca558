//! Staged audit entries (ADR 0055), against a real throwaway server: what a writer staged and
//! did not live to chain (killed between its staging's commit and its chaining) is chained by
//! the log's next reader, writer, export or seal, in staging order and before any later append, and the chain verifies; a staged
//! row that is not an entry is named and changes nothing; a store that stages every write and
//! one whose entries the database chains share one chain, and what each was answered is what is
//! stored.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::HashMap;

use orca_core::PlanId;
use orca_store::{AuditLogId, AuditStore, NewAuditEntry, StoreError};
use serde_json::json;

use crate::db::{database, store_on};

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Stages an entry as a writer killed right after its staging committed leaves it.
async fn leave_staged(db: &tokio_postgres::Client, kind: &str, i: u64) {
    let key: String = db
        .query_one("SELECT log_key FROM audit_logs", &[])
        .await
        .unwrap()
        .get(0);
    let entry = json!({
        "at": "2026-12-07T08:00:00Z",
        "entry": { "parent": null, "kind": kind, "data": { "i": i } },
    });
    db.execute(
        "INSERT INTO audit_staged (log_key, entry) VALUES ($1, $2)",
        &[&key, &entry.to_string()],
    )
    .await
    .unwrap();
}

async fn staged_rows(db: &tokio_postgres::Client) -> i64 {
    db.query_one("SELECT count(*) FROM audit_staged", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_killed_writer_staged_is_chained_by_the_next_reader_writer_or_seal() {
    let url = database().await;
    let store = store_on(&url).await;
    let db = client(&url).await;
    let log = AuditLogId::Plan {
        plan_id: PlanId::new(),
    };
    for i in 0..2 {
        store
            .append(log, NewAuditEntry::new("written", json!({ "i": i })))
            .await
            .unwrap();
    }

    // A reader: `entries` chains what is staged before reading.
    leave_staged(&db, "left.by.reader", 2).await;
    let entries = store.entries(log).await.unwrap();
    let kinds: Vec<&str> = entries.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["written", "written", "left.by.reader"]);
    assert_eq!(staged_rows(&db).await, 0);

    // A writer that stages: its own staged write chains the leftovers first (staging order).
    leave_staged(&db, "left.by.writer", 3).await;
    let other = store_on(&url).await;
    other.set_stage_first(true);
    let mine = other
        .append(log, NewAuditEntry::new("staged", json!({ "i": 4 })))
        .await
        .unwrap();
    assert_eq!(mine.seq, 4);
    let entries = store.entries(log).await.unwrap();
    assert_eq!(entries[3].kind, "left.by.writer");
    assert_eq!(entries[4], mine, "answered what is stored");

    // A writer whose entry the database chains: it never goes before what
    // is staged (a writer whose chaining failed and that wrote again finds its entries in order).
    leave_staged(&db, "left.by.appender", 5).await;
    let appended = store
        .append(log, NewAuditEntry::new("appended", json!({ "i": 6 })))
        .await
        .unwrap();
    assert_eq!(appended.seq, 6, "after the leftover");

    // An export: reads the log as stored, after chaining what is staged.
    leave_staged(&db, "left.by.export", 7).await;
    let raw = store.raw_log(log).await.unwrap();
    assert_eq!(raw.lines.len(), 8, "the export holds the staged entry");
    assert!(raw.lines[7].contains("left.by.export"), "{}", raw.lines[7]);
    assert_eq!(staged_rows(&db).await, 0);

    // A seal: chains what is staged and seals over it.
    leave_staged(&db, "left.by.seal", 7).await;
    leave_staged(&db, "left.by.seal", 8).await;
    let seal = store.seal(log).await.unwrap();
    assert_eq!(seal.entries, 10);
    assert_eq!(staged_rows(&db).await, 0);
    let (report, entries) = store.verified_entries(log).await.unwrap();
    assert!(report.is_intact(), "{report:?}");
    let is: Vec<u64> = entries
        .iter()
        .map(|e| e.data["i"].as_u64().unwrap())
        .collect();
    assert_eq!(is, [0, 1, 2, 3, 4, 5, 6, 7, 7, 8]);
    // After the seal nothing more can be staged.
    let refused = other
        .append(log, NewAuditEntry::new("late", json!({})))
        .await;
    assert!(
        matches!(refused, Err(StoreError::Immutable(_))),
        "{refused:?}"
    );
    println!(
        "leftovers chained by a reader 1, a staging writer 1, an appender 1, an export 1, \
         a seal 2: 10 entries in order, chain intact"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_row_that_is_not_an_entry_is_named_and_changes_nothing() {
    let url = database().await;
    let store = store_on(&url).await;
    let db = client(&url).await;
    let log = AuditLogId::Plan {
        plan_id: PlanId::new(),
    };
    store
        .append(log, NewAuditEntry::new("written", json!({})))
        .await
        .unwrap();
    let key: String = db
        .query_one("SELECT log_key FROM audit_logs", &[])
        .await
        .unwrap()
        .get(0);
    db.execute(
        "INSERT INTO audit_staged (log_key, entry) VALUES ($1, 'not json')",
        &[&key],
    )
    .await
    .unwrap();
    let err = store.entries(log).await.unwrap_err().to_string();
    assert!(err.contains("audit_staged"), "{err}");
    assert!(err.contains("not a staged entry"), "{err}");
    assert_eq!(staged_rows(&db).await, 1, "the bad row is left for a human");
    let lines: i64 = db
        .query_one("SELECT count(*) FROM audit_entries", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(lines, 1, "nothing chained after a row that is not an entry");
    println!("{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staging_and_database_chaining_stores_share_one_chain_and_answer_what_is_stored() {
    let url = database().await;
    let chaining = store_on(&url).await;
    let staging = store_on(&url).await;
    staging.set_stage_first(true);
    let log = AuditLogId::Plan {
        plan_id: PlanId::new(),
    };
    chaining
        .append(log, NewAuditEntry::new("first", json!({})))
        .await
        .unwrap();
    let per_writer = 60u64;
    let mut joins = tokio::task::JoinSet::new();
    for w in 0..6u64 {
        let store = if w % 2 == 0 {
            chaining.clone()
        } else {
            staging.clone()
        };
        joins.spawn(async move {
            let mut answered = Vec::new();
            let mut parent = None;
            for i in 0..per_writer {
                let e = store
                    .append(
                        log,
                        NewAuditEntry::new("n", json!({ "w": w, "i": i })).with_parent(parent),
                    )
                    .await
                    .unwrap();
                parent = Some(e.seq);
                answered.push(e);
            }
            answered
        });
    }
    let answered: Vec<_> = joins.join_all().await.into_iter().flatten().collect();
    let (report, stored) = chaining.verified_entries(log).await.unwrap();
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(stored.len(), 1 + 6 * 60);
    let by_seq: HashMap<u64, _> = stored.iter().map(|e| (e.seq, e)).collect();
    let differ = answered
        .iter()
        .filter(|a| by_seq.get(&a.seq) != Some(a))
        .count();
    assert_eq!(differ, 0, "every answer is the entry stored at its number");
    // Each writer's entries are in its order, each after the one it named as parent.
    let after_parent = stored
        .iter()
        .filter(|e| e.parent.is_some_and(|p| p < e.seq))
        .count();
    assert_eq!(after_parent, 6 * 59);
    println!(
        "{} entries from 3 database-chaining and 3 staging writers: 0 answers differ from the store",
        stored.len()
    );
}

/// The deadlocks PostgreSQL reported in the current database so far.
async fn deadlocks(db: &tokio_postgres::Client) -> i64 {
    db.query_one(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stagings_that_deadlock_over_three_tasks_are_tried_again() {
    use orca_core::{Execution, ExecutionId, PendingExecution};
    use orca_store::{ExecutionStore, PlanStore, Revision, TaskTransition, WriteOrder};

    use crate::common::{approved, holder, next_task, now};

    // Two processes' stores staging every write, each writing the SAME three tasks' next
    // transitions as one batch, in opposite orders: each locks a task's row the other needs
    // next (PostgreSQL breaks it by failing one transaction, often at its middle call). The one
    // it failed wrote nothing and stages again (then refused: the other wrote first) — it is not
    // an error. Found by the runner benchmark: a staging failed by a deadlock answered "current
    // transaction is aborted" (its next call's answer) to its claims, and its worker stopped.
    // A claim meeting a row another claim holds does not wait (`busy`): then both batches may
    // be refused, never both written.
    let url = database().await;
    let db = client(&url).await;
    let (a, b) = (store_on(&url).await, store_on(&url).await);
    a.set_stage_first(true);
    b.set_stage_first(true);
    let plan = approved("deadlocks", 3);
    a.create_plan(&plan.clone().into()).await.unwrap();
    let (pending, tasks) = PendingExecution::new(ExecutionId::new(), &plan, now());
    let exec: Execution = pending.into();
    a.create_execution(&exec, &tasks).await.unwrap();
    let id = exec.id();
    let h = holder("deadlocks");
    let before = deadlocks(&db).await;
    let (mut rounds, mut written, mut refused, mut failed) = (0, 0, 0, Vec::new());
    // Until PostgreSQL has broken a few deadlocks (most rounds do not meet one).
    while rounds < 1500 && (rounds < 20 || deadlocks(&db).await - before < 12) {
        rounds += 1;
        let snap = a.execution(id).await.unwrap();
        let now_tasks: Vec<_> = snap.tasks.iter().map(|t| t.value.clone()).collect();
        let batch = |order: [usize; 3]| -> Vec<TaskTransition> {
            order
                .iter()
                .map(|&k| TaskTransition {
                    plan_id: plan.id(),
                    execution_id: id,
                    task: next_task(&plan, &now_tasks, k, &h),
                    expected: snap.tasks[k].revision,
                    entry: NewAuditEntry::new("test.transition", json!({ "k": k })),
                    order: WriteOrder::StateFirst,
                })
                .collect()
        };
        let (x, y) = tokio::join!(
            a.update_tasks_with_audit(&a, batch([0, 1, 2])),
            b.update_tasks_with_audit(&b, batch([2, 1, 0])),
        );
        assert!(
            !(x.is_ok() && y.is_ok()),
            "round {rounds}: both batches written"
        );
        for got in [x, y] {
            match got {
                Ok(_) => written += 1,
                Err(e) if e.error.is_conflict() => refused += 1,
                Err(e) => failed.push(e.to_string()),
            }
        }
        assert!(failed.is_empty(), "after {rounds} rounds: {failed:?}");
    }
    let broken = deadlocks(&db).await - before;
    let log = AuditLogId::Execution {
        plan_id: plan.id(),
        execution_id: id,
    };
    let (report, entries) = a.verified_entries(log).await.unwrap();
    assert!(report.is_intact(), "{report:?}");
    let snap = a.execution(id).await.unwrap();
    let revisions: Vec<u64> = snap.tasks.iter().map(|t| t.revision.0).collect();
    println!(
        "{rounds} rounds: {broken} deadlocks broken by the server, {written} batches written, \
         {refused} refused, 0 failed; {} entries, revisions {revisions:?}",
        entries.len()
    );
    assert!(
        written > rounds / 2,
        "{written} of {rounds} rounds wrote a batch"
    );
    assert_eq!(entries.len(), 3 * written);
    assert_eq!(revisions, [Revision::FIRST.0 + written as u64; 3]);
    assert!(
        broken > 0,
        "no deadlock met in {rounds} rounds: the test proved nothing"
    );
}
