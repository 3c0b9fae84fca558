//! Fuzz targets (proptest; cargo-fuzz needs nightly) for what orca reads from disk or from
//! people: plan documents, stored plan / execution / task files, and audit logs through the
//! file store's `verify`. Every input gets a value or a clear error, never a panic.
//!
//! Seeds: `fuzz/corpus/<target>/`. Inputs are seeds mutated byte-wise (flip, insert, delete,
//! truncate, duplicate a range) and structurally (JSON values replaced), plus arbitrary text.
//! Cases: `ORCA_FUZZ_CASES` (see `fuzz/engine.rs`, the shared engine);
//! `cargo xtask fuzz --cases N` runs more.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;

use orca_core::{AgentId, Execution, Plan, PlanContent, PlanId, Task};
use orca_store::{AuditLogId, AuditStore, FileStore};
use proptest::prelude::*;
use serde_json::Value;

#[path = "../../../../fuzz/engine.rs"]
mod engine;

use engine::*;

fn known_agents() -> BTreeSet<AgentId> {
    ["shell", "coder", "tester"]
        .iter()
        .map(|a| AgentId::parse(a).unwrap())
        .collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn plan_documents(bytes in input("plan_document")) {
        let text = String::from_utf8_lossy(&bytes);
        match PlanContent::from_json(&text) {
            Ok(content) => {
                for problem in content.validate(&known_agents()) {
                    clear(&problem.to_string());
                }
                let _ = content.digest();
            }
            Err(e) => clear(&e.to_string()),
        }
    }

    #[test]
    fn stored_plan_files(bytes in input("plan_file")) {
        let text = String::from_utf8_lossy(&bytes);
        match Plan::from_json(&text) {
            Ok(plan) => { let _ = (plan.stage(), plan.id(), plan.content().digest()); }
            Err(e) => clear(&e.to_string()),
        }
    }

    #[test]
    fn stored_execution_files(bytes in input("execution_file")) {
        let text = String::from_utf8_lossy(&bytes);
        match Execution::from_json(&text) {
            Ok(e) => { let _ = (e.stage(), e.id(), e.decision()); }
            Err(e) => clear(&e.to_string()),
        }
    }

    #[test]
    fn stored_task_files(bytes in input("task_file")) {
        let text = String::from_utf8_lossy(&bytes);
        match Task::from_json(&text) {
            Ok(t) => { let _ = (t.status(), t.counted_attempts(), t.success()); }
            Err(e) => clear(&e.to_string()),
        }
    }
}

/// An audit log in a real file store, with some lines mutated; `verify` never panics, and
/// reports tampering whenever the entries changed.
mod audit {
    use super::*;

    /// The plan log seed: `fuzz/corpus/audit_log/{plan_id}.plan.audit.jsonl`.
    fn plan_log_seed() -> (PlanId, Vec<String>) {
        let path = std::fs::read_dir(corpus_dir("audit_log"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".plan.audit.jsonl"))
            .unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let plan_id: PlanId = name.trim_end_matches(".plan.audit.jsonl").parse().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        (plan_id, text.lines().map(str::to_owned).collect())
    }

    #[derive(Debug, Clone)]
    enum LineEdit {
        Mutate(usize, Vec<Mutation>),
        Remove(usize),
        Swap(usize, usize),
        Duplicate(usize),
        Replace(usize, u64, Value),
    }

    fn edit() -> impl Strategy<Value = LineEdit> {
        prop_oneof![
            (any::<usize>(), proptest::collection::vec(mutation(), 1..4))
                .prop_map(|(i, m)| LineEdit::Mutate(i, m)),
            any::<usize>().prop_map(LineEdit::Remove),
            (any::<usize>(), any::<usize>()).prop_map(|(a, b)| LineEdit::Swap(a, b)),
            any::<usize>().prop_map(LineEdit::Duplicate),
            (any::<usize>(), any::<u64>(), json_leaf())
                .prop_map(|(i, p, v)| LineEdit::Replace(i, p, v)),
        ]
    }

    fn apply_edits(lines: &[String], edits: &[LineEdit]) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = lines.iter().map(|l| l.as_bytes().to_vec()).collect();
        for e in edits {
            if out.is_empty() {
                break;
            }
            let n = out.len();
            match e {
                LineEdit::Mutate(i, ms) => out[i % n] = apply(out[i % n].clone(), ms),
                LineEdit::Remove(i) => {
                    out.remove(i % n);
                }
                LineEdit::Swap(a, b) => out.swap(a % n, b % n),
                LineEdit::Duplicate(i) => {
                    let l = out[i % n].clone();
                    out.insert(i % n, l);
                }
                LineEdit::Replace(i, pick, with) => {
                    if let Ok(mut v) = serde_json::from_slice::<Value>(&out[i % n]) {
                        replace_value(&mut v, *pick, with.clone());
                        out[i % n] = serde_json::to_vec(&v).unwrap();
                    }
                }
            }
        }
        out
    }

    /// The entries as the store reads them: the file's lines as `str::lines` cuts them (a
    /// mutation may add a newline inside a line), each parsed strictly (a duplicated key or
    /// an unknown field is a change even when a loose JSON value would look the same); `None`
    /// if any line is not an entry.
    fn parsed<'a>(lines: impl Iterator<Item = &'a str>) -> Option<Vec<Value>> {
        lines
            .map(|l| {
                let entry: orca_store::audit::AuditEntry = serde_json::from_str(l).ok()?;
                serde_json::to_value(entry).ok()
            })
            .collect()
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn audit_lines(edits in proptest::collection::vec(edit(), 1..4)) {
            let (plan_id, lines) = plan_log_seed();
            let mutated = apply_edits(&lines, &edits);
            let original = parsed(lines.iter().map(String::as_str)).unwrap();
            let mut text = Vec::new();
            for l in &mutated {
                text.extend_from_slice(l);
                text.push(b'\n');
            }
            let now = std::str::from_utf8(&text).ok().and_then(|t| parsed(t.lines()));
            let changed = now.as_ref().is_none_or(|v| *v != original);
            // A plan log is never sealed: dropping its last entries leaves a valid shorter
            // chain, which no hash chain can tell from a log that ended there.
            let truncated = now.as_ref().is_some_and(|v| v.len() < original.len() && original.starts_with(v));

            let dir = tempfile::tempdir().unwrap();
            let store = FileStore::open(dir.path()).unwrap();
            let log_dir = dir.path().join(".orca/plans").join(plan_id.to_string());
            std::fs::create_dir_all(&log_dir).unwrap();
            std::fs::write(log_dir.join("plan.audit.jsonl"), &text).unwrap();

            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let result = rt.block_on(store.verify(AuditLogId::Plan { plan_id }));
            match result {
                Ok(report) => {
                    if truncated {
                        // Either answer is acceptable.
                    } else if changed {
                        prop_assert!(!report.is_intact(), "tampering not detected: {edits:?}");
                    } else {
                        prop_assert!(report.is_intact(), "unchanged entries reported as tampered: {report:?}");
                    }
                }
                Err(e) => clear(&e.to_string()),
            }
        }
    }

    proptest! {
        #![proptest_config(config())]

        /// A signed, sealed log (ADR 0013): any change to its entries — truncation included —
        /// or to what its seal says is detected; the seal's signature covers its log id,
        /// count, root and time.
        #[test]
        fn signed_audit_lines(
            edits in proptest::collection::vec(edit(), 0..4),
            seal_edits in proptest::collection::vec(mutation(), 0..3),
        ) {
            let (plan_id, lines) = plan_log_seed();
            let log = AuditLogId::Plan { plan_id };
            let dir = tempfile::tempdir().unwrap();
            let key = orca_store::SigningKey::from_seed([11; 32]);
            let store = FileStore::open_with(dir.path(), orca_store::Authority::new(Some(key), [])).unwrap();
            let log_dir = dir.path().join(".orca/plans").join(plan_id.to_string());
            std::fs::create_dir_all(&log_dir).unwrap();
            std::fs::write(log_dir.join("plan.audit.jsonl"), lines.join("\n") + "\n").unwrap();
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(store.seal(log)).unwrap();
            let seal_path = store.seal_path(log);
            let seal = std::fs::read(&seal_path).unwrap();
            let seal_now = apply(seal.clone(), &seal_edits);
            let seal_changed = serde_json::from_slice::<Value>(&seal_now).ok()
                != serde_json::from_slice::<Value>(&seal).ok();

            let mutated = apply_edits(&lines, &edits);
            let original = parsed(lines.iter().map(String::as_str)).unwrap();
            let mut text = Vec::new();
            for l in &mutated {
                text.extend_from_slice(l);
                text.push(b'\n');
            }
            let now = std::str::from_utf8(&text).ok().and_then(|t| parsed(t.lines()));
            let changed = now.as_ref().is_none_or(|v| *v != original);
            std::fs::write(log_dir.join("plan.audit.jsonl"), &text).unwrap();
            std::fs::write(&seal_path, &seal_now).unwrap();

            match rt.block_on(store.verify(log)) {
                Ok(report) => {
                    if changed || seal_changed {
                        prop_assert!(!report.is_intact(), "tampering not detected: {edits:?} {seal_edits:?}");
                    } else {
                        prop_assert!(report.is_intact(), "unchanged log reported as tampered: {report:?}");
                    }
                }
                Err(e) => clear(&e.to_string()),
            }
        }
    }

    /// Found by the fuzzer on CI: `"format_version": 99,` inserted into the seal's `log`
    /// object was read as the same seal (the log id took unknown fields) and verified intact.
    /// A seal that says anything more than it signed is not the seal that was written.
    #[test]
    fn a_seal_whose_log_id_gained_a_field_is_not_intact() {
        let (plan_id, lines) = plan_log_seed();
        let log = AuditLogId::Plan { plan_id };
        let dir = tempfile::tempdir().unwrap();
        let key = orca_store::SigningKey::from_seed([11; 32]);
        let store =
            FileStore::open_with(dir.path(), orca_store::Authority::new(Some(key), [])).unwrap();
        let log_dir = dir.path().join(".orca/plans").join(plan_id.to_string());
        std::fs::create_dir_all(&log_dir).unwrap();
        std::fs::write(log_dir.join("plan.audit.jsonl"), lines.join("\n") + "\n").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(store.seal(log)).unwrap();
        let path = store.seal_path(log);
        let mut seal: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        seal["log"]["format_version"] = serde_json::json!(99);
        std::fs::write(&path, serde_json::to_vec(&seal).unwrap()).unwrap();
        match rt.block_on(store.verify(log)) {
            Ok(report) => assert!(!report.is_intact(), "{report:?}"),
            Err(e) => clear(&e.to_string()),
        }
    }

    #[test]
    fn the_seed_log_verifies() {
        let (plan_id, lines) = plan_log_seed();
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let log_dir = dir.path().join(".orca/plans").join(plan_id.to_string());
        std::fs::create_dir_all(&log_dir).unwrap();
        std::fs::write(log_dir.join("plan.audit.jsonl"), lines.join("\n") + "\n").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let report = rt
            .block_on(store.verify(AuditLogId::Plan { plan_id }))
            .unwrap();
        assert!(report.is_intact(), "{report:?}");
    }
}

/// Every seed of the stored-file targets is itself valid, so mutations start from real files.
#[test]
fn seeds_are_valid() {
    for s in corpus("plan_document") {
        let content = PlanContent::from_json(std::str::from_utf8(&s).unwrap()).unwrap();
        assert!(content.validate(&known_agents()).is_empty());
    }
    for s in corpus("plan_file") {
        Plan::from_json(std::str::from_utf8(&s).unwrap()).unwrap();
    }
    for s in corpus("execution_file") {
        Execution::from_json(std::str::from_utf8(&s).unwrap()).unwrap();
    }
    for s in corpus("task_file") {
        Task::from_json(std::str::from_utf8(&s).unwrap()).unwrap();
    }
}
