//! Wiring (concrete store and agents, chosen here and only here) and the commands.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use orca_agents::config::Config;
use orca_agents::{Agents, WorkspaceTools};
use orca_core::{
    AgentPort, Budget, Decision, ErrorCode, ExecutionId, ExecutionStage, Holder, PlanContent,
    PlanId, PlanRefStage, PlanStage, PlannerResponse, Task,
};
use orca_services::hitl::render_plan;
use orca_services::{
    ApprovalOutcome, ExecutionService, FailurePolicy, Hitl, NoHuman, Orca, RunConfig, RunOutcome,
    RunReport,
};
use orca_store::audit::VerifyReport;
use orca_store::{FileStore, Store};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::cli::{
    AgentsCommand, AuditCommand, Command, DecisionArg, ExecCommand, Global, OnFailure, PlanCommand,
    RunOptions, ShowFormat,
};
use crate::exit::{CliError, Exit};
use crate::render;
use crate::sandbox::Sandbox;
use crate::secrets;
use crate::term::{Progress, Style, TerminalHitl, interactive, say};
use crate::trust::KeyUse;

/// Writes a result to stdout, redacted.
pub(crate) fn out(text: &str) {
    let text = &secrets::redact(text);
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    if !text.ends_with('\n') {
        let _ = stdout.write_all(b"\n");
    }
}

pub(crate) fn out_json(value: &Value) {
    let value = &secrets::redactor().redact_strings(value.clone());
    out(&serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".to_owned()));
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

const CONFIG_TEMPLATE: &str = orca_agents::config::CONFIG_TEMPLATE;

/// Everything a command needs.
pub(crate) struct App {
    root: PathBuf,
    store: Arc<dyn Store>,
    files: FileStore,
    agents: Arc<Agents>,
    config: Option<Config>,
    style: Style,
    json: bool,
    quiet: bool,
    sandbox: Sandbox,
}

impl App {
    fn open(
        global: &Global,
        create: bool,
        key_use: KeyUse,
        runs_agents: bool,
    ) -> Result<Self, CliError> {
        let root = find_root(global.root.as_deref(), create)?;
        // Only the commands that create something may make a project; a read-only command run
        // in the wrong directory must not leave a `.orca/` there (it would capture root
        // discovery for every later command).
        if !create && !root.join(".orca").is_dir() {
            return Err(CliError::bad_input(format!(
                "no orca project in {} or above (no .orca/ directory); run `orca init` there first, or pass --root",
                root.display()
            )));
        }
        // The config first: the store's redactor must know the keys it loads.
        let loaded = secrets::load_agents(&root)?;
        let sandbox = Sandbox::open(&root, loaded.config.as_ref(), runs_agents)?;
        let (authority, created) = crate::trust::authority(&root, &global.trusted_key, key_use)?;
        if let Some(path) = created {
            say(&format!(
                "created your signing key {} (it signs your approvals; keep it private)",
                path.display()
            ));
        }
        let shared = crate::store_cmd::shared_store(global, loaded.config.as_ref(), &authority)?;
        let files = FileStore::open_with_redactor(&root, authority, secrets::redactor())?;
        let store: Arc<dyn Store> = shared.unwrap_or_else(|| Arc::new(files.clone()));
        Ok(Self {
            root,
            store,
            files,
            agents: Arc::new(loaded.agents.with_sandbox(sandbox.policy.clone())),
            config: loaded.config,
            sandbox,
            style: Style::detect(global.no_color),
            json: global.json,
            quiet: global.quiet,
        })
    }

    pub(crate) fn orca(&self, hitl: Arc<dyn Hitl>) -> Orca {
        let agents: Arc<dyn AgentPort> = self.agents.clone();
        let workspace = WorkspaceTools::new(&self.root, &all_workspace_tools())
            .ok()
            .map(|w| {
                Arc::new(
                    w.with_env_policy(self.agents.env_policy().clone())
                        .with_policy(self.sandbox.policy.clone()),
                ) as Arc<dyn orca_core::ToolHost>
            });
        Orca::new(
            self.store.clone(),
            agents,
            hitl,
            workspace,
            Budget::UNLIMITED,
        )
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

    pub(crate) const fn config(&self) -> Option<&Config> {
        self.config.as_ref()
    }

    pub(crate) fn env_policy(&self) -> &orca_agents::step_env::EnvPolicy {
        self.agents.env_policy()
    }

    pub(crate) const fn json(&self) -> bool {
        self.json
    }

    pub(crate) const fn style(&self) -> Style {
        self.style
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
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

fn holder() -> Holder {
    Holder {
        pid: std::process::id(),
        host: own_host(),
        token: ExecutionId::new().uuid().simple().to_string(),
    }
}

/// Runs a command.
pub(crate) async fn run(command: Command, global: &Global) -> Result<Exit, CliError> {
    // Commands that need no project and must never create one.
    match command {
        Command::Init => return init(global),
        Command::Completions { shell } => return Ok(print_completions(shell)),
        Command::Man => return print_man(),
        Command::Plan(PlanCommand::Validate { file }) => {
            return crate::plan_doc::validate(&file, &known_agents(global)?, global.json);
        }
        Command::Plan(PlanCommand::Schema) => {
            out_json(&PlanContent::json_schema());
            return Ok(Exit::Ok);
        }
        Command::Store(cmd) => return crate::store_cmd::run(cmd, global).await,
        _ => {}
    }
    // Commands that create something may create the `--root` directory.
    let creates = matches!(
        command,
        Command::Ask(_) | Command::Run(_) | Command::Plan(PlanCommand::Create { .. })
    );
    let signs = matches!(
        command,
        Command::Ask(_)
            | Command::Run(_)
            | Command::Worker(_)
            | Command::Mcp(_)
            | Command::Plan(PlanCommand::Approve { .. } | PlanCommand::Reject { .. })
            | Command::Exec(
                ExecCommand::Resume { .. } | ExecCommand::Decide { .. } | ExecCommand::Stop { .. }
            )
    );
    let key_use = if signs { KeyUse::Sign } else { KeyUse::Verify };
    let runs_agents = matches!(
        command,
        Command::Ask(_)
            | Command::Run(_)
            | Command::Worker(_)
            | Command::Mcp(_)
            | Command::Exec(ExecCommand::Resume { .. } | ExecCommand::Decide { .. })
    );
    let app = App::open(global, creates, key_use, runs_agents)?;
    match command {
        Command::Init => unreachable_init(),
        Command::Ask(args) => ask(&app, &args.message, &args.run).await,
        Command::Plan(cmd) => plan(&app, cmd).await,
        Command::Run(args) => run_plan(&app, &args.plan, &args.run, args.detach).await,
        Command::Worker(args) => crate::worker::run(&app, global, args).await,
        Command::Exec(cmd) => exec(&app, cmd).await,
        Command::Watch { exec } => {
            let url = crate::store_cmd::url(global, app.config.as_ref())?;
            crate::driver::watch(&app, &exec, url.as_deref()).await
        }
        Command::Audit(AuditCommand::Verify { exec, all: _ }) => {
            crate::store_cmd::refuse_shared(global, app.config.as_ref())?;
            crate::audit_cmd::verify(&app, exec.as_deref()).await
        }
        Command::Agents(AgentsCommand::List) => agents_list(&app),
        Command::Mcp(args) => crate::mcp::serve(&app, global, &args).await,
        Command::Doctor => {
            let report = secrets::doctor(&app.agents, app.config.as_ref(), &app.root, app.json);
            match report {
                Value::String(text) => out(&text),
                other => out_json(&other),
            }
            Ok(Exit::Ok)
        }
        Command::Completions { .. } | Command::Man | Command::Store(_) => unreachable_init(),
    }
}

fn unreachable_init() -> Result<Exit, CliError> {
    Err(CliError::internal(
        "this command is handled before the store is opened",
    ))
}

/// The agents a plan may name: the project's (built-ins and its config), or the built-ins
/// when there is no project here or above. Reads only; creates nothing.
fn known_agents(
    global: &Global,
) -> Result<std::collections::BTreeSet<orca_core::AgentId>, CliError> {
    let root = match &global.root {
        Some(root) => Some(root.clone()),
        None => std::env::current_dir().ok().and_then(|cwd| {
            cwd.ancestors()
                .find(|d| d.join(".orca").is_dir())
                .map(Path::to_path_buf)
        }),
    };
    let agents = match root {
        Some(root) if root.join(".orca").is_dir() => secrets::load_agents(&root)?.agents,
        _ => Agents::with_defaults(".", &|_: &str| None, orca_agents::LoopSettings::default()),
    };
    Ok(agents.agents().into_iter().map(|a| a.id).collect())
}

/// Generated into memory first: a closed stdout (`| head`) is then not an error, as for every
/// other output.
fn print_completions(shell: clap_complete::Shell) -> Exit {
    use clap::CommandFactory as _;
    let mut cmd = crate::cli::Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "orca", &mut script);
    out(&String::from_utf8_lossy(&script));
    Exit::Ok
}

fn print_man() -> Result<Exit, CliError> {
    use clap::CommandFactory as _;
    let mut page = Vec::new();
    clap_mangen::Man::new(crate::cli::Cli::command())
        .render(&mut page)
        .map_err(|e| CliError::internal(format!("cannot render the manual page: {e}")))?;
    out(&String::from_utf8_lossy(&page));
    Ok(Exit::Ok)
}

fn init(global: &Global) -> Result<Exit, CliError> {
    let root = match &global.root {
        Some(r) => find_root(Some(r), true)?,
        None => std::env::current_dir().map_err(|e| CliError::internal(e.to_string()))?,
    };
    let dir = root.join(".orca");
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::internal(format!("cannot create {}: {e}", dir.display())))?;
    let config = dir.join("config.toml");
    let created = if config.exists() {
        false
    } else {
        let tmp = dir.join(".config.toml.tmp");
        let _ = std::fs::remove_file(&tmp);
        secrets::write_private(&tmp, CONFIG_TEMPLATE)
            .and_then(|()| std::fs::rename(&tmp, &config))
            .map_err(|e| CliError::internal(format!("cannot write {}: {e}", config.display())))?;
        true
    };
    let (_, key) = crate::trust::authority(&root, &global.trusted_key, KeyUse::Sign)?;
    if let Some(path) = &key {
        say(&format!(
            "created your signing key {} (it signs your approvals; keep it private)",
            path.display()
        ));
    }
    let removed = FileStore::open(&root)?.clean_all_stale_temps();
    if removed > 0 {
        say(&format!(
            "removed {removed} temp file(s) left by a process that is gone"
        ));
    }
    if global.json {
        out_json(&json!({ "root": root, "config": config, "created_config": created }));
    } else {
        out(&format!(
            "{} {}\n{} {}",
            if created { "created" } else { "kept" },
            config.display(),
            "orca is ready in",
            dir.display()
        ));
    }
    Ok(Exit::Ok)
}

async fn plan(app: &App, cmd: PlanCommand) -> Result<Exit, CliError> {
    let orca = app.orca(Arc::new(NoHuman));
    let p = &orca.planning;
    match cmd {
        PlanCommand::Create { file } => {
            let proposal = create_from_file(&orca, &file).await?;
            if app.json {
                out_json(
                    &json!({ "plan_id": proposal.id(), "stage": "proposal", "steps": proposal.content().steps.len() }),
                );
            } else {
                out(&format!(
                    "created proposal {} ({} steps)\nnext: orca plan show {} · orca plan approve {} · orca run {} --yes",
                    proposal.id(),
                    proposal.content().steps.len(),
                    proposal.id(),
                    proposal.id(),
                    proposal.id()
                ));
            }
        }
        PlanCommand::List => {
            let listing = p.list().await?;
            for problem in &listing.problems {
                say(&format!(
                    "warning: {}: {}",
                    problem.location, problem.message
                ));
            }
            if app.json {
                out_json(&json!(listing.items));
            } else {
                out(&render::plan_list(&listing.items));
            }
        }
        PlanCommand::Show {
            plan,
            graph,
            format,
        } => {
            let id = p.resolve(&plan).await?;
            let plan = p.plan(id).await?;
            let policy = app.agents.env_policy();
            if format != ShowFormat::Text {
                out(&match format {
                    ShowFormat::Mermaid => crate::plan_doc::mermaid(plan.content()),
                    _ => crate::plan_doc::dot(plan.content()),
                });
            } else if app.json {
                let mut value = json!(plan);
                if let Some(obj) = value.as_object_mut() {
                    obj.insert("step_env".to_owned(), secrets::step_env_json(&plan, policy));
                }
                out_json(&value);
            } else {
                let mut text = render_plan(&plan);
                text.push_str(&secrets::step_env_text(&plan, policy));
                if graph {
                    text.push('\n');
                    text.push_str(&render::plan_graph(&plan));
                }
                out(&text);
            }
        }
        PlanCommand::Validate { .. } | PlanCommand::Schema => return unreachable_init(),
        PlanCommand::Approve { plan, note } => {
            let id = p.resolve(&plan).await?;
            let approved = p.approve(id, &user(), note).await?;
            decided(
                app,
                id,
                "approved",
                &format!(
                    "approved {id} (digest {})\nnext: orca run {id}",
                    approved.digest()
                ),
            );
        }
        PlanCommand::Reject { plan, reason } => {
            let id = p.resolve(&plan).await?;
            p.reject(id, &user(), reason).await?;
            decided(app, id, "rejected", &format!("rejected {id}"));
        }
        PlanCommand::RequestChanges { plan, feedback } => {
            let id = p.resolve(&plan).await?;
            p.request_changes(id, &user(), &feedback).await?;
            decided(
                app,
                id,
                "draft",
                &format!("{id} is a draft again, with your feedback for the planner"),
            );
        }
    }
    Ok(Exit::Ok)
}

fn decided(app: &App, id: PlanId, stage: &str, human: &str) {
    if app.json {
        out_json(&json!({ "plan_id": id, "stage": stage }));
    } else {
        out(human);
    }
}

pub(crate) fn user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .map_or_else(|| "user".to_owned(), |u| format!("user:{u}"))
}

async fn create_from_file(orca: &Orca, file: &Path) -> Result<orca_core::ProposalPlan, CliError> {
    let text = crate::plan_doc::read_plan_file(file)?;
    let content = PlanContent::from_json(&text)
        .map_err(|e| CliError::bad_input(format!("{}: {e}", file.display())))?;
    orca.planning
        .create_proposal(content, None)
        .await
        .map_err(|e| CliError::bad_input(format!("{}: {}", file.display(), crate::exit::chain(&e))))
}

/// `orca run PLAN`: an id/prefix, or a plan document to create first.
async fn run_plan(
    app: &App,
    plan: &str,
    options: &RunOptions,
    detach: bool,
) -> Result<Exit, CliError> {
    let orca = app.orca(hitl_for(app, options));
    let path = Path::new(plan);
    let id = if plan.ends_with(".json") || (path.is_file() && plan.parse::<PlanId>().is_err()) {
        let proposal = create_from_file(&orca, path).await?;
        app.info(&format!(
            "created proposal {} from {}",
            proposal.id(),
            path.display()
        ));
        proposal.id()
    } else {
        orca.planning.resolve(plan).await?
    };
    approve_and_run(app, &orca, id, options, detach).await
}

fn hitl_for(app: &App, options: &RunOptions) -> Arc<dyn Hitl> {
    if interactive() && !app.json && options.on_failure == OnFailure::Ask {
        Arc::new(TerminalHitl { style: app.style })
    } else {
        Arc::new(NoHuman)
    }
}

async fn approve_and_run(
    app: &App,
    orca: &Orca,
    id: PlanId,
    options: &RunOptions,
    detach: bool,
) -> Result<Exit, CliError> {
    let plan = orca.planning.plan(id).await?;
    match plan.stage() {
        PlanStage::Approved => {}
        PlanStage::Proposal if options.yes => {
            let approved = orca
                .planning
                .approve(id, &format!("{} (--yes)", user()), None)
                .await?;
            app.info(&format!(
                "approved {id} (--yes), digest {}",
                approved.digest()
            ));
        }
        PlanStage::Proposal if interactive() && !app.json => {
            // What each step will receive is part of what the human approves.
            say(&secrets::step_env_text(&plan, app.agents.env_policy()));
            let hitl = TerminalHitl { style: app.style };
            match orca.relay.approval_loop(id, &hitl, &user()).await? {
                ApprovalOutcome::Approved(_) => {}
                ApprovalOutcome::Rejected(_) => {
                    out(&format!("rejected {id}"));
                    return Ok(Exit::Ok);
                }
                ApprovalOutcome::Pending(_) => return Err(awaiting_approval(id)),
                ApprovalOutcome::Draft { response, .. } => {
                    out(&format!("{id} stays a draft: {}", planner_text(&response)));
                    return Ok(Exit::Ok);
                }
                _ => return Err(CliError::internal("unexpected approval outcome")),
            }
        }
        PlanStage::Proposal => return Err(awaiting_approval(id)),
        PlanStage::Draft => {
            return Err(CliError::bad_input(format!(
                "plan {id} is a draft: the planner has not submitted it yet"
            )));
        }
        PlanStage::Rejected => {
            return Err(CliError::bad_input(format!(
                "plan {id} was rejected; it cannot run"
            )));
        }
    }
    let (plan, exec) = orca.executions.create(id).await?;
    app.info(&format!(
        "execution {exec} of plan {id}: {} steps, concurrency {}",
        plan.content().steps.len(),
        options.concurrency
    ));
    if detach {
        return Ok(crate::worker::detached(app, exec));
    }
    drive(app, orca, exec, options).await
}

fn awaiting_approval(id: PlanId) -> CliError {
    CliError::with(
        Exit::AwaitingHuman,
        format!(
            "plan {id} is a proposal waiting for approval: run `orca plan approve {id}`, or pass --yes"
        ),
    )
}

pub(crate) fn run_config(options: &RunOptions) -> RunConfig {
    let mut config = RunConfig::new(holder());
    config.concurrency = usize::from(options.concurrency);
    config.max_attempts = options.max_attempts;
    config.on_failure = match options.on_failure {
        OnFailure::Ask => FailurePolicy::Ask,
        OnFailure::Stop => FailurePolicy::Stop,
        OnFailure::Skip => FailurePolicy::Skip,
    };
    config.actor = user();
    config.lease_timeout = Duration::from_secs(options.lease_timeout);
    config
}

/// Drives an execution (and the execution of a replacement plan, if the human replans).
async fn drive(
    app: &App,
    orca: &Orca,
    first: ExecutionId,
    options: &RunOptions,
) -> Result<Exit, CliError> {
    orca_agents::process_group::set_kill_grace(Duration::from_secs(options.kill_grace));
    let mut exec = first;
    loop {
        let snap = orca.executions.get(exec).await?;
        if !snap.execution.value.stage().is_terminal() {
            orca.executions
                .record_sandbox(&snap.execution.value, app.sandbox.audit_data())
                .await?;
        }
        let total = snap.tasks.len();
        let done = snap
            .tasks
            .iter()
            .filter(|t| matches!(t.value, Task::Completed(_)))
            .count();
        let progress = Arc::new(Progress::new(app.style, app.quiet || app.json, total, done));
        let runner = orca.runner(run_config(options), progress);
        let cancel = CancellationToken::new();
        // Registered here, before anything runs, so an early Ctrl-C is not lost.
        let signals = crate::driver_signals::listen(exec, cancel.clone())?;
        let report = runner.run(exec, cancel).await;
        signals.abort();
        // Steps ended by the run get their grace period before this process exits (its exit
        // SIGKILLs every group still alive).
        orca_agents::process_group::settle(
            orca_agents::process_group::kill_grace() + Duration::from_secs(5),
        )
        .await;
        let report = report?;
        let code = finish(app, orca, &report).await?;
        match report.outcome {
            RunOutcome::Replanned {
                execution_id: Some(next),
                plan_id,
            } => {
                app.info(&format!(
                    "running the new plan {plan_id} as execution {next}"
                ));
                exec = next;
            }
            _ => return Ok(code),
        }
    }
}

/// Prints the summary of a run and returns its exit code.
async fn finish(app: &App, orca: &Orca, report: &RunReport) -> Result<Exit, CliError> {
    let snap = orca.executions.get(report.execution_id).await?;
    let info = snap.execution.value.info().clone();
    let plan = orca.planning.plan(info.plan_id).await.ok();
    let log = ExecutionService::log(info.plan_id, info.id);
    let verify = app.store.verify(log).await?;
    let stage = snap.execution.value.stage();
    let (exit, outcome, detail) = match &report.outcome {
        RunOutcome::Completed => (Exit::Ok, "completed", None),
        RunOutcome::Failed { reason } => (Exit::ExecutionFailed, "failed", Some(reason.clone())),
        RunOutcome::Stopped { reason } => (Exit::ExecutionFailed, "stopped", reason.clone()),
        RunOutcome::Interrupted { steps } => (
            Exit::Interrupted,
            "interrupted",
            Some(format!(
                "stopped; {} running step(s) interrupted; continue with `orca exec resume {}`",
                steps.len(),
                info.id
            )),
        ),
        RunOutcome::AwaitingDecision { request } => (
            Exit::AwaitingHuman,
            "awaiting_decision",
            Some(format!(
                "step `{}` needs a decision: orca exec decide {} {}",
                request.step_id(),
                info.id,
                request.option_keys().join("|")
            )),
        ),
        RunOutcome::Replanned {
            plan_id,
            execution_id,
        } => (
            if execution_id.is_some() {
                Exit::Ok
            } else {
                Exit::ExecutionFailed
            },
            "replanned",
            Some(format!("replaced by plan {plan_id}")),
        ),
        _ => (Exit::Internal, "unknown", None),
    };
    if app.json {
        let tasks: Vec<Value> = snap
            .tasks
            .iter()
            .map(|t| json!({ "step_id": t.value.step_id(), "status": t.value.status() }))
            .collect();
        out_json(&json!({
            "execution_id": info.id,
            "plan_id": info.plan_id,
            "stage": stage,
            "outcome": outcome,
            "detail": detail,
            "tasks": tasks,
            "audit": verify,
        }));
    } else {
        out(&render::exec_show(&snap, plan.as_ref()));
        let audit = match &verify {
            VerifyReport::Intact { entries, sealed } => {
                format!(
                    "audit log verified: {entries} entries{}",
                    if *sealed { ", sealed" } else { "" }
                )
            }
            VerifyReport::Tampered { seq, problem } => {
                format!("audit log TAMPERED: {}", tamper_text(*seq, problem))
            }
        };
        out(&audit);
        let headline = match stage {
            _ if outcome == "interrupted" => app.style.yellow("interrupted"),
            ExecutionStage::Completed => app.style.green("completed"),
            ExecutionStage::Running => app.style.yellow("waiting for a decision"),
            other => app.style.red(&other.to_string()),
        };
        say(&format!(
            "{} {}{}",
            info.id,
            headline,
            detail.map(|d| format!(": {d}")).unwrap_or_default()
        ));
    }
    Ok(if verify.is_intact() {
        exit
    } else {
        Exit::Tampered
    })
}

async fn exec(app: &App, cmd: ExecCommand) -> Result<Exit, CliError> {
    match cmd {
        ExecCommand::List { plan } => {
            let orca = app.orca(Arc::new(NoHuman));
            let plan = match plan {
                Some(p) => Some(orca.planning.resolve(&p).await?),
                None => None,
            };
            let listing = orca.executions.list(plan).await?;
            for problem in &listing.problems {
                say(&format!(
                    "warning: {}: {}",
                    problem.location, problem.message
                ));
            }
            let annotated = crate::driver::annotate_list(app, &listing.items).await?;
            if app.json {
                let items: Vec<Value> = annotated.into_iter().map(|(v, _)| v).collect();
                out_json(&json!(items));
            } else {
                let live: Vec<Option<bool>> = annotated.into_iter().map(|(_, l)| l).collect();
                out(&render::exec_list(&listing.items, &live));
            }
            Ok(Exit::Ok)
        }
        ExecCommand::Show { exec } => {
            let orca = app.orca(Arc::new(NoHuman));
            let id = orca.executions.resolve(&exec).await?;
            if let Some(f) = orca_services::integrity::check_execution(app.store.as_ref(), id)
                .await?
                .into_iter()
                .next()
            {
                return Err(CliError::with(
                    Exit::Tampered,
                    format!("execution {id}: {f} (run `orca audit verify {id}`)"),
                ));
            }
            let snap = orca.executions.get(id).await?;
            let lease = app.store.lease(id).await?;
            let stage = snap.execution.value.stage();
            if app.json {
                let mut value = snapshot_json(&snap);
                if let Some(d) = crate::driver::driver_json(id, stage, lease.as_ref()) {
                    value["driver"] = d;
                }
                out_json(&value);
            } else {
                let plan = orca
                    .planning
                    .plan(snap.execution.value.info().plan_id)
                    .await
                    .ok();
                out(&render::exec_show(&snap, plan.as_ref()));
                if let Some(line) = crate::driver::driver_text(id, stage, lease.as_ref()) {
                    out(&line);
                }
            }
            Ok(Exit::Ok)
        }
        ExecCommand::Resume { exec, run } => {
            let orca = app.orca(hitl_for(app, &run));
            let id = orca.executions.resolve(&exec).await?;
            drive(app, &orca, id, &run).await
        }
        ExecCommand::Stop { exec, reason } => crate::driver::stop(app, &exec, reason).await,
        ExecCommand::Cancel { exec, reason } => crate::driver::cancel(app, &exec, reason).await,
        ExecCommand::Decide {
            exec,
            decision,
            guidance,
            no_run,
            run,
        } => {
            let orca = app.orca(hitl_for(app, &run));
            let id = orca.executions.resolve(&exec).await?;
            let decision = match decision {
                DecisionArg::Retry => Decision::Retry { guidance },
                DecisionArg::Replan => Decision::Replan { guidance },
                DecisionArg::Stop => Decision::Stop,
                DecisionArg::Answer => Decision::Answer {
                    text: guidance.ok_or_else(|| {
                        CliError::bad_input("`answer` needs the answer in --guidance")
                    })?,
                },
            };
            orca.executions.decide(id, decision, &user()).await?;
            app.info(&format!("recorded the decision for {id}"));
            if no_run {
                if app.json {
                    out_json(&json!({ "execution_id": id, "stage": "running" }));
                }
                return Ok(Exit::Ok);
            }
            drive(app, &orca, id, &run).await
        }
    }
}

fn snapshot_json(snap: &orca_store::ExecutionSnapshot) -> Value {
    let mut value = json!(snap.execution.value);
    let tasks: Vec<Value> = snap.tasks.iter().map(|t| json!(t.value)).collect();
    if let Some(obj) = value.as_object_mut() {
        obj.insert("execution_id".to_owned(), json!(snap.execution.value.id()));
        obj.insert("tasks".to_owned(), Value::Array(tasks));
    }
    value
}

/// Resolves an execution id or prefix.
pub(crate) async fn resolve_exec(app: &App, text: &str) -> Result<ExecutionId, CliError> {
    Ok(app.orca(Arc::new(NoHuman)).executions.resolve(text).await?)
}

/// The problem of a tampered log, naming its entry once.
pub(crate) fn tamper_text(seq: u64, problem: &str) -> String {
    if problem.contains(&format!("entry {seq}")) {
        problem.to_owned()
    } else {
        format!("entry {seq}: {problem}")
    }
}

fn agents_list(app: &App) -> Result<Exit, CliError> {
    let agents = app.agents.agents();
    if app.json {
        out_json(&json!(agents));
    } else {
        let rows: Vec<Vec<String>> = agents
            .iter()
            .map(|a| {
                vec![
                    a.id.to_string(),
                    format!("{:?}", a.role).to_lowercase(),
                    a.backend.clone(),
                    a.model.clone().unwrap_or_else(|| "-".to_owned()),
                    a.description.clone(),
                ]
            })
            .collect();
        out(&render::table(
            &["AGENT", "ROLE", "BACKEND", "MODEL", "DESCRIPTION"],
            &rows,
        ));
    }
    Ok(Exit::Ok)
}

/// `orca ask MESSAGE`.
async fn ask(app: &App, message: &str, options: &RunOptions) -> Result<Exit, CliError> {
    let hitl: Arc<dyn Hitl> = if interactive() && !app.json {
        Arc::new(TerminalHitl { style: app.style })
    } else {
        Arc::new(NoHuman)
    };
    let orca = app.orca(hitl);
    let reply = orca.relay.invoke(message).await?;
    match reply.outcome {
        PlannerResponse::Answer { text } => {
            if app.json {
                out_json(&json!({ "type": "answer", "text": text }));
            } else {
                out(&text);
            }
            Ok(Exit::Ok)
        }
        PlannerResponse::Plan {
            plan_id,
            stage: PlanRefStage::Proposal,
            message,
        } => {
            if let Some(m) = message {
                app.info(&m);
            }
            let plan = orca.planning.plan(plan_id).await?;
            if !app.json {
                let mut text = render_plan(&plan);
                text.push_str(&secrets::step_env_text(&plan, app.agents.env_policy()));
                out(&text);
            }
            approve_and_run(app, &orca, plan_id, options, false).await
        }
        PlannerResponse::Plan {
            plan_id,
            stage: PlanRefStage::Draft,
            message,
        } => {
            if app.json {
                out_json(
                    &json!({ "type": "plan", "plan_id": plan_id, "stage": "draft", "message": message }),
                );
            } else {
                out(&format!(
                    "the planner left draft {plan_id}: {}",
                    message.unwrap_or_default()
                ));
            }
            Ok(Exit::Ok)
        }
        // No model reachable, or its key refused: the configuration must change (exit 2);
        // the message names the endpoint and the settings to look at.
        PlannerResponse::Failure(failure) if failure.code == ErrorCode::BackendUnavailable => Err(
            CliError::bad_input(format!("the planner cannot run: {failure}")),
        ),
        PlannerResponse::Failure(failure) => {
            Err(CliError::internal(format!("the planner failed: {failure}")))
        }
    }
}

fn planner_text(response: &PlannerResponse) -> String {
    match response {
        PlannerResponse::Answer { text } => text.clone(),
        PlannerResponse::Plan { message, .. } => message.clone().unwrap_or_default(),
        PlannerResponse::Failure(f) => f.to_string(),
    }
}
