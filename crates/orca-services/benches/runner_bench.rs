//! The runner benchmark (SPEC §9): run with `--release`.
//!
//! ```text
//! cargo bench -p orca-services --bench runner_bench -- [--quick] [--json PATH] (or `cargo xtask bench`)
//! ```
//!
//! Figures, each taken in this one run (ratios are side by side, so machine noise cancels):
//! - `dag_makespan_ratio_{memory,file,postgres}`: an 8-layer × 8-wide DAG (every step depends on the whole
//!   layer before it), each agent call 100 ms, concurrency 8: makespan ÷ critical path (0.8 s),
//!   the median of three runs.
//! - `pg_claim_{execution,task}_{1,4,8}w_per_s`, `pg_claim_task_4w_vs_1w`: workers on one
//!   800-task DAG of 4 layers on postgres, claiming the execution (one leader) or its tasks one by
//!   one; each the median of three runs, each run on a database of its own. The workers are
//!   up as `orca worker` is: they first claim the tasks of a 64-task execution together (their
//!   connections opened and warm), and stay connected until the run is timed.
//! - `pg_bare_{n}w_per_s`, `pg_orca_{n}w_per_s`, `pg_orca_vs_bare_{n}w` for 1, 2, 4, 8, 16
//!   workers: a bare `FOR UPDATE SKIP LOCKED` job queue and orca's task-claiming workers (instant
//!   agent, one execution of independent tasks) on one server in the same run, and orca's cost
//!   per task over the bare queue's (goal ≤ 2×). `--queue-only` prints just that table;
//!   `--overhead-only` just `overhead_cpu_us_per_task` (for a profiler).
//! - `context_ratio_50_5`: serialized `TaskContext` bytes given to step 50 of a sequential plan ÷
//!   step 5, with realistic summaries, findings and files per step.
//! - `overhead_cpu_us_per_task`: CPU time (user + system, `getrusage`) per task with an instant
//!   agent on the file store.
//! - `peak_rss_mib_1000`: peak resident memory (`VmHWM`) of a child process that runs a
//!   1,000-task execution on the file store and nothing else.
//! - `growth_1000_100`: wall time of a 1,000-task execution ÷ a 100-task one, file store;
//!   `growth_1000_100_memory`: the same on the memory store (the runner's own share).
//!
//! `--quick` shrinks every size so the whole run takes seconds (a smoke test: nothing about time
//! is asserted). `--json PATH` also writes the figures as JSON.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use orca_core::{
    AgentAnswer, AgentId, AgentInfo, AgentPort, Budget, Holder, PlanContent, PlannerRequest,
    PlannerResponse, QuestionRequest, Reply, Role, Step, StepId, TaskFailure, TaskRequest,
    TaskResult, TaskSuccess, ToolHost,
};
use orca_services::{NoHuman, Orca, Quiet, RunConfig, RunOutcome};
use orca_store::{FileStore, MemoryStore, Store};
use tokio_util::sync::CancellationToken;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The tuning loops: `--claims-only` and `--makespans N` (one figure, several times).
#[path = "runner_bench/overhead.rs"]
mod overhead;
/// (g): orca's workers against a bare job queue on the same server.
#[path = "runner_bench/queue.rs"]
mod queue;

#[path = "runner_bench/tuning.rs"]
mod tuning;
/// (f): workers on one wide DAG on postgres.
#[path = "runner_bench/workers.rs"]
mod workers;

use workers::{CLAIM_RUNS, Load, Mode, WORKER_TASKS, workers_run};

/// An agent whose every task call sleeps a fixed time (or returns at once) and reports a
/// realistic result; it records the serialized size of each context it was given.
struct BenchAgent {
    delay: Duration,
    context_bytes: Mutex<BTreeMap<usize, usize>>,
}

impl BenchAgent {
    fn new(delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            delay,
            context_bytes: Mutex::default(),
        })
    }
}

fn lorem(words: usize, seed: usize) -> String {
    const WORDS: [&str; 12] = [
        "parser", "module", "refactor", "tests", "handles", "edge", "cases", "config", "the",
        "error", "path", "updated",
    ];
    let mut s = String::new();
    for i in 0..words {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[(i * 7 + seed) % WORDS.len()]);
    }
    s
}

#[async_trait]
impl AgentPort for BenchAgent {
    fn agents(&self) -> Vec<AgentInfo> {
        vec![AgentInfo {
            id: worker(),
            role: Role::Specialist,
            description: "a benchmark worker".to_owned(),
            backend: "bench".to_owned(),
            model: None,
            workspace_tools: Vec::new(),
        }]
    }

    async fn run_task(&self, request: TaskRequest, _tools: &dyn ToolHost) -> Reply<TaskResult> {
        let bytes = serde_json::to_vec(&request.context).map_or(0, |v| v.len());
        if let Ok(mut m) = self.context_bytes.lock() {
            m.insert(request.context.step_index, bytes);
        }
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let i = request.context.step_index;
        let step = request.step.id.as_str();
        Reply::new(TaskResult::Success(TaskSuccess {
            summary: format!("{step}: {}", lorem(60, i)),
            key_findings: (0..4).map(|k| lorem(20, i + k)).collect(),
            relevant_files: (0..6).map(|k| format!("src/{step}/file_{k}.rs")).collect(),
            artifacts: vec![format!("target/{step}.out")],
            output: Some(lorem(200, i)),
            ..TaskSuccess::default()
        }))
    }

    async fn ask(
        &self,
        _request: QuestionRequest,
        _tools: &dyn ToolHost,
    ) -> Reply<Result<AgentAnswer, TaskFailure>> {
        Reply::new(Ok(AgentAnswer {
            answer: "n/a".to_owned(),
            session_id: None,
        }))
    }

    async fn plan(
        &self,
        _request: PlannerRequest,
        _tools: &dyn ToolHost,
    ) -> Reply<PlannerResponse> {
        Reply::new(PlannerResponse::Answer {
            text: "n/a".to_owned(),
        })
    }
}

fn worker() -> AgentId {
    AgentId::parse("worker").unwrap_or_else(|_| unreachable!("a valid literal id"))
}

fn sid(name: &str) -> Result<StepId, BoxError> {
    Ok(StepId::parse(name)?)
}

fn content(steps: Vec<Step>) -> PlanContent {
    PlanContent {
        goal: lorem(40, 1),
        summary: Some(lorem(30, 2)),
        steps,
        assumptions: vec!["a benchmark".to_owned()],
        risks: vec!["none".to_owned()],
        verification: vec!["every task completes".to_owned()],
        checks: Vec::new(),
        isolation: None,
        budget: None,
    }
}

/// `layers` × `width`, every step depending on every step of the layer before.
fn layered(layers: usize, width: usize) -> Result<Vec<Step>, BoxError> {
    let mut steps = Vec::new();
    for l in 0..layers {
        for w in 0..width {
            let deps = if l == 0 {
                Vec::new()
            } else {
                (0..width)
                    .map(|p| sid(&format!("l{}-{p}", l - 1)))
                    .collect::<Result<_, _>>()?
            };
            steps.push(
                Step::new(
                    sid(&format!("l{l}-{w}"))?,
                    worker(),
                    format!("layer {l} #{w}"),
                )
                .with_depends_on(deps),
            );
        }
    }
    Ok(steps)
}

/// A sequential chain of `n` steps.
fn chain(n: usize) -> Result<Vec<Step>, BoxError> {
    (0..n)
        .map(|i| {
            let s = Step::new(sid(&format!("s{i}"))?, worker(), lorem(25, i));
            Ok(if i == 0 {
                s
            } else {
                s.with_depends_on([sid(&format!("s{}", i - 1))?])
            })
        })
        .collect()
}

/// `n` steps in 10 parallel lanes: step i depends on step i − 10 (a realistic, wide DAG).
fn lanes(n: usize) -> Result<Vec<Step>, BoxError> {
    (0..n)
        .map(|i| {
            let s = Step::new(sid(&format!("t{i}"))?, worker(), format!("task {i}"));
            Ok(if i < 10 {
                s
            } else {
                s.with_depends_on([sid(&format!("t{}", i - 10))?])
            })
        })
        .collect()
}

fn holder() -> Holder {
    Holder {
        pid: std::process::id(),
        host: "bench".to_owned(),
        token: format!("{:016x}", fastrand::u64(..)),
    }
}

enum Backend {
    Memory,
    File,
    /// A database of a throwaway PostgreSQL server (fsync on).
    Postgres(String),
}

/// Creates, approves and runs a plan; returns the wall time of the run alone.
async fn run(
    backend: &Backend,
    agent: Arc<BenchAgent>,
    steps: Vec<Step>,
    concurrency: usize,
) -> Result<Duration, BoxError> {
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = match backend {
        Backend::Memory => Arc::new(MemoryStore::new()),
        Backend::File => Arc::new(FileStore::open(dir.path())?),
        Backend::Postgres(url) => Arc::new(
            orca_store_postgres::PgStore::connect(
                url,
                orca_store::Authority::permissive(),
                orca_core::redact::Redactor::new(),
            )
            .await?,
        ),
    };
    let orca = Orca::new(store, agent, Arc::new(NoHuman), None, Budget::UNLIMITED);
    let proposal = orca
        .planning()
        .create_proposal(content(steps), None)
        .await?;
    orca.planning()
        .approve(proposal.id(), "bench", None)
        .await?;
    let (_, exec) = orca.executions().create(proposal.id()).await?;
    let mut config = RunConfig::new(holder());
    config.concurrency = concurrency;
    let runner = orca.runner(config, Arc::new(Quiet));
    let start = Instant::now();
    let report = runner.run(exec, CancellationToken::new()).await?;
    let elapsed = start.elapsed();
    if report.outcome != RunOutcome::Completed {
        return Err(format!("benchmark run ended {:?}", report.outcome).into());
    }
    Ok(elapsed)
}

/// Runs of the 8 × 8 DAG per backend in one repetition (the figure is their median).
const DAG_RUNS: usize = 3;

/// CPU time (user + system) of this process so far.
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    #[expect(unsafe_code, reason = "getrusage has no safe wrapper in std")]
    // SAFETY: `usage` points to writable memory of the right type; RUSAGE_SELF is valid.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return Duration::ZERO;
        }
        usage.assume_init()
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Peak resident set (`VmHWM`) of this process, in KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

struct Figure {
    name: &'static str,
    value: f64,
    unit: &'static str,
    target: Option<f64>,
    description: String,
}

struct Sizes {
    /// Layers and width of the DAG (8 × 8 in a full run).
    dag: (usize, usize),
    delay: Duration,
    overhead_tasks: usize,
    big: usize,
    small: usize,
    /// Only the postgres figures (`--dag-only`, for `cargo xtask bench pg`).
    dag_only: bool,
    /// `--quick`: small sizes, only proving every part still runs.
    quick: bool,
    /// Tasks of the wide DAG of (f) and its agent calls' time.
    wide: usize,
    wide_delay: Duration,
}

async fn figures(sizes: &Sizes) -> Result<Vec<Figure>, BoxError> {
    let mut out = Vec::new();

    // (a) DAG parallelism, every backend (postgres: a throwaway durable server).
    let (layers, width) = sizes.dag;
    let critical = sizes.delay * u32::try_from(layers).unwrap_or(u32::MAX);
    let server = orca_testkit::postgres::Throwaway::start(true)?;
    let pg_url = server.create_database().await?;
    for (backend, name) in [
        (Backend::Memory, "dag_makespan_ratio_memory"),
        (Backend::File, "dag_makespan_ratio_file"),
        (Backend::Postgres(pg_url), "dag_makespan_ratio_postgres"),
    ] {
        // The median of DAG_RUNS runs: one run of 0.9 s moves by ±1 % with the machine.
        let mut walls = Vec::with_capacity(DAG_RUNS);
        for _ in 0..DAG_RUNS {
            walls.push(
                run(
                    &backend,
                    BenchAgent::new(sizes.delay),
                    layered(layers, width)?,
                    width,
                )
                .await?,
            );
        }
        walls.sort_unstable();
        let wall = walls[DAG_RUNS / 2];
        out.push(Figure {
            name,
            value: wall.as_secs_f64() / critical.as_secs_f64(),
            unit: "x",
            target: Some(1.10),
            description: format!(
                "{layers}x{width} DAG, {} ms calls, concurrency {width}, median of {DAG_RUNS} runs: makespan {:.3} s / critical path {:.3} s",
                sizes.delay.as_millis(),
                wall.as_secs_f64(),
                critical.as_secs_f64()
            ),
        });
    }

    // (f) Both worker modes on one wide DAG on postgres (ADR 0022, 0026): 1, 4, 8 workers.
    // Each figure is the median of CLAIM_RUNS runs, as the DAG's are (one run of 1.6 s moves by
    // ±5 % with the machine), each run on a database of its own (every run starts from the
    // same state).
    let (mut rates, mut steady) = (Vec::new(), Vec::new());
    for mode in [Mode::Execution, Mode::Task] {
        for workers in [1usize, 4, 8] {
            let mut runs = Vec::with_capacity(CLAIM_RUNS);
            for _ in 0..CLAIM_RUNS {
                let pg_url = server.create_database().await?;
                runs.push(workers_run(&pg_url, mode, workers, Load::wide(sizes)).await?);
            }
            let median = |mut d: Vec<Duration>| {
                d.sort_unstable();
                sizes.wide as f64 / d[CLAIM_RUNS / 2].as_secs_f64()
            };
            steady.push(median(runs.iter().map(|r| r.steady).collect()));
            let rate = median(runs.iter().map(|r| r.wall).collect());
            rates.push(rate);
            out.push(Figure {
                name: mode.figure(workers),
                value: rate,
                unit: "/s",
                target: None,
                description: format!(
                    "{} tasks (4 layers), {} ms calls, {workers} worker(s) of {} tasks each, claiming {}, median of {CLAIM_RUNS} runs: tasks/s",
                    sizes.wide,
                    sizes.wide_delay.as_millis(),
                    WORKER_TASKS,
                    mode.name()
                ),
            });
        }
    }
    // rates: execution 1, 4, 8; task 1, 4, 8.
    out.push(Figure {
        name: "pg_claim_task_4w_vs_1w",
        value: rates[4] / rates[3],
        unit: "x",
        target: None,
        description: "tasks claimed one by one: tasks/s with 4 workers ÷ with 1 (goal ≥ 3.2)"
            .to_owned(),
    });
    out.push(Figure {
        name: "pg_claim_task_4w_vs_1w_steady",
        value: steady[4] / steady[3],
        unit: "x",
        target: None,
        description: "the same between the first start and the last completion (without each \
                      worker's open of the plan and the leader's end)"
            .to_owned(),
    });
    out.push(Figure {
        name: "pg_claim_task_vs_execution_4w",
        value: rates[4] / rates[1],
        unit: "x",
        target: None,
        description: "4 workers: tasks/s claiming tasks ÷ claiming executions (one leader)"
            .to_owned(),
    });
    drop(server);

    // (g) orca against a bare job queue, 1 to 16 workers, on a server of its own.
    let scope = queue::Scope {
        tasks: sizes.wide,
        quick: sizes.quick,
    };
    let compared = queue::compare(scope).await?;
    say(&queue::table(&compared));
    out.extend(queue::figures(&compared, scope));
    if sizes.dag_only {
        return Ok(out);
    }

    // (b) Context size: step 50 vs step 5 of a sequential plan.
    let agent = BenchAgent::new(Duration::ZERO);
    run(&Backend::Memory, agent.clone(), chain(50)?, 1).await?;
    let (c5, c50) = {
        let m = agent
            .context_bytes
            .lock()
            .map_err(|_| "context map poisoned")?;
        (
            m.get(&4).copied().unwrap_or(0),
            m.get(&49).copied().unwrap_or(0),
        )
    };
    out.push(Figure {
        name: "context_ratio_50_5",
        value: c50 as f64 / (c5.max(1)) as f64,
        unit: "x",
        target: Some(1.2),
        description: format!("TaskContext bytes: step 50 = {c50}, step 5 = {c5}"),
    });

    // (c) Orchestration overhead: CPU per task, instant agent, file store.
    let cost = overhead::overhead(sizes.overhead_tasks).await?;
    out.push(Figure {
        name: "overhead_cpu_us_per_task",
        value: cost.per_task_us(),
        unit: "us",
        target: Some(500.0),
        description: format!(
            "CPU time (user+sys) per task, instant agent, file store, {} tasks: {}",
            sizes.overhead_tasks,
            cost.split()
        ),
    });

    // (e) Growth: big ÷ small execution, file store, instant agent.
    let small = run(
        &Backend::File,
        BenchAgent::new(Duration::ZERO),
        lanes(sizes.small)?,
        8,
    )
    .await?;
    let big = run(
        &Backend::File,
        BenchAgent::new(Duration::ZERO),
        lanes(sizes.big)?,
        8,
    )
    .await?;
    out.push(Figure {
        name: "growth_1000_100",
        value: big.as_secs_f64() / small.as_secs_f64().max(1e-9),
        unit: "x",
        target: Some(15.0),
        description: format!(
            "{} tasks {:.3} s / {} tasks {:.3} s (file store, instant agent)",
            sizes.big,
            big.as_secs_f64(),
            sizes.small,
            small.as_secs_f64()
        ),
    });
    // The same growth on the memory store: separates the runner's own cost from the store's.
    let small = run(
        &Backend::Memory,
        BenchAgent::new(Duration::ZERO),
        lanes(sizes.small)?,
        8,
    )
    .await?;
    let big = run(
        &Backend::Memory,
        BenchAgent::new(Duration::ZERO),
        lanes(sizes.big)?,
        8,
    )
    .await?;
    out.push(Figure {
        name: "growth_1000_100_memory",
        value: big.as_secs_f64() / small.as_secs_f64().max(1e-9),
        unit: "x",
        target: None,
        description: format!(
            "{} tasks {:.3} s / {} tasks {:.3} s (memory store: the runner alone)",
            sizes.big,
            big.as_secs_f64(),
            sizes.small,
            small.as_secs_f64()
        ),
    });
    Ok(out)
}

/// The child process of (d): one big run, then its peak memory on stdout.
async fn memory_child(tasks: usize) -> Result<(), BoxError> {
    run(
        &Backend::File,
        BenchAgent::new(Duration::ZERO),
        lanes(tasks)?,
        8,
    )
    .await?;
    let kib = peak_rss_kib().ok_or("no VmHWM in /proc/self/status")?;
    say(&format!("{kib}"));
    Ok(())
}

fn peak_memory_figure(tasks: usize) -> Result<Figure, BoxError> {
    let exe = std::env::current_exe()?;
    let out = std::process::Command::new(exe)
        .args(["--memory-child", &tasks.to_string()])
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "memory child failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    let kib: f64 = String::from_utf8_lossy(&out.stdout).trim().parse()?;
    Ok(Figure {
        name: "peak_rss_mib_1000",
        value: kib / 1024.0,
        unit: "MiB",
        target: None,
        description: format!("peak RSS (VmHWM) of a process running a {tasks}-task execution"),
    })
}

#[expect(clippy::print_stdout, reason = "a benchmark reports to the terminal")]
pub(crate) fn say(text: &str) {
    println!("{text}");
}

fn main() -> std::process::ExitCode {
    match real_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            #[expect(clippy::print_stderr, reason = "a benchmark reports to the terminal")]
            {
                // The whole chain: a store error's context alone does not say what broke.
                let mut text = e.to_string();
                let mut source = e.source();
                while let Some(cause) = source {
                    text.push_str(&format!(": {cause}"));
                    source = cause.source();
                }
                eprintln!("runner_bench: {text}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

fn real_main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if let Some(pos) = args.iter().position(|a| a == "--memory-child") {
        let tasks: usize = args.get(pos + 1).ok_or("--memory-child N")?.parse()?;
        return runtime.block_on(memory_child(tasks));
    }
    let quick = args.iter().any(|a| a == "--quick");
    let dag_only = args.iter().any(|a| a == "--dag-only");
    let json_path = args
        .iter()
        .position(|a| a == "--json")
        .map(|p| args.get(p + 1).cloned().ok_or("--json PATH"))
        .transpose()?;
    let sizes = if quick {
        Sizes {
            dag: (3, 4),
            delay: Duration::from_millis(10),
            overhead_tasks: 20,
            big: 40,
            small: 4,
            dag_only,
            quick,
            wide: 40,
            wide_delay: Duration::from_millis(5),
        }
    } else {
        Sizes {
            dag: (8, 8),
            delay: Duration::from_millis(100),
            overhead_tasks: 1000,
            big: 1000,
            small: 100,
            dag_only,
            quick,
            wide: 800,
            wide_delay: Duration::from_millis(20),
        }
    };
    if args.iter().any(|a| a == "--overhead-only") {
        // (c) alone, for a profiler: CPU per task, instant agent, file store.
        let tasks = sizes.overhead_tasks;
        let cost = runtime.block_on(overhead::overhead(tasks))?;
        say(&format!(
            "overhead_cpu_us_per_task {:.1} us ({tasks} tasks: {}; run wall {:.3} s)",
            cost.per_task_us(),
            cost.split(),
            cost.wall.as_secs_f64()
        ));
        return Ok(());
    }
    if args.iter().any(|a| a == "--queue-only") {
        let compared = runtime.block_on(queue::compare(queue::Scope {
            tasks: sizes.wide,
            quick: sizes.quick,
        }))?;
        say(&queue::table(&compared));
        return Ok(());
    }
    let only = if args.iter().any(|a| a == "--claims-only") {
        Some(runtime.block_on(tuning::claims_only(&sizes, 3))?)
    } else if let Some(p) = args.iter().position(|a| a == "--makespans") {
        let reps = args.get(p + 1).and_then(|n| n.parse().ok()).unwrap_or(5);
        Some(runtime.block_on(tuning::makespans(&sizes, reps))?)
    } else {
        None
    };
    if let Some(only) = only {
        for f in only {
            say(&format!(
                "{:<28} {:>8.3}{:<2}  {}",
                f.name, f.value, f.unit, f.description
            ));
        }
        return Ok(());
    }
    let mut figures = runtime.block_on(figures(&sizes))?;
    if !sizes.dag_only {
        figures.push(peak_memory_figure(sizes.big)?);
    }

    let rows: Vec<orca_testkit::bench::Row<'_>> = figures
        .iter()
        .map(|f| orca_testkit::bench::Row {
            name: f.name,
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
