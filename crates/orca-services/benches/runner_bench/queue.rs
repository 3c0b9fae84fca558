//! (g) of the runner benchmark: orca's workers against the cheapest correct job queue on the
//! same throwaway server, in the same run — what orca's durability and audit cost per task.
//!
//! The bare queue is one table; a job is claimed by `UPDATE … WHERE id = (SELECT … FOR UPDATE
//! SKIP LOCKED LIMIT 1) RETURNING` and completed by a second `UPDATE`, each its own committed
//! transaction with `synchronous_commit = on`, through as many connections as orca's workers
//! held in their run. Its jobs carry a payload and a result of the size of an orca task's
//! documents. orca's workers claim the tasks of one execution of independent tasks, one by one
//! (`orca worker --claim task`), with an instant agent: both sides do no work but the queue's.

use std::time::{Duration, Instant};

use super::{BoxError, CLAIM_RUNS, Figure, Load, Mode, lorem, workers_run};

/// The worker counts compared.
const WORKER_COUNTS: [usize; 5] = [1, 2, 4, 8, 16];

/// What a run of (g) compares: `tasks` orca tasks (and 4 × as many bare jobs) per run, at
/// every worker count of [`WORKER_COUNTS`] (`--quick`: 1 and 2 workers, one run each: it only
/// proves the comparison still runs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scope {
    pub(crate) tasks: usize,
    pub(crate) quick: bool,
}

impl Scope {
    pub(crate) const fn jobs(self) -> usize {
        self.tasks * 4
    }

    fn counts(self) -> &'static [usize] {
        if self.quick {
            &WORKER_COUNTS[..2]
        } else {
            &WORKER_COUNTS
        }
    }

    const fn runs(self) -> usize {
        if self.quick { 1 } else { CLAIM_RUNS }
    }
}

/// Bytes of a bare job's payload (a step's instructions and context) and result (a completed
/// task's summary, findings and output: ~2.7 KB in the runner benchmark's tasks).
const PAYLOAD_BYTES: usize = 1_000;
const RESULT_BYTES: usize = 2_700;

/// One worker count's figures (medians of the scope's runs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Compared {
    pub(crate) workers: usize,
    pub(crate) connections: usize,
    pub(crate) bare_per_s: f64,
    pub(crate) orca_per_s: f64,
    /// What the database did per orca task and per bare job (`pg_stat_statements`; `None`
    /// when the server does not have it).
    pub(crate) orca_work: Option<Work>,
    pub(crate) bare_work: Option<Work>,
}

/// The database's work per unit (task or job) of one run, from `pg_stat_statements`: the
/// statements executed (`BEGIN`/`COMMIT` not counted), their execution time and the WAL they
/// wrote — everything the run's database did, its set-up included.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Work {
    pub(crate) statements: f64,
    pub(crate) exec_us: f64,
    pub(crate) wal_bytes: f64,
}

/// The database work of the run in `url`'s database, per unit done there: `jobs` (the bare
/// queue's), or — `None` — every task of the database (an orca run's: the timed execution's and
/// the warm-up's, every one claimed and completed).
async fn work(url: &str, jobs: Option<usize>) -> Result<Option<Work>, BoxError> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let driver = tokio::spawn(conn);
    let units = match jobs {
        Some(n) => n as f64,
        None => {
            let n: i64 = client
                .query_one("SELECT count(*) FROM tasks", &[])
                .await?
                .get(0);
            n as f64
        }
    };
    // The view needs the extension in the database it is read from; the library is loaded
    // (or not) by the server's start.
    let row = match client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await
    {
        Err(_) => None,
        Ok(()) => client
            .query_opt(
                "SELECT sum(calls)::float8, sum(total_exec_time)::float8, sum(wal_bytes)::float8
                   FROM pg_stat_statements
                  WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                    AND query NOT IN ('BEGIN', 'COMMIT', 'ROLLBACK', 'START TRANSACTION')
                    AND query NOT LIKE 'CREATE EXTENSION%'",
                &[],
            )
            .await
            .ok()
            .flatten(),
    };
    if row.is_some() && std::env::var_os("ORCA_BENCH_STATEMENTS").is_some() {
        print_statements(&client, units).await?;
    }
    drop(client);
    let _ = driver.await;
    let Some(row) = row else {
        return Ok(None);
    };
    let (calls, ms, wal): (Option<f64>, Option<f64>, Option<f64>) =
        (row.get(0), row.get(1), row.get(2));
    let units = units.max(1.0);
    Ok(calls.map(|calls| Work {
        statements: calls / units,
        exec_us: ms.unwrap_or(0.0) * 1000.0 / units,
        wal_bytes: wal.unwrap_or(0.0) / units,
    }))
}

/// With `ORCA_BENCH_STATEMENTS` set: the run's ten costliest statements, per unit (where a
/// profile of the database starts).
async fn print_statements(client: &tokio_postgres::Client, units: f64) -> Result<(), BoxError> {
    let rows = client
        .query(
            "SELECT calls::float8, total_exec_time::float8, left(regexp_replace(query, '\\s+', ' ', 'g'), 90)
               FROM pg_stat_statements
              WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
              ORDER BY total_exec_time DESC LIMIT 10",
            &[],
        )
        .await?;
    let units = units.max(1.0);
    for row in rows {
        let (calls, ms, query): (f64, f64, String) = (row.get(0), row.get(1), row.get(2));
        super::say(&format!(
            "  {:>6.2} calls {:>8.1} µs  {query}",
            calls / units,
            ms * 1000.0 / units
        ));
    }
    Ok(())
}

/// The median of each field of `works` (`None` if any run had none).
fn median_work(works: Vec<Option<Work>>) -> Option<Work> {
    let works: Vec<Work> = works.into_iter().collect::<Option<_>>()?;
    Some(Work {
        statements: median(works.iter().map(|w| w.statements).collect()),
        exec_us: median(works.iter().map(|w| w.exec_us).collect()),
        wal_bytes: median(works.iter().map(|w| w.wal_bytes).collect()),
    })
}

impl Compared {
    /// orca's cost per task ÷ the bare queue's (jobs/s ÷ tasks/s).
    pub(crate) fn ratio(&self) -> f64 {
        self.bare_per_s / self.orca_per_s.max(f64::MIN_POSITIVE)
    }
}

/// Runs the comparison for every worker count of `scope`.
pub(crate) async fn compare(scope: Scope) -> Result<Vec<Compared>, BoxError> {
    let (tasks, jobs) = (scope.tasks, scope.jobs());
    let server = orca_testkit::postgres::Throwaway::start(true)?;
    let mut out = Vec::new();
    for &workers in scope.counts() {
        let (mut orca, mut bare, mut conns) = (Vec::new(), Vec::new(), Vec::new());
        let (mut orca_work, mut bare_work) = (Vec::new(), Vec::new());
        for _ in 0..scope.runs() {
            let load = Load {
                tasks,
                layers: 1,
                delay: Duration::ZERO,
            };
            let url = server.create_database().await?;
            let timed = workers_run(&url, Mode::Task, workers, load).await?;
            orca.push(tasks as f64 / timed.wall.as_secs_f64());
            orca_work.push(work(&url, None).await?);
            conns.push(timed.connections);
            let connections = timed.connections.max(workers);
            let url = server.create_database().await?;
            let wall = bare_run(&url, connections, jobs).await?;
            bare.push(jobs as f64 / wall.as_secs_f64());
            bare_work.push(work(&url, Some(jobs)).await?);
        }
        out.push(Compared {
            workers,
            connections: median_usize(conns),
            bare_per_s: median(bare),
            orca_per_s: median(orca),
            orca_work: median_work(orca_work),
            bare_work: median_work(bare_work),
        });
    }
    Ok(out)
}

/// The figures of the comparison, for the benchmark's table and JSON.
pub(crate) fn figures(compared: &[Compared], scope: Scope) -> Vec<Figure> {
    let (tasks, jobs, runs) = (scope.tasks, scope.jobs(), scope.runs());
    let mut out = Vec::new();
    for c in compared {
        let (bare, orca, ratio) = names(c.workers);
        let w = c.workers;
        out.push(Figure {
            name: bare,
            value: c.bare_per_s,
            unit: "/s",
            target: None,
            description: format!(
                "bare SKIP LOCKED queue, {jobs} jobs, {} connections (as orca's {w} worker(s)), median of {runs}: jobs/s",
                c.connections
            ),
        });
        out.push(Figure {
            name: orca,
            value: c.orca_per_s,
            unit: "/s",
            target: None,
            description: format!(
                "orca, {tasks} independent tasks, instant agent, {w} worker(s) claiming tasks, median of {runs}: tasks/s"
            ),
        });
        out.push(Figure {
            name: ratio,
            value: c.ratio(),
            unit: "x",
            target: Some(2.0),
            description: format!(
                "{w} worker(s): orca's cost per task ÷ the bare queue's (bare jobs/s ÷ orca tasks/s)"
            ),
        });
    }
    out
}

/// The side-by-side table the benchmark prints.
pub(crate) fn table(compared: &[Compared]) -> String {
    let mut s = String::from("workers  connections  bare jobs/s  orca tasks/s  bare ÷ orca\n");
    for c in compared {
        s.push_str(&format!(
            "{:>7}  {:>11}  {:>11.0}  {:>12.0}  {:>10.2}x\n",
            c.workers,
            c.connections,
            c.bare_per_s,
            c.orca_per_s,
            c.ratio()
        ));
    }
    if compared.iter().any(|c| c.orca_work.is_some()) {
        s.push_str(
            "\nthe database's work per orca task | per bare job (pg_stat_statements, set-up included):\n\
             workers  statements     exec µs         WAL bytes\n",
        );
        for c in compared {
            let (Some(o), Some(b)) = (c.orca_work, c.bare_work) else {
                continue;
            };
            s.push_str(&format!(
                "{:>7}  {:>5.2} | {:<4.2}  {:>5.0} | {:<4.0}  {:>6.0} | {:<6.0}\n",
                c.workers,
                o.statements,
                b.statements,
                o.exec_us,
                b.exec_us,
                o.wal_bytes,
                b.wal_bytes
            ));
        }
    }
    s
}

const fn names(workers: usize) -> (&'static str, &'static str, &'static str) {
    match workers {
        1 => ("pg_bare_1w_per_s", "pg_orca_1w_per_s", "pg_orca_vs_bare_1w"),
        2 => ("pg_bare_2w_per_s", "pg_orca_2w_per_s", "pg_orca_vs_bare_2w"),
        4 => ("pg_bare_4w_per_s", "pg_orca_4w_per_s", "pg_orca_vs_bare_4w"),
        8 => ("pg_bare_8w_per_s", "pg_orca_8w_per_s", "pg_orca_vs_bare_8w"),
        _ => (
            "pg_bare_16w_per_s",
            "pg_orca_16w_per_s",
            "pg_orca_vs_bare_16w",
        ),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn median_usize(mut v: Vec<usize>) -> usize {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// The bare queue: `jobs` jobs drained by `connections` connections; the time it took.
async fn bare_run(url: &str, connections: usize, jobs: usize) -> Result<Duration, BoxError> {
    let (setup, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let driver = tokio::spawn(conn);
    setup
        .batch_execute(
            "CREATE TABLE jobs (
                 id bigserial PRIMARY KEY,
                 state text NOT NULL DEFAULT 'queued',
                 payload text NOT NULL,
                 result text,
                 worker int,
                 claimed_at timestamptz,
                 done_at timestamptz
             );
             CREATE INDEX jobs_queued ON jobs (id) WHERE state = 'queued';",
        )
        .await?;
    setup
        .execute(
            "INSERT INTO jobs (payload) SELECT $1 FROM generate_series(1, $2::int)",
            &[&lorem(PAYLOAD_BYTES / 7, 1), &i32::try_from(jobs)?],
        )
        .await?;
    // Every connection opened and its statements prepared before the clock starts, as orca's
    // workers are warm when their run is timed.
    let mut clients = Vec::with_capacity(connections);
    for _ in 0..connections {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        let driver = tokio::spawn(conn);
        client.batch_execute("SET synchronous_commit = on").await?;
        let claim = client
            .prepare(
                "UPDATE jobs SET state = 'running', worker = $1, claimed_at = now() \
                 WHERE id = (SELECT id FROM jobs WHERE state = 'queued' ORDER BY id \
                             FOR UPDATE SKIP LOCKED LIMIT 1) \
                 RETURNING id, payload",
            )
            .await?;
        let complete = client
            .prepare("UPDATE jobs SET state = 'done', result = $2, done_at = now() WHERE id = $1")
            .await?;
        clients.push((client, driver, claim, complete));
    }
    let result = lorem(RESULT_BYTES / 7, 2);
    let start = Instant::now();
    let mut joins = tokio::task::JoinSet::new();
    for (i, (client, driver, claim, complete)) in clients.into_iter().enumerate() {
        let result = result.clone();
        let worker = i32::try_from(i)?;
        joins.spawn(async move {
            let mut done = 0usize;
            while let Some(row) = client.query_opt(&claim, &[&worker]).await? {
                let id: i64 = row.get(0);
                let payload: &str = row.get(1);
                // The job's "work": read its payload, write a result.
                std::hint::black_box(payload.len());
                client.execute(&complete, &[&id, &result]).await?;
                done += 1;
            }
            drop(client);
            let _ = driver.await;
            Ok::<usize, tokio_postgres::Error>(done)
        });
    }
    let mut done = 0usize;
    for r in joins.join_all().await {
        done += r?;
    }
    let wall = start.elapsed();
    let left: i64 = setup
        .query_one("SELECT count(*) FROM jobs WHERE state <> 'done'", &[])
        .await?
        .get(0);
    drop(setup);
    let _ = driver.await;
    if done != jobs || left != 0 {
        return Err(format!("bare queue: {done} of {jobs} jobs done, {left} left").into());
    }
    Ok(wall)
}
