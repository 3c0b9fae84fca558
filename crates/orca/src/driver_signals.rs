//! Ctrl-C and `exec stop` for the process driving a run: the first SIGINT or SIGTERM stops the
//! run cleanly (running steps ended, attempts recorded interrupted, the execution resumable);
//! a second one forces the exit at once (exit 130; the execution stays resumable, and the next
//! `resume` ends whatever the steps left behind).

use orca_core::ExecutionId;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::exit::CliError;
use crate::term::say;

/// Listens for SIGINT and SIGTERM while `exec` runs; cancels `cancel` on the first.
pub(crate) fn listen(
    exec: ExecutionId,
    cancel: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, CliError> {
    let mut interrupts = signal(SignalKind::interrupt())
        .map_err(|e| CliError::internal(format!("cannot listen for Ctrl-C: {e}")))?;
    let mut terms = signal(SignalKind::terminate())
        .map_err(|e| CliError::internal(format!("cannot listen for SIGTERM: {e}")))?;
    Ok(tokio::spawn(async move {
        let first = tokio::select! {
            s = interrupts.recv() => s.map(|()| "Ctrl-C"),
            s = terms.recv() => s.map(|()| "a stop request"),
        };
        if let Some(what) = first {
            say(&format!(
                "stopping ({what}): ending running steps; {exec} stays resumable (Ctrl-C again to force)"
            ));
            cancel.cancel();
        }
        let again = tokio::select! {
            s = interrupts.recv() => s,
            s = terms.recv() => s,
        };
        if again.is_some() {
            say(&format!(
                "forced: {exec} stays resumable; continue it with `orca exec resume {exec}`"
            ));
            // The conventional status of a process ended by SIGINT.
            std::process::exit(130);
        }
    }))
}
