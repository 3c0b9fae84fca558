//! The differential test's operations: random sequences applied to a `MemoryStore` (the
//! reference) and to another backend must give the same outcomes and leave the same state.
//! Each backend crate runs [`agree`] under `proptest!` in its own tests.

#![expect(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    reason = "test support: a failed assumption is a failed test"
)]

use std::collections::BTreeSet;

use orca_core::{AgentId, ApprovedPlan, DraftPlan, Execution, ExecutionId, Plan, Step};
use proptest::prelude::*;
use serde_json::json;

use super::fixtures::{approved, draft, holder, new_execution, next_task, now, plan_of};
use crate::{
    AuditLogId, AuditStore, ExecutionStore, MemoryStore, NewAuditEntry, PlanStore, Revision, Store,
    StoreError,
};

/// One operation applied to two stores alike.
#[derive(Debug, Clone)]
pub enum Op {
    CreateDraft,
    EditDraft {
        plan: prop::sample::Index,
        stale: bool,
    },
    Approve {
        plan: prop::sample::Index,
    },
    CreateExecution {
        plan: prop::sample::Index,
    },
    Transition {
        exec: prop::sample::Index,
        step: usize,
        stale: bool,
    },
    StartOrStop {
        exec: prop::sample::Index,
        stale: bool,
    },
    Append {
        exec: prop::sample::Index,
        secret: bool,
    },
    Seal {
        exec: prop::sample::Index,
    },
}

/// Any operation.
pub fn op() -> impl Strategy<Value = Op> {
    use prop::sample::Index;
    prop_oneof![
        Just(Op::CreateDraft),
        (any::<Index>(), any::<bool>()).prop_map(|(plan, stale)| Op::EditDraft { plan, stale }),
        any::<Index>().prop_map(|plan| Op::Approve { plan }),
        any::<Index>().prop_map(|plan| Op::CreateExecution { plan }),
        (any::<Index>(), 0usize..2, any::<bool>()).prop_map(|(exec, step, stale)| Op::Transition {
            exec,
            step,
            stale
        }),
        (any::<Index>(), any::<bool>()).prop_map(|(exec, stale)| Op::StartOrStop { exec, stale }),
        (any::<Index>(), any::<bool>()).prop_map(|(exec, secret)| Op::Append { exec, secret }),
        any::<Index>().prop_map(|exec| Op::Seal { exec }),
    ]
}

fn kind(e: &StoreError) -> String {
    match e {
        StoreError::NotFound { .. } => "not_found".into(),
        StoreError::AlreadyExists { .. } => "exists".into(),
        StoreError::Conflict {
            expected, found, ..
        } => format!("conflict {expected} {found}"),
        StoreError::Immutable(_) => "immutable".into(),
        StoreError::Invalid(_) => "invalid".into(),
        other => format!("other: {other}"),
    }
}

fn outcome<T: std::fmt::Debug>(r: Result<T, StoreError>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => kind(&e),
    }
}

struct World {
    drafts: Vec<DraftPlan>,
    approved: Vec<ApprovedPlan>,
    executions: Vec<(ApprovedPlan, ExecutionId)>,
}

fn stale_rev(rev: Revision, stale: bool) -> Revision {
    match (stale, rev.0) {
        (false, _) => rev,
        (true, 1) => Revision(2),
        (true, r) => Revision(r - 1),
    }
}

async fn apply<S: Store>(op: &Op, w: &mut World, mem: &MemoryStore, file: &S) -> (String, String) {
    macro_rules! both {
        ($call:ident ( $($arg:expr),* )) => {
            (outcome(mem.$call($($arg),*).await), outcome(file.$call($($arg),*).await))
        };
    }
    let h = holder("diff");
    match op {
        Op::CreateDraft => {
            let mut d = draft("draft");
            d.add_step(
                Step::new("a".parse().unwrap(), AgentId::shell(), "a").with_command("true"),
                None,
            )
            .unwrap();
            w.drafts.push(d.clone());
            both!(create_plan(&Plan::from(d.clone())))
        }
        Op::EditDraft { plan, stale } if !w.drafts.is_empty() => {
            let i = plan.index(w.drafts.len());
            let d = &mut w.drafts[i];
            d.set_goal(format!("goal {}", fastrand::u32(..)));
            let rev = mem
                .plan(d.id())
                .await
                .map(|p| p.revision)
                .unwrap_or(Revision::FIRST);
            let p = Plan::from(d.clone());
            both!(update_plan(&p, stale_rev(rev, *stale)))
        }
        Op::Approve { plan } if !w.drafts.is_empty() => {
            let d = w.drafts[plan.index(w.drafts.len())].clone();
            let agents: BTreeSet<AgentId> = [AgentId::shell()].into_iter().collect();
            let approved = d
                .submit(&agents, now())
                .unwrap()
                .approve("alice", None, now());
            let rev = mem
                .plan(approved.id())
                .await
                .map(|p| p.revision)
                .unwrap_or(Revision::FIRST);
            if !w.approved.iter().any(|a| a.id() == approved.id()) {
                w.approved.push(approved.clone());
            }
            let p = Plan::from(approved);
            both!(update_plan(&p, rev))
        }
        Op::CreateExecution { plan } if !w.approved.is_empty() => {
            let p = w.approved[plan.index(w.approved.len())].clone();
            let (exec, tasks) = new_execution(&p);
            w.executions.push((p, exec.id()));
            both!(create_execution(&exec, &tasks))
        }
        Op::Transition { exec, step, stale } if !w.executions.is_empty() => {
            let (plan, id) = w.executions[exec.index(w.executions.len())].clone();
            let Ok(snap) = mem.execution(id).await else {
                return (String::new(), String::new());
            };
            let i = step % snap.tasks.len();
            let next = next_task(&plan, &snap.task_values(), i, &h);
            let rev = stale_rev(snap.tasks[i].revision, *stale);
            both!(update_task(id, &next, rev))
        }
        Op::StartOrStop { exec, stale } if !w.executions.is_empty() => {
            let (_, id) = w.executions[exec.index(w.executions.len())];
            let Ok(snap) = mem.execution(id).await else {
                return (String::new(), String::new());
            };
            let next: Execution = match snap.execution.value.clone() {
                Execution::Pending(p) => p.start(now()).into(),
                Execution::Running(r) => r.stop("alice", None, now()).into(),
                other => other,
            };
            let rev = stale_rev(snap.execution.revision, *stale);
            both!(update_execution(&next, rev))
        }
        Op::Append { exec, secret } if !w.executions.is_empty() => {
            let (plan, id) = &w.executions[exec.index(w.executions.len())];
            let log = AuditLogId::Execution {
                plan_id: plan.id(),
                execution_id: *id,
            };
            let data = if *secret {
                json!({"token": "abc", "note": "sk-abcdefghijklmnop"})
            } else {
                json!({"n": 1})
            };
            let e = NewAuditEntry::new("event", data);
            let m = mem.append(log, e.clone()).await.map(|e| (e.seq, e.data));
            let f = file.append(log, e).await.map(|e| (e.seq, e.data));
            (outcome(m), outcome(f))
        }
        Op::Seal { exec } if !w.executions.is_empty() => {
            let (plan, id) = &w.executions[exec.index(w.executions.len())];
            let log = AuditLogId::Execution {
                plan_id: plan.id(),
                execution_id: *id,
            };
            let m = mem
                .seal(log)
                .await
                .map(|s| (s.entries, s.merkle_root == crate::audit::merkle_root(&[])));
            let f = file
                .seal(log)
                .await
                .map(|s| (s.entries, s.merkle_root == crate::audit::merkle_root(&[])));
            (outcome(m), outcome(f))
        }
        _ => (String::new(), String::new()),
    }
}

/// Applies `ops` to a memory store and `other`; every outcome and the final state must agree.
/// Applies `ops` to a new `MemoryStore` and to `other`: every outcome (revision, error kind)
/// and the state left, audit logs included, must be the same.
///
/// # Errors
///
/// The first difference, as a proptest failure.
pub async fn agree<S: Store>(ops: &[Op], other: &S) -> Result<(), TestCaseError> {
    let (mem, file) = (MemoryStore::new(), other);
    let mut w = World {
        drafts: Vec::new(),
        approved: Vec::new(),
        executions: Vec::new(),
    };
    // One approved plan to start with.
    let p = approved("seed", 2);
    mem.create_plan(&plan_of(&p)).await.unwrap();
    file.create_plan(&plan_of(&p)).await.unwrap();
    w.approved.push(p);
    for op in ops {
        let (m, f) = apply(op, &mut w, &mem, file).await;
        prop_assert_eq!(&m, &f, "{:?}", op);
    }
    let (lm, lf) = (
        mem.list_plans().await.unwrap(),
        file.list_plans().await.unwrap(),
    );
    prop_assert!(lf.problems.is_empty());
    prop_assert_eq!(lm.items, lf.items);
    let (em, ef) = (
        mem.list_executions(None).await.unwrap(),
        file.list_executions(None).await.unwrap(),
    );
    prop_assert_eq!(em.items, ef.items);
    for (_, id) in &w.executions {
        let (a, b) = (
            mem.execution(*id).await.ok(),
            file.execution(*id).await.ok(),
        );
        prop_assert_eq!(a, b);
    }
    for log in mem.audit_logs().await.unwrap() {
        let strip = |es: Vec<crate::AuditEntry>| {
            es.into_iter()
                .map(|e| (e.seq, e.parent, e.kind, e.data))
                .collect::<Vec<_>>()
        };
        prop_assert_eq!(
            strip(mem.entries(log).await.unwrap()),
            strip(file.entries(log).await.unwrap())
        );
        prop_assert!(file.verify(log).await.unwrap().is_intact());
    }
    Ok(())
}
