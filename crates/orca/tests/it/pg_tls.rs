//! The shared store over TLS from the command line (ADR 0027), against a throwaway server that
//! refuses TCP in clear: with `[store] url = "postgres://…?sslmode=verify-full&sslrootcert=…"`
//! a plan runs, `orca doctor` says the connection is TLS, and a password planted in the URL
//! appears in no output of any command (`config show`, `doctor`, errors included); a wrong CA
//! or a missing file fails naming the setting and the file. The server's log counts the TCP
//! connections let in in clear: 0.

use crate::common;

use common::orca;
use orca_testkit::postgres::Throwaway;
use serde_json::{Value, json};

const PASSWORD: &str = "planted-pw-91c4";

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

/// `orca ARGS…` on the store at `url`, given through `ORCA_STORE_URL`: a URL with a password
/// is refused on the command line.
fn with_store(
    root: &std::path::Path,
    cfg: &std::path::Path,
    url: &str,
    args: &[&str],
) -> std::process::Output {
    let mut cmd = common::isolated(root, cfg);
    cmd.args(args).env("ORCA_STORE_URL", url);
    assert_cmd::Command::from_std(cmd)
        .write_stdin(Vec::<u8>::new())
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .expect("orca runs")
}

#[test]
fn a_run_over_verify_full_tls_shows_no_password_and_nothing_goes_in_clear() {
    let server = Throwaway::shared_tls().unwrap_or_else(|e| panic!("{e}"));
    let plain = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(server.create_database())
        .unwrap();
    let db = plain.rsplit('/').next().unwrap();
    let files = server.tls_files().unwrap();
    let url = |ca: &str| {
        format!(
            "postgres://postgres:{PASSWORD}@localhost:{}/{db}?sslmode=verify-full&sslrootcert={ca}",
            server.port()
        )
    };
    let good = url(&files.ca.display().to_string());
    let project = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let (root, cfg) = (project.path(), config.path());
    assert_eq!(orca(root, cfg, &["init"]).status.code(), Some(0));
    let toml = root.join(".orca/config.toml");
    let mut text = std::fs::read_to_string(&toml).unwrap();
    text.push_str(&format!("\n[store]\nurl = \"{good}\"\n"));
    std::fs::write(&toml, text).unwrap();
    std::fs::write(root.join("p.json"), plan_doc()).unwrap();

    let mut outputs = Vec::new();
    let mut ok = |args: &[&str]| {
        let out = orca(root, cfg, args);
        outputs.push(out.clone());
        // doctor exits 7 here: no model server runs at the default endpoint.
        let want = if args.contains(&"doctor") { 7 } else { 0 };
        assert_eq!(out.status.code(), Some(want), "{args:?}: {out:?}");
        out
    };
    for args in [&["config", "show"][..], &["--json", "config", "show"]] {
        let out = ok(args);
        let shown = String::from_utf8_lossy(&out.stdout);
        // Shown, without the password (`***` here, `[redacted]` by the output's own filter).
        assert!(shown.contains("store.url"), "{shown}");
        assert!(shown.contains("postgres://postgres:"), "{shown}");
    }
    ok(&["store", "migrate"]);
    let out = ok(&["--json", "plan", "create", "--file", "p.json"]);
    let plan = serde_json::from_slice::<Value>(&out.stdout).unwrap()["plan_id"]
        .as_str()
        .unwrap()
        .to_owned();
    ok(&["plan", "approve", &plan]);
    let out = ok(&["--json", "run", &plan]);
    let exec = serde_json::from_slice::<Value>(&out.stdout).unwrap()["execution_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = ok(&["--json", "exec", "show", &exec]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("completed"));
    let out = ok(&["doctor"]);
    let doctor = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "doctor: {}",
        doctor
            .lines()
            .find(|l| l.contains("shared store"))
            .unwrap_or("")
    );
    assert!(doctor.contains("TLS TLSv1.3"), "{doctor}");
    assert!(doctor.contains("sslmode=verify-full"), "{doctor}");
    ok(&["--json", "doctor"]);
    // A server without TLS on this host: doctor says the connection is in clear.
    let plain = Throwaway::shared().unwrap_or_else(|e| panic!("{e}"));
    let plain_url = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(plain.create_database())
        .unwrap();
    let out = ok(&["--store", &plain_url, "doctor"]);
    let doctor = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        doctor.contains("in clear on this host (sslmode=prefer)"),
        "{doctor}"
    );

    // The wrong CA, and a file that is not there: refused, saying which setting and file.
    let other = files.other_ca.display().to_string();
    for (ca, says) in [
        (other.as_str(), "not signed by a CA in sslrootcert"),
        (
            "/nonexistent/orca-ca.crt",
            "sslrootcert=/nonexistent/orca-ca.crt",
        ),
    ] {
        let out = with_store(root, cfg, &url(ca), &["store", "migrate"]);
        outputs.push(out.clone());
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("store migrate with sslrootcert={ca}: {}", err.trim());
        assert_ne!(out.status.code(), Some(0));
        assert!(err.contains(says), "{err}");
        assert!(err.contains(ca), "{err}");
    }
    // The password in the query this time.
    let in_query = format!(
        "postgres://postgres@localhost:{}/{db}?password={PASSWORD}&sslmode=verify-full&sslrootcert={other}",
        server.port()
    );
    let out = with_store(root, cfg, &in_query, &["store", "migrate"]);
    outputs.push(out.clone());
    assert_ne!(out.status.code(), Some(0));
    let out = with_store(
        root,
        cfg,
        &good.replace("verify-full", "disable"),
        &["plan", "list"],
    );
    outputs.push(out.clone());
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no encryption"),
        "{out:?}"
    );

    let leaks = outputs
        .iter()
        .map(|o| {
            let all = [o.stdout.as_slice(), o.stderr.as_slice()].concat();
            String::from_utf8_lossy(&all).matches(PASSWORD).count()
        })
        .sum::<usize>();
    let logged = server.connections_logged();
    eprintln!(
        "{} commands: the password printed {leaks} times; server log: {} tcp connections over \
         TLS, {} in clear, {} refused",
        outputs.len(),
        logged.tls,
        logged.clear,
        logged.refused
    );
    assert_eq!(leaks, 0);
    assert_eq!(logged.clear, 0);
    assert!(logged.tls > 0 && logged.refused > 0);
}
