//! The tamper catalogue (ADR 0013, docs/tampering.md): one case per kind of tampering with
//! orca's records, each done to a copy of one real project (made by the real binary) and
//! each required to be DETECTED (exit 5) and LOCATED (the file and, where there is one, the
//! entry index in `orca audit verify --all`). Cases that gate a run also require `orca run` /
//! `exec resume` / `exec show` to refuse with exit 5.
//!
//! Prints `tamper catalogue: N/M detected`.

#![expect(clippy::unwrap_used, reason = "tests")]
#![expect(clippy::print_stdout, reason = "the catalogue prints its figure")]

use crate::tamper_support;

use std::path::{Path, PathBuf};

use orca_core::AuditKind;
use orca_store::SigningKey;
use orca_store::audit::{AuditEntry, NewAuditEntry, next_entry};
use serde_json::json;
use tamper_support::*;

type Tamper = fn(&Proj);
type Locate = fn(&Proj) -> PathBuf;
/// The entry index a case must be located at, found by kind in the untampered copy.
type Entry = fn(&Proj) -> usize;
type Gate = fn(&Proj) -> Vec<String>;

/// One kind of tampering: what is done, where it must be located, and which command must
/// also refuse.
pub(crate) struct Case {
    name: &'static str,
    tamper: Tamper,
    file: Locate,
    entry: Option<Entry>,
    gate: Option<Gate>,
}

pub(crate) const fn case(
    name: &'static str,
    tamper: Tamper,
    file: Locate,
    entry: Option<Entry>,
) -> Case {
    Case {
        name,
        tamper,
        file,
        entry,
        gate: None,
    }
}

pub(crate) const fn gated(case: Case, gate: Gate) -> Case {
    Case {
        gate: Some(gate),
        ..case
    }
}

/// The position of the first entry of the log at `path` that `pick` accepts: the catalogue
/// finds entries by what they are (kind, step, execution), never by a fixed index, so entries
/// added before them (an agent's answers, tool results) do not shift its cases.
fn find(path: &Path, what: &str, pick: impl Fn(&serde_json::Value) -> bool) -> usize {
    lines(path)
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .position(|e| pick(&e))
        .unwrap_or_else(|| panic!("no {what} entry in {}", path.display()))
}

/// The first entry of `kind` (about `step`, if named).
fn at(path: &Path, kind: AuditKind, step: Option<&str>) -> usize {
    find(path, kind.as_str(), |e| {
        e["kind"] == kind.as_str() && step.is_none_or(|s| e["data"]["step_id"] == s)
    })
}

/// `execution.started`.
fn started(path: &Path) -> usize {
    at(path, AuditKind::ExecutionStarted, None)
}

/// Step `a`'s first attempt start and its completion.
fn a_began(path: &Path) -> usize {
    at(path, AuditKind::TaskAttemptStarted, Some("a"))
}
fn a_done(path: &Path) -> usize {
    at(path, AuditKind::TaskAttemptCompleted, Some("a"))
}

/// The run register's entry naming execution `a2`.
fn names_a2(p: &Proj) -> usize {
    find(&p.runs(&p.ids.a), "a2", |e| {
        e["data"]["execution_id"] == p.ids.a2.as_str()
    })
}

/// Forges step `a`'s recorded summary (on its attempt's start entry, as the catalogue
/// always did: any change of content will do).
fn forge_summary(e: &mut [AuditEntry]) {
    let i = index_of(e, AuditKind::TaskAttemptStarted, Some("a"));
    e[i].data["summary"] = json!("forged");
}

/// A plan's `plan.approved`.
fn approved(path: &Path) -> usize {
    at(path, AuditKind::PlanApproved, None)
}

/// How many entries a log holds (where a seal over it points, and where an entry appended
/// to it lands).
fn count(path: &Path) -> usize {
    lines(path).len()
}

/// Where the entry of kind `kind` is in parsed entries.
fn index_of(entries: &[AuditEntry], kind: AuditKind, step: Option<&str>) -> usize {
    entries
        .iter()
        .position(|e| e.kind == kind && step.is_none_or(|s| e.data["step_id"] == s))
        .unwrap()
}

fn run_a(p: &Proj) -> Vec<String> {
    vec!["run".into(), p.ids.a.clone()]
}

pub(crate) fn resume_w1(p: &Proj) -> Vec<String> {
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
            |p| change(&p.a1_log(), started(&p.a1_log())),
            Proj::a1_log,
            Some(|p| started(&p.a1_log())),
        ),
        case(
            "remove an entry (sealed)",
            |p| remove(&p.a1_log(), started(&p.a1_log())),
            Proj::a1_log,
            Some(|p| started(&p.a1_log())),
        ),
        case(
            "reorder entries (sealed)",
            |p| reorder(&p.a1_log(), started(&p.a1_log()), a_done(&p.a1_log())),
            Proj::a1_log,
            Some(|p| started(&p.a1_log())),
        ),
        case(
            "insert an entry (sealed)",
            |p| insert(&p.a1_log(), started(&p.a1_log())),
            Proj::a1_log,
            Some(|p| started(&p.a1_log()) + 1),
        ),
        case(
            "truncate the log (sealed)",
            |p| truncate(&p.a1_log(), a_done(&p.a1_log())),
            Proj::a1_log,
            Some(|p| a_done(&p.a1_log())),
        ),
        // The same on a running execution's log (no seal yet).
        gated(
            case(
                "change an entry (unsealed)",
                |p| change(&p.w1_log(), started(&p.w1_log())),
                Proj::w1_log,
                Some(|p| started(&p.w1_log())),
            ),
            resume_w1,
        ),
        gated(
            case(
                "remove an entry (unsealed)",
                |p| remove(&p.w1_log(), started(&p.w1_log())),
                Proj::w1_log,
                Some(|p| started(&p.w1_log())),
            ),
            resume_w1,
        ),
        gated(
            case(
                "reorder entries (unsealed)",
                |p| reorder(&p.w1_log(), started(&p.w1_log()), a_done(&p.w1_log())),
                Proj::w1_log,
                Some(|p| started(&p.w1_log())),
            ),
            resume_w1,
        ),
        gated(
            case(
                "insert an entry (unsealed)",
                |p| insert(&p.w1_log(), started(&p.w1_log())),
                Proj::w1_log,
                Some(|p| started(&p.w1_log()) + 1),
            ),
            resume_w1,
        ),
        gated(
            case(
                "truncate the log (unsealed) and its write-ahead log's entries",
                |p| {
                    let keep = a_began(&p.w1_log());
                    truncate(&p.w1_log(), keep);
                    cut_wal_audit(&p.w1_wal(), keep as u64);
                },
                |p| p.tasks(&p.ids.w, &p.ids.w1),
                None,
            ),
            resume_w1,
        ),
        gated(
            case(
                "cut a running log to nothing (and its write-ahead log's entries)",
                |p| {
                    truncate(&p.w1_log(), 0);
                    cut_wal_audit(&p.w1_wal(), 0);
                },
                Proj::w1_log,
                Some(|_| 0),
            ),
            resume_w1,
        ),
        gated(
            case(
                "roll back the write-ahead log of a running execution (its task records)",
                |p| {
                    let wal = p.w1_wal();
                    let kept: Vec<String> = lines(&wal)
                        .into_iter()
                        .filter(|l| !l.contains("\"step\""))
                        .collect();
                    assert_ne!(kept.len(), lines(&wal).len(), "no task record to roll back");
                    write_lines(&wal, &kept);
                },
                |p| p.tasks(&p.ids.w, &p.ids.w1),
                None,
            ),
            resume_w1,
        ),
        gated(
            case(
                "cut a running log and restart its chain",
                |p| {
                    let first = lines(&p.w1_log()).remove(0);
                    write_lines(&p.w1_log(), &[first]);
                    cut_wal_audit(&p.w1_wal(), 1);
                },
                |p| p.tasks(&p.ids.w, &p.ids.w1),
                None,
            ),
            resume_w1,
        ),
        // Consistent rewrites and seals.
        case(
            "rewrite a sealed log consistently",
            |p| {
                rechain(&p.a1_log(), |e| forge_summary(e));
            },
            Proj::a1_log,
            Some(|_| 0),
        ),
        case(
            "rewrite a log and forge an unsigned seal",
            |p| {
                let e = rechain(&p.a1_log(), |e| forge_summary(e));
                forge_seal(&p.a1_seal(), exec_log_id(&p.ids.a, &p.ids.a1), &e, None);
            },
            Proj::a1_seal,
            Some(|p| count(&p.a1_log())),
        ),
        case(
            "rewrite a log and forge a seal signed by another key",
            |p| {
                let e = rechain(&p.a1_log(), |e| forge_summary(e));
                let k = SigningKey::from_seed([42; 32]);
                forge_seal(&p.a1_seal(), exec_log_id(&p.ids.a, &p.ids.a1), &e, Some(&k));
            },
            Proj::a1_seal,
            Some(|p| count(&p.a1_log())),
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
            Some(|p| count(&p.a1_log())),
        ),
        case(
            "swap logs (not seals) between two executions",
            |p| swap(&p.a1_log(), &p.exec_log(&p.ids.a, &p.ids.a2)),
            Proj::a1_log,
            Some(|_| 0),
        ),
        case(
            "move another plan's execution seal in",
            |p| {
                std::fs::copy(p.exec_seal(&p.ids.b, &p.ids.b1), p.a1_seal()).unwrap();
            },
            Proj::a1_seal,
            Some(|p| count(&p.a1_log())),
        ),
        case(
            "swap plan logs and seals between two plans",
            |p| {
                swap(&p.plan_log(&p.ids.a), &p.plan_log(&p.ids.b));
                swap(&p.plan_seal(&p.ids.a), &p.plan_seal(&p.ids.b));
            },
            |p| p.plan_seal(&p.ids.a),
            Some(|p| count(&p.plan_log(&p.ids.a))),
        ),
        case(
            "swap plan logs (not seals) between two plans",
            |p| swap(&p.plan_log(&p.ids.a), &p.plan_log(&p.ids.b)),
            |p| p.plan_log(&p.ids.a),
            Some(|_| 0),
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
            Some(|_| 0),
        ),
        case(
            "delete an execution's state, keep its log",
            |p| std::fs::remove_file(p.exec_file(&p.ids.a, &p.ids.a1)).unwrap(),
            |p| p.exec_file(&p.ids.a, &p.ids.a1),
            Some(|_| 0),
        ),
        case(
            "delete a task's state file",
            |p| std::fs::remove_file(p.tasks(&p.ids.a, &p.ids.a1)).unwrap(),
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
            |p| change(&p.runs(&p.ids.a), names_a2(p)),
            |p| p.runs(&p.ids.a),
            Some(names_a2),
        ),
        // The plan and its approval.
        gated(
            case(
                "edit the plan log after approval",
                |p| change(&p.plan_log(&p.ids.a), approved(&p.plan_log(&p.ids.a))),
                |p| p.plan_log(&p.ids.a),
                Some(|p| approved(&p.plan_log(&p.ids.a))),
            ),
            run_a,
        ),
        gated(
            case(
                "truncate the plan log (drop the approval)",
                |p| truncate(&p.plan_log(&p.ids.a), approved(&p.plan_log(&p.ids.a))),
                |p| p.plan_log(&p.ids.a),
                Some(|p| approved(&p.plan_log(&p.ids.a))),
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
                Some(|p| approved(&p.plan_log(&p.ids.a))),
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
                Some(|p| approved(&p.plan_log(&p.ids.a))),
            ),
            run_a,
        ),
        gated(
            case(
                "unsigned approval (signature stripped, log and seal recomputed)",
                |p| {
                    let log = p.plan_log(&p.ids.a);
                    let e = rechain(&log, |e| {
                        let i = index_of(e, AuditKind::PlanApproved, None);
                        e[i].data.as_object_mut().unwrap().remove("signature");
                    });
                    forge_seal(&p.plan_seal(&p.ids.a), plan_log_id(&p.ids.a), &e, None);
                },
                |p| p.plan_log(&p.ids.a),
                Some(|p| approved(&p.plan_log(&p.ids.a))),
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
                Some(|p| count(&p.plan_log(&p.ids.d))),
            ),
            |p| vec!["run".into(), p.ids.d.clone()],
        ),
        gated(
            case(
                "approval signed by an untrusted key",
                |_| {},
                |p| p.plan_log(&p.ids.f),
                Some(|p| approved(&p.plan_log(&p.ids.f))),
            ),
            |p| vec!["run".into(), p.ids.f.clone()],
        ),
        // State files against the log.
        gated(
            case(
                "change a running execution's plan digest",
                |p| {
                    let path = p.exec_file(&p.ids.w, &p.ids.w1);
                    let mut header = read_json(&path);
                    header["info"]["plan_digest"] = json!(format!("sha256:{}", "ab".repeat(32)));
                    write_json(&path, &header);
                },
                |p| p.exec_file(&p.ids.w, &p.ids.w1),
                None,
            ),
            resume_w1,
        ),
        gated(
            case(
                "change a task's recorded result",
                |p| {
                    let path = p.tasks(&p.ids.a, &p.ids.a1);
                    let mut task = task_record(&path, "a");
                    task["result"]["summary"] = json!("forged");
                    set_task_record(&path, "a", task);
                },
                |p| p.tasks(&p.ids.a, &p.ids.a1),
                Some(|p| a_done(&p.a1_log())),
            ),
            show_a1,
        ),
        gated(
            case(
                "forge a newer task record in the write-ahead log",
                |p| {
                    // The execution ended: its log is empty and its snapshot holds `a`'s last
                    // record. The forgery: that record one revision on, with another result.
                    let wal = p.wal(&p.ids.a, &p.ids.a1);
                    let mut task = task_record(&p.tasks(&p.ids.a, &p.ids.a1), "a");
                    let revision = task["revision"].as_u64().unwrap() + 1;
                    task.as_object_mut().unwrap().remove("revision");
                    task["result"]["summary"] = json!("forged");
                    let mut all = lines(&wal);
                    all.push(json!({"step": "a", "revision": revision, "task": task}).to_string());
                    write_lines(&wal, &all);
                },
                |p| p.tasks(&p.ids.a, &p.ids.a1),
                Some(|p| a_done(&p.a1_log())),
            ),
            show_a1,
        ),
        gated(
            case(
                "impossible state: header completed, a task failed",
                |p| {
                    // w1's `b` as it stands: the newest record in its write-ahead log (w1 did
                    // not end, so its snapshot may be older), else its snapshot's.
                    let logged = lines(&p.wal(&p.ids.w, &p.ids.w1))
                        .iter()
                        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                        .filter(|r| r["step"] == "b")
                        .max_by_key(|r| r["revision"].as_u64());
                    let failed = logged.map_or_else(
                        || task_record(&p.tasks(&p.ids.w, &p.ids.w1), "b"),
                        |r| {
                            let mut task = r["task"].clone();
                            let mut record = serde_json::Map::new();
                            record.insert("revision".into(), r["revision"].clone());
                            record.extend(task.as_object_mut().unwrap().clone());
                            serde_json::Value::Object(record)
                        },
                    );
                    assert_eq!(failed["status"], "failed", "{failed}");
                    set_task_record(&p.tasks(&p.ids.a, &p.ids.a1), "b", failed);
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
pub(crate) fn check(fixture: &Fixture, case: &Case) -> bool {
    let p = fixture.copy();
    // Where the entry is, found by kind before the tampering moves things.
    let entry = case.entry.map(|e| e(&p));
    (case.tamper)(&p);
    let out = p.run(&["audit", "verify", "--all"]);
    let all = text(&out);
    let file = p.rel(&(case.file)(&p));
    let located = all
        .lines()
        .any(|l| l.contains(&file) && entry.is_none_or(|e| l.contains(&format!("entry {e}"))));
    let mut ok = code(&out) == 5 && located;
    let mut gate_line = String::new();
    if let Some(gate) = case.gate {
        let args = gate(&p);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let g = p.run(&args);
        gate_line = format!(" | `{}` exit {}", args.join(" "), code(&g));
        ok &= code(&g) == 5;
        // Every refusal to run is itself recorded, in the plan's run register.
        if args[0] == "run" || args[1] == "resume" {
            let registers: String = std::fs::read_dir(p.plans())
                .unwrap()
                .map(|e| e.unwrap().path().join("runs.audit.jsonl"))
                .map(|r| std::fs::read_to_string(r).unwrap_or_default())
                .collect();
            ok &= registers.contains("run.refused");
        }
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
        entry.map(|e| format!(" entry {e}")).unwrap_or_default()
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
    // The plan is named by its short id (its last 8 digits, unique among few plans).
    let short = format!("plan_{}", &p.ids.a[p.ids.a.len() - 8..]);
    assert!(line.contains(&short) && line.contains("digest"), "{line}");
    assert!(
        std::fs::read_to_string(p.runs(&p.ids.a))
            .unwrap()
            .contains("run.refused")
    );
}
