//! A claiming worker's catch-up from a cursor (`changed_tasks_since`), against a real
//! throwaway server: a look returns what changed, the next one only what changed after it —
//! also a write whose transaction began before the first look and committed after it (the
//! case an ordinary sequence gets wrong); and a look from a cursor visits only the rows
//! written since, not the execution's every task (`EXPLAIN ANALYZE` counts them).

use orca_core::ExecutionId;
use orca_store::testkit::fixtures::{holder, next_task, running_execution};
use orca_store::{ExecutionStore, Revision, StoreError};
use orca_store_postgres::PgStore;

use crate::db::{database, store_on};

async fn client(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

async fn known(store: &PgStore, id: ExecutionId) -> Result<Vec<Revision>, StoreError> {
    Ok(store
        .execution(id)
        .await?
        .tasks
        .iter()
        .map(|t| t.revision)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_from_a_cursor_finds_every_later_write_and_only_those()
-> Result<(), Box<dyn std::error::Error>> {
    let url = database().await;
    let store = store_on(&url).await;
    let (plan, tasks, running, _) = running_execution(&store, "catch-up", 40).await;
    let id = running.info.id;
    let db = client(&url).await?;

    // The first look: nothing differs from what was read; it returns a cursor.
    let mut mine = known(&store, id).await?;
    let (changed, cursor) = store.changed_tasks_since(id, &mine, None).await?;
    assert!(changed.is_empty());
    let cursor = cursor.ok_or("no cursor")?;

    // A transaction that began before the next look and commits after it: a task's revision
    // bumped by hand, uncommitted while the store looks.
    let slow = client(&url).await?;
    slow.batch_execute("BEGIN").await?;
    let step: String = db
        .query_one(
            "SELECT step_id FROM tasks WHERE execution_id = $1 AND ord = 7",
            &[&id.to_string()],
        )
        .await?
        .get(0);
    slow.execute(
        "UPDATE tasks SET revision = revision + 1 WHERE execution_id = $1 AND step_id = $2",
        &[&id.to_string(), &step],
    )
    .await?;
    // Meanwhile another worker claims a task, committed.
    let claimed = 3;
    let other = store_on(&url).await;
    other
        .update_task(
            id,
            &next_task(&plan, &tasks, claimed, &holder("other")),
            Revision::FIRST,
        )
        .await?;
    let (changed, cursor2) = store.changed_tasks_since(id, &mine, Some(cursor)).await?;
    let seen: Vec<usize> = changed.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        seen,
        [claimed],
        "the committed claim, not the uncommitted write"
    );
    for (i, t) in changed {
        mine[i] = t.revision;
    }
    slow.batch_execute("COMMIT").await?;
    let (changed, cursor3) = store.changed_tasks_since(id, &mine, cursor2).await?;
    let seen: Vec<usize> = changed.iter().map(|(i, _)| *i).collect();
    assert_eq!(seen, [7], "the write that committed after the last look");
    for (i, t) in changed {
        mine[i] = t.revision;
    }
    let (changed, _) = store.changed_tasks_since(id, &mine, cursor3).await?;
    assert!(changed.is_empty(), "nothing new: {changed:?}");

    // From the cursor the database visits the rows written since, not the execution's 40.
    let plan = db
        .query(
            &format!(
                "EXPLAIN (ANALYZE) SELECT ord FROM tasks \
                  WHERE execution_id = '{id}' AND changed_xid >= '{}'::xid8",
                cursor3.map_or(0, |c| c.0)
            ),
            &[],
        )
        .await?;
    let text: String = plan
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n");
    println!("{text}");
    assert!(
        text.contains("tasks_by_change"),
        "the index is used: {text}"
    );
    Ok(())
}

/// A transition through the store moves its row's transaction id: a catch-up from a cursor
/// taken before it returns it, and a look at an execution where nothing changed returns a
/// cursor all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transition_after_a_look_is_found_from_its_cursor()
-> Result<(), Box<dyn std::error::Error>> {
    let url = database().await;
    let store = store_on(&url).await;
    let other = store_on(&url).await;
    let (plan, tasks, running, _) = running_execution(&store, "catch-up", 5).await;
    let id = running.info.id;
    let mine = known(&store, id).await?;
    let (changed, cursor) = store.changed_tasks_since(id, &mine, None).await?;
    assert!(changed.is_empty() && cursor.is_some());
    other
        .update_task(
            id,
            &next_task(&plan, &tasks, 4, &holder("other")),
            Revision::FIRST,
        )
        .await?;
    let (changed, _) = store.changed_tasks_since(id, &mine, cursor).await?;
    let seen: Vec<(usize, Revision)> = changed.iter().map(|(i, t)| (*i, t.revision)).collect();
    assert_eq!(seen, [(4, Revision(2))]);
    Ok(())
}
