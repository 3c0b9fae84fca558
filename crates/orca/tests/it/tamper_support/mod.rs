//! The tamper catalogue's fixture: one real project made by the real binary, copied for
//! every case, and the ways of tampering with its files.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::Output;

use orca_store::AuditLogId;
use orca_store::audit::{AuditEntry, NewAuditEntry, entry_hash, next_entry, seal_of};
use orca_store::signing::{SigningKey, seal_statement};
use serde_json::{Value, json};
use tempfile::TempDir;

/// The ids of the fixture's records.
#[derive(Debug, Clone)]
pub(crate) struct Ids {
    /// Plan `a`, run twice (`a1`, `a2`), completed.
    pub(crate) a: String,
    pub(crate) a1: String,
    pub(crate) a2: String,
    /// Plan `b`, run once (`b1`), completed.
    pub(crate) b: String,
    pub(crate) b1: String,
    /// Plan `w`: its run `w1` waits for a decision (running, unsealed log).
    pub(crate) w: String,
    pub(crate) w1: String,
    /// Plan `d`: a proposal, never approved.
    pub(crate) d: String,
    /// Plan `f`: approved in another project by another key (copied in).
    pub(crate) f: String,
}

/// A project: its directory, the user's config directory (the key) and the ids.
pub(crate) struct Proj {
    pub(crate) dir: TempDir,
    pub(crate) config: PathBuf,
    pub(crate) ids: Ids,
}

pub(crate) fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub(crate) use crate::common::orca;

/// Every plan starts with `look`, a (scripted) model agent step whose answer and tool call
/// put `agent.answer` and `tool.call` entries in the log before step `a`'s: the catalogue finds
/// entries by kind, so they shift nothing. `a` stays the first step of the document (the cases
/// that edit a step's command edit a shell step's).
pub(crate) fn plan_doc(goal: &str, second: &str) -> String {
    json!({
        "goal": goal, "summary": "a tamper fixture", "assumptions": ["a shell"],
        "risks": ["none"], "verification": ["the records"],
        "steps": [
            { "id": "a", "agent": "shell", "description": "first", "command": "echo a",
              "depends_on": ["look"] },
            { "id": "b", "agent": "shell", "description": "second", "command": second,
              "depends_on": ["a"], "max_attempts": 1 },
            { "id": "look", "agent": "looker", "description": "look around", "depends_on": [] }
        ]
    })
    .to_string()
}

/// The `looker` agent: a scripted model that answers, reads a file, answers and submits.
pub(crate) fn configure(root: &Path) {
    std::fs::write(
        root.join(".orca/config.toml"),
        "[agents.looker]\nbackend = \"scripted\"\nscript = \".orca/look.json\"\n\
         tools = [\"read_file\"]\ndescription = \"looks around\"\n",
    )
    .unwrap();
    let turn = |text: &str, name: &str, args: Value| {
        json!({"text": text, "tool_calls": [{"name": name, "arguments": args}],
               "usage": {"input_tokens": 10, "output_tokens": 2}})
    };
    let script = json!({"turns": [
        turn("I read the plan first", "read_file", json!({"path": "a.json"})),
        turn("done looking", "submit_result", json!({"status": "success", "summary": "looked"})),
    ]});
    std::fs::write(root.join(".orca/look.json"), script.to_string()).unwrap();
}

pub(crate) fn json_of(out: &Output) -> Value {
    let s = String::from_utf8_lossy(&out.stdout);
    let start = s
        .find('{')
        .unwrap_or_else(|| panic!("no JSON: {}", text(out)));
    serde_json::from_str(&s[start..]).unwrap()
}

/// Creates, approves and runs a plan; returns (plan, execution, exit code).
pub(crate) fn run_new(root: &Path, config: &Path, name: &str, doc: &str) -> (String, String, i32) {
    let file = root.join(name);
    std::fs::write(&file, doc).unwrap();
    let out = orca(
        root,
        config,
        &["--json", "plan", "create", "--file", file.to_str().unwrap()],
    );
    assert_eq!(code(&out), 0, "{}", text(&out));
    let plan = json_of(&out)["plan_id"].as_str().unwrap().to_owned();
    let out = orca(root, config, &["plan", "approve", &plan]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let (exec, c) = run_again(root, config, &plan);
    (plan, exec, c)
}

pub(crate) fn run_again(root: &Path, config: &Path, plan: &str) -> (String, i32) {
    let out = orca(root, config, &["--json", "run", plan]);
    let exec = json_of(&out)["execution_id"].as_str().unwrap().to_owned();
    (exec, code(&out))
}

pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The fixture, made once by the real binary; every case works on a copy.
pub(crate) struct Fixture {
    pub(crate) project: TempDir,
    pub(crate) config: TempDir,
    /// The other user's config directory (the foreign key) and its public key file.
    pub(crate) foreign_pub: PathBuf,
    pub(crate) _foreign: TempDir,
    pub(crate) ids: Ids,
}

impl Fixture {
    pub(crate) fn new() -> Self {
        let project = tempfile::tempdir().unwrap();
        let config = tempfile::tempdir().unwrap();
        let (root, cfg) = (project.path(), config.path());
        assert_eq!(code(&orca(root, cfg, &["init"])), 0);
        configure(root);
        let (a, a1, c) = run_new(root, cfg, "a.json", &plan_doc("plan a", "echo b"));
        assert_eq!(c, 0);
        let (a2, c) = run_again(root, cfg, &a);
        assert_eq!(c, 0);
        let (b, b1, c) = run_new(root, cfg, "b.json", &plan_doc("plan b", "echo b"));
        assert_eq!(c, 0);
        let (w, w1, c) = run_new(root, cfg, "w.json", &plan_doc("plan w", "exit 1"));
        assert_eq!(c, 4, "the w run waits for a decision");
        std::fs::write(root.join("d.json"), plan_doc("plan d", "echo d")).unwrap();
        let out = orca(root, cfg, &["--json", "plan", "create", "--file", "d.json"]);
        let d = json_of(&out)["plan_id"].as_str().unwrap().to_owned();
        // Another user approves plan f in their own project, with their own key.
        let foreign = tempfile::tempdir().unwrap();
        let other = foreign.path().join("project");
        let other_cfg = foreign.path().join("config");
        std::fs::create_dir_all(&other).unwrap();
        assert_eq!(code(&orca(&other, &other_cfg, &["init"])), 0);
        configure(&other);
        std::fs::write(other.join("f.json"), plan_doc("plan f", "echo f")).unwrap();
        let out = orca(
            &other,
            &other_cfg,
            &["--json", "plan", "create", "--file", "f.json"],
        );
        let f = json_of(&out)["plan_id"].as_str().unwrap().to_owned();
        assert_eq!(code(&orca(&other, &other_cfg, &["plan", "approve", &f])), 0);
        let plans = other.join(".orca/plans");
        std::fs::copy(
            plans.join(format!("{f}.json")),
            root.join(format!(".orca/plans/{f}.json")),
        )
        .unwrap();
        copy_dir(&plans.join(&f), &root.join(format!(".orca/plans/{f}")));
        let foreign_pub = foreign.path().join("foreign.pub");
        std::fs::copy(other_cfg.join("orca/signing.key"), &foreign_pub).unwrap();
        let fixture = Self {
            project,
            config,
            foreign_pub,
            _foreign: foreign,
            ids: Ids {
                a,
                a1,
                a2,
                b,
                b1,
                w,
                w1,
                d,
                f,
            },
        };
        // The untampered fixture: only plan f (another user's key) is reported.
        let root = fixture.project.path();
        let out = orca(root, fixture.config.path(), &["audit", "verify", "--all"]);
        assert_eq!(code(&out), 5, "{}", text(&out));
        let problems: Vec<String> = text(&out)
            .lines()
            .filter(|l| l.starts_with("TAMPERED"))
            .map(str::to_owned)
            .collect();
        assert!(
            problems.iter().all(|l| l.contains(&fixture.ids.f)),
            "only the foreign plan is untrusted: {problems:#?}"
        );
        // With the other user's key trusted, everything verifies.
        let trusted = fixture.foreign_pub.to_str().unwrap().to_owned();
        let out = orca(
            root,
            fixture.config.path(),
            &["--trusted-key", &trusted, "audit", "verify", "--all"],
        );
        assert_eq!(code(&out), 0, "{}", text(&out));
        fixture
    }

    pub(crate) fn copy(&self) -> Proj {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(
            &self.project.path().join(".orca"),
            &dir.path().join(".orca"),
        );
        Proj {
            dir,
            config: self.config.path().to_path_buf(),
            ids: self.ids.clone(),
        }
    }
}

impl Proj {
    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        orca(self.root(), &self.config, args)
    }
    pub(crate) fn plans(&self) -> PathBuf {
        self.root().join(".orca/plans")
    }
    pub(crate) fn plan_file(&self, plan: &str) -> PathBuf {
        self.plans().join(format!("{plan}.json"))
    }
    pub(crate) fn plan_log(&self, plan: &str) -> PathBuf {
        self.plans().join(plan).join("plan.audit.jsonl")
    }
    pub(crate) fn plan_seal(&self, plan: &str) -> PathBuf {
        self.plans().join(plan).join("plan.audit.seal.json")
    }
    pub(crate) fn runs(&self, plan: &str) -> PathBuf {
        self.plans().join(plan).join("runs.audit.jsonl")
    }
    pub(crate) fn exec_file(&self, plan: &str, x: &str) -> PathBuf {
        self.plans()
            .join(plan)
            .join("executions")
            .join(format!("{x}.json"))
    }
    pub(crate) fn exec_log(&self, plan: &str, x: &str) -> PathBuf {
        self.plans()
            .join(plan)
            .join("executions")
            .join(format!("{x}.audit.jsonl"))
    }
    pub(crate) fn exec_seal(&self, plan: &str, x: &str) -> PathBuf {
        self.plans()
            .join(plan)
            .join("executions")
            .join(format!("{x}.audit.seal.json"))
    }
    /// An execution's task snapshot: every task's record (ADR 0056).
    pub(crate) fn tasks(&self, plan: &str, x: &str) -> PathBuf {
        self.plans()
            .join(plan)
            .join("executions")
            .join(x)
            .join("tasks.json")
    }
    /// An execution's task write-ahead log (ADR 0030).
    pub(crate) fn wal(&self, plan: &str, x: &str) -> PathBuf {
        self.plans()
            .join(plan)
            .join("executions")
            .join(x)
            .join("tasks.wal.jsonl")
    }
    pub(crate) fn a1_log(&self) -> PathBuf {
        self.exec_log(&self.ids.a, &self.ids.a1)
    }
    pub(crate) fn a1_seal(&self) -> PathBuf {
        self.exec_seal(&self.ids.a, &self.ids.a1)
    }
    pub(crate) fn w1_log(&self) -> PathBuf {
        self.exec_log(&self.ids.w, &self.ids.w1)
    }
    pub(crate) fn w1_wal(&self) -> PathBuf {
        self.wal(&self.ids.w, &self.ids.w1)
    }
    pub(crate) fn rel(&self, path: &Path) -> String {
        path.strip_prefix(self.root())
            .unwrap()
            .display()
            .to_string()
    }
}

pub(crate) fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

pub(crate) fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    if !lines.is_empty() {
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

pub(crate) fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub(crate) fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
}

pub(crate) fn swap(a: &Path, b: &Path) {
    let tmp = a.with_extension("swap");
    std::fs::rename(a, &tmp).unwrap();
    std::fs::rename(b, a).unwrap();
    std::fs::rename(&tmp, b).unwrap();
}

/// Changes one entry's data without re-hashing it.
pub(crate) fn change(path: &Path, at: usize) {
    let mut l = lines(path);
    let mut v: Value = serde_json::from_str(&l[at]).unwrap();
    v["data"]["forged"] = json!(true);
    l[at] = v.to_string();
    write_lines(path, &l);
}

pub(crate) fn remove(path: &Path, at: usize) {
    let mut l = lines(path);
    l.remove(at);
    write_lines(path, &l);
}

pub(crate) fn reorder(path: &Path, i: usize, j: usize) {
    let mut l = lines(path);
    l.swap(i, j);
    write_lines(path, &l);
}

/// Inserts a well-chained forged entry after `after`.
pub(crate) fn insert(path: &Path, after: usize) {
    let mut l = lines(path);
    let prev: AuditEntry = serde_json::from_str(&l[after]).unwrap();
    let forged = next_entry(
        Some(&prev),
        NewAuditEntry::new(
            "task.attempt.completed",
            json!({ "step_id": "a", "forged": true }),
        ),
        prev.at,
    );
    l.insert(after + 1, serde_json::to_string(&forged).unwrap());
    write_lines(path, &l);
}

/// Removes the audit entries from `from` on out of a write-ahead log (ADR 0030): a record
/// carrying only such an entry goes, a transition keeps its task record. What someone cutting
/// an execution's audit log must also do for the cut to stick.
pub(crate) fn cut_wal_audit(wal: &Path, from: u64) {
    if !wal.exists() {
        return;
    }
    let kept: Vec<String> = lines(wal)
        .into_iter()
        .filter_map(|l| {
            let mut r: Value = serde_json::from_str(&l).unwrap();
            if r["audit"]["seq"].as_u64().is_some_and(|seq| seq >= from) {
                r.as_object_mut().unwrap().remove("audit");
            }
            (r.as_object().unwrap().contains_key("task")
                || r.as_object().unwrap().contains_key("audit"))
            .then(|| r.to_string())
        })
        .collect();
    write_lines(wal, &kept);
}

/// The sequence numbers of the audit entries a write-ahead log holds, in file order.
pub(crate) fn wal_audit_seqs(wal: &Path) -> Vec<u64> {
    lines(wal)
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).unwrap()["audit"]["seq"].as_u64())
        .collect()
}

pub(crate) fn truncate(path: &Path, keep: usize) {
    let mut l = lines(path);
    l.truncate(keep);
    write_lines(path, &l);
}

/// Rewrites a log consistently (every hash and `prev` recomputed) after `edit` changes its
/// entries; returns the new entries.
pub(crate) fn rechain(path: &Path, edit: impl FnOnce(&mut Vec<AuditEntry>)) -> Vec<AuditEntry> {
    let mut entries: Vec<AuditEntry> = lines(path)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    edit(&mut entries);
    let mut prev = orca_store::audit::zero_digest();
    for (i, e) in entries.iter_mut().enumerate() {
        e.seq = i as u64;
        e.prev = prev.clone();
        e.hash = entry_hash(e);
        prev = e.hash.clone();
    }
    let text: Vec<String> = entries
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    write_lines(path, &text);
    entries
}

/// Writes a seal over `entries` for `log`, signed by `key` (or unsigned).
pub(crate) fn forge_seal(
    path: &Path,
    log: AuditLogId,
    entries: &[AuditEntry],
    key: Option<&SigningKey>,
) {
    let seal = seal_of(
        entries,
        entries
            .last()
            .map_or(time::OffsetDateTime::UNIX_EPOCH, |e| e.at),
    );
    let mut v = json!({
        "format_version": 1, "entries": seal.entries, "merkle_root": seal.merkle_root,
        "at": seal.at.format(&time::format_description::well_known::Rfc3339).unwrap(), "log": log,
    });
    if let Some(k) = key {
        v["signature"] = json!(k.sign(&seal_statement(
            log,
            seal.entries,
            &seal.merkle_root,
            seal.at
        )));
    }
    write_json(path, &v);
}

pub(crate) fn exec_log_id(plan: &str, x: &str) -> AuditLogId {
    AuditLogId::Execution {
        plan_id: plan.parse().unwrap(),
        execution_id: x.parse().unwrap(),
    }
}

pub(crate) fn plan_log_id(plan: &str) -> AuditLogId {
    AuditLogId::Plan {
        plan_id: plan.parse().unwrap(),
    }
}

/// Recomputes an approved plan file's approval digest after its content changed.
pub(crate) fn recompute_digest(path: &Path) {
    let mut plan = read_json(path);
    let content: orca_core::PlanContent = serde_json::from_value(plan["content"].clone()).unwrap();
    plan["approval"]["digest"] = json!(content.digest());
    write_json(path, &plan);
}

/// The record of `step` in the task snapshot at `path`.
pub(crate) fn task_record(path: &Path, step: &str) -> serde_json::Value {
    read_json(path)["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["step_id"] == step)
        .unwrap_or_else(|| panic!("no record of {step} in {}", path.display()))
        .clone()
}

/// Replaces the record of `step` in the task snapshot at `path`.
pub(crate) fn set_task_record(path: &Path, step: &str, record: serde_json::Value) {
    let mut doc = read_json(path);
    let tasks = doc["tasks"].as_array_mut().unwrap();
    let at = tasks.iter().position(|t| t["step_id"] == step).unwrap();
    tasks[at] = record;
    write_json(path, &doc);
}
