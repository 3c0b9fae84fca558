//! Choosing the store (`--store URL`, `ORCA_STORE_URL`, `[store] url`; the file store by
//! default) and `orca store migrate | export | import` (ADR 0021).

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use clap::Subcommand;
use orca_agents::config::Config;
use orca_store::{
    AuditStore, Authority, ExecutionStore, FileStore, PlanStore, Revision, StoreError,
};
use orca_store_postgres::{PgStore, RawLog, is_postgres_url};
use serde::Serialize;
use serde_json::{Value, json};

use crate::cli::Global;
use crate::exit::{CliError, Exit};

/// `orca store …`.
#[derive(Debug, Subcommand)]
pub(crate) enum StoreCommand {
    /// Bring the shared store's schema to this orca's version (also done on every connect).
    Migrate,
    /// Copy the shared store into the file layout under DIR/.orca (documents at their
    /// revisions, audit logs line for line with their seals), so `orca audit verify --root
    /// DIR` checks it offline and it can be archived. DIR/.orca must not hold plans yet.
    Export {
        /// The directory to write (created if missing).
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
    },
    /// Copy a file store (DIR/.orca) into the shared store; what is already there is kept.
    Import {
        /// The project directory holding `.orca/`.
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
    },
}

/// Whether a store URL (or libpq `key=value` string) holds a password: `user:PASSWORD@` in
/// the URL, or a non-empty `password=` parameter.
pub(crate) fn holds_password(url: &str) -> bool {
    if let Some((_, rest)) = url.split_once("://") {
        let before_query = rest.split(['?', '#']).next().unwrap_or_default();
        if let Some((userinfo, _)) = before_query.rsplit_once('@')
            && let Some((_, password)) = userinfo.split_once(':')
            && !password.is_empty()
        {
            return true;
        }
    }
    let lower = url.to_ascii_lowercase();
    lower.match_indices("password").any(|(at, word)| {
        let boundary = lower[..at]
            .chars()
            .next_back()
            .is_none_or(|c| c == '?' || c == '&' || c.is_whitespace());
        let value = lower[at + word.len()..].trim_start();
        boundary
            && value
                .strip_prefix('=')
                .is_some_and(|v| !v.trim_start().is_empty() && !v.starts_with('&'))
    })
}

/// `--store` given on the command line with a password is refused: the command line of a
/// process is readable by every process of the user (`/proc/PID/cmdline`, `ps`), steps
/// included. The message names the ways that keep it off the command line, never the URL.
pub(crate) fn no_password_in_arguments(
    global: &Global,
    matches: &clap::ArgMatches,
) -> Result<(), CliError> {
    let on_command_line = {
        let mut level = Some(matches);
        let mut found = false;
        while let Some(m) = level {
            found |= m.value_source("store") == Some(clap::parser::ValueSource::CommandLine);
            level = m.subcommand().map(|(_, sub)| sub);
        }
        found
    };
    match &global.store {
        Some(url) if on_command_line && holds_password(url) => Err(CliError::bad_input(
            "--store: the URL holds a password, and a command line is readable by every process \
             of your user (ps, /proc), steps included; nothing was done. Pass --store without \
             the password, or none, and give the password through PGPASSWORD or ~/.pgpass \
             (PGPASSFILE), or the whole URL through the ORCA_STORE_URL environment variable or \
             `[store] url` in your user config (~/.config/orca/config.toml, mode 0600)",
        )),
        _ => Ok(()),
    }
}

/// The shared store's URL, if one is chosen: `--store` / `ORCA_STORE_URL`, else the config's
/// `[store] url`.
pub(crate) fn url(global: &Global, config: Option<&Config>) -> Result<Option<String>, CliError> {
    let url = global
        .store
        .clone()
        .filter(|u| !u.is_empty())
        .or_else(|| config.and_then(|c| c.store_url.clone()));
    match url {
        Some(u) if !is_postgres_url(&u) => Err(CliError::bad_input(format!(
            "--store {}: not a postgres:// url (the file store is the default: omit --store)",
            orca_store_postgres::redacted_url(&u)
        ))),
        other => Ok(other),
    }
}

/// The shared store, if one is chosen (not connected yet: the first use connects).
pub(crate) fn shared_store(
    global: &Global,
    config: Option<&Config>,
    authority: &Authority,
) -> Result<Option<PgStore>, CliError> {
    let Some(url) = url(global, config)? else {
        return Ok(None);
    };
    Ok(Some(PgStore::open(
        &url,
        authority.clone(),
        crate::redact::redactor(),
    )?))
}

fn print(global: &Global, text: &str, value: &Value) {
    if global.json {
        crate::app::out_json(value);
    } else if !global.quiet {
        crate::app::out(text);
    }
}

/// Runs `orca store …`.
pub(crate) async fn run(command: StoreCommand, global: &Global) -> Result<Exit, CliError> {
    let root = crate::app::find_root(global.root.as_deref(), false)?;
    let config = if root.join(".orca").join("config.toml").is_file() {
        crate::settings::Settings::load(&root)?.config
    } else {
        None
    };
    let Some(url) = url(global, config.as_ref())? else {
        return Err(CliError::bad_input(
            "no shared store: pass --store postgres://…, set ORCA_STORE_URL, or set [store] url \
             in .orca/config.toml",
        ));
    };
    let pg = PgStore::open(&url, Authority::permissive(), crate::redact::redactor())?;
    match command {
        StoreCommand::Migrate => {
            let report = pg.migrate().await?;
            print(
                global,
                &format!(
                    "store {}: schema at version {} (was {})",
                    pg.url(),
                    report.to,
                    report.from
                ),
                &json!({"store": pg.url(), "from": report.from, "to": report.to}),
            );
        }
        StoreCommand::Export { to } => {
            let counts = export(&pg, &to).await?;
            print(
                global,
                &format!(
                    "exported {} plans, {} executions, {} audit logs to {}",
                    counts.plans,
                    counts.executions,
                    counts.logs,
                    to.join(".orca").display()
                ),
                &serde_json::to_value(&counts).unwrap_or(Value::Null),
            );
        }
        StoreCommand::Import { from } => {
            let counts = import(&pg, &from).await?;
            print(
                global,
                &format!(
                    "imported {} plans, {} executions, {} audit logs from {} ({} already there, kept)",
                    counts.plans,
                    counts.executions,
                    counts.logs,
                    from.join(".orca").display(),
                    counts.skipped
                ),
                &serde_json::to_value(&counts).unwrap_or(Value::Null),
            );
        }
    }
    Ok(Exit::Ok)
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Counts {
    pub(crate) plans: usize,
    pub(crate) executions: usize,
    pub(crate) logs: usize,
    skipped: usize,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CliError + '_ {
    move |e| CliError::internal(format!("writing {}: {e}", path.display()))
}

/// Writes a new file, 0600, fsynced (its directory made 0700 if missing).
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_err(dir))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(path))?;
    f.write_all(bytes).map_err(io_err(path))?;
    f.sync_all().map_err(io_err(path))
}

/// A document as the file store writes it: `"revision"` first, then its fields.
fn document<T: Serialize>(value: &T, revision: Revision) -> Result<Vec<u8>, CliError> {
    let Value::Object(fields) = serde_json::to_value(value)
        .map_err(|e| CliError::internal(format!("encoding a document: {e}")))?
    else {
        return Err(CliError::internal("a document must be a JSON object"));
    };
    let mut map = serde_json::Map::with_capacity(fields.len() + 1);
    map.insert("revision".into(), revision.0.into());
    map.extend(fields);
    let mut bytes = serde_json::to_vec_pretty(&Value::Object(map))
        .map_err(|e| CliError::internal(format!("encoding a document: {e}")))?;
    bytes.push(b'\n');
    Ok(bytes)
}

pub(crate) async fn export(pg: &PgStore, to: &Path) -> Result<Counts, CliError> {
    if to
        .join(".orca")
        .join("plans")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some())
    {
        return Err(CliError::bad_input(format!(
            "--to {}: {} already holds plans; export into an empty directory",
            to.display(),
            to.join(".orca").display()
        )));
    }
    let files = FileStore::open(to)?;
    let mut counts = Counts::default();
    let plans = pg.list_plans().await?;
    if let Some(p) = plans.problems.first() {
        return Err(CliError::from(StoreError::Invalid(format!(
            "{}: {}",
            p.location, p.message
        ))));
    }
    for summary in &plans.items {
        let plan = pg.plan(summary.plan_id).await?;
        write_new(
            &files.plan_path(summary.plan_id),
            &document(&plan.value, plan.revision)?,
        )?;
        counts.plans += 1;
    }
    for summary in pg.list_executions(None).await?.items {
        let snap = pg.execution(summary.execution_id).await?;
        let (plan, id) = (summary.plan_id, summary.execution_id);
        write_new(
            &files.execution_path(plan, id),
            &document(&snap.execution.value, snap.execution.revision)?,
        )?;
        let tasks: Vec<_> = snap
            .tasks
            .iter()
            .map(|t| (t.value.clone(), t.revision))
            .collect();
        write_new(
            &files.tasks_path(plan, id),
            &FileStore::encode_task_snapshot(&tasks)?,
        )?;
        counts.executions += 1;
    }
    for log in pg.audit_logs().await? {
        let raw = pg.raw_log(log).await?;
        let mut text = raw.lines.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        write_new(&files.audit_path(log), text.as_bytes())?;
        if let Some(seal) = &raw.seal {
            let mut value = json!({"format_version": orca_core::FormatVersion});
            if let (Some(map), Ok(Value::Object(fields))) =
                (value.as_object_mut(), serde_json::to_value(seal))
            {
                map.extend(fields);
            }
            let mut bytes = serde_json::to_vec_pretty(&value)
                .map_err(|e| CliError::internal(format!("encoding a seal: {e}")))?;
            bytes.push(b'\n');
            write_new(&files.seal_path(log), &bytes)?;
        }
        counts.logs += 1;
    }
    Ok(counts)
}

fn read_text(path: &Path) -> Result<Option<String>, CliError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::bad_input(format!("{}: {e}", path.display()))),
    }
}

async fn import(pg: &PgStore, from: &Path) -> Result<Counts, CliError> {
    if !from.join(".orca").is_dir() {
        return Err(CliError::bad_input(format!(
            "--from {}: no .orca/ directory there",
            from.display()
        )));
    }
    let files = FileStore::open(from)?;
    let mut counts = Counts::default();
    let plans = files.list_plans().await?;
    if let Some(p) = plans.problems.first() {
        return Err(CliError::bad_input(format!(
            "{}: {} (nothing was imported)",
            p.location, p.message
        )));
    }
    let mut fresh = Vec::new();
    for summary in &plans.items {
        fresh.push(files.plan(summary.plan_id).await?);
    }
    let mut execs = Vec::new();
    for summary in files.list_executions(None).await?.items {
        execs.push(files.execution(summary.execution_id).await?);
    }
    let mut logs = Vec::new();
    for log in files.audit_logs().await? {
        // As the store reads it: an execution's entries made durable in its write-ahead log but
        // not yet copied to the audit file (a crash in between) are included (ADR 0030).
        let mut lines = Vec::new();
        for entry in files.entries(log).await? {
            lines.push(serde_json::to_string(&entry).map_err(|e| {
                CliError::bad_input(format!("{}: {e}", files.audit_path(log).display()))
            })?);
        }
        let seal_path = files.seal_path(log);
        let seal = match read_text(&seal_path)? {
            Some(text) => {
                let mut value: Value = serde_json::from_str(&text).map_err(|e| {
                    CliError::bad_input(format!("{}: not a seal: {e}", seal_path.display()))
                })?;
                if let Some(map) = value.as_object_mut() {
                    map.remove("format_version");
                }
                Some(serde_json::from_value(value).map_err(|e| {
                    CliError::bad_input(format!("{}: not a seal: {e}", seal_path.display()))
                })?)
            }
            None => None,
        };
        logs.push(RawLog { log, lines, seal });
    }
    // Everything was read: now write.
    for p in &fresh {
        if pg.import_plan(p).await? {
            counts.plans += 1;
        } else {
            counts.skipped += 1;
        }
    }
    for e in &execs {
        if pg.import_execution(e).await? {
            counts.executions += 1;
        } else {
            counts.skipped += 1;
        }
    }
    for l in &logs {
        if pg.import_log(l).await? {
            counts.logs += 1;
        } else {
            counts.skipped += 1;
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::holds_password;

    #[test]
    fn passwords_in_store_urls_are_found() {
        for with in [
            "postgres://u:secret@host/db",
            "postgresql://u:s%40cret@host:5432/db?sslmode=require",
            "postgres://u:p/w@host/db",
            "postgres://u@host/db?password=secret",
            "postgres://u@host/db?sslmode=require&password=secret",
            "host=db user=u password=secret",
            "host=db password = 'se cret'",
            "PASSWORD=secret host=db",
        ] {
            assert!(holds_password(with), "{with}");
        }
        for without in [
            "postgres://u@host/db",
            "postgres://host/db?sslmode=verify-full",
            "postgres://u:@host/db",
            "host=db user=u",
            "postgres://u@host/db?passwordless=1",
            "postgres://u@host/db?password=",
        ] {
            assert!(!holds_password(without), "{without}");
        }
    }
}
