//! Project automation. `cargo xtask ci` means: if this passes, CI is green.

mod bench;
mod ci;
mod fuzz;
mod tidy;
mod torture;
mod util;

use std::process::{Command, ExitCode};

const USAGE: &str = "usage: cargo xtask <command>

commands:
  ci      [--full] fmt check, clippy (warnings denied), tidy, cargo deny (bans, licenses,
          sources), the README's test command; --full (what .ci/run runs) adds the quick
          bench, a short torture campaign and a short fuzz run. Prints each stage's time.
  tidy    the project's own conventions (layering, lints, docs)
  bench   [pg] [--quick] [--dev|--release] [--reps N]
          every benchmark (pg: only the PostgreSQL ones), one table; writes target/bench/report.json
          (--quick: small sizes, dev build, nothing judged)
  torture [--kills N] [--dev|--release] [--seed S]
          kill -9 campaign on the orca binary (default 5 kills, dev build;
          full: --kills 100, release build), concurrent resume, full disk
  fuzz    [--cases N]
          proptest fuzzing of plan documents, stored files, audit lines, config, LLM replies
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci::run(&workspace_root(), &args[1..]),
        Some("tidy") => tidy::run(&workspace_root()).map_err(|problems| problems.join("\n")),
        Some("bench") => bench::run(&workspace_root(), &args[1..]),
        Some("torture") => torture::run(&workspace_root(), &args[1..]),
        Some("fuzz") => fuzz::run(&args[1..]),
        _ => Err(USAGE.to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            #[expect(clippy::print_stderr, reason = "xtask reports to the terminal")]
            {
                eprintln!("{message}");
            }
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(
            || std::path::PathBuf::from("."),
            std::path::Path::to_path_buf,
        )
}

fn cargo(args: &[&str]) -> Result<(), String> {
    cargo_env(args, &[])
}

fn cargo_env(args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(&cargo)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(workspace_root())
        .status()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}
