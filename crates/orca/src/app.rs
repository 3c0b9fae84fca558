//! Wiring: the concrete store and agents (chosen here and only here), root discovery, and the
//! dispatch of each command to its module under `cmd/`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use orca_agents::config::Config;
use orca_agents::{Agents, WorkspaceTools};
use orca_core::{AgentPort, Budget, ExecutionId, Holder, PlanContent};
use orca_services::{Hitl, NoHuman, Orca};
use orca_store::{FileStore, Store};
use serde_json::Value;

use crate::cli::{AgentsCommand, AuditCommand, Command, ExecCommand, Global, PlanCommand};
use crate::cmd;
use crate::cmd::audit::verify::AuditScope;
use crate::exit::{CliError, Exit};
use crate::sandbox::Sandbox;
use crate::term::{Style, say};
use crate::trust::KeyUse;

/// Writes a result for people to stdout: redacted, ids shortened (`ids`).
pub(crate) fn out(text: &str) {
    write_stdout(&crate::ids::abbreviate(text));
}

/// Writes text for people to stdout as it is (redacted, ids left whole): a diff.
pub(crate) fn out_raw(text: &str) {
    write_stdout(text);
}

/// The version of every `--json` output's shape (`format_version`, first key of every object
/// printed; in a list, of every item). Bumped when a key changes meaning or goes away.
pub(crate) const JSON_FORMAT_VERSION: u32 = 1;

/// `value` with `format_version` first (kept if the value already carries one: a stored
/// document's version); a list's items each get it.
pub(crate) fn versioned(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            out.insert(
                "format_version".to_owned(),
                map.get("format_version")
                    .cloned()
                    .unwrap_or_else(|| Value::from(JSON_FORMAT_VERSION)),
            );
            out.extend(map.into_iter().filter(|(k, _)| k != "format_version"));
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| if v.is_object() { versioned(v) } else { v })
                .collect(),
        ),
        other => other,
    }
}

/// `value` with the key `from` renamed `to` and moved first (the contract's names for what a
/// stored document or a library type calls otherwise, e.g. `id` → `plan_id`).
pub(crate) fn renamed(value: Value, from: &str, to: &str) -> Value {
    match value {
        Value::Object(mut map) => match map.remove(from) {
            Some(v) => {
                let mut out = serde_json::Map::new();
                out.insert(to.to_owned(), v);
                out.extend(map);
                Value::Object(out)
            }
            None => Value::Object(map),
        },
        other => other,
    }
}

/// Writes a JSON result to stdout: redacted, full ids, versioned (the contract).
pub(crate) fn out_json(value: &Value) {
    let value = &crate::redact::redactor().redact_strings(versioned(value.clone()));
    write_stdout(&serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".to_owned()));
}

/// Writes a document in a standard format (a JSON Schema) as it is: pretty, redacted.
pub(crate) fn out_json_document(value: &Value) {
    let value = &crate::redact::redactor().redact_strings(value.clone());
    write_stdout(&serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".to_owned()));
}

/// Writes one JSON value on one line (JSON Lines): redacted, full ids, as given (an event
/// carries its own `format_version`).
pub(crate) fn out_json_line(value: &Value) {
    let value = &crate::redact::redactor().redact_strings(value.clone());
    write_stdout(&serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned()));
}

/// A full id alone on stdout: all `-q` prints for a command that creates a plan or an
/// execution (`id=$(orca -q plan create --file plan.json)`). Never shortened.
pub(crate) fn out_id(id: &dyn std::fmt::Display) {
    write_stdout(&id.to_string());
}

fn write_stdout(text: &str) {
    let text = &crate::term::for_stdout(&crate::redact::redact(text));
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    if !text.ends_with('\n') {
        let _ = stdout.write_all(b"\n");
    }
}

/// The project root: `--root`, else the nearest ancestor holding `.orca/`, else the current
/// directory.
pub(crate) fn find_root(explicit: Option<&Path>, create: bool) -> Result<PathBuf, CliError> {
    if let Some(root) = explicit {
        if create && !root.exists() {
            std::fs::create_dir_all(root).map_err(|e| {
                CliError::bad_input(format!("--root {}: cannot create it: {e}", root.display()))
            })?;
        }
        if !root.is_dir() {
            return Err(CliError::bad_input(format!(
                "--root {}: not a directory",
                root.display()
            )));
        }
        return Ok(root.to_path_buf());
    }
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::internal(format!("cannot read the current directory: {e}")))?;
    Ok(cwd
        .ancestors()
        .find(|d| d.join(".orca").is_dir())
        .unwrap_or(&cwd)
        .to_path_buf())
}

/// Everything a command needs.
pub(crate) struct App {
    pub(crate) root: PathBuf,
    pub(crate) store: Arc<dyn Store>,
    /// The shared store, when one is chosen (it is `store` too).
    pub(crate) shared: Option<orca_store_postgres::PgStore>,
    pub(crate) files: FileStore,
    /// The signed approval policy the user's config names, verified, if it names one.
    pub(crate) policy: Option<Arc<orca_services::policy::PolicyContext>>,
    pub(crate) agents: Arc<Agents>,
    pub(crate) config: Option<Config>,
    /// `[serve]` and `[notify]` of the settings, and the files they came from.
    pub(crate) serve: Option<toml::Value>,
    pub(crate) notify: Option<toml::Value>,
    /// `[telemetry]` of the settings, and the exporter when export is on and this command runs
    /// agents.
    pub(crate) telemetry_table: Option<toml::Value>,
    pub(crate) telemetry: Option<orca_telemetry::Telemetry>,
    pub(crate) config_files: Vec<PathBuf>,
    /// `[approval]`: which ways of approving the user's and the project's config allow.
    pub(crate) approval: crate::settings::layers::ApprovalSettings,
    pub(crate) style: Style,
    pub(crate) json: bool,
    pub(crate) quiet: bool,
    pub(crate) sandbox: Sandbox,
}

impl App {
    pub(crate) async fn open(
        global: &Global,
        create: bool,
        key_use: KeyUse,
        runs_agents: bool,
    ) -> Result<Self, CliError> {
        let root = find_root(global.root.as_deref(), create)?;
        let new_project = !root.join(".orca").is_dir();
        // Only the commands that create something may make a project; a read-only command run
        // in the wrong directory must not leave a `.orca/` there (it would capture root
        // discovery for every later command).
        if !create && !root.join(".orca").is_dir() {
            return Err(CliError::bad_input(match &global.root {
                Some(named) => format!(
                    "no orca project in {} (no .orca/ directory); run `orca init --root {}` first",
                    root.display(),
                    named.display()
                ),
                None => format!(
                    "no orca project in {} or above (no .orca/ directory); run `orca init` there first, or pass --root",
                    root.display()
                ),
            }));
        }
        // The config first: the store's redactor must know the keys it loads.
        let loaded = crate::settings::Settings::load(&root)?;
        // A wrong telemetry setting is refused before anything is created.
        let telemetry = if runs_agents {
            crate::telemetry::start(loaded.telemetry.as_ref())?
        } else {
            None
        };
        let sandbox = Sandbox::open(&root, loaded.config.as_ref(), runs_agents)?;
        let (authority, created) = crate::trust::authority(&root, &global.trusted_key, key_use)?;
        let authority = crate::trust::with_policy_admins(authority, &loaded.approval)?;
        let agents = Arc::new(
            loaded
                .agents
                .with_sandbox(sandbox.policy.clone())
                .with_trace_context(telemetry.is_some()),
        );
        // A verified policy's approvers sign approvals and seals that every one of them trusts.
        let policy = crate::trust::approval_policy(
            &root,
            &loaded.approval,
            &authority,
            &agents,
            loaded.config.as_ref().and_then(|c| c.isolation),
        )?;
        let authority = match &policy {
            Some(p) => authority.also_trusting(
                p.signed
                    .policy
                    .approvers
                    .values()
                    .filter_map(|k| k.parse::<orca_store::PublicKey>().ok()),
            ),
            None => authority,
        };
        if new_project {
            crate::checkpoint::forget(&root, &authority);
        }
        if let Some(path) = created {
            say(&format!(
                "created your signing key {} (it signs your approvals; keep it private)",
                path.display()
            ));
        }
        let shared = crate::cmd::store::shared_store(global, loaded.config.as_ref(), &authority)?;
        let files = FileStore::open_with_redactor(&root, authority, crate::redact::redactor())?;
        let store: Arc<dyn Store> = match &shared {
            Some(pg) => Arc::new(pg.clone()),
            None => Arc::new(files.clone()),
        };
        // Short ids are for people: `--json` (scripts, the bench) skips the scan.
        if !global.json {
            crate::ids::load(store.as_ref()).await;
        }
        Ok(Self {
            root,
            store,
            shared,
            policy,
            files,
            agents,
            config: loaded.config,
            serve: loaded.serve,
            notify: loaded.notify,
            telemetry_table: loaded.telemetry,
            telemetry,
            config_files: loaded.files,
            approval: loaded.approval,
            sandbox,
            style: Style::detect(global.no_color),
            json: global.json,
            quiet: global.quiet,
        })
    }

    /// The same app, its model calls showing progress on stderr (`run`, `ask` and the commands
    /// that resume a run; see [`crate::model_meter`]).
    fn with_model_progress(mut self, global: &Global) -> Self {
        let json_logs = global.log_format == crate::cli::LogFormat::Json;
        if let Some(meter) = crate::model_meter::ModelMeter::for_process(
            self.style, self.quiet, self.json, json_logs,
        ) {
            self.agents = Arc::new((*self.agents).clone().with_progress(Arc::new(meter)));
        }
        self
    }

    pub(crate) fn orca(&self, hitl: Arc<dyn Hitl>) -> Orca {
        let agents: Arc<dyn AgentPort> = self.agents.clone();
        let workspace = self.workspace_tools()(&self.root);
        Orca::new(
            self.store.clone(),
            agents,
            hitl,
            workspace,
            Budget::UNLIMITED,
        )
        .with_approval_policy(self.policy.clone())
    }

    /// The same app, its agents (and their workspace tools) giving a step's processes that
    /// must end early `grace` between SIGTERM and SIGKILL.
    pub(crate) fn with_kill_grace(mut self, grace: std::time::Duration) -> Self {
        self.agents = Arc::new((*self.agents).clone().with_kill_grace(grace));
        self
    }

    /// The workspace tools rooted at a directory (the project, or a step's worktree): every
    /// tool, with the steps' environment policy and the run's sandbox.
    pub(crate) fn workspace_tools(&self) -> orca_os::worktree::ToolsAt {
        let env = self.agents.env_policy().clone();
        let policy = self.sandbox.policy.clone();
        let grace = self.agents.kill_grace();
        Arc::new(move |dir: &Path| {
            WorkspaceTools::new(dir, &all_workspace_tools())
                .ok()
                .map(|w| {
                    Arc::new(
                        w.with_env_policy(env.clone())
                            .with_policy(policy.clone())
                            .with_kill_grace(grace),
                    ) as Arc<dyn orca_core::ToolHost>
                })
        })
    }

    /// The config's default isolation of writing steps.
    pub(crate) fn config_isolation(&self) -> Option<orca_core::Isolation> {
        self.config.as_ref().and_then(|c| c.isolation)
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) const fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub(crate) const fn files(&self) -> &FileStore {
        &self.files
    }

    pub(crate) fn env_policy(&self) -> &orca_os::step_env::EnvPolicy {
        self.agents.env_policy()
    }

    pub(crate) const fn json(&self) -> bool {
        self.json
    }

    pub(crate) const fn style(&self) -> Style {
        self.style
    }

    /// A hint for people (what to run next): stderr, never with `-q`.
    pub(crate) fn hint(&self, line: &str) {
        if !self.quiet && !self.json {
            say(line);
        }
    }

    pub(crate) fn info(&self, line: &str) {
        if !self.quiet {
            say(line);
        }
    }
}

/// Every workspace tool: the services' gate narrows them to each role's grant.
fn all_workspace_tools() -> Vec<String> {
    orca_agents::workspace::all_specs()
        .into_iter()
        .map(|s| s.name)
        .collect()
}

/// This host's name (as recorded in leases and running tasks).
pub(crate) fn own_host() -> String {
    orca_services::own_host()
}

pub(crate) fn holder() -> Holder {
    orca_services::this_process()
}

/// Who acts: `user:$USER` (recorded in approvals, decisions and stops).
pub(crate) fn user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .map_or_else(|| "user".to_owned(), |u| format!("user:{u}"))
}

/// Runs a command.
pub(crate) async fn run(command: Command, global: &Global) -> Result<Exit, CliError> {
    // Commands that need no project and must never create one.
    match command {
        Command::Init => return cmd::setup::init(global),
        Command::Completions { shell } => return Ok(cmd::setup::print_completions(shell)),
        Command::Man => return cmd::setup::print_man(),
        Command::Config(crate::cli::ConfigCommand::Show) => return cmd::config::show(global),
        Command::Plan(PlanCommand::Validate { file }) => {
            return crate::plan_doc::validate(
                &file,
                &cmd::setup::known_agents(global)?,
                global.json,
            );
        }
        Command::Plan(PlanCommand::Schema) => {
            // A JSON Schema document, as the standard has it (no `format_version` added).
            out_json_document(&PlanContent::json_schema());
            return Ok(Exit::Ok);
        }
        Command::Serve(args) => return crate::cmd::serve::run(args, global).await,
        Command::Store(cmd) => return crate::cmd::store::run(cmd, global).await,
        Command::Eval(cmd) => return crate::cmd::eval::run(cmd, global).await,
        Command::Policy(crate::cli::PolicyCommand::Sign { file, key }) => {
            return cmd::policy::sign(&file, key.as_deref(), global);
        }
        Command::Policy(crate::cli::PolicyCommand::Vote { plan, digest, note }) => {
            return cmd::vote::vote(&plan, &digest, note, global);
        }
        _ => {}
    }
    // Commands that create something may create the `--root` directory. So may the MCP server
    // for the project an agent host names with `--root`: failing there, the host only shows
    // "connection closed".
    let creates = matches!(
        command,
        Command::Ask(_) | Command::Run(_) | Command::Plan(PlanCommand::Create { .. })
    ) || (matches!(command, Command::Mcp(_)) && global.root.is_some());
    let runs_agents = matches!(
        command,
        Command::Ask(_)
            | Command::Run(_)
            | Command::Worker(_)
            | Command::Mcp(_)
            | Command::Exec(
                ExecCommand::Resume { .. } | ExecCommand::Decide { .. } | ExecCommand::Retry { .. }
            )
    );
    // Whatever runs agents records signed entries; so do the human's decisions and a stop.
    let signs = runs_agents
        || matches!(
            command,
            Command::Plan(
                PlanCommand::Approve { .. }
                    | PlanCommand::Reject { .. }
                    | PlanCommand::Revise { .. }
            ) | Command::Policy(crate::cli::PolicyCommand::Timers)
                | Command::Exec(
                    ExecCommand::Stop { .. }
                        | ExecCommand::Accept { .. }
                        | ExecCommand::Discard { .. }
                )
        );
    let key_use = if signs { KeyUse::Sign } else { KeyUse::Verify };
    // What orca writes is checkpointed outside the project afterwards (`checkpoint`).
    let writes = signs || creates || matches!(command, Command::Exec(ExecCommand::Cancel { .. }));
    let app = App::open(global, creates, key_use, runs_agents).await?;
    // A run's kill grace travels with its agents (no process-wide setting).
    let app = match kill_grace_of(&command) {
        Some(grace) => app.with_kill_grace(grace),
        None => app,
    };
    // Commands a person waits on while models work show their progress.
    // (Not a worker's or the MCP server's: no person watches their stderr.)
    let shows_progress = runs_agents && !matches!(command, Command::Worker(_) | Command::Mcp(_));
    let app = if shows_progress {
        app.with_model_progress(global)
    } else {
        app
    };
    let result = match command {
        Command::Ask(args) => cmd::ask::ask(&app, &args.message, &args.run).await,
        Command::Plan(command) => cmd::plan::plan(&app, command).await,
        Command::Run(args) => cmd::run::run_plan(&app, &args.plan, &args.run, args.detach).await,
        Command::Worker(args) => crate::cmd::worker::run(&app, args).await,
        Command::Exec(command) => cmd::exec::exec(&app, command).await,
        Command::Watch { exec } => {
            let url = crate::cmd::store::url(global, app.config.as_ref())?;
            cmd::watch::watch(&app, &exec, url.as_deref()).await
        }
        Command::Events { exec, follow } => cmd::events::events(&app, &exec, follow).await,
        Command::Policy(command) => cmd::policy::policy(&app, command).await,
        Command::Audit(AuditCommand::Show { target }) => {
            cmd::audit::show::show(&app, &target).await
        }
        Command::Audit(AuditCommand::Verify { exec, all }) => {
            let scope = AuditScope::from_args(exec, all);
            match &app.shared {
                Some(pg) => crate::cmd::audit::shared::verify(&app, global, pg, scope).await,
                None => crate::cmd::audit::verify::verify(&app, scope).await,
            }
        }
        Command::Agents(AgentsCommand::List) => cmd::agents::agents_list(&app),
        Command::Mcp(args) => crate::cmd::mcp::serve(&app, global, &args).await,
        Command::Doctor => cmd::agents::doctor(&app).await,
        Command::Init
        | Command::Completions { .. }
        | Command::Man
        | Command::Config(_)
        | Command::Serve(_)
        | Command::Store(_)
        | Command::Eval(_) => unreachable_init(),
    };
    if writes
        && !matches!(result, Ok(Exit::Tampered))
        && let Err(e) = crate::checkpoint::record(&app).await
    {
        tracing::warn!("the checkpoint of what orca wrote was not updated: {e}");
    }
    // What is queued is sent, or abandoned after a short bound.
    if let Some(t) = &app.telemetry {
        t.shutdown().await;
    }
    result
}

/// The `--kill-grace` of a command that runs steps.
fn kill_grace_of(command: &Command) -> Option<std::time::Duration> {
    let secs = match command {
        Command::Ask(args) => args.run.kill_grace,
        Command::Run(args) => args.run.kill_grace,
        Command::Exec(
            ExecCommand::Resume { run, .. }
            | ExecCommand::Decide { run, .. }
            | ExecCommand::Retry { run, .. },
        ) => run.kill_grace,
        Command::Worker(args) => args.kill_grace,
        _ => return None,
    };
    Some(std::time::Duration::from_secs(secs))
}

pub(crate) fn unreachable_init() -> Result<Exit, CliError> {
    Err(CliError::internal(
        "this command is handled before the store is opened",
    ))
}

/// Resolves an execution id or prefix.
pub(crate) async fn resolve_exec(app: &App, text: &str) -> Result<ExecutionId, CliError> {
    Ok(app
        .orca(Arc::new(NoHuman))
        .executions()
        .resolve(text)
        .await?)
}

/// What each step of an execution took (time, tokens, cost) and the total, from its events.
pub(crate) async fn totals(app: &App, id: ExecutionId) -> Result<crate::render::Totals, CliError> {
    let header = app.store.execution_header(id).await?;
    let events =
        orca_services::events::read(app.store.as_ref(), header.value.info().plan_id, id, None)
            .await?;
    Ok(orca_services::events::totals(&events))
}

/// The totals as JSON: per step and in all.
pub(crate) fn totals_json(totals: &crate::render::Totals) -> Value {
    serde_json::json!({ "steps": totals.0, "total": totals.1 })
}

/// The problem of a tampered log, naming its entry once.
pub(crate) fn tamper_text(seq: u64, problem: &str) -> String {
    if problem.contains(&format!("entry {seq}")) {
        problem.to_owned()
    } else {
        format!("entry {seq}: {problem}")
    }
}
