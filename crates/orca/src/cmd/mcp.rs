//! `orca mcp`: the MCP server (`orca-mcp`) over this project, on stdin/stdout. Here the binary
//! picks what the server may not name: the file store's services, the redactor, and how a run
//! is driven — by a separate `orca exec resume` process, in its own process group, that goes
//! on when the MCP session ends (ADR 0019).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use clap::Args;
use orca_core::{ExecutionId, ExecutionStage, Plan};
use orca_mcp::{Elicitation, Host, Launched, OrcaMcp, Settings};
use orca_os::step_env::EnvPolicy;
use orca_services::NoHuman;
use orca_services::hitl::render_plan;
use orca_store::LeaseInfo;
use serde_json::Value;

use crate::app::App;
use crate::cli::Global;
use crate::exit::{CliError, Exit};

/// `orca mcp` options.
#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// The decision inbox (`orca serve`) to send humans to for approvals, if you run one.
    #[arg(long, env = "ORCA_INBOX_URL", value_name = "URL")]
    pub(crate) inbox_url: Option<String>,
    /// Never take an approval through the host's UI (MCP elicitation): `plan_ask_human` then
    /// only returns the command for the human (also: `[approval] mcp_elicitation = false` in
    /// your config).
    #[arg(long)]
    pub(crate) no_elicitation: bool,
}

/// Starts `orca exec resume` processes.
#[derive(Debug)]
struct Drivers {
    exe: PathBuf,
    root: PathBuf,
    trusted_keys: Vec<PathBuf>,
    env_policy: EnvPolicy,
    /// The planner's traces of `plan_from_request`, when export is on.
    traces: Option<crate::telemetry::PlannerTraces>,
}

impl Host for Drivers {
    fn launch(&self, execution: ExecutionId) -> Result<Launched, String> {
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.arg("--root").arg(&self.root);
        for key in &self.trusted_keys {
            cmd.arg("--trusted-key").arg(key);
        }
        // No terminal: a decision the run needs is recorded and the driver exits (4); the
        // agent answers it with `decision_answer` (retry/stop) or the human with the CLI.
        cmd.args(["--quiet", "--no-color", "exec", "resume"])
            .arg(execution.to_string())
            .args(["--on-failure", "ask"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a signal to the MCP server's group (the host closing it)
            // does not end the run.
            .process_group(0)
            .kill_on_drop(false);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))?;
        let pid = child.id().unwrap_or_default();
        // Reaped when it ends, so no zombie stays behind while the session lasts.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(Launched { pid })
    }

    fn driver(
        &self,
        execution: ExecutionId,
        stage: ExecutionStage,
        lease: Option<&LeaseInfo>,
    ) -> Option<Value> {
        crate::cmd::driver::driver_json(execution, stage, lease)
    }

    fn planned<'a>(
        &'a self,
        plan: &'a Plan,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            if let Some(traces) = &self.traces {
                traces.export(plan.id(), &plan.content().goal).await;
            }
        })
    }

    fn describe_plan(&self, plan: &Plan) -> String {
        let mut text = render_plan(plan);
        text.push_str(&crate::settings::step_env::step_env_text(
            plan,
            &self.env_policy,
        ));
        text
    }
}

/// Serves until the client closes stdin.
pub(crate) async fn serve(app: &App, global: &Global, args: &McpArgs) -> Result<Exit, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::internal(format!("cannot find the orca executable: {e}")))?;
    let root = app.root().to_path_buf();
    let host = Arc::new(Drivers {
        exe,
        root: root.clone(),
        trusted_keys: global.trusted_key.clone(),
        env_policy: app.env_policy().clone(),
        traces: crate::telemetry::PlannerTraces::of(app),
    });
    let approval = &app.approval;
    let elicitation = match (&approval.mcp_elicitation_off, args.no_elicitation) {
        (Some(file), _) => Elicitation::Off(format!(
            "approvals through an agent host are turned off ([approval] mcp_elicitation = false in {})",
            file.display()
        )),
        (None, true) => Elicitation::off_by_flag(),
        (None, false) => Elicitation::Allowed,
    };
    let settings = Settings {
        root: root.display().to_string(),
        inbox_url: args.inbox_url.clone(),
        redactor: crate::redact::redactor(),
        elicitation,
    };
    let orca = app
        .orca(Arc::new(NoHuman))
        .with_changes(Some(crate::isolation::changes(app).await));
    let server = OrcaMcp::new(orca, host, settings);
    orca_mcp::serve_stdio(server)
        .await
        .map_err(|e| CliError::internal(e.to_string()))?;
    Ok(Exit::Ok)
}
