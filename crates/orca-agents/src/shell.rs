//! The built-in `shell` agent: runs a step's `command` with `sh -c` in the project root.

use std::path::Path;

use orca_core::{ErrorCode, NoTools, TaskFailure, TaskRequest, TaskResult, TaskSuccess, ToolHost};

use orca_os::process::{self, OUTPUT_CAP, RunEnd, RunSpec};
use orca_os::sandbox::SandboxPolicy;
use orca_os::step_env::EnvPolicy;

/// Lines kept in a shell step's summary (the tail of its output).
pub const SUMMARY_LINES: usize = 20;
/// Bytes kept in a shell step's summary.
pub const SUMMARY_BYTES: usize = 2048;

/// Runs `request.step.command` with `sh -c` in `root`, in its own process group.
///
/// Exit 0 is a success whose summary is the tail of the output (the last
/// [`SUMMARY_LINES`] lines, at most [`SUMMARY_BYTES`] bytes) and whose `output` is the full
/// output (the last [`OUTPUT_CAP`] bytes). A non-zero exit is a `task_failed` failure, a
/// timeout a `timeout` failure. The group is ended on timeout and when the future is dropped.
///
/// The command's environment is the base allowlist plus the step's `env` names (see
/// [`orca_os::step_env`]), read from this process's environment, plus the attempt's identity in
/// `ORCA_*` variables ([`orca_core::StepIdentity::env`]).
pub async fn run_shell(root: &Path, request: &TaskRequest) -> TaskResult {
    run_shell_with(root, request, &EnvPolicy::default(), None).await
}

/// [`run_shell`] under a sandbox policy (see [`orca_os::sandbox`]), with the default environment.
pub async fn run_shell_in(
    root: &Path,
    request: &TaskRequest,
    sandbox: Option<&SandboxPolicy>,
) -> TaskResult {
    run_shell_with(root, request, &EnvPolicy::default(), sandbox).await
}

/// [`run_shell`] with the environment allowed by `policy`, under a sandbox policy (see
/// [`orca_os::sandbox`]).
pub async fn run_shell_with(
    root: &Path,
    request: &TaskRequest,
    policy: &EnvPolicy,
    sandbox: Option<&SandboxPolicy>,
) -> TaskResult {
    run_shell_for(
        root,
        request,
        policy,
        sandbox,
        orca_os::process_group::DEFAULT_KILL_GRACE,
        &NoTools,
    )
    .await
}

/// [`run_shell_with`] for a caller that records the process group it starts
/// ([`ToolHost::process_started`]); the command does not start before that has returned.
/// `kill_grace`: how long its group gets between SIGTERM and SIGKILL when the run ends early.
pub async fn run_shell_for(
    root: &Path,
    request: &TaskRequest,
    policy: &EnvPolicy,
    sandbox: Option<&SandboxPolicy>,
    kill_grace: std::time::Duration,
    caller: &dyn ToolHost,
) -> TaskResult {
    let Some(command) = request
        .step
        .command
        .as_deref()
        .filter(|c| !c.trim().is_empty())
    else {
        return TaskResult::Failure(TaskFailure::new(
            ErrorCode::Validation,
            format!(
                "step `{}` has no command for the shell agent",
                request.step.id
            ),
        ));
    };
    if command.contains('\0') {
        return TaskResult::Failure(TaskFailure::new(
            ErrorCode::Validation,
            format!(
                "step `{}`: the command holds a NUL byte, which no shell can run",
                request.step.id
            ),
        ));
    }
    tracing::info!(step = %request.step.id, attempt = request.attempt, "running shell step");
    let spec = RunSpec {
        program: "sh",
        args: vec!["-c".to_owned(), command.to_owned()],
        cwd: root,
        env: policy.build(&request.agent, &request.step.env, step_vars(request)),
        timeout: request.timeout,
        cap: OUTPUT_CAP,
        owner: Some(caller),
        sandbox,
        stdin: None,
        kill_grace,
        interleave: true,
    };
    let run = process::run_captured(spec).await;
    let output = run.output;
    match run.end {
        RunEnd::Exited(status) if status.success() => TaskResult::Success(TaskSuccess {
            summary: summary_of(&output),
            output: Some(output),
            ..TaskSuccess::default()
        }),
        RunEnd::Exited(status) => {
            let message = match status.code() {
                Some(code) => format!("exit status {code}"),
                None => {
                    use std::os::unix::process::ExitStatusExt as _;
                    format!("killed by signal {}", status.signal().unwrap_or(0))
                }
            };
            TaskResult::Failure(TaskFailure {
                code: ErrorCode::TaskFailed,
                message,
                cause: Some(process::tail(&output, 5, 500)).filter(|t| !t.is_empty()),
                output: Some(output),
            })
        }
        // Not watched for idleness: only a timeout ends it early.
        RunEnd::TimedOut | RunEnd::Idle(_) => TaskResult::Failure(TaskFailure {
            code: ErrorCode::Timeout,
            message: format!(
                "command timed out after {}s; its process group was ended",
                request.timeout.map_or(0, |t| t.as_secs())
            ),
            cause: None,
            output: Some(output),
        }),
        RunEnd::SpawnFailed(err) => TaskResult::Failure(
            TaskFailure::new(
                ErrorCode::AgentError,
                format!("cannot run sh in {}", root.display()),
            )
            .with_cause(err.to_string()),
        ),
    }
}

/// Name of the variable holding what went wrong in the step's latest earlier attempt (a
/// failed check's message and the tail of its output, an exit status…), with the human's
/// guidance if any: a re-run command can read what it is to fix.
pub const PREVIOUS_FAILURE_VAR: &str = "ORCA_PREVIOUS_FAILURE";

/// The `ORCA_*` variables of a shell step: its identity, and [`PREVIOUS_FAILURE_VAR`] on a
/// retry.
fn step_vars(request: &TaskRequest) -> Vec<(String, String)> {
    let mut vars = request.identity().env();
    if let Some(last) = request.context.previous_attempts.last() {
        let mut text = last.error.replace('\0', "");
        if let Some(g) = &last.guidance {
            text.push_str("\nguidance: ");
            text.push_str(&g.replace('\0', ""));
        }
        vars.push((PREVIOUS_FAILURE_VAR.to_owned(), text));
    }
    vars
}

fn summary_of(output: &str) -> String {
    let t = process::tail(output, SUMMARY_LINES, SUMMARY_BYTES);
    if t.is_empty() {
        "command succeeded with no output".to_owned()
    } else {
        t
    }
}
