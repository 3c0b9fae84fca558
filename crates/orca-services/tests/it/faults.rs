//! Fault injection beside the kill campaign (`cargo xtask torture`).
//!
//! A full disk or a read-only `.orca/`: tests run as root, where `chmod` does not stop writes,
//! and mounting a small tmpfs needs privileges a test must not assume. So the disk is simulated
//! by a store wrapper over the real [`FileStore`] whose writes fail with `ENOSPC` while the
//! "disk" is full (`cargo xtask torture` adds a real tmpfs run when it can mount one). Checked:
//! a clear error naming what was being written; the last good state intact (every record reads
//! back, the audit log verifies); `resume` completes once space is back.
//!
//! Also: an automatic retry waiting out its backoff when the runner stops is not lost.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use orca_core::{Execution, ExecutionId, ExecutionStage, Holder, Plan, PlanId, Task, TaskStatus};
use orca_services::{NoHuman, Quiet, RunOutcome};
use orca_store::audit::{AuditEntry, NewAuditEntry, Seal, VerifyReport};
use orca_store::{
    AuditLogId, AuditStore, ExecutionSnapshot, ExecutionStore, ExecutionSummary, FileStore, Lease,
    LeaseInfo, Listing, PlanStore, PlanSummary, ResourceGuard, Revision, Store, StoreError,
    Versioned,
};
use support::*;
use tokio_util::sync::CancellationToken;

/// A file store on a "disk" that can fill up: once `full` is set, every write fails with
/// `ENOSPC` after `writes_left` more writes succeed. Also a slow one: with `slow_replies`, the
/// write of a task's end (completed or failed) takes that long; when each task's claim and
/// end were written is kept in `written`.
struct FullDisk {
    inner: FileStore,
    full: AtomicBool,
    writes_left: AtomicUsize,
    slow_replies: Option<Duration>,
    written: std::sync::Mutex<Vec<(String, TaskStatus, std::time::Instant)>>,
    /// Seals that fail (the disk full at that moment) before seals work again.
    seals_failing: AtomicUsize,
    /// Written (a task's transition with its entry) when the log is next read: another
    /// process writing between a reader's two reads.
    before_entries: std::sync::Mutex<Option<orca_store::TaskTransition>>,
}

impl FullDisk {
    fn new(inner: FileStore) -> Self {
        Self {
            inner,
            full: AtomicBool::new(false),
            writes_left: AtomicUsize::new(0),
            slow_replies: None,
            written: std::sync::Mutex::default(),
            seals_failing: AtomicUsize::new(0),
            before_entries: std::sync::Mutex::default(),
        }
    }

    fn write(&self, what: &str) -> Result<(), StoreError> {
        if self.full.load(Ordering::SeqCst) {
            let left = self.writes_left.load(Ordering::SeqCst);
            if left == 0 {
                return Err(StoreError::backend(
                    format!("writing {what}"),
                    std::io::Error::from_raw_os_error(libc_enospc()),
                ));
            }
            self.writes_left.store(left - 1, Ordering::SeqCst);
        }
        Ok(())
    }
}

const fn libc_enospc() -> i32 {
    28 // ENOSPC on Linux
}

#[async_trait]
impl PlanStore for FullDisk {
    async fn create_plan(&self, plan: &Plan) -> Result<Revision, StoreError> {
        self.write("a plan")?;
        self.inner.create_plan(plan).await
    }
    async fn plan(&self, id: PlanId) -> Result<Versioned<Plan>, StoreError> {
        self.inner.plan(id).await
    }
    async fn update_plan(&self, plan: &Plan, expected: Revision) -> Result<Revision, StoreError> {
        self.write("a plan")?;
        self.inner.update_plan(plan, expected).await
    }
    async fn list_plans(&self) -> Result<Listing<PlanSummary>, StoreError> {
        self.inner.list_plans().await
    }
}

#[async_trait]
impl ExecutionStore for FullDisk {
    fn stored_form(&self, document: serde_json::Value) -> serde_json::Value {
        self.inner.stored_form(document)
    }
    async fn create_execution(&self, e: &Execution, tasks: &[Task]) -> Result<(), StoreError> {
        self.write("an execution")?;
        self.inner.create_execution(e, tasks).await
    }
    async fn execution(&self, id: ExecutionId) -> Result<ExecutionSnapshot, StoreError> {
        self.inner.execution(id).await
    }
    async fn update_execution(
        &self,
        e: &Execution,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        self.write("an execution header")?;
        self.inner.update_execution(e, expected).await
    }
    async fn update_task(
        &self,
        execution: ExecutionId,
        task: &Task,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        self.write(&format!("task {}", task.step_id()))?;
        if let (Task::Completed(_) | Task::Failed(_), Some(slow)) = (task, self.slow_replies) {
            tokio::time::sleep(slow).await;
        }
        let revision = self.inner.update_task(execution, task, expected).await?;
        self.written.lock().unwrap().push((
            task.step_id().to_string(),
            task.status(),
            std::time::Instant::now(),
        ));
        Ok(revision)
    }
    async fn list_executions(
        &self,
        plan: Option<PlanId>,
    ) -> Result<Listing<ExecutionSummary>, StoreError> {
        self.inner.list_executions(plan).await
    }
    async fn acquire_lease(&self, e: ExecutionId, holder: &Holder) -> Result<Lease, StoreError> {
        self.write("a lease")?;
        self.inner.acquire_lease(e, holder).await
    }
    async fn lease(&self, e: ExecutionId) -> Result<Option<LeaseInfo>, StoreError> {
        self.inner.lease(e).await
    }
    async fn try_lock_resources(
        &self,
        names: &[String],
        holder: &Holder,
    ) -> Result<Option<ResourceGuard>, StoreError> {
        self.inner.try_lock_resources(names, holder).await
    }
}

#[async_trait]
impl AuditStore for FullDisk {
    async fn append(
        &self,
        log: AuditLogId,
        entry: NewAuditEntry,
    ) -> Result<AuditEntry, StoreError> {
        self.write("an audit entry")?;
        self.inner.append(log, entry).await
    }
    async fn seal(&self, log: AuditLogId) -> Result<Seal, StoreError> {
        self.write("an audit seal")?;
        if self
            .seals_failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(StoreError::backend(
                "writing an audit seal",
                std::io::Error::from_raw_os_error(libc_enospc()),
            ));
        }
        self.inner.seal(log).await
    }
    async fn entries(&self, log: AuditLogId) -> Result<Vec<AuditEntry>, StoreError> {
        let meanwhile = self.before_entries.lock().unwrap().take();
        if let Some(t) = meanwhile {
            self.inner.update_task_with_audit(&self.inner, t).await?;
        }
        self.inner.entries(log).await
    }
    async fn verify(&self, log: AuditLogId) -> Result<VerifyReport, StoreError> {
        self.inner.verify(log).await
    }
    async fn audit_logs(&self) -> Result<Vec<AuditLogId>, StoreError> {
        self.inner.audit_logs().await
    }
}

fn chain(n: usize) -> Vec<orca_core::Step> {
    (0..n)
        .map(|i| {
            let s = step(&format!("s{i}"), "coder");
            if i == 0 {
                s
            } else {
                s.with_depends_on([id(&format!("s{}", i - 1))])
            }
        })
        .collect()
}

async fn verify_all(store: &dyn Store) {
    for log in store.audit_logs().await.unwrap() {
        let report = store.verify(log).await.unwrap();
        assert!(report.is_intact(), "{log}: {report:?}");
    }
}

#[tokio::test]
async fn full_disk_mid_run_gives_a_clear_error_keeps_the_last_good_state_and_resumes() {
    for writes_before_full in [0usize, 3, 7, 12] {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(FullDisk::new(FileStore::open(dir.path()).unwrap()));
        let agents = ScriptedAgents::new();
        let o = orca(disk.clone(), agents, Arc::new(NoHuman));
        let p = o
            .planning()
            .create_proposal(content(chain(5)), None)
            .await
            .unwrap();
        o.planning().approve(p.id(), "tester", None).await.unwrap();
        let (_, exec) = o.executions().create(p.id()).await.unwrap();

        // The disk fills up after a few writes of the run.
        disk.writes_left.store(writes_before_full, Ordering::SeqCst);
        disk.full.store(true, Ordering::SeqCst);
        let err = o
            .runner(config(), Arc::new(Quiet))
            .run(exec, CancellationToken::new())
            .await
            .unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("writing "),
            "{writes_before_full}: {message}"
        );
        let chain = {
            let mut s = message.clone();
            let mut src = std::error::Error::source(&err);
            while let Some(e) = src {
                s.push_str(&format!(": {e}"));
                src = e.source();
            }
            s
        };
        assert!(chain.contains("No space left on device"), "{chain}");

        // The last good state: every record reads back (through a fresh store), the audit log
        // verifies, and nothing is marked done that was not.
        let fresh = FileStore::open(dir.path()).unwrap();
        let snap = fresh.execution(exec).await.unwrap();
        assert!(!snap.execution.value.stage().is_terminal());
        let done = snap
            .tasks
            .iter()
            .filter(|t| t.value.status() == TaskStatus::Completed)
            .count();
        assert!(
            done < 5,
            "{writes_before_full}: {done} completed on a full disk"
        );
        verify_all(&fresh).await;

        // Space is back: resume completes, and the record verifies.
        disk.full.store(false, Ordering::SeqCst);
        let report = o
            .runner(config(), Arc::new(Quiet))
            .run(exec, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(
            report.outcome,
            RunOutcome::Completed,
            "{writes_before_full}"
        );
        let snap = fresh.execution(exec).await.unwrap();
        assert_eq!(snap.execution.value.stage(), ExecutionStage::Completed);
        assert!(
            snap.tasks
                .iter()
                .all(|t| t.value.status() == TaskStatus::Completed)
        );
        verify_all(&fresh).await;
    }
}

/// A run whose end was written and whose seal was not (the disk full at that moment, or the
/// process killed between the two on a store that writes them apart): the ended execution's
/// log is unsealed, and the next run of it (`exec resume`) seals it.
#[tokio::test]
async fn an_ended_run_whose_seal_failed_is_sealed_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(FullDisk::new(FileStore::open(dir.path()).unwrap()));
    let o = orca(disk.clone(), ScriptedAgents::new(), Arc::new(NoHuman));
    let p = o
        .planning()
        .create_proposal(content(chain(2)), None)
        .await
        .unwrap();
    o.planning().approve(p.id(), "tester", None).await.unwrap();
    let (_, exec) = o.executions().create(p.id()).await.unwrap();
    let log = AuditLogId::Execution {
        plan_id: p.id(),
        execution_id: exec,
    };
    // The ending's seal fails (the run stops there, with the error).
    disk.seals_failing.store(1, Ordering::SeqCst);
    let err = o
        .runner(config(), Arc::new(Quiet))
        .run(exec, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("seal"), "{err}");
    let header = o.executions().get(exec).await.unwrap().execution.value;
    assert_eq!(header.stage(), ExecutionStage::Completed);
    assert!(
        matches!(
            disk.verify(log).await.unwrap(),
            VerifyReport::Intact { sealed: false, .. }
        ),
        "the seal failed: the log is not sealed"
    );

    let report = o
        .runner(config(), Arc::new(Quiet))
        .run(exec, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert!(
        matches!(
            disk.verify(log).await.unwrap(),
            VerifyReport::Intact { sealed: true, .. }
        ),
        "the next run seals the ended execution's log"
    );
}

/// A reader's check of an execution against its log (`exec show`, a resume) while another
/// process completes a task between the reader's two reads (the records, then the log): the
/// completion in the log is newer than the record read — not a rollback. Before, `exec show`
/// exited 5 in exactly this way while a worker on a shared store finished a task.
#[tokio::test]
async fn a_task_completed_between_a_checks_two_reads_is_not_a_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(FullDisk::new(FileStore::open(dir.path()).unwrap()));
    let o = orca(disk.clone(), ScriptedAgents::new(), Arc::new(NoHuman));
    let p = o
        .planning()
        .create_proposal(content(chain(1)), None)
        .await
        .unwrap();
    let approved = o.planning().approve(p.id(), "tester", None).await.unwrap();
    let (_, exec) = o.executions().create(p.id()).await.unwrap();
    o.executions().start(exec).await.unwrap();
    let snap = o.executions().get(exec).await.unwrap();
    o.executions()
        .start_task(
            &approved,
            &snap,
            &id("s0"),
            &holder(),
            None,
            &Default::default(),
        )
        .await
        .unwrap();
    let running = o.executions().task(exec, &id("s0")).await.unwrap();
    let Task::Running(r) = running.value.clone() else {
        panic!("s0 runs");
    };
    let attempt = r.attempt;
    let done = Task::Completed(r.complete(
        orca_core::TaskSuccess::default(),
        time::OffsetDateTime::now_utc(),
    ));
    *disk.before_entries.lock().unwrap() = Some(orca_store::TaskTransition {
        plan_id: p.id(),
        execution_id: exec,
        task: done,
        expected: running.revision,
        entry: NewAuditEntry::new(
            orca_core::AuditKind::TaskAttemptCompleted,
            serde_json::json!({ "step_id": "s0", "attempt": attempt }),
        ),
        order: orca_store::WriteOrder::EntryFirst,
    });
    let findings = orca_services::integrity::check_execution(disk.as_ref(), exec)
        .await
        .unwrap();
    assert!(
        disk.before_entries.lock().unwrap().is_none(),
        "the completion was written between the two reads"
    );
    assert!(findings.is_empty(), "{findings:?}");
}

#[tokio::test]
async fn a_retry_waiting_out_its_backoff_survives_the_runner_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).unwrap());
    let agents = ScriptedAgents::new();
    agents.script("s0", [Act::Fail("flaky"), Act::Succeed("ok")]);
    let o = orca(store.clone(), agents.clone(), Arc::new(NoHuman));
    let p = o
        .planning()
        .create_proposal(content(chain(2)), None)
        .await
        .unwrap();
    o.planning().approve(p.id(), "tester", None).await.unwrap();
    let (_, exec) = o.executions().create(p.id()).await.unwrap();

    // A runner with a long backoff: it fails s0 once, then waits; it is stopped while waiting.
    let mut slow = config();
    slow.backoff.base = Duration::from_secs(3600);
    slow.backoff.max = Duration::from_secs(3600);
    slow.max_attempts = 2;
    let runner = o.runner(slow, Arc::new(Quiet));
    let handle = tokio::spawn(async move { runner.run(exec, CancellationToken::new()).await });
    loop {
        let t = o.executions().task(exec, &id("s0")).await.unwrap();
        if t.value.status() == TaskStatus::Failed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.abort();
    let _ = handle.await;

    // A new runner picks the retry up at once.
    let mut fast = config();
    fast.max_attempts = 2;
    let report = o
        .runner(fast, Arc::new(Quiet))
        .run(exec, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    let t = o.executions().task(exec, &id("s0")).await.unwrap();
    assert_eq!(t.value.attempts().len(), 2);
    assert_eq!(agents.requests_for("s0").len(), 2);
}

#[tokio::test]
async fn an_attempt_found_abandoned_by_a_runner_that_then_died_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).unwrap());
    let agents = ScriptedAgents::new();
    let o = orca(store.clone(), agents.clone(), Arc::new(NoHuman));
    let p = o
        .planning()
        .create_proposal(content(chain(2)), None)
        .await
        .unwrap();
    let approved = o.planning().approve(p.id(), "tester", None).await.unwrap();
    let (_, exec) = o.executions().create(p.id()).await.unwrap();

    // A runner started s0 and died; a second one recorded the attempt as abandoned and died
    // before retrying it.
    o.executions().start(exec).await.unwrap();
    let snap = o.executions().get(exec).await.unwrap();
    o.executions()
        .start_task(
            &approved,
            &snap,
            &id("s0"),
            &holder(),
            None,
            &Default::default(),
        )
        .await
        .unwrap();
    o.executions()
        .recover(exec, "the process running it is gone")
        .await
        .unwrap();
    assert_eq!(
        o.executions()
            .task(exec, &id("s0"))
            .await
            .unwrap()
            .value
            .status(),
        TaskStatus::Failed
    );

    // A third runner retries it.
    let report = o
        .runner(config(), Arc::new(Quiet))
        .run(exec, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    let t = o.executions().task(exec, &id("s0")).await.unwrap();
    assert_eq!(t.value.attempts().len(), 2);
}

/// Two workers find the same attempt's lease expired; the first takes it over and claims the
/// task again before the second gets to it. The second must leave the new attempt alone: it
/// takes over only the attempt it saw expired (the task's revision then), or the task would
/// run twice at once.
#[tokio::test]
async fn a_takeover_seen_late_leaves_the_attempt_claimed_since_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).unwrap());
    let o = orca(store.clone(), ScriptedAgents::new(), Arc::new(NoHuman));
    let p = o
        .planning()
        .create_proposal(content(chain(1)), None)
        .await
        .unwrap();
    let approved = o.planning().approve(p.id(), "tester", None).await.unwrap();
    let (_, exec) = o.executions().create(p.id()).await.unwrap();
    o.executions().start(exec).await.unwrap();
    let start = || async {
        let snap = o.executions().get(exec).await.unwrap();
        o.executions()
            .start_task(
                &approved,
                &snap,
                &id("s0"),
                &holder(),
                None,
                &Default::default(),
            )
            .await
            .unwrap();
        o.executions().task(exec, &id("s0")).await.unwrap()
    };
    let first = start().await;
    // What both workers read: the first attempt's lease expired, at this revision.
    let seen = [orca_store::ExpiredTask {
        step: id("s0"),
        revision: first.revision,
    }];
    let note = "its worker stopped renewing the task's lease: taken over";
    let taken = o
        .executions()
        .recover_steps(exec, note, Some(&seen))
        .await
        .unwrap();
    assert_eq!(taken, [id("s0")], "the first worker takes it over");
    let second = start().await;
    assert!(second.revision > first.revision);
    assert_eq!(second.value.status(), TaskStatus::Running);

    let late = o
        .executions()
        .recover_steps(exec, note, Some(&seen))
        .await
        .unwrap();
    assert!(
        late.is_empty(),
        "the attempt claimed since was taken over: {late:?}"
    );
    let now = o.executions().task(exec, &id("s0")).await.unwrap();
    assert_eq!(
        (now.revision, now.value.status()),
        (second.revision, TaskStatus::Running),
        "the second attempt runs on, untouched"
    );
}

/// A step's agent call is over when the agent returns: the next ready step's claim is written
/// while the reply is still being written (runner, ADR 0038) — and the concurrency
/// still bounds the agent calls, not the writes, and each call's usage is counted once.
/// Replies take 300 ms to write here; three independent steps, concurrency 1.
#[tokio::test]
async fn the_next_ready_step_is_claimed_while_a_reply_is_being_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut disk = FullDisk::new(FileStore::open(dir.path()).unwrap());
    disk.slow_replies = Some(Duration::from_millis(300));
    let disk = Arc::new(disk);
    let agents = ScriptedAgents::new();
    // Each step spends tokens: counted once each, when its agent returns (not again when its
    // reply is in).
    for (i, tokens) in [100, 200, 400].into_iter().enumerate() {
        agents.script(&format!("s{i}"), [Act::Spend(tokens)]);
    }
    let o = orca(disk.clone(), agents.clone(), Arc::new(NoHuman));
    // Independent (a step without `depends_on` follows the one before it).
    let steps = (0..3)
        .map(|i| step(&format!("s{i}"), "coder").with_depends_on([]))
        .collect();
    let plan = approved_plan(&o, steps).await;
    let (_, exec) = o.executions().create(plan).await.unwrap();
    let mut one_at_a_time = config();
    one_at_a_time.concurrency = 1;
    let report = o
        .runner(one_at_a_time, Arc::new(Quiet))
        .run(exec, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(
        report.usage.input_tokens, 700,
        "usage counted twice or missed"
    );
    // When each step's claim and reply became durable (plan order: one at a time, s0 first).
    let written = disk.written.lock().unwrap().clone();
    let at = |step: &str, status: TaskStatus| {
        written
            .iter()
            .find(|(s, st, _)| s == step && *st == status)
            .map(|(_, _, t)| *t)
            .unwrap()
    };
    let early = (0..2)
        .filter(|k| {
            at(&format!("s{}", k + 1), TaskStatus::Running)
                < at(&format!("s{k}"), TaskStatus::Completed)
        })
        .count();
    let most_at_once = agents.max_running.load(Ordering::SeqCst);
    eprintln!(
        "next step claimed before the previous reply was durable: {early} of 2; agent calls at once: {most_at_once} (concurrency 1)"
    );
    assert_eq!(early, 2, "a claim waited for the reply before it");
    assert_eq!(
        most_at_once, 1,
        "more agent calls at once than the concurrency"
    );
    verify_all(&FileStore::open(dir.path()).unwrap()).await;
}
