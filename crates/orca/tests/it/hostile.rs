//! A hostile step against the real binary: orca's records must stay off-limits.
//!
//! A scripted model (a fake OpenAI-compatible server on 127.0.0.1, port 0) drives the `coder`
//! agent to write into `.orca/` with every write tool — `..`, an absolute path, a symlink left by
//! an earlier step and one it makes itself, hard links, case variants — to read orca's config,
//! and to do the same with `run_command` (`echo >`, `cp`, `mv`, `ln`), including a forged
//! approval: a second, genuinely approved plan file (valid digest) copied into `.orca/plans/`.
//! A shell step before it tries the same under the kernel sandbox. Every attempt must be refused
//! or blocked, each tool refusal audited as `tool.refused`, and `.orca/` must hold nothing the
//! agent wrote. Bypasses are counted and printed; the test fails if there is one.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

const MARKER: &str = "HOSTILE-MARKER";
/// A line every signing key file holds: reading it proves the key was read.
const SECRET: &str = "public key";

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    key: PathBuf,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("project");
        let home = base.join("home");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(base.join("keys")).unwrap();
        let key = base.join("keys/orca.key");
        let env = Self {
            _dir: dir,
            root,
            home,
            key,
        };
        // Real signing keys (orca refuses anything else): the one `ORCA_SIGNING_KEY` names, made
        // by orca, and a copy where the user's config keeps one.
        let (public, created) = orca_store::keys::load_or_create(&env.key).unwrap();
        assert!(created, "{public:?}");
        let default = env.home.join(".config/orca/signing.key");
        orca_store::keys::load_or_create(&default).unwrap();
        env
    }

    fn orca(&self, root: &Path, args: &[&str]) -> Output {
        self.orca_with(root, args, &[])
    }

    fn orca_with(&self, root: &Path, args: &[&str], vars: &[(&str, &str)]) -> Output {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("orca"))
            .arg("--root")
            .arg(root)
            .args(args)
            .current_dir(root)
            .env("NO_COLOR", "1")
            .env("HOME", &self.home)
            .env("ORCA_SIGNING_KEY", &self.key)
            // orca's own checkpoint, beside the keys: the home directory is the agents' target.
            .env("ORCA_STATE_DIR", self.key.with_file_name("state"))
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("ORCA_SANDBOX")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ORCA_LOG")
            .envs(vars.iter().copied())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }

    fn json(&self, root: &Path, args: &[&str]) -> (i32, Value) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.orca(root, &all);
        super::common::last_json(&out, args)
    }
}

/// Every file under `dir`, with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(dir).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(e.path()).unwrap_or_default());
            }
        }
    }
    out
}

fn plan_doc(goal: &str, steps: &Value) -> String {
    json!({
        "goal": goal,
        "summary": "a hostile end-to-end test",
        "assumptions": ["a POSIX shell"],
        "risks": ["the steps attack orca's records"],
        "verification": ["nothing lands in .orca"],
        "steps": steps,
    })
    .to_string()
}

/// An approved plan made in a scratch project: its file is a valid approval (correct digest),
/// which the agent tries to plant in the real project.
fn forged_approval(env: &Env) -> (String, String) {
    let scratch = env.root.parent().unwrap().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    assert!(env.orca(&scratch, &["init"]).status.success());
    let doc = plan_doc(
        "forged",
        &json!([{"id": "pwn", "agent": "shell", "description": "pwn",
            "command": format!("echo {MARKER} > pwned.txt"), "depends_on": []}]),
    );
    let file = scratch.join("forged.json");
    std::fs::write(&file, doc).unwrap();
    let (c, v) = env.json(
        &scratch,
        &["plan", "create", "--file", file.to_str().unwrap()],
    );
    assert_eq!(c, 0, "{v}");
    let id = v["plan_id"].as_str().unwrap().to_owned();
    let (c, v) = env.json(&scratch, &["plan", "approve", &id]);
    assert_eq!(c, 0, "{v}");
    let text = std::fs::read_to_string(scratch.join(format!(".orca/plans/{id}.json"))).unwrap();
    assert!(text.contains("\"approved\""), "{text}");
    (id, text)
}

/// One scripted attack: a tool call, and whether the tools must refuse it (`false`: the
/// kernel must make it fail; `run_command` reports the exit code).
struct Attack {
    tool: &'static str,
    args: Value,
    refused_by_tools: bool,
}

fn attacks(root: &Path, plan_id: &str, forged_id: &str, forged: &str) -> Vec<Vec<Attack>> {
    let w = |path: &str, content: &str| Attack {
        tool: "write_file",
        args: json!({"path": path, "content": content}),
        refused_by_tools: true,
    };
    let e = |path: &str, old: &str| Attack {
        tool: "edit_file",
        args: json!({"path": path, "old": old, "new": MARKER}),
        refused_by_tools: true,
    };
    let r = |tool: &'static str, args: Value| Attack {
        tool,
        args,
        refused_by_tools: true,
    };
    let sh = |command: String| Attack {
        tool: "run_command",
        args: json!({ "command": format!("{command} && echo BYPASSED") }),
        refused_by_tools: false,
    };
    let abs = root.join(".orca/plans/abs.json").display().to_string();
    let plan_file = format!(".orca/plans/{forged_id}.json");
    vec![
        vec![
            w(&plan_file, forged),
            w(&format!(".ORCA/plans/{forged_id}.json"), forged),
            w(&format!("src/../.orca/plans/{forged_id}.json"), forged),
            w(&abs, MARKER),
            w(&format!("records/plans/{forged_id}.json"), forged),
            w("hard-plan.json", MARKER),
            w("hard-config.toml", MARKER),
            w(".orca/config.toml", MARKER),
            w(".orca/plans/../config.toml", MARKER),
        ],
        vec![
            e(".orca/config.toml", "hostile-model"),
            e(".Orca/config.toml", "hostile-model"),
            e("records/config.toml", "hostile-model"),
            e("hard-config.toml", "hostile-model"),
            e(&format!(".orca/plans/{plan_id}.json"), "approved"),
            e("hard-plan.json", "approved"),
            r("read_file", json!({"path": ".orca/config.toml"})),
            r("read_file", json!({"path": "records/config.toml"})),
            r("read_file", json!({"path": "hard-config.toml"})),
            r("read_file", json!({"path": "key-link"})),
            r("list_files", json!({"path": ".orca"})),
            r("list_files", json!({"path": "records/plans"})),
            r(
                "search_text",
                json!({"pattern": "hostile", "path": ".orca"}),
            ),
        ],
        // A symlink the agent makes itself (allowed: it is only a link), then uses.
        vec![Attack {
            tool: "run_command",
            args: json!({"command": "ln -s .orca sneaky && ln -s .ORCA/plans sneaky2; echo linked"}),
            refused_by_tools: false,
        }],
        vec![
            w(&format!("sneaky/plans/{forged_id}.json"), forged),
            w("sneaky2/x.json", MARKER),
            e("sneaky/config.toml", "hostile-model"),
            r("read_file", json!({"path": "sneaky/config.toml"})),
            r("run_command", json!({"command": "echo a\u{0}b"})),
        ],
        vec![
            sh(format!("echo {MARKER} > .orca/plans/x.json")),
            sh(format!(
                "printf '%s' '{}' > f1.json && cp f1.json {plan_file}",
                forged.replace('\'', "")
            )),
            sh(format!("echo {MARKER} > f2.json && mv f2.json {plan_file}")),
            sh(format!("echo {MARKER} > f3.json && ln f3.json {plan_file}")),
            sh(format!("echo {MARKER} >> .orca/config.toml")),
            sh("rm .orca/config.toml".to_owned()),
            sh(format!("cd sneaky && echo {MARKER} > plans/y.json")),
            sh("ln -s /tmp .orca/evil".to_owned()),
            sh("mv .orca .orca-moved".to_owned()),
            sh(format!(
                "cat \"$HOME/.config/orca/signing.key\" | grep -q '{SECRET}'"
            )),
            sh(format!("grep -q '{SECRET}' key-link")),
        ],
    ]
}

/// The scripted model: each turn sends the next batch of attacks; then it submits a result.
struct Hostile {
    batches: Vec<Vec<(String, Value)>>,
}

impl wiremock::Respond for Hostile {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let turns = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        let calls: Vec<Value> = match self.batches.get(turns) {
            Some(batch) => batch
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    orca_testkit::fake_model::tool_call(&format!("atk_{turns}_{i}"), name, args)
                })
                .collect(),
            None => vec![orca_testkit::fake_model::tool_call(
                "done",
                "submit_result",
                &json!({"status": "success", "summary": "tried everything"}),
            )],
        };
        wiremock::ResponseTemplate::new(200).set_body_json(orca_testkit::fake_model::tool_calls(
            "chatcmpl-hostile",
            &body["model"],
            calls,
        ))
    }
}

/// The shell step: tries each attack under the kernel sandbox and writes how many worked.
fn shell_attack(forged_id: &str, home: &Path, key: &Path) -> String {
    let home = home.display();
    let key = key.display();
    let tries = [
        format!("echo {MARKER} > .orca/plans/s0.json"),
        format!("echo {MARKER} > s1.json && mv s1.json .orca/plans/{forged_id}.json"),
        format!("echo {MARKER} > s2.json && cp s2.json .orca/plans/{forged_id}.json"),
        format!("echo {MARKER} > s3.json && ln s3.json .orca/plans/{forged_id}.json"),
        format!("echo {MARKER} >> .orca/config.toml"),
        "rm -f .orca/config.toml && test ! -e .orca/config.toml".to_owned(),
        format!("ln -s .orca shl && echo {MARKER} > shl/plans/s4.json"),
        "mv .orca .orca-moved".to_owned(),
        "umount .orca".to_owned(),
        "mount -o remount,rw .orca".to_owned(),
        format!("grep -q '{SECRET}' {home}/.config/orca/signing.key"),
        format!("grep -q '{SECRET}' {key}"),
        format!("echo {MARKER} > {home}/escape.txt"),
    ];
    let mut script = String::from("n=0\n");
    for t in &tries {
        let quoted = t.replace('\'', "'\\''");
        script.push_str(&format!(
            "if sh -c '{quoted}' 2>/dev/null; then n=$((n+1)); echo 'BYPASS: {quoted}'; fi\n"
        ));
    }
    script.push_str(&format!(
        "echo \"$n\" > shell-bypasses.txt\necho '{}' > shell-tries.txt\n",
        tries.len()
    ));
    script
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_agent_and_step_cannot_touch_orcas_records() {
    let env = Env::new();
    let root = env.root.clone();
    assert!(env.orca(&root, &["init"]).status.success());
    let (forged_id, forged) = forged_approval(&env);

    let server = wiremock::MockServer::start().await;
    let url = format!("{}/v1", server.uri());
    std::fs::write(
        root.join(".orca/config.toml"),
        format!(
            "sandbox = \"kernel\"\n\n[agents.coder]\nbackend = \"ollama\"\nbase_url = \"{url}\"\nmodel = \"hostile-model\"\n"
        ),
    )
    .unwrap();
    let doc = plan_doc(
        "attack orca's records",
        &json!([
            {"id": "shell-attack", "agent": "shell", "description": "try to write orca's records",
             "command": shell_attack(&forged_id, &env.home, &env.key), "depends_on": []},
            {"id": "agent-attack", "agent": "coder", "description": "write into .orca",
             "depends_on": ["shell-attack"]}
        ]),
    );
    std::fs::write(root.join("hostile.json"), doc).unwrap();
    let (c, v) = env.json(&root, &["plan", "create", "--file", "hostile.json"]);
    assert_eq!(c, 0, "{v}");
    let plan_id = v["plan_id"].as_str().unwrap().to_owned();
    let (c, v) = env.json(&root, &["plan", "approve", &plan_id]);
    assert_eq!(c, 0, "{v}");

    // Left behind by an earlier, unconfined step: links into the records and to the key.
    std::os::unix::fs::symlink(root.join(".orca"), root.join("records")).unwrap();
    std::os::unix::fs::symlink(&env.key, root.join("key-link")).unwrap();
    std::fs::hard_link(
        root.join(format!(".orca/plans/{plan_id}.json")),
        root.join("hard-plan.json"),
    )
    .unwrap();
    std::fs::hard_link(
        root.join(".orca/config.toml"),
        root.join("hard-config.toml"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();

    let batches = attacks(&root, &plan_id, &forged_id, &forged);
    server
        .register(
            wiremock::Mock::given(wiremock::matchers::method("POST"))
                .and(wiremock::matchers::path("/v1/chat/completions"))
                .respond_with(Hostile {
                    batches: batches
                        .iter()
                        .map(|b| {
                            b.iter()
                                .map(|a| (a.tool.to_owned(), a.args.clone()))
                                .collect()
                        })
                        .collect(),
                }),
        )
        .await;

    let before = tree(&root.join(".orca"));
    let home_before = tree(&env.home);
    let run_env = Env {
        _dir: tempfile::tempdir().unwrap(),
        root: root.clone(),
        home: env.home.clone(),
        key: env.key.clone(),
    };
    let run_root = root.clone();
    let plan = plan_id.clone();
    let (c, report) = tokio::task::spawn_blocking(move || run_env.json(&run_root, &["run", &plan]))
        .await
        .unwrap();
    assert_eq!(c, 0, "{report}");
    let after = tree(&root.join(".orca"));

    let mut bypasses: Vec<String> = Vec::new();

    // 1. The model's attacks: each file-tool attack got an error; each run_command attack
    //    failed (no BYPASSED in its output).
    let requests = server.received_requests().await.unwrap_or_default();
    let last = requests
        .iter()
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .filter(|b| b["model"] == "hostile-model")
        .max_by_key(|b| b["messages"].as_array().map_or(0, Vec::len))
        .expect("the coder called the model");
    let results: BTreeMap<String, String> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let mut model_attacks = 0;
    let mut expected_refusals = 0;
    for (turn, batch) in batches.iter().enumerate() {
        for (i, a) in batch.iter().enumerate() {
            let id = format!("atk_{turn}_{i}");
            let Some(result) = results.get(&id) else {
                bypasses.push(format!("{id} {} {}: never ran", a.tool, a.args));
                continue;
            };
            if turn == 2 {
                continue; // the agent's own symlink: allowed, used by the next batch
            }
            model_attacks += 1;
            if a.refused_by_tools {
                expected_refusals += 1;
                if !result.starts_with("error:") || !result.contains("refused") {
                    bypasses.push(format!("{id} {} {}: {result}", a.tool, a.args));
                }
            } else if result.contains("BYPASSED") || !result.contains("\"exit_code\"") {
                bypasses.push(format!("{id} {} {}: {result}", a.tool, a.args));
            }
        }
    }

    // 2. Each refusal is audited as `tool.refused` in the execution's log; the run recorded
    //    the kernel sandbox.
    let log_text: String = after
        .iter()
        .filter(|(k, _)| k.to_string_lossy().ends_with(".audit.jsonl"))
        .filter(|(k, _)| k.to_string_lossy().contains("/executions/"))
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .collect();
    let entries: Vec<Value> = log_text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let refusals = entries
        .iter()
        .filter(|e| e["kind"] == "tool.refused")
        .count();
    let sandbox = entries
        .iter()
        .find(|e| e["kind"] == "sandbox")
        .map(|e| e["data"]["effective"].clone())
        .unwrap_or(Value::Null);
    let kernel = sandbox == "kernel";
    assert!(
        kernel || std::env::var_os("ORCA_ALLOW_NO_SANDBOX").is_some(),
        "the run was not in the kernel sandbox: {sandbox}"
    );
    if refusals != expected_refusals {
        let audited: Vec<String> = entries
            .iter()
            .filter(|e| e["kind"] == "tool.refused")
            .map(|e| format!("{} {}", e["data"]["tool"], e["data"]["arguments"]["path"]))
            .collect();
        bypasses.push(format!(
            "{refusals} tool.refused entries audited, {expected_refusals} refusals expected: {audited:#?}"
        ));
    }

    // 3. The shell step under the kernel sandbox.
    let shell_bypasses: usize = std::fs::read_to_string(root.join("shell-bypasses.txt"))
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(usize::MAX);
    let shell_tries: usize = std::fs::read_to_string(root.join("shell-tries.txt"))
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0);
    if kernel && shell_bypasses != 0 {
        bypasses.push(format!(
            "the shell step got {shell_bypasses} writes through"
        ));
    }

    // 4. `.orca/`: every file there before is unchanged (audit logs may only grow), no plan
    //    file appeared, and the marker is nowhere but in audit entries (which record the
    //    attempts).
    for (path, bytes) in &before {
        match after.get(path) {
            None => bypasses.push(format!(".orca/{} was removed", path.display())),
            Some(now) if now == bytes => {}
            Some(now) if path.to_string_lossy().ends_with(".jsonl") && now.starts_with(bytes) => {}
            Some(_) => bypasses.push(format!(".orca/{} was changed", path.display())),
        }
    }
    let plan_files = |t: &BTreeMap<PathBuf, Vec<u8>>| -> Vec<PathBuf> {
        t.keys()
            .filter(|k| k.parent() == Some(Path::new("plans")))
            .filter(|k| k.extension().is_some_and(|e| e == "json"))
            .cloned()
            .collect()
    };
    if plan_files(&before) != plan_files(&after) {
        bypasses.push(format!(
            "plan files changed: {:?} -> {:?}",
            plan_files(&before),
            plan_files(&after)
        ));
    }
    for (path, bytes) in &after {
        // The write-ahead log (ADR 0030) carries audit entries too: only its task records
        // must not hold the marker.
        let text = if path.to_string_lossy().ends_with("tasks.wal.jsonl") {
            String::from_utf8_lossy(bytes)
                .lines()
                .map(|l| {
                    let mut r: Value = serde_json::from_str(l).unwrap_or(Value::Null);
                    if let Some(o) = r.as_object_mut() {
                        o.remove("audit");
                    }
                    r.to_string()
                })
                .collect()
        } else {
            String::from_utf8_lossy(bytes).into_owned()
        };
        if !before.contains_key(path)
            && !path.to_string_lossy().ends_with(".audit.jsonl")
            && text.contains(MARKER)
        {
            bypasses.push(format!(".orca/{} holds the agent's marker", path.display()));
        }
    }
    if tree(&env.home) != home_before {
        bypasses.push("the home directory changed".to_owned());
    }
    let (c, plans) = env.json(&root, &["plan", "list"]);
    assert_eq!(c, 0);
    if plans.as_array().map_or(0, Vec::len) != 1 {
        bypasses.push(format!("orca sees more than one plan: {plans}"));
    }
    if root.join("pwned.txt").exists() {
        bypasses.push("the forged plan ran".to_owned());
    }
    let verify = env.orca(&root, &["audit", "verify"]);
    assert!(verify.status.success(), "{verify:?}");

    eprintln!(
        "hostile e2e: {model_attacks} model attacks ({expected_refusals} refused by the tools, {refusals} audited as tool.refused), {shell_tries} shell-step attacks (sandbox: {sandbox}), bypasses: {}",
        bypasses.len()
    );
    assert!(bypasses.is_empty(), "bypasses: {bypasses:#?}");
}

/// The sandbox entry of the only execution's audit log.
fn sandbox_entry(root: &Path) -> Value {
    tree(&root.join(".orca"))
        .iter()
        .filter(|(k, _)| k.to_string_lossy().ends_with(".audit.jsonl"))
        .flat_map(|(_, v)| {
            String::from_utf8_lossy(v)
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect::<Vec<_>>()
        })
        .find(|e| e["kind"] == "sandbox")
        .map(|e| e["data"].clone())
        .unwrap_or(Value::Null)
}

/// `sandbox = "off"` is loud (a warning line and the audit entry), a bad `ORCA_SANDBOX` exits
/// 2, the default run records the kernel sandbox; a NUL command and a prompt file outside the
/// project are clear errors that change nothing.
#[test]
fn sandbox_modes_are_recorded_and_bad_input_is_refused() {
    let env = Env::new();
    let root = env.root.clone();
    assert!(env.orca(&root, &["init"]).status.success());
    let doc = plan_doc(
        "one step",
        &json!([{"id": "a", "agent": "shell", "description": "a",
            "command": "echo a > a.txt", "depends_on": []}]),
    );
    std::fs::write(root.join("p.json"), &doc).unwrap();

    let out = env.orca_with(
        &root,
        &["run", "p.json", "--yes"],
        &[("ORCA_SANDBOX", "none")],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("ORCA_SANDBOX: unknown sandbox mode \"none\""),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let out = env.orca_with(
        &root,
        &["run", "p.json", "--yes"],
        &[("ORCA_SANDBOX", "off")],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("warning: sandbox = \"off\""), "{err}");
    let entry = sandbox_entry(&root);
    assert_eq!(entry["requested"], "off", "{entry}");
    assert_eq!(entry["effective"], "off", "{entry}");

    let other = Env::new();
    assert!(other.orca(&other.root, &["init"]).status.success());
    std::fs::write(other.root.join("p.json"), &doc).unwrap();
    let out = other.orca(&other.root, &["run", "p.json", "--yes"]);
    assert!(out.status.success(), "{out:?}");
    let entry = sandbox_entry(&other.root);
    assert_eq!(entry["requested"], "kernel", "{entry}");
    if std::env::var_os("ORCA_ALLOW_NO_SANDBOX").is_none() {
        assert_eq!(entry["effective"], "kernel", "{entry}");
        assert!(entry["landlock_abi"].as_i64().unwrap_or(0) >= 1, "{entry}");
    }

    // A NUL byte in a shell command: the plan is refused, naming the step.
    let before = tree(&root.join(".orca"));
    let nul = plan_doc(
        "nul",
        &json!([{"id": "nul", "agent": "shell", "description": "a",
            "command": "echo a\u{0}b", "depends_on": []}]),
    );
    std::fs::write(root.join("nul.json"), nul).unwrap();
    let out = env.orca(&root, &["plan", "create", "--file", "nul.json"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("step `nul`: `command` holds a NUL byte"),
        "{err}"
    );
    assert_eq!(before, tree(&root.join(".orca")));

    // A prompt file outside the project is never read.
    std::fs::write(
        root.join(".orca/config.toml"),
        "[agents.spy]\nbackend = \"shell\"\nprompt_file = \"/etc/passwd\"\n",
    )
    .unwrap();
    let out = env.orca(&root, &["agents", "list"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("agents.spy.prompt_file") && err.contains("outside the project"),
        "{err}"
    );
    assert!(!err.contains("root:"), "{err}");
}
