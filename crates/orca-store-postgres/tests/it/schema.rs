//! The schema as migrated on open (migration 3, how rows are stored): documents and audit lines
//! compressed with lz4 where the server has it, task pages half free for in-page updates, and a
//! large document written and read back byte for byte.

use orca_core::PlanId;
use orca_store::{AuditLogId, AuditStore, NewAuditEntry};
use serde_json::json;

use crate::db::{database, store_on};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_are_compressed_with_lz4_and_read_back_whole() {
    let url = database().await;
    let store = store_on(&url).await;
    let report = store.migrate().await.unwrap();
    assert_eq!(
        report.to,
        u32::try_from(orca_store_postgres::schema::MIGRATIONS.len()).unwrap()
    );

    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let methods: Vec<(String, String)> = client
        .query(
            "SELECT c.relname || '.' || a.attname, a.attcompression::text
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
             WHERE (c.relname, a.attname) IN
                 (('plans', 'doc'), ('executions', 'doc'), ('tasks', 'doc'),
                  ('audit_entries', 'line'))
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(methods.len(), 4, "{methods:?}");
    // This machine's PostgreSQL (Debian's) is built with lz4; one without keeps pglz ('').
    for (column, method) in &methods {
        assert_eq!(method, "l", "{column} is compressed with lz4");
    }

    let options: Option<Vec<String>> = client
        .query_one(
            "SELECT reloptions FROM pg_class WHERE relname = 'tasks'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(options, Some(vec!["fillfactor=50".to_owned()]));

    // A line long enough to be compressed is stored compressed (lz4) and reads back whole.
    let log = AuditLogId::Plan {
        plan_id: PlanId::new(),
    };
    let long = "the parser module handles edge cases ".repeat(200);
    store
        .append(log, NewAuditEntry::new("n", json!({ "text": long })))
        .await
        .unwrap();
    let stored: Option<String> = client
        .query_one(
            "SELECT pg_column_compression(line) FROM audit_entries ORDER BY seq DESC LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored.as_deref(), Some("lz4"));
    let (report, entries) = store.verified_entries(log).await.unwrap();
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(entries.last().unwrap().data["text"], json!(long));
}
