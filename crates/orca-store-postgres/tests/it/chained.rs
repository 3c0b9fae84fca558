//! Entries chained by the database (ADR 0060), against a real throwaway server: the line and
//! the hash it builds are byte for byte what orca builds; a head it cannot read stops the
//! write, naming the log, and writes nothing; a head's hash column changed behind orca's back
//! breaks the chain where `audit verify` finds it; writers in several stores on one log never
//! lose a write nor share a number.

use std::collections::HashSet;

use orca_core::PlanId;
use orca_store::{AuditLogId, AuditStore, NewAuditEntry};
use serde_json::json;

use crate::db::{database, store_on};

async fn client(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

fn plan_log() -> AuditLogId {
    AuditLogId::Plan {
        plan_id: PlanId::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_databases_line_and_hash_are_orcas_byte_for_byte()
-> Result<(), Box<dyn std::error::Error>> {
    let url = database().await;
    let store = store_on(&url).await;
    let log = plan_log();
    let data = [
        json!({"text": "é ✓ 😀 \"quoted\" \\ back\nslash\t\u{1}", "n": [1, 2.5, -3, null, true]}),
        json!({"z": {"b": 1, "a": 2}, "": "", "emoji": "👩‍👩‍👧"}),
        json!("a bare string"),
    ];
    let mut answered = Vec::new();
    for (i, d) in data.iter().enumerate() {
        let mut entry = NewAuditEntry::new(format!("kind.{i}"), d.clone());
        entry.parent = answered
            .last()
            .map(|e: &orca_store::audit::AuditEntry| e.seq);
        answered.push(store.append(log, entry).await?);
    }
    let raw = store.raw_log(log).await?;
    assert_eq!(raw.lines.len(), 3);
    for (line, entry) in raw.lines.iter().zip(&answered) {
        assert_eq!(line, &serde_json::to_string(entry)?, "the stored line");
        assert_eq!(entry.hash, orca_store::audit::entry_hash(entry), "the hash");
    }
    let (report, entries) = store.verified_entries(log).await?;
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(entries, answered, "answered what is stored");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_without_its_hash_stops_the_write_and_names_the_log()
-> Result<(), Box<dyn std::error::Error>> {
    let url = database().await;
    let store = store_on(&url).await;
    let db = client(&url).await?;
    let log = plan_log();
    store
        .append(log, NewAuditEntry::new("first", json!({})))
        .await?;
    // The head's line cut short and its hash column emptied behind orca's back.
    db.execute(
        "UPDATE audit_entries SET line = left(line, 40), hash = NULL",
        &[],
    )
    .await?;
    let other = store_on(&url).await;
    let err = other
        .append(log, NewAuditEntry::new("second", json!({})))
        .await
        .err()
        .ok_or("a write after a head without its hash was accepted")?;
    let mut shown = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        shown = format!("{shown}: {s}");
        source = s.source();
    }
    let err = shown;
    assert!(err.contains("does not end with its hash"), "{err}");
    assert!(err.contains("#0"), "names the entry: {err}");
    let rows: i64 = db
        .query_one("SELECT count(*) FROM audit_entries", &[])
        .await?
        .get(0);
    assert_eq!(rows, 1, "nothing written");
    println!("{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_hash_changed_behind_orcas_back_breaks_the_chain_where_verify_finds_it()
-> Result<(), Box<dyn std::error::Error>> {
    let url = database().await;
    let store = store_on(&url).await;
    let db = client(&url).await?;
    let log = plan_log();
    store
        .append(log, NewAuditEntry::new("first", json!({})))
        .await?;
    db.execute("UPDATE audit_entries SET hash = repeat('a', 64)", &[])
        .await?;
    store
        .append(log, NewAuditEntry::new("second", json!({})))
        .await?;
    let report = store.verify(log).await?;
    assert!(!report.is_intact(), "a chain after a forged head verified");
    println!("{report:?}");
    Ok(())
}

/// Writers of one log in four stores (four processes' worth of connections), 25 entries each,
/// all at once: every write answered, numbers 0..100 each once, the chain intact, and what each
/// was answered is what is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_in_four_stores_on_one_log_lose_nothing_and_share_no_number()
-> Result<(), Box<dyn std::error::Error>> {
    let url = database().await;
    let log = plan_log();
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(store_on(&url).await);
    }
    let mut writes = tokio::task::JoinSet::new();
    for (s, store) in stores.iter().enumerate() {
        for i in 0..25 {
            let store = store.clone();
            writes.spawn(async move {
                store
                    .append(log, NewAuditEntry::new("w", json!({ "store": s, "i": i })))
                    .await
            });
        }
    }
    let mut answered = Vec::new();
    while let Some(done) = writes.join_next().await {
        answered.push(done??);
    }
    let seqs: HashSet<u64> = answered.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..100).collect::<HashSet<u64>>());
    let (report, entries) = stores[0].verified_entries(log).await?;
    assert!(report.is_intact(), "{report:?}");
    for e in &answered {
        let stored = usize::try_from(e.seq).ok().and_then(|i| entries.get(i));
        assert_eq!(stored, Some(e), "answered what is stored");
    }
    println!("100 writes from 4 stores: numbers 0..100 once each, chain intact");
    Ok(())
}
