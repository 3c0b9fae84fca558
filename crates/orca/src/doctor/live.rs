//! `orca doctor`'s live checks, beside the key and environment report of `doctor::report`:
//! each model endpoint reachable, each command-line agent's program found (with its version),
//! the store writable, the sandbox in effect (probed now) and whether steps get a PID namespace,
//! where the configured key and env files are (hidden from steps, or refused), the versions of
//! orca and git.
//!
//! Nothing here sends a key: an endpoint is asked for its model list without credentials, so
//! any HTTP answer (a 401 included) proves it is reachable, and no secret leaves the machine.
//! Every probe is bounded in time, and nothing is left behind in `.orca/`.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use orca_agents::BackendSpec;
use orca_core::AgentPort as _;
use serde_json::{Value, json};

use crate::app::App;

/// How long one probe may take.
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    Ok,
    /// Works, with less than it could (said, with what to do; the exit code stays 0).
    Warning,
    /// Something a run needs is missing or broken (`orca doctor` exits 7).
    Problem,
}

impl Level {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warning => "warning",
            Self::Problem => "problem",
        }
    }
}

/// One check: what was looked at, how it came out, what was seen, and what to do next.
pub(super) fn judged(what: String, level: Level, detail: String, next: Option<String>) -> Value {
    let mut value = json!({
        "check": what,
        "ok": level != Level::Problem,
        "level": level.as_str(),
        "detail": detail,
    });
    if let Some(next) = next.filter(|_| level != Level::Ok) {
        value["next"] = Value::String(next);
    }
    value
}

/// One check that is fine or a problem, with the next step for the problem.
fn check_or(what: String, ok: bool, detail: String, next: &str) -> Value {
    let level = if ok { Level::Ok } else { Level::Problem };
    judged(what, level, detail, Some(next.to_owned()))
}

/// One check that is fine or a problem, the detail saying what to do.
fn check(what: String, ok: bool, detail: String) -> Value {
    let level = if ok { Level::Ok } else { Level::Problem };
    judged(what, level, detail, None)
}

/// How many checks found a problem.
pub(crate) fn problems(checks: &[Value]) -> usize {
    checks.iter().filter(|c| c["level"] == "problem").count()
}

/// Runs every check; each one's result, in a stable order.
pub(crate) async fn run(app: &App) -> Vec<Value> {
    let mut out = Vec::new();
    out.push(check(
        "orca version".to_owned(),
        true,
        env!("CARGO_PKG_VERSION").to_owned(),
    ));
    let mut git = version_of("git", &["--version"], "git (worktree isolation)").await;
    if git["level"] == "problem" {
        git["next"] =
            "install git: worktree isolation needs it (steps run in place without)".into();
    }
    out.push(git);
    out.extend(endpoints(app).await);
    out.extend(programs(app).await);
    out.push(store_writable(app.root()));
    out.push(super::telemetry::check(app.telemetry_table.as_ref()).await);
    if let Some(pg) = &app.shared {
        let mut shared = shared_store(pg).await;
        if shared["level"] == "problem" && shared.get("next").is_none() {
            shared["next"] = "check that the server runs and accepts the store URL (ORCA_STORE_URL or `[store] url`), and `orca --store URL doctor` again".into();
        }
        out.push(shared);
    }
    for (what, ok, detail) in app.sandbox.doctor() {
        out.push(sandbox_check(what, ok, detail));
    }
    for key in app.sandbox.key_files() {
        out.push(check_or(
            format!("secret file {}", key.path.display()),
            !key.in_project,
            key.describe(),
            "move it outside the project and point the setting at its new place",
        ));
    }
    out
}

/// The sandbox's checks: a sandbox weaker than asked for is a problem; steps without a PID
/// namespace of their own, a warning (they still run, in process groups).
fn sandbox_check(what: String, ok: bool, detail: String) -> Value {
    if what == "step processes" {
        return judged(
            what,
            if ok { Level::Ok } else { Level::Warning },
            detail,
            Some("allow unprivileged PID namespaces (user.max_pid_namespaces > 0, no seccomp or container policy refusing CLONE_NEWPID)".to_owned()),
        );
    }
    check_or(
        what,
        ok,
        detail,
        "allow unprivileged user namespaces and Landlock in the kernel (sysctl kernel.unprivileged_userns_clone=1, an LSM list with landlock), or choose `sandbox = \"tools\"` in .orca/config.toml to accept the tool checks alone",
    )
}

/// Each distinct model endpoint of the configured agents, asked for its model list through
/// the agent's roots and proxy; where its roots come from, which proxy it goes through, and
/// each model agent's context window and its source (ADR 0025).
async fn endpoints(app: &App) -> Vec<Value> {
    let mut urls = std::collections::BTreeMap::new();
    // Agents sharing a model and what is known of its window are reported on one line.
    let mut windows: std::collections::BTreeMap<(String, String, bool), Vec<String>> =
        std::collections::BTreeMap::new();
    let mut out = Vec::new();
    for info in app.agents.agents() {
        let Some(net) = app.agents.net(&info.id) else {
            continue;
        };
        let (url, base) = match app.agents.profile(&info.id).map(|p| &p.backend) {
            Some(BackendSpec::OpenAi { base_url, .. }) => (
                format!("{}/models", base_url.trim_end_matches('/')),
                base_url.clone(),
            ),
            Some(BackendSpec::Anthropic { base_url, .. }) => (
                format!("{}/v1/models", base_url.trim_end_matches('/')),
                base_url.clone(),
            ),
            _ => continue,
        };
        let window = match app.agents.context_window(&info.id).await {
            Some(w) => (w.to_string(), true),
            None if orca_llm::window_probe::is_cloud(&base)
                || matches!(
                    app.agents.profile(&info.id).map(|p| &p.backend),
                    Some(BackendSpec::Anthropic { .. })
                ) =>
            {
                (
                    "not configured (a cloud API is not asked); requests are not fitted".to_owned(),
                    false,
                )
            }
            None => (
                "unknown (not configured, and the server did not say); requests are not fitted"
                    .to_owned(),
                false,
            ),
        };
        let model = info.model.clone().unwrap_or_default();
        windows
            .entry((format!("{model} at {base}"), window.0, window.1))
            .or_default()
            .push(info.id.to_string());
        urls.entry(url).or_insert_with(|| net.clone());
    }
    for ((what, detail, known), agents) in windows {
        let next = "set `context_window = N` (the model's context in tokens, as the server runs it) under `[defaults.generation]` or `[agents.NAME.generation]` in .orca/config.toml, so that long requests are fitted".to_owned();
        out.push(judged(
            format!("context window of {what} ({})", agents.join(", ")),
            if known { Level::Ok } else { Level::Warning },
            detail,
            Some(next),
        ));
    }
    for (url, net) in urls {
        let (ok, detail) = match orca_llm::probe_endpoint(&net, &url, PROBE_TIMEOUT).await {
            Ok(status) => (true, format!("reachable (HTTP {status})")),
            Err(why) => (false, format!("unreachable: {why}")),
        };
        out.push(check_or(
            format!("endpoint {url}"),
            ok,
            detail,
            "start the model server there, or point the agents' `base_url` in .orca/config.toml at one that runs (plans of `shell` steps need no model)",
        ));
        let (ok, ca) = match net.ca_source() {
            Ok(source) => (true, source),
            Err(e) => (false, e.to_string()),
        };
        out.push(check_or(
            format!("tls roots for {url}"),
            ok,
            ca,
            "fix or remove the CA file named (`ca_file` of the agent, or `[tls] ca_file`)",
        ));
        let proxy = net.proxies().for_url(&url).map_or_else(
            || format!("direct; proxies: {}", net.proxies().describe()),
            |p| format!("through {} ({})", p.masked(), p.var()),
        );
        out.push(check(format!("proxy for {url}"), true, proxy));
    }
    out
}

/// Each command-line agent's program: found, and the version it reports.
async fn programs(app: &App) -> Vec<Value> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for info in app.agents.agents() {
        if let Some(BackendSpec::Cli(spec)) = app.agents.profile(&info.id).map(|p| &p.backend)
            && seen.insert(spec.program.clone())
        {
            let what = format!("{} ({})", spec.program, spec.kind.as_str());
            let mut found = version_of(&spec.program, &["--version"], &what).await;
            if found["level"] == "problem" {
                found["next"] = Value::String(format!(
                    "install `{}` (on the PATH), or remove agent `{}` from .orca/config.toml",
                    spec.program, info.id
                ));
            }
            out.push(found);
        }
    }
    out
}

/// Runs `program args` (bounded, killed on timeout) and reports its first output line.
async fn version_of(program: &str, args: &[&str], what: &str) -> Value {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    // Like every child of orca: its own group, with the watchdog, ended once it has answered.
    orca_os::process_group::own_group(&mut cmd);
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return check(what.to_owned(), false, format!("not found: {e}")),
    };
    let group = child.id();
    let answer = tokio::time::timeout(PROBE_TIMEOUT, child.wait_with_output()).await;
    if let Some(pgid) = group {
        orca_os::process_group::kill_group(pgid);
    }
    match answer {
        Ok(Ok(output)) if output.status.success() => {
            let text = String::from_utf8_lossy(&output.stdout);
            let line = text.lines().next().unwrap_or("").trim().to_owned();
            check(what.to_owned(), true, line)
        }
        Ok(Ok(output)) => check(
            what.to_owned(),
            false,
            format!("exited with {}", output.status),
        ),
        Ok(Err(e)) => check(what.to_owned(), false, format!("not found: {e}")),
        Err(_) => check(
            what.to_owned(),
            false,
            format!("no answer within {PROBE_TIMEOUT:?}"),
        ),
    }
}

/// Whether orca can write its records: a temp file created in `.orca/` and removed at once.
fn store_writable(root: &Path) -> Value {
    let dir = root.join(".orca");
    let probe = dir.join(format!(".doctor-{}.tmp", std::process::id()));
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe);
    let (ok, detail) = match created {
        Ok(file) => {
            drop(file);
            match std::fs::remove_file(&probe) {
                Ok(()) => (true, format!("{} is writable", dir.display())),
                Err(e) => (false, format!("{}: {e}", probe.display())),
            }
        }
        Err(e) => (false, format!("{} is not writable: {e}", dir.display())),
    };
    check_or(
        "store".to_owned(),
        ok,
        detail,
        "orca must write .orca/: check its owner and permissions (0700, yours)",
    )
}

/// The shared store: reachable, migrated, and how the connection is protected (ADR 0027).
/// The URL is shown without its password.
async fn shared_store(pg: &orca_store_postgres::PgStore) -> Value {
    let what = format!("shared store {}", pg.url());
    let mode = pg.tls().mode.as_str();
    match tokio::time::timeout(Duration::from_secs(15), pg.probe()).await {
        Ok(Ok(p)) => {
            let (ok, security) = match (&p.tls, p.unix_socket, p.loopback) {
                (Some(tls), _, _) => (true, format!("TLS {tls} (sslmode={mode})")),
                (None, true, _) => (true, "unix socket (no TLS there)".to_owned()),
                (None, false, true) => (true, format!("in clear on this host (sslmode={mode})")),
                // Documents, audit lines and the login cross the network readable.
                (None, false, false) => (
                    false,
                    format!(
                        "IN CLEAR over the network (sslmode={mode}): enable ssl on the server \
                         and use sslmode=verify-full&sslrootcert=PATH"
                    ),
                ),
            };
            check(
                what,
                ok,
                format!(
                    "postgres {}, schema version {}, {security}",
                    p.server_version, p.schema_version
                ),
            )
        }
        Ok(Err(e)) => check(what, false, crate::exit::chain(&e)),
        Err(_) => check(what, false, "no answer within 15 s".to_owned()),
    }
}

/// The checks as text lines (`ok` / `warning` / `PROBLEM`, each but `ok` with its next step),
/// for the terminal report, and a closing line that counts the problems.
pub(crate) fn text(checks: &[Value]) -> String {
    let mut out = String::new();
    for c in checks {
        let label = match c["level"].as_str() {
            Some("ok") => "ok",
            Some("warning") => "warning",
            _ => "PROBLEM",
        };
        out.push_str(&format!(
            "{label:<8} {}: {}\n",
            c["check"].as_str().unwrap_or(""),
            c["detail"].as_str().unwrap_or("")
        ));
        if let Some(next) = c["next"].as_str() {
            out.push_str(&format!("{:<8}   next: {next}\n", ""));
        }
    }
    match problems(checks) {
        0 => out.push_str("\nno problem found\n"),
        1 => out.push_str("\n1 problem found (exit 7)\n"),
        n => out.push_str(&format!("\n{n} problems found (exit 7)\n")),
    }
    out
}
