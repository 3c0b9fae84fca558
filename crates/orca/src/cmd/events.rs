//! `orca events EXEC [--follow]`: the execution's events as JSON Lines on stdout, derived
//! from its durable audit log by `orca_services::events` (the schema: `docs/events.md`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use orca_core::ExecutionId;
use orca_services::events::{self, ExecEvent};
use orca_services::{NoHuman, Orca};

use crate::app::{App, out_json_line};
use crate::cmd::driver::is_live;
use crate::exit::{CliError, Exit};

/// How often `--follow` looks for new entries.
pub(crate) const POLL: Duration = Duration::from_millis(250);

pub(crate) async fn events(app: &App, exec: &str, follow: bool) -> Result<Exit, CliError> {
    let orca = app.orca(Arc::new(NoHuman));
    let id = orca.executions().resolve(exec).await?;
    follow_events(app, &orca, id, follow, |e| {
        out_json_line(&serde_json::to_value(e).unwrap_or_default());
    })
    .await?;
    Ok(Exit::Ok)
}

/// Reads an execution's events batch by batch; with `follow`, until the execution has ended
/// or no live process drives it (a moment's grace for a starting one).
pub(crate) struct Follower<'a> {
    app: &'a App,
    orca: &'a Orca,
    id: ExecutionId,
    plan: orca_core::PlanId,
    follow: bool,
    last: Option<u64>,
    start: Instant,
    done: bool,
    first: bool,
}

impl<'a> Follower<'a> {
    pub(crate) async fn new(
        app: &'a App,
        orca: &'a Orca,
        id: ExecutionId,
        follow: bool,
    ) -> Result<Self, CliError> {
        let plan = orca.executions().header(id).await?.value.info().plan_id;
        Ok(Self {
            app,
            orca,
            id,
            plan,
            follow,
            last: None,
            start: Instant::now(),
            done: false,
            first: true,
        })
    }

    /// The next events (possibly none yet); `None` once there will be no more.
    pub(crate) async fn next(&mut self) -> Result<Option<Vec<ExecEvent>>, CliError> {
        if self.done {
            return Ok(None);
        }
        if !self.first {
            tokio::time::sleep(POLL).await;
        }
        self.first = false;
        // Read the header before the log: whatever ended the run is in the log by then.
        let stage = self.orca.executions().header(self.id).await?.value.stage();
        let lease = self.app.store().lease(self.id).await?;
        let events = events::read(self.app.store().as_ref(), self.plan, self.id, self.last).await?;
        if let Some(e) = events.last() {
            self.last = Some(e.seq);
        }
        let settled = lease.is_some() || self.start.elapsed() > Duration::from_secs(2);
        self.done = !self.follow || stage.is_terminal() || (!is_live(lease.as_ref()) && settled);
        Ok(Some(events))
    }
}

/// Calls `each` for every event of `id` in order (see [`Follower`]).
pub(crate) async fn follow_events(
    app: &App,
    orca: &Orca,
    id: ExecutionId,
    follow: bool,
    mut each: impl FnMut(&ExecEvent),
) -> Result<(), CliError> {
    let mut follower = Follower::new(app, orca, id, follow).await?;
    while let Some(batch) = follower.next().await? {
        for e in &batch {
            each(e);
        }
    }
    Ok(())
}
