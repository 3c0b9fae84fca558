//! Every page of `orca serve` in headless Chromium, at a phone's width (390 px) and a laptop's
//! (1280 px): no page is wider than its window (`scrollWidth <= innerWidth`, counted over
//! every page, with a control that widens one page and must be counted); hostile Markdown and
//! HTML planted in a plan's goal, summary and steps and in a step's output runs nothing and
//! leaves no raw tag, in the browser and in the HTML served; a step's page follows a running
//! step live. Screenshots of the hostile pages go to the test's temp dir (the README's come
//! from `browser.rs`).

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests")]

use std::time::Duration;

use serde_json::{Value, json};

use crate::browser::Driver;
use crate::web_support::{Server, client, get, plan};

/// What a planner or a step could write to attack the page: each would change the title,
/// load something or run script if it became markup.
const HOSTILE: &str = "Ship `orca` **now** <script>document.title='pwned'</script> \
<img src=x onerror=\"document.title='pwned'\"> [click me](javascript:document.title='pwned') \
<iframe src=\"https://example.invalid\"></iframe>";

/// Raw tags that must never reach a page from that text.
const RAW: [&str; 5] = [
    "<script>document",
    "<img src=x",
    "<iframe src",
    "href=\"javascript",
    "onerror=\"document",
];

/// Measures the page: its width, the window's, script elements without `src`, elements
/// hostile text could have made, and whether the title was set by the planted script.
const MEASURE: &str = "return [document.documentElement.scrollWidth, window.innerWidth, \
document.querySelectorAll('script:not([src])').length, \
document.querySelectorAll('main img, main iframe, a[href^=\"javascript\"]').length, \
document.title === 'pwned'];";

async fn measure(d: &Driver) -> Value {
    d.call(
        "POST",
        "/execute/sync",
        Some(json!({ "script": MEASURE, "args": [] })),
    )
    .await
}

async fn resize(d: &Driver, width: u64) {
    d.call(
        "POST",
        "/window/rect",
        Some(json!({ "width": width, "height": 900 })),
    )
    .await;
}

/// A project with every kind of page: a proposal (hostile goal, summary and descriptions, a
/// lock, a long word), a completed run whose steps print hostile text, a failed step waiting
/// for a decision, a result waiting for acceptance. Returns the project and the ids.
struct Fixture {
    p: crate::web_support::Project,
    proposal: String,
    completed: String,
    waiting: String,
    result: String,
}

fn fixture() -> Fixture {
    let (p, result) = crate::web_results::project_with_a_result();
    let long = "x".repeat(300);
    std::fs::write(
        p.root.join("hostile.md"),
        format!("# Report\n{HOSTILE}\n{long}\nsummary: built `orca` {HOSTILE}\n"),
    )
    .unwrap();
    let mut doc = plan(&[
        (
            "build-the-release-artifacts-for-every-target",
            "cat hostile.md",
            &[],
        ),
        (
            "publish",
            "echo published",
            &["build-the-release-artifacts-for-every-target"],
        ),
    ]);
    doc["goal"] = json!(HOSTILE);
    doc["summary"] = json!(format!(
        "## Why\n\n- {HOSTILE}\n- {long}\n\n```\n{HOSTILE}\n```"
    ));
    doc["steps"][0]["description"] = json!(HOSTILE);
    doc["steps"][1]["locks"] = json!(["registry", "release-notes"]);
    doc["assumptions"] = json!([HOSTILE]);
    let proposal = p.proposal("pages", &doc);
    let again = p.proposal("pages-run", &doc);
    let out = p.orca(&["--json", "run", &again, "--yes"]);
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let completed = v["execution_id"].as_str().unwrap().to_owned();
    let waiting = p.waiting_execution("flaky");
    Fixture {
        p,
        proposal,
        completed,
        waiting,
        result,
    }
}

impl Fixture {
    /// Every page a signed-in person reads.
    fn pages(&self) -> Vec<(&'static str, String)> {
        let (pr, done, wait, res) = (&self.proposal, &self.completed, &self.waiting, &self.result);
        vec![
            ("inbox", "/inbox".to_owned()),
            ("plans", "/plans".to_owned()),
            ("plan", format!("/plans/{pr}")),
            ("approve", format!("/plans/{pr}/approve")),
            ("executions", "/executions".to_owned()),
            ("execution", format!("/executions/{done}")),
            ("execution-waiting", format!("/executions/{wait}")),
            ("execution-result", format!("/executions/{res}")),
            (
                "step-output",
                format!("/executions/{done}/steps/build-the-release-artifacts-for-every-target"),
            ),
            ("step-failed", format!("/executions/{wait}/steps/flaky")),
            ("audit", "/audit".to_owned()),
            ("audit-execution", format!("/audit?exec={done}")),
            ("audit-plan", format!("/audit?plan={pr}")),
        ]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_page_is_wider_than_a_phone_or_a_laptop_and_hostile_text_runs_nothing() {
    let f = fixture();
    let token = f.p.token("pages");
    let server = Server::start(&f.p, &[]);
    let shots = f.p.dir.path().join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let d = Driver::start(&f.p.dir.path().join("chromium-profile")).await;

    let mut visited = 0;
    let mut overflowing = Vec::new();
    let mut hostile = Vec::new();
    let mut sign_out_offered = Vec::new();
    for width in [390u64, 1280] {
        resize(&d, width).await;
        // Signed out: the sign-in page, and a page asked for without a token.
        d.call("DELETE", "/cookie", None).await;
        for (name, path) in [("sign-in", "/login"), ("signed-out", "/inbox")] {
            d.goto(&server.url(path)).await;
            if !d.find_all("nav form.logout").await.is_empty() {
                sign_out_offered.push(format!("{name}@{width}"));
            }
            let m = measure(&d).await;
            visited += 1;
            if m[0].as_u64() > m[1].as_u64() {
                overflowing.push(format!("{name}@{width}: {} > {}", m[0], m[1]));
            }
        }
        d.goto(&server.url(&format!("/login?token={token}"))).await;
        for (name, path) in f.pages() {
            d.goto(&server.url(&path)).await;
            let m = measure(&d).await;
            visited += 1;
            assert!(
                m[1].as_u64().unwrap() <= width,
                "control: the window is {width} px wide ({m})"
            );
            if m[0].as_u64() > m[1].as_u64() {
                overflowing.push(format!("{name}@{width}: {} > {}", m[0], m[1]));
            }
            if m[2] != 0 || m[3] != 0 || m[4] != false {
                hostile.push(format!("{name}@{width}: {m}"));
            }
            if width == 390 && ["audit-execution", "step-output", "plan"].contains(&name) {
                d.screenshot(&shots, &format!("{name}-phone.png")).await;
            }
            if width == 1280 && ["audit-execution", "step-output", "execution"].contains(&name) {
                d.screenshot(&shots, &format!("{name}.png")).await;
            }
        }
    }
    println!(
        "pages visited at 390 and 1280 px: {visited}; overflowing: {} {overflowing:?}",
        overflowing.len()
    );
    println!(
        "pages where hostile text ran or became markup: {} {hostile:?}",
        hostile.len()
    );
    println!(
        "signed-out pages offering `Sign out`: {} {sign_out_offered:?}",
        sign_out_offered.len()
    );

    // The hostile text is on the pages, as text.
    d.goto(&server.url(&format!("/plans/{}", f.proposal))).await;
    let shown = d.text("main").await;
    assert!(
        shown.contains("<script>document.title='pwned'</script>"),
        "{shown}"
    );
    assert!(
        !d.find_all("main h1 code").await.is_empty(),
        "`orca` became code"
    );
    // A graph node leads to its step; the lock is drawn.
    let svg = d.attr("svg.dag", "aria-label").await;
    assert!(svg.is_some());
    d.goto(&server.url(&format!("/executions/{}", f.completed)))
        .await;
    let node = d.find_all("svg.dag a.node").await.len();
    let locks = d
        .call(
            "POST",
            "/execute/sync",
            Some(json!({ "script": "return document.querySelector('svg.dag').textContent;", "args": [] })),
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned();
    println!("graph nodes linking to steps: {node}; graph text: {locks}");
    assert_eq!(node, 2);
    assert!(locks.contains("lock: registry"), "{locks}");

    // The control: the same measurement counts a page made wider than the window.
    resize(&d, 390).await;
    d.call(
        "POST",
        "/execute/sync",
        Some(json!({ "script": "var w = document.createElement('div'); w.style.width = '2000px'; w.style.height = '1px'; document.querySelector('main').appendChild(w);", "args": [] })),
    )
    .await;
    let m = measure(&d).await;
    println!(
        "control, a 2000 px element added at 390 px: {} > {}",
        m[0], m[1]
    );
    assert!(
        m[0].as_u64() > m[1].as_u64(),
        "the measurement misses an overflow: {m}"
    );

    // Signing out leads to a page without "Sign out".
    d.goto(&server.url("/inbox")).await;
    d.click("nav form.logout button").await;
    d.find("input[name=token]").await;
    assert_eq!(d.find_all("nav form.logout").await.len(), 0);

    assert!(overflowing.is_empty(), "{overflowing:?}");
    assert!(sign_out_offered.is_empty(), "{sign_out_offered:?}");
    assert!(hostile.is_empty(), "{hostile:?}");
    d.call("DELETE", "", None).await;
}

/// The HTML served, not only what a browser made of it: no raw tag from the planted text on
/// any page, and the planted text is really in what the pages show (control: counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_markdown_and_html_reach_no_page_as_markup() {
    let f = fixture();
    let token = f.p.token("pages");
    let server = Server::start(&f.p, &[]);
    let c = client();
    let mut raw = 0;
    let mut escaped = 0;
    for (name, path) in f.pages() {
        let (status, body) = get(&c, &server.url(&path), &token).await;
        assert_eq!(status, 200, "{name}: {body}");
        for bad in RAW {
            if body.contains(bad) {
                raw += 1;
                eprintln!("{name}: raw `{bad}`");
            }
        }
        escaped += body.matches("&lt;script&gt;document.title").count();
    }
    // The step's page streams live while it could change: its events carry the same text.
    println!("raw tags from planted text: {raw}; escaped copies shown: {escaped}");
    assert!(
        escaped >= 6,
        "control: the planted text is shown ({escaped})"
    );
    assert_eq!(raw, 0);
    let logs = f.p.orca(&["exec", "logs", &f.completed]);
    let logs = String::from_utf8_lossy(&logs.stdout);
    assert!(
        logs.contains("<script>document.title"),
        "control: the step's output holds the raw text: {logs}"
    );
}

/// A step's page while it runs: the output and the end arrive without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_page_follows_the_running_step_live() {
    let p = crate::web_support::Project::new();
    let token = p.token("live");
    // The step ends when the test lets it (a file in the project), at most two minutes on: a
    // fixed sleep ended before a loaded machine opened the page.
    let mut doc = plan(&[(
        "slow",
        "for i in $(seq 600); do [ -e release ] && break; sleep 0.2; done; echo 'finally `done`'",
        &[],
    )]);
    doc["goal"] = json!("A slow step");
    let id = p.proposal("slow", &doc);
    let server = Server::start(&p, &[]);
    let d = Driver::start(&p.dir.path().join("chromium-profile")).await;
    d.goto(&server.url(&format!("/login?token={token}"))).await;
    d.goto(&server.url(&format!("/plans/{id}"))).await;
    d.click("#approve").await;
    d.click("#confirm").await;
    d.click("#run").await;
    d.click("a[href$=\"/steps/slow\"]").await;
    // The click navigates: the step page (not the execution page still shown) before reading it.
    let first = d
        .wait_text("#live", "Attempt 1", Duration::from_secs(30))
        .await;
    println!("step page when opened: {first:?}");
    assert!(
        !first.contains("finally"),
        "control: the page was opened while the step ran: {first}"
    );
    std::fs::write(p.root.join("release"), "").unwrap();
    let text = d
        .wait_text("#live", "finally `done`", Duration::from_secs(60))
        .await;
    assert!(text.contains("completed"), "{text}");
    assert_eq!(
        d.wait_attr("#live", "data-ended", Duration::from_secs(30))
            .await
            .as_deref(),
        Some("1"),
        "the end came over the event stream (set by live.js), not by a reload"
    );
    d.call("DELETE", "", None).await;
}
