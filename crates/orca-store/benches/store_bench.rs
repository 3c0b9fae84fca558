//! Store benchmark: prints, from one run, each as a median of several repetitions:
//!
//! (a) one task's durable claim + complete through `FileStore`, each with its audit entry as the
//!     recorder writes them (`update_task_with_audit`: one write-ahead record each) ÷ one raw
//!     atomic file write (temp + fsync + rename + directory fsync) — target ≤ 1.5;
//! (b) total store cost of a 1,000-task execution ÷ a 100-task one — target ≤ 10.5 (the two run
//!     interleaved, so both see the same disk);
//! (c) listing 10,000 plans with a fresh `FileStore` on an existing directory — target < 250 ms;
//! (d) the cost of signing (ADR 0013): an approval's ed25519 signature and its check, and a
//!     signed seal ÷ an unsigned one (each sealing a 100-entry log, fsync on), interleaved;
//! (e) an 8×8 DAG of 100 ms steps through the store alone, as the recorder writes it (per task:
//!     claim = the task update and its entry as ONE write, the step, complete = the same; the
//!     8 tasks of a layer in parallel, layers one after another): makespan ÷ critical path —
//!     target ≤ 1.05 (ADR 0015); the same with the two writes apart (task update, then audit
//!     append: how it was before), and without the audit entries (task updates only).
//!     The runner's own figure is `runner_bench`'s `dag_makespan_ratio_file`.
//!
//! `cargo bench -p orca-store --bench store_bench -- [--quick] [--json PATH]` (or `cargo xtask bench`)
//! (`-- --dag-only [--mode one-write|apart|state] [--layers N]`: only (e), one run of each
//! mode or of the one named — e.g. under `strace -f -c -e trace=fsync,fdatasync`, with
//! `--layers 0` for the syncs of creating the plan and execution alone; `-- --claim-only`: only
//! (a)).

#![expect(
    clippy::print_stdout,
    clippy::unwrap_used,
    reason = "a benchmark prints its figures"
)]

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use orca_core::{
    AgentId, ApprovedPlan, ContextLimits, DraftPlan, Execution, ExecutionId, Holder,
    PendingExecution, PlanId, Step, StepId, Task, TaskSuccess, build_context,
};
use orca_store::audit::NewAuditEntry;
use orca_store::signing::approval_statement;
use orca_store::{
    AuditLogId, AuditStore, Authority, ExecutionStore, FileStore, PlanStore, Revision, SigningKey,
    TaskTransition, WriteOrder,
};
use time::OffsetDateTime;

struct Sizes {
    /// Rounds of 10 raw writes and one 10-task execution.
    rounds: usize,
    small: usize,
    large: usize,
    growth_reps: usize,
    plans: usize,
    list_reps: usize,
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn approved(steps: usize) -> ApprovedPlan {
    let now = OffsetDateTime::now_utc();
    let mut d = DraftPlan::new(PlanId::new(), now);
    d.set_goal("benchmark");
    d.set_assumptions(vec!["a".into()]);
    d.set_risks(vec!["r".into()]);
    d.set_verification(vec!["v".into()]);
    for i in 0..steps {
        let id = StepId::parse(&format!("s{i}")).unwrap();
        d.add_step(
            Step::new(id, AgentId::shell(), "a step of the benchmark").with_command("true"),
            None,
        )
        .unwrap();
    }
    let agents: BTreeSet<AgentId> = [AgentId::shell()].into_iter().collect();
    d.submit(&agents, now).unwrap().approve("bench", None, now)
}

fn holder() -> Holder {
    Holder {
        pid: std::process::id(),
        host: "bench".into(),
        token: "bench".into(),
    }
}

fn raw_atomic_write(dir: &Path, i: usize, bytes: &[u8]) {
    let tmp = dir.join(format!(".raw.{i}.tmp"));
    let path = dir.join("raw.json");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .unwrap();
    f.write_all(bytes).unwrap();
    f.sync_data().unwrap();
    drop(f);
    std::fs::rename(&tmp, &path).unwrap();
    File::open(dir).unwrap().sync_all().unwrap();
}

/// An execution being driven through the store, one task at a time, timing only store calls.
struct Run {
    plan: ApprovedPlan,
    id: ExecutionId,
    running: orca_core::RunningExecution,
    revision: Revision,
    tasks: Vec<Task>,
    next: usize,
    store_time: Duration,
}

impl Run {
    /// Creates the plan and the execution and starts it.
    async fn new(store: &FileStore, steps: usize) -> Self {
        let plan = approved(steps);
        let now = OffsetDateTime::now_utc();
        let (pending, tasks) = PendingExecution::new(ExecutionId::new(), &plan, now);
        let id = pending.info.id;
        let running = pending.clone().start(now);
        let t = Instant::now();
        store.create_plan(&plan.clone().into()).await.unwrap();
        store
            .create_execution(&pending.into(), &tasks)
            .await
            .unwrap();
        let revision = store
            .update_execution(&running.clone().into(), Revision::FIRST)
            .await
            .unwrap();
        let store_time = t.elapsed();
        Self {
            plan,
            id,
            running,
            revision,
            tasks,
            next: 0,
            store_time,
        }
    }

    /// Claims and completes the next task; returns the store time of both writes.
    async fn step(&mut self, store: &FileStore) -> Duration {
        let i = self.next;
        self.next += 1;
        let now = OffsetDateTime::now_utc();
        let ctx = build_context(
            self.plan.id(),
            self.plan.content(),
            i,
            &self.tasks,
            &ContextLimits::default(),
        )
        .unwrap();
        let Task::Pending(p) = self.tasks[i].clone() else {
            unreachable!()
        };
        let claimed = p.start(ctx, holder(), now);
        let done: Task = claimed
            .clone()
            .complete(TaskSuccess::with_summary("ok"), now)
            .into();
        let t = Instant::now();
        let r = one_write(
            store,
            self.plan.id(),
            self.id,
            claimed.into(),
            Revision::FIRST,
            "task.attempt.started",
        )
        .await;
        one_write(
            store,
            self.plan.id(),
            self.id,
            done.clone(),
            r,
            "task.attempt.completed",
        )
        .await;
        let d = t.elapsed();
        self.store_time += d;
        self.tasks[i] = done;
        d
    }

    /// Completes the execution; returns the total store time of the run.
    async fn finish(self, store: &FileStore) -> Duration {
        let completed: Execution = self
            .running
            .complete(&self.tasks, OffsetDateTime::now_utc())
            .unwrap()
            .into();
        let t = Instant::now();
        store
            .update_execution(&completed, self.revision)
            .await
            .unwrap();
        self.store_time + t.elapsed()
    }
}

/// A task transition with its audit entry, as the recorder writes it: one write.
async fn one_write(
    store: &FileStore,
    plan_id: PlanId,
    execution_id: ExecutionId,
    task: Task,
    expected: Revision,
    kind: &str,
) -> Revision {
    let entry = NewAuditEntry::new(kind, serde_json::json!({ "step_id": task.step_id() }));
    store
        .update_task_with_audit(
            store,
            TaskTransition {
                plan_id,
                execution_id,
                task,
                expected,
                entry,
                order: WriteOrder::StateFirst,
            },
        )
        .await
        .unwrap()
        .revision
}

/// How (e) writes a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DagMode {
    /// The task update and its entry as one write (`update_task_with_audit`): the recorder now.
    OneWrite,
    /// The task update, then the audit append (two durable writes): the recorder before.
    Apart,
    /// Task updates only.
    State,
}

impl DagMode {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "one-write" => Some(Self::OneWrite),
            "apart" => Some(Self::Apart),
            "state" => Some(Self::State),
            _ => None,
        }
    }
}

/// Runs a small and a large execution interleaved (one small task per `large / small` large
/// ones), so both see the same disk over the same time: fsync latency on a shared machine
/// drifts by an order of magnitude within minutes. Returns (small total, large total).
async fn growth_pair(store: &FileStore, small: usize, large: usize) -> (Duration, Duration) {
    let mut s = Run::new(store, small).await;
    let mut l = Run::new(store, large).await;
    let every = large / small;
    for i in 0..large {
        l.step(store).await;
        if i % every == 0 && s.next < small {
            s.step(store).await;
        }
    }
    while s.next < small {
        s.step(store).await;
    }
    (s.finish(store).await, l.finish(store).await)
}

fn seed_plans(store: &FileStore, template: PlanId, n: usize) {
    let text = std::fs::read_to_string(store.plan_path(template)).unwrap();
    let old = template.to_string();
    for i in 1..n {
        let id = PlanId::new();
        let doc = text
            .replace(&old, &id.to_string())
            .replace("\"benchmark\"", &format!("\"benchmark {i}\""));
        std::fs::write(store.plan_path(id), doc).unwrap();
    }
}

/// (d): (sign an approval µs, check it µs, unsigned seal ms, signed seal ms), medians.
async fn signing_costs(base: &Path, reps: usize) -> (f64, f64, f64, f64) {
    let key = SigningKey::from_seed([3; 32]);
    let authority = Authority::new(Some(key), []);
    let plan = approved(5);
    let approval = plan.approval();
    let statement = approval_statement(
        plan.id(),
        &approval.digest,
        &approval.by,
        approval.at,
        approval.note.as_deref(),
    );
    let mut sign = Vec::new();
    let mut check = Vec::new();
    for _ in 0..reps * 20 {
        let t = Instant::now();
        let sig = authority.sign(&statement);
        sign.push(t.elapsed());
        let t = Instant::now();
        authority.check(&statement, sig.as_ref()).unwrap();
        check.push(t.elapsed());
    }
    let plain = FileStore::open(base.join("seal-plain")).unwrap();
    let signed = FileStore::open_with(base.join("seal-signed"), authority).unwrap();
    let mut unsigned_seal = Vec::new();
    let mut signed_seal = Vec::new();
    for _ in 0..reps * 4 {
        for (store, out) in [(&plain, &mut unsigned_seal), (&signed, &mut signed_seal)] {
            let log = AuditLogId::Execution {
                plan_id: PlanId::new(),
                execution_id: ExecutionId::new(),
            };
            for i in 0..100 {
                store
                    .append(
                        log,
                        NewAuditEntry::new("bench", serde_json::json!({ "i": i })),
                    )
                    .await
                    .unwrap();
            }
            let t = Instant::now();
            store.seal(log).await.unwrap();
            out.push(t.elapsed());
        }
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (
        us(median(sign)),
        us(median(check)),
        ms(median(unsigned_seal)),
        ms(median(signed_seal)),
    )
}

/// (e): one layer after another, the tasks of a layer in parallel, each: claim (task update +
/// audit append, as `mode` says), `delay`, complete (the same). Returns makespan ÷ critical
/// path.
async fn dag_ratio(
    store: &FileStore,
    layers: usize,
    width: usize,
    delay: Duration,
    mode: DagMode,
) -> f64 {
    // `layers == 0`: the same 8-layer plan is created, nothing runs (the syncs of creation).
    let plan = approved(if layers == 0 { 8 } else { layers } * width);
    let now = OffsetDateTime::now_utc();
    let (pending, tasks) = PendingExecution::new(ExecutionId::new(), &plan, now);
    let id = pending.info.id;
    let running = pending.clone().start(now);
    store.create_plan(&plan.clone().into()).await.unwrap();
    store
        .create_execution(&pending.into(), &tasks)
        .await
        .unwrap();
    store
        .update_execution(&running.into(), Revision::FIRST)
        .await
        .unwrap();
    let log = AuditLogId::Execution {
        plan_id: plan.id(),
        execution_id: id,
    };
    let plan_id = plan.id();
    let write = move |store: FileStore, task: Task, expected: Revision, kind: &'static str| async move {
        match mode {
            DagMode::OneWrite => one_write(&store, plan_id, id, task, expected, kind).await,
            DagMode::Apart => {
                let r = store.update_task(id, &task, expected).await.unwrap();
                let step = serde_json::json!({ "step_id": task.step_id() });
                store
                    .append(log, NewAuditEntry::new(kind, step))
                    .await
                    .unwrap();
                r
            }
            DagMode::State => store.update_task(id, &task, expected).await.unwrap(),
        }
    };
    let t = Instant::now();
    for layer in 0..layers {
        let mut set = tokio::task::JoinSet::new();
        for i in layer * width..(layer + 1) * width {
            let (store, plan, tasks) = (store.clone(), plan.clone(), tasks.clone());
            set.spawn(async move {
                let now = OffsetDateTime::now_utc();
                let ctx = build_context(
                    plan.id(),
                    plan.content(),
                    i,
                    &tasks,
                    &ContextLimits::default(),
                )
                .unwrap();
                let Task::Pending(p) = tasks[i].clone() else {
                    unreachable!()
                };
                let claimed = p.start(ctx, holder(), now);
                let r = write(
                    store.clone(),
                    claimed.clone().into(),
                    Revision::FIRST,
                    "task.attempt.started",
                )
                .await;
                tokio::time::sleep(delay).await;
                let done: Task = claimed
                    .complete(TaskSuccess::with_summary("ok"), OffsetDateTime::now_utc())
                    .into();
                write(store, done, r, "task.attempt.completed").await;
            });
        }
        while let Some(done) = set.join_next().await {
            done.unwrap();
        }
    }
    if layers == 0 {
        return 0.0;
    }
    let critical = delay.as_secs_f64() * layers as f64;
    t.elapsed().as_secs_f64() / critical
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let json_path = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let sizes = if quick {
        Sizes {
            rounds: 1,
            small: 10,
            large: 100,
            growth_reps: 1,
            plans: 1_000,
            list_reps: 3,
        }
    } else {
        Sizes {
            rounds: 5,
            small: 100,
            large: 1_000,
            growth_reps: 3,
            plans: 10_000,
            list_reps: 5,
        }
    };
    let base = tempfile::tempdir().unwrap();
    // `--dag-only`: only (e), e.g. under `strace -f -c -e trace=fsync,fdatasync` to count the
    // syncs of one 8×8 DAG.
    if args.iter().any(|a| a == "--dag-only") {
        let value = |name: &str| {
            args.iter()
                .position(|a| a == name)
                .and_then(|i| args.get(i + 1))
        };
        let layers: usize = value("--layers").map_or(8, |l| l.parse().unwrap());
        let modes = match value("--mode") {
            Some(m) => vec![DagMode::parse(m).expect("--mode one-write|apart|state")],
            None => vec![DagMode::OneWrite, DagMode::Apart, DagMode::State],
        };
        let store = FileStore::open(base.path().join("e")).unwrap();
        let delay = Duration::from_millis(100);
        for mode in modes {
            let ratio = dag_ratio(&store, layers, 8, delay, mode).await;
            println!(
                "(e) {layers}×8 DAG of 100 ms steps, store alone, {mode:?}: {ratio:.3}× critical path"
            );
        }
        return;
    }

    // (a) One task vs one raw atomic write, interleaved so both see the same disk.
    let raw_dir = base.path().join("raw");
    std::fs::create_dir_all(&raw_dir).unwrap();
    let sample_task = {
        let plan = approved(1);
        let (_, tasks) =
            PendingExecution::new(ExecutionId::new(), &plan, OffsetDateTime::now_utc());
        serde_json::to_vec_pretty(&tasks[0]).unwrap()
    };
    let store_a = FileStore::open(base.path().join("a")).unwrap();
    let mut raw = Vec::new();
    let mut task = Vec::new();
    // Alternate one raw write and one task, so both see the same disk.
    let samples = if args.iter().any(|a| a == "--claim-only") {
        400
    } else {
        sizes.rounds * 10
    };
    let mut run = Run::new(&store_a, samples).await;
    for i in 0..samples {
        let t = Instant::now();
        raw_atomic_write(&raw_dir, i, &sample_task);
        raw.push(t.elapsed());
        task.push(run.step(&store_a).await);
    }
    run.finish(&store_a).await;
    let raw_med = median(raw);
    let task_med = median(task);
    let ratio_a = task_med.as_secs_f64() / raw_med.as_secs_f64();
    if args.iter().any(|a| a == "--claim-only") {
        println!(
            "raw write {:.3} ms, claim + complete {:.3} ms: (a) {ratio_a:.2} (median of {samples})",
            raw_med.as_secs_f64() * 1e3,
            task_med.as_secs_f64() * 1e3
        );
        return;
    }

    // (b) Growth.
    let store_b = FileStore::open(base.path().join("b")).unwrap();
    let mut small = Vec::new();
    let mut large = Vec::new();
    for _ in 0..sizes.growth_reps {
        let (s, l) = growth_pair(&store_b, sizes.small, sizes.large).await;
        small.push(s);
        large.push(l);
    }
    let (small_med, large_med) = (median(small), median(large));
    let ratio_b = large_med.as_secs_f64() / small_med.as_secs_f64();

    // (c) Listing.
    let list_root = base.path().join("c");
    let seed = FileStore::open(&list_root).unwrap();
    let template = approved(5);
    seed.create_plan(&template.clone().into()).await.unwrap();
    seed_plans(&seed, template.id(), sizes.plans);
    let t = Instant::now();
    let first = FileStore::open(&list_root)
        .unwrap()
        .list_plans()
        .await
        .unwrap();
    let rebuild = t.elapsed();
    assert_eq!(first.items.len(), sizes.plans);
    let mut cold = Vec::new();
    for _ in 0..sizes.list_reps {
        let t = Instant::now();
        let listing = FileStore::open(&list_root)
            .unwrap()
            .list_plans()
            .await
            .unwrap();
        cold.push(t.elapsed());
        assert_eq!(listing.items.len(), sizes.plans);
    }
    let list_med = median(cold);

    // (d) Signing.
    let (sign_us, check_us, plain_seal_ms, signed_seal_ms) =
        signing_costs(base.path(), sizes.rounds).await;
    let ratio_d = signed_seal_ms / plain_seal_ms;

    // (e) The DAG through the store alone.
    let store_e = FileStore::open(base.path().join("e")).unwrap();
    let (layers, width, delay) = if quick {
        (3, 4, Duration::from_millis(10))
    } else {
        (8, 8, Duration::from_millis(100))
    };
    let mut dags: Vec<f64> = Vec::new();
    let mut aparts: Vec<f64> = Vec::new();
    let mut states: Vec<f64> = Vec::new();
    for _ in 0..sizes.growth_reps {
        dags.push(dag_ratio(&store_e, layers, width, delay, DagMode::OneWrite).await);
        aparts.push(dag_ratio(&store_e, layers, width, delay, DagMode::Apart).await);
        states.push(dag_ratio(&store_e, layers, width, delay, DagMode::State).await);
    }
    let med = |mut xs: Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let ratio_e = med(dags);
    let ratio_e_apart = med(aparts);
    let ratio_e_state = med(states);

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "orca-store benchmark{}",
        if quick { " (--quick sizes)" } else { "" }
    );
    println!(
        "  raw atomic write (temp+fsync+rename+dir fsync): {:.3} ms (median of {})",
        ms(raw_med),
        sizes.rounds * 10
    );
    println!(
        "  one task claim + complete (each with its entry): {:.3} ms",
        ms(task_med)
    );
    println!("(a) task ÷ raw write:                             {ratio_a:.2}  (target ≤ 1.5)");
    println!(
        "  {}-task execution, total store time:           {:.1} ms (median of {})",
        sizes.small,
        ms(small_med),
        sizes.growth_reps
    );
    println!(
        "  {}-task execution, total store time:          {:.1} ms",
        sizes.large,
        ms(large_med)
    );
    println!(
        "(b) {} ÷ {} tasks:                             {ratio_b:.2}  (target ≤ {})",
        sizes.large,
        sizes.small,
        if quick { "10.5, for 10×" } else { "10.5" }
    );
    println!(
        "  listing {} plans, no cache (first listing):   {:.1} ms",
        sizes.plans,
        ms(rebuild)
    );
    println!(
        "(c) listing {} plans, fresh FileStore:          {:.1} ms (median of {}; target < 250 ms)",
        sizes.plans,
        ms(list_med),
        sizes.list_reps
    );

    println!("  sign an approval (ed25519):                     {sign_us:.1} µs");
    println!("  check an approval's signature:                  {check_us:.1} µs");
    println!("  seal a 100-entry log, unsigned:                 {plain_seal_ms:.3} ms");
    println!("  seal a 100-entry log, signed:                   {signed_seal_ms:.3} ms");
    println!("(d) signed ÷ unsigned seal:                       {ratio_d:.2}");
    println!(
        "(e) {layers}×{width} DAG of {} ms steps, store alone:        {ratio_e:.3}× critical path (median of {}; target ≤ 1.05)",
        delay.as_millis(),
        sizes.growth_reps
    );
    println!(
        "    the same, task update and audit append apart: {ratio_e_apart:.3}× (as before ADR 0030)"
    );
    println!(
        "    the same without the audit entries:        {ratio_e_state:.3}× (task updates only)"
    );

    if let Some(path) = json_path {
        let figures = serde_json::json!({
            "figures": [
                { "name": "sign_approval_us", "value": sign_us, "unit": "µs",
                  "description": "ed25519 signature of an approval statement" },
                { "name": "check_approval_us", "value": check_us, "unit": "µs",
                  "description": "verifying an approval's signature with the trusted keys" },
                { "name": "seal_unsigned_ms", "value": plain_seal_ms, "unit": "ms",
                  "description": "FileStore::seal of a 100-entry log, unsigned" },
                { "name": "seal_signed_ms", "value": signed_seal_ms, "unit": "ms",
                  "description": "FileStore::seal of a 100-entry log, signed" },
                { "name": "seal_signed_vs_unsigned", "value": ratio_d, "unit": "x",
                  "description": "signed seal / unsigned seal, interleaved" },
                { "name": "store_dag_makespan_ratio_state_only", "value": ratio_e_state, "unit": "x",
                  "description": "the same DAG without the audit entries (task updates only)" },
                { "name": "store_dag_makespan_ratio_apart", "value": ratio_e_apart, "unit": "x",
                  "description": "the same DAG with each task update and its audit append as two durable writes (before one-write transitions)" },
                { "name": "store_dag_makespan_ratio", "value": ratio_e, "unit": "x", "target": 1.05,
                  "description": format!("{layers}x{width} DAG of {} ms steps through FileStore alone (claim and complete: task update and audit entry as one write each): makespan / critical path", delay.as_millis()) },
            ],
            "quick": quick,
            "raw_atomic_write_ms": ms(raw_med),
            "task_claim_complete_ms": ms(task_med),
            "task_vs_raw_write": ratio_a,
            "small_execution_tasks": sizes.small,
            "large_execution_tasks": sizes.large,
            "small_execution_ms": ms(small_med),
            "large_execution_ms": ms(large_med),
            "growth_ratio": ratio_b,
            "plans_listed": sizes.plans,
            "list_plans_uncached_ms": ms(rebuild),
            "list_plans_ms": ms(list_med),
        });
        std::fs::write(&path, serde_json::to_string_pretty(&figures).unwrap()).unwrap();
    }
}
