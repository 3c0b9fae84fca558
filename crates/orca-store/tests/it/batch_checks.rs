//! `update_tasks_with_audit` for every backend (the conformance suite): a refusal is named by
//! its index and writes nothing of the refused transition; what a backend reports as written
//! (nothing on a one-write backend, the prefix on the default) is exactly what is stored; a
//! whole batch is written in order and the chain verifies.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common::*;

use orca_store::audit::NewAuditEntry;
use orca_store::{AuditLogId, Revision, Store, TaskTransition, VerifyReport, WriteOrder};
use serde_json::json;

pub(crate) async fn batch_in_order_refusal_named<S: Store>(store: &S) {
    let plan = approved("batch", 3);
    store.create_plan(&plan_of(&plan)).await.unwrap();
    let (exec, tasks) = new_execution(&plan);
    let id = exec.id();
    store.create_execution(&exec, &tasks).await.unwrap();
    let log = AuditLogId::Execution {
        plan_id: plan.id(),
        execution_id: id,
    };
    let h = holder("batch");
    let transition = |k: usize, expected: Revision| TaskTransition {
        plan_id: plan.id(),
        execution_id: id,
        task: next_task(&plan, &tasks, k, &h),
        expected,
        entry: NewAuditEntry::new("test.claim", json!({ "k": k })),
        order: WriteOrder::StateFirst,
    };
    let failed = store
        .update_tasks_with_audit(
            store,
            vec![
                transition(0, Revision::FIRST),
                transition(1, Revision(9)),
                transition(2, Revision::FIRST),
            ],
        )
        .await
        .unwrap_err();
    assert_eq!(failed.index, 1, "{failed}");
    assert!(failed.error.is_conflict(), "{failed}");
    assert!(failed.written.len() <= 1);
    let snap = store.execution(id).await.unwrap();
    let written = failed.written.len();
    assert_eq!(snap.tasks[0].revision.0, 1 + written as u64);
    assert_eq!(snap.tasks[1].revision, Revision::FIRST);
    assert_eq!(snap.tasks[2].revision, Revision::FIRST);
    assert_eq!(store.entries(log).await.unwrap().len(), written);

    let mut batch = vec![
        transition(1, Revision::FIRST),
        transition(2, Revision::FIRST),
    ];
    if written == 0 {
        batch.insert(0, transition(0, Revision::FIRST));
    }
    let done = store.update_tasks_with_audit(store, batch).await.unwrap();
    assert!(done.iter().all(|d| d.revision == Revision(2)));
    let entries = store.entries(log).await.unwrap();
    assert_eq!(
        entries
            .iter()
            .map(|e| e.data["k"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(
        store.verify(log).await.unwrap(),
        VerifyReport::Intact {
            entries: 3,
            sealed: false
        }
    );
}
