//! Lock waits are visible: a ready step that waits for a resource lock held by a
//! running step — of its own execution or of another — is reported once, naming the lock and
//! its holder.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use orca_services::{LockHolder, NoHuman, Observer, RunEvent, RunOutcome};
use support::*;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct Collect(Mutex<Vec<RunEvent>>);

impl Observer for Collect {
    fn event(&self, event: &RunEvent) {
        self.0.lock().unwrap().push(event.clone());
    }
}

impl Collect {
    fn waits(&self) -> Vec<(String, String, Option<LockHolder>)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                RunEvent::WaitingForLock {
                    step,
                    resource,
                    holder,
                } => Some((step.to_string(), resource.clone(), holder.clone())),
                _ => None,
            })
            .collect()
    }
}

#[tokio::test]
async fn a_step_waiting_for_a_lock_of_its_own_execution_names_the_holder_once() {
    let store: Arc<dyn orca_store::Store> = Arc::new(orca_store::MemoryStore::new());
    let agents = ScriptedAgents::new();
    agents.script("build", [Act::Slow(Duration::from_millis(300))]);
    agents.script("deploy", [Act::Succeed("ok")]);
    let o = orca(store, agents, Arc::new(NoHuman));
    let locked = |n: &str| {
        step(n, "coder")
            .with_depends_on([])
            .with_locks(["site-out"])
    };
    let p = o
        .planning()
        .create_proposal(content(vec![locked("build"), locked("deploy")]), None)
        .await
        .unwrap();
    o.planning().approve(p.id(), "t", None).await.unwrap();
    let (_, exec) = o.executions().create(p.id()).await.unwrap();
    let seen = Arc::new(Collect::default());
    let report = o
        .runner(config(), seen.clone())
        .run(exec, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    let waits = seen.waits();
    eprintln!("lock-wait events: {} ({waits:?})", waits.len());
    assert_eq!(waits.len(), 1, "one event per wait, not one per poll");
    let (step, resource, holder) = &waits[0];
    assert_eq!((step.as_str(), resource.as_str()), ("deploy", "site-out"));
    let holder = holder.as_ref().expect("the holder is named");
    assert_eq!((holder.execution, holder.step.as_str()), (exec, "build"));
}

#[tokio::test]
async fn a_step_waiting_for_a_lock_held_by_another_execution_names_it() {
    let store: Arc<dyn orca_store::Store> = Arc::new(orca_store::MemoryStore::new());
    let agents = ScriptedAgents::new();
    agents.script(
        "build",
        [Act::Slow(Duration::from_millis(400)), Act::Succeed("ok")],
    );
    let o = orca(store, agents.clone(), Arc::new(NoHuman));
    let p = o
        .planning()
        .create_proposal(
            content(vec![step("build", "coder").with_locks(["site-out"])]),
            None,
        )
        .await
        .unwrap();
    o.planning().approve(p.id(), "t", None).await.unwrap();
    let (_, first) = o.executions().create(p.id()).await.unwrap();
    let (_, second) = o.executions().create(p.id()).await.unwrap();
    let runner = o.runner(config(), Arc::new(orca_services::Quiet));
    let handle = tokio::spawn(async move { runner.run(first, CancellationToken::new()).await });
    for _ in 0..500 {
        if agents.requests_for("build").len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seen = Arc::new(Collect::default());
    let report = o
        .runner(config(), seen.clone())
        .run(second, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(
        handle.await.unwrap().unwrap().outcome,
        RunOutcome::Completed
    );
    let waits = seen.waits();
    eprintln!(
        "lock-wait events across executions: {} ({waits:?})",
        waits.len()
    );
    assert_eq!(waits.len(), 1);
    let holder = waits[0].2.as_ref().expect("the holder is named");
    assert_eq!((holder.execution, holder.step.as_str()), (first, "build"));
}
