//! OpenTelemetry export for the commands that run agents (ADR 0048, telemetry): the settings
//! from the `OTEL_*` variables over `[telemetry]`, the header values (credentials) taught to
//! the redactor, and a follower of each execution this process drives.

use std::collections::BTreeMap;

use orca_core::AgentPort as _;
use orca_core::redact::Redactor;
use orca_core::{ExecutionId, Plan};
use orca_telemetry::follow::{Follower, Run};
use orca_telemetry::{ModelInfo, Telemetry, TelemetrySettings};

use crate::app::App;
use crate::exit::CliError;

/// The settings in force (`None`: export is off).
pub(crate) fn settings(table: Option<&toml::Value>) -> Result<Option<TelemetrySettings>, CliError> {
    let env = |k: &str| std::env::var(k).ok();
    let settings = orca_telemetry::config::resolve(table, &env)
        .map_err(|e| CliError::bad_input(format!("telemetry: {e}")))?;
    if let Some(s) = &settings {
        // Headers may hold credentials: no log line, span or message may carry them.
        crate::redact::learn(&Redactor::new().with_secrets(s.headers.values()));
    }
    Ok(settings)
}

/// Starts the exporter when export is on. A setting that is wrong (a `grpc` protocol, a
/// malformed header list) is refused, naming it.
pub(crate) fn start(table: Option<&toml::Value>) -> Result<Option<Telemetry>, CliError> {
    let Some(settings) = settings(table)? else {
        return Ok(None);
    };
    let runtime = tokio::runtime::Handle::current();
    // Export never stops a run: an exporter that cannot be built is a warning.
    // What the collector acknowledged of each execution, for the next process that follows it.
    let marks = crate::checkpoint::state_dir().map(|d| d.join("telemetry"));
    match Telemetry::start(settings, runtime, marks) {
        Ok(t) => Ok(Some(t)),
        Err(e) => {
            tracing::warn!("{e}; the run goes on without export");
            Ok(None)
        }
    }
}

/// Exports the planner's conversation that made `plan` (`orca ask`) as its own trace, when
/// export is on: from the plan's log, where the conversation was recorded.
pub(crate) async fn planner(app: &App, plan: orca_core::PlanId, goal: &str) {
    if let Some(traces) = PlannerTraces::of(app) {
        traces.export(plan, goal).await;
    }
}

/// What exports a planner's conversation where there is no `App` at hand (the MCP server's
/// host, for `plan_from_request`).
#[derive(Clone)]
pub(crate) struct PlannerTraces {
    store: std::sync::Arc<dyn orca_store::Store>,
    telemetry: orca_telemetry::Telemetry,
    models: BTreeMap<String, ModelInfo>,
}

impl std::fmt::Debug for PlannerTraces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlannerTraces").finish_non_exhaustive()
    }
}

impl PlannerTraces {
    /// `None` when export is off.
    pub(crate) fn of(app: &App) -> Option<Self> {
        app.telemetry.clone().map(|telemetry| Self {
            store: std::sync::Arc::clone(&app.store),
            telemetry,
            models: models(app),
        })
    }

    /// The trace of the conversation that made `plan`, queued for export.
    pub(crate) async fn export(&self, plan: orca_core::PlanId, goal: &str) {
        let Ok(entries) = self
            .store
            .entries(orca_store::AuditLogId::Plan { plan_id: plan })
            .await
        else {
            return;
        };
        // The plan's trace: its id's 128 bits, named as an execution's would be.
        let trace = ExecutionId::from_uuid(plan.uuid());
        let events = orca_services::events::from_entries(plan, trace, &entries);
        let spans = orca_telemetry::spans::derive_planner(
            plan,
            "planner",
            &orca_telemetry::SpanInput {
                events: &events,
                after: None,
                goal,
                models: &self.models,
                capture_content: self.telemetry.settings().capture_content,
            },
        );
        self.telemetry.record(spans);
    }
}

pub(crate) fn models(app: &App) -> BTreeMap<String, ModelInfo> {
    app.agents
        .agents()
        .into_iter()
        .map(|a| {
            (
                a.id.to_string(),
                ModelInfo {
                    provider: a.backend.clone(),
                    model: a.model.clone().unwrap_or_default(),
                },
            )
        })
        .collect()
}

/// Before this process writes to `exec`'s log and then drives it (`exec decide`): what it
/// writes is exported too, by the follower that starts later.
pub(crate) async fn mark(app: &App, plan: orca_core::PlanId, exec: ExecutionId) {
    if let Some(telemetry) = &app.telemetry {
        let last = orca_telemetry::follow::last_seq(app.store.as_ref(), plan, exec).await;
        telemetry.mark(exec, last);
    }
}

/// Follows the execution `exec` while this process drives it, when export is on.
pub(crate) async fn follow(app: &App, plan: Option<&Plan>, exec: ExecutionId) -> Option<Follower> {
    let telemetry = app.telemetry.clone()?;
    let plan = plan?;
    let models = models(app);
    let run = Run {
        plan_id: plan.id(),
        execution_id: exec,
        goal: plan.content().goal.clone(),
        models,
    };
    Some(Follower::start(app.store.clone(), telemetry, run).await)
}

/// What a worker's followers share: the store, the exporter, the agents' models.
type Following = (
    std::sync::Arc<dyn orca_store::Store>,
    Telemetry,
    BTreeMap<String, ModelInfo>,
);

/// The followers of a worker's drives: one per execution it drives, from the drive's start to
/// its end (the trace is the execution's, whichever worker drives it).
pub(crate) struct Drives {
    follow: Option<Following>,
    live: std::sync::Mutex<BTreeMap<ExecutionId, tokio::task::JoinHandle<Option<Follower>>>>,
    ending: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drives {
    pub(crate) fn new(app: &App) -> Self {
        Self {
            follow: app
                .telemetry
                .clone()
                .map(|t| (app.store.clone(), t, models(app))),
            live: std::sync::Mutex::default(),
            ending: std::sync::Mutex::default(),
        }
    }

    /// A drive of `exec` starts: follow it.
    pub(crate) fn driving(&self, exec: ExecutionId) {
        let Some((store, telemetry, models)) = self.follow.clone() else {
            return;
        };
        let started = tokio::spawn(Follower::of_execution(store, telemetry, exec, models));
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(exec, started);
    }

    /// The drive of `exec` ended: a last look at its log.
    pub(crate) fn ended(&self, exec: ExecutionId) {
        let started = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&exec);
        if let Some(started) = started {
            let ending = tokio::spawn(async move {
                if let Ok(Some(follower)) = started.await {
                    follower.finish().await;
                }
            });
            self.ending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(ending);
        }
    }

    /// The worker stopped: every follower makes its last look.
    pub(crate) async fn finish(self) {
        let live = self
            .live
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut ending = self
            .ending
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (_, started) in live {
            ending.push(tokio::spawn(async move {
                if let Ok(Some(follower)) = started.await {
                    follower.finish().await;
                }
            }));
        }
        for e in ending {
            let _ = e.await;
        }
    }
}
