//! An ending is one transaction (the header, its entry, the seal): when any part of it fails,
//! none of it is written — the header does not end without its entry and seal, which `audit
//! verify` would take for a deleted seal. The part made to fail here is the chaining of a
//! staged row that is not an entry (written behind orca's back).

use orca_core::{Execution, ExecutionStage};
use orca_store::testkit::fixtures::{now, running_execution};
use orca_store::{AuditLogId, AuditStore, ExecutionStore, NewAuditEntry, VerifyReport};
use serde_json::json;

use crate::db::{database, store_on};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ending_that_cannot_seal_leaves_the_execution_running_and_its_log_unsealed() {
    let url = database().await;
    let store = store_on(&url).await;
    let (db, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let (plan, _, running, at) = running_execution(&store, "end", 1).await;
    let id = running.info.id;
    let log = AuditLogId::Execution {
        plan_id: plan.id(),
        execution_id: id,
    };
    store
        .append(log, NewAuditEntry::new("execution.started", json!({})))
        .await
        .unwrap();
    let key: String = db
        .query_one(
            "SELECT log_key FROM audit_logs WHERE log_id LIKE '%' || $1 || '%'",
            &[&id.to_string()],
        )
        .await
        .unwrap()
        .get(0);
    db.execute(
        "INSERT INTO audit_staged (log_key, entry) VALUES ($1, 'not json')",
        &[&key],
    )
    .await
    .unwrap();

    let failed = Execution::Failed(running.fail("a step failed", None, now()));
    let entry = || NewAuditEntry::new("execution.failed", json!({ "reason": "r" }));
    let err = store
        .end_execution(&store, &failed, at, entry())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a staged entry"), "{err}");
    let header = store.execution_header(id).await.unwrap();
    assert_eq!(
        (header.revision, header.value.stage()),
        (at, ExecutionStage::Running),
        "the header must not end when its seal cannot be written"
    );
    let staged: i64 = db
        .query_one("SELECT count(*) FROM audit_staged", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(staged, 1, "the ending entry is not left staged");
    let lines: i64 = db
        .query_one("SELECT count(*) FROM audit_entries", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(lines, 1, "nothing chained");

    // The row removed, the same ending goes through whole.
    db.execute("DELETE FROM audit_staged", &[]).await.unwrap();
    let ended = store
        .end_execution(&store, &failed, at, entry())
        .await
        .unwrap();
    assert_eq!(ended.revision, at.next());
    assert_eq!(
        store.verify(log).await.unwrap(),
        VerifyReport::Intact {
            entries: 2,
            sealed: true
        }
    );
}
