//! The services' `Worker`, the one implementation of the claim protocol behind `orca worker`
//! and the runner benchmark: claiming whole executions on the memory store, and two workers
//! claiming the tasks of one execution on PostgreSQL, each step run exactly once.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use orca_core::{ExecutionId, ExecutionStage};
use orca_services::{
    ClaimMode, DriveOutcome, NoHuman, Notifications, Orca, Quiet, RunOutcome, Worker, WorkerConfig,
    WorkerEvent, WorkerTally,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::support::{ScriptedAgents, approved_plan, config, orca, postgres_store, step};

/// No notifications: the workers poll.
struct Polling;

#[async_trait]
impl Notifications for Polling {
    async fn listen(&self) -> Option<mpsc::Receiver<String>> {
        None
    }
}

/// A worker over `o` claiming `claim`, that stops once nothing is left to drive.
fn worker(o: &Orca, claim: ClaimMode) -> Worker {
    let mut settings = WorkerConfig::new(claim);
    settings.poll = Duration::from_millis(50);
    settings.until_idle = true;
    let services = o.clone();
    Worker::new(o, settings, move || {
        services.runner(config(), Arc::new(Quiet))
    })
}

/// Runs `worker` until idle; its tally and what it reported (`None` for `Started`).
async fn run(worker: &Worker) -> (WorkerTally, Vec<Option<(ExecutionId, DriveOutcome)>>) {
    let seen = Mutex::new(Vec::new());
    let tally = worker
        .run(&Polling, &CancellationToken::new(), |event| {
            let what = match event {
                WorkerEvent::Started => None,
                WorkerEvent::Drove { execution, outcome } => Some((*execution, (*outcome).clone())),
                _ => return,
            };
            seen.lock().unwrap().push(what);
        })
        .await;
    (tally, seen.into_inner().unwrap())
}

#[tokio::test]
async fn a_worker_claiming_executions_leads_each_ready_one_until_idle() {
    let agents = ScriptedAgents::new();
    let o = orca(
        Arc::new(orca_store::MemoryStore::new()),
        agents.clone(),
        Arc::new(NoHuman),
    );
    let mut execs = Vec::new();
    for _ in 0..2 {
        let plan = approved_plan(&o, vec![step("a", "coder"), step("b", "coder")]).await;
        execs.push(o.executions().create(plan).await.unwrap().1);
    }

    let (tally, seen) = run(&worker(&o, ClaimMode::Execution)).await;

    assert_eq!(
        tally,
        WorkerTally {
            driven: 2,
            store_errors: 0
        }
    );
    assert_eq!(seen.first(), Some(&None), "started first: {seen:?}");
    let mut drove: Vec<ExecutionId> = seen.iter().flatten().map(|(id, _)| *id).collect();
    drove.sort();
    execs.sort();
    assert_eq!(drove, execs);
    for (_, outcome) in seen.iter().flatten() {
        let DriveOutcome::Led(report) = outcome else {
            unreachable!("{outcome:?}");
        };
        assert_eq!(report.outcome, RunOutcome::Completed);
    }
    assert_eq!(agents.requests.lock().unwrap().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_claiming_tasks_share_one_execution_and_run_each_step_once() {
    let (_, store) = postgres_store().await;
    let agents = ScriptedAgents::new();
    let o = orca(Arc::new(store), agents.clone(), Arc::new(NoHuman));
    let names: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
    let plan = approved_plan(&o, names.iter().map(|n| step(n, "coder")).collect()).await;
    let (_, exec) = o.executions().create(plan).await.unwrap();

    let (first, second) = (worker(&o, ClaimMode::Task), worker(&o, ClaimMode::Task));
    let ((one, _), (two, _)) = tokio::join!(run(&first), run(&second));

    assert_eq!(one.store_errors + two.store_errors, 0);
    let stage = o
        .executions()
        .get(exec)
        .await
        .unwrap()
        .execution
        .value
        .stage();
    assert_eq!(stage, ExecutionStage::Completed);
    let mut ran: Vec<String> = agents
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.step.id.to_string())
        .collect();
    ran.sort();
    assert_eq!(ran, names, "each step exactly once");
}
