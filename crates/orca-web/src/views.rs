//! Read models: what the pages (and any other front end, e.g. an MCP server) show. Plain data
//! built from the same service calls the command line uses; no HTML here.

use orca_core::{
    AuditKind, DecisionRequest, Execution, ExecutionId, Plan, PlanEvent, PlanId, PlanStage, StepId,
};
use orca_services::Orca;
use orca_store::{AuditLogId, ExecutionSnapshot, LeaseInfo, Store};
use serde::Serialize;
use time::OffsetDateTime;

use crate::error::WebError;

/// One pending human decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InboxItem {
    /// A proposal waiting for approve / request changes / reject.
    PlanApproval {
        /// The plan.
        plan_id: PlanId,
        /// Its goal.
        goal: String,
        /// How many steps.
        steps: usize,
        /// Since when it waits.
        #[serde(with = "time::serde::rfc3339")]
        since: OffsetDateTime,
    },
    /// A running execution waiting for a decision about a step.
    StepDecision {
        /// The execution.
        execution_id: ExecutionId,
        /// Its plan.
        plan_id: PlanId,
        /// The step.
        step_id: StepId,
        /// What is asked.
        request: DecisionRequest,
        /// Since when it waits.
        #[serde(with = "time::serde::rfc3339")]
        since: OffsetDateTime,
    },
}

impl InboxItem {
    /// Since when it waits.
    #[must_use]
    pub const fn since(&self) -> OffsetDateTime {
        match self {
            Self::PlanApproval { since, .. } | Self::StepDecision { since, .. } => *since,
        }
    }

    /// A stable key: the same pending decision has the same key.
    #[must_use]
    pub fn key(&self) -> String {
        match self {
            Self::PlanApproval { plan_id, since, .. } => format!("plan:{plan_id}:{since}"),
            Self::StepDecision {
                execution_id,
                step_id,
                since,
                ..
            } => format!("exec:{execution_id}:{step_id}:{since}"),
        }
    }

    /// Where to decide it, relative to the server's root.
    #[must_use]
    pub fn path(&self) -> String {
        match self {
            Self::PlanApproval { plan_id, .. } => format!("/plans/{plan_id}"),
            Self::StepDecision { execution_id, .. } => format!("/executions/{execution_id}"),
        }
    }

    /// One line for people.
    #[must_use]
    pub fn headline(&self) -> String {
        match self {
            Self::PlanApproval { goal, steps, .. } => {
                format!("approve plan ({steps} steps): {goal}")
            }
            Self::StepDecision {
                step_id, request, ..
            } => match request {
                DecisionRequest::Deviation {
                    attempts, failure, ..
                } => format!(
                    "step `{step_id}` failed after {}: {} — retry, replan or stop?",
                    orca_core::plural::count(*attempts, "attempt", "attempts"),
                    failure.message
                ),
                DecisionRequest::Interruption {
                    reason, question, ..
                } => format!(
                    "step `{step_id}` asks: {}",
                    question.as_deref().unwrap_or(reason)
                ),
            },
        }
    }
}

/// When a proposal started waiting: its last submission, else its creation.
fn proposal_since(plan: &Plan) -> OffsetDateTime {
    plan.history()
        .iter()
        .filter_map(|e| match e {
            PlanEvent::Submitted { at } => Some(*at),
            _ => None,
        })
        .next_back()
        .unwrap_or_else(|| plan.created_at())
}

/// Every pending decision, oldest first.
///
/// # Errors
///
/// A listing that cannot be read.
pub async fn inbox(orca: &Orca) -> Result<Vec<InboxItem>, WebError> {
    let mut items = Vec::new();
    for summary in orca.planning().list().await?.items {
        if summary.stage != PlanStage::Proposal {
            continue;
        }
        let Ok(plan) = orca.planning().plan(summary.plan_id).await else {
            continue;
        };
        if let Plan::Proposal(_) = &plan {
            items.push(InboxItem::PlanApproval {
                plan_id: plan.id(),
                goal: plan.content().goal.clone(),
                steps: plan.content().steps.len(),
                since: proposal_since(&plan),
            });
        }
    }
    for summary in orca.executions().list(None).await?.items {
        if !summary.awaiting_decision {
            continue;
        }
        let Ok(header) = orca.executions().header(summary.execution_id).await else {
            continue;
        };
        if let Some(d) = header.value.decision()
            && d.answer.is_none()
        {
            items.push(InboxItem::StepDecision {
                execution_id: summary.execution_id,
                plan_id: summary.plan_id,
                step_id: d.request.step_id().clone(),
                request: d.request.clone(),
                since: d.asked_at,
            });
        }
    }
    items.sort_by_key(InboxItem::since);
    Ok(items)
}

/// Who made a plan's decision, if it is made.
#[must_use]
pub fn plan_decided_by(plan: &Plan) -> Option<String> {
    match plan {
        Plan::Approved(p) => Some(format!(
            "approved by {} at {}",
            p.approval().by,
            crate::html::when(p.approval().at)
        )),
        Plan::Rejected(p) => Some(format!(
            "rejected by {} at {}",
            p.rejection().by,
            crate::html::when(p.rejection().at)
        )),
        Plan::Draft(p) => p.history().iter().rev().find_map(|e| match e {
            PlanEvent::ChangesRequested { by, at, .. } => Some(format!(
                "sent back for changes by {by} at {}",
                crate::html::when(*at)
            )),
            _ => None,
        }),
        Plan::Proposal(_) => None,
    }
}

/// Token counts and cost of an execution, from its audit log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UsageTotals {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cost in millionths of a dollar (0 when the backends know no prices).
    pub cost_micro_usd: u64,
}

/// One execution, with what the pages show about it.
#[derive(Debug, Clone)]
pub struct ExecutionView {
    /// Header and tasks.
    pub snapshot: ExecutionSnapshot,
    /// Its plan, when readable.
    pub plan: Option<Plan>,
    /// Who drives it, if anyone.
    pub lease: Option<LeaseInfo>,
    /// Usage and cost so far.
    pub usage: UsageTotals,
    /// Who answered the last decision (from the audit log), if any.
    pub last_decision_by: Option<String>,
    /// Its completed result waits on its branch for acceptance.
    pub awaiting_acceptance: bool,
}

impl ExecutionView {
    /// Its status, in the words of every surface.
    #[must_use]
    pub fn status(&self) -> orca_services::status::Status {
        let e = &self.snapshot.execution.value;
        orca_services::status::Status::of(
            e.stage(),
            e.decision().is_some_and(|d| d.answer.is_none()),
            (!e.stage().is_terminal()).then(|| driven(self)),
            self.awaiting_acceptance,
        )
    }
}

/// Reads one execution.
///
/// # Errors
///
/// Unknown or unreadable execution.
pub async fn execution(
    orca: &Orca,
    store: &dyn Store,
    id: ExecutionId,
) -> Result<ExecutionView, WebError> {
    let snapshot = orca.executions().get(id).await?;
    let info = snapshot.execution.value.info().clone();
    let plan = orca.planning().plan(info.plan_id).await.ok();
    let lease = store
        .lease(id)
        .await
        .map_err(orca_services::ServiceError::from)?;
    let entries = store
        .entries(AuditLogId::Execution {
            plan_id: info.plan_id,
            execution_id: id,
        })
        .await
        .unwrap_or_default();
    let mut usage = UsageTotals::default();
    let mut last_decision_by = None;
    for e in &entries {
        if e.kind == AuditKind::DecisionAnswered {
            last_decision_by = e.data.get("by").and_then(|b| b.as_str()).map(str::to_owned);
        }
        if e.kind == AuditKind::ExecutionCompleted {
            continue;
        }
        if let Some(u) = e.data.get("usage") {
            let get = |k: &str| u.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
            usage.input_tokens += get("input_tokens");
            usage.output_tokens += get("output_tokens");
            usage.cost_micro_usd += get("cost_micro_usd");
        }
    }
    let awaiting_acceptance = matches!(
        orca_services::acceptance::state(
            orca.executions(),
            orca.dispatch().workspaces().map(|w| &**w),
            id
        )
        .await,
        Ok(orca_services::acceptance::ResultState::Awaiting { .. })
    );
    Ok(ExecutionView {
        snapshot,
        plan,
        lease,
        usage,
        last_decision_by,
        awaiting_acceptance,
    })
}

/// Whether a live driver holds the execution now.
#[must_use]
pub fn driven(view: &ExecutionView) -> bool {
    matches!(view.snapshot.execution.value, Execution::Running(_))
        && view.lease.as_ref().is_some_and(|l| !l.stale)
}
