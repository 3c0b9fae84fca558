//! The task write-ahead log (ADR 0015) under attack.
//!
//! - `sigkilled_batch_writer_loses_nothing_acknowledged`: a child process updates 16 tasks of
//!   one execution in parallel (so transitions are group-committed), every other transition
//!   with its audit entry as one write (`update_task_with_audit`), and prints every
//!   acknowledged revision and entry; the parent SIGKILLs it at a random moment, mid-batch as
//!   often as not, then counts acknowledged writes LOST (stored revision behind the
//!   acknowledgement, an acknowledged entry missing or different, before and after the next
//!   writer compacts the log) and TORN records READ (a read that fails, a log that does not
//!   verify, or a complete log line that is not a record). While the child writes, this
//!   process reads the execution and verifies its audit log in a loop (as `exec show`,
//!   `watch` or `audit verify` from another shell would) and counts failed reads and tasks
//!   that went BACKWARDS.
//! - `log_tampering_is_repaired_or_detected`: the task snapshot emptied, a record in it edited
//!   (superseded, or at a logged revision: detected), a garbage line, a torn tail, reordered
//!   records, an emptied log (the task back at the snapshot's revision), a deleted snapshot.
//!
//! `ORCA_CRASH_TRIALS=50 cargo test -p orca-store --test wal` runs the long version.

#![expect(clippy::unwrap_used, clippy::print_stderr, reason = "tests")]

#[path = "it/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use orca_core::{ExecutionId, StepId, Task};
use orca_store::audit::NewAuditEntry;
use orca_store::{
    AuditLogId, AuditStore, ExecutionStore, FileStore, PlanStore, Revision, StoreError,
    TaskTransition, WriteOrder,
};

const TASKS: usize = 16;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if std::env::var("ORCA_WAL_CHILD").is_ok() {
        rt.block_on(batch_writer(&std::env::var("ORCA_STORE_DIR").unwrap()));
        return;
    }
    let tests: [(&str, Test); 2] = [
        (
            "sigkilled_batch_writer_loses_nothing_acknowledged",
            sigkilled_batch_writer_loses_nothing_acknowledged,
        ),
        (
            "log_tampering_is_repaired_or_detected",
            log_tampering_is_repaired_or_detected,
        ),
    ];
    run_tests(&rt, &tests);
}

/// Child: one execution of [`TASKS`] steps, every step updated in its own loop, forever.
async fn batch_writer(dir: &str) {
    let store = FileStore::open(dir).unwrap();
    let plan = approved("wal crash", TASKS);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    let id = exec.id();
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "exec {id}").unwrap();
        out.flush().unwrap();
    }
    let tasks = Arc::new(tasks);
    let mut handles = tokio::task::JoinSet::new();
    for k in 0..TASKS {
        let store = store.clone();
        let plan = plan.clone();
        let mut tasks = (*tasks).clone();
        handles.spawn(async move {
            let me = holder("wal");
            let mut rev = Revision::FIRST;
            loop {
                let next = next_task(&plan, &tasks, k, &me);
                let step = next.step_id().clone();
                // Every other transition carries its audit entry (one write); the others are
                // plain task updates (both kinds of record share the log and its batches).
                let seq = if rev.0 % 2 == 1 {
                    let entry = NewAuditEntry::new(
                        "test.transition",
                        serde_json::json!({ "step": step, "revision": rev.0 + 1 }),
                    );
                    let written = store
                        .update_task_with_audit(
                            &store,
                            TaskTransition {
                                plan_id: plan.id(),
                                execution_id: id,
                                task: next.clone(),
                                expected: rev,
                                entry,
                                order: WriteOrder::StateFirst,
                            },
                        )
                        .await
                        .unwrap();
                    rev = written.revision;
                    Some(written.entry.seq)
                } else {
                    rev = store.update_task(id, &next, rev).await.unwrap();
                    None
                };
                tasks[k] = next;
                let mut out = std::io::stdout().lock();
                match seq {
                    Some(seq) => writeln!(out, "task {step} {} entry {seq}", rev.0).unwrap(),
                    None => writeln!(out, "task {step} {}", rev.0).unwrap(),
                }
                out.flush().unwrap();
            }
        });
    }
    // Runs until killed: the tasks never end (a panic in one ends the child, and the parent
    // then finds the acknowledgements stop).
    if let Some(done) = handles.join_next().await {
        done.unwrap();
    }
}

fn trials() -> usize {
    std::env::var("ORCA_CRASH_TRIALS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(6)
}

fn wal_path(store: &FileStore, id: ExecutionId) -> PathBuf {
    let snap_plan =
        std::fs::read_to_string(store.root().join("executions").join(id.to_string())).unwrap();
    store
        .execution_path(snap_plan.trim().parse().unwrap(), id)
        .with_extension("")
        .join("tasks.wal.jsonl")
}

fn sigkilled_batch_writer_loses_nothing_acknowledged(rt: &tokio::runtime::Runtime) {
    let (mut acked_total, mut lost, mut torn, mut torn_tails, mut records) = (0, 0, 0, 0, 0);
    let (mut live_reads, mut backwards) = (0, 0);
    let (mut acked_entries, mut lost_entries) = (0, 0);
    for trial in 0..trials() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env("ORCA_WAL_CHILD", "1")
            .env("ORCA_STORE_DIR", dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(n) if n > 0 && line.ends_with('\n') => lines.push(line.trim().to_owned()),
                    _ => break lines,
                }
            }
        });
        // Wait for the execution, then a random while of parallel transitions, then SIGKILL.
        // (The index file `.orca/executions/{id}` appears with the execution.)
        let index = dir.path().join(".orca").join("executions");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let live: ExecutionId = loop {
            let found = std::fs::read_dir(&index)
                .into_iter()
                .flatten()
                .find_map(|e| e.ok()?.file_name().to_str()?.parse().ok());
            if let Some(id) = found {
                break id;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the child never started"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        // Meanwhile another process (this one) reads the execution as `exec show` / `watch`
        // would: every read must succeed, and no task may go back to an older revision.
        let watcher = FileStore::open(dir.path()).unwrap();
        let until = std::time::Instant::now() + Duration::from_millis(fastrand::u64(20..400));
        let mut seen: BTreeMap<StepId, Revision> = BTreeMap::new();
        let live_log = rt
            .block_on(watcher.execution_header(live))
            .map(|h| AuditLogId::Execution {
                plan_id: h.value.info().plan_id,
                execution_id: live,
            })
            .unwrap();
        while std::time::Instant::now() < until {
            match rt.block_on(watcher.verify(live_log)) {
                Ok(report) if report.is_intact() => live_reads += 1,
                other => {
                    eprintln!("trial {trial}: a live verify failed: {other:?}");
                    torn += 1;
                }
            }
            match rt.block_on(watcher.execution(live)) {
                Ok(snap) => {
                    live_reads += 1;
                    for t in snap.tasks {
                        let last = seen.entry(t.value.step_id().clone()).or_insert(t.revision);
                        if t.revision < *last {
                            backwards += 1;
                        }
                        *last = t.revision;
                    }
                }
                Err(e) => {
                    eprintln!("trial {trial}: a live read failed: {e}");
                    torn += 1;
                }
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let lines = reader.join().unwrap();
        let Some(id) = lines
            .iter()
            .find_map(|l| l.strip_prefix("exec "))
            .map(|s| s.parse::<ExecutionId>().unwrap())
        else {
            continue;
        };
        let mut acked: BTreeMap<StepId, u64> = BTreeMap::new();
        // Acknowledged entries: seq → (step, revision).
        let mut entries: BTreeMap<u64, (String, u64)> = BTreeMap::new();
        for l in &lines {
            let f: Vec<&str> = l.split(' ').collect();
            if f[0] == "task" {
                let rev: u64 = f[2].parse().unwrap();
                let e = acked.entry(f[1].parse().unwrap()).or_default();
                *e = (*e).max(rev);
                acked_total += 1;
                if f.get(3) == Some(&"entry") {
                    entries.insert(f[4].parse().unwrap(), (f[1].to_owned(), rev));
                }
            }
        }
        acked_entries += entries.len();
        // Every acknowledged entry is in the log as read, at its seq, and the log verifies.
        let check_entries = |store: &FileStore, when: &str| -> usize {
            rt.block_on(async {
                let log = AuditLogId::Execution {
                    plan_id: store
                        .execution_header(id)
                        .await
                        .unwrap()
                        .value
                        .info()
                        .plan_id,
                    execution_id: id,
                };
                let report = store.verify(log).await.unwrap();
                assert!(report.is_intact(), "trial {trial} ({when}): {report:?}");
                let stored = store.entries(log).await.unwrap();
                entries
                    .iter()
                    .filter(|(seq, (step, rev))| {
                        let found = usize::try_from(**seq).ok().and_then(|i| stored.get(i));
                        let ok = found.is_some_and(|e| {
                            e.data["step"] == step.as_str() && e.data["revision"] == *rev
                        });
                        if !ok {
                            eprintln!("trial {trial} ({when}): entry {seq} lost");
                        }
                        !ok
                    })
                    .count()
            })
        };
        let store = FileStore::open(dir.path()).unwrap();
        let wal = wal_path(&store, id);
        let bytes = std::fs::read(&wal).unwrap_or_default();
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            torn_tails += 1;
        }
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            records += 1;
            if serde_json::from_slice::<serde_json::Value>(line).is_err() && bytes.ends_with(b"\n")
            {
                torn += 1;
            }
        }
        lost_entries += check_entries(&store, "after the kill");
        rt.block_on(async {
            match store.execution(id).await {
                Err(e) => {
                    eprintln!("trial {trial}: reading after the kill failed: {e}");
                    torn += 1;
                }
                Ok(snap) => {
                    for t in &snap.tasks {
                        let want = acked.get(t.value.step_id()).copied().unwrap_or(1);
                        if t.revision.0 < want {
                            eprintln!(
                                "trial {trial}: {} acknowledged at {want}, stored {}",
                                t.value.step_id(),
                                t.revision
                            );
                            lost += 1;
                        }
                    }
                    // The next writer takes over: compaction, then a transition on every task.
                    let lease = store.acquire_lease(id, &holder("after")).await.unwrap();
                    let after = store.execution(id).await.unwrap();
                    assert_eq!(after.tasks, snap.tasks, "compaction changed what is read");
                    assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0, "log compacted");
                    let plan = match store
                        .plan(after.execution.value.info().plan_id)
                        .await
                        .unwrap()
                        .value
                    {
                        orca_core::Plan::Approved(p) => p,
                        other => panic!("{other:?}"),
                    };
                    let values = after.task_values();
                    for (k, t) in after.tasks.iter().enumerate() {
                        let next = next_task(&plan, &values, k, &holder("after"));
                        store.update_task(id, &next, t.revision).await.unwrap();
                    }
                    drop(lease);
                }
            }
        });
        // The log was compacted by the lease: the audit file alone holds every entry now.
        lost_entries += check_entries(&FileStore::open(dir.path()).unwrap(), "after compaction");
    }
    eprint!(
        "({} trials: {acked_total} acknowledged transitions, {acked_entries} of them with their audit entry, {records} log records, {torn_tails} torn tails cut, {live_reads} reads by another process while writing; lost {lost} transitions and {lost_entries} entries, torn read {torn}, gone backwards {backwards}) ",
        trials()
    );
    assert_eq!(
        (lost, lost_entries, torn, backwards),
        (0, 0, 0, 0),
        "acknowledged writes lost, torn records read, or a reader saw a task go back"
    );
}

/// A store with one execution whose step `s0` went through three transitions (revision 4):
/// its snapshot holds revision 1, its write-ahead log revisions 2 to 4.
struct Fixture {
    _dir: tempfile::TempDir,
    store: FileStore,
    id: ExecutionId,
    step: StepId,
    /// The snapshot as written when the execution was created.
    snapshot: Vec<u8>,
    wal: PathBuf,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let plan = approved("wal tamper", 2);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, mut tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    let id = exec.id();
    let step = tasks[0].step_id().clone();
    let snapshot = std::fs::read(store.tasks_path(plan.id(), id)).unwrap();
    let me = holder("t");
    let mut rev = Revision::FIRST;
    for _ in 0..3 {
        let next = next_task(&plan, &tasks, 0, &me);
        rev = store.update_task(id, &next, rev).await.unwrap();
        tasks[0] = next;
    }
    let wal = wal_path(&store, id);
    Fixture {
        _dir: dir,
        store,
        id,
        step,
        snapshot,
        wal,
    }
}

impl Fixture {
    fn snapshot_file(&self) -> PathBuf {
        self.wal.with_file_name("tasks.json")
    }

    /// The snapshot with `s0`'s record replaced by `record`.
    fn snapshot_with(&self, record: serde_json::Value) -> String {
        let mut doc: serde_json::Value = serde_json::from_slice(&self.snapshot).unwrap();
        let tasks = doc["tasks"].as_array_mut().unwrap();
        let at = tasks
            .iter()
            .position(|t| t["step_id"] == self.step.as_str())
            .unwrap();
        tasks[at] = record;
        serde_json::to_string_pretty(&doc).unwrap()
    }

    /// The write-ahead log's record of `s0` at `revision`, as a snapshot record.
    fn logged(&self, revision: u64) -> serde_json::Value {
        let line = lines(&self.wal)
            .into_iter()
            .map(|l| serde_json::from_str::<serde_json::Value>(&l).unwrap())
            .find(|r| r["step"] == self.step.as_str() && r["revision"] == revision)
            .unwrap();
        let mut record = serde_json::Map::new();
        record.insert("revision".into(), revision.into());
        record.extend(line["task"].as_object().unwrap().clone());
        serde_json::Value::Object(record)
    }

    /// What a fresh store (another process) reads.
    async fn read(&self) -> Result<(u64, Task), StoreError> {
        let fresh = FileStore::open(self.store.root().parent().unwrap()).unwrap();
        let t = fresh.task(self.id, &self.step).await?;
        Ok((t.revision.0, t.value))
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    std::fs::write(
        path,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
}

fn log_tampering_is_repaired_or_detected(rt: &tokio::runtime::Runtime) {
    rt.block_on(async {
        let mut repaired = 0;
        let mut detected = 0;
        let mut harmless = 0;

        // The snapshot emptied (a file lost behind orca's back): the task the log holds is
        // read from the log.
        let f = fixture().await;
        let (_, good) = f.read().await.unwrap();
        std::fs::write(f.snapshot_file(), b"").unwrap();
        assert_eq!(
            f.read().await.unwrap(),
            (4, good.clone()),
            "emptied snapshot repaired"
        );
        repaired += 1;

        // The snapshot's record replaced (a valid task, another state) at a revision the log
        // has gone past: superseded.
        let mut edited = f.logged(2);
        edited["revision"] = serde_json::json!(1);
        std::fs::write(f.snapshot_file(), f.snapshot_with(edited)).unwrap();
        assert_eq!(f.read().await.unwrap(), (4, good.clone()), "superseded");
        harmless += 1;
        // Control: the replaced record is a valid task (read as it is when the log is empty).
        let log = std::fs::read(&f.wal).unwrap();
        std::fs::write(&f.wal, b"").unwrap();
        let (rev, control) = f.read().await.unwrap();
        assert_eq!(rev, 1);
        assert_ne!(control, good);
        std::fs::write(&f.wal, &log).unwrap();

        // A record of a revision the log holds, but not what the log recorded: detected.
        let three = f.logged(3);
        let forged = three.to_string();
        assert!(forged.contains("boom"), "{forged}");
        let forged: serde_json::Value =
            serde_json::from_str(&forged.replace("boom", "forged")).unwrap();
        std::fs::write(f.snapshot_file(), f.snapshot_with(forged)).unwrap();
        match f.read().await {
            Err(StoreError::Corrupt { path, message }) => {
                assert_eq!(path, f.snapshot_file(), "{message}");
                assert!(message.contains("task s0"), "{message}");
                detected += 1;
            }
            other => panic!("an edited record of a logged revision was read: {other:?}"),
        }
        // The log's own record of that revision in the snapshot: the same, read as the log's.
        std::fs::write(f.snapshot_file(), f.snapshot_with(three)).unwrap();
        assert_eq!(f.read().await.unwrap(), (4, good.clone()), "same record");
        harmless += 1;
        std::fs::write(f.snapshot_file(), &f.snapshot).unwrap();

        // A complete line that is not a record: corruption, naming the log.
        let orig = lines(&f.wal);
        let mut bad = orig.clone();
        bad.insert(1, "{\"step\": \"s0\", \"garbage\": true}".into());
        write_lines(&f.wal, &bad);
        match f.read().await {
            Err(StoreError::Corrupt { path, .. }) if path == f.wal => detected += 1,
            other => panic!("a garbage record was read: {other:?}"),
        }

        // A torn tail (an append that never returned): ignored, cut by the next append.
        write_lines(&f.wal, &orig);
        let mut torn = std::fs::read(&f.wal).unwrap();
        torn.extend_from_slice(b"{\"step\":\"s0\",\"revis");
        std::fs::write(&f.wal, &torn).unwrap();
        assert_eq!(
            f.read().await.unwrap(),
            (4, good.clone()),
            "torn tail ignored"
        );
        harmless += 1;

        // Reordered records: the newest revision wins whatever the order.
        let mut rev = orig.clone();
        rev.reverse();
        write_lines(&f.wal, &rev);
        assert_eq!(f.read().await.unwrap(), (4, good.clone()), "reordered");
        harmless += 1;

        // An emptied log takes the task back to the snapshot's revision: the store cannot
        // tell an older state from a rolled-back one. The audit log's copy of every entry and
        // the service's checks against it do (the tamper catalogue's "roll back the
        // write-ahead log of a running execution"); an ended execution's log is empty (below).
        std::fs::write(&f.wal, b"").unwrap();
        assert_eq!(f.read().await.unwrap().0, 1, "emptied log");
        // A forged or edited record is read like an edited snapshot record: the audit log's
        // checks (result digest, reachable states) judge it.
        write_lines(&f.wal, &orig);

        // The next update after a torn tail works, and the log stays readable.
        std::fs::write(&f.wal, &torn).unwrap();
        let snap = f.store.execution(f.id).await.unwrap();
        let values = snap.task_values();
        let plan = match f
            .store
            .plan(snap.execution.value.info().plan_id)
            .await
            .unwrap()
            .value
        {
            orca_core::Plan::Approved(p) => p,
            other => panic!("{other:?}"),
        };
        let next = next_task(&plan, &values, 0, &holder("t"));
        f.store.update_task(f.id, &next, Revision(4)).await.unwrap();
        assert_eq!(f.read().await.unwrap(), (5, next), "after a cut torn tail");
        assert!(std::fs::read(&f.wal).unwrap().ends_with(b"\n"));

        // A deleted snapshot is not recreated by the compaction a new lease runs.
        std::fs::remove_file(f.snapshot_file()).unwrap();
        match f.store.acquire_lease(f.id, &holder("t")).await {
            Err(StoreError::Corrupt { path, .. }) if path == f.snapshot_file() => detected += 1,
            other => panic!("a deleted snapshot was recreated: {other:?}"),
        }
        assert!(!f.snapshot_file().exists());

        eprint!("(repaired {repaired}, detected {detected}, harmless {harmless}) ");
    });
}
