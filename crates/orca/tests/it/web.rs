//! `orca serve` end to end: a real server on a free local port, driven over HTTP. Every page,
//! every action, the token and single-use checks, races with the command line, a step's
//! question answered in the page. (Bind policy, TLS, notifications, expiry, hostile input,
//! secrets and shutdown: `web_policy.rs`.)

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests")]

use crate::common;
use crate::web_support;

use std::time::Duration;

use web_support::{
    Project, Server, actor_in_audit, client, eventually, get, nonce, plan, post, shown_digest,
};

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
    let mut sizes = Vec::new();
    for path in [
        "/inbox".to_owned(),
        "/plans".to_owned(),
        format!("/plans/{plan_id}"),
        format!("/plans/{plan_id}/dag.svg"),
        format!("/plans/{plan_id}/approve"),
        "/executions".to_owned(),
        format!("/executions/{waiting}"),
        format!("/executions/{waiting}/steps/flaky"),
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
        let body = r.text().await.unwrap();
        assert_clean(&path, &body);
        sizes.push(format!("{path} {}B", body.len()));
        pages += 1;
    }
    println!("pages served with CSP and no inline code: {pages}");
    println!("page sizes: {}", sizes.join(", "));
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
    assert!(plan_page.contains(&format!("href=\"/plans/{plan_id}/approve?digest=sha256:")));
    let (_, confirm) = get(
        &c,
        &server.url(&format!("/plans/{plan_id}/approve")),
        &token,
    )
    .await;
    assert!(confirm.contains("signing key"), "the page says what signs");
    let n = nonce(&confirm, Some(&format!("/plans/{plan_id}/approve")));
    let d = shown_digest(&confirm);
    let url = server.url(&format!("/plans/{plan_id}/approve"));
    let (status, _, _) = post(&c, &url, &token, &[("nonce", &n), ("digest", &d)]).await;
    assert_eq!(status, 400, "no confirmation, no approval");
    let (status, _, _) = post(&c, &url, &token, &[("nonce", &n), ("confirm", "yes")]).await;
    assert_eq!(status, 400, "no digest of the content shown, no approval");
    let form = [("nonce", n.as_str()), ("confirm", "yes"), ("digest", &d)];
    let (status, body, _) = post(&c, &url, &token, &form).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("approved plan"), "{body}");
    let (status, body, _) = post(&c, &url, &token, &form).await;
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
        let d = shown_digest(&confirm);
        let url = server.url(&format!("/plans/{id}/approve"));
        let cli = {
            let root = p.root.clone();
            let home = p.home.clone();
            let id = id.clone();
            std::thread::spawn(move || common::orca(&root, &home, &["plan", "reject", &id]))
        };
        // Staggered, so that either side can be first.
        tokio::time::sleep(Duration::from_millis(60 * i as u64)).await;
        let (status, body, _) = post(
            &c,
            &url,
            &token,
            &[("nonce", &n), ("confirm", "yes"), ("digest", &d)],
        )
        .await;
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
        wiremock::ResponseTemplate::new(200).set_body_json(orca_testkit::fake_model::tool_calls(
            "chatcmpl-test",
            &serde_json::json!("asker-model"),
            vec![orca_testkit::fake_model::tool_call(
                "call_1",
                "submit_result",
                &args,
            )],
        ))
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
