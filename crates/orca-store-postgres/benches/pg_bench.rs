//! The PostgreSQL store's benchmark (run by `cargo xtask bench`): on a throwaway server with
//! `fsync` on (durable commits, as in production), the cost of one task claim + complete
//! (two compare-and-swap transitions, each its own committed transaction), and tasks/s with
//! 1, 4 and 8 workers (each with its own connection pool, claiming and completing tasks of one
//! wide execution at once). Prints a table; `--json PATH` writes the figures; `--quick` uses
//! small sizes. Asserts nothing about time.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use orca_core::redact::Redactor;
use orca_core::{
    AgentId, ApprovedPlan, ContextLimits, DraftPlan, ExecutionId, Holder, PendingExecution, Plan,
    PlanId, Step, StepId, Task, TaskSuccess, build_context,
};
use orca_store::{
    Authority, ExecutionStore, NewAuditEntry, PlanStore, Revision, TaskTransition, WriteOrder,
};
use orca_store_postgres::PgStore;
use orca_testkit::postgres::Throwaway;
use serde_json::json;
use time::OffsetDateTime;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

fn plan(steps: usize) -> Result<ApprovedPlan, BoxError> {
    let mut d = DraftPlan::new(PlanId::new(), now());
    d.set_goal("bench");
    d.set_assumptions(vec!["a".into()]);
    d.set_risks(vec!["r".into()]);
    d.set_verification(vec!["v".into()]);
    for i in 0..steps {
        d.add_step(
            Step::new(StepId::parse(&format!("s{i}"))?, AgentId::shell(), "s").with_command("true"),
            None,
        )?;
    }
    let agents: BTreeSet<AgentId> = [AgentId::shell()].into_iter().collect();
    Ok(d.submit(&agents, now())?.approve("bench", None, now()))
}

fn holder() -> Holder {
    Holder {
        pid: std::process::id(),
        host: "bench".into(),
        token: "bench".into(),
    }
}

/// Task `i` claimed (pending → running), not written yet.
fn claimed(
    plan: &ApprovedPlan,
    tasks: &[Task],
    i: usize,
) -> Result<orca_core::RunningTask, BoxError> {
    let Task::Pending(p) = tasks[i].clone() else {
        return Err("not pending".into());
    };
    let ctx = build_context(
        plan.id(),
        plan.content(),
        i,
        tasks,
        &ContextLimits::default(),
    )
    .ok_or("no context")?;
    let running = p.start(ctx, holder(), now());
    Ok(running)
}

/// Claims (pending → running) and completes task `i`: two durable CAS writes.
async fn claim_complete(
    store: &PgStore,
    plan: &ApprovedPlan,
    exec: ExecutionId,
    tasks: &[Task],
    i: usize,
) -> Result<(), BoxError> {
    let running = claimed(plan, tasks, i)?;
    let rev = store
        .update_task(exec, &running.clone().into(), Revision::FIRST)
        .await?;
    let done = running.complete(TaskSuccess::with_summary("ok"), now());
    store.update_task(exec, &done.into(), rev).await?;
    Ok(())
}

/// Claims and completes task `i` with their audit entries, like the recorder writes them:
/// two transitions, each with its entry, grouped with whatever else its log has in flight.
async fn claim_complete_audited(
    store: &PgStore,
    plan: &ApprovedPlan,
    exec: ExecutionId,
    tasks: &[Task],
    i: usize,
) -> Result<(), BoxError> {
    let running = claimed(plan, tasks, i)?;
    let step = running.step_id.to_string();
    let transition = |task: Task, expected: Revision, kind: &str| TaskTransition {
        plan_id: plan.id(),
        execution_id: exec,
        task,
        expected,
        entry: NewAuditEntry::new(kind, json!({ "step": step })),
        order: WriteOrder::StateFirst,
    };
    let claimed = store
        .update_task_with_audit(
            store,
            transition(running.clone().into(), Revision::FIRST, "task.started"),
        )
        .await?;
    let done = running.complete(TaskSuccess::with_summary("ok"), now());
    store
        .update_task_with_audit(
            store,
            transition(done.into(), claimed.revision, "task.completed"),
        )
        .await?;
    Ok(())
}

/// `workers` workers (each its own store: its own pool and queues, as separate processes),
/// `per_worker` tasks at once in each, claiming and completing the tasks of `exec` in turn
/// until none is left (with their audit entries if `audited`); the wall time.
async fn drain(
    url: &str,
    plan: ApprovedPlan,
    exec: ExecutionId,
    tasks: Vec<Task>,
    workers: usize,
    per_worker: usize,
    audited: bool,
) -> Result<Duration, BoxError> {
    let (plan, tasks) = (Arc::new(plan), Arc::new(tasks));
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut joins = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let s = PgStore::open(url, Authority::permissive(), Redactor::new())?;
        for _ in 0..per_worker {
            let (s, plan, tasks, next) = (
                s.clone(),
                Arc::clone(&plan),
                Arc::clone(&tasks),
                Arc::clone(&next),
            );
            joins.spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= tasks.len() {
                        return Ok::<(), BoxError>(());
                    }
                    if audited {
                        claim_complete_audited(&s, &plan, exec, &tasks, i).await?;
                    } else {
                        claim_complete(&s, &plan, exec, &tasks, i).await?;
                    }
                }
            });
        }
    }
    for r in joins.join_all().await {
        r?;
    }
    Ok(start.elapsed())
}

/// Tasks each with its entries, `per_worker` at once in each of `workers` workers (each its
/// own store: its own pool and queues, as separate processes): tasks/s and commits per task.
async fn audited_run(
    store: &PgStore,
    url: &str,
    stats: &Stats,
    total: usize,
    workers: usize,
    per_worker: usize,
) -> Result<(f64, f64), BoxError> {
    let (plan, exec, tasks) = execution(store, total).await?;
    let before = stats.sample().await?;
    let elapsed = drain(url, plan, exec, tasks, workers, per_worker, true).await?;
    let secs = elapsed.as_secs_f64();
    let after = stats.sample().await?;
    let commits = (after.commits - before.commits) as f64 / total as f64;
    Ok((total as f64 / secs, commits))
}

/// Group commit (ADR 0036): tasks with their audit entries, 16 at once per worker.
async fn grouped(
    store: &PgStore,
    url: &str,
    n: usize,
    out: &mut Vec<Figure>,
) -> Result<(), BoxError> {
    const AT_ONCE: usize = 16;
    let stats = Stats::connect(url).await?;
    let mut rates = Vec::new();
    for workers in [1usize, 4, 8] {
        let (rate, commits) = audited_run(store, url, &stats, n * 2, workers, AT_ONCE).await?;
        if workers == 1 {
            out.push(Figure {
                name: "pg_group_task_ms_1w".into(),
                value: 1000.0 / rate,
                unit: "ms",
                target: Some(1.0),
                description: format!(
                    "durable cost per task (claim + complete with their entries), 1 worker \
                     running {AT_ONCE} at once"
                ),
            });
        }
        out.push(Figure {
            name: format!("pg_group_tasks_per_s_{workers}w"),
            value: rate,
            unit: "/s",
            target: None,
            description: format!(
                "tasks with entries per second, {workers} worker(s) × {AT_ONCE} at once"
            ),
        });
        out.push(Figure {
            name: format!("pg_group_commits_per_task_{workers}w"),
            value: commits,
            unit: "",
            target: None,
            description: format!(
                "commits per task (pg_stat_database), {workers} worker(s) × {AT_ONCE} at once; \
                 2 without grouping"
            ),
        });
        rates.push(rate);
    }
    out.push(Figure {
        name: "pg_group_scaling_4w_vs_1w".into(),
        value: rates[1] / rates[0],
        unit: "x",
        // `target` means "at most"; this goal is "at least": in the description.
        target: None,
        description: format!(
            "tasks/s with 4 workers ÷ with 1, {AT_ONCE} at once each, one execution (goal ≥ 3.2)"
        ),
    });
    Ok(())
}

async fn execution(
    store: &PgStore,
    steps: usize,
) -> Result<(ApprovedPlan, ExecutionId, Vec<Task>), BoxError> {
    let plan = plan(steps)?;
    store.create_plan(&Plan::from(plan.clone())).await?;
    let exec = ExecutionId::new();
    let (pending, tasks) = PendingExecution::new(exec, &plan, now());
    let running = pending.start(now());
    store
        .create_execution(&running.clone().into(), &tasks)
        .await?;
    Ok((plan, exec, tasks))
}

/// The server's counters: commits, WAL flushes (fsyncs), statements.
struct Stats {
    client: tokio_postgres::Client,
    statements: bool,
}

struct Sample {
    commits: i64,
    wal_syncs: i64,
}

impl Stats {
    async fn connect(url: &str) -> Result<Self, BoxError> {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        tokio::spawn(conn);
        // pg_stat_statements: loaded by the throwaway durable server when installed.
        let statements = client
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await
            .is_ok()
            && client
                .batch_execute("SELECT pg_stat_statements_reset()")
                .await
                .is_ok();
        Ok(Self { client, statements })
    }

    async fn sample(&self) -> Result<Sample, BoxError> {
        // Counters are published at the end of each backend's transaction: let them settle.
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        self.client
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .await?;
        let row = self
            .client
            .query_one(
                "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
                        (SELECT wal_sync FROM pg_stat_wal)",
                &[],
            )
            .await?;
        Ok(Sample {
            commits: row.get(0),
            wal_syncs: row.get(1),
        })
    }
}

/// Prints where the time of the one-worker run went: commits and WAL flushes per task, and
/// each statement's calls per task and server time (pg_stat_statements, top level).
async fn breakdown(
    stats: &Stats,
    before: &Sample,
    after: &Sample,
    n: usize,
    out: &mut Vec<Figure>,
) -> Result<(), BoxError> {
    let per = |a: i64, b: i64| (b - a) as f64 / n as f64;
    // The two samples' own transactions are among the commits.
    let commits = per(before.commits + 2, after.commits);
    let syncs = per(before.wal_syncs, after.wal_syncs);
    out.push(Figure {
        name: "pg_commits_per_task".into(),
        value: commits,
        unit: "",
        target: None,
        description: "commits per task claim + complete (1 worker)".into(),
    });
    out.push(Figure {
        name: "pg_wal_syncs_per_task".into(),
        value: syncs,
        unit: "",
        target: None,
        description: "WAL flushes (fsync) per task claim + complete (1 worker)".into(),
    });
    if !stats.statements {
        say("(no pg_stat_statements on this server: no per-statement breakdown)");
        return Ok(());
    }
    let rows = stats
        .client
        .query(
            "SELECT calls, total_exec_time, query FROM pg_stat_statements
              WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                AND query NOT LIKE '%pg_stat%'
              ORDER BY calls DESC LIMIT 12",
            &[],
        )
        .await?;
    let mut statements = 0.0;
    let mut lines =
        String::from("per-statement breakdown, 1 worker (calls per task, server ms per call):\n");
    for r in &rows {
        let calls: i64 = r.get(0);
        let total: f64 = r.get(1);
        let query: String = r.get(2);
        let query: String = query.split_whitespace().collect::<Vec<_>>().join(" ");
        let per_task = calls as f64 / n as f64;
        statements += per_task;
        let _ = writeln!(
            lines,
            "  {per_task:>6.2}  {:>7.3} ms  {}",
            total / calls.max(1) as f64,
            query.chars().take(90).collect::<String>()
        );
    }
    say(lines.trim_end());
    out.push(Figure {
        name: "pg_statements_per_task".into(),
        value: statements,
        unit: "",
        target: None,
        description: "statements (round trips once prepared) per task claim + complete".into(),
    });
    Ok(())
}

/// What this machine allows at best: the median of one round trip that does nothing
/// (`SELECT 1`, prepared) and of one durable commit (a one-row insert, fsync on). A task claim +
/// complete is two statements: it costs at least two of each.
async fn floor(stats: &Stats, n: usize, out: &mut Vec<Figure>) -> Result<(), BoxError> {
    let c = &stats.client;
    let durable = "CREATE TABLE IF NOT EXISTS bench_commit (x int)";
    c.batch_execute(durable).await?;
    let ping = c.prepare("SELECT 1").await?;
    let commit = c.prepare("INSERT INTO bench_commit VALUES (1)").await?;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let (mut rt, mut cm) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let t = Instant::now();
        c.query_one(&ping, &[]).await?;
        rt.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        c.execute(&commit, &[]).await?;
        cm.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    for (name, value, description) in [
        (
            "pg_round_trip_ms",
            median(rt),
            "one empty round trip (SELECT 1), median: this machine's floor",
        ),
        (
            "pg_commit_ms",
            median(cm),
            "one durable one-row commit (fsync on), median: this machine's floor",
        ),
    ] {
        out.push(Figure {
            name: name.into(),
            value,
            unit: "ms",
            target: None,
            description: description.into(),
        });
    }
    Ok(())
}

struct Figure {
    name: String,
    value: f64,
    unit: &'static str,
    target: Option<f64>,
    description: String,
}

async fn figures(quick: bool) -> Result<Vec<Figure>, BoxError> {
    let server = Throwaway::start(true)?;
    let url = server.create_database().await?;
    let store = PgStore::connect(&url, Authority::permissive(), Redactor::new()).await?;
    let n = if quick { 40 } else { 400 };
    let mut out = Vec::new();

    // One worker, one task after another, with the server's own counts of what it cost.
    let (plan, exec, tasks) = execution(&store, n).await?;
    let stats = Stats::connect(&url).await?;
    let before = stats.sample().await?;
    let start = Instant::now();
    for i in 0..n {
        claim_complete(&store, &plan, exec, &tasks, i).await?;
    }
    let per_task_ms = start.elapsed().as_secs_f64() * 1000.0 / n as f64;
    let after = stats.sample().await?;
    breakdown(&stats, &before, &after, n, &mut out).await?;
    floor(&stats, n, &mut out).await?;
    out.push(Figure {
        name: "pg_task_claim_complete_ms".into(),
        value: per_task_ms,
        unit: "ms",
        target: Some(1.0),
        description: "one task claim + complete on local postgres, fsync on (1 worker)".into(),
    });

    // Workers at once on one wide execution, each with its own pool.
    let mut rates = Vec::new();
    for workers in [1usize, 4, 8] {
        let total = n * 2;
        let (plan, exec, tasks) = execution(&store, total).await?;
        let elapsed = drain(&url, plan, exec, tasks, workers, 1, false).await?;
        let rate = total as f64 / elapsed.as_secs_f64();
        rates.push(rate);
        out.push(Figure {
            name: format!("pg_tasks_per_s_{workers}w"),
            value: rate,
            unit: "/s",
            target: None,
            description: format!("tasks claimed + completed per second, {workers} worker(s)"),
        });
    }
    out.push(Figure {
        name: "pg_scaling_4w_vs_1w".into(),
        value: rates[1] / rates[0],
        unit: "x",
        target: None,
        description: "tasks/s with 4 workers ÷ with 1 (goal ≥ 3.2; 2 cores here)".into(),
    });
    grouped(&store, &url, n, &mut out).await?;
    drop(server);
    Ok(out)
}

#[expect(clippy::print_stdout, reason = "a benchmark reports to the terminal")]
fn say(text: &str) {
    println!("{text}");
}

fn main() -> std::process::ExitCode {
    match real_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            #[expect(clippy::print_stderr, reason = "a benchmark reports to the terminal")]
            {
                eprintln!("pg_bench: {e}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

fn real_main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let json_path = args
        .iter()
        .position(|a| a == "--json")
        .map(|p| args.get(p + 1).cloned().ok_or("--json PATH"))
        .transpose()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let figures = runtime.block_on(figures(quick))?;
    let rows: Vec<orca_testkit::bench::Row<'_>> = figures
        .iter()
        .map(|f| orca_testkit::bench::Row {
            name: &f.name,
            value: f.value,
            unit: f.unit,
            target: f.target,
            description: &f.description,
        })
        .collect();
    say(&orca_testkit::bench::table(&rows));
    if let Some(path) = json_path {
        orca_testkit::bench::write_json(&rows, std::path::Path::new(&path), quick)?;
    }
    Ok(())
}
