//! A worker's notifications, against a real throwaway server: a store listening to others
//! (`listen_to_others`, as `orca worker` does) is not woken by the task writes of its own
//! connections — pooled ones, several at once — and is by another store's (another process's);
//! a plain `listen` on the same store hears both (the control: the notifications were sent).

use std::time::Duration;

use orca_store::{ExecutionStore, Revision};
use tokio::sync::mpsc::Receiver;

use crate::common::{holder, next_task};
use crate::db::{database, store_on};
use crate::group::{execution, transition};

/// What arrives on `rx` within `wait` of the last one.
async fn drain(rx: &mut Receiver<String>, wait: Duration) -> Vec<String> {
    let mut got = Vec::new();
    while let Ok(Some(p)) = tokio::time::timeout(wait, rx.recv()).await {
        got.push(p);
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_is_not_woken_by_its_own_task_writes() {
    let url = database().await;
    let (own, other) = (store_on(&url).await, store_on(&url).await);
    // Three executions written at once: three group-commit queues, so several of this
    // store's pooled connections (each its own server process) send notifications.
    let mut execs = Vec::new();
    for _ in 0..3 {
        execs.push(execution(&own, 2).await);
    }
    let mut others_only = own
        .listen_to_others(orca_store_postgres::CHANNELS)
        .await
        .unwrap();
    let mut all = own.listen(orca_store_postgres::CHANNELS).await.unwrap();
    let h = holder("notify");
    let mut joins = tokio::task::JoinSet::new();
    for (plan, id, tasks) in execs.clone() {
        for k in 0..2 {
            let (own, plan, task) = (own.clone(), plan.clone(), next_task(&plan, &tasks, k, &h));
            joins.spawn(async move {
                own.update_task_with_audit(&own, transition(&plan, id, task, Revision::FIRST))
                    .await
            });
        }
    }
    while let Some(r) = joins.join_next().await {
        r.unwrap().unwrap();
    }
    let heard_all = drain(&mut all, Duration::from_millis(500)).await;
    let heard_others = drain(&mut others_only, Duration::from_millis(200)).await;
    // Another store's write: heard by both.
    let (plan, id, tasks) = execs[0].clone();
    let mut tasks = tasks;
    tasks[0] = own.execution(id).await.unwrap().tasks[0].value.clone();
    let task = next_task(&plan, &tasks, 0, &h);
    other
        .update_task_with_audit(&other, transition(&plan, id, task, Revision(2)))
        .await
        .unwrap();
    let then_others = drain(&mut others_only, Duration::from_millis(500)).await;
    let then_all = drain(&mut all, Duration::from_millis(200)).await;
    println!(
        "own 6 writes in 3 executions: {} heard by listen, {} by listen_to_others; another store's write: {} \
         and {}",
        heard_all.len(),
        heard_others.len(),
        then_all.len(),
        then_others.len()
    );
    // The control: each execution's writes were notified (once a transaction or more).
    for (_, id, _) in &execs {
        assert!(heard_all.contains(&id.to_string()), "{heard_all:?}");
    }
    assert!(heard_others.is_empty(), "{heard_others:?}");
    assert_eq!(then_others, [id.to_string()]);
    assert_eq!(then_all, [id.to_string()]);
}
