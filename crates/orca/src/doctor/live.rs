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
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// One check: what was looked at, whether it is fine, and what was seen.
fn check(what: String, ok: bool, detail: String) -> Value {
    json!({ "check": what, "ok": ok, "detail": detail })
}

/// Runs every check; each one's result, in a stable order.
pub(crate) async fn run(app: &App) -> Vec<Value> {
    let mut out = Vec::new();
    out.push(check(
        "orca version".to_owned(),
        true,
        env!("CARGO_PKG_VERSION").to_owned(),
    ));
    out.push(version_of("git", &["--version"], "git (worktree isolation)").await);
    out.extend(endpoints(app).await);
    out.extend(programs(app).await);
    out.push(store_writable(app.root()));
    if let Some(pg) = &app.shared {
        out.push(shared_store(pg).await);
    }
    for (what, ok, detail) in app.sandbox.doctor() {
        out.push(check(what, ok, detail));
    }
    for key in app.sandbox.key_files() {
        out.push(check(
            format!("secret file {}", key.path.display()),
            !key.in_project,
            key.describe(),
        ));
    }
    out
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
            Some(w) => w.to_string(),
            None if orca_llm::window_probe::is_cloud(&base)
                || matches!(
                    app.agents.profile(&info.id).map(|p| &p.backend),
                    Some(BackendSpec::Anthropic { .. })
                ) =>
            {
                "not configured (a cloud API is not asked); requests are not fitted; set generation.context_window".to_owned()
            }
            None => "unknown (not configured, and the server did not say); requests are not fitted; set generation.context_window".to_owned(),
        };
        let model = info.model.clone().unwrap_or_default();
        windows
            .entry((format!("{model} at {base}"), window, true))
            .or_default()
            .push(info.id.to_string());
        urls.entry(url).or_insert_with(|| net.clone());
    }
    for ((what, detail, ok), agents) in windows {
        out.push(check(
            format!("context window of {what} ({})", agents.join(", ")),
            ok,
            detail,
        ));
    }
    for (url, net) in urls {
        let (ok, detail) = match orca_llm::probe_endpoint(&net, &url, PROBE_TIMEOUT).await {
            Ok(status) => (true, format!("reachable (HTTP {status})")),
            Err(why) => (false, format!("unreachable: {why}")),
        };
        out.push(check(format!("endpoint {url}"), ok, detail));
        let (ok, ca) = match net.ca_source() {
            Ok(source) => (true, source),
            Err(e) => (false, e.to_string()),
        };
        out.push(check(format!("tls roots for {url}"), ok, ca));
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
            out.push(version_of(&spec.program, &["--version"], &what).await);
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
    check("store".to_owned(), ok, detail)
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

/// The checks as text lines (`ok` / `PROBLEM`), for the terminal report.
pub(crate) fn text(checks: &[Value]) -> String {
    let mut out = String::new();
    for c in checks {
        let ok = c["ok"].as_bool().unwrap_or(false);
        out.push_str(&format!(
            "{:<8} {}: {}\n",
            if ok { "ok" } else { "PROBLEM" },
            c["check"].as_str().unwrap_or(""),
            c["detail"].as_str().unwrap_or("")
        ));
    }
    out
}
