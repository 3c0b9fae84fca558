//! The approval binds the content shown. On every surface where a human is shown a plan and
//! approves it — the web inbox's confirmation page, the terminal's approval prompts (`run` and
//! `plan approve`), an agent host's MCP elicitation, and `plan approve --digest` — the content is changed behind the
//! human's back after it was shown, the way an attacker would: a request for changes and a new
//! submission through the planner (the same plan id, new content), or an edit of the stored plan
//! file. Then the human approves. Each surface counts the approvals of changed content and the
//! runs of it (goal 0 each); an unchanged plan approves and runs (the control).
//!
//! `cargo test -p orca --test it approval_binding:: -- --nocapture` prints the counts.

#![expect(clippy::unwrap_used, reason = "tests may unwrap")]

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common;
use crate::mcp_support::{self, Human, Meanwhile};
use crate::web_support::{self, client, get, nonce, post, shown_digest};

/// What the human is shown: one step writing `ran.txt`.
const SHOWN: &str = "echo shown > ran.txt";
/// What the attacker puts in its place.
const CHANGED: &str = "echo CHANGED > pwned.txt";

/// How the content is changed behind the human.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behind {
    /// `plan request-changes`, then the planner revises the draft and submits it again.
    Resubmitted,
    /// The stored plan file is edited in place.
    FileEdited,
}

const BEHIND: [Behind; 2] = [Behind::Resubmitted, Behind::FileEdited];

fn orca(root: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    common::orca(root, home, args)
}

fn plan_json(root: &Path, home: &Path, plan: &str) -> Value {
    let out = orca(root, home, &["--json", "plan", "show", plan]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn doc(command: &str) -> Value {
    json!({
        "goal": "an approval test plan",
        "assumptions": ["a POSIX shell"],
        "risks": ["none: it writes only in the project"],
        "verification": ["ran.txt says shown"],
        "steps": [{"id": "hello", "agent": "shell", "description": "say hello",
                   "command": command, "depends_on": []}],
    })
}

fn create(root: &Path, home: &Path, name: &str, document: &Value) -> String {
    let file = root.join(format!("{name}.plan.json"));
    std::fs::write(&file, document.to_string()).unwrap();
    let out = orca(
        root,
        home,
        &["--json", "plan", "create", "--file", file.to_str().unwrap()],
    );
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["plan_id"].as_str().unwrap().to_owned()
}

/// A scripted planner that, asked to revise `plan`, puts [`CHANGED`] in its step and submits.
fn planner_config(root: &Path, plan: &str) {
    let script = json!({"turns": [
        {"tool_calls": [
            {"name": "orca_plan_update_step", "arguments":
                {"plan_id": plan, "step_id": "hello", "changes": {"command": CHANGED}}},
            {"name": "orca_plan_submit", "arguments": {"plan_id": plan}}]},
        {"tool_calls": [{"name": "submit_result", "arguments":
            {"type": "plan", "plan_id": plan, "stage": "proposal", "message": "revised"}}]}
    ]});
    std::fs::write(root.join("revise.json"), script.to_string()).unwrap();
    std::fs::write(
        root.join(".orca/config.toml"),
        "[agents.planner]\nbackend = \"scripted\"\nscript = \"revise.json\"\n",
    )
    .unwrap();
}

/// Changes `plan`'s content behind the human; afterwards it is a proposal holding [`CHANGED`].
fn change_behind(root: &Path, home: &Path, plan: &str, how: Behind) {
    match how {
        Behind::Resubmitted => {
            planner_config(root, plan);
            let out = orca(
                root,
                home,
                &[
                    "plan",
                    "request-changes",
                    plan,
                    "--feedback",
                    "do it differently",
                ],
            );
            assert!(out.status.success(), "{out:?}");
            // Exit 4: the new proposal waits for a human; that is the point.
            let _ = orca(root, home, &["ask", &format!("revise plan {plan}")]);
        }
        Behind::FileEdited => {
            let path = root.join(".orca/plans").join(format!("{plan}.json"));
            let mut stored: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            stored["content"]["steps"][0]["command"] = json!(CHANGED);
            std::fs::write(&path, serde_json::to_string_pretty(&stored).unwrap()).unwrap();
        }
    }
    let now = plan_json(root, home, plan);
    assert_eq!(now["stage"], "proposal", "{now}");
    assert_eq!(now["content"]["steps"][0]["command"], CHANGED, "{now}");
}

/// Whether changed content got approved (an approval whose digest is not the one shown) or
/// ran; (approved, ran).
fn got_through(root: &Path, home: &Path, plan: &str, shown: &str) -> (usize, usize) {
    let now = plan_json(root, home, plan);
    let approved = usize::from(
        now["stage"] == "approved" && now["approval"]["digest"].as_str() != Some(shown),
    );
    let ran = usize::from(root.join("pwned.txt").exists());
    (approved, ran)
}

// --- web -------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_approval_of_changed_content_is_refused() {
    let p = web_support::Project::new();
    let token = p.token("me");
    let server = web_support::Server::start(&p, &[]);
    let c = client();
    let (mut approved, mut ran, mut refused, mut tries) = (0, 0, 0, 0);
    for how in BEHIND {
        let plan = create(&p.root, &p.home, &format!("web-{how:?}"), &doc(SHOWN));
        // The human reads the plan page, goes to the confirmation page, and confirms after
        // the content changed.
        let (_, page) = get(&c, &server.url(&format!("/plans/{plan}")), &token).await;
        let link = format!("/plans/{plan}/approve?digest=");
        let at = page
            .find(&link)
            .expect("the approve link carries the digest")
            + link.len();
        let page_digest = page[at..at + 71].to_owned();
        let (status, confirm) = get(&c, &server.url(&format!("{link}{page_digest}")), &token).await;
        assert_eq!(status, 200, "{confirm}");
        let n = nonce(&confirm, Some(&format!("/plans/{plan}/approve")));
        let shown = shown_digest(&confirm);
        assert_eq!(shown, page_digest);
        // A second tab of the same page, kept for later.
        let (_, second) = get(&c, &server.url(&format!("/plans/{plan}/approve")), &token).await;
        let n2 = nonce(&second, Some(&format!("/plans/{plan}/approve")));
        change_behind(&p.root, &p.home, &plan, how);
        let url = server.url(&format!("/plans/{plan}/approve"));
        let (status, body, _) = post(
            &c,
            &url,
            &token,
            &[("nonce", &n), ("confirm", "yes"), ("digest", &shown)],
        )
        .await;
        tries += 1;
        if status == 409 && body.contains("changed after it was shown") {
            refused += 1;
        } else {
            eprintln!("{how:?}: {status} {body}");
        }
        let (a, r) = got_through(&p.root, &p.home, &plan, &shown);
        approved += a;
        ran += r;
        // The plan page shown before the change leads to no confirmation of the new content.
        let (status, body) = get(&c, &server.url(&format!("{link}{page_digest}")), &token).await;
        tries += 1;
        if status == 409 && body.contains("changed after its page was shown") {
            refused += 1;
        } else {
            eprintln!("{how:?}: {status} {body}");
        }
        // The second tab's form with its digest swapped for the new content's: its token was
        // issued for the content shown, so it approves nothing.
        let (_, fresh) = get(&c, &server.url(&format!("/plans/{plan}/approve")), &token).await;
        let new_digest = shown_digest(&fresh);
        assert_ne!(new_digest, shown);
        let (status, body, _) = post(
            &c,
            &url,
            &token,
            &[("nonce", &n2), ("confirm", "yes"), ("digest", &new_digest)],
        )
        .await;
        tries += 1;
        if status == 409 && body.contains("issued for another action") {
            refused += 1;
        } else {
            eprintln!("{how:?}: {status} {body}");
        }
        let (a, r) = got_through(&p.root, &p.home, &plan, &shown);
        approved += a;
        ran += r;
        assert_eq!(plan_json(&p.root, &p.home, &plan)["stage"], "proposal");
    }
    // The control: an unchanged plan approves through the same forms, and runs.
    let plan = create(&p.root, &p.home, "web-control", &doc(SHOWN));
    let (_, confirm) = get(&c, &server.url(&format!("/plans/{plan}/approve")), &token).await;
    let n = nonce(&confirm, Some(&format!("/plans/{plan}/approve")));
    let shown = shown_digest(&confirm);
    let (status, body, _) = post(
        &c,
        &server.url(&format!("/plans/{plan}/approve")),
        &token,
        &[("nonce", &n), ("confirm", "yes"), ("digest", &shown)],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let now = plan_json(&p.root, &p.home, &plan);
    assert_eq!(now["approval"]["digest"], shown.as_str());
    let out = orca(&p.root, &p.home, &["run", &plan]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(web_support::read(&p.root.join("ran.txt")), "shown\n");
    println!(
        "web: {tries} approvals of changed content tried, {refused} refused; approvals of changed content: {approved}, runs of it: {ran}"
    );
    assert_eq!(approved + ran, 0);
    assert_eq!(refused, tries);
}

// --- the terminal prompt ------------------------------------------------------------------

/// Everything the terminal behind `controller` shows, as it comes; the reader ends when the
/// child has closed the terminal.
fn screen(controller: &std::fs::File) -> (Arc<Mutex<String>>, std::thread::JoinHandle<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    let mut reader = controller.try_clone().unwrap();
    let reading = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (text, reading)
}

fn wait_for(screen: &Mutex<String>, what: &str) {
    let start = Instant::now();
    while !screen.lock().unwrap().contains(what) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "`{what}` never appeared: {}",
            screen.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `orca run PLAN` at a terminal: waits for the approval question, lets `meanwhile` act,
/// answers approve (no note), and returns the exit code and the screen.
fn run_at_terminal(
    root: &Path,
    home: &Path,
    plan: &str,
    meanwhile: impl FnOnce(),
) -> (Option<i32>, String) {
    at_terminal(
        root,
        home,
        &["run", plan],
        ("Approve this plan?", b"approve\n\n"),
        meanwhile,
    )
}

/// `orca ARGS` at a terminal: waits for `question`, lets `meanwhile` act, types `answer`, and
/// returns the exit code and the screen.
fn at_terminal(
    root: &Path,
    home: &Path,
    args: &[&str],
    (question, answer): (&str, &[u8]),
    meanwhile: impl FnOnce(),
) -> (Option<i32>, String) {
    let (mut controller, terminal) = orca_testkit::pty::openpty();
    let mut child = {
        let mut cmd = common::isolated(root, home);
        cmd.args(args)
            .stdin(Stdio::from(terminal.try_clone().unwrap()))
            .stderr(Stdio::from(terminal))
            .stdout(Stdio::piped());
        cmd.spawn().unwrap()
    };
    let (shown, reading) = screen(&controller);
    // A failure before the answer must not leave the command waiting at its prompt.
    let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(&shown, question);
        meanwhile();
    }));
    if let Err(e) = asked {
        let _ = child.kill();
        let _ = child.wait();
        std::panic::resume_unwind(e);
    }
    controller.write_all(answer).unwrap();
    let status = orca_testkit::pty::wait(&mut child, "the interactive command");
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    reading.join().unwrap();
    drop(controller);
    let text = format!("{}{out}", shown.lock().unwrap());
    (status.code(), text)
}

/// The digest the terminal showed with the approval question.
fn digest_on_screen(text: &str) -> String {
    let at = text
        .find("Digest: sha256:")
        .expect("the prompt shows the digest")
        + 8;
    text[at..at + 71].to_owned()
}

#[test]
fn terminal_approval_of_changed_content_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut approved, mut ran, mut refused) = (0, 0, 0);
    for how in BEHIND {
        let (root, home) = project(dir.path(), &format!("tty-{how:?}"));
        let plan = create(&root, &home, "tty", &doc(SHOWN));
        let (code, text) = run_at_terminal(&root, &home, &plan, || {
            change_behind(&root, &home, &plan, how);
        });
        let shown = digest_on_screen(&text);
        if code == Some(6) && text.contains("changed after it was shown to you") {
            refused += 1;
        } else {
            eprintln!("{how:?}: exit {code:?}: {text}");
        }
        let (a, r) = got_through(&root, &home, &plan, &shown);
        approved += a;
        ran += r;
        assert_eq!(plan_json(&root, &home, &plan)["stage"], "proposal");
    }
    // The control: the same prompt approves an unchanged plan, which runs.
    let (root, home) = project(dir.path(), "tty-control");
    let plan = create(&root, &home, "tty", &doc(SHOWN));
    let (code, text) = run_at_terminal(&root, &home, &plan, || {});
    assert_eq!(code, Some(0), "{text}");
    let now = plan_json(&root, &home, &plan);
    assert_eq!(
        now["approval"]["digest"].as_str(),
        Some(digest_on_screen(&text).as_str())
    );
    assert_eq!(web_support::read(&root.join("ran.txt")), "shown\n");
    println!(
        "terminal: {} approvals of changed content tried, {refused} refused; approvals of changed content: {approved}, runs of it: {ran}",
        BEHIND.len()
    );
    assert_eq!(approved + ran, 0);
    assert_eq!(refused, BEHIND.len());
}

/// `plan approve PLAN` at a terminal, without `--digest`: it shows the content and its digest
/// and approves exactly that; content changed while the question waits is refused; `n`
/// approves nothing.
#[test]
fn plan_approve_at_a_terminal_binds_the_content_it_shows() {
    let dir = tempfile::tempdir().unwrap();
    let question = ("approve exactly this content", &b"y\n"[..]);
    let (mut approved, mut ran, mut refused) = (0, 0, 0);
    for how in BEHIND {
        let (root, home) = project(dir.path(), &format!("approve-tty-{how:?}"));
        let plan = create(&root, &home, "tty", &doc(SHOWN));
        let (code, text) = at_terminal(&root, &home, &["plan", "approve", &plan], question, || {
            change_behind(&root, &home, &plan, how);
        });
        let at = text.find("(digest sha256:").expect("the digest is shown") + 8;
        let shown = text[at..at + 71].to_owned();
        if code == Some(6) {
            refused += 1;
        } else {
            eprintln!("{how:?}: exit {code:?}: {text}");
        }
        let _ = orca(&root, &home, &["run", &plan]);
        let (a, r) = got_through(&root, &home, &plan, &shown);
        approved += a;
        ran += r;
    }
    // Controls: `n` approves nothing; `y` approves the unchanged content, which runs.
    let (root, home) = project(dir.path(), "approve-tty-control");
    let plan = create(&root, &home, "tty", &doc(SHOWN));
    let (code, text) = at_terminal(
        &root,
        &home,
        &["plan", "approve", &plan],
        ("approve exactly this content", b"n\n"),
        || {},
    );
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(plan_json(&root, &home, &plan)["stage"], "proposal");
    let (code, text) = at_terminal(&root, &home, &["plan", "approve", &plan], question, || {});
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(plan_json(&root, &home, &plan)["stage"], "approved");
    let out = orca(&root, &home, &["run", &plan]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(web_support::read(&root.join("ran.txt")), "shown\n");
    println!(
        "plan approve at a terminal: {} approvals of changed content tried, {refused} refused; approvals of changed content: {approved}, runs of it: {ran}",
        BEHIND.len()
    );
    assert_eq!(approved + ran, 0);
    assert_eq!(refused, BEHIND.len());
}

/// A new project under `dir`: (root, user config home).
fn project(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let root = dir.join(name);
    let home = dir.join(format!("{name}-config"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let out = orca(&root, &home, &["init"]);
    assert!(out.status.success(), "{out:?}");
    (root, home)
}

// --- `plan approve --digest` ----------------------------------------------------------------

#[test]
fn plan_approve_with_the_digest_read_refuses_changed_content() {
    let dir = tempfile::tempdir().unwrap();
    let (mut approved, mut ran, mut refused) = (0, 0, 0);
    for how in BEHIND {
        let (root, home) = project(dir.path(), &format!("cli-{how:?}"));
        let plan = create(&root, &home, "cli", &doc(SHOWN));
        let show = orca(&root, &home, &["plan", "show", &plan]);
        let text = String::from_utf8_lossy(&show.stdout).into_owned();
        let at = text.find("Digest:    ").unwrap() + 11;
        let shown = text[at..at + 71].to_owned();
        change_behind(&root, &home, &plan, how);
        let out = orca(
            &root,
            &home,
            &["plan", "approve", &plan, "--digest", &shown],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(6) && err.contains("nothing was approved") {
            refused += 1;
        }
        let _ = orca(&root, &home, &["run", &plan]);
        let (a, r) = got_through(&root, &home, &plan, &shown);
        approved += a;
        ran += r;
    }
    let (root, home) = project(dir.path(), "cli-control");
    let plan = create(&root, &home, "cli", &doc(SHOWN));
    let out = orca(
        &root,
        &home,
        &["plan", "approve", &plan, "--digest", "sha256:nothex"],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let shown = plan_json(&root, &home, &plan);
    assert_eq!(shown["stage"], "proposal");
    let text =
        String::from_utf8_lossy(&orca(&root, &home, &["plan", "show", &plan]).stdout).into_owned();
    let at = text.find("Digest:    ").unwrap() + 11;
    let out = orca(
        &root,
        &home,
        &["plan", "approve", &plan, "--digest", &text[at..at + 71]],
    );
    assert!(out.status.success(), "{out:?}");
    println!(
        "plan approve --digest: {} approvals of changed content tried, {refused} refused; approvals of changed content: {approved}, runs of it: {ran}",
        BEHIND.len()
    );
    assert_eq!(approved + ran, 0);
    assert_eq!(refused, BEHIND.len());
}

// --- MCP elicitation ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicited_approval_of_changed_content_is_refused() {
    let (mut approved, mut ran, mut refused, mut tries) = (0, 0, 0, 0);
    for rounds in [false, true] {
        for how in BEHIND {
            let p = mcp_support::Project::new();
            let plan = create(&p.root, &p.config_home, "mcp", &mcp_plan());
            let shown_digest = Arc::new(Mutex::new(String::new()));
            let meanwhile = {
                let (root, home, plan, seen) = (
                    p.root.clone(),
                    p.config_home.clone(),
                    plan.clone(),
                    shown_digest.clone(),
                );
                // A failure here must not leave the host without an answer (the server would
                // wait for it): it is caught and the test fails after the call.
                Meanwhile(Arc::new(move |message: &str| {
                    let changed = std::panic::catch_unwind(|| {
                        change_behind(&root, &home, &plan, how);
                    });
                    *seen.lock().unwrap() = if changed.is_ok() {
                        digest_on_screen(message)
                    } else {
                        "not changed".to_owned()
                    };
                }))
            };
            let (host, asked) = if rounds {
                p.connect_rounds_meanwhile("claude-code", Human::Accepts, Some(meanwhile))
                    .await
            } else {
                p.connect_meanwhile("claude-code", Human::Accepts, meanwhile)
                    .await
            };
            let answer = mcp_support::call(&host, "plan_ask_human", json!({"plan": plan}))
                .await
                .unwrap();
            assert_eq!(asked.load(Ordering::SeqCst), 1);
            tries += 1;
            if answer.is_error == Some(true) {
                refused += 1;
            } else {
                eprintln!("{how:?}: {}", mcp_support::text(&answer));
            }
            let shown = shown_digest.lock().unwrap().clone();
            assert!(
                shown.starts_with("sha256:"),
                "the content was not changed: {shown}"
            );
            let _ = mcp_support::call(&host, "plan_run", json!({"plan": plan})).await;
            let (a, r) = got_through(&p.root, &p.config_home, &plan, &shown);
            approved += a;
            ran += r;
            host.cancel().await.unwrap();
        }
    }
    println!(
        "mcp elicitation: {tries} approvals of changed content tried, {refused} refused; approvals of changed content: {approved}, runs of it: {ran}"
    );
    assert_eq!(approved + ran, 0);
    assert_eq!(refused, tries);
}

/// The plan the MCP test client expects to be shown ("say hello"), writing `ran.txt`.
fn mcp_plan() -> Value {
    let mut d = mcp_support::simple_plan();
    d["steps"][0]["command"] = json!(SHOWN);
    d
}
