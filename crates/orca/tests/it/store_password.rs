//! A password never travels in orca's command line: every process of the user can read a
//! command line (`/proc/PID/cmdline`, `ps`), a step included, so `--store` with a password in
//! the URL (`user:PASSWORD@`, `?password=`, libpq's `password=` word) is refused, exit 2, with
//! one line naming the ways that work (`ORCA_STORE_URL`, `PGPASSWORD`, `~/.pgpass`, `[store]
//! url` in the user config) and never the password; nothing is done. The same URL in
//! `ORCA_STORE_URL` is used (it fails here only to connect: no database listens).
//!
//! `cargo test -p orca --test it store_password:: -- --nocapture` prints the count.

#![expect(clippy::unwrap_used, reason = "tests may unwrap")]

use std::path::Path;

use crate::common;

const PASSWORD: &str = "Tr0ub4dor-and-3-horses";

/// Every file under `dir` with its contents: what "nothing changed" compares.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((
                    p.display().to_string(),
                    std::fs::read(&p).unwrap_or_default(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_store_password_on_the_command_line_is_refused_and_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("project");
    let home = dir.path().join("config");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    assert!(common::orca(&root, &home, &["init"]).status.success());
    // A port nothing listens on: nothing could be reached even if it were tried.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let urls = [
        format!("postgres://orca:{PASSWORD}@127.0.0.1:{port}/orca"),
        format!("postgresql://orca:{PASSWORD}@127.0.0.1:{port}/orca?sslmode=disable"),
        format!("postgres://orca@127.0.0.1:{port}/orca?password={PASSWORD}"),
        format!("postgres://orca@127.0.0.1:{port}/orca?sslmode=disable&password={PASSWORD}"),
        format!("host=127.0.0.1 port={port} user=orca password={PASSWORD}"),
        format!("host=127.0.0.1 port={port} password = '{PASSWORD}'"),
    ];
    let before = tree(&root);
    let (mut tried, mut refused, mut shown, mut accepted) = (0, 0, 0, 0);
    for url in &urls {
        for args in [
            vec!["--store", url.as_str(), "plan", "list"],
            vec!["plan", "list", "--store", url.as_str()],
            vec!["exec", "list", &format!("--store={url}")],
            vec!["--store", url.as_str(), "store", "migrate"],
            vec!["--store", url.as_str(), "worker"],
        ] {
            tried += 1;
            let out = common::orca(&root, &home, &args);
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            let stdout = String::from_utf8_lossy(&out.stdout);
            if stderr.contains(PASSWORD) || stdout.contains(PASSWORD) {
                shown += 1;
                eprintln!("{args:?} showed the password: {stderr}");
            }
            let named = ["ORCA_STORE_URL", "PGPASSWORD", "~/.pgpass", "[store] url"]
                .iter()
                .all(|w| stderr.contains(w));
            if out.status.code() == Some(2)
                && named
                && stderr.lines().count() == 1
                && stderr.contains("holds a password")
            {
                refused += 1;
            } else {
                accepted += 1;
                eprintln!("{args:?}: exit {:?}: {stderr}", out.status.code());
            }
        }
    }
    assert_eq!(tree(&root), before, "a refused command changed nothing");
    // The same URL through the environment, or a URL without a password on the command
    // line, is not refused for it: it is used (and fails only to connect), the password never
    // shown.
    let mut env_cmd = common::isolated(&root, &home);
    env_cmd
        .args(["plan", "list"])
        .env("ORCA_STORE_URL", &urls[0]);
    let out = assert_cmd::Command::from_std(env_cmd)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("connecting to the postgres store"), "{err}");
    assert!(!err.contains(PASSWORD), "{err}");
    let bare = format!("postgres://orca@127.0.0.1:{port}/orca");
    let out = common::orca(&root, &home, &["--store", &bare, "plan", "list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("connecting to the postgres store"), "{err}");
    println!(
        "store passwords on the command line: {tried} tried, {refused} refused; accepted: {accepted}, shown in an error: {shown}"
    );
    assert_eq!(accepted + shown, 0);
}
