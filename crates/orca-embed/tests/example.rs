//! The embedding example runs as documented: a custom backend and the shell agent complete a
//! two-step plan on the file store, and the audit log verifies — also for `orca` itself,
//! reading the same directory.
#![allow(clippy::unwrap_used, reason = "tests")]

#[path = "../examples/custom_backend.rs"]
mod example;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedding_example_runs_a_plan_to_a_verified_end() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "hi\n").unwrap();
    let out = example::run(dir.path()).await.unwrap();
    assert!(out.starts_with("outcome: Completed\n"), "{out}");
    assert!(
        out.contains("  look completed: looked at the project: "),
        "{out}"
    );
    assert!(out.contains("  count completed: "), "{out}");
    assert!(out.ends_with("audit verified: true\n"), "{out}");
    // The records are orca's own: the store sees one sealed execution.
    assert!(dir.path().join(".orca").is_dir());
}
