//! One conformance suite, instantiated for every backend, plus file-backend specifics
//! (corrupt files, layout, the listing cache, torn audit lines, tampering).

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::path::Path;

use common::*;
use orca_core::{
    Execution, ExecutionStage, Holder, Plan, PlanId, PlanStage, Task, TaskStatus, TaskSuccess,
};
use orca_store::audit::{NewAuditEntry, REDACTED, zero_digest};
use orca_store::{
    AuditLogId, AuditStore, ExecutionStore, FileStore, Lease, MemoryStore, PlanStore, Revision,
    Store, StoreError, VerifyReport,
};
use serde_json::json;
use time::{Duration, OffsetDateTime};

/// How a backend simulates the death of a lease holder's process.
trait Backend: Store + Sized {
    fn kill_holder(&self, lease: Lease, holder: &Holder);
}

impl Backend for MemoryStore {
    fn kill_holder(&self, lease: Lease, holder: &Holder) {
        self.mark_dead(holder);
        std::mem::forget(lease);
    }
}

impl Backend for FileStore {
    fn kill_holder(&self, lease: Lease, _holder: &Holder) {
        // A dead process leaves its record in the file, but the kernel has dropped its flock.
        let id = lease.execution();
        let path = std::fs::read_dir(self.root().join("plans"))
            .unwrap()
            .flatten()
            .map(|e| e.path().join("executions").join(format!("{id}.lease")))
            .find(|p| p.exists())
            .unwrap();
        let record = std::fs::read(&path).unwrap();
        drop(lease);
        std::fs::write(&path, record).unwrap();
    }
}

impl Backend for orca_store_postgres::PgStore {
    fn kill_holder(&self, lease: Lease, _holder: &Holder) {
        // The holder's connection goes (its session locks with it); its lease row stays.
        orca_store_postgres::abandon_lease(lease);
    }
}

/// A store on a new database of the throwaway server shared by this test process.
async fn pg_store() -> orca_store_postgres::PgStore {
    let server = orca_testkit::postgres::Throwaway::shared().unwrap_or_else(|e| panic!("{e}"));
    let url = server.create_database().await.unwrap();
    orca_store_postgres::PgStore::connect(
        &url,
        orca_store::Authority::permissive(),
        orca_core::redact::Redactor::new(),
    )
    .await
    .unwrap()
}

mod checks {
    use super::*;

    pub(crate) async fn plans_create_get_update<S: Backend>(store: &S) {
        let mut d = draft("first goal");
        let id = d.id();
        assert_eq!(
            store.create_plan(&d.clone().into()).await.unwrap(),
            Revision::FIRST
        );
        let got = store.plan(id).await.unwrap();
        assert_eq!(got.revision, Revision::FIRST);
        assert_eq!(got.value, Plan::from(d.clone()));

        d.set_goal("second goal");
        assert_eq!(
            store
                .update_plan(&d.clone().into(), Revision::FIRST)
                .await
                .unwrap(),
            Revision(2)
        );
        assert_eq!(
            store.plan(id).await.unwrap().value.content().goal,
            "second goal"
        );

        let err = store
            .update_plan(&d.clone().into(), Revision::FIRST)
            .await
            .unwrap_err();
        assert!(err.is_conflict(), "{err}");
        assert!(matches!(
            err,
            StoreError::Conflict {
                expected: Revision(1),
                found: Revision(2),
                ..
            }
        ));

        let err = store.create_plan(&d.clone().into()).await.unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err}");
        let err = store.plan(PlanId::new()).await.unwrap_err();
        assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
        let err = store
            .update_plan(&draft("x").into(), Revision::FIRST)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
    }

    pub(crate) async fn approved_and_rejected_plans_are_immutable<S: Backend>(store: &S) {
        for reject in [false, true] {
            let mut d = draft("g");
            d.add_step(
                orca_core::Step::new("a".parse().unwrap(), orca_core::AgentId::shell(), "a")
                    .with_command("true"),
                None,
            )
            .unwrap();
            let agents = [orca_core::AgentId::shell()].into_iter().collect();
            let proposal = d.submit(&agents, now()).unwrap();
            let rev = store.create_plan(&proposal.clone().into()).await.unwrap();
            let decided: Plan = if reject {
                proposal.reject("bob", None, now()).into()
            } else {
                proposal.approve("alice", None, now()).into()
            };
            let rev = store.update_plan(&decided, rev).await.unwrap();
            let err = store.update_plan(&decided, rev).await.unwrap_err();
            assert!(matches!(err, StoreError::Immutable(_)), "{err}");
            assert_eq!(store.plan(decided.id()).await.unwrap().revision, rev);
        }
    }

    pub(crate) async fn executions_and_tasks_cas<S: Backend>(store: &S) {
        let plan = approved("run", 3);
        store.create_plan(&plan_of(&plan)).await.unwrap();
        let (exec, tasks) = new_execution(&plan);
        let id = exec.id();
        store.create_execution(&exec, &tasks).await.unwrap();
        let err = store.create_execution(&exec, &tasks).await.unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err}");
        let err = store
            .create_execution(&new_execution(&plan).0, &tasks[..2])
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err}");
        let orphan = approved("not stored", 1);
        let (e2, t2) = new_execution(&orphan);
        assert!(matches!(
            store.create_execution(&e2, &t2).await.unwrap_err(),
            StoreError::NotFound { .. }
        ));

        let snap = store.execution(id).await.unwrap();
        assert_eq!(snap.execution.value, exec);
        assert_eq!(snap.task_values(), tasks);
        assert!(snap.tasks.iter().all(|t| t.revision == Revision::FIRST));

        let h = holder("cas");
        let t1 = next_task(&plan, &tasks, 0, &h);
        assert_eq!(
            store.update_task(id, &t1, Revision::FIRST).await.unwrap(),
            Revision(2)
        );
        let err = store
            .update_task(id, &t1, Revision::FIRST)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Conflict {
                    expected: Revision(1),
                    found: Revision(2),
                    ..
                }
            ),
            "{err}"
        );
        // Other tasks are untouched.
        let snap = store.execution(id).await.unwrap();
        assert_eq!(snap.tasks[0].value, t1);
        assert_eq!(snap.tasks[1].revision, Revision::FIRST);

        let stranger: Task = orca_core::PendingTask::new("zz".parse().unwrap()).into();
        let err = store
            .update_task(id, &stranger, Revision::FIRST)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
        let err = store
            .update_task(orca_core::ExecutionId::new(), &t1, Revision::FIRST)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound { .. }), "{err}");

        let Execution::Pending(p) = exec.clone() else {
            unreachable!()
        };
        let running = p.start(now());
        assert_eq!(
            store
                .update_execution(&running.clone().into(), Revision::FIRST)
                .await
                .unwrap(),
            Revision(2)
        );
        let err = store
            .update_execution(&running.clone().into(), Revision::FIRST)
            .await
            .unwrap_err();
        assert!(err.is_conflict());
        let stopped: Execution = running.stop("alice", None, now()).into();
        assert_eq!(
            store.update_execution(&stopped, Revision(2)).await.unwrap(),
            Revision(3)
        );
        let err = store
            .update_execution(&stopped, Revision(3))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Immutable(_)), "{err}");
        let err = store
            .update_task(
                id,
                &next_task(
                    &plan,
                    &[t1.clone(), tasks[1].clone(), tasks[2].clone()],
                    0,
                    &h,
                ),
                Revision(2),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Immutable(_)), "{err}");
        let err = store
            .execution(orca_core::ExecutionId::new())
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
    }

    pub(crate) async fn listing_order_and_summaries<S: Backend>(store: &S) {
        let base = OffsetDateTime::UNIX_EPOCH + Duration::days(20_000);
        let mut ids = Vec::new();
        for (i, goal) in ["oldest", "middle", "newest"].into_iter().enumerate() {
            let mut d =
                orca_core::DraftPlan::new(PlanId::new(), base + Duration::minutes(i as i64));
            d.set_goal(goal);
            ids.push(d.id());
            store.create_plan(&d.into()).await.unwrap();
        }
        let plan = approved("with runs", 2);
        store.create_plan(&plan_of(&plan)).await.unwrap();
        let (e1, t1) = new_execution(&plan);
        store.create_execution(&e1, &t1).await.unwrap();
        let (e2, t2) = new_execution(&plan);
        store.create_execution(&e2, &t2).await.unwrap();
        // Complete one task of e2.
        let h = holder("list");
        let running = next_task(&plan, &t2, 0, &h);
        store
            .update_task(e2.id(), &running, Revision::FIRST)
            .await
            .unwrap();
        let Task::Running(r) = running else {
            unreachable!()
        };
        store
            .update_task(
                e2.id(),
                &r.complete(TaskSuccess::with_summary("ok"), now()).into(),
                Revision(2),
            )
            .await
            .unwrap();

        let listing = store.list_plans().await.unwrap();
        assert!(listing.problems.is_empty(), "{:?}", listing.problems);
        let goals: Vec<&str> = listing.items.iter().map(|s| s.goal.as_str()).collect();
        assert_eq!(goals, ["with runs", "newest", "middle", "oldest"]);
        let top = &listing.items[0];
        assert_eq!(
            (top.stage, top.steps, top.executions),
            (PlanStage::Approved, 2, 2)
        );
        assert_eq!(
            (listing.items[1].stage, listing.items[1].executions),
            (PlanStage::Draft, 0)
        );

        let execs = store.list_executions(Some(plan.id())).await.unwrap();
        assert!(execs.problems.is_empty());
        assert_eq!(execs.items.len(), 2);
        let s2 = execs
            .items
            .iter()
            .find(|s| s.execution_id == e2.id())
            .unwrap();
        assert_eq!(
            (s2.completed, s2.total, s2.stage, s2.awaiting_decision),
            (1, 2, ExecutionStage::Pending, false)
        );
        assert!(execs.items[0].created_at >= execs.items[1].created_at);
        assert_eq!(store.list_executions(None).await.unwrap().items.len(), 2);
        assert!(
            store
                .list_executions(Some(ids[0]))
                .await
                .unwrap()
                .items
                .is_empty()
        );
    }

    pub(crate) async fn leases<S: Backend>(store: &S) {
        let plan = approved("lease", 1);
        store.create_plan(&plan_of(&plan)).await.unwrap();
        let (exec, tasks) = new_execution(&plan);
        let id = exec.id();
        store.create_execution(&exec, &tasks).await.unwrap();
        assert_eq!(store.lease(id).await.unwrap(), None);

        let (h1, h2) = (holder("one"), holder("two"));
        let l1 = store.acquire_lease(id, &h1).await.unwrap();
        assert_eq!(l1.info().holder, h1);
        assert!(l1.took_over().is_none());
        match store.acquire_lease(id, &h2).await.unwrap_err() {
            StoreError::LeaseHeld { execution, holder } => {
                assert_eq!((execution, holder), (id, h1.clone()))
            }
            other => panic!("{other}"),
        }
        let info = store.lease(id).await.unwrap().unwrap();
        assert_eq!((info.holder.clone(), info.stale), (h1.clone(), false));

        // Released cleanly: free, nothing to take over.
        drop(l1);
        assert_eq!(store.lease(id).await.unwrap(), None);
        let l1 = store.acquire_lease(id, &h1).await.unwrap();
        assert!(l1.took_over().is_none());

        // A renewal (the heartbeat) keeps the lease held by the same holder.
        store.renew_lease(&l1).await.unwrap();
        store.renew_lease(&l1).await.unwrap();
        let info = store.lease(id).await.unwrap().unwrap();
        assert_eq!((info.holder.clone(), info.stale), (h1.clone(), false));
        assert!(info.last_seen() >= info.acquired_at);
        assert!(store.acquire_lease(id, &h2).await.is_err());

        // The holder dies: stale, and the next one takes over.
        store.kill_holder(l1, &h1);
        let info = store.lease(id).await.unwrap().unwrap();
        assert!(info.stale);
        let l2 = store.acquire_lease(id, &h2).await.unwrap();
        let old = l2.took_over().unwrap();
        assert_eq!((old.holder.clone(), old.stale), (h1, true));
        assert!(!store.lease(id).await.unwrap().unwrap().stale);
        drop(l2);
        assert!(
            store
                .acquire_lease(orca_core::ExecutionId::new(), &h2)
                .await
                .is_err()
        );
    }

    pub(crate) async fn resource_locks<S: Backend>(store: &S) {
        let h = holder("res");
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let ab = store
            .try_lock_resources(&names(&["db", "net/x y", "db"]), &h)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ab.names(), ["db", "net/x y"]);
        assert!(
            store
                .try_lock_resources(&names(&["fs", "net/x y"]), &h)
                .await
                .unwrap()
                .is_none()
        );
        // All or none: fs was not kept by the refused attempt.
        let fs = store
            .try_lock_resources(&names(&["fs"]), &h)
            .await
            .unwrap()
            .unwrap();
        drop(ab);
        assert!(
            store
                .try_lock_resources(&names(&["net/x y", "db"]), &h)
                .await
                .unwrap()
                .is_some()
        );
        drop(fs);
    }

    pub(crate) async fn audit_append_seal_verify<S: Backend>(store: &S) {
        let plan = approved("audit", 1);
        store.create_plan(&plan_of(&plan)).await.unwrap();
        let (exec, tasks) = new_execution(&plan);
        store.create_execution(&exec, &tasks).await.unwrap();
        let log = AuditLogId::Execution {
            plan_id: plan.id(),
            execution_id: exec.id(),
        };
        let e0 = store
            .append(log, NewAuditEntry::new("execution.started", json!({})))
            .await
            .unwrap();
        let e1 = store
            .append(
                log,
                NewAuditEntry::new(
                    "agent.call",
                    json!({"api_key": "k", "prompt": "Bearer abc"}),
                )
                .with_parent(Some(0)),
            )
            .await
            .unwrap();
        let e2 = store
            .append(
                log,
                NewAuditEntry::new("tool.call", json!({"n": 1})).with_parent(Some(1)),
            )
            .await
            .unwrap();
        assert_eq!((e0.seq, e1.seq, e2.seq), (0, 1, 2));
        assert_eq!(e0.prev, zero_digest());
        assert_eq!(
            (e1.prev.clone(), e2.prev.clone()),
            (e0.hash.clone(), e1.hash.clone())
        );
        assert_eq!(
            e1.data,
            json!({"api_key": REDACTED, "prompt": format!("Bearer {REDACTED}")})
        );
        assert_eq!(
            store.entries(log).await.unwrap(),
            vec![e0.clone(), e1.clone(), e2.clone()]
        );
        assert_eq!(
            store.verify(log).await.unwrap(),
            VerifyReport::Intact {
                entries: 3,
                sealed: false
            }
        );
        // The one-read form answers as the two reads do.
        assert_eq!(
            store.verified_entries(log).await.unwrap(),
            (
                VerifyReport::Intact {
                    entries: 3,
                    sealed: false
                },
                vec![e0.clone(), e1.clone(), e2.clone()]
            )
        );

        let seal = store.seal(log).await.unwrap();
        assert_eq!(seal.entries, 3);
        assert_eq!(store.seal(log).await.unwrap(), seal);
        let err = store
            .append(log, NewAuditEntry::new("late", json!({})))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Immutable(_)), "{err}");
        assert_eq!(
            store.verify(log).await.unwrap(),
            VerifyReport::Intact {
                entries: 3,
                sealed: true
            }
        );
        assert_eq!(
            store.verified_entries(log).await.unwrap(),
            (
                VerifyReport::Intact {
                    entries: 3,
                    sealed: true
                },
                vec![e0, e1, e2]
            )
        );

        let plan_log = AuditLogId::Plan { plan_id: plan.id() };
        store
            .append(plan_log, NewAuditEntry::new("plan.created", json!({})))
            .await
            .unwrap();
        let logs = store.audit_logs().await.unwrap();
        assert!(logs.contains(&log) && logs.contains(&plan_log), "{logs:?}");
    }

    /// Many appends at once to one log (group commit in the file backend): every one gets its
    /// own sequence number, returned entries are what is stored, the chain verifies.
    pub(crate) async fn concurrent_appends_chain<S: Backend + Clone + 'static>(store: &S) {
        let plan = approved("concurrent-audit", 1);
        store.create_plan(&plan_of(&plan)).await.unwrap();
        let log = AuditLogId::Plan { plan_id: plan.id() };
        let mut joins = tokio::task::JoinSet::new();
        for i in 0..48u64 {
            let store = store.clone();
            joins.spawn(async move {
                store
                    .append(log, NewAuditEntry::new("n", json!({ "i": i })))
                    .await
                    .unwrap()
            });
        }
        let mut returned = joins.join_all().await;
        returned.sort_by_key(|e| e.seq);
        assert_eq!(
            returned.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (0..48).collect::<Vec<_>>()
        );
        let mut payloads: Vec<u64> = returned
            .iter()
            .map(|e| e.data["i"].as_u64().unwrap())
            .collect();
        payloads.sort_unstable();
        assert_eq!(payloads, (0..48).collect::<Vec<_>>());
        assert_eq!(store.entries(log).await.unwrap(), returned);
        assert_eq!(
            store.verify(log).await.unwrap(),
            VerifyReport::Intact {
                entries: 48,
                sealed: false
            }
        );
    }

    pub(crate) async fn task_status_round_trips<S: Backend>(store: &S) {
        let plan = approved("statuses", 1);
        store.create_plan(&plan_of(&plan)).await.unwrap();
        let (exec, mut tasks) = new_execution(&plan);
        store.create_execution(&exec, &tasks).await.unwrap();
        let h = holder("st");
        let mut rev = Revision::FIRST;
        for expected in [TaskStatus::Running, TaskStatus::Failed, TaskStatus::Running] {
            let t = next_task(&plan, &tasks, 0, &h);
            rev = store.update_task(exec.id(), &t, rev).await.unwrap();
            tasks[0] = t;
            let snap = store.execution(exec.id()).await.unwrap();
            assert_eq!(
                (snap.tasks[0].value.status(), snap.tasks[0].revision),
                (expected, rev)
            );
            assert_eq!(snap.tasks[0].value, tasks[0]);
            // The cheap reads agree with the snapshot.
            let one = store.task(exec.id(), tasks[0].step_id()).await.unwrap();
            assert_eq!((one.value, one.revision), (tasks[0].clone(), rev));
            let header = store.execution_header(exec.id()).await.unwrap();
            assert_eq!(header, snap.execution);
        }
        let unknown = orca_core::StepId::parse("no-such-step").unwrap();
        assert!(matches!(
            store.task(exec.id(), &unknown).await.unwrap_err(),
            StoreError::NotFound { .. }
        ));
    }
}

macro_rules! conformance {
    ($name:ident, $make:expr) => {
        mod $name {
            use super::*;

            macro_rules! case {
                ($check:ident) => {
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $check() {
                        let (store, _dir) = $make;
                        checks::$check(&store).await;
                    }
                };
            }

            case!(plans_create_get_update);
            case!(approved_and_rejected_plans_are_immutable);
            case!(executions_and_tasks_cas);
            case!(listing_order_and_summaries);
            case!(leases);
            case!(resource_locks);
            case!(audit_append_seal_verify);
            case!(task_status_round_trips);
            case!(concurrent_appends_chain);
        }
    };
}

conformance!(memory, (MemoryStore::new(), ()));
conformance!(postgres, (pg_store().await, ()));
conformance!(file, {
    let dir = tempfile::tempdir().unwrap();
    (FileStore::open(dir.path()).unwrap(), dir)
});

// ----- file backend specifics -----

fn file_store() -> (FileStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (FileStore::open(dir.path()).unwrap(), dir)
}

/// Two stores on one directory (as two processes would be) appending at once: the flock keeps
/// the chain whole across their group commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_append_to_one_log_at_once() {
    let (a, dir) = file_store();
    let b = FileStore::open(dir.path()).unwrap();
    let log = AuditLogId::Plan {
        plan_id: PlanId::new(),
    };
    let mut joins = tokio::task::JoinSet::new();
    for i in 0..40u64 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        joins.spawn(async move {
            store
                .append(log, NewAuditEntry::new("n", json!({ "i": i })))
                .await
                .unwrap()
                .seq
        });
    }
    let mut seqs = joins.join_all().await;
    seqs.sort_unstable();
    assert_eq!(seqs, (0..40).collect::<Vec<_>>());
    assert_eq!(
        a.verify(log).await.unwrap(),
        VerifyReport::Intact {
            entries: 40,
            sealed: false
        }
    );
}

#[tokio::test]
async fn corrupt_truncated_foreign_and_newer_files_are_named_and_listing_goes_on() {
    let (store, _dir) = file_store();
    let good = draft("good");
    store.create_plan(&good.clone().into()).await.unwrap();
    let valid = std::fs::read_to_string(store.plan_path(good.id())).unwrap();
    let cases = [
        ("garbage", "\u{0}\u{1}not json".to_owned()),
        ("not valid JSON", valid[..valid.len() / 2].to_owned()),
        (
            "missing field `format_version`",
            r#"{"name": "some other tool", "revision": 1}"#.to_owned(),
        ),
        (
            "unsupported format_version 2",
            valid.replace("\"format_version\": 1", "\"format_version\": 2"),
        ),
        ("revision", valid.replace("\"revision\": 1,", "")),
    ];
    let mut bad = Vec::new();
    for (needle, text) in &cases {
        let id = PlanId::new();
        std::fs::write(store.plan_path(id), text).unwrap();
        bad.push((id, *needle));
    }
    let listing = store.list_plans().await.unwrap();
    assert_eq!(listing.items.len(), 1);
    assert_eq!(listing.items[0].plan_id, good.id());
    assert_eq!(
        listing.problems.len(),
        cases.len(),
        "{:?}",
        listing.problems
    );
    for (id, needle) in &bad {
        let path = store.plan_path(*id);
        let p = listing
            .problems
            .iter()
            .find(|p| p.location == path.display().to_string())
            .unwrap();
        if *needle != "garbage" {
            assert!(
                p.message.contains(needle),
                "{} does not mention {needle}",
                p.message
            );
        }
        match store.plan(*id).await.unwrap_err() {
            StoreError::Corrupt { path: p, .. } => assert_eq!(p, path),
            other => panic!("{other}"),
        }
    }
    // A plan file holding another plan.
    let other = PlanId::new();
    std::fs::copy(store.plan_path(good.id()), store.plan_path(other)).unwrap();
    assert!(matches!(
        store.plan(other).await.unwrap_err(),
        StoreError::Corrupt { .. }
    ));
}

#[tokio::test]
async fn corrupt_task_record_is_named() {
    let (store, _dir) = file_store();
    let plan = approved("t", 2);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    let path = store.task_path(plan.id(), exec.id(), tasks[1].step_id());
    std::fs::write(&path, "{\"revision\": 1, \"status\": \"pending\"").unwrap();
    match store.execution(exec.id()).await.unwrap_err() {
        StoreError::Corrupt { path: p, .. } => assert_eq!(p, path),
        other => panic!("{other}"),
    }
    let listing = store.list_executions(None).await.unwrap();
    assert!(listing.items.is_empty());
    assert_eq!(listing.problems.len(), 1);
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        out.push(e.path());
        if e.file_type().unwrap().is_dir() {
            walk(&e.path(), out);
        }
    }
}

#[tokio::test]
async fn layout_is_human_readable_and_stays_inside_dot_orca() {
    let (store, dir) = file_store();
    let plan = approved("layout", 2);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    let log = AuditLogId::Execution {
        plan_id: plan.id(),
        execution_id: exec.id(),
    };
    store
        .append(log, NewAuditEntry::new("x", json!({})))
        .await
        .unwrap();
    store.seal(log).await.unwrap();
    let _lease = store.acquire_lease(exec.id(), &holder("l")).await.unwrap();
    let _locks = store
        .try_lock_resources(&["db".to_owned()], &holder("l"))
        .await
        .unwrap();
    store.list_plans().await.unwrap();

    let top: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(top, [std::ffi::OsString::from(".orca")]);
    let p = plan.id();
    let e = exec.id();
    let root = dir.path().join(".orca");
    for rel in [
        format!("plans/{p}.json"),
        format!("plans/{p}/executions/{e}.json"),
        format!("plans/{p}/executions/{e}/tasks/s0.json"),
        format!("plans/{p}/executions/{e}/tasks/s1.json"),
        format!("plans/{p}/executions/{e}.audit.jsonl"),
        format!("plans/{p}/executions/{e}.audit.seal.json"),
        format!("plans/{p}/executions/{e}.lease"),
        format!("executions/{e}"),
        "cache/plan-list.json".to_owned(),
    ] {
        assert!(root.join(&rel).is_file(), "missing {rel}");
    }
    let text = std::fs::read_to_string(root.join(format!("plans/{p}.json"))).unwrap();
    assert!(text.starts_with("{\n  \"revision\": 1,\n"), "{text}");
    let mut all = Vec::new();
    walk(&root, &mut all);
    assert!(
        all.iter().all(|p| !p.to_string_lossy().ends_with(".tmp")),
        "{all:?}"
    );
}

#[tokio::test]
async fn execution_is_found_by_id_alone_even_without_the_index() {
    let (store, dir) = file_store();
    let plan = approved("idx", 1);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    std::fs::remove_file(
        dir.path()
            .join(".orca/executions")
            .join(exec.id().to_string()),
    )
    .unwrap();
    let fresh = FileStore::open(dir.path()).unwrap();
    assert_eq!(
        fresh.execution(exec.id()).await.unwrap().execution.value,
        exec
    );
    // A wrong index is not trusted either.
    std::fs::write(
        dir.path()
            .join(".orca/executions")
            .join(exec.id().to_string()),
        PlanId::new().to_string(),
    )
    .unwrap();
    let fresh = FileStore::open(dir.path()).unwrap();
    assert_eq!(
        fresh.execution(exec.id()).await.unwrap().execution.value,
        exec
    );
}

#[tokio::test]
async fn listing_cache_is_validated_and_rebuilt() {
    let (store, dir) = file_store();
    let mut d = draft("before");
    store.create_plan(&d.clone().into()).await.unwrap();
    assert_eq!(store.list_plans().await.unwrap().items[0].goal, "before");
    // Changed behind the store's back, same size: the stamp (inode, mtime, ctime) differs.
    let path = store.plan_path(d.id());
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("before", "after!");
    std::fs::write(&path, text).unwrap();
    let fresh = FileStore::open(dir.path()).unwrap();
    assert_eq!(fresh.list_plans().await.unwrap().items[0].goal, "after!");
    // An update and a new execution through the store.
    d.set_goal("third");
    let rev = store.plan(d.id()).await.unwrap().revision;
    store.update_plan(&d.clone().into(), rev).await.unwrap();
    assert_eq!(store.list_plans().await.unwrap().items[0].goal, "third");
    // A corrupt cache is ignored and rewritten; a deleted plan disappears.
    let cache = dir.path().join(".orca/cache/plan-list.json");
    std::fs::write(&cache, "{ torn").unwrap();
    assert_eq!(store.list_plans().await.unwrap().items[0].goal, "third");
    assert!(serde_json::from_slice::<serde_json::Value>(&std::fs::read(&cache).unwrap()).is_ok());
    let plan = approved("runs", 1);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    assert_eq!(store.list_plans().await.unwrap().items[0].executions, 0);
    let (exec, tasks) = new_execution(&plan);
    store.create_execution(&exec, &tasks).await.unwrap();
    assert_eq!(store.list_plans().await.unwrap().items[0].executions, 1);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(store.list_plans().await.unwrap().items.len(), 1);
}

async fn sample_log(n: usize) -> (FileStore, tempfile::TempDir, AuditLogId) {
    let (store, dir) = file_store();
    let log = AuditLogId::Plan {
        plan_id: PlanId::new(),
    };
    for i in 0..n {
        store
            .append(log, NewAuditEntry::new("e", json!({ "i": i })))
            .await
            .unwrap();
    }
    (store, dir, log)
}

fn edit_lines(path: &Path, f: impl FnOnce(&mut Vec<String>)) {
    let mut lines: Vec<String> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    f(&mut lines);
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(path, text).unwrap();
}

#[track_caller]
fn assert_tampered(report: VerifyReport, seq: u64, needle: &str) {
    match report {
        VerifyReport::Tampered { seq: s, problem } => {
            assert_eq!(s, seq, "{problem}");
            assert!(problem.contains(needle), "{problem}");
        }
        other => panic!("not detected: {other:?}"),
    }
}

#[tokio::test]
async fn torn_last_audit_line_is_ignored_then_truncated() {
    let (store, _dir, log) = sample_log(2).await;
    let path = store.audit_path(log);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"seq\":2,\"at\":\"20").unwrap();
    drop(f);
    assert_eq!(store.entries(log).await.unwrap().len(), 2);
    assert_eq!(
        store.verify(log).await.unwrap(),
        VerifyReport::Intact {
            entries: 2,
            sealed: false
        }
    );
    let e = store
        .append(log, NewAuditEntry::new("after", json!({})))
        .await
        .unwrap();
    assert_eq!(e.seq, 2);
    assert_eq!(
        store.verify(log).await.unwrap(),
        VerifyReport::Intact {
            entries: 3,
            sealed: false
        }
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
}

#[tokio::test]
async fn tampering_changed_entry_is_located() {
    let (store, _dir, log) = sample_log(5).await;
    edit_lines(&store.audit_path(log), |l| {
        l[3] = l[3].replace("\"i\":3", "\"i\":7")
    });
    assert_tampered(store.verify(log).await.unwrap(), 3, "changed");
    // A log that does not verify gives no entries to go on with.
    let (report, entries) = store.verified_entries(log).await.unwrap();
    assert_tampered(report, 3, "changed");
    assert!(entries.is_empty());
}

#[tokio::test]
async fn tampering_removed_entry_is_located() {
    let (store, _dir, log) = sample_log(5).await;
    edit_lines(&store.audit_path(log), |l| {
        l.remove(1);
    });
    assert_tampered(store.verify(log).await.unwrap(), 1, "removed");
}

#[tokio::test]
async fn tampering_reordered_entries_are_located() {
    let (store, _dir, log) = sample_log(5).await;
    edit_lines(&store.audit_path(log), |l| l.swap(2, 4));
    assert_tampered(store.verify(log).await.unwrap(), 2, "reordered");
}

#[tokio::test]
async fn tampering_inserted_entry_is_located() {
    let (store, _dir, log) = sample_log(5).await;
    let entries = store.entries(log).await.unwrap();
    let forged = orca_store::audit::next_entry(
        Some(&entries[2]),
        NewAuditEntry::new("forged", json!({})),
        now(),
    );
    edit_lines(&store.audit_path(log), |l| {
        l.insert(3, serde_json::to_string(&forged).unwrap())
    });
    assert_tampered(store.verify(log).await.unwrap(), 3, "inserted");
}

#[tokio::test]
async fn tampering_truncated_tail_after_seal_is_located() {
    let (store, _dir, log) = sample_log(5).await;
    store.seal(log).await.unwrap();
    edit_lines(&store.audit_path(log), |l| l.truncate(3));
    assert_tampered(store.verify(log).await.unwrap(), 3, "truncated");
}

#[tokio::test]
async fn secrets_never_reach_the_file() {
    let (store, _dir, log) = sample_log(0).await;
    store
        .append(log, NewAuditEntry::new("agent.call", json!({"headers": {"Authorization": "Bearer tok123"}, "key": "sk-ant-api03-abcdefghij"})))
        .await
        .unwrap();
    let text = std::fs::read_to_string(store.audit_path(log)).unwrap();
    assert!(
        !text.contains("tok123") && !text.contains("abcdefghij"),
        "{text}"
    );
}
