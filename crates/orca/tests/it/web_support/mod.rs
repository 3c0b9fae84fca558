//! What the `orca serve` tests share: an isolated project, a running server on a free port,
//! and an HTTP client that keeps no cookies and follows no redirects.

#![allow(dead_code, reason = "each test binary uses a part of this module")]
#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{isolated, orca};

/// A temp project with `.orca/` and a user config home; `.0` keeps them alive.
pub(crate) struct Project {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) root: PathBuf,
    pub(crate) home: PathBuf,
}

impl Project {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("project");
        let home = dir.path().join("config-home");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let out = orca(&root, &home, &["init"]);
        assert!(out.status.success(), "{out:?}");
        Self { dir, root, home }
    }

    pub(crate) fn orca(&self, args: &[&str]) -> std::process::Output {
        orca(&self.root, &self.home, args)
    }

    /// A new access token's secret.
    pub(crate) fn token(&self, name: &str) -> String {
        let out = self.orca(&["serve", "--new-token", name]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Writes a plan document and creates the proposal; returns its id.
    pub(crate) fn proposal(&self, name: &str, doc: &serde_json::Value) -> String {
        let file = self.dir.path().join(format!("{name}.json"));
        std::fs::write(&file, serde_json::to_string(doc).unwrap()).unwrap();
        let out = self.orca(&["--json", "plan", "create", "--file", file.to_str().unwrap()]);
        assert!(out.status.success(), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["plan_id"].as_str().unwrap().to_owned()
    }

    /// Runs a plan whose only step fails: the run waits for a decision (exit 4). Returns the
    /// execution id.
    pub(crate) fn waiting_execution(&self, name: &str) -> String {
        let id = self.proposal(name, &plan(&[(name, "echo nope; exit 3", &[])]));
        let out = self.orca(&["--json", "run", &id, "--yes", "--max-attempts", "1"]);
        assert_eq!(out.status.code(), Some(4), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["execution_id"].as_str().unwrap().to_owned()
    }

    pub(crate) fn config(&self, text: &str) {
        let path = self.root.join(".orca/config.toml");
        let mut old = std::fs::read_to_string(&path).unwrap();
        old.push('\n');
        old.push_str(text);
        std::fs::write(path, old).unwrap();
    }
}

/// A plan document of shell steps `(id, command, depends_on)`.
pub(crate) fn plan(steps: &[(&str, &str, &[&str])]) -> serde_json::Value {
    let steps: Vec<serde_json::Value> = steps
        .iter()
        .map(|(id, cmd, deps)| {
            serde_json::json!({ "id": id, "agent": "shell", "description": format!("run {id}"), "command": cmd, "depends_on": deps })
        })
        .collect();
    serde_json::json!({
        "goal": "web test plan",
        "assumptions": ["a shell"],
        "risks": ["none"],
        "verification": ["the steps exit 0"],
        "steps": steps,
    })
}

/// A running `orca serve`; killed on drop.
pub(crate) struct Server {
    child: Child,
    pub(crate) base: String,
    pub(crate) log: Arc<Mutex<String>>,
}

impl Server {
    pub(crate) fn start(project: &Project, extra: &[&str]) -> Self {
        Self::start_env(project, extra, &[])
    }

    /// [`Server::start`] with these environment variables set.
    pub(crate) fn start_env(project: &Project, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cmd = isolated(&project.root, &project.home);
        cmd.envs(env.iter().copied());
        cmd.args(["-v", "serve"]);
        if !extra.contains(&"--addr") {
            cmd.args(["--addr", "127.0.0.1:0"]);
        }
        cmd.args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_owned());
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("orca serve did not start: {}", log.lock().unwrap()));
        Self { child, base, log }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends SIGTERM and waits up to `limit` for the exit code (None: it did not exit).
    pub(crate) fn terminate(&mut self, limit: Duration) -> Option<i32> {
        let pid = self.child.id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn client() -> reqwest::Client {
    orca_llm::http_client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// GET with the token; (status, body).
pub(crate) async fn get(c: &reqwest::Client, url: &str, token: &str) -> (u16, String) {
    let r = c.get(url).bearer_auth(token).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// POST a form with the token; (status, body, location).
pub(crate) async fn post(
    c: &reqwest::Client,
    url: &str,
    token: &str,
    form: &[(&str, &str)],
) -> (u16, String, Option<String>) {
    let r = c
        .post(url)
        .bearer_auth(token)
        .form(form)
        .send()
        .await
        .unwrap();
    let loc = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (r.status().as_u16(), r.text().await.unwrap(), loc)
}

/// The first action token in a page (optionally: of the form posting to `action`).
pub(crate) fn nonce(page: &str, action: Option<&str>) -> String {
    let from = match action {
        Some(a) => page
            .find(&format!("action=\"{a}\""))
            .unwrap_or_else(|| panic!("no form for {a} in {page}")),
        None => 0,
    };
    let rest = &page[from..];
    let at = rest.find("name=\"nonce\" value=\"").expect("a nonce") + 20;
    rest[at..at + 64].to_owned()
}

/// The digest an approval confirmation page's form carries (the content it showed).
pub(crate) fn shown_digest(page: &str) -> String {
    let at = page
        .find("name=\"digest\" value=\"")
        .unwrap_or_else(|| panic!("no digest field in {page}"))
        + 21;
    page[at..at + 71].to_owned()
}

/// Polls `check` until it returns Some, or panics after `limit`.
pub(crate) async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// How many times `who` appears in the audit logs under `.orca/`.
pub(crate) fn actor_in_audit(project: &Project, who: &str) -> usize {
    let mut count = 0;
    for entry in walk(&project.root.join(".orca")) {
        if entry.extension().is_some_and(|e| e == "jsonl") {
            count += read(&entry).matches(who).count();
        }
    }
    count
}

pub(crate) fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
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
