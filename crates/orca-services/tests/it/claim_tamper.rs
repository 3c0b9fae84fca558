//! A task row edited in the database behind orca's back while workers claim an execution's
//! tasks (from outside): its result changed, its revision not moved. The claiming
//! drive does not look at the log; the leader that ends the execution reads every task again,
//! compares each with the log, and refuses, naming the task. Without the edit the same flow
//! completes (so the refusal is the edit's).

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;

use orca_services::{ClaimOutcome, NoHuman, Quiet, ServiceError};
use tokio_util::sync::CancellationToken;

use crate::support::{Act, ScriptedAgents, approved_plan, config, id, orca, postgres_store, step};

/// `(status, revision, doc)` of step `name`'s task row.
async fn row(db: &tokio_postgres::Client, name: &str) -> (String, i64, String) {
    let r = db
        .query_one(
            "SELECT status, revision, doc FROM tasks WHERE step_id = $1",
            &[&name],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_edited_in_the_database_during_a_claiming_drive_is_refused_by_the_leader() {
    let mut refused = 0;
    for edit in [false, true] {
        let (url, store) = postgres_store().await;
        let agents = ScriptedAgents::new();
        // `b` runs long enough for the edit of `a` to land while the drive goes on.
        agents.script("b", [Act::Slow(Duration::from_millis(600))]);
        let o = orca(Arc::new(store), agents, Arc::new(NoHuman));
        let plan = approved_plan(
            &o,
            vec![
                step("a", "coder"),
                step("b", "coder").with_depends_on([id("a")]),
            ],
        )
        .await;
        let (_, exec) = o.executions().create(plan).await.unwrap();
        let runner = Arc::new(o.runner(config(), Arc::new(Quiet)));
        runner.begin_for_claims(exec).await.unwrap();

        let (db, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let drive = {
            let runner = Arc::clone(&runner);
            tokio::spawn(async move {
                let wake = Arc::new(tokio::sync::Notify::new());
                runner
                    .run_claims(exec, &CancellationToken::new(), wake)
                    .await
            })
        };
        // Behind orca's back: once `a` completed and `b` runs, `a`'s result is rewritten in
        // place, its revision left as it was.
        let mut waited = 0;
        while row(&db, "b").await.0 != "running" {
            waited += 1;
            assert!(waited < 500, "b never started");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (status, revision, doc) = row(&db, "a").await;
        assert_eq!(status, "completed");
        if edit {
            let forged = doc.replace("a: done", "a: done, and all tests pass");
            assert_ne!(forged, doc, "the edit changes the stored result: {doc}");
            let n = db
                .execute("UPDATE tasks SET doc = $1 WHERE step_id = 'a'", &[&forged])
                .await
                .unwrap();
            assert_eq!(n, 1);
            assert_eq!(row(&db, "a").await.1, revision, "the revision did not move");
        }
        assert_eq!(drive.await.unwrap().unwrap(), ClaimOutcome::ForLeader);

        let led = runner.run(exec, CancellationToken::new()).await;
        if edit {
            match led {
                Err(ServiceError::Tampered(problem)) => {
                    assert!(problem.contains("refused to run"), "{problem}");
                    assert!(problem.contains("task `a`"), "names the task: {problem}");
                    assert!(problem.contains("result"), "says what: {problem}");
                    refused += 1;
                }
                other => panic!("an edited result was not refused: {other:?}"),
            }
            let stage = o
                .executions()
                .get(exec)
                .await
                .unwrap()
                .execution
                .value
                .stage();
            assert_ne!(stage, orca_core::ExecutionStage::Completed);
        } else {
            let outcome = led.unwrap();
            assert_eq!(
                o.executions()
                    .get(exec)
                    .await
                    .unwrap()
                    .execution
                    .value
                    .stage(),
                orca_core::ExecutionStage::Completed,
                "{outcome:?}"
            );
        }
    }
    eprintln!("edited results refused by the leader: {refused} of 1");
    assert_eq!(refused, 1);
}
