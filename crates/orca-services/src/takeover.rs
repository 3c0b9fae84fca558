//! Process ownership on the runner's side (ADR 0010): the process groups an attempt starts are
//! recorded on its running task as they start; a runner taking an execution over first ends
//! the groups its dead predecessor recorded (checking each leader's start time), audits what
//! it found, and only then re-runs anything; a stopped run records its in-flight attempts as
//! interrupted so `resume` runs them again.

use orca_core::{AgentPort, ExecutionId, ProcessGroup, ReapOutcome, StepId, Task};
use orca_store::Versioned;
use serde_json::json;
use tracing::{info, warn};

use crate::error::{Result, ServiceError};
use crate::execution::ExecutionService;

/// Adds a started process group to a running task (one task write). Anything but a running
/// task is handed back unchanged.
pub(crate) async fn record_process(
    executions: &ExecutionService,
    id: ExecutionId,
    task: Versioned<Task>,
    group: ProcessGroup,
) -> Result<Versioned<Task>> {
    let Task::Running(mut running) = task.value.clone() else {
        return Ok(task);
    };
    running.processes.push(group);
    let value = Task::Running(running);
    let revision = executions
        .store()
        .update_task(id, &value, task.revision)
        .await?;
    Ok(Versioned { value, revision })
}

/// Runs an agent call made by `call` (given the sink its gate reports process groups to),
/// recording each group on the running task `started` — durably, before the group's shell
/// command may start — until the call ends. `None` if `cancel` fires first (the call is
/// dropped: its processes are ended).
pub(crate) async fn call_recording_groups<F>(
    call: impl FnOnce(crate::tools::ProcessSink) -> F,
    executions: &ExecutionService,
    id: ExecutionId,
    started: &mut Versioned<Task>,
    cancel: &tokio_util::sync::CancellationToken,
) -> Option<orca_core::Reply<orca_core::TaskResult>>
where
    F: std::future::Future<Output = orca_core::Reply<orca_core::TaskResult>>,
{
    let (groups, mut started_groups) = tokio::sync::mpsc::unbounded_channel();
    let sink: crate::tools::ProcessSink = std::sync::Arc::new(move |g, recorded| {
        let _ = groups.send((g, recorded));
    });
    let call = call(sink);
    tokio::pin!(call);
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => return None,
            Some((group, recorded)) = started_groups.recv() => {
                match record_process(executions, id, started.clone(), group).await {
                    Ok(task) => *started = task,
                    Err(e) => warn!(execution = %id, error = %e, "could not record a step's process group"),
                }
                // Answered either way: the command starts (an unrecorded group is still ended
                // by the watchdog if this process dies).
                let _ = recorded.send(());
            }
            reply = &mut call => return Some(reply),
        }
    }
}

/// Ends the process groups recorded by the attempts still marked running (their runner is
/// gone: this runner holds the lease now), before anything is re-run. Groups on another host
/// cannot be reached and are audited as such. Every group found is audited
/// (`takeover.processes_ended`: step, attempt, holder, each group and what was found).
///
/// # Errors
///
/// A group still alive after SIGKILL ([`ServiceError::ProcessesAlive`]): re-running its step
/// could run its effect twice at once. Store errors.
pub(crate) async fn end_dead_runner_processes(
    executions: &ExecutionService,
    snap: &orca_store::ExecutionSnapshot,
    agents: &dyn AgentPort,
    id: ExecutionId,
    own_host: &str,
) -> Result<Vec<StepId>> {
    let mut ended = Vec::new();
    for task in &snap.tasks {
        let Task::Running(running) = &task.value else {
            continue;
        };
        if running.processes.is_empty() {
            continue;
        }
        let outcomes = if running.holder.host == own_host {
            agents.reap(&running.processes).await
        } else {
            vec![ReapOutcome::Unreachable; running.processes.len()]
        };
        let groups: Vec<_> = running
            .processes
            .iter()
            .zip(&outcomes)
            .map(|(g, o)| {
                json!({ "pgid": g.pgid, "start_time": g.start_time,
                        "host": running.holder.host, "outcome": o })
            })
            .collect();
        info!(execution = %id, step = %running.step_id, ?outcomes, "ended a dead runner's process groups");
        executions
            .record_processes_ended(
                &snap.execution.value,
                json!({ "step_id": running.step_id, "attempt": running.attempt,
                        "holder": running.holder, "groups": groups }),
            )
            .await?;
        if let Some((group, _)) = running
            .processes
            .iter()
            .zip(&outcomes)
            .find(|(_, o)| **o == ReapOutcome::Survived)
        {
            return Err(ServiceError::ProcessesAlive(format!(
                "process group {} of step `{}` (attempt {}) is still alive after SIGKILL; \
                 not re-running the step over it",
                group.pgid, running.step_id, running.attempt
            )));
        }
        ended.push(running.step_id.clone());
    }
    Ok(ended)
}

/// Renews `lease` every `every` until dropped (the driver's heartbeat).
pub(crate) fn heartbeat(
    store: std::sync::Arc<dyn orca_store::Store>,
    lease: std::sync::Arc<orca_store::Lease>,
    every: std::time::Duration,
) -> Heartbeat {
    let every = every.max(std::time::Duration::from_millis(100));
    let task = tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            if let Err(e) = store.renew_lease(&lease).await {
                warn!(execution = %lease.execution(), error = %e, "could not renew the lease");
            }
        }
    });
    Heartbeat(Some(task))
}

/// Stops the heartbeat when dropped.
#[derive(Debug)]
pub(crate) struct Heartbeat(Option<tokio::task::JoinHandle<()>>);

impl Heartbeat {
    /// Stops it and waits until it has let go of the lease.
    pub(crate) async fn stop(mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}
