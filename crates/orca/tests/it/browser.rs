//! `orca serve` in a real browser: headless Chromium driven over WebDriver (Debian's
//! `chromium` and `chromium-driver`; `.ci/setup` installs them). Opens the inbox, approves a
//! plan through the confirmation page, starts it, and watches the run complete live (server-
//! sent events, no reload), then stops a failed step from its page. Screenshots go to a temp
//! dir, or to `$ORCA_SCREENSHOTS` (e.g. `docs/screenshots`) when set.

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests")]

use crate::web_support;

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use web_support::{Project, Server, plan};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub(crate) struct Driver {
    child: Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

impl Drop for Driver {
    /// The driver leads its own process group, which the browser joins: a failing test
    /// (no session deleted) leaves no browser behind.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn which(var: &str, names: &[&str]) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    for n in names {
        for dir in ["/usr/bin", "/usr/local/bin", "/usr/lib/chromium"] {
            let p = Path::new(dir).join(n);
            if p.exists() {
                return p;
            }
        }
    }
    panic!(
        "{} not found: install Debian's chromium and chromium-driver (`.ci/setup` does), or set {var}",
        names[0]
    );
}

impl Driver {
    pub(crate) async fn start(profile: &Path) -> Self {
        let driver = which("ORCA_CHROMEDRIVER", &["chromedriver"]);
        let browser = which("ORCA_CHROMIUM", &["chromium", "chromium-browser"]);
        // A free port for the driver (it cannot be told to pick one itself).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let home = profile.with_extension("home");
        std::fs::create_dir_all(&home).unwrap();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .process_group(0)
            // The browser's own files (crash reports, caches) stay in the test's temp dir.
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let base = format!("http://127.0.0.1:{port}");
        let http = orca_llm::http_client_builder()
            .timeout(Duration::from_secs(90))
            .build()
            .unwrap();
        let start = Instant::now();
        loop {
            if let Ok(r) = http.get(format!("{base}/status")).send().await
                && r.status().is_success()
            {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "chromedriver did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": browser,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-breakpad", "--disable-crash-reporter",
                    "--window-size=900,1150",
                    format!("--user-data-dir={}", profile.display()),
                ]
            }
        }}});
        let r: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {r}"))
            .to_owned();
        Self {
            child,
            base,
            session,
            http,
        }
    }

    pub(crate) async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let req = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body.unwrap_or_else(|| json!({}))),
        };
        let v: Value = req.send().await.unwrap().json().await.unwrap();
        v["value"].clone()
    }

    pub(crate) async fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url }))).await;
    }

    pub(crate) async fn find_all(&self, css: &str) -> Vec<String> {
        let v = self
            .call(
                "POST",
                "/elements",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await;
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first element matching `css`, waiting (up to 30 s) for a page still loading after a
    /// click: on a loaded 2-core CI box the next page can arrive after the click returns.
    pub(crate) async fn find(&self, css: &str) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(e) = self.find_all(css).await.into_iter().next() {
                return e;
            }
            if std::time::Instant::now() > deadline {
                let page = self.call("GET", "/source", None).await;
                panic!("no element `{css}` within 30 s in {page}")
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    pub(crate) async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.call("POST", &format!("/element/{e}/click"), None)
            .await;
    }

    pub(crate) async fn text(&self, css: &str) -> String {
        let e = self.find(css).await;
        self.call("GET", &format!("/element/{e}/text"), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub(crate) async fn attr(&self, css: &str, name: &str) -> Option<String> {
        let e = self.find_all(css).await.into_iter().next()?;
        self.call("GET", &format!("/element/{e}/attribute/{name}"), None)
            .await
            .as_str()
            .map(str::to_owned)
    }

    pub(crate) async fn title(&self) -> String {
        self.call("GET", "/title", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub(crate) async fn screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        let b64 = self.call("GET", "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = dir.join(name);
        std::fs::write(&path, png).unwrap();
        path
    }

    /// The attribute once it is set, or `None` after `limit`.
    pub(crate) async fn wait_attr(&self, css: &str, name: &str, limit: Duration) -> Option<String> {
        let start = Instant::now();
        loop {
            let value = self.attr(css, name).await;
            if value.is_some() || start.elapsed() >= limit {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    pub(crate) async fn wait_text(&self, css: &str, what: &str, limit: Duration) -> String {
        let start = Instant::now();
        loop {
            if !self.find_all(css).await.is_empty() {
                let t = self.text(css).await;
                if t.contains(what) {
                    return t;
                }
            }
            assert!(start.elapsed() < limit, "`{css}` never showed `{what}`");
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_approve_and_watch_the_run_complete_live_in_chromium() {
    let started = Instant::now();
    let p = Project::new();
    let token = p.token("laptop");
    let mut doc = plan(&[
        ("prepare", "sleep 1 && echo prepared", &[]),
        ("lint", "sleep 2 && echo 'lint: 0 warnings'", &["prepare"]),
        ("unit-tests", "sleep 3 && echo '42 passed'", &["prepare"]),
        ("docs", "sleep 1 && echo 'docs built'", &["prepare"]),
        (
            "package",
            "sleep 1 && echo 'orca-0.1.0.tar.gz'",
            &["lint", "unit-tests", "docs"],
        ),
    ]);
    doc["goal"] = json!("Check and package a release");
    let plan_id = p.proposal("release", &doc);
    let waiting = p.waiting_execution("deploy-check");
    let server = Server::start(&p, &[]);
    let shots = std::env::var_os("ORCA_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| p.dir.path().join("screenshots"));
    std::fs::create_dir_all(&shots).unwrap();
    let profile = p.dir.path().join("chromium-profile");
    let d = Driver::start(&profile).await;

    // Sign in with the link form of the token; land on the inbox.
    d.goto(&server.url(&format!("/login?token={token}"))).await;
    assert!(d.title().await.starts_with("Inbox"), "{}", d.title().await);
    let items = d.find_all(".inbox-item").await.len();
    println!("inbox items shown in the browser: {items}");
    assert_eq!(items, 2);
    let inbox = d.screenshot(&shots, "inbox.png").await;
    // The same inbox on a phone-sized window.
    d.call(
        "POST",
        "/window/rect",
        Some(json!({ "width": 412, "height": 880 })),
    )
    .await;
    d.screenshot(&shots, "inbox-phone.png").await;
    d.call(
        "POST",
        "/window/rect",
        Some(json!({ "width": 900, "height": 1150 })),
    )
    .await;

    // Open the plan from the inbox: its DAG is drawn.
    d.click(&format!("a.decide[href=\"/plans/{plan_id}\"]"))
        .await;
    assert!(
        !d.find_all("svg.dag").await.is_empty(),
        "the DAG is on the page"
    );
    let plan_shot = d.screenshot(&shots, "plan.png").await;

    // Approve through the confirmation page.
    d.click("#approve").await;
    assert!(d.title().await.starts_with("Approve"));
    d.click("#confirm").await;
    let result = d.text("#result").await;
    assert!(
        result.contains("approved plan") && result.contains("web:laptop"),
        "{result}"
    );

    // Start it and watch: the page is never reloaded; the live fragment changes by itself.
    d.click("#run").await;
    // Caught while the three middle steps run in parallel (or some of them).
    d.wait_text("#live", "1/5 steps done", Duration::from_secs(60))
        .await;
    let running = d.screenshot(&shots, "execution-running.png").await;
    d.wait_text("#live", "5/5 steps done", Duration::from_secs(90))
        .await;
    // The last step's completion and the execution's end can arrive as two events (the
    // stream polls the store): wait for the `end` event, which only live.js can mark.
    assert_eq!(
        d.wait_attr("#live", "data-ended", Duration::from_secs(30))
            .await
            .as_deref(),
        Some("1"),
        "the end came over the event stream (set by live.js), not by a reload"
    );
    let status = d.text("#live .status").await;
    assert!(status.contains("completed"), "{status}");
    d.screenshot(&shots, "execution-completed.png").await;

    // A step's page (its transcript and output, as `exec logs`), then the audit tree with
    // durations (as `audit show`), also on a phone.
    d.click("#live a[href$=\"/steps/unit-tests\"]").await;
    d.wait_text("#live", "42 passed", Duration::from_secs(30))
        .await;
    d.screenshot(&shots, "step-output.png").await;
    d.click("a[href^=\"/audit?exec=\"]").await;
    let tree = d.find_all("ol.tree li").await.len();
    println!("audit tree entries shown: {tree}");
    assert!(tree > 10, "the tree has the run's entries ({tree})");
    d.screenshot(&shots, "audit-execution.png").await;
    d.call(
        "POST",
        "/window/rect",
        Some(json!({ "width": 390, "height": 844 })),
    )
    .await;
    d.screenshot(&shots, "audit-execution-phone.png").await;
    d.call(
        "POST",
        "/window/rect",
        Some(json!({ "width": 900, "height": 1150 })),
    )
    .await;

    // Stop the failed step of the other run from its page.
    d.goto(&server.url(&format!("/executions/{waiting}"))).await;
    d.click("#stop").await;
    let result = d.text("#result").await;
    assert!(result.contains("recorded the decision `stop`"), "{result}");

    for shot in [&inbox, &plan_shot, &running] {
        let size = std::fs::metadata(shot).unwrap().len();
        assert!(
            size > 5_000,
            "{} is a real picture ({size} bytes)",
            shot.display()
        );
    }
    println!(
        "browser test: {:.1}s; screenshots in {}",
        started.elapsed().as_secs_f64(),
        shots.display()
    );
    d.call("DELETE", "", None).await;
}

/// The execution page's diff view in Chromium on a phone-sized window (390 px): it renders,
/// the step's HTML stays text, and nothing makes the page wider than the window (a long diff
/// line scrolls inside its own box).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_diff_view_fits_a_phone_in_chromium() {
    let (p, exec) = crate::web_results::project_with_a_result();
    let token = p.token("phone");
    let server = Server::start(&p, &[]);
    let profile = p.dir.path().join("chromium-profile");
    let d = Driver::start(&profile).await;
    d.call(
        "POST",
        "/window/rect",
        Some(json!({ "width": 390, "height": 844 })),
    )
    .await;
    d.goto(&server.url(&format!("/login?token={token}"))).await;
    d.goto(&server.url(&format!("/executions/{exec}"))).await;
    let lines = d.find_all("pre.diff span").await.len();
    let diff = d.text("pre.diff").await;
    assert!(lines > 0, "the diff view renders");
    assert!(diff.contains("<script>alert(1)</script>"), "{diff}");
    let widths = d
        .call(
            "POST",
            "/execute/sync",
            Some(json!({
                "script": "return [document.documentElement.scrollWidth, window.innerWidth, document.querySelectorAll('script:not([src])').length];",
                "args": []
            })),
        )
        .await;
    println!("diff lines: {lines}; page width, window width, inline scripts: {widths}");
    let (page, window) = (widths[0].as_u64().unwrap(), widths[1].as_u64().unwrap());
    assert!(window <= 400, "control: a phone-sized window ({window})");
    assert!(page <= window, "the page overflows: {page} > {window}");
    assert_eq!(widths[2], 0, "a step's <script> became a script");
    let shots = std::env::var_os("ORCA_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| p.dir.path().join("screenshots"));
    std::fs::create_dir_all(&shots).unwrap();
    d.screenshot(&shots, "execution-diff-phone.png").await;
    d.call("DELETE", "", None).await;
}
