//! The README's "A shared store and many workers" commands, run as written in an empty
//! directory holding `examples/` (a host that has just cloned the project), against a throwaway
//! PostgreSQL: `ORCA_STORE_URL` is that server's database; everything else is the README's.
//! The two workers run in the background as `&` says, and the detached run must complete.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use orca_testkit::postgres::Throwaway;

/// The README's block of commands under `## A shared store and many workers`.
fn readme_block() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap_or_else(|e| panic!("README.md: {e}"));
    let section = readme
        .split("## A shared store and many workers")
        .nth(1)
        .unwrap_or_else(|| panic!("the README has no multi-host section"));
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap_or_else(|| panic!("the multi-host section has no sh block"));
    block
        .lines()
        .map(|l| l.split(" # ").next().unwrap_or("").trim().to_owned())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

fn command(bin: &Path, root: &Path, config: &Path, url: &str, line: &str) -> Command {
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"orca"), "not an orca command: {line}");
    let mut cmd = Command::new(bin);
    cmd.args(&words[1..])
        .current_dir(root)
        .env("XDG_CONFIG_HOME", config)
        .env("XDG_STATE_HOME", config.join("state"))
        .env("ORCA_STORE_URL", url)
        .env("NO_COLOR", "1")
        .env_remove("ORCA_SIGNING_KEY")
        .env_remove("ORCA_SANDBOX")
        .stdin(Stdio::null());
    for var in [
        "PGHOST",
        "PGPORT",
        "PGUSER",
        "PGPASSWORD",
        "PGDATABASE",
        "OPENAI_API_KEY",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

#[test]
fn readme_multi_host_commands_run_as_written() {
    let server = Throwaway::shared().unwrap_or_else(|e| panic!("{e}"));
    let url = tokio::runtime::Runtime::new()
        .unwrap_or_else(|e| panic!("{e}"))
        .block_on(server.create_database())
        .unwrap_or_else(|e| panic!("{e}"));
    let bin = assert_cmd::cargo::cargo_bin("orca");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let config = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = dir.path();
    crate::readme::copy_examples(&root.join("examples"));
    let mut workers: Vec<Child> = Vec::new();
    let mut report = Vec::new();
    for line in readme_block() {
        if line.starts_with("export ORCA_STORE_URL=") {
            continue; // the throwaway server's URL stands in for the README's
        }
        if line.contains('&') {
            for part in line.split('&').map(str::trim).filter(|p| !p.is_empty()) {
                let mut cmd = command(&bin, root, config.path(), &url, part);
                cmd.stdout(Stdio::null()).stderr(Stdio::null());
                workers.push(cmd.spawn().unwrap_or_else(|e| panic!("{part}: {e}")));
            }
            continue;
        }
        let out = command(&bin, root, config.path(), &url, &line)
            .output()
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        report.push((line.clone(), out.status.code(), text));
    }
    let failed: Vec<String> = report
        .iter()
        .filter(|(line, code, text)| {
            // doctor exits 7 here for the model endpoint nobody runs; its store check must pass.
            if line.starts_with("orca doctor") {
                !text
                    .lines()
                    .any(|l| l.starts_with("ok") && l.contains("shared store"))
            } else {
                *code != Some(0)
            }
        })
        .map(|(line, code, text)| format!("{line}: exit {code:?}\n{text}"))
        .collect();
    // The detached run is driven by the workers to its end.
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut completed = false;
    while failed.is_empty() && Instant::now() < deadline {
        let out = command(&bin, root, config.path(), &url, "orca --json exec list")
            .output()
            .unwrap_or_else(|e| panic!("exec list: {e}"));
        let listed: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        if listed[0]["stage"] == "completed" {
            completed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    for mut w in workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    println!(
        "README multi-host commands: {} run, {} failed; the detached run completed: {completed}",
        report.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(completed, "the workers did not complete the detached run");
}
