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
    supersede(app, &orca, source, fork.execution_id).await?;
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
        "execution {} retries {source}: reusing the recorded results of {} ({}); running {}",
        fork.execution_id,
        orca_core::plural::count(fork.reused.len(), "step", "steps"),
        names(&fork.reused),
        names(&fork.to_run),
    ));
    drive(app, &orca, fork.execution_id, options).await
}

/// The source of a retry, left waiting for a decision or interrupted with no process driving
/// it, is ended (`stopped`, naming the retry): its work goes on in the new execution, and it no
/// longer waits in `exec list` or the web inbox. One a live process drives, or that has ended,
/// is left as it is.
async fn supersede(
    app: &App,
    orca: &orca_services::Orca,
    source: orca_core::ExecutionId,
    retry: orca_core::ExecutionId,
) -> Result<(), CliError> {
    let header = orca.executions().header(source).await?;
    if header.value.stage().is_terminal()
        || crate::cmd::driver::is_live(app.store().lease(source).await?.as_ref())
    {
        return Ok(());
    }
    orca.executions()
        .stop(
            source,
            &user(),
            Some(format!(
                "superseded by `orca exec retry`: execution {retry}"
            )),
        )
        .await?;
    orca.executions().seal_if_ended(source).await?;
    app.info(&format!("stopped {source}: its work goes on in {retry}"));
    Ok(())
}
