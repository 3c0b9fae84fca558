//! `orca exec retry EXEC [--from STEP]`: a new execution of the same approved plan that reuses
//! the recorded results of the steps before STEP (default: every completed step) and runs the
//! rest (`ExecutionService::fork`, which audits the link both ways), driven here like `run`.

use orca_core::StepId;

use crate::app::{App, holder, user};
use crate::cli::RunOptions;
use crate::cmd::run::{drive, hitl_for};
use crate::exit::{CliError, Exit};

pub(crate) async fn retry(
    app: &App,
    exec: &str,
    from: Option<&str>,
    options: &RunOptions,
) -> Result<Exit, CliError> {
    let orca = app.orca(hitl_for(app, options));
    let source = orca.executions().resolve(exec).await?;
    let from = from
        .map(|s| {
            s.parse::<StepId>()
                .map_err(|e| CliError::bad_input(format!("--from {s}: {e}")))
        })
        .transpose()?;
    let fork = orca
        .executions()
        .fork(source, from.as_ref(), &user(), holder())
        .await?;
    crate::ids::learn_exec(fork.execution_id);
    let names = |steps: &[StepId]| {
        if steps.is_empty() {
            "none".to_owned()
        } else {
            steps
                .iter()
                .map(StepId::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    app.info(&format!(
        "execution {} retries {source}: reusing the recorded results of {} step(s) ({}); running {}",
        fork.execution_id,
        fork.reused.len(),
        names(&fork.reused),
        names(&fork.to_run),
    ));
    drive(app, &orca, fork.execution_id, options).await
}
