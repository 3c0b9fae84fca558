//! Tool-level confinement: every tool, tried against orca's records, the user's orca config and
//! the signing key through `..`, absolute paths, symlinks (made by a previous step), hard links
//! and case variants. Each attempt must be refused (a `refused` tool error) and `.orca/` must be
//! unchanged; the bypasses are counted.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use orca_agents::WorkspaceTools;
use orca_agents::profile::ALL_TOOLS;
use orca_core::{ToolCall, ToolError, ToolHost};
use orca_os::{SandboxMode, SandboxPolicy};
use serde_json::{Value, json};

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    tools: WorkspaceTools,
}

fn fixture(mode: SandboxMode) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let root = base.join("project");
    let home = base.join("home");
    std::fs::create_dir_all(root.join(".orca/plans")).unwrap();
    std::fs::write(
        root.join(".orca/plans/p.json"),
        "{\"stage\": \"approved\", \"RECORD\": 1}",
    )
    .unwrap();
    std::fs::write(root.join(".orca/config.toml"), "# RECORD config\n").unwrap();
    std::fs::create_dir_all(home.join(".config/orca")).unwrap();
    std::fs::write(home.join(".config/orca/signing.key"), "RECORD key").unwrap();
    std::fs::write(root.join("notes.txt"), "hello\n").unwrap();
    // Left behind by a previous step: links into the records and the config.
    std::os::unix::fs::symlink(root.join(".orca"), root.join("records")).unwrap();
    std::os::unix::fs::symlink(".orca/plans/p.json", root.join("plan-link.json")).unwrap();
    std::os::unix::fs::symlink(home.join(".config/orca"), root.join("cfg")).unwrap();
    std::fs::hard_link(root.join(".orca/plans/p.json"), root.join("hard.json")).unwrap();
    std::fs::hard_link(
        home.join(".config/orca/signing.key"),
        root.join("hard-key.txt"),
    )
    .unwrap();
    let env = {
        let home = home.clone();
        move |k: &str| (k == "HOME").then(|| home.display().to_string())
    };
    let policy = SandboxPolicy::new(mode, &root, &env).unwrap();
    let all: Vec<String> = ALL_TOOLS.iter().map(|s| (*s).to_owned()).collect();
    let tools = WorkspaceTools::new(&root, &all)
        .unwrap()
        .with_policy(Arc::new(policy));
    Fixture {
        _dir: dir,
        root,
        home,
        tools,
    }
}

fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), std::fs::read(e.path()).unwrap_or_default());
            }
        }
    }
    out
}

async fn call(f: &Fixture, name: &str, args: Value) -> Result<Value, ToolError> {
    f.tools
        .call(&ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: args,
        })
        .await
}

#[tokio::test]
async fn every_tool_is_refused_inside_orca_records_and_config() {
    let f = fixture(SandboxMode::Tools);
    let before = (tree(&f.root.join(".orca")), tree(&f.home));
    let abs = f.root.join(".orca/plans/abs.json").display().to_string();
    let key = f
        .home
        .join(".config/orca/signing.key")
        .display()
        .to_string();
    let forged = json!({"stage": "approved", "digest": "recomputed"}).to_string();
    let mut attempts: Vec<(&str, Value)> = Vec::new();
    for path in [
        ".orca/plans/forged.json",
        ".ORCA/plans/forged.json",
        ".Orca/config.toml",
        "./.orca/plans/forged.json",
        "src/../.orca/plans/forged.json",
        "../project/.orca/plans/forged.json",
        abs.as_str(),
        "records/plans/forged.json",
        "records/config.toml",
        "plan-link.json",
        "hard.json",
        "hard-key.txt",
        "cfg/signing.key",
        "cfg/new.key",
        key.as_str(),
        ".orca",
        ".orca/plans/\u{0}x.json",
    ] {
        attempts.push(("write_file", json!({"path": path, "content": forged})));
        attempts.push((
            "edit_file",
            json!({"path": path, "old": "approved", "new": "forged"}),
        ));
        attempts.push(("read_file", json!({"path": path})));
    }
    for path in [".orca", ".ORCA/plans", "records", "records/plans", "cfg"] {
        attempts.push(("list_files", json!({"path": path})));
        attempts.push(("search_text", json!({"pattern": "RECORD", "path": path})));
    }
    for command in [
        "echo '{}' > .orca/plans/x.json",
        "cp notes.txt .ORCA/plans/x.json",
        "echo x\u{0}y",
    ] {
        attempts.push(("run_command", json!({ "command": command })));
    }
    let total = attempts.len();
    let mut bypasses = Vec::new();
    for (tool, args) in attempts {
        match call(&f, tool, args.clone()).await {
            Err(e) if e.refused => {}
            Ok(v) => bypasses.push(format!("{tool} {args}: {v}")),
            Err(e) => bypasses.push(format!("{tool} {args}: not a refusal: {}", e.message)),
        }
    }
    // Listing and searching the whole project never shows the records or the key.
    let listed = call(&f, "list_files", json!({})).await.unwrap().to_string();
    if listed.contains("p.json") || listed.contains("config.toml") {
        bypasses.push(format!("list_files shows the records: {listed}"));
    }
    let found = call(&f, "search_text", json!({"pattern": "RECORD"}))
        .await
        .unwrap();
    if found["matches"].as_array().is_some_and(|m| !m.is_empty()) {
        bypasses.push(format!("search_text reads the records: {found}"));
    }
    let after = (tree(&f.root.join(".orca")), tree(&f.home));
    eprintln!(
        "tool confinement: {total} attempts, {} bypasses, records changed: {}",
        bypasses.len(),
        before != after
    );
    assert!(bypasses.is_empty(), "bypasses: {bypasses:#?}");
    assert_eq!(before, after, ".orca/ or the config changed");
}

#[tokio::test]
async fn ordinary_tool_work_still_works() {
    let f = fixture(SandboxMode::Tools);
    call(
        &f,
        "write_file",
        json!({"path": "site/a.txt", "content": "a"}),
    )
    .await
    .unwrap();
    call(
        &f,
        "edit_file",
        json!({"path": "site/a.txt", "old": "a", "new": "b"}),
    )
    .await
    .unwrap();
    assert_eq!(
        call(&f, "read_file", json!({"path": "site/a.txt"}))
            .await
            .unwrap(),
        json!("b")
    );
    assert_eq!(
        std::fs::read_to_string(f.root.join("site/a.txt")).unwrap(),
        "b"
    );
    let found = call(&f, "search_text", json!({"pattern": "hello"}))
        .await
        .unwrap();
    assert_eq!(found["matches"][0]["file"], "notes.txt", "{found}");
    let out = call(&f, "run_command", json!({"command": "cat notes.txt"}))
        .await
        .unwrap();
    assert!(out["output"].as_str().unwrap().contains("hello"), "{out}");
}

#[tokio::test]
async fn off_mode_keeps_only_the_project_root() {
    let f = fixture(SandboxMode::Off);
    call(
        &f,
        "write_file",
        json!({"path": ".orca/plans/off.json", "content": "{}"}),
    )
    .await
    .unwrap();
    let e = call(&f, "read_file", json!({"path": "../home/x"}))
        .await
        .unwrap_err();
    assert!(e.refused, "{e:?}");
}

#[tokio::test]
async fn kernel_mode_run_command_is_blocked_by_the_kernel() {
    let f = fixture(SandboxMode::Kernel);
    if orca_os::sandbox::landlock_abi() < 1 {
        assert!(std::env::var_os("ORCA_ALLOW_NO_SANDBOX").is_some());
        return;
    }
    let before = tree(&f.root.join(".orca"));
    let mut bypasses = 0;
    for command in [
        "echo '{}' > .orca/plans/x.json",
        "echo '{}' > f.json && mv f.json .orca/plans/f.json",
        "echo '{}' > g.json && cp g.json .orca/plans/g.json",
        "echo '{}' > h.json && ln h.json .orca/plans/h.json",
        "ln -s .orca r && echo '{}' > r/plans/s.json",
    ] {
        let out = call(&f, "run_command", json!({ "command": command }))
            .await
            .unwrap();
        if out["exit_code"] == 0 {
            bypasses += 1;
        }
    }
    eprintln!("run_command under the kernel sandbox: {bypasses} bypasses");
    assert_eq!(bypasses, 0);
    assert_eq!(before, tree(&f.root.join(".orca")));
}
