//! `cargo xtask ci`: the one definition of what CI runs. `.ci/run` only prepares the machine
//! (an empty cargo home, the system packages) and calls this, so the two cannot drift.
//!
//! Stages, in order: fmt, clippy, tidy, supply chain (`cargo deny`), the README's test command,
//! the README's main job (as a new user: a fresh demo directory and config home), and with `--full` (what `.ci/run` passes) the quick bench, a short kill -9 campaign and a
//! short fuzzing run. The time of each stage is printed at the end, also when one fails.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The README's test command, word for word. `readme_test_command_is_what_ci_runs` checks the
/// README still says it.
pub(crate) const README_TEST_COMMAND: &[&str] = &["test", "--workspace", "--locked"];

/// The README's first command, word for word after `cargo`: orca's main job on a fresh machine
/// (no API key, no network). `readme_commands_are_what_ci_runs` checks the README still says it.
pub(crate) const README_MAIN_COMMAND: &[&str] = &[
    "run",
    "-p",
    "orca",
    "--",
    "--root",
    "target/orca-demo",
    "run",
    "examples/parallel-dag.json",
    "--yes",
];

/// The cargo-deny release CI installs when the machine has none (a fresh cargo home never
/// has one). Pinned so a new release cannot break CI by surprise.
const CARGO_DENY_VERSION: &str = "0.20.2";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// fmt, clippy, tidy, deny, tests.
    Checks,
    /// Also the quick bench, a short torture campaign and a short fuzz run.
    Full,
}

struct Stage {
    name: &'static str,
    run: fn(&Path) -> Result<String, String>,
    scope: Scope,
}

const STAGES: &[Stage] = &[
    Stage {
        name: "fmt",
        run: |_| cargo(&["fmt", "--all", "--", "--check"]),
        scope: Scope::Checks,
    },
    Stage {
        name: "clippy",
        run: |_| {
            cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--locked",
                "--",
                "-D",
                "warnings",
            ])
        },
        scope: Scope::Checks,
    },
    Stage {
        name: "tidy",
        run: |root| {
            crate::tidy::run(root)
                .map(|()| String::new())
                .map_err(|p| p.join("\n"))
        },
        scope: Scope::Checks,
    },
    Stage {
        name: "deny",
        run: deny,
        scope: Scope::Checks,
    },
    Stage {
        name: "test (README)",
        run: |_| cargo(README_TEST_COMMAND),
        scope: Scope::Checks,
    },
    Stage {
        name: "main job (README)",
        run: main_job,
        scope: Scope::Checks,
    },
    Stage {
        name: "bench --quick",
        run: |root| crate::bench::run(root, &["--quick".to_owned()]).map(|()| String::new()),
        scope: Scope::Full,
    },
    Stage {
        name: "torture --kills 5",
        run: |root| {
            crate::torture::run(root, &["--kills".to_owned(), "5".to_owned()])
                .map(|()| String::new())
        },
        scope: Scope::Full,
    },
    Stage {
        name: "fuzz --cases 200",
        run: |_| {
            crate::fuzz::run(&["--cases".to_owned(), "200".to_owned()]).map(|()| String::new())
        },
        scope: Scope::Full,
    },
];

/// `cargo xtask ci [--full]`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let scope = match args {
        [] => Scope::Checks,
        [flag] if flag == "--full" => Scope::Full,
        _ => return Err(format!("usage: cargo xtask ci [--full] (got {args:?})")),
    };
    let started = Instant::now();
    let mut times: Vec<(&str, Duration, String)> = Vec::new();
    let mut failure = None;
    for stage in STAGES {
        if stage.scope == Scope::Full && scope == Scope::Checks {
            continue;
        }
        say(&format!("── ci: {} ──", stage.name));
        let t = Instant::now();
        let result = (stage.run)(root);
        let note = match &result {
            Ok(note) => note.clone(),
            Err(_) => "FAILED".to_owned(),
        };
        times.push((stage.name, t.elapsed(), note));
        if let Err(e) = result {
            failure = Some(format!("ci stage `{}` failed: {e}", stage.name));
            break;
        }
    }
    say(&timing_table(&times, started.elapsed()));
    failure.map_or(Ok(()), Err)
}

fn timing_table(times: &[(&str, Duration, String)], total: Duration) -> String {
    let mut out = String::from("ci stage times:\n");
    for (name, took, note) in times {
        let note = if note.is_empty() {
            String::new()
        } else {
            format!("  ({note})")
        };
        out.push_str(&format!(
            "  {name:<20} {:>7.1} s{note}\n",
            took.as_secs_f64()
        ));
    }
    out.push_str(&format!("  {:<20} {:>7.1} s", "total", total.as_secs_f64()));
    out
}

fn say(text: &str) {
    #[expect(clippy::print_stderr, reason = "xtask reports to the terminal")]
    {
        eprintln!("{text}");
    }
}

fn cargo(args: &[&str]) -> Result<String, String> {
    crate::cargo(args).map(|()| String::new())
}

/// The README's first command as a new user runs it: a fresh demo directory and a user config
/// directory of its own (the signing key is created there on the first approval).
fn main_job(root: &Path) -> Result<String, String> {
    let demo = root.join("target/orca-demo");
    if demo.exists() {
        std::fs::remove_dir_all(&demo)
            .map_err(|e| format!("cannot remove {}: {e}", demo.display()))?;
    }
    let config_home = root.join("target/ci-user-config");
    if config_home.exists() {
        std::fs::remove_dir_all(&config_home)
            .map_err(|e| format!("cannot remove {}: {e}", config_home.display()))?;
    }
    let config_home_text = config_home.display().to_string();
    // orca's state (the checkpoint of what it wrote) beside that config, as a new user's would
    // be new: nothing of earlier runs on this machine.
    let state_home = config_home.join("state").display().to_string();
    crate::cargo_env(
        README_MAIN_COMMAND,
        &[
            ("XDG_CONFIG_HOME", config_home_text.as_str()),
            ("XDG_STATE_HOME", state_home.as_str()),
            ("ORCA_STATE_DIR", ""),
            ("ORCA_SIGNING_KEY", ""),
            ("ANTHROPIC_API_KEY", ""),
            ("OPENAI_API_KEY", ""),
        ],
    )
    .map(|()| String::new())
}

/// `cargo deny check bans licenses sources`, installing cargo-deny first when it is missing.
///
/// Advisories are not checked: the advisory database is a git repository these machines
/// cannot fetch (only package registries are reachable); `deny.toml` says so too.
fn deny(root: &Path) -> Result<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let present = Command::new(&cargo)
        .args(["deny", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    let mut note = String::new();
    if !present {
        let t = Instant::now();
        // A debug build: half the CPU time of a release build (measured: 1 min 33 s against
        // 2 min 59 s), and the check itself still takes seconds.
        crate::cargo(&[
            "install",
            "--debug",
            "--locked",
            "--quiet",
            "cargo-deny",
            "--version",
            CARGO_DENY_VERSION,
        ])?;
        note = format!(
            "installed cargo-deny {CARGO_DENY_VERSION} in {:.0} s",
            t.elapsed().as_secs_f64()
        );
    }
    let status = Command::new(&cargo)
        .args([
            "deny",
            "--log-level",
            "error",
            "check",
            "bans",
            "licenses",
            "sources",
        ])
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run cargo deny: {e}"))?;
    if status.success() {
        Ok(note)
    } else {
        Err(format!(
            "`cargo deny check bans licenses sources` failed ({status})"
        ))
    }
}

#[cfg(test)]
mod tests {
    /// The README's second command is the test stage of `cargo xtask ci`, so the README and CI
    /// cannot disagree about how the tests are run.
    #[test]
    fn readme_commands_are_what_ci_runs() {
        let root = crate::workspace_root();
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        for words in [super::README_MAIN_COMMAND, super::README_TEST_COMMAND] {
            let command = format!("cargo {}", words.join(" "));
            assert!(
                readme.lines().any(|l| l.trim() == command),
                "README.md has no line `{command}`"
            );
        }
        let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
        assert!(
            ci.lines()
                .any(|l| l.trim_start().starts_with("cargo xtask ci --full")),
            ".ci/run does not call `cargo xtask ci --full`"
        );
    }
}
