//! Secrets stay secret, end to end against the real binary: fake keys are planted in orca's
//! environment, in a key file and behind a key command; shell steps run `env` and print the
//! keys on purpose; a fake provider (127.0.0.1, port 0) answers 401 echoing the key it got.
//! Then every file under `.orca/`, stdout and stderr (plain and JSON logs, `-vv`) is searched
//! for every secret, raw and JSON-escaped, and the leaks are counted (and must be 0). File
//! modes under `.orca/` are checked (0700 / 0600, even with umask 000), group- or
//! world-readable key files are refused, and `plan show` lists what each step receives.

#![expect(
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "tests print the leaks they count"
)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};
use tempfile::TempDir;

const OPENAI: &str = "sk-proj-FAKEopenai0123456789abcdefXYZ";
const ANTHROPIC: &str = "sk-ant-api03-FAKEanthropic0123456789xyz";
const GITHUB: &str = "ghp_FAKEgithub0123456789abcdefghijklmn";
const AWS_ID: &str = "AKIAFAKE0123456789AB";
const AWS_SECRET: &str = "wJalrFAKEsecret/K7MDENG/bPxRfiCYzz+zzz";
const SLACK: &str = "xoxb-123456789-FAKEslack-abcdefgh";
/// No known shape: only its exact value (named like a secret) can catch it.
const PASSWORD: &str = "correct-horse-battery-staple-42";
/// From a key file (no shape).
const FILE_KEY: &str = "filekey-7f3a9c1e5b2d4f6a";
/// From a key command (no shape).
const CMD_KEY: &str = "cmdkey-0d9e8f7a6b5c4d3e";
/// The body of a PEM private key a step prints (assembled by the shell, so the plan does not
/// hold it).
const PEM_BODY: &str = "MIIEfakePEMbody0123456789";

/// Every planted secret.
const SECRETS: &[&str] = &[
    OPENAI, ANTHROPIC, GITHUB, AWS_ID, AWS_SECRET, SLACK, PASSWORD, FILE_KEY, CMD_KEY, PEM_BODY,
];

/// The names of the planted environment variables.
const PLANTED: &[(&str, &str)] = &[
    ("OPENAI_API_KEY", OPENAI),
    ("ANTHROPIC_API_KEY", ANTHROPIC),
    ("GITHUB_TOKEN", GITHUB),
    ("AWS_ACCESS_KEY_ID", AWS_ID),
    ("AWS_SECRET_ACCESS_KEY", AWS_SECRET),
    ("SLACK_BOT_TOKEN", SLACK),
    ("MY_SERVICE_PASSWORD", PASSWORD),
];

struct Project {
    dir: TempDir,
    /// The user's config directory (where the signing key lives): never the real home.
    config_home: TempDir,
}

impl Project {
    fn new() -> Self {
        let p = Self {
            dir: tempfile::tempdir().unwrap(),
            config_home: tempfile::tempdir().unwrap(),
        };
        let out = p.run(&["init"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        p
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root().join(name)
    }

    fn write(&self, name: &str, body: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, body).unwrap();
        path
    }

    fn write_private(&self, name: &str, body: &str) -> PathBuf {
        let path = self.write(name, body);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    }

    /// `orca --root ROOT ARGS` with the fake keys in its environment, under umask 000 (so
    /// the store's own modes are what is checked).
    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c")
            .arg("umask 000; exec \"$@\"")
            .arg("sh")
            .arg(assert_cmd::cargo::cargo_bin("orca"))
            .arg("--root")
            .arg(self.root())
            .args(args)
            .current_dir(self.root())
            .env("NO_COLOR", "1")
            .env("XDG_CONFIG_HOME", self.config_home.path())
            .env_remove("ORCA_SIGNING_KEY")
            .env_remove("ORCA_LOG")
            .stdin(std::process::Stdio::null());
        for (k, v) in PLANTED {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    /// Every file under `.orca/`, with its bytes.
    fn orca_files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        walk(&self.path(".orca"), &mut |p, is_dir| {
            if !is_dir {
                out.push((p.to_path_buf(), std::fs::read(p).unwrap_or_default()));
            }
        });
        out
    }
}

fn walk(dir: &Path, visit: &mut dyn FnMut(&Path, bool)) {
    visit(dir, true);
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            walk(&path, visit);
        } else {
            visit(&path, false);
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The forms a secret may take in an output: raw and JSON-escaped (and so Debug-escaped).
fn forms(secret: &str) -> Vec<String> {
    let json = serde_json::to_string(secret).unwrap();
    let mut forms = vec![secret.to_owned(), json[1..json.len() - 1].to_owned()];
    forms.dedup();
    forms
}

/// Collects outputs and counts the secrets found in them.
#[derive(Default)]
struct Leaks {
    outputs: Vec<(String, String)>,
}

impl Leaks {
    fn add(&mut self, name: impl Into<String>, body: impl Into<String>) {
        self.outputs.push((name.into(), body.into()));
    }

    fn add_run(&mut self, name: &str, out: &Output) {
        self.add(format!("{name} stdout"), text(&out.stdout));
        self.add(format!("{name} stderr"), text(&out.stderr));
    }

    fn add_store(&mut self, p: &Project) {
        for (path, bytes) in p.orca_files() {
            self.add(path.display().to_string(), text(&bytes));
        }
    }

    /// Every (output, secret) pair where the secret appears; printed with the count.
    fn count(&self, what: &str) -> usize {
        let mut leaks = Vec::new();
        for (name, body) in &self.outputs {
            for secret in SECRETS {
                if forms(secret).iter().any(|f| body.contains(f.as_str())) {
                    leaks.push(format!("{secret} in {name}"));
                }
            }
        }
        eprintln!(
            "{what}: {} leaks in {} outputs ({} bytes) searched for {} secrets",
            leaks.len(),
            self.outputs.len(),
            self.outputs.iter().map(|(_, b)| b.len()).sum::<usize>(),
            SECRETS.len()
        );
        for l in &leaks {
            eprintln!("  LEAK: {l}");
        }
        leaks.len()
    }
}

fn plan(steps: &Value) -> String {
    json!({
        "goal": "print the environment",
        "steps": steps,
        "assumptions": ["a POSIX shell"],
        "risks": ["none"],
        "verification": ["env.txt lists the variables"],
    })
    .to_string()
}

/// A shell step that prints every secret it can find, in many shapes.
const NOISY: &str = "env > seen-named.txt; env; echo \"token=$GITHUB_TOKEN\"; \
    echo \"Authorization: Bearer $GITHUB_TOKEN\"; printf 'Bearer\\n%s\\n' \"$GITHUB_TOKEN\"; \
    echo \"{\\\"api_key\\\": \\\"$GITHUB_TOKEN\\\"}\"; echo https://me:$GITHUB_TOKEN@example.com/x; \
    printf -- '-----BEGIN RSA PRIV''ATE KEY-----\\nMIIEfakePEM''body0123456789\\n-----END RSA PRIV''ATE KEY-----\\n'; \
    echo \"planted: $OPENAI_API_KEY $MY_SERVICE_PASSWORD\"";

#[test]
fn a_step_sees_only_what_it_is_given_and_no_output_holds_a_key() {
    let p = Project::new();
    let doc = plan(&json!([
        {"id": "plain", "agent": "shell", "description": "print the environment",
         "command": "env > seen-plain.txt; env; echo done"},
        {"id": "named", "agent": "shell", "description": "use the GitHub token",
         "command": NOISY, "env": ["GITHUB_TOKEN"]},
        {"id": "fails", "agent": "shell", "description": "fail quoting the token",
         "command": "echo \"failed with $GITHUB_TOKEN\" >&2; exit 3", "env": ["GITHUB_TOKEN"],
         "max_attempts": 1},
    ]));
    let file = p.write("plan.json", &doc);
    let mut leaks = Leaks::default();
    let out = p.run(&[
        "-vv",
        "--log-format",
        "json",
        "--json",
        "run",
        file.to_str().unwrap(),
        "--yes",
        "--on-failure",
        "skip",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    leaks.add_run("run --json -vv --log-format json", &out);

    // What the steps saw.
    let plain = std::fs::read_to_string(p.path("seen-plain.txt")).unwrap();
    let named = std::fs::read_to_string(p.path("seen-named.txt")).unwrap();
    let mut visible = 0;
    for (name, _) in PLANTED {
        let var = format!("\n{name}=");
        if format!("\n{plain}").contains(&var) {
            eprintln!("plain step saw {name}");
            visible += 1;
        }
        if *name != "GITHUB_TOKEN" && format!("\n{named}").contains(&var) {
            eprintln!("named step saw {name}");
            visible += 1;
        }
    }
    eprintln!("planted variables visible to steps that did not name them: {visible}");
    assert_eq!(visible, 0);
    assert!(named.contains(&format!("GITHUB_TOKEN={GITHUB}")), "{named}");
    assert!(
        plain.contains("ORCA_STEP_ID=plain") && plain.contains("PATH="),
        "{plain}"
    );

    let exec = serde_json::from_str::<Value>(&text(&out.stdout)).unwrap()["execution_id"]
        .as_str()
        .unwrap()
        .to_owned();
    for args in [
        vec!["-vv", "exec", "show", exec.as_str()],
        vec!["--json", "exec", "show", exec.as_str()],
        vec!["-vv", "--log-format", "json", "exec", "list"],
        vec!["-vv", "plan", "list"],
        vec!["-vv", "audit", "verify"],
        vec!["doctor"],
        vec!["--json", "doctor"],
        vec!["-vv", "exec", "resume", exec.as_str()],
    ] {
        let out = p.run(&args);
        leaks.add_run(&args.join(" "), &out);
    }
    // A plain-log run too.
    let file2 = p.write("plan2.json", &doc);
    let out = p.run(&[
        "-vv",
        "run",
        file2.to_str().unwrap(),
        "--yes",
        "--on-failure",
        "skip",
    ]);
    leaks.add_run("run -vv (plain logs)", &out);
    leaks.add_store(&p);

    // The outputs really did carry the step's output (so the search is meaningful).
    let all: String = leaks.outputs.iter().map(|(_, b)| b.as_str()).collect();
    assert!(all.contains("[redacted]"), "nothing was redacted at all");
    assert!(
        all.contains("ORCA_STEP_ID"),
        "the step output was not recorded"
    );
    assert_eq!(leaks.count("shell steps"), 0);
}

/// A fake provider that answers 401, echoing the credentials it received.
struct EchoKey;

impl wiremock::Respond for EchoKey {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let auth = request
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let key = auth.strip_prefix("Bearer ").unwrap_or(auth);
        wiremock::ResponseTemplate::new(401).set_body_json(json!({"error": {
            "message": format!("Incorrect API key provided: {key}. Header was `{auth}`."),
            "type": "invalid_request_error", "code": "invalid_api_key"}}))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_echoing_the_key_leaves_no_trace() {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(EchoKey)
        .mount(&server)
        .await;
    let url = format!("{}/v1", server.uri());
    let p = Project::new();
    p.write_private(".orca/openai.key", &format!("{FILE_KEY}\n"));
    p.write(
        ".orca/config.toml",
        &format!(
            "[agents.env-agent]\nbackend = \"openai\"\nbase_url = \"{url}\"\napi_key_env = \"OPENAI_API_KEY\"\n\n\
             [agents.file-agent]\nbackend = \"openai\"\nbase_url = \"{url}\"\napi_key_file = \".orca/openai.key\"\n\n\
             [agents.cmd-agent]\nbackend = \"openai\"\nbase_url = \"{url}\"\napi_key_cmd = \"printf %s%s cmdkey-0d9e8f7a 6b5c4d3e\"\n"
        ),
    );
    let doc = plan(&json!([
        {"id": "env-key", "agent": "env-agent", "description": "call the provider", "depends_on": []},
        {"id": "file-key", "agent": "file-agent", "description": "call the provider", "depends_on": []},
        {"id": "cmd-key", "agent": "cmd-agent", "description": "call the provider", "depends_on": []},
    ]));
    let file = p.write("plan.json", &doc);
    let mut leaks = Leaks::default();
    let root = p.root().to_path_buf();
    let config_home = p.config_home.path().to_path_buf();
    let run = |args: Vec<String>| {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("orca"));
        cmd.arg("--root")
            .arg(&root)
            .args(&args)
            .env("XDG_CONFIG_HOME", &config_home)
            .env_remove("ORCA_SIGNING_KEY")
            .env("NO_COLOR", "1");
        for (k, v) in PLANTED {
            cmd.env(k, v);
        }
        cmd.stdin(std::process::Stdio::null());
        cmd
    };
    for (name, args) in [
        (
            "run json logs",
            vec![
                "-vv",
                "--log-format",
                "json",
                "--json",
                "run",
                file.to_str().unwrap(),
                "--yes",
                "--on-failure",
                "skip",
                "--max-attempts",
                "1",
            ],
        ),
        (
            "run plain logs",
            vec![
                "-vv",
                "run",
                file.to_str().unwrap(),
                "--yes",
                "--on-failure",
                "skip",
                "--max-attempts",
                "1",
            ],
        ),
    ] {
        let mut cmd = run(args.iter().map(|s| (*s).to_owned()).collect());
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{name}: {}", text(&out.stderr));
        leaks.add_run(name, &out);
    }
    for args in [
        vec!["doctor"],
        vec!["--json", "doctor"],
        vec!["-vv", "exec", "list"],
    ] {
        let mut cmd = run(args.iter().map(|s| (*s).to_owned()).collect());
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap();
        leaks.add_run(&args.join(" "), &out);
    }
    // Every key really reached the provider (so the echo was real).
    let requests = server.received_requests().await.unwrap_or_default();
    let sent: String = requests
        .iter()
        .map(|r| format!("{:?}", r.headers))
        .collect();
    for key in [OPENAI, FILE_KEY, CMD_KEY] {
        assert!(sent.contains(key), "{key} was never sent");
    }
    // The key file itself holds the key: it is the one file allowed to.
    let key_file = p.path(".orca/openai.key");
    for (path, bytes) in p.orca_files() {
        if path != key_file {
            leaks.add(path.display().to_string(), text(&bytes));
        }
    }
    let all: String = leaks.outputs.iter().map(|(_, b)| b.as_str()).collect();
    assert!(
        all.contains("authentication refused"),
        "the 401 was not reported"
    );
    assert_eq!(leaks.count("provider echoing the key"), 0);
    // doctor names the sources, masked.
    let doctor = &leaks
        .outputs
        .iter()
        .find(|(n, _)| n == "doctor stdout")
        .unwrap()
        .1;
    assert!(
        doctor.contains("env OPENAI_API_KEY (set, sk-proj-…("),
        "{doctor}"
    );
    assert!(
        doctor.contains("file .orca/openai.key (set, …(24 chars))"),
        "{doctor}"
    );
    assert!(
        doctor.contains("command `printf %s%s cmdkey-0d9e8f7a 6b5c4d3e` (set, …(23 chars))"),
        "{doctor}"
    );
}

#[test]
fn store_files_are_private_whatever_the_umask() {
    let p = Project::new();
    let doc = plan(&json!([
        {"id": "a", "agent": "shell", "description": "a", "command": "echo a", "locks": ["db"]},
    ]));
    let file = p.write("plan.json", &doc);
    let out = p.run(&["run", file.to_str().unwrap(), "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut bad = Vec::new();
    let mut checked = 0;
    walk(&p.path(".orca"), &mut |path, is_dir| {
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        let want = if is_dir { 0o700 } else { 0o600 };
        checked += 1;
        if mode != want {
            bad.push(format!("{} is {mode:04o}", path.display()));
        }
    });
    eprintln!(
        "{checked} paths under .orca checked (umask 000); wrong modes: {}",
        bad.len()
    );
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn readable_secret_files_are_refused_with_the_fix() {
    let p = Project::new();
    let key = p.write(".orca/k.key", "sk-proj-FAKEkeyfile0123456789\n");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    p.write(
        ".orca/config.toml",
        "[agents.coder]\nbackend = \"openai\"\napi_key_file = \".orca/k.key\"\n",
    );
    let out = p.run(&["agents", "list"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("chmod 600") && err.contains("k.key"), "{err}");
    assert!(!err.contains("FAKEkeyfile"), "{err}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(p.run(&["agents", "list"]).status.code(), Some(0));

    // A missing key file or a failing key command only fails the agent that uses it.
    p.write(
        ".orca/config.toml",
        "[agents.coder]\nbackend = \"openai\"\napi_key_file = \".orca/missing.key\"\n\n\
         [agents.tester]\nbackend = \"openai\"\napi_key_cmd = \"false\"\n",
    );
    let out = p.run(&["doctor"]);
    let (doctor, err) = (text(&out.stdout), text(&out.stderr));
    // 7: no model server runs at the default endpoint (a problem a run would meet).
    assert_eq!(out.status.code(), Some(7), "{err}");
    assert!(
        err.contains("api_key_file") && err.contains("api_key_cmd"),
        "{err}"
    );
    assert!(
        doctor.contains("file .orca/missing.key (NOT SET)"),
        "{doctor}"
    );
    assert!(doctor.contains("command `false` (NOT SET)"), "{doctor}");

    // An env file: the same.
    let env = p.write(".orca/step.env", "DEPLOY_TOKEN=abcdefgh12345678\n");
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o640)).unwrap();
    p.write(".orca/config.toml", "env_file = \".orca/step.env\"\n");
    let out = p.run(&["agents", "list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("chmod 600"),
        "{}",
        text(&out.stderr)
    );

    // A config holding something secret-looking (a URL with a password) must be private.
    let config = p.write(
        ".orca/config.toml",
        "[agents.coder]\nbackend = \"openai\"\nbase_url = \"https://me:pa55word@llm.example/v1\"\n",
    );
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = p.run(&["agents", "list"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("chmod 600") && err.contains("config.toml"),
        "{err}"
    );
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(p.run(&["agents", "list"]).status.code(), Some(0));
}

#[test]
fn plan_show_lists_what_each_step_receives() {
    let p = Project::new();
    p.write_private(".orca/step.env", "FROM_FILE=some-value-123\n");
    p.write(
        ".orca/config.toml",
        "env = [\"DEPLOY_REGION\"]\nenv_file = \".orca/step.env\"\n\n\
         [agents.claude]\nbackend = \"claude-code\"\nenv = [\"ANTHROPIC_API_KEY\"]\n",
    );
    let doc = plan(&json!([
        {"id": "build", "agent": "shell", "description": "build", "command": "make"},
        {"id": "publish", "agent": "shell", "description": "publish", "command": "gh release create",
         "env": ["GITHUB_TOKEN", "NOT_SET_ANYWHERE"]},
        {"id": "review", "agent": "claude", "description": "review the release"},
    ]));
    let file = p.write("plan.json", &doc);
    let out = p.run(&["--json", "plan", "create", "--file", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = serde_json::from_str::<Value>(&text(&out.stdout)).unwrap()["plan_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = p.run(&["plan", "show", &id]);
    // People see the short id (`plan_` + its last 8 digits, unique among few plans).
    let shown = text(&out.stdout)
        .replace(&id, "[plan]")
        .replace(&format!("plan_{}", &id[id.len() - 8..]), "[plan]");
    insta::assert_snapshot!("plan_show_env_text", shown);
    let out = p.run(&["--json", "plan", "show", &id]);
    let v: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    insta::assert_json_snapshot!("plan_show_env_json", v["step_env"]);
    // The step's own names are part of the approved content (and digest).
    assert_eq!(
        v["content"]["steps"][1]["env"],
        json!(["GITHUB_TOKEN", "NOT_SET_ANYWHERE"])
    );
    assert!(!text(&out.stdout).contains(GITHUB) && !text(&out.stdout).contains("some-value-123"));
}

#[test]
fn a_plan_holding_a_credential_is_refused_and_nothing_is_stored() {
    let p = Project::new();
    let before = p.orca_files();
    let doc = plan(&json!([
        {"id": "push", "agent": "shell", "description": "push",
         "command": format!("git push https://x:{GITHUB}@github.com/o/r")},
        {"id": "call", "agent": "shell", "description": "call",
         "command": format!("curl -H 'Authorization: Bearer {OPENAI}' https://api.example")},
    ]));
    let file = p.write("plan.json", &doc);
    let out = p.run(&["plan", "create", "--file", file.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("step `push`: `command` holds what looks like a credential"),
        "{err}"
    );
    assert!(err.contains("step `call`"), "{err}");
    let mut leaks = Leaks::default();
    leaks.add_run("plan create", &out);
    leaks.add_store(&p);
    assert_eq!(leaks.count("refused plan"), 0);
    assert_eq!(p.orca_files(), before, "a refused plan changed .orca/");
}
