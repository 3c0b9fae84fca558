//! The table of executions (the executions page, a plan's page): each one's status in the
//! words of every surface (`orca_services::status`).

use std::fmt::Write as _;

use crate::html::esc;
use crate::pages::short_id;
use crate::state::Web;

/// Each execution's status, as on the command line: its stage, a pending decision, whether a
/// live driver holds it, whether its result waits for acceptance.
async fn exec_statuses(
    web: &Web,
    items: &[orca_store::ExecutionSummary],
) -> Vec<orca_services::status::Status> {
    use orca_services::acceptance::{ResultState, state};
    let mut out = Vec::with_capacity(items.len());
    for e in items {
        let driven = if e.stage.is_terminal() {
            None
        } else {
            let lease = web.store.lease(e.execution_id).await.ok().flatten();
            Some(lease.is_some_and(|l| !l.stale))
        };
        let awaiting = e.stage == orca_core::ExecutionStage::Completed
            && matches!(
                state(
                    web.orca.executions(),
                    web.orca.dispatch().workspaces().map(|w| &**w),
                    e.execution_id
                )
                .await,
                Ok(ResultState::Awaiting { .. })
            );
        out.push(orca_services::status::Status::of(
            e.stage,
            e.awaiting_decision,
            driven,
            awaiting,
        ));
    }
    out
}

pub(crate) async fn exec_table(web: &Web, items: &[orca_store::ExecutionSummary]) -> String {
    let statuses = exec_statuses(web, items).await;
    let mut out = String::from(
        "<table><tr><th>Execution</th><th>Status</th><th>Done</th><th class=\"opt\">Plan</th><th class=\"opt\">Created</th></tr>",
    );
    for (e, status) in items.iter().zip(statuses) {
        let _ = write!(
            out,
            "<tr><td><a class=\"id\" href=\"/executions/{0}\">{1}</a></td><td>{2}</td><td>{3}/{4}</td><td class=\"opt\"><a class=\"id\" href=\"/plans/{5}\">{6}</a></td><td class=\"opt\">{7}</td></tr>",
            e.execution_id,
            esc(&short_id(&e.execution_id.to_string())),
            crate::html::status_badge(status),
            e.completed,
            e.total,
            e.plan_id,
            esc(&short_id(&e.plan_id.to_string())),
            crate::html::when_cell(e.created_at)
        );
    }
    out.push_str("</table>");
    out
}
