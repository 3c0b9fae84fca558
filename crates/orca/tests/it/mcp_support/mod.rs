//! What the MCP tests share: a client that plays the host (and, when it declares elicitation,
//! the human), a temp project, and helpers to call tools.

#![expect(clippy::unwrap_used, reason = "tests may unwrap")]

pub(crate) mod planner;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt as _};
use serde_json::{Value, json};

/// How the test's client answers an elicitation, if it declares the capability at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Human {
    /// No elicitation capability (most hosts today).
    Absent,
    /// Accepts with `{"approve": true}`.
    Accepts,
    /// Declines.
    Declines,
}

/// Something done while the host shows the question, before it answers (an attacker changing
/// the plan behind the form). It also receives the message the host shows.
#[derive(Clone)]
pub(crate) struct Meanwhile(pub(crate) Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for Meanwhile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Meanwhile")
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Client {
    name: &'static str,
    human: Human,
    asked: Arc<AtomicUsize>,
    meanwhile: Option<Meanwhile>,
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let caps = if self.human == Human::Absent {
            ClientCapabilities::default()
        } else {
            ClientCapabilities::builder().enable_elicitation().build()
        };
        ClientConfig::new(caps, Implementation::new(self.name, "1.0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let ElicitRequestParams::FormElicitationParams { message, .. } = request else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        // The human sees the plan they approve, and what each step will receive.
        assert!(
            message.contains("say hello") && message.contains("Environment (names only"),
            "{message}"
        );
        if let Some(Meanwhile(act)) = &self.meanwhile {
            tokio::task::block_in_place(|| act(&message));
        }
        Ok(match self.human {
            Human::Accepts => {
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": true}))
            }
            Human::Declines | Human::Absent => ElicitResult::new(ElicitationAction::Decline),
        })
    }
}

pub(crate) struct Project {
    _dir: tempfile::TempDir,
    pub(crate) root: std::path::PathBuf,
    pub(crate) config_home: std::path::PathBuf,
}

impl Project {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("project");
        let config_home = dir.path().join("config");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&config_home).unwrap();
        let p = Self {
            _dir: dir,
            root,
            config_home,
        };
        let out = p.orca(&["init"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // A planner whose model is unreachable (a port nothing listens on): no network, and
        // `plan_from_request` must say what to configure.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        std::fs::write(
            p.root.join(".orca/config.toml"),
            format!("[agents.planner]\nbackend = \"ollama\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\n"),
        )
        .unwrap();
        p
    }

    /// An MCP server for a project that exists, run by the user whose config home is
    /// `config_home` (nothing is initialised or configured).
    pub(crate) fn sharing(root: &std::path::Path, config_home: &std::path::Path) -> Self {
        Self {
            _dir: tempfile::tempdir().unwrap(),
            root: root.to_path_buf(),
            config_home: config_home.to_path_buf(),
        }
    }

    pub(crate) fn orca(&self, args: &[&str]) -> std::process::Output {
        crate::common::orca(&self.root, &self.config_home, args)
    }

    pub(crate) fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.orca(&all);
        assert!(
            out.status.success(),
            "orca {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub(crate) fn stage(&self, plan: &str) -> String {
        self.json(&["plan", "show", plan])["stage"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub(crate) async fn connect(
        &self,
        name: &'static str,
        human: Human,
    ) -> (RunningService<RoleClient, Client>, Arc<AtomicUsize>) {
        self.connect_with(name, human, &[], &[]).await
    }

    pub(crate) async fn connect_with(
        &self,
        name: &'static str,
        human: Human,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> (RunningService<RoleClient, Client>, Arc<AtomicUsize>) {
        self.connect_full(name, human, args, env, None).await
    }

    /// A client that runs `meanwhile` while it shows the question, before it answers.
    pub(crate) async fn connect_meanwhile(
        &self,
        name: &'static str,
        human: Human,
        meanwhile: Meanwhile,
    ) -> (RunningService<RoleClient, Client>, Arc<AtomicUsize>) {
        self.connect_full(name, human, &[], &[], Some(meanwhile))
            .await
    }

    async fn connect_full(
        &self,
        name: &'static str,
        human: Human,
        args: &[&str],
        env: &[(&str, &str)],
        meanwhile: Option<Meanwhile>,
    ) -> (RunningService<RoleClient, Client>, Arc<AtomicUsize>) {
        let mut cmd =
            tokio::process::Command::from(crate::common::isolated(&self.root, &self.config_home));
        cmd.arg("mcp").args(args).envs(env.iter().copied());
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let asked = Arc::new(AtomicUsize::new(0));
        let client = Client {
            name,
            human,
            asked: asked.clone(),
            meanwhile,
        };
        (client.serve(transport).await.unwrap(), asked)
    }

    /// A client on protocol 2026-07-28 (`server/discover`, no server-to-client requests: an
    /// elicitation is an `input_required` round the client fulfils and retries).
    pub(crate) async fn connect_rounds(
        &self,
        name: &'static str,
        human: Human,
    ) -> (RunningService<RoleClient, Client>, Arc<AtomicUsize>) {
        self.connect_rounds_meanwhile(name, human, None).await
    }

    /// [`Project::connect_rounds`] with something done while the question is shown.
    pub(crate) async fn connect_rounds_meanwhile(
        &self,
        name: &'static str,
        human: Human,
        meanwhile: Option<Meanwhile>,
    ) -> (RunningService<RoleClient, Client>, Arc<AtomicUsize>) {
        use rmcp::ClientServiceExt as _;
        let mut cmd =
            tokio::process::Command::from(crate::common::isolated(&self.root, &self.config_home));
        cmd.arg("mcp");
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let asked = Arc::new(AtomicUsize::new(0));
        let client = Client {
            name,
            human,
            asked: asked.clone(),
            meanwhile,
        };
        let lifecycle = rmcp::ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        };
        (
            client
                .serve_with_lifecycle(transport, lifecycle)
                .await
                .unwrap(),
            asked,
        )
    }
}

/// A plan document of shell steps.
pub(crate) fn plan_doc(steps: Value) -> Value {
    json!({
        "goal": "an mcp test plan",
        "summary": "shell steps driven through MCP",
        "assumptions": ["a POSIX shell"],
        "risks": ["none: it writes only in the project"],
        "verification": ["the files exist"],
        "steps": steps,
    })
}

pub(crate) fn simple_plan() -> Value {
    plan_doc(json!([
        {"id": "hello", "agent": "shell", "description": "say hello", "command": "echo hello > hello.txt && echo said hello"}
    ]))
}

pub(crate) async fn call(
    client: &RunningService<RoleClient, Client>,
    tool: &str,
    args: Value,
) -> Result<CallToolResult, String> {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .map_err(|e| e.to_string())
}

/// The JSON a successful tool call returned (panics on a tool error).
pub(crate) async fn ok(
    client: &RunningService<RoleClient, Client>,
    tool: &str,
    args: Value,
) -> Value {
    let result = call(client, tool, args.clone()).await.unwrap();
    assert_ne!(
        result.is_error,
        Some(true),
        "{tool} {args}: {}",
        text(&result)
    );
    serde_json::from_str(&text(&result)).unwrap()
}

pub(crate) fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether a tool's name or input schema could carry an approval: a name that approves or
/// decides anything, a property named like a verdict, or any allowed value that approves.
pub(crate) fn could_approve(tool: &Value) -> bool {
    let name = tool["name"].as_str().unwrap_or_default().to_lowercase();
    let approving_name = [
        "approve", "approval", "accept", "verdict", "decide", "replan",
    ]
    .iter()
    .any(|w| name.contains(w));
    let schema = tool["inputSchema"].to_string().to_lowercase();
    let approving_field = [
        "\"approve\"",
        "\"approved\"",
        "\"approval\"",
        "\"accept\"",
        "\"verdict\"",
        "\"yes\"",
    ]
    .iter()
    .any(|w| schema.contains(w));
    let approving_value = [
        "\"const\":\"approve",
        "\"const\":\"replan",
        "\"const\":\"accept",
        "\"const\":\"answer",
    ]
    .iter()
    .any(|w| schema.contains(w));
    // A property of type object with no schema (free-form) other than a plan document, or
    // additional properties allowed, could smuggle anything in.
    let open = tool["inputSchema"]["additionalProperties"] != json!(false);
    approving_name || approving_field || approving_value || open
}

pub(crate) async fn watch_until(
    client: &RunningService<RoleClient, Client>,
    exec: &str,
    events: &mut Vec<Value>,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut cursor = events
        .last()
        .and_then(|e| e["seq"].as_u64())
        .map_or(0, |s| s + 1);
    loop {
        let w = ok(
            client,
            "execution_watch",
            json!({"execution": exec, "cursor": cursor, "wait_seconds": 5}),
        )
        .await;
        cursor = w["next_cursor"].as_u64().unwrap();
        events.extend(w["events"].as_array().unwrap().iter().cloned());
        if done(&w) {
            return w;
        }
        assert!(Instant::now() < deadline, "no progress: {w}");
    }
}
