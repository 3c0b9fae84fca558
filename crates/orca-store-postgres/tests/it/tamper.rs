//! A log edited behind orca's back, in the database itself: `verify` and `verified_entries`
//! (one read: the seal and every line, one snapshot) name the first bad entry, and the one-read
//! form gives no entries to go on with.

#![expect(clippy::unwrap_used, reason = "tests")]

use orca_core::PlanId;
use orca_core::redact::Redactor;
use orca_store::{AuditLogId, AuditStore, Authority, NewAuditEntry, VerifyReport};
use orca_store_postgres::PgStore;
use orca_store_postgres::throwaway::Throwaway;
use serde_json::json;

/// A store on a new database, a log of `n` entries, and a plain client on the same database.
async fn log_of(n: u64) -> (PgStore, AuditLogId, tokio_postgres::Client) {
    let server = Throwaway::shared().unwrap_or_else(|e| panic!("{e}"));
    let url = server.create_database().await.unwrap();
    let store = PgStore::connect(&url, Authority::permissive(), Redactor::new())
        .await
        .unwrap();
    let log = AuditLogId::Plan {
        plan_id: PlanId::new(),
    };
    for i in 0..n {
        store
            .append(log, NewAuditEntry::new("n", json!({ "i": i })))
            .await
            .unwrap();
    }
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    (store, log, client)
}

fn tampered_at(report: &VerifyReport) -> Option<(u64, String)> {
    match report {
        VerifyReport::Tampered { seq, problem } => Some((*seq, problem.clone())),
        VerifyReport::Intact { .. } => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_edited_in_the_database_are_named_and_give_no_entries() {
    // A changed line (its data edited, the hash left as it was).
    let (store, log, client) = log_of(4).await;
    let (report, entries) = store.verified_entries(log).await.unwrap();
    assert!(report.is_intact());
    assert_eq!(entries.len(), 4);
    client
        .execute(
            "UPDATE audit_entries SET line = replace(line, '\"i\":2', '\"i\":7') WHERE seq = 2",
            &[],
        )
        .await
        .unwrap();
    let (report, entries) = store.verified_entries(log).await.unwrap();
    let (seq, problem) = tampered_at(&report).unwrap();
    println!("changed: entry {seq}: {problem}");
    assert_eq!(seq, 2, "{problem}");
    assert!(problem.contains("changed"), "{problem}");
    assert!(entries.is_empty());
    assert_eq!(
        tampered_at(&store.verify(log).await.unwrap()),
        Some((seq, problem))
    );

    // A removed row.
    let (store, log, client) = log_of(4).await;
    client
        .execute("DELETE FROM audit_entries WHERE seq = 1", &[])
        .await
        .unwrap();
    let (report, entries) = store.verified_entries(log).await.unwrap();
    let (seq, problem) = tampered_at(&report).unwrap();
    println!("removed: entry {seq}: {problem}");
    assert_eq!(seq, 1, "{problem}");
    assert!(problem.contains("removed"), "{problem}");
    assert!(entries.is_empty());

    // A sealed log whose last row was deleted afterwards (the seal covers more than remains).
    let (store, log, client) = log_of(3).await;
    store.seal(log).await.unwrap();
    client
        .execute("DELETE FROM audit_entries WHERE seq = 2", &[])
        .await
        .unwrap();
    let (report, entries) = store.verified_entries(log).await.unwrap();
    let (seq, problem) = tampered_at(&report).unwrap();
    println!("truncated: entry {seq}: {problem}");
    assert!(problem.contains("truncated"), "{problem}");
    assert!(entries.is_empty());
}
