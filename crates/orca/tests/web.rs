//! `orca serve` end to end: a real server on a free local port, driven over HTTP. Every page,
//! every action, the token and single-use checks, races with the command line, the bind
//! policy, TLS, notifications and default-deny expiry.

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests")]

mod common;
mod web_support;

use std::time::Duration;

use web_support::{Project, Server, client, eventually, get, nonce, plan, post};

const PAGES_WITH_FORMS: usize = 3;

fn actor_in_audit(project: &Project, who: &str) -> usize {
    let mut count = 0;
    for entry in walk(&project.root.join(".orca")) {
        if entry.extension().is_some_and(|e| e == "jsonl") {
            count += web_support::read(&entry).matches(who).count();
        }
    }
    count
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// No page carries inline script, inline style or an inline event handler (the CSP would
/// block them, so the page would break); every response carries the CSP.
fn assert_clean(url: &str, body: &str) {
    for bad in [
        "<script>",
        "style=\"",
        " onclick=",
        " onload=",
        "javascript:",
    ] {
        assert!(!body.contains(bad), "{url}: `{bad}` in the page");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_and_action_end_to_end() {
    let p = Project::new();
    let token = p.token("me");
    let plan_id = p.proposal(
        "dag",
        &plan(&[
            ("prepare", "echo ready", &[]),
            ("left", "echo left", &["prepare"]),
            ("right", "echo right", &["prepare"]),
            ("join", "echo joined", &["left", "right"]),
        ]),
    );
    let waiting = p.waiting_execution("flaky");
    let server = Server::start(&p, &[]);
    let c = client();

    // Without a token, or with a wrong one, nothing but the login page.
    for path in [
        "/inbox",
        "/plans",
        &format!("/plans/{plan_id}"),
        "/executions",
        "/audit",
    ] {
        let r = c.get(server.url(path)).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{path} without a token");
        let (status, _) = get(&c, &server.url(path), "orca_0000").await;
        assert_eq!(status, 401, "{path} with a wrong token");
    }
    // Signing in sets an HttpOnly, SameSite=Strict cookie that then works.
    let r = c
        .post(server.url("/login"))
        .form(&[("token", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    let r = c
        .get(server.url("/inbox"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    // The inbox: both decisions, oldest first.
    let (status, inbox) = get(&c, &server.url("/inbox"), &token).await;
    assert_eq!(status, 200);
    let (a, b) = (inbox.find(&plan_id).unwrap(), inbox.find(&waiting).unwrap());
    assert!(a < b, "oldest first: the proposal came first");
    assert!(inbox.contains("(2 waiting)"), "{inbox}");

    // Every page answers, with the CSP and no inline code.
    let mut pages = 0;
    for path in [
        "/inbox".to_owned(),
        "/plans".to_owned(),
        format!("/plans/{plan_id}"),
        format!("/plans/{plan_id}/dag.svg"),
        format!("/plans/{plan_id}/approve"),
        "/executions".to_owned(),
        format!("/executions/{waiting}"),
        "/audit".to_owned(),
        format!("/audit?exec={waiting}"),
        format!("/audit?plan={plan_id}"),
        "/api/inbox".to_owned(),
        "/static/orca.css".to_owned(),
        "/static/live.js".to_owned(),
        "/login".to_owned(),
    ] {
        let r = c
            .get(server.url(&path))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
        let csp = r.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{csp}"
        );
        assert_clean(&path, &r.text().await.unwrap());
        pages += 1;
    }
    println!("pages served with CSP and no inline code: {pages}");
    let (_, svg) = get(
        &c,
        &server.url(&format!("/plans/{plan_id}/dag.svg")),
        &token,
    )
    .await;
    assert_eq!(svg.matches("<rect").count(), 4, "one box per step");
    assert_eq!(
        svg.matches("marker-end").count(),
        4,
        "one edge per dependency"
    );
    let (_, page) = get(&c, &server.url(&format!("/executions/{waiting}")), &token).await;
    assert!(
        page.contains("Decision needed") && page.contains("nope"),
        "{page}"
    );
    // Unknown ids are a clear 404.
    let (status, body) = get(&c, &server.url("/plans/plan_zzz"), &token).await;
    assert!(status == 404 || status == 400, "{status} {body}");

    // Approve: the form needs the confirmation step, then works once.
    let (_, plan_page) = get(&c, &server.url(&format!("/plans/{plan_id}")), &token).await;
    assert!(plan_page.contains(&format!("href=\"/plans/{plan_id}/approve\"")));
    let (_, confirm) = get(
        &c,
        &server.url(&format!("/plans/{plan_id}/approve")),
        &token,
    )
    .await;
    assert!(confirm.contains("signing key"), "the page says what signs");
    let n = nonce(&confirm, Some(&format!("/plans/{plan_id}/approve")));
    let url = server.url(&format!("/plans/{plan_id}/approve"));
    let (status, _, _) = post(&c, &url, &token, &[("nonce", &n)]).await;
    assert_eq!(status, 400, "no confirmation, no approval");
    let (status, body, _) = post(&c, &url, &token, &[("nonce", &n), ("confirm", "yes")]).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("approved plan"), "{body}");
    let (status, body, _) = post(&c, &url, &token, &[("nonce", &n), ("confirm", "yes")]).await;
    assert_eq!(status, 409, "a replayed form is refused");
    assert!(body.contains("already submitted, by web:me"), "{body}");
    let shown = p.orca(&["--json", "plan", "show", &plan_id]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["stage"], "approved");
    assert_eq!(shown["approval"]["by"], "web:me");
    let verify = p.orca(&["audit", "verify", "--all"]);
    assert!(
        verify.status.success(),
        "the web approval is signed and verifies: {verify:?}"
    );

    // Run it from the page: it goes to the execution, which completes.
    let (_, plan_page) = get(&c, &server.url(&format!("/plans/{plan_id}")), &token).await;
    let n = nonce(&plan_page, Some(&format!("/plans/{plan_id}/run")));
    let (status, _, location) = post(
        &c,
        &server.url(&format!("/plans/{plan_id}/run")),
        &token,
        &[("nonce", &n)],
    )
    .await;
    assert_eq!(status, 303);
    let exec_path = location.unwrap();
    eventually(
        Duration::from_secs(90),
        "the web-started run to complete",
        || {
            let c = c.clone();
            let url = server.url(&exec_path);
            let token = token.clone();
            async move {
                let (_, page) = get(&c, &url, &token).await;
                page.contains("b-completed\">completed</span> 4/4")
                    .then_some(())
            }
        },
    )
    .await;

    // Retry the failed step with guidance: recorded, and the run continues (it fails again:
    // the command still exits 3, so it waits again with 2 attempts).
    let (_, page) = get(&c, &server.url(&format!("/executions/{waiting}")), &token).await;
    let n = nonce(&page, Some(&format!("/executions/{waiting}/decide")));
    let decide = server.url(&format!("/executions/{waiting}/decide"));
    let (status, body, _) = post(
        &c,
        &decide,
        &token,
        &[
            ("nonce", &n),
            ("decision", "retry"),
            ("guidance", "try harder"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    eventually(
        Duration::from_secs(90),
        "the retried step to fail again",
        || {
            let p = &p;
            let waiting = waiting.clone();
            async move {
                let out = p.orca(&["--json", "exec", "show", &waiting]);
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
                let attempts = v["tasks"][0]["attempts"].as_array()?.len();
                (attempts == 2 && v["decision"].is_object()).then_some(())
            }
        },
    )
    .await;
    // Now stop it.
    let (_, page) = get(&c, &server.url(&format!("/executions/{waiting}")), &token).await;
    let n = nonce(&page, Some(&format!("/executions/{waiting}/decide")));
    let (status, body, _) = post(&c, &decide, &token, &[("nonce", &n), ("decision", "stop")]).await;
    assert_eq!(status, 200, "{body}");
    eventually(Duration::from_secs(90), "the stop to be applied", || {
        let p = &p;
        let waiting = waiting.clone();
        async move {
            let out = p.orca(&["--json", "exec", "show", &waiting]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            (v["stage"] == "stopped").then_some(())
        }
    })
    .await;

    // Request changes and reject, on two more proposals.
    let second = p.proposal("second", &plan(&[("one", "true", &[])]));
    let third = p.proposal("third", &plan(&[("one", "true", &[])]));
    let (_, page) = get(&c, &server.url(&format!("/plans/{second}")), &token).await;
    let n = nonce(&page, Some(&format!("/plans/{second}/changes")));
    let (status, body, _) = post(
        &c,
        &server.url(&format!("/plans/{second}/changes")),
        &token,
        &[("nonce", &n), ("feedback", "split step one")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, page) = get(&c, &server.url(&format!("/plans/{third}")), &token).await;
    let n = nonce(&page, Some(&format!("/plans/{third}/reject")));
    let (status, body, _) = post(
        &c,
        &server.url(&format!("/plans/{third}/reject")),
        &token,
        &[("nonce", &n), ("reason", "not now")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // A form of one plan cannot act on another.
    let (_, page) = get(&c, &server.url(&format!("/plans/{second}")), &token).await;
    assert!(
        !page.contains("/changes\""),
        "a draft has no decision forms"
    );
    let (status, body, _) = post(
        &c,
        &server.url(&format!("/plans/{second}/reject")),
        &token,
        &[("nonce", &nonce(&plan_page, None))],
    )
    .await;
    assert_eq!(status, 409, "{body}");

    // A cross-site POST is refused before anything else.
    let r = c
        .post(server.url(&format!("/plans/{third}/reject")))
        .bearer_auth(&token)
        .header("origin", "https://evil.example")
        .form(&[("nonce", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);

    let web_entries = actor_in_audit(&p, "web:me");
    println!("audit entries naming web:me: {web_entries}");
    assert!(
        web_entries >= 5,
        "approve, 2 decisions, changes, reject are audited as web:me"
    );
    let _ = PAGES_WITH_FORMS;
}

/// The same decision from the web and from the command line at once: exactly one wins each
/// time, and the loser is told who decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_and_cli_race_exactly_one_wins() {
    let p = Project::new();
    let token = p.token("racer");
    let server = Server::start(&p, &[]);
    let c = client();
    const TRIES: usize = 8;
    let (mut web_wins, mut cli_wins, mut both, mut neither, mut told) = (0, 0, 0, 0, 0);
    for i in 0..TRIES {
        let id = p.proposal(&format!("race{i}"), &plan(&[("one", "true", &[])]));
        let (_, confirm) = get(&c, &server.url(&format!("/plans/{id}/approve")), &token).await;
        let n = nonce(&confirm, Some(&format!("/plans/{id}/approve")));
        let url = server.url(&format!("/plans/{id}/approve"));
        let cli = {
            let root = p.root.clone();
            let home = p.home.clone();
            let id = id.clone();
            std::thread::spawn(move || common::orca(&root, &home, &["plan", "reject", &id]))
        };
        // Staggered, so that either side can be first.
        tokio::time::sleep(Duration::from_millis(60 * i as u64)).await;
        let (status, body, _) = post(&c, &url, &token, &[("nonce", &n), ("confirm", "yes")]).await;
        let cli = cli.join().unwrap();
        let web_won = status == 200;
        let cli_won = cli.status.success();
        match (web_won, cli_won) {
            (true, false) => web_wins += 1,
            (false, true) => {
                cli_wins += 1;
                assert_eq!(status, 409, "{body}");
                if body.contains("already decided: rejected by user") {
                    told += 1;
                }
            }
            (true, true) => both += 1,
            (false, false) => neither += 1,
        }
        if web_won {
            let err = String::from_utf8_lossy(&cli.stderr);
            assert!(err.contains("approved"), "the CLI loser is told: {err}");
            told += 1;
        }
    }
    println!(
        "plan approval races: {TRIES} tries, web won {web_wins}, CLI won {cli_wins}, both {both}, neither {neither}, loser told who decided {told}"
    );
    assert_eq!(both + neither, 0);
    assert_eq!(told, TRIES);

    // Deviation decisions: web `stop` against CLI `exec decide retry --no-run`.
    let (mut web_d, mut cli_d, mut both_d) = (0, 0, 0);
    const DECISIONS: usize = 3;
    for i in 0..DECISIONS {
        let exec = p.waiting_execution(&format!("fail{i}"));
        let (_, page) = get(&c, &server.url(&format!("/executions/{exec}")), &token).await;
        let n = nonce(&page, Some(&format!("/executions/{exec}/decide")));
        let cli = {
            let root = p.root.clone();
            let home = p.home.clone();
            let exec = exec.clone();
            std::thread::spawn(move || {
                common::orca(
                    &root,
                    &home,
                    &["exec", "decide", &exec, "retry", "--no-run"],
                )
            })
        };
        tokio::time::sleep(Duration::from_millis(150 * i as u64)).await;
        let (status, body, _) = post(
            &c,
            &server.url(&format!("/executions/{exec}/decide")),
            &token,
            &[("nonce", &n), ("decision", "stop")],
        )
        .await;
        let cli = cli.join().unwrap();
        match (status == 200, cli.status.success()) {
            (true, false) => web_d += 1,
            (false, true) => {
                cli_d += 1;
                assert!(body.contains("already made, by user"), "{body}");
            }
            _ => both_d += 1,
        }
    }
    println!(
        "decision races: {DECISIONS} tries, web won {web_d}, CLI won {cli_d}, both or neither {both_d}"
    );
    assert_eq!(both_d, 0);
}

#[test]
fn binding_beyond_localhost_needs_tls_and_a_token() {
    let p = Project::new();
    let out = p.orca(&["serve", "--addr", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--new-token"),
        "{out:?}"
    );
    let _ = p.token("me");
    let out = p.orca(&["serve", "--addr", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("without TLS") && err.contains("--tls-cert"),
        "{err}"
    );
    // The token file holds a hash, never the secret, and lives outside the project.
    let secret = p.token("phone");
    let file = p.home.join("orca/web-tokens.json");
    let text = web_support::read(&file);
    assert!(text.contains("phone") && !text.contains(&secret));
    assert!(!p.root.join(".orca/web-tokens.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_on_any_address() {
    let p = Project::new();
    let token = p.token("me");
    let (cert, key) = (p.dir.path().join("cert.pem"), p.dir.path().join("key.pem"));
    let ok = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs (Debian's openssl package)");
    assert!(ok.status.success(), "{ok:?}");
    let server = Server::start(
        &p,
        &[
            "--addr",
            "0.0.0.0:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    assert!(
        server.base.starts_with("https://0.0.0.0:"),
        "{}",
        server.base
    );
    let url = server.base.replace("0.0.0.0", "127.0.0.1");
    let c = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let r = c
        .get(format!("{url}/inbox"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = c.get(format!("{url}/inbox")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    // Plain HTTP on the TLS port gets nothing.
    let plain = client()
        .get(format!("{}/inbox", url.replace("https", "http")))
        .send()
        .await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifier_gets_json_with_the_inbox_link_and_a_bad_one_never_blocks() {
    let p = Project::new();
    let token = p.token("me");
    let sink = p.dir.path().join("notified.jsonl");
    p.config(&format!(
        "[notify]\ncommand = \"cat >> '{}'; echo >> '{}'\"\ntimeout_secs = 5\n",
        sink.display(),
        sink.display()
    ));
    let id = p.proposal("wait", &plan(&[("one", "true", &[])]));
    let server = Server::start(&p, &["--public-url", "https://orca.example:7777"]);
    let line = eventually(Duration::from_secs(30), "a notification", || {
        let sink = sink.clone();
        async move {
            let text = web_support::read(&sink);
            (!text.trim().is_empty()).then_some(text)
        }
    })
    .await;
    let v: serde_json::Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    assert_eq!(v["event"], "decision_pending");
    assert_eq!(v["inbox_url"], "https://orca.example:7777/inbox");
    assert_eq!(v["url"], format!("https://orca.example:7777/plans/{id}"));
    assert_eq!(v["item"]["kind"], "plan_approval");
    // A new deviation is notified too (once).
    let exec = p.waiting_execution("fails");
    eventually(
        Duration::from_secs(30),
        "the deviation notification",
        || {
            let sink = sink.clone();
            let exec = exec.clone();
            async move { web_support::read(&sink).contains(&exec).then_some(()) }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // (The failing plan's proposal may be seen and notified too in the instant before
    // `run --yes` approves it: each pending decision is notified once.)
    let text = web_support::read(&sink);
    let urls: Vec<String> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["url"].to_string())
        .collect();
    let distinct: std::collections::BTreeSet<&String> = urls.iter().collect();
    println!(
        "notifications: {} sent for {} distinct pending decisions (duplicates: {})",
        urls.len(),
        distinct.len(),
        urls.len() - distinct.len()
    );
    assert_eq!(
        urls.len(),
        distinct.len(),
        "each pending decision is notified once"
    );
    drop(server);

    // A notifier that hangs, and one that fails: logged, killed after its limit; the server
    // answers meanwhile and runs are unaffected.
    for (command, expect) in [
        ("sleep 600", "did not finish within 1s"),
        ("echo broken >&2; exit 7", "broken"),
    ] {
        let q = Project::new();
        let token = q.token("me");
        q.config(&format!(
            "[notify]\ncommand = \"{command}\"\ntimeout_secs = 1\n"
        ));
        let _ = q.proposal("wait", &plan(&[("one", "true", &[])]));
        let server = Server::start(&q, &[]);
        let c = client();
        let start = std::time::Instant::now();
        let (status, _) = get(&c, &server.url("/inbox"), &token).await;
        assert_eq!(status, 200);
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the server is not blocked"
        );
        let run = q.orca(&[
            "--json",
            "run",
            "--yes",
            &q.proposal("go", &plan(&[("a", "true", &[])])),
        ]);
        assert!(run.status.success(), "{run:?}");
        eventually(
            Duration::from_secs(30),
            "the notifier problem in the log",
            || {
                let log = server.log();
                async move { log.contains(expect).then_some(()) }
            },
        )
        .await;
    }
    let _ = token;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_decisions_are_denied_and_audited() {
    let p = Project::new();
    let _token = p.token("me");
    let id = p.proposal("late", &plan(&[("one", "true", &[])]));
    let exec = p.waiting_execution("late-step");
    let _server = Server::start(&p, &["--expire-after", "1"]);
    eventually(Duration::from_secs(60), "default deny", || {
        let p = &p;
        let (id, exec) = (id.clone(), exec.clone());
        async move {
            let plan = p.orca(&["--json", "plan", "show", &id]);
            let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).ok()?;
            let ex = p.orca(&["--json", "exec", "show", &exec]);
            let ex: serde_json::Value = serde_json::from_slice(&ex.stdout).ok()?;
            (plan["stage"] == "rejected" && ex["stage"] == "stopped").then_some((plan, ex))
        }
    })
    .await;
    let plan = p.orca(&["--json", "plan", "show", &id]);
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan["rejection"]["by"], "expiry:default-deny");
    assert!(
        actor_in_audit(&p, "expiry:default-deny") >= 2,
        "both expiries are audited"
    );
}

/// The shipped example notifier (`examples/notify-webhook.sh`) posts the decision, with its
/// link, to a webhook: a local listener here stands for Slack & co.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_webhook_script_posts_the_pending_decision() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hook", hook.local_addr().unwrap());
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/notify-webhook.sh");
    let p = Project::new();
    let _token = p.token("me");
    p.config(&format!(
        "[notify]\ncommand = \"ORCA_WEBHOOK_URL={hook_url} sh '{}'\"\n",
        script.display()
    ));
    let id = p.proposal("hooked", &plan(&[("one", "true", &[])]));
    let _server = Server::start(&p, &[]);
    let (mut conn, _) = tokio::time::timeout(Duration::from_secs(30), hook.accept())
        .await
        .expect("the webhook is called")
        .unwrap();
    let mut request = Vec::new();
    let mut buf = [0u8; 8192];
    let body = loop {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
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
                break body.to_owned();
            }
        }
        assert!(n > 0, "the request ended early");
    };
    conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let text = v["text"].as_str().unwrap();
    assert!(text.starts_with("orca: approve plan"), "{text}");
    assert!(text.contains(&format!("/plans/{id}")), "{text}");
    assert_eq!(v["orca"]["item"]["plan_id"], id.as_str());
}

/// Hostile text in a plan (from a planner model, say) is shown as text on every page: no
/// markup from the plan reaches the browser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_plan_text_is_escaped_everywhere() {
    let p = Project::new();
    let token = p.token("me");
    let evil = "<img src=x onerror=alert(1)><script>alert(2)</script>\"'&";
    let mut doc = plan(&[("one", "echo '<script>alert(3)</script>'; exit 3", &[])]);
    doc["goal"] = serde_json::json!(evil);
    doc["summary"] = serde_json::json!(evil);
    doc["risks"] = serde_json::json!([evil]);
    doc["steps"][0]["description"] = serde_json::json!(evil);
    let id = p.proposal("evil", &doc);
    let run = p.orca(&[
        "--json",
        "run",
        &p.proposal("evil2", &doc),
        "--yes",
        "--max-attempts",
        "1",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let server = Server::start(&p, &[]);
    let c = client();
    let mut leaks = 0;
    let mut pages = 0;
    for path in [
        "/inbox".to_owned(),
        "/plans".to_owned(),
        format!("/plans/{id}"),
        format!("/plans/{id}/approve"),
        format!("/plans/{id}/dag.svg"),
        format!("/executions/{exec}"),
        "/audit".to_owned(),
    ] {
        let (status, body) = get(&c, &server.url(&path), &token).await;
        assert_eq!(status, 200, "{path}");
        pages += 1;
        for bad in ["<img src=x", "<script>alert", "onerror=alert(1)>"] {
            if body.contains(bad) {
                leaks += 1;
                eprintln!("{path}: raw `{bad}`");
            }
        }
    }
    println!("hostile markup reaching the page unescaped: {leaks} (over {pages} pages)");
    assert_eq!(leaks, 0);
}

/// Secrets a step prints (from the project's env file) reach no page, no event stream, no
/// notification and no server log: counted over every output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_secrets_reach_no_page_stream_notification_or_log() {
    use std::os::unix::fs::PermissionsExt as _;
    const GITHUB: &str = "ghp_FAKEgithub0123456789abcdefghijklmn";
    const PASSWORD: &str = "correct-horse-battery-staple-42";
    let p = Project::new();
    let token = p.token("me");
    let env = p.root.join(".orca/step.env");
    std::fs::write(
        &env,
        format!("GITHUB_TOKEN={GITHUB}\nMY_SERVICE_PASSWORD={PASSWORD}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o600)).unwrap();
    let sink = p.dir.path().join("notified.jsonl");
    std::fs::write(
        p.root.join(".orca/config.toml"),
        format!(
            "env_file = \".orca/step.env\"\n\n[notify]\ncommand = \"cat >> '{}'\"\n",
            sink.display()
        ),
    )
    .unwrap();
    let mut doc = plan(&[(
        "leaky",
        "echo \"token $GITHUB_TOKEN pw $MY_SERVICE_PASSWORD\"; echo \"failing with $MY_SERVICE_PASSWORD\" >&2; exit 3",
        &[],
    )]);
    doc["steps"][0]["env"] = serde_json::json!(["GITHUB_TOKEN", "MY_SERVICE_PASSWORD"]);
    let id = p.proposal("leaky", &doc);
    let run = p.orca(&["--json", "run", &id, "--yes", "--max-attempts", "1"]);
    assert_eq!(run.status.code(), Some(4), "{run:?}");
    let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let server = Server::start(&p, &[]);
    let c = client();
    eventually(Duration::from_secs(30), "the notification", || {
        let sink = sink.clone();
        async move { (!web_support::read(&sink).is_empty()).then_some(()) }
    })
    .await;
    let mut outputs = vec![("notification".to_owned(), web_support::read(&sink))];
    for path in [
        "/inbox".to_owned(),
        "/api/inbox".to_owned(),
        format!("/plans/{id}"),
        format!("/executions/{exec}"),
        format!("/audit?exec={exec}"),
        "/audit".to_owned(),
    ] {
        let (status, body) = get(&c, &server.url(&path), &token).await;
        assert_eq!(status, 200, "{path}");
        outputs.push((path, body));
    }
    // The event stream: its first event, after a change (a decision elsewhere).
    let stream = c
        .get(server.url(&format!("/executions/{exec}/events")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    let out = p.orca(&["exec", "decide", &exec, "retry", "--no-run"]);
    assert!(out.status.success(), "{out:?}");
    let mut stream = stream;
    let first = tokio::time::timeout(Duration::from_secs(30), stream.chunk())
        .await
        .expect("an event after the change")
        .unwrap()
        .unwrap_or_default();
    let first = String::from_utf8_lossy(&first).into_owned();
    assert!(first.contains("event: update"), "{first}");
    outputs.push(("event stream".to_owned(), first));
    outputs.push(("server log".to_owned(), server.log()));
    let mut leaks = 0;
    for (what, text) in &outputs {
        for secret in [GITHUB, PASSWORD] {
            if text.contains(secret) {
                leaks += 1;
                eprintln!("{what}: leaks {secret}");
            }
        }
    }
    println!(
        "secrets leaked over {} outputs of orca serve: {leaks}",
        outputs.len()
    );
    assert_eq!(leaks, 0);
    let page = &outputs
        .iter()
        .find(|(w, _)| w.starts_with("/executions"))
        .unwrap()
        .1;
    assert!(
        page.contains("token ") && page.contains("[redacted"),
        "the output is shown, redacted: {page}"
    );
}

/// SIGTERM stops the server promptly even with a live page open (its event stream ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_stops_promptly_with_a_live_page_open() {
    let p = Project::new();
    let token = p.token("me");
    let exec = p.waiting_execution("open");
    let mut server = Server::start(&p, &[]);
    let c = client();
    let stream = c
        .get(server.url(&format!("/executions/{exec}/events")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status().as_u16(), 200);
    let start = std::time::Instant::now();
    let code = server.terminate(Duration::from_secs(30));
    println!(
        "server stopped {:.1}s after SIGTERM with a stream open",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(code, Some(0), "a clean exit, not a kill");
    drop(stream);
}

/// A fake OpenAI-compatible model: it asks which colour, unless the conversation holds the
/// answer ("blue"); then it succeeds.
struct Asker;

impl wiremock::Respond for Asker {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body = String::from_utf8_lossy(&request.body);
        let args = if body.contains("blue") {
            serde_json::json!({"status": "success", "summary": "painted the button blue"})
        } else {
            serde_json::json!({"status": "interruption", "reason": "the colour is not given",
                "question": "Which colour should the button be?"})
        };
        wiremock::ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "id": "chatcmpl-test", "object": "chat.completion", "model": "asker-model",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
                "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "submit_result", "arguments": args.to_string()}}]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}
        }))
    }
}

/// A step's question answered in the page: the run continues with the answer and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steps_question_is_answered_in_the_page_and_the_run_completes() {
    let model = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(Asker)
        .mount(&model)
        .await;
    let p = Project::new();
    let token = p.token("me");
    std::fs::write(
        p.root.join(".orca/config.toml"),
        format!(
            "[agents.asker]\ndescription = \"asks before it paints\"\nbackend = \"ollama\"\nbase_url = \"{}/v1\"\nmodel = \"asker-model\"\n",
            model.uri()
        ),
    )
    .unwrap();
    let mut doc = plan(&[("paint", "", &[])]);
    doc["steps"][0] = serde_json::json!({"id": "paint", "agent": "asker",
        "description": "paint the button", "depends_on": []});
    let id = p.proposal("paint", &doc);
    let run = p.orca(&["--json", "run", &id, "--yes"]);
    assert_eq!(run.status.code(), Some(4), "{run:?}");
    let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let server = Server::start(&p, &[]);
    let c = client();
    let (_, inbox) = get(&c, &server.url("/inbox"), &token).await;
    assert!(
        inbox.contains("Which colour should the button be?"),
        "{inbox}"
    );
    let (_, page) = get(&c, &server.url(&format!("/executions/{exec}")), &token).await;
    assert!(page.contains("id=\"answer\""), "an answer form: {page}");
    let n = nonce(&page, Some(&format!("/executions/{exec}/decide")));
    let (status, body, _) = post(
        &c,
        &server.url(&format!("/executions/{exec}/decide")),
        &token,
        &[("nonce", &n), ("decision", "answer"), ("guidance", "blue")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    eventually(
        Duration::from_secs(90),
        "the answered run to complete",
        || {
            let c = c.clone();
            let url = server.url(&format!("/executions/{exec}"));
            let token = token.clone();
            async move {
                let (_, page) = get(&c, &url, &token).await;
                page.contains("painted the button blue").then_some(())
            }
        },
    )
    .await;
}
