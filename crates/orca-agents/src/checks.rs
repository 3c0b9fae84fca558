//! Running checks ([`orca_core::check`]): each `sh -c` through the same machinery as the
//! `shell` agent's step command — its own process group recorded for the caller, the same
//! kernel sandbox, the same step environment — so a check never has more rights than the step
//! it judges.

use std::path::Path;
use std::time::{Duration, Instant};

use orca_core::check::{CHECK_OUTPUT_BYTES, tail};
use orca_core::{CheckRun, CheckVerdict, ChecksRequest, ToolHost};
use orca_os::process::{self, RunEnd, RunSpec};
use orca_os::sandbox::SandboxPolicy;
use orca_os::step_env::EnvPolicy;

/// Runs `request`'s checks in order in `request.workdir` (else `root`), stopping at the first
/// that does not pass; reports each to `caller` ([`ToolHost::check_ran`]) as it ends.
pub async fn run_checks(
    root: &Path,
    request: &ChecksRequest,
    policy: &EnvPolicy,
    sandbox: Option<&SandboxPolicy>,
    kill_grace: Duration,
    caller: &dyn ToolHost,
) -> Vec<CheckRun> {
    let cwd = request.workdir.as_deref().unwrap_or(root);
    let identity = match &request.identity {
        Some(identity) => identity.env(),
        None => vec![
            (
                "ORCA_EXECUTION_ID".to_owned(),
                request.execution_id.to_string(),
            ),
            ("ORCA_PLAN_ID".to_owned(), request.plan_id.to_string()),
        ],
    };
    // A check is a shell command: it gets what a `shell` step with the same approved `env`
    // names would, never the judged agent's own extras (a command-line agent's provider key).
    let env = policy.build(&orca_core::AgentId::shell(), &request.env, identity);
    let mut runs = Vec::with_capacity(request.checks.len());
    for check in &request.checks {
        let run = if let Some(problem) = check.problem() {
            CheckRun::not_run(check, problem)
        } else {
            tracing::info!(command = %check.command, "running a check");
            let started = Instant::now();
            let timeout = check.timeout();
            let spec = RunSpec {
                program: "sh",
                args: vec!["-c".to_owned(), check.command.clone()],
                cwd,
                env: env.clone(),
                timeout: Some(timeout),
                cap: CHECK_OUTPUT_BYTES,
                owner: Some(caller),
                sandbox,
                stdin: None,
                kill_grace,
                interleave: true,
            };
            let out = process::run_captured(spec).await;
            let verdict = match out.end {
                RunEnd::Exited(status) if status.success() => CheckVerdict::Passed,
                RunEnd::Exited(status) => CheckVerdict::Failed {
                    status: match status.code() {
                        Some(code) => format!("exit status {code}"),
                        None => {
                            use std::os::unix::process::ExitStatusExt as _;
                            format!("killed by signal {}", status.signal().unwrap_or(0))
                        }
                    },
                },
                RunEnd::TimedOut => CheckVerdict::TimedOut {
                    after_secs: timeout.as_secs(),
                },
                // A check is not watched for silence (only its timeout ends it early).
                RunEnd::Idle(after) => CheckVerdict::TimedOut {
                    after_secs: after.as_secs(),
                },
                RunEnd::SpawnFailed(e) => CheckVerdict::NotRun {
                    reason: format!("cannot run sh in {}: {e}", cwd.display()),
                },
            };
            CheckRun {
                command: check.command.clone(),
                verdict,
                output: tail(&out.output, usize::MAX, CHECK_OUTPUT_BYTES),
                millis: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            }
        };
        caller.check_ran(&run).await;
        let passed = run.passed();
        runs.push(run);
        if !passed {
            break;
        }
    }
    runs
}
