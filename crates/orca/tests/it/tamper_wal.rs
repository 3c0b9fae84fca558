//! Tampering with the audit entries an execution's write-ahead log carries (ADR 0030: a task
//! transition and its entry are one record of the log; the audit file is a copy written after
//! it, repaired from the log after a crash). Each case is done to a copy of the tamper
//! catalogue's project, on `w1` (a running execution: its log unsealed, its write-ahead log
//! holding the entries of its last run). A sealed log is read from its file alone, so the
//! write-ahead log of a finished execution cannot change what is read (the catalogue's sealed
//! cases cover the file).
//!
//! Prints `write-ahead audit records: N/N repaired or harmless` and
//! `write-ahead audit records: N/N detected`.

#![expect(clippy::unwrap_used, reason = "tests")]

use serde_json::json;

use crate::tamper::{Case, case, check, gated, resume_w1};
use crate::tamper_support::*;

/// Cuts the audit file back to the first entry its write-ahead log holds: what a crash
/// between the log's `fdatasync` and the copy (or a power failure losing the copy's unsynced
/// tail) leaves.
fn cut_to_wal(p: &Proj) -> u64 {
    let first = *wal_audit_seqs(&p.w1_wal())
        .iter()
        .min()
        .expect("the fixture's write-ahead log holds audit entries");
    truncate(&p.w1_log(), usize::try_from(first).unwrap());
    first
}

/// Edits the newest audit record of the write-ahead log (its data), in place.
fn edit_last_audit_record(p: &Proj) {
    let wal = p.w1_wal();
    let mut all = lines(&wal);
    let at = all.iter().rposition(|l| l.contains("\"audit\"")).unwrap();
    let mut r: serde_json::Value = serde_json::from_str(&all[at]).unwrap();
    r["audit"]["data"]["forged"] = json!(true);
    all[at] = r.to_string();
    write_lines(&wal, &all);
}

#[test]
fn write_ahead_audit_records_tampered_are_repaired_or_harmless() {
    let fixture = Fixture::new();
    type Tamper = fn(&Proj);
    let cases: [(&str, Tamper); 5] = [
        (
            "cut the audit file back to its write-ahead log (a crash before the copy)",
            |p| {
                cut_to_wal(p);
            },
        ),
        (
            "edit an audit record the audit file also holds",
            edit_last_audit_record,
        ),
        ("reorder the write-ahead log (audit records too)", |p| {
            let mut all = lines(&p.w1_wal());
            all.reverse();
            write_lines(&p.w1_wal(), &all);
        }),
        (
            // Cutting its task records too takes the tasks back (ADR 0056): the catalogue's
            // "roll back the write-ahead log of a running execution" (detected).
            "remove the write-ahead log's entry-only records (the audit file holds them)",
            |p| {
                let all = lines(&p.w1_wal());
                let kept: Vec<String> = all
                    .iter()
                    .filter(|l| l.contains("\"step\""))
                    .cloned()
                    .collect();
                assert_ne!(kept.len(), all.len(), "no entry-only record to remove");
                write_lines(&p.w1_wal(), &kept);
            },
        ),
        (
            "add a second, different copy of an entry to the write-ahead log",
            |p| {
                let wal = p.w1_wal();
                let mut all = lines(&wal);
                let at = all.iter().position(|l| l.contains("\"audit\"")).unwrap();
                let mut r: serde_json::Value = serde_json::from_str(&all[at]).unwrap();
                r.as_object_mut().unwrap().retain(|k, _| k == "audit");
                r["audit"]["kind"] = json!("forged.kind");
                all.push(r.to_string());
                write_lines(&wal, &all);
            },
        ),
    ];
    let clean = fixture.copy();
    let verify = |p: &Proj| {
        let out = p.run(&["audit", "verify", "--all"]);
        (
            code(&out),
            text(&out).replace(&p.root().display().to_string(), ""),
        )
    };
    let show = |p: &Proj| text(&p.run(&["exec", "show", &p.ids.w1]));
    let expected = (verify(&clean), show(&clean));
    let entries = lines(&clean.w1_log()).len();
    assert!(
        !wal_audit_seqs(&clean.w1_wal()).is_empty(),
        "the fixture's write-ahead log holds no audit entry"
    );
    let mut fine = 0;
    for (name, tamper) in cases {
        let p = fixture.copy();
        tamper(&p);
        let same = (verify(&p), show(&p)) == expected;
        // And the next writer (resume takes the lease: compaction) leaves the audit file whole:
        // every entry there, the chain intact.
        let out = p.run(&["exec", "resume", &p.ids.w1]);
        let whole = lines(&p.w1_log()).len() >= entries && code(&out) != 5;
        println!(
            "{name:<72} {} (resume exit {})",
            if same && whole {
                "REPAIRED/HARMLESS"
            } else {
                "CHANGED"
            },
            code(&out)
        );
        if !(same && whole) {
            println!("{}\n{}", verify(&p).1, text(&out));
        }
        fine += usize::from(same && whole);
    }
    println!(
        "write-ahead audit records: {fine}/{} repaired or harmless",
        cases.len()
    );
    assert_eq!(fine, cases.len());
}

#[test]
fn write_ahead_audit_records_tampered_past_the_file_are_detected() {
    let fixture = Fixture::new();
    let cases: Vec<Case> = vec![
        gated(
            case(
                "edit an audit record the audit file lacks (after a crash)",
                |p| {
                    cut_to_wal(p);
                    edit_last_audit_record(p);
                },
                Proj::w1_log,
                None,
            ),
            resume_w1,
        ),
        gated(
            case(
                "remove an audit record the audit file lacks (after a crash)",
                |p| {
                    let first = cut_to_wal(p);
                    let wal = p.w1_wal();
                    let kept: Vec<String> = lines(&wal)
                        .into_iter()
                        .filter(|l| {
                            serde_json::from_str::<serde_json::Value>(l).unwrap()["audit"]["seq"]
                                .as_u64()
                                != Some(first)
                        })
                        .collect();
                    write_lines(&wal, &kept);
                },
                Proj::w1_log,
                None,
            ),
            resume_w1,
        ),
    ];
    let detected = cases.iter().filter(|c| check(&fixture, c)).count();
    println!(
        "write-ahead audit records: {detected}/{} detected",
        cases.len()
    );
    assert_eq!(detected, cases.len());
}

/// Tampering with the task write-ahead log of an ended execution that cannot change what is
/// read (the execution's end folded the log into the task snapshot and emptied it: only a
/// newer revision could count, and that is the catalogue's forged record): `exec show` prints
/// the same, and `audit verify --all` exits as it did before. Prints `write-ahead log: N/N
/// harmless`.
#[test]
fn write_ahead_log_tampering_without_a_newer_revision_changes_nothing() {
    let fixture = Fixture::new();
    type WalTamper = fn(&std::path::Path);
    /// `a`'s record in the snapshot beside the log, as a log line `back` revisions older,
    /// with another result.
    fn forged(wal: &std::path::Path, back: u64) -> String {
        let mut task = task_record(&wal.with_file_name("tasks.json"), "a");
        let revision = task["revision"].as_u64().unwrap() - back;
        task.as_object_mut().unwrap().remove("revision");
        task["result"]["summary"] = json!("forged");
        json!({"step": "a", "revision": revision, "task": task}).to_string()
    }
    let cases: [(&str, WalTamper); 4] = [
        ("empty the write-ahead log", |w| {
            std::fs::write(w, b"").unwrap()
        }),
        ("remove the write-ahead log", |w| {
            std::fs::remove_file(w).unwrap()
        }),
        ("append an edited record at the snapshot's revision", |w| {
            let mut all = lines(w);
            all.push(forged(w, 0));
            write_lines(w, &all);
        }),
        ("append an edited record older than the snapshot's", |w| {
            let mut all = lines(w);
            all.push(forged(w, 1));
            write_lines(w, &all);
        }),
    ];
    let clean = fixture.copy();
    let show = |p: &Proj| text(&p.run(&["exec", "show", &p.ids.a1]));
    let expected = show(&clean);
    let verify_code = code(&clean.run(&["audit", "verify", "--all"]));
    let mut harmless = 0;
    for (name, tamper) in cases {
        let p = fixture.copy();
        let wal = p.wal(&p.ids.a, &p.ids.a1);
        assert!(wal.is_file(), "{name}: no write-ahead log in the fixture");
        assert!(
            lines(&wal).is_empty(),
            "{name}: an ended execution's log is not empty"
        );
        tamper(&wal);
        let verify = p.run(&["audit", "verify", "--all"]);
        let same = show(&p) == expected && code(&verify) == verify_code;
        println!("{name:<66} {}", if same { "HARMLESS" } else { "CHANGED" });
        harmless += usize::from(same);
    }
    println!("write-ahead log: {harmless}/{} harmless", cases.len());
    assert_eq!(harmless, cases.len());
}
