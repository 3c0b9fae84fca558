//! (f) of the runner benchmark: workers on one wide DAG on postgres, each with its own store
//! connections, holder and runner, as `orca worker` runs (ADR 0022, 0026).

use std::sync::Arc;
use std::time::{Duration, Instant};

use orca_services::{
    ClaimMode, DriveOutcome, NoHuman, Observer, Orca, Quiet, RunConfig, RunEvent, Worker,
    WorkerConfig,
};
use tokio_util::sync::CancellationToken;

use super::{BenchAgent, BoxError, Budget, Sizes, content, holder, layered};

/// What the workers of (f) claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// One leader drives the execution (`orca worker --claim execution`).
    Execution,
    /// Tasks claimed one by one (`orca worker --claim task`).
    Task,
}

impl Mode {
    /// What an `orca worker` of this mode claims.
    const fn claim(self) -> ClaimMode {
        match self {
            Self::Execution => ClaimMode::Execution,
            Self::Task => ClaimMode::Task,
        }
    }

    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Execution => "executions",
            Self::Task => "tasks",
        }
    }

    pub(crate) const fn figure(self, workers: usize) -> &'static str {
        match (self, workers) {
            (Self::Execution, 1) => "pg_claim_execution_1w_per_s",
            (Self::Execution, 4) => "pg_claim_execution_4w_per_s",
            (Self::Execution, _) => "pg_claim_execution_8w_per_s",
            (Self::Task, 1) => "pg_claim_task_1w_per_s",
            (Self::Task, 4) => "pg_claim_task_4w_per_s",
            (Self::Task, _) => "pg_claim_task_8w_per_s",
        }
    }
}

/// Runs of each worker count of (f) in one repetition (the figure is their median).
pub(crate) const CLAIM_RUNS: usize = 3;

/// Tasks in flight at once per worker (`orca worker --tasks`).
pub(crate) const WORKER_TASKS: usize = 4;

/// Tasks of the warm-up execution each worker of (f) claims from before the timed one.
pub(crate) const WARM_UP_TASKS: usize = 64;

/// The executions of one run of (f): the warm-up one, and the timed one.
#[derive(Clone, Copy)]
struct Executions {
    warm_up: orca_core::ExecutionId,
    timed: orca_core::ExecutionId,
}

/// One worker of (f): its own store connections, holder and runner, as `orca worker` does.
/// It first claims tasks of a small execution with the others, as a worker that has been up
/// has (its connections to the database opened, their statements prepared, the server's
/// per-connection caches and compiled functions filled: a server process's first minutes,
/// paid once per worker, not once per execution; 16 fresh connections of four workers warming
/// up during the timed run weighed on two cores what 4 of one worker did not). Then
/// `ready` lets every worker start the timed execution at once. Returns the worker's services,
/// still connected: an `orca worker` stays up for the next execution, so the workers are let
/// go after the run is timed (four closing their connections while the leader ends the run
/// used to be timed with it: 16 server backends exiting at once).
async fn bench_worker(
    url: &str,
    mode: Mode,
    execs: Executions,
    delay: Duration,
    ready: Arc<tokio::sync::Barrier>,
    span: Arc<Span>,
) -> Result<Orca, BoxError> {
    let pg = orca_store_postgres::PgStore::connect(
        url,
        orca_store::Authority::permissive(),
        orca_core::redact::Redactor::new(),
    )
    .await?;
    let mut rx = pg.listen_to_others(orca_store_postgres::CHANNELS).await?;
    let wake = Arc::new(tokio::sync::Notify::new());
    let fed = Arc::clone(&wake);
    let feeder = tokio::spawn(async move {
        while rx.recv().await.is_some() {
            fed.notify_one();
        }
    });
    let orca = Orca::new(
        Arc::new(pg),
        BenchAgent::new(delay),
        Arc::new(NoHuman),
        None,
        Budget::UNLIMITED,
    );
    // Each runner with a holder of its own, as each drive of `orca worker` has.
    let config = || {
        let mut config = RunConfig::new(holder());
        config.concurrency = WORKER_TASKS;
        config
    };
    let warming = {
        let orca = orca.clone();
        move || orca.runner(config(), Arc::new(Quiet))
    };
    let warm_up = Worker::new(&orca, WorkerConfig::new(ClaimMode::Task), warming);
    let warmed = claim_through(&warm_up, execs.warm_up, &wake).await;
    // At the barrier also when the warm-up failed: the others (and the timer) do not wait for
    // a worker that is gone; its error ends the run after.
    ready.wait().await;
    warmed?;
    let timed = {
        let orca = orca.clone();
        move || orca.runner(config(), span.clone())
    };
    let worker = Worker::new(&orca, WorkerConfig::new(mode.claim()), timed);
    claim_through(&worker, execs.timed, &wake).await?;
    feeder.abort();
    Ok(orca)
}

/// Drives `exec` as `orca worker` does with one execution it found already begun: claiming
/// its tasks until none is left, then leading its end if no other worker does; or, claiming
/// executions, leading it if no other worker does.
async fn claim_through(
    worker: &Worker,
    exec: orca_core::ExecutionId,
    wake: &Arc<tokio::sync::Notify>,
) -> Result<(), BoxError> {
    let cancel = CancellationToken::new();
    // The opening's lease, taken through another connection, may still be going.
    for _ in 0..200 {
        match worker.drive(exec, false, &cancel, Arc::clone(wake)).await {
            Ok(DriveOutcome::LedElsewhere) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // Another worker leads it: this one has nothing left to do.
            Ok(_)
            | Err(orca_services::ServiceError::Store(orca_store::StoreError::LeaseHeld {
                ..
            })) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// When the workers' first task started and their last one completed: the run between its
/// fixed costs (each worker's open of the plan, the leader's end and seal).
#[derive(Default)]
struct Span(std::sync::Mutex<(Option<Instant>, Option<Instant>)>);

impl Observer for Span {
    fn event(&self, event: &RunEvent) {
        let now = Instant::now();
        let mut span = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match event {
            RunEvent::TaskStarted { .. } => {
                span.0.get_or_insert(now);
            }
            RunEvent::TaskCompleted { .. } => span.1 = Some(now),
            _ => {}
        }
    }
}

/// How long a run of (f) took: all of it, and from its first start to its last completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Timed {
    pub(crate) wall: Duration,
    pub(crate) steady: Duration,
    /// The database connections the workers held at the end of the run (the bare queue of
    /// (g) gets as many).
    pub(crate) connections: usize,
}

/// What the workers of a run claim: `tasks` in `layers` layers (every task depending on every
/// task of the layer before), each agent call taking `delay`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    pub(crate) tasks: usize,
    pub(crate) layers: usize,
    pub(crate) delay: Duration,
}

impl Load {
    /// (f)'s load: the 4-layer DAG of `sizes.wide` tasks.
    pub(crate) const fn wide(sizes: &Sizes) -> Self {
        Self {
            tasks: sizes.wide,
            layers: 4,
            delay: sizes.wide_delay,
        }
    }
}

/// `workers` workers on one DAG of `load`; the time until it ended.
pub(crate) async fn workers_run(
    url: &str,
    mode: Mode,
    workers: usize,
    load: Load,
) -> Result<Timed, BoxError> {
    let store = Arc::new(
        orca_store_postgres::PgStore::connect(
            url,
            orca_store::Authority::permissive(),
            orca_core::redact::Redactor::new(),
        )
        .await?,
    );
    let orca = Orca::new(
        store.clone(),
        BenchAgent::new(Duration::ZERO),
        Arc::new(NoHuman),
        None,
        Budget::UNLIMITED,
    );
    let mut opened = Vec::with_capacity(2);
    let warm_up = WARM_UP_TASKS.min(load.tasks);
    for (layers, tasks, claimed) in [
        (4, warm_up, true),
        (load.layers, load.tasks, mode == Mode::Task),
    ] {
        let proposal = orca
            .planning()
            .create_proposal(content(layered(layers, tasks / layers)?), None)
            .await?;
        orca.planning()
            .approve(proposal.id(), "bench", None)
            .await?;
        let (_, exec) = orca.executions().create(proposal.id()).await?;
        if claimed {
            // Opened once (as the first claiming worker does), outside the timing.
            orca.runner(RunConfig::new(holder()), Arc::new(Quiet))
                .begin_for_claims(exec)
                .await?;
        }
        opened.push(exec);
    }
    let execs = Executions {
        warm_up: opened[0],
        timed: opened[1],
    };
    // The setup's own connections, not counted as the workers'.
    let before = connections(url).await?;
    let ready = Arc::new(tokio::sync::Barrier::new(workers + 1));
    let span = Arc::new(Span::default());
    let mut joins = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let url = url.to_owned();
        let delay = load.delay;
        let (ready, span) = (Arc::clone(&ready), Arc::clone(&span));
        joins.spawn(async move { bench_worker(&url, mode, execs, delay, ready, span).await });
    }
    ready.wait().await;
    let start = Instant::now();
    let mut workers_up = Vec::with_capacity(workers);
    for r in joins.join_all().await {
        workers_up.push(r?);
    }
    let wall = start.elapsed();
    let connections = connections(url).await?;
    drop(workers_up);
    let stage = orca
        .executions()
        .get(execs.timed)
        .await?
        .execution
        .value
        .stage();
    if stage != orca_core::ExecutionStage::Completed {
        return Err(format!(
            "{} workers claiming {}: ended {stage:?}",
            workers,
            mode.name()
        )
        .into());
    }
    let steady = match *span
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
    {
        (Some(first), Some(last)) => last.saturating_duration_since(first),
        _ => wall,
    };
    Ok(Timed {
        wall,
        steady,
        connections: connections.saturating_sub(before),
    })
}

/// The client connections to `url`'s database now (this query's own included: a difference of
/// two counts cancels it).
async fn connections(url: &str) -> Result<usize, BoxError> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let driver = tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND backend_type = 'client backend'",
            &[],
        )
        .await?;
    drop(client);
    let _ = driver.await;
    Ok(usize::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}
