//! Notifications that reach people, on the real binary: `orca serve` with `[notify]` webhooks
//! (JSON and Slack) and email, a plan waiting for approval. The receivers are real and local:
//! HTTP listeners in this test, and Python's aiosmtpd (installed from the package registry by
//! `.ci/smtp-venv.sh`) as the SMTP server. Retries are counted at the receiver, the planted
//! SMTP password is searched for everywhere it must not be, and a receiver that hangs must not
//! slow approving and running a plan.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests print what they count"
)]

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::web_support::{self, Project, Server, client, eventually, get, nonce, plan, post};

pub(crate) const PUBLIC: &str = "https://orca.example:7777";

/// One request a webhook receiver got.
#[derive(Debug, Clone)]
struct Got {
    path: String,
    body: String,
    at: Instant,
}

/// A local HTTP receiver: each request to a path is answered with the next status of that
/// path's script (the last one repeats; 200 for a path without a script).
struct Hook {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Got>>>,
}

impl Hook {
    async fn start(script: &[(&str, &[u16])]) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let got: Arc<Mutex<Vec<Got>>> = Arc::default();
        let script: Arc<BTreeMap<String, Vec<u16>>> = Arc::new(
            script
                .iter()
                .map(|(p, s)| ((*p).to_owned(), s.to_vec()))
                .collect(),
        );
        let sink = got.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let sink = sink.clone();
                let script = script.clone();
                tokio::spawn(async move {
                    let Some((path, body)) = read_request(&mut conn).await else {
                        return;
                    };
                    let status = {
                        let mut got = sink.lock().unwrap();
                        let before = got.iter().filter(|g| g.path == path).count();
                        got.push(Got {
                            path: path.clone(),
                            body,
                            at: Instant::now(),
                        });
                        script
                            .get(&path)
                            .map_or(200, |s| s[before.min(s.len() - 1)])
                    };
                    let reply = format!(
                        "HTTP/1.1 {status} Scripted\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                    );
                    let _ = conn.write_all(reply.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Self { addr, got }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn to(&self, path: &str) -> Vec<Got> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|g| g.path == path)
            .cloned()
            .collect()
    }
}

/// One HTTP/1.1 request's path and body.
async fn read_request(conn: &mut tokio::net::TcpStream) -> Option<(String, String)> {
    let mut request = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        request.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&request).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= len {
                let path = head.split_whitespace().nth(1)?.to_owned();
                return Some((path, body.to_owned()));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_get_json_and_slack_and_a_flaky_one_gets_it_on_the_third_attempt() {
    let hook = Hook::start(&[("/flaky", &[503, 503, 200]), ("/gone", &[404])]).await;
    let p = Project::new();
    let _token = p.token("me");
    let sink = p.dir.path().join("command.jsonl");
    p.config(&format!(
        r#"[notify]
command = "cat >> '{sink}'; echo >> '{sink}'"
attempts = 4
backoff_secs = 1

[[notify.webhook]]
url = "{json}"

[[notify.webhook]]
url = "{slack}"
format = "slack"

[[notify.webhook]]
url = "{flaky}"

[[notify.webhook]]
url = "{gone}"
"#,
        sink = sink.display(),
        json = hook.url("/json"),
        slack = hook.url("/services/T0/B0/slack-secret-path"),
        flaky = hook.url("/flaky"),
        gone = hook.url("/gone"),
    ));
    let id = p.proposal("hooked", &plan(&[("one", "true", &[])]));
    let server = Server::start(&p, &["--public-url", PUBLIC]);
    eventually(
        Duration::from_secs(60),
        "every webhook, the flaky one 3 times",
        || {
            let done = hook.to("/flaky").len() >= 3
                && hook.to("/json").len() == 1
                && hook.to("/services/T0/B0/slack-secret-path").len() == 1
                && !hook.to("/gone").is_empty()
                && !web_support::read(&sink).trim().is_empty();
            async move { done.then_some(()) }
        },
    )
    .await;
    // Long enough for a fourth attempt at the flaky one (it would come 4 s after the third)
    // or a second at the gone one, were there any.
    tokio::time::sleep(Duration::from_secs(5)).await;

    let command_got: serde_json::Value =
        serde_json::from_str(web_support::read(&sink).lines().next().unwrap()).unwrap();
    let json_got: serde_json::Value = serde_json::from_str(&hook.to("/json")[0].body).unwrap();
    assert_eq!(
        json_got, command_got,
        "the JSON webhook gets what the command gets"
    );
    assert_eq!(json_got["event"], "decision_pending");
    assert_eq!(json_got["url"], format!("{PUBLIC}/plans/{id}"));
    assert_eq!(json_got["inbox_url"], format!("{PUBLIC}/inbox"));

    let slack: serde_json::Value =
        serde_json::from_str(&hook.to("/services/T0/B0/slack-secret-path")[0].body).unwrap();
    let text = slack["text"].as_str().unwrap();
    assert!(text.starts_with("orca: approve plan"), "{text}");
    assert!(text.contains(&format!("{PUBLIC}/plans/{id}")), "{text}");
    let section = slack["blocks"][0]["text"]["text"].as_str().unwrap();
    assert_eq!(slack["blocks"][0]["text"]["type"], "mrkdwn");
    assert!(
        section.contains(&format!("<{PUBLIC}/plans/{id}|Open it in the orca inbox>")),
        "{section}"
    );

    let flaky = hook.to("/flaky");
    let gaps: Vec<Duration> = flaky.windows(2).map(|w| w[1].at - w[0].at).collect();
    println!(
        "flaky webhook: {} attempts (answers 503, 503, 200), waits between them {:?}; gone webhook (404): {} attempt(s)",
        flaky.len(),
        gaps,
        hook.to("/gone").len()
    );
    assert_eq!(flaky.len(), 3, "delivered on the 3rd attempt, then no more");
    assert!(
        gaps[0] >= Duration::from_secs(1) && gaps[1] >= Duration::from_secs(2),
        "the backoff doubles: {gaps:?}"
    );
    assert_eq!(hook.to("/gone").len(), 1, "a 404 is not retried");

    let log = server.log();
    for line in [
        "attempt 1 of 4 failed: answered HTTP 503 Service Unavailable; retrying in 1s",
        "attempt 2 of 4 failed: answered HTTP 503 Service Unavailable; retrying in 2s",
        "delivered on attempt 3 of 4",
        "answered HTTP 404 Not Found; gave up (a permanent failure)",
    ] {
        assert!(log.contains(line), "the log records `{line}`:\n{log}");
    }
    let recorded = log.matches("notify: webhook 2 ").count();
    println!("flaky webhook attempts recorded in the server's log: {recorded}");
    assert_eq!(recorded, 3, "{log}");
    assert!(
        !log.contains("slack-secret-path"),
        "a webhook's path (a Slack webhook's secret) is never logged:\n{log}"
    );
}

/// Where `.ci/smtp-venv.sh` installs aiosmtpd: `<target>/smtp-venv` (installed now if missing).
pub(crate) fn smtp_python() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    let dir = target.join("smtp-venv");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/smtp-venv.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cannot install the test SMTP server (aiosmtpd) with {}: {}{}",
        script.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("bin/python")
}

/// An SMTP server that wants `SMTP_TEST_USER` / `SMTP_TEST_PASSWORD` (AUTH over plain text,
/// allowed here for localhost), and writes one JSON line per login and per message to argv[2].
const SMTP_SERVER: &str = r#"
import email, json, os, sys, time
from email import policy
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

port, out = int(sys.argv[1]), sys.argv[2]
user = os.environ["SMTP_TEST_USER"].encode()
password = os.environ["SMTP_TEST_PASSWORD"].encode()

def record(entry):
    with open(out, "a") as f:
        f.write(json.dumps(entry) + "\n")

def authenticate(server, session, envelope, mechanism, data):
    ok = isinstance(data, LoginPassword) and data.login == user and data.password == password
    record({"auth": mechanism, "login": data.login.decode(), "ok": ok})
    if ok:
        return AuthResult(success=True, auth_data=data)
    return AuthResult(success=False, handled=False, message="535 5.7.8 Authentication credentials invalid")

class Handler:
    async def handle_DATA(self, server, session, envelope):
        raw = envelope.original_content or envelope.content
        msg = email.message_from_bytes(raw, policy=policy.default)
        record({
            "from": envelope.mail_from,
            "to": envelope.rcpt_tos,
            "authenticated": bool(session.authenticated),
            "subject": str(msg["subject"]),
            "body": msg.get_content(),
            "raw": raw.decode("utf-8", "replace"),
        })
        return "250 OK"

controller = Controller(Handler(), hostname="127.0.0.1", port=port, authenticator=authenticate,
                        auth_require_tls=False, auth_required=True)
controller.start()
print("ready", flush=True)
while True:
    time.sleep(3600)
"#;

/// A running aiosmtpd; killed on drop.
pub(crate) struct Smtp {
    child: std::process::Child,
    pub(crate) port: u16,
    out: PathBuf,
}

impl Smtp {
    fn start(dir: &Path, user: &str, password: &str) -> Self {
        Self::spawn(dir, ("smtp_server.py", SMTP_SERVER), user, password, &[])
    }

    /// Runs `script` (name, text) with the venv's Python: its arguments are a free port, the
    /// file it records into, then `args`; it prints `ready` once it listens.
    pub(crate) fn spawn(
        dir: &Path,
        script: (&str, &str),
        user: &str,
        password: &str,
        args: &[String],
    ) -> Self {
        let python = smtp_python();
        let path = dir.join(script.0);
        std::fs::write(&path, script.1).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = dir.join(format!("smtp-{port}.jsonl"));
        let mut child = std::process::Command::new(python)
            .arg(&path)
            .arg(port.to_string())
            .arg(&out)
            .args(args)
            .env("SMTP_TEST_USER", user)
            .env("SMTP_TEST_PASSWORD", password)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        let ready = rx.recv_timeout(Duration::from_secs(60));
        assert_eq!(ready.as_deref(), Ok("ready"), "the SMTP server started");
        Self { child, port, out }
    }

    pub(crate) fn records(&self) -> Vec<serde_json::Value> {
        web_support::read(&self.out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn email_config(port: u16, password_env: &str) -> String {
    format!(
        r#"[notify.email]
server = "127.0.0.1"
port = {port}
from = "orca <orca@example.test>"
to = ["me@example.test", "you@example.test"]
username = "orca-bot"
password_env = "{password_env}"
tls = "none"
"#
    )
}

/// Every file under `.orca/` that holds `needle`.
pub(crate) fn files_holding(p: &Project, needle: &str) -> Vec<PathBuf> {
    web_support::walk(&p.root.join(".orca"))
        .into_iter()
        .filter(|f| {
            std::fs::read(f).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_reaches_a_real_smtp_server_and_the_password_nothing_else() {
    // Not named like a secret: only what the settings learned can keep it out of the logs.
    const VAR: &str = "NOTIFY_SMTP_PW";
    const PLANTED: &str = "pw-Planted-7f3a9c1e5d";
    let p = Project::new();
    let _token = p.token("me");
    let smtp = Smtp::start(p.dir.path(), "orca-bot", PLANTED);
    p.config(&email_config(smtp.port, VAR));
    let id = p.proposal("mailed", &plan(&[("one", "true", &[])]));
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
        "SMTP server: {} login(s) ({} accepted), {} message(s)",
        logins.len(),
        logins.iter().filter(|r| r["ok"] == true).count(),
        records.len() - logins.len()
    );
    // The control: the planted password was in play (the server accepted it).
    assert!(
        logins
            .iter()
            .any(|r| r["ok"] == true && r["login"] == "orca-bot"),
        "{records:?}"
    );
    assert_eq!(mail["authenticated"], true);
    assert_eq!(mail["from"], "orca@example.test");
    assert_eq!(
        mail["to"],
        serde_json::json!(["me@example.test", "you@example.test"])
    );
    let subject = mail["subject"].as_str().unwrap();
    assert!(
        subject.starts_with("orca: approve plan") && subject.ends_with("web test plan"),
        "{subject}"
    );
    let body = mail["body"].as_str().unwrap();
    assert!(
        body.contains(&format!("Open it: {PUBLIC}/plans/{id}")),
        "{body}"
    );
    assert!(
        body.contains(&format!("The inbox: {PUBLIC}/inbox")),
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
    assert!(log.contains("delivered on attempt 1 of 4"), "{log}");
    drop(server);

    // A wrong password: the server refuses it, the notifier gives up at once (a permanent
    // failure) and says so, without the password.
    const WRONG: &str = "pw-Wrong-04b2e8d6c1a9";
    let q = Project::new();
    let _token = q.token("me");
    q.config(&email_config(smtp.port, VAR));
    let _ = q.proposal("refused", &plan(&[("one", "true", &[])]));
    let server = Server::start_env(&q, &[], &[(VAR, WRONG)]);
    let log = eventually(Duration::from_secs(60), "the refusal in the log", || {
        let log = server.log();
        async move { log.contains("gave up").then_some(log) }
    })
    .await;
    println!(
        "wrong password: refused logins {}, the wrong password in the log {} times",
        smtp.records().iter().filter(|r| r["ok"] == false).count(),
        log.matches(WRONG).count()
    );
    assert!(log.contains("gave up (a permanent failure)"), "{log}");
    assert!(!log.contains(WRONG), "{log}");
    assert!(files_holding(&q, WRONG).is_empty());
}

/// `tls = "starttls"` against a server that offers no STARTTLS (a downgrade): no login, so the
/// password never crosses in plain text, and no mail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_required_means_no_login_and_no_mail_without_it() {
    const VAR: &str = "NOTIFY_SMTP_PW";
    const PLANTED: &str = "pw-Downgrade-93c1f0a7b2";
    let p = Project::new();
    let _token = p.token("me");
    let smtp = Smtp::start(p.dir.path(), "orca-bot", PLANTED);
    p.config(&format!(
        "{}\n[notify]\nattempts = 2\nbackoff_secs = 1\n",
        email_config(smtp.port, VAR).replace("tls = \"none\"", "tls = \"starttls\"")
    ));
    let _ = p.proposal("downgraded", &plan(&[("one", "true", &[])]));
    let server = Server::start_env(&p, &[], &[(VAR, PLANTED)]);
    let log = eventually(Duration::from_secs(60), "the notifier to give up", || {
        let log = server.log();
        async move { log.contains("gave up").then_some(log) }
    })
    .await;
    let records = smtp.records();
    println!(
        "SMTP server without STARTTLS: {} login(s), {} message(s); attempts logged: {}",
        records.iter().filter(|r| r.get("auth").is_some()).count(),
        records
            .iter()
            .filter(|r| r.get("subject").is_some())
            .count(),
        log.matches("attempt ").count()
    );
    assert!(records.is_empty(), "{records:?}");
    assert!(log.contains("attempt 2 of 2 failed"), "{log}");
    assert!(!log.contains(PLANTED), "{log}");
}

/// A wrong `[notify]` is refused before the server starts, naming the field; a password
/// variable that is not set is named, never guessed.
#[test]
fn bad_notify_settings_are_refused_naming_the_field() {
    let cases: [(&str, &str); 5] = [
        (
            "[notify]\ntimeout_secs = 5\n",
            "notify: nothing to notify with",
        ),
        (
            "[[notify.webhook]]\nurl = \"ftp://example.com/x\"\n",
            "notify.webhook[0].url: `ftp` is not an http or https address",
        ),
        (
            "[notify.email]\nserver = \"smtp.example.com\"\nfrom = \"o@example.com\"\nto = [\"a@example.com\"]\ntls = \"none\"\n",
            "notify.email.tls: \"none\" (no encryption) is only for a server on this machine",
        ),
        (
            "[notify.email]\nserver = \"smtp.example.com\"\nfrom = \"o@example.com\"\nto = [\"not an address\"]\n",
            "notify.email.to[0]: `not an address` is not an email address",
        ),
        (
            "[notify.email]\nserver = \"smtp.example.com\"\nfrom = \"o@example.com\"\nto = [\"a@example.com\"]\nusername = \"me\"\npassword_env = \"ORCA_TEST_UNSET_SMTP_PASSWORD\"\n",
            "notify.email.password_env: the environment variable ORCA_TEST_UNSET_SMTP_PASSWORD is not set",
        ),
    ];
    for (config, expect) in cases {
        let p = Project::new();
        p.config(config);
        let out = p.orca(&["serve", "--addr", "127.0.0.1:0"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{config}: {err}");
        assert!(
            err.contains(expect),
            "{config}: expected `{expect}` in: {err}"
        );
    }
}

/// Holds every connection and never answers: a webhook and an SMTP server that hang.
async fn hanging_listener() -> (SocketAddr, Arc<Mutex<usize>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count: Arc<Mutex<usize>> = Arc::default();
    let seen = count.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            *seen.lock().unwrap() += 1;
            held.push(conn);
        }
    });
    (addr, count)
}

/// Approves a waiting plan in the web inbox and runs it there, until it completes; the time
/// the approval took (confirmation page and form) and the whole (polled every 200 ms).
async fn approve_and_run(
    p: &Project,
    server: &Server,
    token: &str,
    id: &str,
) -> (Duration, Duration) {
    let c = client();
    let start = Instant::now();
    let (_, confirm) = get(&c, &server.url(&format!("/plans/{id}/approve")), token).await;
    let n = nonce(&confirm, Some(&format!("/plans/{id}/approve")));
    let d = web_support::shown_digest(&confirm);
    let (status, body, _) = post(
        &c,
        &server.url(&format!("/plans/{id}/approve")),
        token,
        &[("nonce", &n), ("confirm", "yes"), ("digest", &d)],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let approved = start.elapsed();
    let (_, page) = get(&c, &server.url(&format!("/plans/{id}")), token).await;
    let n = nonce(&page, Some(&format!("/plans/{id}/run")));
    let (status, _, location) = post(
        &c,
        &server.url(&format!("/plans/{id}/run")),
        token,
        &[("nonce", &n)],
    )
    .await;
    assert_eq!(status, 303);
    let exec = location.unwrap().rsplit('/').next().unwrap().to_owned();
    eventually(Duration::from_secs(120), "the run to complete", || {
        let shown = p.orca(&["--json", "exec", "show", &exec]);
        let v: Option<serde_json::Value> = serde_json::from_slice(&shown.stdout).ok();
        async move { v.filter(|v| v["stage"] == "completed").map(|_| ()) }
    })
    .await;
    (approved, start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_receiver_delays_neither_approving_nor_running() {
    const PLANS: usize = 3;
    let (addr, connections) = hanging_listener().await;
    let steps = plan(&[("a", "true", &[]), ("b", "true", &["a"])]);
    let mut medians: Vec<(Duration, Duration)> = Vec::new();
    for hanging in [false, true] {
        let p = Project::new();
        let token = p.token("me");
        if hanging {
            p.config(&format!(
                "[notify]\ntimeout_secs = 60\nattempts = 3\n\n[[notify.webhook]]\nurl = \"http://{addr}/hook\"\n\n[notify.email]\nserver = \"127.0.0.1\"\nport = {}\nfrom = \"orca@example.test\"\nto = [\"me@example.test\"]\ntls = \"none\"\n",
                addr.port()
            ));
        }
        let ids: Vec<String> = (0..PLANS)
            .map(|i| p.proposal(&format!("waits{i}"), &steps))
            .collect();
        let mut server = Server::start(&p, &[]);
        if hanging {
            // Every waiting plan's webhook call and SMTP connection, all hanging.
            eventually(
                Duration::from_secs(30),
                "the webhook calls and SMTP connections, hanging",
                || {
                    let n = *connections.lock().unwrap();
                    async move { (n >= 2 * PLANS).then_some(()) }
                },
            )
            .await;
        }
        let (mut approve, mut whole) = (Vec::new(), Vec::new());
        for id in &ids {
            let (a, w) = approve_and_run(&p, &server, &token, id).await;
            approve.push(a);
            whole.push(w);
        }
        approve.sort();
        whole.sort();
        println!(
            "{}: approve {approve:?}, approve + run {whole:?}",
            if hanging {
                "beside a hanging webhook and SMTP server"
            } else {
                "without notifications"
            }
        );
        medians.push((approve[PLANS / 2], whole[PLANS / 2]));
        if hanging {
            let log = server.log();
            assert!(!log.contains("delivered"), "nothing answered: {log}");
        }
        // The server stops promptly all the same; deliveries under way are abandoned.
        let start = Instant::now();
        assert_eq!(server.terminate(Duration::from_secs(30)), Some(0));
        let stop = start.elapsed();
        if hanging {
            let log = server.log();
            assert!(log.contains("abandoned"), "{log}");
            println!(
                "stopping the server with {} hanging deliveries took {stop:?}",
                2 * PLANS
            );
        }
    }
    let ratio = |f: fn(&(Duration, Duration)) -> Duration| {
        f(&medians[1]).as_secs_f64() / f(&medians[0]).as_secs_f64()
    };
    println!(
        "in the web inbox, median of {PLANS} 2-step plans, without notifications vs beside a hanging webhook and SMTP server ({} connections held): approve {:?} vs {:?} (ratio {:.2}), approve + run {:?} vs {:?} (ratio {:.2})",
        *connections.lock().unwrap(),
        medians[0].0,
        medians[1].0,
        ratio(|m| m.0),
        medians[0].1,
        medians[1].1,
        ratio(|m| m.1),
    );
}

/// `orca config show` names a webhook by its host: its path may be its secret.
#[test]
fn config_show_shows_a_webhook_to_its_host_only() {
    let p = Project::new();
    p.config(
        "[[notify.webhook]]\nurl = \"https://hooks.slack.com/services/T0/B0/sEcReTpAtH\"\nformat = \"slack\"\n",
    );
    for args in [&["config", "show"][..], &["--json", "config", "show"][..]] {
        let out = p.orca(args);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("https://hooks.slack.com/[redacted]"),
            "{text}"
        );
        assert!(!text.contains("sEcReTpAtH"), "{text}");
    }
}
