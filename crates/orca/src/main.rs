//! The `orca` binary: wires concrete types (the file store, the configured agents) and talks
//! to the person. Logic lives in the library crates.
#![forbid(unsafe_code)]

mod app;
mod budget_view;
mod checkpoint;
mod cli;
mod cmd;
mod doctor;
mod driver_signals;
mod exit;
mod ids;
mod isolation;
mod man_page;
mod model_meter;
mod plan_doc;
mod redact;
mod render;
mod sandbox;
mod settings;
mod telemetry;
mod term;
mod trust;

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _};

use crate::cli::{Cli, LogFormat};
use crate::exit::{CliError, Exit};

fn init_logs(global: &cli::Global) {
    use tracing_subscriber::EnvFilter;
    let default = match (global.quiet, global.verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, _) => "debug",
    };
    let filter = EnvFilter::try_from_env("ORCA_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    // Every log line is redacted before it reaches stderr, in every format.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(redact::RedactingStderr);
    let _ = match global.log_format {
        LogFormat::Json => builder.json().try_init(),
        // The same rule as every other coloured line: a terminal, and no `--no-color`/`NO_COLOR`.
        LogFormat::Human => builder
            .with_ansi(term::Style::detect(global.no_color).color)
            .try_init(),
    };
}

/// An error message on one line: a multi-line message (a TOML parse error, say) is joined.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(": ")
}

fn main() -> ExitCode {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (cli, m)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let code = if e.use_stderr() {
                Exit::BadInput
            } else {
                Exit::Ok
            };
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    // A password on the command line is readable by every process of the user (and `ps`):
    // refused before anything is done.
    if let Err(e) = cmd::store::no_password_in_arguments(&cli.global, &matches) {
        term::say(&format!("error: {}", one_line(&e.message)));
        return ExitCode::from(e.exit as u8);
    }
    term::configure(term::Output {
        no_color: cli.global.no_color,
        json_logs: cli.global.log_format == LogFormat::Json,
    });
    init_logs(&cli.global);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            term::say(&format!("error: cannot start the runtime: {e}"));
            return ExitCode::from(Exit::Internal as u8);
        }
    };
    let global = cli.global;
    let result: Result<Exit, CliError> = runtime.block_on(app::run(cli.command, &global));
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            term::say(&format!("error: {}", one_line(&e.message)));
            e.exit
        }
    };
    // Do not wait for blocking prompt threads.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    ExitCode::from(code as u8)
}
