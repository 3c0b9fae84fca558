//! `orca serve`: the decision inbox and dashboard (the `orca-web` crate) over this project's
//! store, and `orca serve --new-token NAME`. Runs continue in the background as
//! `orca exec resume`, exactly as after `orca exec decide`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use orca_core::ExecutionId;
use orca_notify::{Notifier, NotifyConfig};
use orca_services::NoHuman;
use orca_web::{Deliver, RunStarter, Settings, TlsFiles, TokenFile, TokenName, Web};
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::app::{App, out, out_json, user};
use crate::cli::Global;
use crate::exit::{CliError, Exit};
use crate::term::say;
use crate::trust::KeyUse;

/// `orca serve` options.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on (default 127.0.0.1:7777; port 0 picks a free port). A
    /// non-loopback address needs --tls-cert and --tls-key.
    #[arg(long, value_name = "ADDR")]
    pub(crate) addr: Option<SocketAddr>,
    /// Create (or replace) the access token NAME, print it once, and exit. Only its hash is
    /// kept, in `$XDG_CONFIG_HOME/orca/web-tokens.json`; actions with it are recorded as
    /// `web:NAME`.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["revoke_token", "list_tokens"])]
    pub(crate) new_token: Option<String>,
    /// With --new-token: bind the token to this approver of the approval policy. Under a
    /// policy, a token approves only by bringing that approver's own signature (made with
    /// `orca policy vote` where their key is); an unbound token cannot approve.
    #[arg(long, value_name = "APPROVER", requires = "new_token")]
    pub(crate) approver: Option<String>,
    /// Remove the access token NAME (it stops working at once), and exit.
    #[arg(long, value_name = "NAME", conflicts_with = "list_tokens")]
    pub(crate) revoke_token: Option<String>,
    /// List the access tokens (names and creation times, never secrets), and exit.
    #[arg(long)]
    pub(crate) list_tokens: bool,
    /// The TLS certificate chain (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The TLS private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// The address people open, for links in notifications (default: the listening address).
    #[arg(long, value_name = "URL")]
    pub(crate) public_url: Option<String>,
    /// Seconds a decision may wait; then default-deny: a proposal is rejected, a step decision
    /// stops its execution (recorded in the audit as `expiry:default-deny`).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) expire_after: Option<u64>,
}

/// `[serve]` in `.orca/config.toml`; the flags win.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServeConfig {
    addr: Option<SocketAddr>,
    public_url: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    expire_after_secs: Option<u64>,
}

/// The `[serve]` and `[notify]` sections of the settings (read once, with the rest of the
/// config, by [`crate::settings::Settings::load`]); `[notify]` validated, every error naming
/// its field.
pub(crate) fn sections(app: &App) -> Result<(ServeConfig, Option<NotifyConfig>), CliError> {
    let files = config_files(app);
    let bad = |what: &str, e: &dyn std::fmt::Display| {
        CliError::bad_input(format!("{files}: [{what}]: {e}"))
    };
    let serve = match app.serve.clone() {
        Some(v) => v.try_into().map_err(|e| bad("serve", &e))?,
        None => ServeConfig::default(),
    };
    let notify = match app.notify.clone() {
        Some(v) => {
            let config: NotifyConfig = v.try_into().map_err(|e| bad("notify", &e))?;
            config
                .validate()
                .map_err(|e| CliError::bad_input(format!("{files}: {e}")))?;
            Some(config)
        }
        None => None,
    };
    Ok((serve, notify))
}

fn config_files(app: &App) -> String {
    app.config_files
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" + ")
}

/// The notifier's two halves: the command hook (run by `orca-web`) and the built-in targets.
pub(crate) type Notifiers = (Option<orca_web::NotifyConfig>, Option<Notifier>);

/// The [`Notifiers`] of `[notify]`, with the SMTP password resolved from its secret source.
pub(crate) fn notifiers(app: &App, notify: Option<&NotifyConfig>) -> Result<Notifiers, CliError> {
    let Some(notify) = notify else {
        return Ok((None, None));
    };
    let files = config_files(app);
    let bad = |e: &dyn std::fmt::Display| CliError::bad_input(format!("{files}: {e}"));
    let password = match &notify.email {
        Some(email) => {
            crate::settings::notify::smtp_password(email, app.root()).map_err(|e| bad(&e))?
        }
        None => None,
    };
    // A relative `ca_file` is inside the project, like a relative `password_file`.
    let resolved = notify
        .email
        .as_ref()
        .and_then(|e| e.ca_file.as_ref())
        .filter(|ca| ca.is_relative())
        .map(|ca| {
            let mut copy = notify.clone();
            if let Some(email) = copy.email.as_mut() {
                email.ca_file = Some(app.root().join(ca));
            }
            copy
        });
    let notify = resolved.as_ref().unwrap_or(notify);
    let notifier = Notifier::new(notify, password).map_err(|e| bad(&e))?;
    let command = notify
        .command
        .clone()
        .map(|command| orca_web::NotifyConfig {
            command,
            timeout_secs: notify.timeout_secs,
        });
    if notifier.is_empty() {
        return Ok((command, None));
    }
    let retry = notifier.retry();
    tracing::info!(
        "notifications go to {} ({} attempts each, the first retry after {}s, each attempt at most {}s)",
        notifier.target_names().join(", "),
        retry.attempts,
        retry.first_backoff.as_secs(),
        retry.timeout.as_secs()
    );
    Ok((command, Some(notifier)))
}

/// The built-in targets as the web server's delivery port.
fn delivery(notifier: Option<Notifier>) -> Option<Arc<dyn Deliver>> {
    notifier.map(|n| Arc::new(Delivery(n)) as Arc<dyn Deliver>)
}

/// The built-in targets, as the web server's delivery port.
#[derive(Debug)]
struct Delivery(Notifier);

impl Deliver for Delivery {
    fn deliver(&self, payload: &serde_json::Value) {
        self.0.deliver(payload);
    }

    fn close(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.0.close())
    }
}

/// Where access tokens live: outside every project.
fn token_file() -> Result<TokenFile, CliError> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".config"))
        })
        .ok_or_else(|| {
            CliError::bad_input("there is no place for access tokens: set XDG_CONFIG_HOME or HOME")
        })?;
    Ok(TokenFile::new(base.join("orca").join("web-tokens.json")))
}

fn web_error(e: orca_web::WebError) -> CliError {
    match e {
        orca_web::WebError::Internal(m) => CliError::internal(m),
        orca_web::WebError::Service(s) => CliError::from(s),
        other => CliError::bad_input(other.to_string()),
    }
}

/// Continues a run as `orca exec resume ID` in the background (no terminal: a new decision
/// makes it wait again, exit 4, and it shows up in the inbox).
#[derive(Debug)]
struct Resume {
    root: PathBuf,
    trusted: Vec<PathBuf>,
}

impl RunStarter for Resume {
    fn continue_run(&self, execution: ExecutionId) -> Result<(), String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find orca itself: {e}"))?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("--root").arg(&self.root).arg("--quiet");
        for k in &self.trusted {
            cmd.arg("--trusted-key").arg(k);
        }
        cmd.args(["exec", "resume", &execution.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start `orca exec resume`: {e}"))?;
        tokio::spawn(async move {
            match child.wait_with_output().await {
                Ok(o) => tracing::info!(
                    "orca exec resume {execution}: {} {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
                Err(e) => tracing::warn!("orca exec resume {execution}: {e}"),
            }
        });
        Ok(())
    }
}

/// `orca serve`.
pub(crate) async fn run(args: ServeArgs, global: &Global) -> Result<Exit, CliError> {
    let tokens = token_file()?;
    if let Some(name) = args.new_token {
        let name = TokenName::try_from(name).map_err(web_error)?;
        let approver = args
            .approver
            .map(|a| {
                a.parse::<orca_core::policy::ApproverName>()
                    .map(|n| n.as_str().to_owned())
                    .map_err(|e| CliError::bad_input(format!("--approver: {e}")))
            })
            .transpose()?;
        let bound = approver.clone();
        let new = tokens.create_for(name, approver).map_err(web_error)?;
        if global.json {
            out_json(
                &json!({ "name": new.name, "token": new.secret, "replaced": new.replaced, "file": tokens.path(), "approver": bound }),
            );
        } else {
            out(&new.secret);
            say(&format!(
                "{} access token `{}` (shown once; only its hash is kept in {}). Sign in at /login with it; actions are recorded as {}",
                if new.replaced {
                    "replaced the"
                } else {
                    "created the"
                },
                new.name,
                tokens.path().display(),
                new.name.actor()
            ));
            if let Some(who) = &bound {
                say(&format!(
                    "under an approval policy it approves only as {who}, with {who}'s own signature: `orca policy vote PLAN --digest …` where {who}'s key is"
                ));
            }
        }
        return Ok(Exit::Ok);
    }
    if let Some(name) = args.revoke_token {
        let name = TokenName::try_from(name).map_err(web_error)?;
        if !tokens.revoke(&name).map_err(web_error)? {
            return Err(CliError::bad_input(format!(
                "--revoke-token {name}: no such token in {}",
                tokens.path().display()
            )));
        }
        if global.json {
            out_json(&json!({ "revoked": name }));
        } else {
            out(&format!("revoked the access token `{name}`"));
        }
        return Ok(Exit::Ok);
    }
    if args.list_tokens {
        let list = tokens.list_bound().map_err(web_error)?;
        if global.json {
            let items: Vec<serde_json::Value> = list
                .iter()
                .map(|(n, at, who)| json!({ "name": n, "created_at": orca_web::html::when(*at), "approver": who }))
                .collect();
            out_json(&json!(items));
        } else if list.is_empty() {
            out("no access tokens (create one with `orca serve --new-token NAME`)");
        } else {
            let lines: Vec<String> = list
                .iter()
                .map(|(n, at, who)| {
                    format!(
                        "{n}  created {}{}",
                        orca_web::html::when(*at),
                        who.as_ref()
                            .map(|w| format!("  approver {w}"))
                            .unwrap_or_default()
                    )
                })
                .collect();
            out(&lines.join("\n"));
        }
        return Ok(Exit::Ok);
    }
    let app = App::open(global, false, KeyUse::Sign, false).await?;
    let (config, notify) = sections(&app)?;
    let (notify, notifier) = notifiers(&app, notify.as_ref())?;
    let deliver = delivery(notifier);
    let addr = args
        .addr
        .or(config.addr)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 7777)));
    let tls = match (
        args.tls_cert.or(config.tls_cert),
        args.tls_key.or(config.tls_key),
    ) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        (None, None) => None,
        _ => {
            return Err(CliError::bad_input(
                "[serve] in .orca/config.toml: tls_cert and tls_key go together",
            ));
        }
    };
    orca_web::check_bind(addr, tls.is_some(), tokens.any().map_err(web_error)?)
        .map_err(web_error)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::bad_input(format!("--addr {addr}: cannot listen: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::internal(e.to_string()))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let settings = Settings {
        signer: format!(
            "{}'s signing key {}{}",
            user(),
            crate::trust::key_path()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            app.store()
                .authority()
                .public_key()
                .map(|k| format!(" ({k})"))
                .unwrap_or_default()
        ),
        public_url: args
            .public_url
            .or(config.public_url)
            .unwrap_or_else(|| format!("{scheme}://{bound}")),
        secure_cookie: tls.is_some(),
        expiry: args
            .expire_after
            .or(config.expire_after_secs)
            .map(Duration::from_secs),
        notify,
        deliver,
        poll: Duration::from_millis(500),
    };
    let web = Arc::new(Web::new(
        app.orca(Arc::new(NoHuman))
            .with_workspaces(crate::isolation::workspaces(&app, None).await)
            .with_changes(Some(crate::isolation::changes(&app).await)),
        app.store().clone(),
        tokens,
        Arc::new(Resume {
            root: app.root().to_path_buf(),
            trusted: global.trusted_key.clone(),
        }),
        settings,
    ));
    say(&format!(
        "orca serve: listening on {scheme}://{bound} (sign in with an access token; Ctrl-C stops)"
    ));
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
        stop.cancel();
    });
    orca_web::serve(web, listener, tls.as_ref(), shutdown)
        .await
        .map_err(web_error)?;
    Ok(Exit::Ok)
}
