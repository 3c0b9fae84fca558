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
    match Telemetry::start(settings, runtime) {
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
    let Some(telemetry) = &app.telemetry else {
        return;
    };
    let Ok(entries) = app
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
            models: &models(app),
            capture_content: telemetry.settings().capture_content,
        },
    );
    telemetry.record(spans);
}

fn models(app: &App) -> BTreeMap<String, ModelInfo> {
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
