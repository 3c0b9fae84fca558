//! Command-line coding agents run as subprocesses with JSON output: Claude Code
//! (`claude -p --output-format stream-json --verbose`), Codex (`codex exec --json`), opencode
//! (`opencode run --format json`). The prompt goes on stdin (never as an argument: no
//! argument-length limit, no quoting); each agent gets the flags that let it edit the project
//! without asking (see [`CliSpec::permission_mode`]) and a hard timeout; its session id is kept
//! for resuming; usage is parsed from its output and priced when it reports no cost. Unknown
//! output lines are skipped; the process group is killed on timeout, when a run prints nothing
//! and changes no file for its idle limit (`stalled`), and when the future is dropped. Flags and the outputs they were checked against: ADR 0020.

mod claude;
mod codex;
mod declared;
mod kind;
mod opencode;
mod parsed;
mod session;

pub use declared::{Declaration, DeclarationSettings, PromptVia, Reading};
pub use kind::CliKind;

use parsed::{MAX_SAID, Parsed, Said};
use session::usage_since;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orca_core::{
    AgentAnswer, ErrorCode, NoTools, QuestionRequest, Reply, SessionId, TaskFailure, TaskRequest,
    TaskResult, TaskSuccess, ToolHost, Usage,
};
use serde_json::Value;

use crate::agent_loop::task_message;
use crate::profile::Profile;
use orca_llm::pricing::PriceTable;
use orca_os::process::{self, IdleLimit, OUTPUT_CAP, RunEnd, RunSpec};
use orca_os::sandbox::{SandboxMode, SandboxPolicy};
use orca_os::step_env::EnvPolicy;

/// The hard timeout of a command-line agent run when neither the step nor the agent's limits
/// nor its `timeout_secs` set one: an agent waiting for an unreachable server never hangs a
/// run forever.
pub const DEFAULT_CLI_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How to run a command-line agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliSpec {
    /// Which agent.
    pub kind: CliKind,
    /// The executable (name on `PATH` or a path).
    pub program: String,
    /// The model to ask for, if any.
    pub model: Option<String>,
    /// Extra arguments, after orca's own flags (config `args`).
    pub args: Vec<String>,
    /// The agent's permission mode (one of [`CliKind::permission_modes`]); `None`: its
    /// [`CliKind::default_permission_mode`].
    pub permission_mode: Option<String>,
    /// The hard timeout of one run; `None`: [`DEFAULT_CLI_TIMEOUT`]. A step's own timeout or
    /// wall-clock limit, when shorter, wins.
    pub timeout: Option<Duration>,
    /// How a [`CliKind::Declared`] program is run and read (required for it, unused by the
    /// others).
    pub declaration: Option<Box<Declaration>>,
}

impl CliSpec {
    /// The default executable of `kind`.
    #[must_use]
    pub fn new(kind: CliKind) -> Self {
        Self {
            kind,
            program: kind.default_program().to_owned(),
            model: None,
            args: Vec::new(),
            permission_mode: None,
            timeout: None,
            declaration: None,
        }
    }

    /// The program `program` run as `declaration` says.
    #[must_use]
    pub fn declared(program: String, declaration: Declaration) -> Self {
        Self {
            program,
            declaration: Some(Box::new(declaration)),
            ..Self::new(CliKind::Declared)
        }
    }

    /// Checks the permission mode against the agent's list.
    ///
    /// # Errors
    ///
    /// A mode the agent does not know, as a message naming the accepted ones.
    pub fn validate(&self) -> Result<(), String> {
        if self.kind == CliKind::Declared {
            if self.declaration.is_none() {
                return Err("a declared command-line agent needs its declaration".to_owned());
            }
            if self.permission_mode.is_some() {
                return Err(
                    "backend \"cli\" has no permission modes: put the program's own flags in `args` (and `cli.read_only_args` for questions)".to_owned(),
                );
            }
        }
        if let Some(mode) = &self.permission_mode
            && !self.kind.permission_modes().contains(&mode.as_str())
        {
            return Err(format!(
                "unknown permission mode \"{mode}\" for {}; expected one of: {}",
                self.kind.as_str(),
                self.kind.permission_modes().join(", ")
            ));
        }
        Ok(())
    }

    /// The state directories under `HOME`: the kind's, or the declared ones.
    fn state_dirs(&self) -> Vec<&str> {
        match &self.declaration {
            Some(d) if self.kind == CliKind::Declared => {
                d.state_dirs.iter().map(String::as_str).collect()
            }
            _ => self.kind.state_dirs().to_vec(),
        }
    }

    fn permission_mode(&self) -> &str {
        self.permission_mode
            .as_deref()
            .unwrap_or_else(|| self.kind.default_permission_mode())
    }

    /// The spec for a read-only question: Claude Code `plan`, Codex `read-only`, opencode's
    /// `plan` agent, whatever the configured mode.
    fn read_only(&self) -> Self {
        let mut spec = self.clone();
        let mode = match self.kind {
            CliKind::ClaudeCode | CliKind::Opencode => "plan",
            CliKind::Codex => "read-only",
            // Its declared read-only arguments replace its `args` (see `ask`).
            CliKind::Declared => {
                if let Some(d) = &self.declaration {
                    spec.args = d.read_only_args.clone().unwrap_or_default();
                }
                return spec;
            }
        };
        spec.permission_mode = Some(mode.to_owned());
        spec
    }

    /// The spec for a run in `sandbox`: inside orca's kernel sandbox, Codex's own sandbox
    /// cannot work (its writes fail with "Failed to write file", seen with Codex 0.169), so
    /// unless a mode was configured it runs with `danger-full-access` and orca's sandbox is
    /// what confines it.
    fn for_sandbox(&self, sandbox: Option<&SandboxPolicy>) -> std::borrow::Cow<'_, Self> {
        let kernel = sandbox.is_some_and(|s| s.mode() == SandboxMode::Kernel);
        if kernel && self.kind == CliKind::Codex && self.permission_mode.is_none() {
            let mut spec = self.clone();
            spec.permission_mode = Some("danger-full-access".to_owned());
            return std::borrow::Cow::Owned(spec);
        }
        std::borrow::Cow::Borrowed(self)
    }

    /// The arguments of one run: the prompt is read from stdin. `resume` continues a session;
    /// `in_git` says whether the project is inside a git repository (Codex refuses to run
    /// outside one unless told to).
    fn invocation(&self, resume: Option<&str>, in_git: bool) -> Vec<String> {
        let mut args = match self.kind {
            CliKind::ClaudeCode => claude::args(self.permission_mode(), resume),
            CliKind::Codex => codex::args(self.permission_mode(), in_git),
            CliKind::Opencode => opencode::args(self.permission_mode(), resume),
            // Its own arguments; the prompt's place is added by the run.
            CliKind::Declared => Vec::new(),
        };
        // A declared program's model flag is its own (in `args`); `model` only prices it.
        if let Some(m) = self
            .model
            .as_ref()
            .filter(|_| self.kind != CliKind::Declared)
        {
            args.push("--model".into());
            args.push(m.clone());
        }
        args.extend(self.args.iter().cloned());
        if self.kind == CliKind::Codex {
            codex::finish_args(&mut args, resume);
        }
        args
    }
}

/// A command-line agent.
#[derive(Debug, Clone)]
pub struct CliAgent {
    spec: CliSpec,
    prices: PriceTable,
    /// Native session ids that are not UUIDs (opencode's `ses_…`), by the session id orca
    /// handed out for them. Claude Code and Codex ids are UUIDs and map to `sess_<uuid>`.
    sessions: Arc<Mutex<HashMap<SessionId, String>>>,
    /// The last usage Codex reported per thread: in a resumed thread it reports the running
    /// total of the whole thread (seen with Codex 0.169), so the run's own share is the
    /// difference.
    codex_totals: Arc<Mutex<HashMap<String, Usage>>>,
}

/// How a run ended, with what it spent and the session it left.
#[derive(Debug)]
struct RunOutcome {
    /// The final answer, or why there is none.
    result: Result<String, TaskFailure>,
    /// The agent's own session id.
    session: Option<String>,
    usage: Usage,
}

const RESULT_INSTRUCTIONS: &str = "When you are done, end your final message with a JSON object in a ```json block: \
{\"status\": \"success\", \"summary\": \"...\", \"relevant_files\": [...]} or \
{\"status\": \"failure\", \"code\": \"task_failed\", \"message\": \"...\"}.";

/// Whether `root` is inside a git repository (a `.git` in it or an ancestor).
fn in_git_repo(root: &Path) -> bool {
    root.ancestors().any(|d| d.join(".git").exists())
}

impl CliAgent {
    /// An agent run per `spec`, priced with the shipped table.
    #[must_use]
    pub fn new(spec: CliSpec) -> Self {
        Self {
            spec,
            prices: PriceTable::shipped(),
            sessions: Arc::default(),
            codex_totals: Arc::default(),
        }
    }

    /// Prices usage with `prices` when the agent reports no cost (builder style).
    #[must_use]
    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }

    fn timeout(&self, step: Option<Duration>) -> Duration {
        let own = self.spec.timeout.unwrap_or(DEFAULT_CLI_TIMEOUT);
        step.map_or(own, |s| s.min(own))
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one private call site per entry point"
    )]
    async fn run(
        &self,
        root: &Path,
        prompt: String,
        resume: Option<&str>,
        read_only: bool,
        timeout: Duration,
        env: Vec<(String, String)>,
        sandbox: Option<&SandboxPolicy>,
        kill_grace: Duration,
        idle: Option<Duration>,
        caller: &dyn ToolHost,
    ) -> RunOutcome {
        let program = self.spec.program.clone();
        if sandbox.is_some() {
            // Only existing directories can be made writable in the kernel sandbox, and an agent
            // run for the first time (a fresh HOME) fails when it cannot create its state.
            if let Some((_, home)) = env.iter().find(|(k, _)| k == "HOME") {
                for dir in self.spec.state_dirs() {
                    let _ = std::fs::create_dir_all(Path::new(home).join(dir));
                }
            }
        }
        let sandbox = sandbox.map(|s| s.clone().with_home_dirs(&self.spec.state_dirs()));
        // Silent and changing no file in the project for `idle`: stalled.
        let idle = idle.map(|after| IdleLimit {
            after,
            tree: Some(root),
        });
        let mut args = if read_only {
            self.spec.read_only().invocation(resume, in_git_repo(root))
        } else {
            self.spec
                .for_sandbox(sandbox.as_ref())
                .invocation(resume, in_git_repo(root))
        };
        let mut stdin = prompt.into_bytes();
        if let Some(d) = &self.spec.declaration {
            let prompt = String::from_utf8(std::mem::take(&mut stdin)).unwrap_or_default();
            args = match d.invocation(&args, &prompt) {
                Ok(args) => args,
                Err(message) => {
                    return RunOutcome {
                        result: Err(TaskFailure::new(ErrorCode::Validation, message)),
                        session: None,
                        usage: Usage::default(),
                    };
                }
            };
            stdin = d.stdin(prompt);
        }
        let run = process::run_captured_watched(
            RunSpec {
                program: &program,
                args,
                cwd: root,
                env,
                timeout: Some(timeout),
                cap: OUTPUT_CAP,
                owner: Some(caller),
                sandbox: sandbox.as_ref(),
                stdin: Some(stdin),
                kill_grace,
                interleave: false,
            },
            idle,
        )
        .await;
        let kind = self.spec.kind.as_str();
        let mut parsed = self.parse(&run.stdout);
        // Its messages and its own tools' uses are read once it has exited: recorded now, in
        // order (no usage per message is reported).
        let mut turn = 0u32;
        if parsed.said.len() > MAX_SAID {
            tracing::warn!(
                agent = kind,
                printed = parsed.said.len(),
                recorded = MAX_SAID,
                "the agent printed more messages and tool uses than are recorded"
            );
        }
        for said in parsed.said.iter().take(MAX_SAID) {
            match said {
                Said::Answer(answer) => {
                    turn += 1;
                    caller.model_answered(turn, answer, &Usage::default()).await;
                }
                Said::Tool(used) => caller.agent_tool_used(used).await,
            }
        }
        if self.spec.kind == CliKind::Codex
            && let Some(thread) = &parsed.session
        {
            let mut totals = self
                .codex_totals
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let reported = parsed.usage;
            if let Some(before) = resume.and_then(|r| totals.get(r)) {
                parsed.usage = usage_since(before, &reported);
            }
            totals.insert(thread.clone(), reported);
        }
        if !parsed.cost_reported
            && let Some(model) = &self.spec.model
        {
            parsed.usage = self.prices.priced(model, parsed.usage);
        }
        let fail = |code: ErrorCode, message: String, cause: Option<String>| {
            let mut f = TaskFailure::new(code, message);
            f.cause = cause;
            f.output = Some(run.output.clone());
            f
        };
        let result = match run.end {
            RunEnd::SpawnFailed(err) => Err(TaskFailure::new(
                ErrorCode::AgentError,
                format!("cannot run `{program}` ({kind}): is it installed and on PATH?"),
            )
            .with_cause(err.to_string())),
            RunEnd::TimedOut => Err(fail(
                ErrorCode::Timeout,
                format!(
                    "`{program}` ({kind}) did not finish within {} s; its process group was ended",
                    timeout.as_secs()
                ),
                parsed.warnings.last().cloned(),
            )),
            RunEnd::Idle(after) => Err(fail(
                ErrorCode::Stalled,
                format!(
                    "`{program}` ({kind}) printed nothing and changed no file in {} for {} s (idle_secs); its process group was ended",
                    root.display(),
                    after.as_secs()
                ),
                parsed.warnings.last().cloned(),
            )),
            RunEnd::Exited(status) if !status.success() => {
                let code = status
                    .code()
                    .map_or_else(|| "killed".to_owned(), |c| c.to_string());
                Err(fail(
                    ErrorCode::AgentError,
                    format!("`{program}` ({kind}) exited with status {code}"),
                    parsed
                        .error
                        .clone()
                        .or_else(|| parsed.warnings.last().cloned())
                        .or_else(|| Some(process::tail(&run.output, 5, 500))),
                ))
            }
            RunEnd::Exited(_) => {
                if let Some(error) = parsed.error.clone() {
                    Err(fail(
                        ErrorCode::AgentError,
                        format!("`{program}` ({kind}) reported an error"),
                        Some(error),
                    ))
                } else if !parsed.denials.is_empty() {
                    Err(fail(
                        ErrorCode::ToolRefused,
                        format!(
                            "{kind} was denied permission to use {}; allow it with the agent's \
                             permission_mode (now \"{}\") or the agent's own settings",
                            parsed.denials.join(", "),
                            self.spec.permission_mode()
                        ),
                        parsed.text.clone(),
                    ))
                } else {
                    match parsed.text.take() {
                        Some(text) if !text.trim().is_empty() => Ok(text),
                        _ => Err(fail(
                            ErrorCode::ParseError,
                            format!("`{program}` ({kind}) exited 0 without a final answer"),
                            parsed.warnings.last().cloned(),
                        )),
                    }
                }
            }
        };
        RunOutcome {
            result,
            session: parsed.session,
            usage: parsed.usage,
        }
    }

    fn parse(&self, stdout: &str) -> Parsed {
        let values = json_values(stdout);
        match self.spec.kind {
            CliKind::ClaudeCode => claude::parse(&values),
            CliKind::Codex => codex::parse(&values),
            CliKind::Opencode => opencode::parse(&values),
            CliKind::Declared => self
                .spec
                .declaration
                .as_ref()
                .map(|d| d.parse(stdout))
                .unwrap_or_default(),
        }
    }

    /// Carries out a step.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call site, the registry's dispatch"
    )]
    pub(crate) async fn run_task(
        &self,
        root: &Path,
        profile: &Profile,
        request: &TaskRequest,
        policy: &EnvPolicy,
        sandbox: Option<&SandboxPolicy>,
        kill_grace: Duration,
        idle: Option<Duration>,
        tools: &dyn ToolHost,
    ) -> Reply<TaskResult> {
        let prompt = format!(
            "{}\n\n{}\n\n{RESULT_INSTRUCTIONS}",
            profile.prompt,
            task_message(request)
        );
        let timeout = self.timeout(request.timeout.or_else(|| {
            request
                .budget
                .min(&profile.limits)
                .max_wall_secs
                .map(Duration::from_secs)
        }));
        let mut ids = request.identity().env();
        // Its own OpenTelemetry spans (when the user turned its export on) join the attempt's.
        if let Some(tp) = orca_llm::trace::current() {
            ids.push(("TRACEPARENT".to_owned(), tp));
        }
        let env = policy.build(&profile.id, &request.step.env, ids);
        let run = self
            .run(
                root, prompt, None, false, timeout, env, sandbox, kill_grace, idle, tools,
            )
            .await;
        let session = run.session.as_deref().map(|n| self.session_for(n));
        let note = run.session.as_deref().map(|n| self.resume_note(n));
        let outcome = match run.result {
            Err(mut f) => {
                if let Some(note) = note {
                    f.cause = Some(
                        f.cause
                            .map_or_else(|| note.clone(), |c| format!("{c}\n{note}")),
                    );
                }
                TaskResult::Failure(f)
            }
            Ok(text) => {
                let mut outcome = result_from_text(&text);
                if let (TaskResult::Success(s), Some(note)) = (&mut outcome, note) {
                    s.notes = Some(
                        s.notes
                            .take()
                            .map_or_else(|| note.clone(), |x| format!("{x}\n{note}")),
                    );
                }
                outcome
            }
        };
        Reply {
            outcome,
            usage: run.usage,
            session,
        }
    }

    /// Asks a question (continuing `request.session` when it names one of this agent's).
    pub(crate) async fn ask(
        &self,
        root: &Path,
        profile: &Profile,
        request: &QuestionRequest,
        policy: &EnvPolicy,
        sandbox: Option<&SandboxPolicy>,
    ) -> Reply<Result<AgentAnswer, TaskFailure>> {
        if let Some(d) = &self.spec.declaration
            && d.read_only_args.is_none()
        {
            return Reply::new(Err(TaskFailure::new(
                ErrorCode::Validation,
                format!(
                    "`{}` answers no questions: declare `cli.read_only_args` (the program's flags for a run that changes nothing) to ask it",
                    self.spec.program
                ),
            )));
        }
        let resume = match request.session {
            None => None,
            Some(id) => match self.native_session(id) {
                Some(native) => Some(native),
                None => {
                    return Reply::new(Err(TaskFailure::new(
                        ErrorCode::SessionNotFound,
                        format!("no {} session is known for {id}", self.spec.kind.as_str()),
                    )));
                }
            },
        };
        let prompt = format!(
            "{}\n\nA read-only question (do not change anything):\n\n{}",
            profile.prompt, request.question
        );
        let timeout = self.timeout(
            request
                .budget
                .min(&profile.limits)
                .max_wall_secs
                .map(Duration::from_secs),
        );
        let env = policy.build(&profile.id, &[], Vec::new());
        let run = self
            .run(
                root,
                prompt,
                resume.as_deref(),
                true,
                timeout,
                env,
                sandbox,
                orca_os::process_group::DEFAULT_KILL_GRACE,
                None,
                &NoTools,
            )
            .await;
        let session = run.session.as_deref().map(|n| self.session_for(n));
        Reply {
            outcome: run.result.map(|answer| AgentAnswer {
                answer,
                session_id: session,
            }),
            usage: run.usage,
            session,
        }
    }
}

/// A task result from the agent's final text: a ```json block holding a `TaskResult` if there
/// is one, else a success whose summary is the tail of the text.
fn result_from_text(text: &str) -> TaskResult {
    let candidate = text
        .rfind("```json")
        .map(|start| &text[start + 7..])
        .and_then(|rest| rest.find("```").map(|end| &rest[..end]))
        .unwrap_or(text);
    if let Ok(value) = serde_json::from_str::<Value>(candidate.trim())
        && let Ok(mut result) = crate::schema::parse_task_result(&value)
    {
        if let TaskResult::Success(s) = &mut result {
            s.output.get_or_insert_with(|| text.to_owned());
        }
        return result;
    }
    TaskResult::Success(TaskSuccess {
        summary: process::tail(text, 20, 2048),
        output: Some(text.to_owned()),
        ..TaskSuccess::default()
    })
}

/// The JSON values of an output: one document (Claude Code, possibly pretty-printed or an
/// array) or JSON lines (the others). Lines that are not JSON are skipped.
fn json_values(stdout: &str) -> Vec<Value> {
    match serde_json::from_str::<Value>(stdout.trim()) {
        Ok(Value::Array(items)) => items,
        Ok(v) => vec![v],
        Err(_) => stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .collect(),
    }
}

/// The arguments that continue session `resume` (`flag id`), or none for a new session.
fn resume_args(flag: &str, resume: Option<&str>) -> Vec<String> {
    resume.map_or_else(Vec::new, |id| vec![flag.to_owned(), id.to_owned()])
}

fn u64_at(v: &Value, path: &str) -> u64 {
    v.pointer(path).and_then(Value::as_u64).unwrap_or(0)
}

fn str_at(v: &Value, paths: &[&str]) -> Option<String> {
    paths
        .iter()
        .find_map(|p| v.pointer(p).and_then(Value::as_str))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests;
