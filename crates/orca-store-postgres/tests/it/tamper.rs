//! A log edited behind orca's back, in the database itself: `verify` and `verified_entries`
//! (one read: the seal and every line, one snapshot) name the first bad entry, and the one-read
//! form gives no entries to go on with.

use orca_core::PlanId;
use orca_store::{AuditLogId, AuditStore, NewAuditEntry, VerifyReport};
use serde_json::json;

use crate::db::{database, store_on};

/// Each edit: entries appended, whether the log is sealed before the edit, the statement run
/// behind orca's back, the entry that must be named and a word of the problem.
const EDITS: &[(u64, bool, &str, u64, &str)] = &[
    (
        4,
        false,
        "UPDATE audit_entries SET line = replace(line, '\"i\":2', '\"i\":7') WHERE seq = 2",
        2,
        "changed",
    ),
    (
        4,
        false,
        "DELETE FROM audit_entries WHERE seq = 1",
        1,
        "removed",
    ),
    (
        3,
        true,
        "DELETE FROM audit_entries WHERE seq = 2",
        2,
        "truncated",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_edited_in_the_database_are_named_and_give_no_entries() {
    let mut named = 0;
    for &(n, sealed, edit, at, word) in EDITS {
        let url = database().await;
        let store = store_on(&url).await;
        let log = AuditLogId::Plan {
            plan_id: PlanId::new(),
        };
        for i in 0..n {
            store
                .append(log, NewAuditEntry::new("n", json!({ "i": i })))
                .await
                .unwrap();
        }
        if sealed {
            store.seal(log).await.unwrap();
        }
        let (report, entries) = store.verified_entries(log).await.unwrap();
        assert!(report.is_intact(), "{report:?}");
        assert_eq!(entries.len(), usize::try_from(n).unwrap());

        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        assert_eq!(client.execute(edit, &[]).await.unwrap(), 1, "{edit}");

        let (report, entries) = store.verified_entries(log).await.unwrap();
        let VerifyReport::Tampered { seq, problem } = &report else {
            panic!("not noticed: {edit}");
        };
        println!("{word}: entry {seq}: {problem}");
        assert_eq!((*seq, problem.contains(word)), (at, true), "{problem}");
        assert!(entries.is_empty());
        assert_eq!(store.verify(log).await.unwrap(), report);
        named += 1;
    }
    println!("edits named: {named} of {}", EDITS.len());
}
