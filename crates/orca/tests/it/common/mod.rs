//! What every end-to-end test binary shares: the `orca` command, isolated from the machine it
//! runs on. The user's config directory (where the signing key lives) is the test's own temp dir,
//! never the real home (`.ci/run` fails if anything writes there), and no model key, log filter
//! or sandbox override leaks in from the environment.

#![allow(dead_code, reason = "each test binary uses a part of this module")]

pub(crate) mod project;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// `orca --root ROOT` with the user's config in `config_home` and nothing inherited that would
/// change what orca does. Add the arguments, then run or spawn it.
pub(crate) fn isolated(root: &Path, config_home: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("orca"));
    cmd.arg("--root")
        .arg(root)
        .current_dir(root)
        .env("NO_COLOR", "1")
        .env("XDG_CONFIG_HOME", config_home)
        // What orca last wrote (the rollback checkpoint) is kept beside the test's config.
        .env("XDG_STATE_HOME", config_home.join("state"))
        .env_remove("ORCA_STATE_DIR")
        .env_remove("ORCA_SIGNING_KEY")
        .env_remove("ORCA_SANDBOX")
        .env_remove("ORCA_BACKEND")
        .env_remove("ORCA_MODEL")
        .env_remove("ORCA_BASE_URL")
        .env_remove("ORCA_LOG")
        .env_remove("ORCA_STORE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY");
    // No telemetry export unless a test asks for it.
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_SDK_DISABLED",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    ] {
        cmd.env_remove(var);
    }
    // libpq's variables fill in what a store URL leaves out: none from the developer's shell.
    for var in [
        "PGHOST",
        "PGHOSTADDR",
        "PGPORT",
        "PGUSER",
        "PGPASSWORD",
        "PGPASSFILE",
        "PGDATABASE",
        "PGSSLMODE",
        "PGSSLROOTCERT",
        "PGSSLCERT",
        "PGSSLKEY",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs `orca --root ROOT ARGS…` isolated, with no terminal and a generous time limit.
pub(crate) fn orca(root: &Path, config_home: &Path, args: &[&str]) -> Output {
    let mut cmd = isolated(root, config_home);
    cmd.args(args);
    assert_cmd::Command::from_std(cmd)
        .write_stdin(Vec::<u8>::new())
        .timeout(Duration::from_secs(120))
        .output()
        .expect("orca runs")
}

/// The exit code of `out` and the last JSON value on its stdout (a command may print progress
/// values before its result); panics naming `args` if there is none.
pub(crate) fn last_json(out: &Output, args: &[&str]) -> (i32, serde_json::Value) {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let value = serde_json::Deserializer::from_str(&text)
        .into_iter::<serde_json::Value>()
        .map_while(Result::ok)
        .last()
        .unwrap_or_else(|| {
            panic!(
                "no JSON from {args:?}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    (out.status.code().unwrap_or(-1), value)
}
