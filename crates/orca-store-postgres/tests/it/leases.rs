//! Task leases (ADR 0026) as a takeover reads them: an expired lease is listed with the task's
//! revision (a takeover abandons only that attempt), and the holder's heartbeat does not bring
//! it back to life — once expired, the attempt is another worker's to take over, and its
//! holder has stopped it (the fence) or is gone.

use orca_store::testkit::fixtures::{holder, next_task, running_execution};
use orca_store::{ExecutionStore, ExpiredTask, Revision};

use crate::db::{database, store_on};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_listed_with_its_revision_and_never_renewed() {
    let url = database().await;
    let store = store_on(&url).await;
    let (db, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let (plan, tasks, running, _) = running_execution(&store, "leases", 2).await;
    let id = running.info.id;
    let h = holder("claimer");
    for i in 0..2 {
        let running = next_task(&plan, &tasks, i, &h);
        store
            .update_task(id, &running, Revision::FIRST)
            .await
            .unwrap();
    }
    assert!(store.expired_tasks(id).await.unwrap().is_empty());

    // The first task's lease runs out (its holder stopped renewing).
    db.execute(
        "UPDATE task_leases SET expires_at = now() - interval '1 second'
          WHERE execution_id = $1 AND step_id = $2",
        &[&id.to_string(), &tasks[0].step_id().to_string()],
    )
    .await
    .unwrap();
    let expired = vec![ExpiredTask {
        step: tasks[0].step_id().clone(),
        revision: Revision(2),
    }];
    assert_eq!(store.expired_tasks(id).await.unwrap(), expired);

    // The holder's heartbeat renews its live lease, not the expired one.
    store.renew_task_leases(&h).await.unwrap();
    assert_eq!(
        store.expired_tasks(id).await.unwrap(),
        expired,
        "a heartbeat must not revive an expired lease"
    );
    let live: bool = db
        .query_one(
            "SELECT expires_at > now() FROM task_leases WHERE execution_id = $1 AND step_id = $2",
            &[&id.to_string(), &tasks[1].step_id().to_string()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(live, "the live lease is renewed");
}
