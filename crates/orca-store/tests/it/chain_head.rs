//! An append finds the chain head it expects: a log cut or rewritten behind the store's back
//! is never silently restarted (ADR 0013). Also: signed seals name their log.

use orca_core::{ExecutionId, PlanId};
use orca_store::audit::NewAuditEntry;
use orca_store::{
    AuditLogId, AuditStore, Authority, FileStore, SigningKey, StoreError, VerifyReport,
};
use serde_json::json;

fn log() -> AuditLogId {
    AuditLogId::Execution {
        plan_id: PlanId::new(),
        execution_id: ExecutionId::new(),
    }
}

#[tokio::test]
async fn an_append_after_the_log_was_cut_or_rewritten_stops() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let other = FileStore::open(dir.path()).unwrap();
    let log = log();
    for i in 0..3 {
        store
            .append(log, NewAuditEntry::new("k", json!({ "i": i })))
            .await
            .unwrap();
    }
    // Another process (handle) appending is fine: the head moves forward.
    other
        .append(log, NewAuditEntry::new("k", json!({ "i": 3 })))
        .await
        .unwrap();
    store
        .append(log, NewAuditEntry::new("k", json!({ "i": 4 })))
        .await
        .unwrap();
    let path = store.audit_path(log);
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
    let mut refused = 0;
    // Cut to two entries.
    std::fs::write(&path, &kept).unwrap();
    let err = store
        .append(log, NewAuditEntry::new("k", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Tampered { .. }), "{err}");
    assert!(err.to_string().contains("truncated or rewritten"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        kept,
        "nothing appended"
    );
    refused += 1;
    // Emptied.
    std::fs::write(&path, "").unwrap();
    let err = store
        .append(log, NewAuditEntry::new("k", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Tampered { .. }), "{err}");
    refused += 1;
    // Emptied while the execution's write-ahead log still holds every entry: another process
    // (a fresh handle, as after a restart) restores them from it before appending.
    let fresh = FileStore::open(dir.path()).unwrap();
    let restored = fresh
        .append(log, NewAuditEntry::new("k", json!({ "i": 5 })))
        .await
        .unwrap();
    assert_eq!(restored.seq, 5, "the five entries were restored first");
    assert!(fresh.verify(log).await.unwrap().is_intact());
    println!("an emptied log restored from the write-ahead log by a fresh process: 5/5 entries");
    // Rewritten to the same length with a different last entry (the log and its write-ahead
    // log both rewritten).
    let fresh = FileStore::open(dir.path()).unwrap();
    std::fs::write(&path, "").unwrap();
    let AuditLogId::Execution { execution_id, .. } = log else {
        unreachable!()
    };
    let wal = path
        .parent()
        .unwrap()
        .join(execution_id.to_string())
        .join("tasks.wal.jsonl");
    std::fs::remove_file(&wal).unwrap();
    for i in 0..5 {
        fresh
            .append(log, NewAuditEntry::new("other", json!({ "i": i })))
            .await
            .unwrap();
    }
    let err = store
        .append(log, NewAuditEntry::new("k", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Tampered { .. }), "{err}");
    refused += 1;
    println!("appends refused after the chain head moved back or changed: {refused}/3");
}

#[tokio::test]
async fn signed_seals_name_their_log_and_verify_only_with_trusted_keys() {
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::from_seed([5; 32]);
    let signer = FileStore::open_with(dir.path(), Authority::new(Some(key.clone()), [])).unwrap();
    let log = log();
    signer
        .append(log, NewAuditEntry::new("k", json!({})))
        .await
        .unwrap();
    let seal = signer.seal(log).await.unwrap();
    assert_eq!(seal.log, Some(log));
    assert!(seal.signature.is_some());
    assert!(signer.verify(log).await.unwrap().is_intact());
    // Another user, who does not trust this key, sees the seal as untrusted.
    let stranger = FileStore::open_with(
        dir.path(),
        Authority::new(Some(SigningKey::from_seed([6; 32])), []),
    )
    .unwrap();
    match stranger.verify(log).await.unwrap() {
        VerifyReport::Tampered { problem, .. } => {
            assert!(problem.contains("not trusted"), "{problem}")
        }
        other => panic!("untrusted seal accepted: {other:?}"),
    }
    // Trusting it explicitly works.
    let trusting = FileStore::open_with(dir.path(), Authority::new(None, [key.public()])).unwrap();
    assert!(trusting.verify(log).await.unwrap().is_intact());
}

/// The execution's write-ahead log rewritten in place (the same file, so the same inode, and
/// longer) behind a store that had read it: the store reads it again from its start — it
/// used to go on at the offset it had reached, in the middle of a line of the new content, and
/// fail on a "line that is not a record" instead of seeing the chain changed. (A log deleted
/// and written anew can get its inode number back from ext4 and looks the same.)
#[tokio::test]
async fn a_write_ahead_log_rewritten_in_place_is_read_again_from_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let log = log();
    for i in 0..3 {
        store
            .append(log, NewAuditEntry::new("k", json!({ "i": i })))
            .await
            .unwrap();
    }
    // The same log's write-ahead log, written by another store elsewhere: longer lines.
    let elsewhere = tempfile::tempdir().unwrap();
    let other = FileStore::open(elsewhere.path()).unwrap();
    for i in 0..5 {
        other
            .append(log, NewAuditEntry::new("other", json!({ "i": i })))
            .await
            .unwrap();
    }
    let AuditLogId::Execution { execution_id, .. } = log else {
        unreachable!()
    };
    let wal = |store: &FileStore| {
        store
            .audit_path(log)
            .parent()
            .unwrap()
            .join(execution_id.to_string())
            .join("tasks.wal.jsonl")
    };
    let (ours, theirs) = (wal(&store), wal(&other));
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&ours).unwrap());
    std::fs::write(&ours, std::fs::read(&theirs).unwrap()).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&ours).unwrap()),
        ino,
        "rewritten in place"
    );
    let err = store
        .append(log, NewAuditEntry::new("k", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Tampered { .. }), "{err}");
    println!("a write-ahead log rewritten in place: read again, the changed chain refused");
}
