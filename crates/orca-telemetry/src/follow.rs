//! Following an execution's audit log while a process drives it: every second, the spans ended
//! by entries appended since the last look are derived and queued; a last look when the run
//! ends. A follower starts where the collector's acknowledgements of the execution stop (kept
//! on disk by whichever process sent them), else at the log's start: a resumed run, a
//! worker or the run a decision restarts sends what a killed process never sent and adds to
//! the trace the first process started without repeating what was acknowledged.

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
    telemetry.record_window(run.execution_id, last, spans);
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
    // The oldest decision asked and not answered yet (an answer answers the latest asked).
    let mut open: Vec<time::OffsetDateTime> = Vec::new();
    for e in &events {
        match e.kind.as_str() {
            "decision.requested" => open.push(e.at),
            "decision.answered" => {
                open.pop();
            }
            _ => {}
        }
    }
    telemetry.open_decision(
        run.execution_id,
        open.first().map(|t| std::time::SystemTime::from(*t)),
    );
    Some(last)
}

impl Follower {
    /// Starts following after the last entry whose spans the collector acknowledged (or after
    /// the mark this process set before it wrote to the log, [`Telemetry::mark`], or from the
    /// start).
    pub async fn start(store: Arc<dyn Store>, telemetry: Telemetry, run: Run) -> Self {
        let start = match (
            telemetry.acknowledged(run.execution_id),
            telemetry.mark_of(run.execution_id),
        ) {
            (Some(acknowledged), _) => Some(acknowledged),
            (None, Some(marked)) => marked,
            // Nobody's export of it was acknowledged here: all of it (an execution started
            // now, or one whose earlier runs had export off).
            (None, None) => None,
        };
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut after = start;
            loop {
                let done = tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => false,
                    _ = stopped.changed() => true,
                };
                // Another process following the same execution (a worker beside a web
                // decision's run) may have sent some of it already.
                let after_acknowledged = after.max(telemetry.acknowledged(run.execution_id));
                after = look(store.as_ref(), &telemetry, &run, after_acknowledged).await;
                if done {
                    break;
                }
            }
        });
        Self { stop, task }
    }

    /// Follows `exec` from its plan (read from the store): for a process that learns only the
    /// execution's id (a worker). `None` when the execution or its plan cannot be read.
    pub async fn of_execution(
        store: Arc<dyn Store>,
        telemetry: Telemetry,
        exec: ExecutionId,
        models: BTreeMap<String, ModelInfo>,
    ) -> Option<Self> {
        let header = store.execution_header(exec).await.ok()?;
        let plan_id = header.value.info().plan_id;
        let goal = store.plan(plan_id).await.ok()?.value.content().goal.clone();
        let run = Run {
            plan_id,
            execution_id: exec,
            goal,
            models,
        };
        Some(Self::start(store, telemetry, run).await)
    }

    /// Makes the last look (the entries the run's end appended).
    pub async fn finish(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}
