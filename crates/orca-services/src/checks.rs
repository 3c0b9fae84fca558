//! Checks at their two places (see [`orca_core::check`]): a step's, after its agent reported
//! success and before its worktree is merged; the plan's, once every step completed, on the
//! integrated result, before the execution completes. Both are run by the agent port (the
//! shell machinery, under the step's sandbox and environment) and judged by exit status only.

use orca_core::check::failure_of;
use orca_core::{
    AgentId, Check, CheckRun, ChecksRequest, Execution, Reply, TaskFailure, TaskRequest,
    TaskResult, ToolCall, ToolError, ToolHost, ToolSpec,
};
use serde_json::{Value, json};

use crate::execution::ExecutionService;
use crate::tools::ToolContext;

/// The data of a `check.passed` / `check.failed` entry: the command, its verdict, how long it
/// took and the tail of its output (bounded; the store redacts it).
pub(crate) fn entry_data(run: &CheckRun) -> Value {
    let mut data = serde_json::to_value(run).unwrap_or_else(|_| json!({}));
    if let Some(map) = data.as_object_mut() {
        map.insert("bytes".to_owned(), json!(run.output.len()));
    }
    data
}

/// A failure as the store keeps it: its free text redacted, so a secret a check printed never
/// reaches the next attempt's model or command.
fn stored(ctx: &ToolContext, failure: TaskFailure) -> TaskFailure {
    serde_json::to_value(&failure)
        .ok()
        .map(|v| ctx.store.stored_form(v))
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or(failure)
}

/// Judges a step's reply by its checks: a success stays one only if every check exits 0 in
/// the step's workspace (`request.workdir`, else the project); otherwise it becomes the
/// `check_failed` failure of the first that did not. Other outcomes, and steps without
/// checks, are returned as they are.
pub(crate) async fn judge_step(
    ctx: &ToolContext,
    request: &TaskRequest,
    tools: &dyn ToolHost,
    mut reply: Reply<TaskResult>,
) -> Reply<TaskResult> {
    if request.step.checks.is_empty() || !matches!(reply.outcome, TaskResult::Success(_)) {
        return reply;
    }
    let checks = ChecksRequest {
        execution_id: request.execution_id,
        plan_id: request.plan_id,
        identity: Some(request.identity()),
        agent: request.agent.clone(),
        env: request.step.env.clone(),
        workdir: request.workdir.clone(),
        checks: request.step.checks.clone(),
    };
    let runs = ctx.agents.run_checks(&checks, tools).await;
    if let Some(failure) = verdict(&checks.checks, &runs) {
        reply.outcome = TaskResult::Failure(stored(ctx, failure));
    }
    reply
}

/// The failure of `runs` of `checks`: the first that did not pass, or a check that did not
/// run at all (a port that stopped early never lets work through unchecked).
fn verdict(checks: &[Check], runs: &[CheckRun]) -> Option<TaskFailure> {
    failure_of(runs).or_else(|| {
        checks.get(runs.len()).map(|missing| {
            failure_of(&[CheckRun::not_run(missing, "the agent port did not run it")])
                .unwrap_or_else(|| {
                    TaskFailure::new(orca_core::ErrorCode::CheckFailed, "a check did not run")
                })
        })
    })
}

/// Runs the plan's checks on the integrated result and records each; `Some(reason)` when one
/// did not pass: the execution fails with it.
pub(crate) async fn judge_plan(
    ctx: &ToolContext,
    executions: &ExecutionService,
    execution: &Execution,
    checks: &[Check],
    workdir: Option<std::path::PathBuf>,
) -> Option<String> {
    if checks.is_empty() {
        return None;
    }
    let request = ChecksRequest {
        execution_id: execution.id(),
        plan_id: execution.info().plan_id,
        identity: None,
        agent: AgentId::shell(),
        env: Vec::new(),
        workdir,
        checks: checks.to_vec(),
    };
    let host = PlanChecks {
        executions,
        execution,
    };
    let runs = ctx.agents.run_checks(&request, &host).await;
    verdict(checks, &runs).map(|f| {
        let f = stored(ctx, f);
        let message = f
            .message
            .replacen("the checks failed", "the plan's checks failed", 1);
        match &f.cause {
            Some(cause) => format!("{message}:\n{cause}"),
            None => message,
        }
    })
}

/// The caller of the plan's checks: offers no tools and records each check's run through the
/// writer. Their process groups are not recorded (there is no attempt to hang them on): the
/// watchdog still ends them with the runner.
struct PlanChecks<'a> {
    executions: &'a ExecutionService,
    execution: &'a Execution,
}

#[async_trait::async_trait]
impl ToolHost for PlanChecks<'_> {
    fn specs(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    async fn call(&self, call: &ToolCall) -> Result<Value, ToolError> {
        Err(ToolError::new(format!(
            "tool `{}` is not available",
            call.name
        )))
    }

    async fn check_ran(&self, run: &CheckRun) {
        if let Err(e) = self.executions.record_plan_check(self.execution, run).await {
            tracing::warn!(error = %e, "cannot record a plan check");
        }
    }
}
