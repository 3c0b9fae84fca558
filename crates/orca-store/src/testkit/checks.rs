//! The store conformance checks: what every backend must do alike. Each takes a fresh store;
//! [`crate::store_conformance!`] makes one test per check for a backend.

#![expect(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    reason = "test support: a failed assumption is a failed test"
)]

use orca_core::{
    Execution, ExecutionStage, Plan, PlanId, PlanStage, Task, TaskStatus, TaskSuccess,
};
use serde_json::json;
use time::{Duration, OffsetDateTime};

use super::Backend;
use super::fixtures::{approved, draft, holder, new_execution, next_task, now, plan_of};
use crate::audit::{NewAuditEntry, REDACTED, zero_digest};
use crate::{AuditLogId, Revision, StoreError, VerifyReport};

pub async fn plans_create_get_update<S: Backend>(store: &S) {
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

pub async fn approved_and_rejected_plans_are_immutable<S: Backend>(store: &S) {
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

pub async fn executions_and_tasks_cas<S: Backend>(store: &S) {
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

pub async fn listing_order_and_summaries<S: Backend>(store: &S) {
    let base = OffsetDateTime::UNIX_EPOCH + Duration::days(20_000);
    let mut ids = Vec::new();
    for (i, goal) in ["oldest", "middle", "newest"].into_iter().enumerate() {
        let mut d = orca_core::DraftPlan::new(PlanId::new(), base + Duration::minutes(i as i64));
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

pub async fn leases<S: Backend>(store: &S) {
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

pub async fn resource_locks<S: Backend>(store: &S) {
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

pub async fn audit_append_seal_verify<S: Backend>(store: &S) {
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
pub async fn concurrent_appends_chain<S: Backend + Clone + 'static>(store: &S) {
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

pub async fn task_status_round_trips<S: Backend>(store: &S) {
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

/// An ending writes the terminal header, its entry (the log's last) and the seal; a header
/// that has not ended, a stale revision or a second ending is refused and writes nothing.
pub async fn ending_writes_header_entry_and_seal<S: Backend>(store: &S) {
    let (plan, _, running, at) = super::fixtures::running_execution(store, "end", 2).await;
    let id = running.info.id;
    let log = AuditLogId::Execution {
        plan_id: plan.id(),
        execution_id: id,
    };
    store
        .append(log, NewAuditEntry::new("execution.started", json!({})))
        .await
        .unwrap();
    let failed = Execution::Failed(running.clone().fail("a step failed", None, now()));
    let entry = || NewAuditEntry::new("execution.failed", json!({ "reason": "a step failed" }));
    let unchanged = |what: &str| format!("{what}: nothing may be written");

    // Refused, nothing written: a header that has not ended; a revision that is not the
    // stored one.
    let err = store
        .end_execution(store, &Execution::Running(running), at, entry())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    let err = store
        .end_execution(store, &failed, Revision::FIRST, entry())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    let header = store.execution_header(id).await.unwrap();
    assert_eq!(
        (header.revision, header.value.stage()),
        (at, ExecutionStage::Running),
        "{}",
        unchanged("refused endings")
    );
    assert_eq!(
        store.verify(log).await.unwrap(),
        VerifyReport::Intact {
            entries: 1,
            sealed: false
        },
        "{}",
        unchanged("refused endings")
    );

    // The ending: all three.
    let ended = store
        .end_execution(store, &failed, at, entry())
        .await
        .unwrap();
    assert_eq!(ended.revision, at.next());
    assert_eq!(ended.entry.kind.as_str(), "execution.failed");
    let header = store.execution_header(id).await.unwrap();
    assert_eq!(
        (header.revision, header.value.stage()),
        (at.next(), ExecutionStage::Failed)
    );
    let entries = store.entries(log).await.unwrap();
    assert_eq!(
        entries.last(),
        Some(&ended.entry),
        "the ending entry is the log's last"
    );
    assert_eq!(
        store.verify(log).await.unwrap(),
        VerifyReport::Intact {
            entries: 2,
            sealed: true
        }
    );

    // A second ending is refused and changes nothing.
    assert!(
        store
            .end_execution(store, &failed, at.next(), entry())
            .await
            .is_err()
    );
    assert_eq!(
        store.entries(log).await.unwrap(),
        entries,
        "{}",
        unchanged("a second ending")
    );
    assert_eq!(
        store.execution_header(id).await.unwrap().revision,
        at.next()
    );
}
