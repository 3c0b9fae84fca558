//! Workspace tools: each tool works inside the root; every escape is refused.
#![expect(clippy::unwrap_used, reason = "tests")]

use orca_agents::WorkspaceTools;
use orca_agents::profile::{ALL_TOOLS, READ_TOOLS};
use orca_core::{ToolCall, ToolHost};
use serde_json::{Value, json};

struct Fixture {
    _outside: tempfile::TempDir,
    outside_path: std::path::PathBuf,
    root: tempfile::TempDir,
    tools: WorkspaceTools,
}

fn fixture(granted: &[&str]) -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    std::fs::create_dir(root.path().join("src")).unwrap();
    std::fs::write(
        root.path().join("src/lib.rs"),
        "fn main() {}\n// TODO one\n",
    )
    .unwrap();
    std::fs::write(root.path().join("README.md"), "hello\nTODO two\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), root.path().join("out_dir")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        root.path().join("out_file"),
    )
    .unwrap();
    std::os::unix::fs::symlink(root.path().join("README.md"), root.path().join("in_link")).unwrap();
    let granted: Vec<String> = granted.iter().map(|s| (*s).to_owned()).collect();
    let tools = WorkspaceTools::new(root.path(), &granted).unwrap();
    Fixture {
        outside_path: outside.path().to_path_buf(),
        _outside: outside,
        root,
        tools,
    }
}

async fn call(f: &Fixture, name: &str, args: Value) -> Result<Value, String> {
    f.tools
        .call(&ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: args,
        })
        .await
        .map_err(|e| e.message)
}

#[track_caller]
fn refused(result: Result<Value, String>, why: &str) {
    match result {
        Ok(v) => panic!("expected a refusal ({why}), got {v}"),
        Err(e) => assert!(e.contains(why), "error `{e}` does not mention `{why}`"),
    }
}

#[tokio::test]
async fn read_list_search_inside_the_root() {
    let f = fixture(ALL_TOOLS);
    assert_eq!(
        call(&f, "read_file", json!({"path": "README.md"}))
            .await
            .unwrap(),
        json!("hello\nTODO two\n")
    );
    assert_eq!(
        call(&f, "read_file", json!({"path": "in_link"}))
            .await
            .unwrap(),
        json!("hello\nTODO two\n")
    );
    let list = call(&f, "list_files", json!({})).await.unwrap();
    let files: Vec<&str> = list["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        files.contains(&"src/lib.rs") && files.contains(&"README.md"),
        "{files:?}"
    );
    let found = call(&f, "search_text", json!({"pattern": "TODO"}))
        .await
        .unwrap();
    assert_eq!(found["matches"].as_array().unwrap().len(), 2, "{found}");
    // The symlinked directory outside is not followed by search.
    std::fs::write(f.outside_path.join("other.txt"), "TODO outside").unwrap();
    let found = call(&f, "search_text", json!({"pattern": "outside"}))
        .await
        .unwrap();
    assert_eq!(found["matches"].as_array().unwrap().len(), 0, "{found}");
}

#[tokio::test]
async fn write_and_edit() {
    let f = fixture(ALL_TOOLS);
    call(
        &f,
        "write_file",
        json!({"path": "new/dir/a.txt", "content": "one two"}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(f.root.path().join("new/dir/a.txt")).unwrap(),
        "one two"
    );
    call(
        &f,
        "edit_file",
        json!({"path": "new/dir/a.txt", "old": "two", "new": "three"}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(f.root.path().join("new/dir/a.txt")).unwrap(),
        "one three"
    );
    refused(
        call(
            &f,
            "edit_file",
            json!({"path": "new/dir/a.txt", "old": "zzz", "new": "x"}),
        )
        .await,
        "does not occur in `new/dir/a.txt`",
    );
    call(&f, "write_file", json!({"path": "b.txt", "content": "x x"}))
        .await
        .unwrap();
    refused(
        call(
            &f,
            "edit_file",
            json!({"path": "b.txt", "old": "x", "new": "y"}),
        )
        .await,
        "occurs 2 times",
    );
}

#[tokio::test]
async fn run_command_in_root_with_timeout() {
    let f = fixture(ALL_TOOLS);
    let out = call(
        &f,
        "run_command",
        json!({"command": "ls README.md; exit 4"}),
    )
    .await
    .unwrap();
    assert_eq!(out["exit_code"], json!(4));
    assert_eq!(out["output"], json!("README.md\n"));
    refused(
        call(
            &f,
            "run_command",
            json!({"command": "sleep 20", "timeout_secs": 1}),
        )
        .await,
        "timed out",
    );
}

/// The gate of one step attempt: its identity, and the groups reported to it.
struct StepCaller {
    groups: std::sync::Mutex<Vec<orca_core::ProcessGroup>>,
}

#[async_trait::async_trait]
impl ToolHost for StepCaller {
    fn specs(&self) -> Vec<orca_core::ToolSpec> {
        Vec::new()
    }
    async fn call(&self, _: &ToolCall) -> Result<Value, orca_core::ToolError> {
        Err(orca_core::ToolError::new("none"))
    }
    fn step_identity(&self) -> Option<orca_core::StepIdentity> {
        Some(orca_core::StepIdentity {
            execution_id: orca_core::ExecutionId::new(),
            plan_id: orca_core::PlanId::new(),
            step_id: orca_core::StepId::parse("build").unwrap(),
            attempt: 3,
        })
    }
    async fn process_started(&self, group: orca_core::ProcessGroup) {
        self.groups.lock().unwrap().push(group);
    }
}

/// `run_command` for a step: its processes get the step's identity and its group is reported
/// to the step's gate (which records it).
#[tokio::test]
async fn run_command_for_a_step_gets_its_identity_and_reports_its_group() {
    let f = fixture(ALL_TOOLS);
    let caller = StepCaller {
        groups: std::sync::Mutex::new(Vec::new()),
    };
    let call = ToolCall {
        id: "1".into(),
        name: "run_command".into(),
        arguments: json!({"command": "echo $ORCA_TASK_ID $ORCA_ATTEMPT $ORCA_IDEMPOTENCY_KEY; echo pid $$"}),
    };
    let out = f.tools.call_for(&call, &caller).await.unwrap();
    let text = out["output"].as_str().unwrap();
    assert!(text.starts_with("build 3 exec_"), "{text}");
    assert!(text.contains(".build\npid "), "{text}");
    let groups = caller.groups.lock().unwrap().clone();
    assert_eq!(groups.len(), 1);
    assert!(
        text.ends_with(&format!("pid {}\n", groups[0].pgid)),
        "{text}"
    );
}

#[tokio::test]
async fn escapes_are_refused() {
    let f = fixture(ALL_TOOLS);
    let secret = f.outside_path.join("secret.txt").display().to_string();
    refused(
        call(&f, "read_file", json!({"path": "../secret.txt"})).await,
        "`..` is not allowed",
    );
    refused(
        call(&f, "read_file", json!({"path": "src/../../x"})).await,
        "`..` is not allowed",
    );
    refused(
        call(&f, "read_file", json!({"path": secret})).await,
        "absolute paths",
    );
    refused(
        call(&f, "read_file", json!({"path": "out_file"})).await,
        "outside the project root",
    );
    refused(
        call(&f, "read_file", json!({"path": "out_dir/secret.txt"})).await,
        "outside the project root",
    );
    refused(
        call(&f, "list_files", json!({"path": "out_dir"})).await,
        "outside the project root",
    );
    refused(
        call(
            &f,
            "search_text",
            json!({"pattern": "x", "path": "out_dir"}),
        )
        .await,
        "outside the project root",
    );
    refused(
        call(
            &f,
            "write_file",
            json!({"path": "out_dir/new.txt", "content": "x"}),
        )
        .await,
        "outside the project root",
    );
    refused(
        call(
            &f,
            "write_file",
            json!({"path": "out_dir/deep/new.txt", "content": "x"}),
        )
        .await,
        "outside the project root",
    );
    refused(
        call(
            &f,
            "write_file",
            json!({"path": "out_file", "content": "pwned"}),
        )
        .await,
        "outside the project root",
    );
    refused(
        call(&f, "write_file", json!({"path": "/tmp/x", "content": "x"})).await,
        "absolute paths",
    );
    refused(
        call(
            &f,
            "edit_file",
            json!({"path": "out_file", "old": "top", "new": "x"}),
        )
        .await,
        "outside the project root",
    );
    assert_eq!(
        std::fs::read_to_string(f.outside_path.join("secret.txt")).unwrap(),
        "top secret"
    );
    assert!(!f.outside_path.join("new.txt").exists() && !f.outside_path.join("deep").exists());
}

#[tokio::test]
async fn only_granted_tools_are_offered_and_callable() {
    let f = fixture(READ_TOOLS);
    let names: Vec<String> = f.tools.specs().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["read_file", "list_files", "search_text"]);
    refused(
        call(&f, "write_file", json!({"path": "a", "content": "x"})).await,
        "not granted",
    );
    refused(
        call(&f, "run_command", json!({"command": "touch pwned"})).await,
        "not granted",
    );
    assert!(!f.root.path().join("a").exists() && !f.root.path().join("pwned").exists());
    refused(
        call(&f, "read_file", json!({"path": 5})).await,
        "invalid arguments",
    );
    refused(
        call(&f, "read_file", json!({"path": "x", "extra": 1})).await,
        "invalid arguments",
    );
}
