//! `orca serve`'s guards, against a real server on a free local port: the bind policy, TLS,
//! notifications (the example webhook script too), default-deny expiry, hostile plan text,
//! planted secrets, and a prompt shutdown with a live page open.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "tests print what they count"
)]

use crate::web_support;

use std::time::Duration;

use web_support::{Project, Server, actor_in_audit, client, eventually, get, plan};

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
    let files = orca_testkit::certs::make(p.dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let (cert, key) = (files.server_cert, files.server_key);
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
    let c = orca_llm::http_client_builder()
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
    // The hanging one leaves a grandchild behind (in its process group): it must die too.
    let pids = p.dir.path().join("notifier-grandchildren");
    let hang = format!("sleep 600 & echo $! >> '{}'; wait", pids.display());
    let mut orphans = 0;
    for (command, expect) in [
        (hang.as_str(), "did not finish within 1s"),
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
        // Stopped as a service manager stops it: notifiers still running are ended with it.
        let mut server = server;
        assert_eq!(server.terminate(Duration::from_secs(30)), Some(0));
    }
    let grandchildren: Vec<String> = web_support::read(&pids)
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(!grandchildren.is_empty(), "the hanging notifier ran");
    for pid in &grandchildren {
        let alive = || {
            std::process::Command::new("kill")
                .args(["-0", pid])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let start = std::time::Instant::now();
        while alive() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if alive() {
            orphans += 1;
        }
    }
    println!(
        "hanging notifiers' grandchildren left alive after the time limit: {orphans} of {}",
        grandchildren.len()
    );
    assert_eq!(orphans, 0);
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
        format!("/executions/{exec}/steps/leaky"),
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

/// A revoked token stops working at once, on a running server; listing never shows a secret;
/// signing out clears the cookie.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_stops_working_at_once() {
    let p = Project::new();
    let phone = p.token("phone");
    let laptop = p.token("laptop");
    let server = Server::start(&p, &[]);
    let c = client();
    assert_eq!(get(&c, &server.url("/inbox"), &phone).await.0, 200);
    let listed = p.orca(&["serve", "--list-tokens"]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listed.contains("phone") && listed.contains("laptop"),
        "{listed}"
    );
    assert!(
        !listed.contains(&phone) && !listed.contains(&laptop),
        "no secret listed"
    );
    let out = p.orca(&["serve", "--revoke-token", "phone"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        get(&c, &server.url("/inbox"), &phone).await.0,
        401,
        "revoked at once"
    );
    assert_eq!(
        get(&c, &server.url("/inbox"), &laptop).await.0,
        200,
        "the others live"
    );
    let out = p.orca(&["serve", "--revoke-token", "phone"]);
    assert_eq!(out.status.code(), Some(2), "no such token: {out:?}");
    let r = c
        .post(server.url("/logout"))
        .bearer_auth(&laptop)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cookie.starts_with("orca_token=;") && cookie.contains("Max-Age=0"),
        "{cookie}"
    );
}
