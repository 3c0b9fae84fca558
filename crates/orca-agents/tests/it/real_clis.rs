//! The real command-line agents — Claude Code, Codex, opencode, installed from the npm
//! registry by `.ci/real-clis.sh` into `target/real-clis/` (pinned versions, reused when
//! present) — run as orca agents against a scripted model on 127.0.0.1 (`fake_models`), each
//! with a temporary HOME, its outside traffic switched off by its own settings, and every proxy
//! variable pointing at a local trap that counts connection attempts.
//!
//! Per agent: the model's edit lands through the agent's own tool, usage is parsed, a denied
//! permission becomes a failed step, a 200 KB prompt reaches the model intact. Prints a table.
//!
//! Skips with a LOUD message when node/npm or the registry is missing, unless
//! `ORCA_REQUIRE_REAL_CLIS=1` (then that is a failure); `ORCA_SKIP_REAL_CLIS=1` skips on purpose.
#![expect(clippy::unwrap_used, clippy::print_stdout, reason = "tests")]

use crate::common;
use crate::fake_models;

use std::collections::BTreeMap;
use std::io::Read as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{TestTools, fast_settings, task};
use fake_models::{ANTHROPIC_USAGE, CHAT_USAGE, EDITED, FakeModel, RESPONSES_USAGE};
use orca_agents::{Agents, BackendSpec, CliKind, CliSpec, Profile};
use orca_core::{
    AgentAnswer, AgentId, AgentPort as _, AgentToolUse, Budget, ErrorCode, QuestionRequest, Reply,
    Role, TaskFailure, TaskResult, TaskSuccess,
};
use orca_os::EnvPolicy;
use orca_os::sandbox::{KernelSupport, SandboxMode, SandboxPolicy, probe};
use wiremock::{Mock, MockServer, matchers::method};

/// Where the programs are installed: `$ORCA_REAL_CLIS_DIR`, else `<target>/real-clis`.
fn install_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ORCA_REAL_CLIS_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    target.join("real-clis")
}

/// Installs (or finds) the programs; `None` when they cannot be had here.
fn install() -> Option<PathBuf> {
    let dir = install_dir();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/real-clis.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(&dir)
        .output()
        .unwrap();
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if out.status.success() {
        return Some(dir.join("node_modules/.bin"));
    }
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(3) && std::env::var_os("ORCA_REQUIRE_REAL_CLIS").is_none(),
        "installing the real CLIs failed: {why}"
    );
    None
}

/// A local port every proxy variable points at: counts connection attempts (outside traffic
/// that got past the agents' own settings) and keeps their first line (`CONNECT host:443`),
/// answers none.
struct Trap {
    port: u16,
    hits: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Trap {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (counted, lines) = (Arc::clone(&hits), Arc::clone(&seen));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                counted.fetch_add(1, Ordering::SeqCst);
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 256];
                let n = conn.read(&mut buf).unwrap_or(0);
                let text = String::from_utf8_lossy(&buf[..n]);
                let first = text.lines().next().unwrap_or("").to_owned();
                lines.lock().unwrap().push(first);
            }
        });
        Self { port, hits, seen }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    Edit,
    Denied,
    LongPrompt,
    /// The edit, inside orca's kernel sandbox (as `orca run` starts agents by default).
    Sandboxed,
    /// Two read-only questions, the second resuming the first one's session.
    Resume,
}

struct Outcome {
    reply: Reply<TaskResult>,
    landed: bool,
    bodies: Vec<String>,
    secs: f64,
    /// Whether the kernel sandbox could be used (always, except in `Case::Sandboxed` where the
    /// kernel has no Landlock).
    sandbox: bool,
    /// The tools the program reported it ran itself (`ToolHost::agent_tool_used`), and how many
    /// messages it reported (`ToolHost::model_answered`).
    own: Vec<AgentToolUse>,
    answers: usize,
}

/// Runs `kind` once as orca's `coder` agent against a fresh scripted model.
async fn run(kind: CliKind, bin: &Path, case: Case, trap: &Trap, big: &str) -> Outcome {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let target = project.join("hello.txt");
    let server = MockServer::start().await;
    // Codex cannot say that a patch was refused (its output does not show it): only an
    // honest model can. Claude Code and opencode do show it, so their model lies.
    let lies = kind != CliKind::Codex;
    Mock::given(method("POST"))
        .respond_with(FakeModel {
            target: target.clone(),
            lies,
        })
        .mount(&server)
        .await;
    let proxy = format!("http://127.0.0.1:{}", trap.port);
    let mut vars: BTreeMap<String, String> = [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.display().to_string()),
        ("HTTPS_PROXY", proxy.clone()),
        ("HTTP_PROXY", proxy.clone()),
        ("ALL_PROXY", proxy.clone()),
        ("https_proxy", proxy.clone()),
        ("http_proxy", proxy),
        ("NO_PROXY", "127.0.0.1,localhost".into()),
        ("no_proxy", "127.0.0.1,localhost".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let mut spec = CliSpec {
        program: bin.join(kind.default_program()).display().to_string(),
        timeout: Some(Duration::from_secs(180)),
        ..CliSpec::new(kind)
    };
    let base = format!("{}/v1", server.uri());
    match kind {
        CliKind::ClaudeCode => {
            spec.model = Some("claude-sonnet-4-5".into());
            vars.insert("ANTHROPIC_BASE_URL".into(), server.uri());
            vars.insert("ANTHROPIC_API_KEY".into(), "sk-ant-test".into());
            vars.insert(
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            );
            vars.insert("DISABLE_AUTOUPDATER".into(), "1".into());
            vars.insert("DISABLE_TELEMETRY".into(), "1".into());
            vars.insert("DISABLE_ERROR_REPORTING".into(), "1".into());
            if case == Case::Denied {
                spec.permission_mode = Some("default".into());
            }
        }
        CliKind::Codex => {
            // A model Codex knows (it offers `apply_patch` only to known models).
            spec.model = Some("gpt-5.5".into());
            spec.args = [
                "model_provider=\"fake\"".to_owned(),
                "model_providers.fake.name=\"fake\"".to_owned(),
                format!("model_providers.fake.base_url=\"{base}\""),
                "model_providers.fake.wire_api=\"responses\"".to_owned(),
                "model_providers.fake.env_key=\"FAKE_KEY\"".to_owned(),
                // Without these it calls ab.chatgpt.com (metrics), chatgpt.com and github.com
                // (curated plugins): counted by the trap.
                "analytics.enabled=false".to_owned(),
                "features.plugins=false".to_owned(),
            ]
            .into_iter()
            .flat_map(|c| ["-c".to_owned(), c])
            .collect();
            vars.insert("FAKE_KEY".into(), "sk-test".into());
            if case == Case::Denied {
                spec.permission_mode = Some("read-only".into());
            }
        }
        _ => {
            spec.model = Some("fake/fake-model".into());
            let mut config = serde_json::json!({
                "$schema": "https://opencode.ai/config.json",
                "autoupdate": false,
                "share": "disabled",
                "provider": {"fake": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "fake",
                    "options": {"baseURL": base, "apiKey": "sk-test"},
                    "models": {"fake-model": {"name": "fake model"}}
                }},
            });
            if case == Case::Denied {
                // "ask", and no `--auto`: opencode rejects the edit by itself.
                config["permission"] = serde_json::json!({"edit": "ask"});
                spec.permission_mode = Some("ask".into());
            }
            let path = tmp.path().join("opencode.json");
            std::fs::write(&path, config.to_string()).unwrap();
            vars.insert("OPENCODE_CONFIG".into(), path.display().to_string());
            for v in [
                "OPENCODE_DISABLE_AUTOUPDATE",
                "OPENCODE_DISABLE_MODELS_FETCH",
                "OPENCODE_DISABLE_DEFAULT_PLUGINS",
                "OPENCODE_DISABLE_LSP_DOWNLOAD",
                "OPENCODE_DISABLE_SHARE",
            ] {
                vars.insert(v.into(), "1".into());
            }
            // Its embedded npm otherwise asks registry.npmjs.org at every start.
            vars.insert("NPM_CONFIG_OFFLINE".into(), "true".into());
        }
    }
    let id = AgentId::parse("coder").unwrap();
    let names: Vec<String> = vars.keys().cloned().collect();
    let mut policy = EnvPolicy::from_vars(vars);
    policy.set_agent_names(id.clone(), names);
    let profile = Profile {
        id,
        role: Role::Specialist,
        description: "a real command-line agent".into(),
        backend: BackendSpec::Cli(spec),
        prompt: "You are the coder.".into(),
        workspace_tools: vec![],
        limits: Budget::UNLIMITED,
    };
    let mut agents = Agents::new(&project, [profile], fast_settings(0))
        .unwrap()
        .with_env_policy(policy);
    if case == Case::Sandboxed {
        let home = home.display().to_string();
        let env = move |k: &str| (k == "HOME").then(|| home.clone());
        let sandbox = SandboxPolicy::new(SandboxMode::Kernel, &project, &env).unwrap();
        if !matches!(probe(&sandbox), KernelSupport::Available { .. }) {
            return Outcome {
                reply: Reply::new(TaskResult::Failure(orca_core::TaskFailure::new(
                    orca_core::ErrorCode::Validation,
                    "no kernel sandbox here",
                ))),
                landed: false,
                bodies: Vec::new(),
                secs: 0.0,
                sandbox: false,
                own: Vec::new(),
                answers: 0,
            };
        }
        agents = agents.with_sandbox(Arc::new(sandbox));
    }
    let started = Instant::now();
    if case == Case::Resume {
        let reply = resume(&agents).await;
        return Outcome {
            reply,
            landed: target.exists(),
            bodies: bodies(&server).await,
            secs: started.elapsed().as_secs_f64(),
            sandbox: true,
            own: Vec::new(),
            answers: 0,
        };
    }
    let mut request = task("coder", Budget::UNLIMITED);
    let text = match case {
        Case::LongPrompt => format!("Write hello.txt. Background follows.\n{big}"),
        _ => "Write hello.txt.".to_owned(),
    };
    request.step = orca_core::Step::new(request.step.id.clone(), request.agent.clone(), text);
    let tools = TestTools::new();
    let reply = agents.run_task(request, &tools).await;
    let secs = started.elapsed().as_secs_f64();
    let landed = std::fs::read_to_string(&target).is_ok_and(|t| t == EDITED);
    Outcome {
        reply,
        landed,
        bodies: bodies(&server).await,
        secs,
        sandbox: true,
        own: tools.own_tools.lock().unwrap().clone(),
        answers: tools.answers.lock().unwrap().len(),
    }
}

async fn bodies(server: &MockServer) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

/// Asks twice, the second time in the first answer's session: a success whose summary is the
/// second answer, or a failure saying what went wrong.
async fn resume(agents: &Agents) -> Reply<TaskResult> {
    let ask = |question: &str, session| QuestionRequest {
        agent: AgentId::parse("coder").unwrap(),
        question: question.to_owned(),
        session,
        budget: Budget::UNLIMITED,
    };
    let first = agents
        .ask(
            ask("FIRST-QUESTION: what is here?", None),
            &TestTools::new(),
        )
        .await;
    let fail = |m: String| {
        Reply::new(TaskResult::Failure(TaskFailure::new(
            ErrorCode::TaskFailed,
            m,
        )))
    };
    let session = match first.outcome {
        Ok(AgentAnswer {
            session_id: Some(s),
            ..
        }) => s,
        other => return fail(format!("first question: {other:?}")),
    };
    let second = agents
        .ask(
            ask("SECOND-QUESTION: and then?", Some(session)),
            &TestTools::new(),
        )
        .await;
    match second.outcome {
        Ok(a) if a.session_id == Some(session) => Reply {
            outcome: TaskResult::Success(TaskSuccess::with_summary(a.answer)),
            usage: second.usage,
            session: a.session_id,
        },
        other => fail(format!("second question in {session}: {other:?}")),
    }
}

/// One line of an outcome.
fn brief(outcome: &TaskResult) -> String {
    match outcome {
        TaskResult::Success(s) => format!("success \"{}\"", s.summary),
        TaskResult::Failure(f) => format!("failure {:?} \"{}\"", f.code, f.message),
        other => format!("{other:?}"),
    }
}

fn yes(ok: bool) -> &'static str {
    if ok { "yes" } else { "NO" }
}

/// Every check for one agent: its table row, what failed, the outside connections tried.
async fn check(kind: CliKind, bin: &Path, big: &str) -> (String, Vec<String>, Vec<String>) {
    let name = kind.as_str();
    let trap = Trap::start();
    let mut failures = Vec::new();
    let edit = run(kind, bin, Case::Edit, &trap, big).await;
    let edited = edit.landed && matches!(edit.reply.outcome, TaskResult::Success(_));
    let u = edit.reply.usage;
    // Two model turns (the edit, the answer), each with the fake's fixed usage.
    let expected = match kind {
        CliKind::ClaudeCode => (2 * ANTHROPIC_USAGE.0, 0, 2 * ANTHROPIC_USAGE.1),
        CliKind::Codex => (
            2 * (RESPONSES_USAGE.0 - RESPONSES_USAGE.1),
            2 * RESPONSES_USAGE.1,
            2 * RESPONSES_USAGE.2,
        ),
        _ => (
            2 * (CHAT_USAGE.0 - CHAT_USAGE.1),
            2 * CHAT_USAGE.1,
            2 * CHAT_USAGE.2,
        ),
    };
    let usage = (u.input_tokens, u.cache_read_tokens, u.output_tokens) == expected;
    let session = edit.reply.session.is_some();
    let denied = run(kind, bin, Case::Denied, &trap, big).await;
    let denial = !denied.landed && matches!(denied.reply.outcome, TaskResult::Failure(_));
    // The edit was made by the program's own write tool: reported as one successful use that
    // names hello.txt, and the refused one as a failed use; the final message as a message.
    let names_target = |u: &AgentToolUse| u.input.to_string().contains("hello.txt");
    let own_edit = edit.own.iter().filter(|u| u.ok && names_target(u)).count();
    let own_denied = denied
        .own
        .iter()
        .filter(|u| !u.ok && names_target(u))
        .count();
    // Codex prints nothing of a patch its read-only sandbox rejected (see the recorded
    // `codex_read_only.jsonl`): only the edit it made is there to report.
    let denial_reported = own_denied >= 1 || kind == CliKind::Codex;
    let transcript = own_edit >= 1 && denial_reported && edit.answers >= 1;
    println!(
        "{name}: own tools reported: edit {:?}, denied {:?}; messages: {}",
        edit.own.iter().map(|u| (&u.tool, u.ok)).collect::<Vec<_>>(),
        denied
            .own
            .iter()
            .map(|u| (&u.tool, u.ok))
            .collect::<Vec<_>>(),
        edit.answers
    );
    let long = run(kind, bin, Case::LongPrompt, &trap, big).await;
    let intact = long.bodies.iter().any(|b| {
        // The prompt travels as a JSON string: compare escaped.
        let escaped = serde_json::to_string(big).unwrap();
        b.contains(escaped.trim_matches('"'))
    });
    let boxed = run(kind, bin, Case::Sandboxed, &trap, big).await;
    let boxed_ok = boxed.landed && matches!(boxed.reply.outcome, TaskResult::Success(_));
    let boxed_cell = if boxed.sandbox { yes(boxed_ok) } else { "n/a" };
    println!(
        "{name}: in the kernel sandbox: {} in {:.1} s",
        brief(&boxed.reply.outcome),
        boxed.secs
    );
    if let TaskResult::Failure(f) = &boxed.reply.outcome {
        println!("  cause: {:?}\n  output: {:?}", f.cause, f.output);
    }
    if !boxed_ok {
        // What the agent's tool told the model (the cause of a failed edit).
        for b in &boxed.bodies {
            let v: serde_json::Value = serde_json::from_str(b).unwrap_or_default();
            let last = ["/input", "/messages"]
                .iter()
                .find_map(|p| v.pointer(p).and_then(serde_json::Value::as_array))
                .and_then(|a| a.last())
                .map(ToString::to_string)
                .unwrap_or_default();
            println!("  last message to the model: {last}");
        }
    }
    let asked = run(kind, bin, Case::Resume, &trap, big).await;
    // The second question's request carries the first conversation: resumed, not new.
    let resumed = matches!(asked.reply.outcome, TaskResult::Success(_))
        && !asked.landed
        && asked
            .bodies
            .iter()
            .any(|b| b.contains("FIRST-QUESTION") && b.contains("SECOND-QUESTION"));
    println!(
        "{name}: two questions, one session: {} in {:.1} s",
        brief(&asked.reply.outcome),
        asked.secs
    );
    let long_ok = long.landed && intact && matches!(long.reply.outcome, TaskResult::Success(_));
    println!(
        "{name}: edit: {} in {:.1} s; denied: {} in {:.1} s; long: {} requests, intact {intact}, {} in {:.1} s",
        brief(&edit.reply.outcome),
        edit.secs,
        brief(&denied.reply.outcome),
        denied.secs,
        long.bodies.len(),
        brief(&long.reply.outcome),
        long.secs
    );
    let outside = trap.hits.load(Ordering::SeqCst);
    let row = format!(
        "| {name:<11} | {:<11} | {:<40} | {:<13} | {:<14} | {:<7} | {:<7} | {boxed_cell:<9} | {:<10} | {outside:<7} |",
        yes(edited),
        format!(
            "{} (in {} out {} cache {} turns {})",
            yes(usage),
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.turns
        ),
        yes(denial),
        yes(long_ok),
        yes(session),
        yes(resumed),
        format!("{} {own_edit}+{own_denied}", yes(transcript)),
    );
    for (what, ok) in [
        ("edit landed", edited),
        ("usage parsed", usage),
        ("denial failed", denial),
        ("long prompt ok", long_ok),
        ("session kept", session),
        ("session resumed", resumed),
        ("no outside traffic", outside == 0),
        ("edit in the sandbox", boxed_ok || !boxed.sandbox),
        ("own tools and messages reported", transcript),
    ] {
        if !ok {
            failures.push(format!("{name}: {what}"));
        }
    }
    let seen = trap.seen.lock().unwrap().clone();
    (row, failures, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clis_edit_report_usage_fail_on_denial_and_take_long_prompts() {
    if std::env::var_os("ORCA_SKIP_REAL_CLIS").is_some() {
        println!("\n!!!!! real_clis: SKIPPED (ORCA_SKIP_REAL_CLIS is set) !!!!!\n");
        return;
    }
    let Some(bin) = install() else {
        println!(
            "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
             !!! real_clis: SKIPPED — node/npm or the npm registry is not available here.   !!!\n\
             !!! The real Claude Code, Codex and opencode were NOT tested.                  !!!\n\
             !!! Set ORCA_REQUIRE_REAL_CLIS=1 to make this a failure.                       !!!\n\
             !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
        );
        return;
    };
    let big: String = (0..200 * 1024 / 64)
        .map(|i| format!("line {i:06}: \"quoted\" 'single' $HOME `tick` \\ back — ü 🦀\n"))
        .collect();
    let started = Instant::now();
    // The three agents side by side (each with its own model server and trap).
    let (claude, codex, opencode) = tokio::join!(
        check(CliKind::ClaudeCode, &bin, &big),
        check(CliKind::Codex, &bin, &big),
        check(CliKind::Opencode, &bin, &big),
    );
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut outside = Vec::new();
    for (row, failed, seen) in [claude, codex, opencode] {
        rows.push(row);
        failures.extend(failed);
        outside.extend(seen);
    }
    println!(
        "\n| agent       | edit landed | usage parsed                             | denial failed | long prompt ok | session | resumed | sandboxed | own tools  | outside |\n\
         |-------------|-------------|------------------------------------------|---------------|----------------|---------|---------|-----------|------------|---------|"
    );
    for row in &rows {
        println!("{row}");
    }
    println!(
        "outside connection attempts (proxy traps): {} {outside:?}; 15 runs in {:.1} s\n",
        outside.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "failed: {failures:?}");
}
