//! Following an execution's audit log while a process drives it: every second, the spans ended
//! by entries appended since the last look are derived and queued; a last look when the run
//! ends. Only entries appended while this process follows are exported, so a resumed run adds
//! to the trace the first process started without repeating it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use orca_core::{ExecutionId, PlanId};
use orca_store::Store;
use tokio::sync::watch;

use crate::Telemetry;
use crate::spans::{ModelInfo, SpanInput, derive};

/// What a follower needs to know of the run.
#[derive(Debug, Clone)]
pub struct Run {
    /// The plan.
    pub plan_id: PlanId,
    /// The execution.
    pub execution_id: ExecutionId,
    /// The plan's goal.
    pub goal: String,
    /// Each agent's provider and model.
    pub models: BTreeMap<String, ModelInfo>,
}

/// A running follower; [`Follower::finish`] makes its last look.
#[derive(Debug)]
pub struct Follower {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// The last `seq` of an execution's log now (`None`: empty or unreadable).
pub async fn last_seq(store: &dyn Store, plan: PlanId, exec: ExecutionId) -> Option<u64> {
    orca_services::events::read(store, plan, exec, None)
        .await
        .ok()
        .and_then(|e| e.last().map(|e| e.seq))
}

async fn look(
    store: &dyn Store,
    telemetry: &Telemetry,
    run: &Run,
    after: Option<u64>,
) -> Option<u64> {
    let Ok(events) = orca_services::events::read(store, run.plan_id, run.execution_id, None).await
    else {
        return after;
    };
    let Some(last) = events.last().map(|e| e.seq) else {
        return after;
    };
    if Some(last) == after {
        return after;
    }
    let spans = derive(&SpanInput {
        events: &events,
        after,
        goal: &run.goal,
        models: &run.models,
        capture_content: telemetry.settings().capture_content,
    });
    telemetry.record(spans);
    let delta: i64 = events
        .iter()
        .filter(|e| after.is_none_or(|a| e.seq > a))
        .map(|e| match e.kind.as_str() {
            "decision.requested" => 1,
            "decision.answered" => -1,
            _ => 0,
        })
        .sum();
    telemetry.decisions(delta);
    Some(last)
}

impl Follower {
    /// Starts following from the entries appended after now (or after the mark this process
    /// set before it wrote to the log: [`Telemetry::mark`]).
    pub async fn start(store: Arc<dyn Store>, telemetry: Telemetry, run: Run) -> Self {
        let start = match telemetry.mark_of(run.execution_id) {
            Some(marked) => marked,
            None => last_seq(store.as_ref(), run.plan_id, run.execution_id).await,
        };
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut after = start;
            loop {
                let done = tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => false,
                    _ = stopped.changed() => true,
                };
                after = look(store.as_ref(), &telemetry, &run, after).await;
                if done {
                    break;
                }
            }
        });
        Self { stop, task }
    }

    /// Makes the last look (the entries the run's end appended).
    pub async fn finish(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}
