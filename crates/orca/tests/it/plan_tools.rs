//! `orca plan validate`, `plan show --format mermaid|dot`, `completions` and `man`, on the real
//! binary. Each is run the way a new user would: in an empty directory, with no project.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;

fn orca(dir: &Path, args: &[&str]) -> Output {
    Command::cargo_bin("orca")
        .unwrap()
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join(".config-home"))
        .env_remove("ORCA_LOG")
        .write_stdin(Vec::<u8>::new())
        .output()
        .unwrap()
}

fn example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/parallel-dag.json")
        .display()
        .to_string()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every file and directory under `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn validate_reports_every_problem_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"goal": "", "steps": [
            {"id": "a", "agent": "nope", "description": "x", "depends_on": [], "writes": ["src/**"]},
            {"id": "b", "agent": "shell", "description": "y", "command": "true", "depends_on": [], "writes": ["src/lib.rs"]}
        ], "assumptions": [], "risks": ["r"], "verification": ["v"]}"#,
    )
    .unwrap();
    let before = tree(dir.path());

    let out = orca(dir.path(), &["plan", "validate", "bad.json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    insta::assert_snapshot!("validate_problems", text(&out.stdout));

    let out = orca(dir.path(), &["--json", "plan", "validate", "bad.json"]);
    assert_eq!(out.status.code(), Some(2));
    insta::assert_snapshot!("validate_problems_json", text(&out.stdout));

    let out = orca(dir.path(), &["plan", "validate", &example()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).ends_with("valid (8 steps)\n"));

    // Not a regular file, not there, not JSON: one line naming the file, exit 2.
    std::fs::write(dir.path().join("junk.json"), "{").unwrap();
    for (arg, message) in [
        ("/dev/zero", "error: /dev/zero: not a regular file"),
        (
            "missing.json",
            "error: missing.json: No such file or directory (os error 2)",
        ),
        ("junk.json", "error: junk.json: "),
    ] {
        let out = orca(dir.path(), &["plan", "validate", arg]);
        assert_eq!(out.status.code(), Some(2), "{arg}");
        assert!(
            text(&out.stderr).starts_with(message),
            "{arg}: {}",
            text(&out.stderr)
        );
    }
    // Nothing was created: no `.orca/`, no cache, no config.
    let mut after = tree(dir.path());
    after.retain(|p| p != "junk.json");
    assert_eq!(after, before);
}

#[test]
fn plan_show_draws_the_graph_for_mermaid_and_dot() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let out = orca(
        dir.path(),
        &[
            "--root",
            root,
            "--json",
            "plan",
            "create",
            "--file",
            &example(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = created["plan_id"].as_str().unwrap();
    for format in ["mermaid", "dot"] {
        let out = orca(
            dir.path(),
            &["--root", root, "plan", "show", id, "--format", format],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        insta::assert_snapshot!(format!("show_{format}"), text(&out.stdout));
    }
}

#[test]
fn completions_and_the_manual_need_no_project() {
    let dir = tempfile::tempdir().unwrap();
    for (shell, marker) in [
        ("bash", "_orca()"),
        ("zsh", "#compdef orca"),
        ("fish", "complete -c orca"),
        ("elvish", "orca"),
        ("powershell", "orca"),
    ] {
        let out = orca(dir.path(), &["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = text(&out.stdout);
        assert!(
            script.contains(marker) && script.contains("validate"),
            "{shell}"
        );
    }
    let out = orca(dir.path(), &["man"]);
    assert_eq!(out.status.code(), Some(0));
    let page = text(&out.stdout);
    assert!(
        page.starts_with(".ie") && page.contains(".TH orca 1"),
        "{page}"
    );
    // One page: no reference to per-command pages that do not exist, a NAME line that does
    // not repeat the name, and every command of `--help` described in it.
    assert!(!page.contains("(1)\n"), "refers to other pages: {page}");
    assert!(page.contains("orca \\- Human\\-approved"), "{page}");
    for command in [
        "orca init",
        "orca plan approve",
        "orca exec logs",
        "orca exec cancel",
        "orca audit verify",
    ] {
        assert!(
            page.contains(&format!(".SS \"{}\"", command.replace('-', "\\-"))),
            "{command}"
        );
    }
    assert!(tree(dir.path()).is_empty(), "{:?}", tree(dir.path()));
}

/// The schema is generated from the types that read plan documents; its snapshot is the
/// contract editors rely on.
#[test]
fn plan_schema_describes_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let out = orca(dir.path(), &["plan", "schema"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let step = &schema["$defs"]["Step"];
    assert_eq!(step["additionalProperties"], false);
    assert_eq!(
        schema["required"],
        serde_json::json!(["goal", "steps", "assumptions", "risks", "verification"])
    );
    insta::assert_json_snapshot!("plan_schema", schema);
    assert!(tree(dir.path()).is_empty());
}

/// Read-only commands run where there is no project fail with one line saying what to do, and
/// create nothing (a stray `.orca/` would capture root discovery for every later command).
#[test]
fn read_only_commands_outside_a_project_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    for args in [
        vec!["plan", "list"],
        vec!["exec", "list"],
        vec!["exec", "show", "exec_0"],
        vec!["agents", "list"],
        vec!["audit", "verify", "--all"],
        vec!["--root", root, "plan", "list"],
    ] {
        let out = orca(dir.path(), &args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("no orca project in")
                && text(&out.stderr).contains("orca init"),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            tree(dir.path()).is_empty(),
            "{args:?} created {:?}",
            tree(dir.path())
        );
    }
}
