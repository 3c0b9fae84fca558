//! Crash and concurrency tests with real processes. The test binary re-executes itself as a
//! child (`ORCA_STORE_CHILD=writer|updater|leaser`); children print every acknowledged write
//! to stdout before going on, and the parent checks the store against those acknowledgements.
//!
//! `ORCA_CRASH_TRIALS=50 cargo test -p orca-store --test processes` runs the long version.

#![expect(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use orca_core::{DraftPlan, ExecutionId, Holder, PlanId, StepId};
use orca_store::{
    AuditLogId, AuditStore, ExecutionStore, FileStore, NewAuditEntry, PlanStore, Revision,
    StoreError, VerifyReport,
};
use serde_json::json;

fn main() {
    if let Ok(mode) = std::env::var("ORCA_STORE_CHILD") {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(child(&mode));
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tests: [(&str, Test); 3] = [
        (
            "sigkilled_writer_loses_nothing_acknowledged",
            sigkilled_writer_loses_nothing_acknowledged,
        ),
        (
            "two_processes_updating_one_task_lose_no_update",
            two_processes_updating_one_task_lose_no_update,
        ),
        (
            "two_processes_one_lease_and_a_stale_takeover",
            two_processes_one_lease_and_a_stale_takeover,
        ),
    ];
    run_tests(&rt, &tests);
}

fn ack(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap()
}

async fn child(mode: &str) {
    let store = FileStore::open(env("ORCA_STORE_DIR")).unwrap();
    match mode {
        "writer" => writer(&store).await,
        "updater" => updater(&store).await,
        "leaser" => leaser(&store).await,
        other => panic!("unknown child mode {other}"),
    }
}

fn log_key(log: AuditLogId) -> String {
    match log {
        AuditLogId::Plan { plan_id } => format!("p:{plan_id}"),
        AuditLogId::Runs { plan_id } => format!("r:{plan_id}"),
        AuditLogId::Execution {
            plan_id,
            execution_id,
        } => format!("e:{plan_id}:{execution_id}"),
    }
}

fn parse_log_key(key: &str) -> AuditLogId {
    let parts: Vec<&str> = key.split(':').collect();
    match parts.as_slice() {
        ["p", plan] => AuditLogId::Plan {
            plan_id: plan.parse().unwrap(),
        },
        ["r", plan] => AuditLogId::Runs {
            plan_id: plan.parse().unwrap(),
        },
        ["e", plan, exec] => AuditLogId::Execution {
            plan_id: plan.parse().unwrap(),
            execution_id: exec.parse().unwrap(),
        },
        _ => panic!("bad log key {key}"),
    }
}

/// Writes plans, executions, task transitions, audit entries and seals in a loop until killed.
async fn writer(store: &FileStore) {
    let me = holder("writer");
    let plan = approved("crash", 3);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    ack(&format!("plan {} 1", plan.id()));
    let mut i = 0usize;
    loop {
        // A new execution every few rounds; the previous one's log is sealed.
        let (exec, mut tasks) = new_execution(&plan);
        store.create_execution(&exec, &tasks).await.unwrap();
        ack(&format!("exec {} {}", exec.id(), plan.id()));
        let log = AuditLogId::Execution {
            plan_id: plan.id(),
            execution_id: exec.id(),
        };
        let mut revs = vec![Revision::FIRST; tasks.len()];
        for _ in 0..6 {
            i += 1;
            let mut d: DraftPlan = draft("goal 1");
            store.create_plan(&d.clone().into()).await.unwrap();
            ack(&format!("plan {} 1", d.id()));
            let plan_log = AuditLogId::Plan { plan_id: d.id() };
            let e = store
                .append(plan_log, NewAuditEntry::new("plan.created", json!({})))
                .await
                .unwrap();
            ack(&format!("audit {} {} {}", log_key(plan_log), e.seq, e.hash));
            for r in 1..3u64 {
                d.set_goal(format!("goal {}", r + 1));
                store
                    .update_plan(&d.clone().into(), Revision(r))
                    .await
                    .unwrap();
                ack(&format!("plan {} {}", d.id(), r + 1));
            }
            let k = i % tasks.len();
            let next = next_task(&plan, &tasks, k, &me);
            revs[k] = store.update_task(exec.id(), &next, revs[k]).await.unwrap();
            ack(&format!(
                "task {} {} {}",
                exec.id(),
                next.step_id(),
                revs[k].0
            ));
            tasks[k] = next;
            let data = json!({ "i": i, "pad": "x".repeat(i % 300), "api_key": "secret" });
            let e = store
                .append(log, NewAuditEntry::new("task.transition", data))
                .await
                .unwrap();
            ack(&format!("audit {} {} {}", log_key(log), e.seq, e.hash));
        }
        let seal = store.seal(log).await.unwrap();
        ack(&format!("sealed {} {}", log_key(log), seal.entries));
    }
}

/// Makes `ORCA_STORE_N` successful updates of task `s0`, retrying on conflicts.
async fn updater(store: &FileStore) {
    let me = holder("updater");
    let exec: ExecutionId = env("ORCA_STORE_EXEC").parse().unwrap();
    let n: usize = env("ORCA_STORE_N").parse().unwrap();
    let plan_id = store
        .execution(exec)
        .await
        .unwrap()
        .execution
        .value
        .info()
        .plan_id;
    let plan = match store.plan(plan_id).await.unwrap().value {
        orca_core::Plan::Approved(p) => p,
        other => panic!("{other:?}"),
    };
    let mut done = 0;
    while done < n {
        let snap = store.execution(exec).await.unwrap();
        let tasks = snap.task_values();
        let next = next_task(&plan, &tasks, 0, &me);
        match store.update_task(exec, &next, snap.tasks[0].revision).await {
            Ok(rev) => {
                ack(&format!("ok {}", rev.0));
                done += 1;
            }
            Err(e) if e.is_conflict() => ack("conflict"),
            Err(e) => panic!("{e}"),
        }
    }
}

/// Tries to take the lease; the winner holds it until its stdin closes (or it is killed).
async fn leaser(store: &FileStore) {
    let exec: ExecutionId = env("ORCA_STORE_EXEC").parse().unwrap();
    let me = holder("leaser");
    match store.acquire_lease(exec, &me).await {
        Ok(lease) => {
            ack("won");
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            drop(lease);
        }
        Err(StoreError::LeaseHeld { holder, .. }) => ack(&format!("held {}", holder.pid)),
        Err(e) => panic!("{e}"),
    }
}

fn spawn(mode: &str, dir: &Path, extra: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env("ORCA_STORE_CHILD", mode)
        .env("ORCA_STORE_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Complete lines (with their newline) read from a child's stdout, sent as they come.
fn lines_of(stdout: ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) if line.ends_with('\n') => {
                    if tx.send(line.trim_end().to_owned()).is_err() {
                        break;
                    }
                }
                Ok(_) => break, // a torn, unacknowledged line
            }
        }
    });
    rx
}

fn trials() -> usize {
    std::env::var("ORCA_CRASH_TRIALS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(4)
}

fn sigkilled_writer_loses_nothing_acknowledged(rt: &tokio::runtime::Runtime) {
    let n = trials();
    let mut total_acks = 0;
    let mut seals = 0;
    for trial in 0..n {
        let dir = tempfile::tempdir().unwrap();
        let mut child = spawn("writer", dir.path(), &[]);
        let rx = lines_of(child.stdout.take().unwrap());
        let mut acks = vec![rx.recv_timeout(Duration::from_secs(30)).unwrap()];
        // Let it run a random while (from nothing to a few seals), then kill.
        std::thread::sleep(Duration::from_millis(fastrand::u64(0..800)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        acks.extend(rx.iter());
        total_acks += acks.len();
        seals += acks.iter().filter(|a| a.starts_with("sealed")).count();
        rt.block_on(check_after_crash(dir.path(), &acks))
            .unwrap_or_else(|e| panic!("trial {trial} ({} acks): {e}", acks.len()));
    }
    eprint!("({n} trials, {total_acks} acknowledged writes, {seals} acknowledged seals) ");
}

async fn check_after_crash(dir: &Path, acks: &[String]) -> Result<(), String> {
    let store = FileStore::open(dir).unwrap();
    let mut plans: BTreeMap<PlanId, u64> = BTreeMap::new();
    let mut tasks: BTreeMap<(ExecutionId, StepId), u64> = BTreeMap::new();
    let mut audit: BTreeMap<AuditLogId, Vec<(u64, String)>> = BTreeMap::new();
    let mut sealed: BTreeMap<AuditLogId, u64> = BTreeMap::new();
    let mut execs = BTreeSet::new();
    for line in acks {
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "plan" => {
                plans.insert(f[1].parse().unwrap(), f[2].parse().unwrap());
            }
            "exec" => {
                execs.insert(f[1].parse::<ExecutionId>().unwrap());
            }
            "task" => {
                tasks.insert(
                    (f[1].parse().unwrap(), f[2].parse().unwrap()),
                    f[3].parse().unwrap(),
                );
            }
            "audit" => audit
                .entry(parse_log_key(f[1]))
                .or_default()
                .push((f[2].parse().unwrap(), f[3].to_owned())),
            "sealed" => {
                sealed.insert(parse_log_key(f[1]), f[2].parse().unwrap());
            }
            other => return Err(format!("unknown ack {other}")),
        }
    }
    // Every file parses: the listings report no problem, and every JSON document parses.
    let listing = store.list_plans().await.map_err(|e| e.to_string())?;
    if !listing.problems.is_empty() {
        return Err(format!("unreadable plans: {:?}", listing.problems));
    }
    let listed = store
        .list_executions(None)
        .await
        .map_err(|e| e.to_string())?;
    if !listed.problems.is_empty() {
        return Err(format!("unreadable executions: {:?}", listed.problems));
    }
    let mut files = Vec::new();
    walk(&dir.join(".orca"), &mut files);
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".json") && !name.starts_with('.') {
            serde_json::from_slice::<serde_json::Value>(&std::fs::read(f).unwrap())
                .map_err(|e| format!("{} does not parse: {e}", f.display()))?;
        }
    }
    for (id, acked) in &plans {
        let stored = store
            .plan(*id)
            .await
            .map_err(|e| format!("acknowledged plan {id} lost: {e}"))?;
        if stored.revision.0 < *acked {
            return Err(format!(
                "plan {id} went back from revision {acked} to {}",
                stored.revision
            ));
        }
        if let orca_core::Plan::Draft(_) = &stored.value
            && stored.value.content().goal != format!("goal {}", stored.revision.0)
        {
            return Err(format!(
                "plan {id}: content does not match revision {}",
                stored.revision
            ));
        }
    }
    for id in &execs {
        let snap = store
            .execution(*id)
            .await
            .map_err(|e| format!("acknowledged execution {id} lost: {e}"))?;
        for t in &snap.tasks {
            let acked = tasks
                .get(&(*id, t.value.step_id().clone()))
                .copied()
                .unwrap_or(1);
            if t.revision.0 < acked {
                return Err(format!(
                    "task {} went back from {acked} to {}",
                    t.value.step_id(),
                    t.revision
                ));
            }
        }
    }
    for (log, acked) in &audit {
        let entries = store.entries(*log).await.map_err(|e| e.to_string())?;
        for (seq, hash) in acked {
            let stored = entries
                .get(usize::try_from(*seq).unwrap())
                .ok_or(format!("acknowledged entry {seq} of {log} lost"))?;
            if stored.hash.to_string() != *hash {
                return Err(format!(
                    "entry {seq} of {log} differs from the acknowledged one"
                ));
            }
        }
        match store.verify(*log).await.map_err(|e| e.to_string())? {
            VerifyReport::Intact { sealed: s, entries } => {
                if let Some(n) = sealed.get(log)
                    && !(s && entries == *n)
                {
                    return Err(format!(
                        "{log} was sealed with {n} entries, verify says {entries} sealed={s}"
                    ));
                }
            }
            other => return Err(format!("{log} does not verify: {other:?}")),
        }
        // Unless sealed (acknowledged or not), the next append works after a possibly torn
        // tail, and the log still verifies.
        if !sealed.contains_key(log) && !store.seal_path(*log).exists() {
            store
                .append(*log, NewAuditEntry::new("recovered", json!({})))
                .await
                .map_err(|e| e.to_string())?;
            if !store
                .verify(*log)
                .await
                .map_err(|e| e.to_string())?
                .is_intact()
            {
                return Err(format!("{log} does not verify after the recovery append"));
            }
        }
    }
    if files
        .iter()
        .any(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains("\"secret\"")))
    {
        return Err("a secret reached a file".into());
    }
    Ok(())
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            walk(&e.path(), out);
        } else {
            out.push(e.path());
        }
    }
}

fn two_processes_updating_one_task_lose_no_update(rt: &tokio::runtime::Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let plan = approved("race", 1);
    let (exec, tasks) = new_execution(&plan);
    rt.block_on(async {
        store.create_plan(&plan_of(&plan)).await.unwrap();
        store.create_execution(&exec, &tasks).await.unwrap();
    });
    let n = 25;
    let extra = [
        ("ORCA_STORE_EXEC", exec.id().to_string()),
        ("ORCA_STORE_N", n.to_string()),
    ];
    let mut children: Vec<Child> = (0..2)
        .map(|_| spawn("updater", dir.path(), &extra))
        .collect();
    let outputs: Vec<Vec<String>> = children
        .iter_mut()
        .map(|c| lines_of(c.stdout.take().unwrap()))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|rx| rx.iter().collect())
        .collect();
    for c in &mut children {
        assert!(c.wait().unwrap().success());
    }
    let mut revisions = BTreeSet::new();
    let mut conflicts = 0;
    for out in &outputs {
        for line in out {
            match line.split_once(' ') {
                Some(("ok", rev)) => assert!(
                    revisions.insert(rev.parse::<u64>().unwrap()),
                    "revision {rev} written twice"
                ),
                _ if line == "conflict" => conflicts += 1,
                _ => panic!("unexpected {line}"),
            }
        }
    }
    assert_eq!(revisions.len(), 2 * n);
    let stored = rt.block_on(store.execution(exec.id())).unwrap();
    // Every successful write is there: revision 1 + one per acknowledged update.
    assert_eq!(stored.tasks[0].revision, Revision(1 + 2 * n as u64));
    assert_eq!(
        revisions.iter().copied().collect::<Vec<_>>(),
        (2..=1 + 2 * n as u64).collect::<Vec<_>>()
    );
    eprint!("({conflicts} conflicts surfaced and retried) ");
}

fn two_processes_one_lease_and_a_stale_takeover(rt: &tokio::runtime::Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let plan = approved("lease", 1);
    let (exec, tasks) = new_execution(&plan);
    rt.block_on(async {
        store.create_plan(&plan_of(&plan)).await.unwrap();
        store.create_execution(&exec, &tasks).await.unwrap();
    });
    let extra = [("ORCA_STORE_EXEC", exec.id().to_string())];
    let mut children: Vec<Child> = (0..2)
        .map(|_| spawn("leaser", dir.path(), &extra))
        .collect();
    let first: Vec<String> = children
        .iter_mut()
        .map(|c| {
            lines_of(c.stdout.take().unwrap())
                .recv_timeout(Duration::from_secs(30))
                .unwrap()
        })
        .collect();
    let winners: Vec<usize> = (0..2).filter(|i| first[*i] == "won").collect();
    assert_eq!(winners.len(), 1, "{first:?}");
    let (w, l) = (winners[0], 1 - winners[0]);
    let winner_pid = children[w].id();
    assert_eq!(first[l], format!("held {winner_pid}"));
    assert!(children[l].wait().unwrap().success());

    let info = rt.block_on(store.lease(exec.id())).unwrap().unwrap();
    assert_eq!((info.holder.pid, info.stale), (winner_pid, false));
    children[w].kill().unwrap(); // SIGKILL: the kernel drops the flock, the record stays.
    children[w].wait().unwrap();
    let info = rt.block_on(store.lease(exec.id())).unwrap().unwrap();
    assert_eq!((info.holder.pid, info.stale), (winner_pid, true));
    let me: Holder = holder("resumer");
    let lease = rt.block_on(store.acquire_lease(exec.id(), &me)).unwrap();
    assert_eq!(lease.took_over().map(|t| t.holder.pid), Some(winner_pid));
    drop(lease);
}
