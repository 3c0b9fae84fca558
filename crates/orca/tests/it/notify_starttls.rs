//! Email over a real STARTTLS session, on the real binary: aiosmtpd (`.ci/smtp-venv.sh`) with a
//! throwaway CA's certificate (openssl, `orca_testkit::certs`) requires STARTTLS before AUTH and
//! MAIL. orca trusts that CA only through `[notify.email] ca_file`; the server records, per
//! login and per message, whether the session was encrypted and with which cipher. The planted
//! password is searched for in the email, the server's log, `.orca/` and the audit. Controls: the
//! same server without `ca_file` (an untrusted certificate) and a server offering no STARTTLS get
//! no login and no mail.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "tests print what they count"
)]

use std::path::Path;
use std::time::Duration;

use crate::notify_delivery::{PUBLIC, Smtp, files_holding};
use crate::web_support::{Project, Server, eventually, plan};

/// aiosmtpd requiring STARTTLS (when given a certificate) and AUTH; one JSON line per login and
/// per message, each saying whether the session was encrypted.
const SMTP_TLS_SERVER: &str = r#"
import email, json, os, ssl, sys, time
from email import policy
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

port, out, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
user = os.environ["SMTP_TEST_USER"].encode()
password = os.environ["SMTP_TEST_PASSWORD"].encode()

def record(entry):
    with open(out, "a") as f:
        f.write(json.dumps(entry) + "\n")

def tls_of(session):
    info = session.ssl or {}
    cipher = info.get("cipher")
    return {"tls": session.ssl is not None, "cipher": cipher[0] if cipher else None,
            "tls_version": cipher[1] if cipher else None}

def authenticate(server, session, envelope, mechanism, data):
    ok = isinstance(data, LoginPassword) and data.login == user and data.password == password
    record(dict(auth=mechanism, login=data.login.decode(), ok=ok, **tls_of(session)))
    if ok:
        return AuthResult(success=True, auth_data=data)
    return AuthResult(success=False, handled=False, message="535 5.7.8 Authentication credentials invalid")

class Handler:
    async def handle_DATA(self, server, session, envelope):
        raw = envelope.original_content or envelope.content
        msg = email.message_from_bytes(raw, policy=policy.default)
        record(dict(subject=str(msg["subject"]), body=msg.get_content(),
                    raw=raw.decode("utf-8", "replace"), authenticated=bool(session.authenticated),
                    **tls_of(session)))
        return "250 OK"

if cert:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    controller = Controller(Handler(), hostname="127.0.0.1", port=port, authenticator=authenticate,
                            tls_context=context, require_starttls=True, auth_require_tls=True,
                            auth_required=True)
else:
    controller = Controller(Handler(), hostname="127.0.0.1", port=port, authenticator=authenticate,
                            auth_require_tls=False, auth_required=True)
controller.start()
print("ready", flush=True)
while True:
    time.sleep(3600)
"#;

/// The TLS-capable aiosmtpd. With `tls` (certificate, key): STARTTLS required before AUTH
/// and MAIL; without: none offered.
fn tls_smtp(dir: &Path, password: &str, tls: Option<(&Path, &Path)>) -> Smtp {
    let args: Vec<String> = tls.map_or_else(
        || vec![String::new(), String::new()],
        |(c, k)| vec![c.display().to_string(), k.display().to_string()],
    );
    Smtp::spawn(
        dir,
        ("smtp_tls_server.py", SMTP_TLS_SERVER),
        "orca-bot",
        password,
        &args,
    )
}

const VAR: &str = "NOTIFY_SMTP_PW";

/// `[notify.email]` with STARTTLS to `127.0.0.1:port` (the certificate names it), the CA
/// trusted when given; two attempts a second apart.
fn config(port: u16, ca: Option<&Path>) -> String {
    format!(
        r#"[notify]
attempts = 2
backoff_secs = 1

[notify.email]
server = "127.0.0.1"
port = {port}
from = "orca <orca@example.test>"
to = ["me@example.test"]
username = "orca-bot"
password_env = "{VAR}"
tls = "starttls"
{}"#,
        ca.map(|c| format!("ca_file = \"{}\"\n", c.display()))
            .unwrap_or_default()
    )
}

/// A server that gets a plan to notify about and gives up on `smtp`: its log.
async fn refused(smtp: &Smtp, ca: Option<&Path>, password: &str) -> String {
    let p = Project::new();
    let _token = p.token("me");
    p.config(&config(smtp.port, ca));
    let _ = p.proposal("refused", &plan(&[("one", "true", &[])]));
    let server = Server::start_env(&p, &[], &[(VAR, password)]);
    let log = eventually(Duration::from_secs(60), "the notifier to give up", || {
        let log = server.log();
        async move { log.contains("gave up").then_some(log) }
    })
    .await;
    assert!(!log.contains(password), "{log}");
    assert!(files_holding(&p, password).is_empty());
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_over_starttls_with_a_trusted_ca_upgrades_logs_in_and_delivers() {
    const PLANTED: &str = "pw-Starttls-c41e7a9f03";
    let pki = tempfile::tempdir().unwrap();
    let files = orca_testkit::certs::make(pki.path()).unwrap_or_else(|e| panic!("{e}"));
    let tls = Some((files.server_cert.as_path(), files.server_key.as_path()));

    let p = Project::new();
    let _token = p.token("me");
    let smtp = tls_smtp(p.dir.path(), PLANTED, tls);
    p.config(&config(smtp.port, Some(&files.ca)));
    let id = p.proposal("mailed over tls", &plan(&[("one", "true", &[])]));
    let server = Server::start_env(&p, &["--public-url", PUBLIC], &[(VAR, PLANTED)]);
    let mail = eventually(Duration::from_secs(60), "the email", || {
        let found = smtp
            .records()
            .into_iter()
            .find(|r| r.get("subject").is_some());
        async move { found }
    })
    .await;
    let records = smtp.records();
    let logins: Vec<&serde_json::Value> =
        records.iter().filter(|r| r.get("auth").is_some()).collect();
    println!(
        "STARTTLS SMTP server: {} login(s) ({} accepted, {} over TLS), message over TLS: {} ({} {})",
        logins.len(),
        logins.iter().filter(|r| r["ok"] == true).count(),
        logins.iter().filter(|r| r["tls"] == true).count(),
        mail["tls"],
        mail["tls_version"],
        mail["cipher"]
    );
    assert!(
        logins
            .iter()
            .all(|r| r["tls"] == true && r["ok"] == true && r["login"] == "orca-bot"),
        "every login was over TLS and accepted: {records:?}"
    );
    assert!(!logins.is_empty());
    assert_eq!(mail["tls"], true, "the message came over TLS: {mail}");
    assert_eq!(mail["authenticated"], true);
    let body = mail["body"].as_str().unwrap();
    assert!(
        body.contains(&format!("Open it: {PUBLIC}/plans/{id}")),
        "{body}"
    );

    let raw = mail["raw"].as_str().unwrap();
    let log = server.log();
    let in_files = files_holding(&p, PLANTED);
    let audit = p.orca(&["--json", "audit", "show", &id]);
    let audit_text = String::from_utf8_lossy(&audit.stdout);
    println!(
        "planted SMTP password found: in the email {}, in the server's log {}, in files under .orca/ {}, in the audit {}",
        raw.matches(PLANTED).count(),
        log.matches(PLANTED).count(),
        in_files.len(),
        audit_text.matches(PLANTED).count()
    );
    assert!(!raw.contains(PLANTED), "{raw}");
    assert!(!log.contains(PLANTED), "{log}");
    assert!(in_files.is_empty(), "{in_files:?}");
    assert!(audit.status.success(), "{audit:?}");
    assert!(!audit_text.contains(PLANTED));
    assert!(log.contains("delivered on attempt 1 of 2"), "{log}");
    assert!(log.contains("STARTTLS, ca_file"), "{log}");
    drop(server);

    // Control: the same server, its CA not trusted (no ca_file): the certificate is refused
    // before any login.
    let before = smtp.records().len();
    let log = refused(&smtp, None, PLANTED).await;
    let after = smtp.records().len();
    println!(
        "without ca_file: new logins or messages at the server {}, attempts logged {}",
        after - before,
        log.matches("attempt ").count()
    );
    assert_eq!(after, before, "nothing reached the server");
    assert!(log.contains("attempt 2 of 2 failed"), "{log}");

    // Control: a server offering no STARTTLS, with the CA trusted: no login, no mail.
    let plain = tls_smtp(p.dir.path(), PLANTED, None);
    let log = refused(&plain, Some(&files.ca), PLANTED).await;
    println!(
        "server without STARTTLS: {} record(s) at the server, attempts logged {}",
        plain.records().len(),
        log.matches("attempt ").count()
    );
    assert!(plain.records().is_empty(), "{:?}", plain.records());

    // A CA file that is not one is refused before the server starts, naming the field.
    let q = Project::new();
    let bogus = q.dir.path().join("not-a-ca.pem");
    std::fs::write(&bogus, "hello\n").unwrap();
    q.config(
        &config(smtp.port, Some(&bogus))
            .replace("username = \"orca-bot\"\n", "")
            .replace(&format!("password_env = \"{VAR}\"\n"), ""),
    );
    let out = q.orca(&["serve", "--addr", "127.0.0.1:0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("notify.email.ca_file") && err.contains("holds no PEM certificate"),
        "{err}"
    );
}
