//! (c) of the runner benchmark: the runner's own CPU per task — an execution of instant tasks on
//! the file store, its creation and its run measured apart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use orca_core::Budget;
use orca_services::{NoHuman, Orca, Quiet, RunConfig, RunOutcome};
use orca_store::{FileStore, Store};
use tokio_util::sync::CancellationToken;

use super::{BenchAgent, BoxError, content, cpu_time, holder, lanes};

/// The CPU a file-store execution of `tasks` instant tasks costs this process.
pub(crate) struct Overhead {
    tasks: usize,
    /// Making the plan, approving it and creating the execution (its task records).
    create: Duration,
    /// Running it (the lease, every transition and audit entry, the seal).
    run: Duration,
    pub(crate) wall: Duration,
}

impl Overhead {
    pub(crate) fn per_task_us(&self) -> f64 {
        (self.create + self.run).as_secs_f64() * 1e6 / self.tasks as f64
    }

    pub(crate) fn split(&self) -> String {
        let us = |d: Duration| d.as_secs_f64() * 1e6 / self.tasks as f64;
        format!(
            "create {:.1} us + run {:.1} us a task",
            us(self.create),
            us(self.run)
        )
    }
}

/// The runner's own cost (c): CPU of creating and running `tasks` instant tasks in 10 lanes on
/// the file store, 8 at once. Removing the benchmark's temporary directory afterwards is not
/// orca's work and is not counted.
pub(crate) async fn overhead(tasks: usize) -> Result<Overhead, BoxError> {
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path())?);
    let orca = Orca::new(
        store,
        BenchAgent::new(Duration::ZERO),
        Arc::new(NoHuman),
        None,
        Budget::UNLIMITED,
    );
    let before = cpu_time();
    let proposal = orca
        .planning()
        .create_proposal(content(lanes(tasks)?), None)
        .await?;
    orca.planning()
        .approve(proposal.id(), "bench", None)
        .await?;
    let (_, exec) = orca.executions().create(proposal.id()).await?;
    let created = cpu_time();
    let mut config = RunConfig::new(holder());
    config.concurrency = 8;
    let runner = orca.runner(config, Arc::new(Quiet));
    let start = Instant::now();
    let report = runner.run(exec, CancellationToken::new()).await?;
    let wall = start.elapsed();
    let ran = cpu_time();
    if report.outcome != RunOutcome::Completed {
        return Err(format!("benchmark run ended {:?}", report.outcome).into());
    }
    drop(dir);
    Ok(Overhead {
        tasks,
        create: created.saturating_sub(before),
        run: ran.saturating_sub(created),
        wall,
    })
}
