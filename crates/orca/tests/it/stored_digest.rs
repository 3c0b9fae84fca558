//! The digest is of what is stored. A step prints secret-shaped text (a GitHub token, an
//! Anthropic key); the store keeps its result redacted, and the `result_digest` the log records
//! is the digest of that stored, redacted result. So the untouched run verifies (no false
//! TAMPERED), and no record holds a secret or a digest of one (an offline guessing oracle).
//! A record written before (its digest of the unredacted result) is named old-format by `audit
//! verify`, never TAMPERED; a result changed under a current record still is.
//!
//! `cargo test -p orca --test it stored_digest:: -- --nocapture` prints the counts.

#![expect(clippy::unwrap_used, reason = "tests may unwrap")]

use std::path::{Path, PathBuf};

use orca_core::Digest;
use serde_json::{Value, json};

use crate::common::project::{Project, code, plan_doc, stdout};
use crate::tamper_support::{exec_log_id, forge_seal, rechain, set_task_record, task_record};

/// 36 letters and digits: the body of a classic GitHub token.
const GH_BODY: &str = "Zq8Xw2Vb7Nc4Md1Lf6Kg3Jh9Hs5Ra0TyUiOp";
/// The body of an Anthropic API key (`sk-ant-api03-…AA`).
const SK_BODY: &str =
    "q7Wm3Nx9Bv2Lc5Kd8Jf1Hg4Gs6Fa0DpOiUyTrEwQ-zAxScDvFbGnHmJkLp_9o8i7u6y5t4r3e2w1qAsDfGhJkLzXcVbNm";

fn gh() -> String {
    format!("ghp_{GH_BODY}")
}

fn sk() -> String {
    format!("sk-ant-api03-{SK_BODY}AA")
}

/// Every file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// How many files under `.orca/` hold `needle`.
fn holding(root: &Path, needle: &str) -> usize {
    files(&root.join(".orca"))
        .iter()
        .filter(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).contains(needle))
        .count()
}

/// The stored result with each `[redacted]` put back (first the token, then the key): the
/// result the step really returned.
fn unredacted(stored: &Value) -> Value {
    match stored {
        Value::String(s) => {
            let mut out = s.clone();
            for secret in [gh(), sk()] {
                out = out.replacen("[redacted]", &secret, 1);
            }
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(unredacted).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), unredacted(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

struct Run {
    p: Project,
    plan: String,
    exec: String,
}

impl Run {
    fn dir(&self) -> PathBuf {
        self.p
            .root()
            .join(".orca/plans")
            .join(&self.plan)
            .join("executions")
    }
    fn log(&self) -> PathBuf {
        self.dir().join(format!("{}.audit.jsonl", self.exec))
    }
    fn seal(&self) -> PathBuf {
        self.dir().join(format!("{}.audit.seal.json", self.exec))
    }
    /// The execution's task snapshot (ADR 0056); the run ended, so it holds `leak` whole.
    fn tasks(&self) -> PathBuf {
        self.dir().join(&self.exec).join("tasks.json")
    }
    /// The stored record of the step `leak`.
    fn task(&self) -> Value {
        task_record(&self.tasks(), "leak")
    }
    fn verify(&self) -> (i32, String) {
        let out = self.p.run(&["audit", "verify", "--all"]);
        (
            code(&out),
            format!("{}{}", stdout(&out), crate::common::project::stderr(&out)),
        )
    }
    fn show(&self) -> (i32, String) {
        let out = self.p.run(&["exec", "show", &self.exec]);
        (
            code(&out),
            format!("{}{}", stdout(&out), crate::common::project::stderr(&out)),
        )
    }
}

/// A completed run of one shell step that prints both secrets (built by the shell, so the plan
/// holds neither).
fn run() -> Run {
    let p = Project::new();
    let command = format!(
        "t=ghp; k=sk; echo \"token ${{t}}_{GH_BODY} and key ${{k}}-ant-api03-{SK_BODY}AA\""
    );
    let plan = p.create(
        "leak.json",
        &plan_doc("print secret-shaped text", &[("leak", &command, &[])]),
    );
    let (c, v) = p.json(&["run", &plan, "--yes"]);
    assert_eq!(c, 0, "{v}");
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    Run { p, plan, exec }
}

#[test]
fn an_untouched_run_with_secret_shaped_output_verifies() {
    let r = run();
    let root = r.p.root();
    let (c, text) = r.verify();
    let mut false_tampered = usize::from(c != 0 || text.contains("TAMPERED"));
    let (c, shown) = r.show();
    false_tampered += usize::from(c != 0 || shown.contains("TAMPERED"));
    assert!(
        shown.contains("[redacted]"),
        "the output is kept, redacted: {shown}"
    );
    // What the log records is the digest of the stored result.
    let stored = r.task()["result"].clone();
    let completed: Vec<Value> = std::fs::read_to_string(r.log())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "task.attempt.completed")
        .collect();
    assert_eq!(completed.len(), 1);
    let recorded = completed[0]["data"]["result_digest"].as_str().unwrap();
    let of_stored = Digest::of_canonical_value(&stored).to_string();
    let not_of_stored = usize::from(recorded != of_stored);
    assert_eq!(completed[0]["data"]["result_digest_of"], "stored");
    // No secret, and no digest of one or of the unredacted result, anywhere under .orca/.
    let unredacted_digest = Digest::of_canonical_value(&unredacted(&stored)).hex();
    assert_ne!(unredacted_digest, Digest::of_canonical_value(&stored).hex());
    let mut found = 0;
    for needle in [
        gh(),
        sk(),
        Digest::of_bytes(gh().as_bytes()).hex(),
        Digest::of_bytes(sk().as_bytes()).hex(),
        unredacted_digest,
    ] {
        found += holding(root, &needle);
    }
    println!(
        "secret-shaped output: false TAMPERED on the untouched run: {false_tampered}, result digests not of the stored result: {not_of_stored}, files under .orca/ holding a secret or a digest of one: {found}"
    );
    assert_eq!(false_tampered + not_of_stored + found, 0, "{text}\n{shown}");
    assert!(
        shown.contains("[redacted]"),
        "the output is kept, redacted: {shown}"
    );
}

/// A record as the code before wrote it: the completed entry's digest is of the unredacted
/// result and says nothing of what it covers; the log rechained and sealed with the user's
/// key, as that code sealed it.
fn make_old_format(r: &Run) {
    let stored = r.task()["result"].clone();
    let old = Digest::of_canonical_value(&unredacted(&stored));
    let entries = rechain(&r.log(), |entries| {
        for e in entries.iter_mut() {
            if e.kind == orca_core::AuditKind::TaskAttemptCompleted {
                e.data["result_digest"] = json!(old);
                if let Some(map) = e.data.as_object_mut() {
                    map.remove("result_digest_of");
                }
            }
        }
    });
    let key = orca_store::keys::load(&r.p.config.path().join("orca/signing.key"))
        .unwrap()
        .unwrap();
    forge_seal(
        &r.seal(),
        exec_log_id(&r.plan, &r.exec),
        &entries,
        Some(&key),
    );
    // That code kept no checkpoint of what it wrote (outside the project): this log is as it
    // left it, not a rewrite of one the checkpoint saw.
    let _ = std::fs::remove_dir_all(r.p.config.path().join("state"));
}

#[test]
fn records_written_before_are_old_format_never_tampered() {
    let r = run();
    make_old_format(&r);
    let (c, text) = r.verify();
    let mut false_tampered = usize::from(c != 0 || text.contains("TAMPERED"));
    assert!(text.contains("old format"), "named as old-format: {text}");
    let (c, shown) = r.show();
    false_tampered += usize::from(c != 0 || shown.contains("TAMPERED"));
    // A changed result under a current record (whatever it holds) is still tampering.
    let changed = run();
    let mut task = changed.task();
    task["result"]["summary"] = json!("token [redacted] and key [redacted], and more");
    set_task_record(&changed.tasks(), "leak", task);
    let (c, text) = changed.verify();
    let missed = usize::from(c != 5 || !text.contains("TAMPERED"));
    println!(
        "old-format records: false TAMPERED: {false_tampered}; changed results not reported: {missed}"
    );
    assert_eq!(false_tampered + missed, 0, "{text}\n{shown}");
}
