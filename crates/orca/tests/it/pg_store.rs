//! The shared PostgreSQL store from the command line (ADR 0021), against a throwaway server:
//! `--store` / `ORCA_STORE_URL` put plans, executions and audit logs in the database (none in
//! the project's files), `store export` writes the file layout that `audit verify` checks
//! offline, `store import` copies it back byte for byte, and a bad URL changes nothing.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::path::{Path, PathBuf};

use common::{isolated, orca};
use orca_testkit::postgres::Throwaway;
use serde_json::{Value, json};

fn database() -> String {
    let server = Throwaway::shared().unwrap_or_else(|e| panic!("{e}"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(server.create_database())
        .unwrap()
}

fn plan_doc() -> String {
    json!({
        "goal": "g", "summary": "s", "assumptions": ["a"], "risks": ["r"], "verification": ["v"],
        "steps": [
            { "id": "a", "agent": "shell", "description": "a", "command": "echo a", "depends_on": [] },
            { "id": "b", "agent": "shell", "description": "b", "command": "echo b", "depends_on": ["a"] }
        ]
    })
    .to_string()
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn audit_files(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    files_under(&root.join(".orca"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".audit."))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p.strip_prefix(root).unwrap().to_path_buf(), bytes)
        })
        .collect()
}

#[test]
fn a_run_on_the_shared_store_exports_verifies_offline_and_imports_back() {
    let url = database();
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    std::fs::write(root.join("p.json"), plan_doc()).unwrap();

    let out = orca(root, cfg, &["--store", &url, "store", "migrate"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = orca(
        root,
        cfg,
        &[
            "--store", &url, "--json", "plan", "create", "--file", "p.json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let plan = serde_json::from_slice::<Value>(&out.stdout).unwrap()["plan_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = orca(root, cfg, &["--store", &url, "plan", "approve", &plan]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The environment variable chooses the store as well.
    let mut cmd = isolated(root, cfg);
    cmd.env("ORCA_STORE_URL", &url)
        .args(["--json", "run", &plan]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let exec = serde_json::from_slice::<Value>(&out.stdout).unwrap()["execution_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Nothing of it is in the project's files.
    let leaked: Vec<_> = files_under(&root.join(".orca/plans"));
    println!(
        "plan/execution files written to the project by a postgres run: {}",
        leaked.len()
    );
    assert!(leaked.is_empty(), "{leaked:?}");
    let out = orca(
        root,
        cfg,
        &["--store", &url, "--json", "exec", "show", &exec],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("completed"));

    // `audit verify` checks the shared store itself.
    let out = orca(root, cfg, &["--store", &url, "audit", "verify", "--all"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("verifying the shared store"),
        "{out:?}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("sealed"),
        "{out:?}"
    );
    let exported = tempfile::tempdir().unwrap();
    let to = exported.path().to_str().unwrap();
    let out = orca(root, cfg, &["--store", &url, "store", "export", "--to", to]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = orca(exported.path(), cfg, &["audit", "verify", "--all"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The export, named by --root, is what is verified even while the environment names the
    // shared store (as the README leaves ORCA_STORE_URL set).
    let mut with_env = common::isolated(exported.path(), cfg);
    with_env
        .env("ORCA_STORE_URL", &url)
        .args(["audit", "verify", "--all"]);
    let out = with_env.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("verifying the records under"),
        "{out:?}"
    );
    let out = orca(exported.path(), cfg, &["--json", "exec", "show", &exec]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // A second export into the same place is refused.
    let out = orca(root, cfg, &["--store", &url, "store", "export", "--to", to]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // Import into another database, export again: the audit logs and seals are identical.
    let second = database();
    let out = orca(
        root,
        cfg,
        &["--store", &second, "store", "import", "--from", to],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let again = tempfile::tempdir().unwrap();
    let out = orca(
        root,
        cfg,
        &[
            "--store",
            &second,
            "store",
            "export",
            "--to",
            again.path().to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (a, b) = (audit_files(exported.path()), audit_files(again.path()));
    assert!(!a.is_empty());
    let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count() + a.len().abs_diff(b.len());
    println!(
        "audit files differing after export → import → export: {differing}/{}",
        a.len()
    );
    assert_eq!(differing, 0);
    // Importing twice keeps what is there.
    let out = orca(
        root,
        cfg,
        &[
            "--store", &second, "--json", "store", "import", "--from", to,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["plans"].as_u64(), v["executions"].as_u64()),
        (Some(0), Some(0))
    );

    // An audit entry edited in the shared store behind orca's back: verify finds it (exit 5).
    let edited = std::process::Command::new(psql())
        .args([
            &url,
            "-q",
            "-c",
            "UPDATE audit_entries SET line = replace(line, 'completed', 'c0mpleted') \
             WHERE line LIKE '%task.attempt.completed%'",
        ])
        .output()
        .unwrap();
    assert!(edited.status.success(), "{edited:?}");
    let out = orca(root, cfg, &["--store", &url, "audit", "verify", "--all"]);
    println!(
        "audit verify on the shared store after an entry was edited there: exit {:?}",
        out.status.code()
    );
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("TAMPERED"),
        "{out:?}"
    );
}

/// `psql`, on the PATH or beside the server binaries the tests use.
pub(crate) fn psql() -> PathBuf {
    let beside = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.path().join("bin/psql"))
        .find(|p| p.is_file());
    beside.unwrap_or_else(|| PathBuf::from("psql"))
}

#[test]
fn a_store_url_that_is_not_postgres_is_refused_and_nothing_is_written() {
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    std::fs::write(root.join("p.json"), plan_doc()).unwrap();
    // Through ORCA_STORE_URL: on the command line a URL with a password is refused before
    // anything else (test `store_password`).
    let mut cmd = isolated(root, cfg);
    cmd.args(["plan", "create", "--file", "p.json"])
        .env("ORCA_STORE_URL", "mysql://u:secretpw@h/db");
    let out = assert_cmd::Command::from_std(cmd)
        .write_stdin(Vec::<u8>::new())
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--store") && err.contains("postgres"), "{err}");
    assert!(
        !err.contains("secretpw"),
        "the password is never shown: {err}"
    );
    assert!(files_under(&root.join(".orca/plans")).is_empty());
    // In the config: named by file and field.
    std::fs::write(
        root.join(".orca/config.toml"),
        "[store]\nurl = \"sqlite://x\"\n",
    )
    .unwrap();
    let out = orca(root, cfg, &["plan", "list"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("store.url") && err.contains("config.toml"),
        "{err}"
    );
}

// libpq's environment: `postgres:///` (or `postgres://HOST/`) with PGHOST, PGPORT, PGUSER and
// PGDATABASE finds the database as `psql` would, over TCP and over the server's socket; what
// the URL names wins over the environment.
#[test]
fn libpq_environment_variables_fill_in_what_the_url_leaves_out() {
    let url = database();
    let server = Throwaway::shared().unwrap_or_else(|e| panic!("{e}"));
    let db = url.rsplit('/').next().unwrap().to_owned();
    let port = server.port().to_string();
    let socket_dir = server
        .socket_url("postgres")
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("host="))
        .unwrap()
        .to_owned();
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    std::fs::write(root.join("p.json"), plan_doc()).unwrap();
    let run = |url: &str, host: &str, args: &[&str]| {
        let mut cmd = isolated(root, cfg);
        cmd.env("ORCA_STORE_URL", url)
            .env("PGHOST", host)
            .env("PGPORT", &port)
            .env("PGUSER", "postgres")
            .env("PGDATABASE", &db)
            .args(args)
            .stdin(std::process::Stdio::null());
        cmd.output().unwrap()
    };
    let mut ran = 0;
    for (url, host) in [
        ("postgres:///", "127.0.0.1"),
        ("postgres:///", socket_dir.as_str()),
        ("postgres://127.0.0.1/", "no-such-host.invalid"),
    ] {
        let out = run(url, host, &["--json", "run", "p.json", "--yes"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{url} with PGHOST={host}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    let out = run("postgres:///", "127.0.0.1", &["--json", "exec", "list"]);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let in_db = listed.as_array().map_or(0, Vec::len);
    println!("runs through libpq's environment: {ran}; executions in the database: {in_db}");
    assert_eq!(in_db, 3);
    // Nothing went to the project's files.
    assert!(
        files_under(&root.join(".orca"))
            .iter()
            .all(|p| !p.to_string_lossy().contains("exec_")),
        "no execution in the file store"
    );
    // A bad PGPORT is named.
    let mut cmd = isolated(root, cfg);
    cmd.env("ORCA_STORE_URL", "postgres:///")
        .env("PGPORT", "54x")
        .args(["exec", "list"])
        .stdin(std::process::Stdio::null());
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("PGPORT=54x"));
}
