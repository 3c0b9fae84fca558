//! The tamper catalogue (ADR 0013, docs/tampering.md): one case per kind of tampering with
//! orca's records, each done to a copy of one real project (made by the real binary) and
//! each required to be DETECTED (exit 5) and LOCATED (the file and, where there is one, the
//! entry index in `orca audit verify --all`). Cases that gate a run also require `orca run` /
//! `exec resume` / `exec show` to refuse with exit 5.
//!
//! Prints `tamper catalogue: N/M detected`.

#![expect(clippy::unwrap_used, reason = "tests")]
#![expect(clippy::print_stdout, reason = "the catalogue prints its figure")]

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use orca_store::AuditLogId;
use orca_store::audit::{AuditEntry, NewAuditEntry, entry_hash, next_entry, seal_of};
use orca_store::signing::{SigningKey, seal_statement};
use serde_json::{Value, json};
use tempfile::TempDir;

/// The ids of the fixture's records.
#[derive(Debug, Clone)]
struct Ids {
    /// Plan `a`, run twice (`a1`, `a2`), completed.
    a: String,
    a1: String,
    a2: String,
    /// Plan `b`, run once (`b1`), completed.
    b: String,
    b1: String,
    /// Plan `w`: its run `w1` waits for a decision (running, unsealed log).
    w: String,
    w1: String,
    /// Plan `d`: a proposal, never approved.
    d: String,
    /// Plan `f`: approved in another project by another key (copied in).
    f: String,
}

/// A project: its directory, the user's config directory (the key) and the ids.
struct Proj {
    dir: TempDir,
    config: PathBuf,
    ids: Ids,
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn orca(root: &Path, config: &Path, args: &[&str]) -> Output {
    Command::cargo_bin("orca")
        .unwrap()
        .arg("--root")
        .arg(root)
        .args(args)
        .current_dir(root)
        .env("NO_COLOR", "1")
        .env("XDG_CONFIG_HOME", config)
        .env_remove("ORCA_SIGNING_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ORCA_LOG")
        .write_stdin(Vec::<u8>::new())
        .output()
        .unwrap()
}

fn plan_doc(goal: &str, second: &str) -> String {
    json!({
        "goal": goal, "summary": "a tamper fixture", "assumptions": ["a shell"],
        "risks": ["none"], "verification": ["the records"],
        "steps": [
            { "id": "a", "agent": "shell", "description": "first", "command": "echo a", "depends_on": [] },
            { "id": "b", "agent": "shell", "description": "second", "command": second,
              "depends_on": ["a"], "max_attempts": 1 }
        ]
    })
    .to_string()
}

fn json_of(out: &Output) -> Value {
    let s = String::from_utf8_lossy(&out.stdout);
    let start = s
        .find('{')
        .unwrap_or_else(|| panic!("no JSON: {}", text(out)));
    serde_json::from_str(&s[start..]).unwrap()
}

/// Creates, approves and runs a plan; returns (plan, execution, exit code).
fn run_new(root: &Path, config: &Path, name: &str, doc: &str) -> (String, String, i32) {
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

fn run_again(root: &Path, config: &Path, plan: &str) -> (String, i32) {
    let out = orca(root, config, &["--json", "run", plan]);
    let exec = json_of(&out)["execution_id"].as_str().unwrap().to_owned();
    (exec, code(&out))
}

fn copy_dir(from: &Path, to: &Path) {
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
struct Fixture {
    project: TempDir,
    config: TempDir,
    /// The other user's config directory (the foreign key) and its public key file.
    foreign_pub: PathBuf,
    _foreign: TempDir,
    ids: Ids,
}

impl Fixture {
    fn new() -> Self {
        let project = tempfile::tempdir().unwrap();
        let config = tempfile::tempdir().unwrap();
        let (root, cfg) = (project.path(), config.path());
        assert_eq!(code(&orca(root, cfg, &["init"])), 0);
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

    fn copy(&self) -> Proj {
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
    fn root(&self) -> &Path {
        self.dir.path()
    }
    fn run(&self, args: &[&str]) -> Output {
        orca(self.root(), &self.config, args)
    }
    fn plans(&self) -> PathBuf {
        self.root().join(".orca/plans")
    }
    fn plan_file(&self, plan: &str) -> PathBuf {
        self.plans().join(format!("{plan}.json"))
    }
    fn plan_log(&self, plan: &str) -> PathBuf {
        self.plans().join(plan).join("plan.audit.jsonl")
    }
    fn plan_seal(&self, plan: &str) -> PathBuf {
        self.plans().join(plan).join("plan.audit.seal.json")
    }
    fn runs(&self, plan: &str) -> PathBuf {
        self.plans().join(plan).join("runs.audit.jsonl")
    }
    fn exec_file(&self, plan: &str, x: &str) -> PathBuf {
        self.plans()
            .join(plan)
            .join("executions")
            .join(format!("{x}.json"))
    }
    fn exec_log(&self, plan: &str, x: &str) -> PathBuf {
        self.plans()
            .join(plan)
            .join("executions")
            .join(format!("{x}.audit.jsonl"))
    }
    fn exec_seal(&self, plan: &str, x: &str) -> PathBuf {
        self.plans()
            .join(plan)
            .join("executions")
            .join(format!("{x}.audit.seal.json"))
    }
    fn task(&self, plan: &str, x: &str, step: &str) -> PathBuf {
        self.plans()
            .join(plan)
            .join("executions")
            .join(x)
            .join("tasks")
            .join(format!("{step}.json"))
    }
    fn a1_log(&self) -> PathBuf {
        self.exec_log(&self.ids.a, &self.ids.a1)
    }
    fn a1_seal(&self) -> PathBuf {
        self.exec_seal(&self.ids.a, &self.ids.a1)
    }
    fn w1_log(&self) -> PathBuf {
        self.exec_log(&self.ids.w, &self.ids.w1)
    }
    fn rel(&self, path: &Path) -> String {
        path.strip_prefix(self.root())
            .unwrap()
            .display()
            .to_string()
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    if !lines.is_empty() {
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
}

fn swap(a: &Path, b: &Path) {
    let tmp = a.with_extension("swap");
    std::fs::rename(a, &tmp).unwrap();
    std::fs::rename(b, a).unwrap();
    std::fs::rename(&tmp, b).unwrap();
}

/// Changes one entry's data without re-hashing it.
fn change(path: &Path, at: usize) {
    let mut l = lines(path);
    let mut v: Value = serde_json::from_str(&l[at]).unwrap();
    v["data"]["forged"] = json!(true);
    l[at] = v.to_string();
    write_lines(path, &l);
}

fn remove(path: &Path, at: usize) {
    let mut l = lines(path);
    l.remove(at);
    write_lines(path, &l);
}

fn reorder(path: &Path, i: usize, j: usize) {
    let mut l = lines(path);
    l.swap(i, j);
    write_lines(path, &l);
}

/// Inserts a well-chained forged entry after `after`.
fn insert(path: &Path, after: usize) {
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

fn truncate(path: &Path, keep: usize) {
    let mut l = lines(path);
    l.truncate(keep);
    write_lines(path, &l);
}

/// Rewrites a log consistently (every hash and `prev` recomputed) after `edit` changes its
/// entries; returns the new entries.
fn rechain(path: &Path, edit: impl FnOnce(&mut Vec<AuditEntry>)) -> Vec<AuditEntry> {
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
fn forge_seal(path: &Path, log: AuditLogId, entries: &[AuditEntry], key: Option<&SigningKey>) {
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

fn exec_log_id(plan: &str, x: &str) -> AuditLogId {
    AuditLogId::Execution {
        plan_id: plan.parse().unwrap(),
        execution_id: x.parse().unwrap(),
    }
}

fn plan_log_id(plan: &str) -> AuditLogId {
    AuditLogId::Plan {
        plan_id: plan.parse().unwrap(),
    }
}

/// Recomputes an approved plan file's approval digest after its content changed.
fn recompute_digest(path: &Path) {
    let mut plan = read_json(path);
    let content: orca_core::PlanContent = serde_json::from_value(plan["content"].clone()).unwrap();
    plan["approval"]["digest"] = json!(content.digest());
    write_json(path, &plan);
}

type Tamper = fn(&Proj);
type Locate = fn(&Proj) -> PathBuf;
type Gate = fn(&Proj) -> Vec<String>;

/// One kind of tampering: what is done, where it must be located, and which command must
/// also refuse.
struct Case {
    name: &'static str,
    tamper: Tamper,
    file: Locate,
    entry: Option<u64>,
    gate: Option<Gate>,
}

const fn case(name: &'static str, tamper: Tamper, file: Locate, entry: Option<u64>) -> Case {
    Case {
        name,
        tamper,
        file,
        entry,
        gate: None,
    }
}

const fn gated(case: Case, gate: Gate) -> Case {
    Case {
        gate: Some(gate),
        ..case
    }
}

fn run_a(p: &Proj) -> Vec<String> {
    vec!["run".into(), p.ids.a.clone()]
}

fn resume_w1(p: &Proj) -> Vec<String> {
    vec!["exec".into(), "resume".into(), p.ids.w1.clone()]
}

fn show_a1(p: &Proj) -> Vec<String> {
    vec!["exec".into(), "show".into(), p.ids.a1.clone()]
}

#[expect(clippy::too_many_lines, reason = "the catalogue is one table")]
fn catalogue() -> Vec<Case> {
    vec![
        // Entries of a finished (sealed) execution's log.
        case(
            "change an entry (sealed)",
            |p| change(&p.a1_log(), 2),
            Proj::a1_log,
            Some(2),
        ),
        case(
            "remove an entry (sealed)",
            |p| remove(&p.a1_log(), 2),
            Proj::a1_log,
            Some(2),
        ),
        case(
            "reorder entries (sealed)",
            |p| reorder(&p.a1_log(), 2, 4),
            Proj::a1_log,
            Some(2),
        ),
        case(
            "insert an entry (sealed)",
            |p| insert(&p.a1_log(), 2),
            Proj::a1_log,
            Some(3),
        ),
        case(
            "truncate the log (sealed)",
            |p| truncate(&p.a1_log(), 4),
            Proj::a1_log,
            Some(4),
        ),
        // The same on a running execution's log (no seal yet).
        gated(
            case(
                "change an entry (unsealed)",
                |p| change(&p.w1_log(), 2),
                Proj::w1_log,
                Some(2),
            ),
            resume_w1,
        ),
        gated(
            case(
                "remove an entry (unsealed)",
                |p| remove(&p.w1_log(), 2),
                Proj::w1_log,
                Some(2),
            ),
            resume_w1,
        ),
        gated(
            case(
                "reorder entries (unsealed)",
                |p| reorder(&p.w1_log(), 2, 4),
                Proj::w1_log,
                Some(2),
            ),
            resume_w1,
        ),
        gated(
            case(
                "insert an entry (unsealed)",
                |p| insert(&p.w1_log(), 2),
                Proj::w1_log,
                Some(3),
            ),
            resume_w1,
        ),
        gated(
            case(
                "truncate the log (unsealed)",
                |p| truncate(&p.w1_log(), 3),
                |p| p.task(&p.ids.w, &p.ids.w1, "a"),
                None,
            ),
            resume_w1,
        ),
        gated(
            case(
                "cut a running log to nothing",
                |p| truncate(&p.w1_log(), 0),
                Proj::w1_log,
                Some(0),
            ),
            resume_w1,
        ),
        gated(
            case(
                "cut a running log and restart its chain",
                |p| {
                    let first = lines(&p.w1_log()).remove(0);
                    write_lines(&p.w1_log(), &[first]);
                },
                |p| p.task(&p.ids.w, &p.ids.w1, "a"),
                None,
            ),
            resume_w1,
        ),
        // Consistent rewrites and seals.
        case(
            "rewrite a sealed log consistently",
            |p| {
                rechain(&p.a1_log(), |e| e[3].data["summary"] = json!("forged"));
            },
            Proj::a1_log,
            Some(0),
        ),
        case(
            "rewrite a log and forge an unsigned seal",
            |p| {
                let e = rechain(&p.a1_log(), |e| e[3].data["summary"] = json!("forged"));
                forge_seal(&p.a1_seal(), exec_log_id(&p.ids.a, &p.ids.a1), &e, None);
            },
            Proj::a1_seal,
            Some(7),
        ),
        case(
            "rewrite a log and forge a seal signed by another key",
            |p| {
                let e = rechain(&p.a1_log(), |e| e[3].data["summary"] = json!("forged"));
                let k = SigningKey::from_seed([42; 32]);
                forge_seal(&p.a1_seal(), exec_log_id(&p.ids.a, &p.ids.a1), &e, Some(&k));
            },
            Proj::a1_seal,
            Some(7),
        ),
        case(
            "delete a finished run's seal",
            |p| std::fs::remove_file(p.a1_seal()).unwrap(),
            Proj::a1_seal,
            None,
        ),
        case(
            "delete a finished run's log and seal",
            |p| {
                std::fs::remove_file(p.a1_seal()).unwrap();
                std::fs::remove_file(p.a1_log()).unwrap();
            },
            Proj::a1_log,
            None,
        ),
        // Swaps.
        case(
            "swap logs and seals between two executions",
            |p| {
                swap(&p.a1_log(), &p.exec_log(&p.ids.a, &p.ids.a2));
                swap(&p.a1_seal(), &p.exec_seal(&p.ids.a, &p.ids.a2));
            },
            Proj::a1_seal,
            Some(7),
        ),
        case(
            "swap logs (not seals) between two executions",
            |p| swap(&p.a1_log(), &p.exec_log(&p.ids.a, &p.ids.a2)),
            Proj::a1_log,
            Some(0),
        ),
        case(
            "move another plan's execution seal in",
            |p| {
                std::fs::copy(p.exec_seal(&p.ids.b, &p.ids.b1), p.a1_seal()).unwrap();
            },
            Proj::a1_seal,
            Some(7),
        ),
        case(
            "swap plan logs and seals between two plans",
            |p| {
                swap(&p.plan_log(&p.ids.a), &p.plan_log(&p.ids.b));
                swap(&p.plan_seal(&p.ids.a), &p.plan_seal(&p.ids.b));
            },
            |p| p.plan_seal(&p.ids.a),
            Some(2),
        ),
        case(
            "swap plan logs (not seals) between two plans",
            |p| swap(&p.plan_log(&p.ids.a), &p.plan_log(&p.ids.b)),
            |p| p.plan_log(&p.ids.a),
            Some(0),
        ),
        // Deletions.
        case(
            "delete an execution directory",
            |p| {
                let (a, x) = (&p.ids.a, &p.ids.a1);
                for f in [p.exec_file(a, x), p.a1_log(), p.a1_seal()] {
                    std::fs::remove_file(f).unwrap();
                }
                let _ = std::fs::remove_file(
                    p.plans()
                        .join(a)
                        .join("executions")
                        .join(format!("{x}.lease")),
                );
                std::fs::remove_dir_all(p.plans().join(a).join("executions").join(x)).unwrap();
                let _ = std::fs::remove_file(p.root().join(".orca/executions").join(x));
            },
            |p| p.exec_file(&p.ids.a, &p.ids.a1),
            Some(0),
        ),
        case(
            "delete an execution's state, keep its log",
            |p| std::fs::remove_file(p.exec_file(&p.ids.a, &p.ids.a1)).unwrap(),
            |p| p.exec_file(&p.ids.a, &p.ids.a1),
            Some(0),
        ),
        case(
            "delete a task's state file",
            |p| std::fs::remove_file(p.task(&p.ids.a, &p.ids.a1, "a")).unwrap(),
            |p| p.exec_file(&p.ids.a, &p.ids.a1),
            None,
        ),
        case(
            "empty a plan's run register",
            |p| truncate(&p.runs(&p.ids.a), 0),
            |p| p.runs(&p.ids.a),
            None,
        ),
        case(
            "change a run register entry",
            |p| change(&p.runs(&p.ids.a), 1),
            |p| p.runs(&p.ids.a),
            Some(1),
        ),
        // The plan and its approval.
        gated(
            case(
                "edit the plan log after approval",
                |p| change(&p.plan_log(&p.ids.a), 1),
                |p| p.plan_log(&p.ids.a),
                Some(1),
            ),
            run_a,
        ),
        gated(
            case(
                "truncate the plan log (drop the approval)",
                |p| truncate(&p.plan_log(&p.ids.a), 1),
                |p| p.plan_log(&p.ids.a),
                Some(1),
            ),
            run_a,
        ),
        gated(
            case(
                "delete the plan log's seal",
                |p| std::fs::remove_file(p.plan_seal(&p.ids.a)).unwrap(),
                |p| p.plan_seal(&p.ids.a),
                None,
            ),
            run_a,
        ),
        gated(
            case(
                "edit an approved plan (a step's command)",
                |p| {
                    let path = p.plan_file(&p.ids.a);
                    let mut plan = read_json(&path);
                    plan["content"]["steps"][0]["command"] = json!("echo pwned > pwned.txt");
                    write_json(&path, &plan);
                },
                |p| p.plan_file(&p.ids.a),
                Some(1),
            ),
            run_a,
        ),
        gated(
            case(
                "edit an approved plan and recompute its digest",
                |p| {
                    let path = p.plan_file(&p.ids.a);
                    let mut plan = read_json(&path);
                    plan["content"]["steps"][0]["command"] = json!("echo pwned > pwned.txt");
                    write_json(&path, &plan);
                    recompute_digest(&path);
                },
                |p| p.plan_file(&p.ids.a),
                Some(1),
            ),
            run_a,
        ),
        gated(
            case(
                "unsigned approval (signature stripped, log and seal recomputed)",
                |p| {
                    let log = p.plan_log(&p.ids.a);
                    let e = rechain(&log, |e| {
                        e[1].data.as_object_mut().unwrap().remove("signature");
                    });
                    forge_seal(&p.plan_seal(&p.ids.a), plan_log_id(&p.ids.a), &e, None);
                },
                |p| p.plan_log(&p.ids.a),
                Some(1),
            ),
            run_a,
        ),
        gated(
            case(
                "forged approval with recomputed digest",
                |p| {
                    let d = &p.ids.d;
                    let path = p.plan_file(d);
                    let mut plan = read_json(&path);
                    plan["content"]["steps"][0]["command"] = json!("echo pwned > pwned.txt");
                    let content: orca_core::PlanContent =
                        serde_json::from_value(plan["content"].clone()).unwrap();
                    let at = "2026-01-01T00:00:00Z";
                    plan["stage"] = json!("approved");
                    plan["approval"] =
                        json!({ "at": at, "by": "user", "digest": content.digest() });
                    write_json(&path, &plan);
                    let log = p.plan_log(d);
                    let e = rechain(&log, |e| {
                        let approved = next_entry(
                            e.last(),
                            NewAuditEntry::new(
                                "plan.approved",
                                json!({
                                    "by": "user", "digest": content.digest(), "at": at, "note": null,
                                }),
                            ),
                            e[0].at,
                        );
                        e.push(approved);
                    });
                    forge_seal(&p.plan_seal(d), plan_log_id(d), &e, None);
                },
                |p| p.plan_log(&p.ids.d),
                Some(1),
            ),
            |p| vec!["run".into(), p.ids.d.clone()],
        ),
        gated(
            case(
                "approval signed by an untrusted key",
                |_| {},
                |p| p.plan_log(&p.ids.f),
                Some(1),
            ),
            |p| vec!["run".into(), p.ids.f.clone()],
        ),
        // State files against the log.
        gated(
            case(
                "change a task's recorded result",
                |p| {
                    let path = p.task(&p.ids.a, &p.ids.a1, "a");
                    let mut task = read_json(&path);
                    task["result"]["summary"] = json!("forged");
                    write_json(&path, &task);
                },
                |p| p.task(&p.ids.a, &p.ids.a1, "a"),
                Some(3),
            ),
            show_a1,
        ),
        gated(
            case(
                "impossible state: header completed, a task failed",
                |p| {
                    std::fs::copy(
                        p.task(&p.ids.w, &p.ids.w1, "b"),
                        p.task(&p.ids.a, &p.ids.a1, "b"),
                    )
                    .unwrap();
                },
                |p| p.exec_file(&p.ids.a, &p.ids.a1),
                None,
            ),
            show_a1,
        ),
    ]
}

/// Tampers a fresh copy, then requires exit 5 and the location from `audit verify --all`, and
/// exit 5 from the gated command. Returns whether the case was detected and located.
fn check(fixture: &Fixture, case: &Case) -> bool {
    let p = fixture.copy();
    (case.tamper)(&p);
    let out = p.run(&["audit", "verify", "--all"]);
    let all = text(&out);
    let file = p.rel(&(case.file)(&p));
    let located = all
        .lines()
        .any(|l| l.contains(&file) && case.entry.is_none_or(|e| l.contains(&format!("entry {e}"))));
    let mut ok = code(&out) == 5 && located;
    let mut gate_line = String::new();
    if let Some(gate) = case.gate {
        let args = gate(&p);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let g = p.run(&args);
        gate_line = format!(" | `{}` exit {}", args.join(" "), code(&g));
        ok &= code(&g) == 5;
        assert!(
            !p.root().join("pwned.txt").exists(),
            "{}: a tampered plan ran",
            case.name
        );
    }
    println!(
        "{:<66} {} (verify exit {}{gate_line}; expected {}{})",
        case.name,
        if ok { "DETECTED" } else { "MISSED  " },
        code(&out),
        file,
        case.entry
            .map(|e| format!(" entry {e}"))
            .unwrap_or_default()
    );
    if !ok {
        println!("{all}");
    }
    ok
}

#[test]
fn tamper_catalogue_every_kind_is_detected_and_located() {
    let fixture = Fixture::new();
    let cases = catalogue();
    let detected = cases.iter().filter(|c| check(&fixture, c)).count();
    println!("tamper catalogue: {detected}/{} detected", cases.len());
    assert!(cases.len() >= 34);
    assert_eq!(detected, cases.len());
}

#[test]
fn trust_roots_come_from_outside_the_project() {
    let fixture = Fixture::new();
    let p = fixture.copy();
    // A key planted in .orca/ cannot vouch for anything.
    let planted = p.root().join(".orca/trusted.pub");
    std::fs::copy(&fixture.foreign_pub, &planted).unwrap();
    let out = p.run(&["--trusted-key", planted.to_str().unwrap(), "run", &p.ids.f]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("cannot be a trust root"),
        "{}",
        text(&out)
    );
    // The other user's key, from outside, is trusted: their approval runs.
    let out = p.run(&[
        "--trusted-key",
        fixture.foreign_pub.to_str().unwrap(),
        "run",
        &p.ids.f,
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    // A group-readable key is refused with how to fix it.
    use std::os::unix::fs::PermissionsExt as _;
    let key = p.config.join("orca/signing.key");
    let mode = std::fs::metadata(&key).unwrap().permissions();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = p.run(&["plan", "approve", &p.ids.d]);
    std::fs::set_permissions(&key, mode).unwrap();
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("chmod 600"), "{}", text(&out));
    // A refused run is recorded in the plan's run register.
    let p = fixture.copy();
    let path = p.plan_file(&p.ids.a);
    let mut plan = read_json(&path);
    plan["content"]["steps"][0]["command"] = json!("echo pwned > pwned.txt");
    write_json(&path, &plan);
    recompute_digest(&path);
    let out = p.run(&["run", &p.ids.a]);
    assert_eq!(code(&out), 5);
    let line = text(&out);
    assert_eq!(line.trim().lines().count(), 1, "{line}");
    assert!(line.contains(&p.ids.a) && line.contains("digest"), "{line}");
    assert!(
        std::fs::read_to_string(p.runs(&p.ids.a))
            .unwrap()
            .contains("run.refused")
    );
}
