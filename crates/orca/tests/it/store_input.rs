//! Store-side bad input, driven through the real binary: each gets a clear error naming the
//! file, exit 2, and changes nothing under `.orca/` (ADR 0013).

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::orca;
use serde_json::json;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every record under `dir` with a digest of its content (lock files left out).
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if e.path().extension().is_some_and(|x| x == "lock") {
                // Lock files are empty and hold no record.
            } else {
                out.push((
                    e.path().display().to_string(),
                    std::fs::read(e.path()).unwrap_or_default(),
                ));
            }
        }
    }
    out.sort();
    out
}

fn plan_doc() -> String {
    json!({
        "goal": "g", "summary": "s", "assumptions": ["a"], "risks": ["r"], "verification": ["v"],
        "steps": [{ "id": "a", "agent": "shell", "description": "a", "command": "echo a", "depends_on": [] }]
    })
    .to_string()
}

#[test]
fn devices_and_fifos_are_refused_not_read() {
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    let fifo = root.join("plan.json");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let before = tree(&root.join(".orca"));
    let mut refused = 0;
    for args in [
        vec!["plan", "create", "--file", "/dev/zero"],
        vec!["plan", "create", "--file", fifo.to_str().unwrap()],
        vec!["run", fifo.to_str().unwrap(), "--yes"],
        vec!["plan", "create", "--file", root.to_str().unwrap()],
    ] {
        let start = Instant::now();
        let out = orca(root, cfg, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("not a regular file"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
        // Generous: a FIFO read would hang until the 60 s timeout.
        assert!(start.elapsed() < Duration::from_secs(30));
        refused += 1;
    }
    assert_eq!(
        tree(&root.join(".orca")),
        before,
        "nothing under .orca/ changed"
    );
    println!("non-regular plan files refused: {refused}/4");
}

#[test]
fn temp_files_left_by_a_dead_process_are_removed_on_open() {
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    std::fs::write(root.join("p.json"), plan_doc()).unwrap();
    assert_eq!(
        orca(root, cfg, &["plan", "create", "--file", "p.json"])
            .status
            .code(),
        Some(0)
    );
    // A pid that cannot be alive (above the kernel's pid_max) and our own (alive) one.
    let plans = root.join(".orca/plans");
    let dead = plans.join(".plan_x.json.4999999.0.tmp");
    std::fs::write(&dead, "half a plan").unwrap();
    let live = plans.join(format!(".plan_y.json.{}.0.tmp", std::process::id()));
    std::fs::write(&live, "being written").unwrap();
    let out = orca(root, cfg, &["plan", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !dead.exists(),
        "a dead writer's temp file is cleaned on open"
    );
    assert!(live.exists(), "a live writer's temp file is left alone");
    // In an execution's directories: cleaned by whoever drives it next.
    let failing = plan_doc().replace("echo a", "exit 1");
    std::fs::write(root.join("f.json"), failing).unwrap();
    let out = orca(root, cfg, &["--json", "run", "f.json", "--yes"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let exec_dir = std::fs::read_dir(&plans)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("executions").join(&exec).is_dir())
        .unwrap()
        .join("executions")
        .join(&exec);
    // A temp file of the task snapshot (`tasks.json`) a dead writer left.
    let dead_task = exec_dir.join(".tasks.json.4999999.3.tmp");
    std::fs::write(&dead_task, "half a task").unwrap();
    let out = orca(root, cfg, &["exec", "resume", &exec]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        !dead_task.exists(),
        "cleaned when the execution is driven again"
    );
    // Anywhere: `orca init` walks the whole store.
    let deep = exec_dir.join(".tasks.json.4999999.4.tmp");
    std::fs::write(&deep, "half a task").unwrap();
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    assert!(!deep.exists(), "init removes every stale temp file");
    assert!(live.exists(), "a live writer's temp file is left alone");
}

#[test]
fn a_revision_at_its_maximum_does_not_wrap() {
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    std::fs::write(root.join("p.json"), plan_doc()).unwrap();
    let out = orca(root, cfg, &["--json", "plan", "create", "--file", "p.json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["plan_id"].as_str().unwrap().to_owned();
    let path = root.join(format!(".orca/plans/{id}.json"));
    let mut plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    plan["revision"] = json!(u64::MAX);
    std::fs::write(&path, serde_json::to_string_pretty(&plan).unwrap()).unwrap();
    let before = tree(&root.join(".orca"));
    let out = orca(root, cfg, &["plan", "approve", &id]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot change again"),
        "{}",
        stderr(&out)
    );
    assert_eq!(tree(&root.join(".orca")), before, "nothing changed");
}

#[test]
fn layout_faults_exit_2_naming_the_path() {
    let config = tempfile::tempdir().unwrap();
    let mut faults = 0;
    // `.orca/plans` is a file.
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.path().join(".orca")).unwrap();
    std::fs::write(project.path().join(".orca/plans"), "not a directory").unwrap();
    let out = orca(project.path(), config.path(), &["plan", "list"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(".orca/plans"), "{}", stderr(&out));
    faults += 1;
    // A plan file that is a directory.
    let project = tempfile::tempdir().unwrap();
    assert_eq!(
        orca(project.path(), config.path(), &["init"]).status.code(),
        Some(0)
    );
    let id = "plan_01a20891-9c8f-77fa-be25-a6cc8d88d18b";
    std::fs::create_dir_all(project.path().join(format!(".orca/plans/{id}.json"))).unwrap();
    let out = orca(project.path(), config.path(), &["plan", "show", id]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(id), "{}", stderr(&out));
    faults += 1;
    // A plan's directory (its logs, its locks) is a file.
    let project = tempfile::tempdir().unwrap();
    assert_eq!(
        orca(project.path(), config.path(), &["init"]).status.code(),
        Some(0)
    );
    std::fs::write(project.path().join("p.json"), plan_doc()).unwrap();
    let out = orca(
        project.path(),
        config.path(),
        &["--json", "plan", "create", "--file", "p.json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["plan_id"].as_str().unwrap().to_owned();
    let dir = project.path().join(format!(".orca/plans/{id}"));
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, "not a directory").unwrap();
    let out = orca(project.path(), config.path(), &["plan", "approve", &id]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("layout is damaged"),
        "{}",
        stderr(&out)
    );
    faults += 1;
    println!("layout faults exiting 2: {faults}/3");
}

// A stored plan edited by hand (an unknown field) is not silently hidden: `plan list` says one
// could not be read, a prefix of its id names its file and the fault (exit 2, not "no plan
// matches"), and `audit verify` reports it once (exit 5).
#[test]
fn a_hand_edited_stored_plan_is_named_not_hidden() {
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    let doc = json!({
        "goal": "g", "summary": "s", "assumptions": ["a"], "risks": ["r"],
        "verification": ["v"],
        "steps": [{"id": "a", "agent": "shell", "description": "a", "command": "echo a",
                   "depends_on": []}]
    });
    std::fs::write(root.join("p.json"), doc.to_string()).unwrap();
    let out = orca(root, cfg, &["--json", "plan", "create", "--file", "p.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["plan_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let file = root.join(".orca/plans").join(format!("{id}.json"));
    let mut stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    stored["colour"] = json!("blue");
    std::fs::write(&file, stored.to_string()).unwrap();

    let out = orca(root, cfg, &["plan", "list"]);
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0));
    assert!(listed.contains("1 could not be read"), "{listed}");
    assert!(!listed.contains("no plans yet"), "{listed}");
    assert!(
        stderr(&out).contains("unknown field `colour`"),
        "{}",
        stderr(&out)
    );

    let out = orca(root, cfg, &["plan", "show", &id[..13]]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("{id}.json")) && err.contains("colour"),
        "{err}"
    );
    assert!(!err.contains("no plan matches"), "{err}");

    let out = orca(root, cfg, &["audit", "verify"]);
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(5), "{shown}");
    let reported = shown.matches("colour").count();
    println!("the edited plan reported {reported} time(s) by audit verify");
    assert_eq!(reported, 1, "{shown}");
}
