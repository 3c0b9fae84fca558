//! `OrcaService`: the relay. Every user message goes to the planner; its answer, draft,
//! proposal or failure comes back. Also the approval loop (approve / request changes → the
//! planner revises → approve again / reject) and replanning after a failed step.

use orca_core::{
    AgentInfo, ApprovalAction, ApprovedPlan, Budget, ErrorCode, HumanAnswer, Plan, PlanId,
    PlanRefStage, PlannerRequest, PlannerResponse, Reply, Role, TaskFailure, match_action,
};
use orca_store::audit::NewAuditEntry;
use tracing::instrument;

use crate::error::{Result, ServiceError};
use crate::hitl::{Hitl, approval_question};
use crate::planning::DraftEdit;
use crate::tools::{AuditScope, CallMode, Gate, ToolContext};

/// Sends a message to the planner (with the planning tools) and checks what it says about plans.
/// The configured planner agent.
fn planner(ctx: &ToolContext) -> Result<AgentInfo> {
    ctx.agents
        .agents()
        .into_iter()
        .find(|a| a.role == Role::Planner)
        .ok_or_else(|| ServiceError::BadInput("no planner agent is configured".to_owned()))
}

pub(crate) async fn ask_planner(
    ctx: &ToolContext,
    message: String,
    plan_id: Option<PlanId>,
    budget: Budget,
    scope: Option<AuditScope>,
) -> Result<Reply<PlannerResponse>> {
    Ok(ask_planner_keeping(ctx, message, plan_id, budget, scope)
        .await?
        .0)
}

/// [`ask_planner`], and what the conversation kept for a plan it never made (its answers and
/// tool calls, in order; empty once it made a plan, whose log holds them).
pub(crate) async fn ask_planner_keeping(
    ctx: &ToolContext,
    message: String,
    plan_id: Option<PlanId>,
    budget: Budget,
    scope: Option<AuditScope>,
) -> Result<(Reply<PlannerResponse>, Vec<NewAuditEntry>)> {
    let info = planner(ctx)?;
    // With no scope of its own (asked by a human, not from a step), the conversation goes to
    // the log of the plan it works on (`tools::plan_log`).
    let mode = if plan_id.is_some() {
        CallMode::Revising
    } else {
        CallMode::Planning
    };
    let gate = Gate::new(ctx.clone(), &info, mode, scope).recording_planning(plan_id);
    let mut reply = ctx
        .agents
        .plan(
            PlannerRequest {
                message,
                plan_id,
                session: None,
                budget,
            },
            &gate,
        )
        .await;
    // Trust the store, not the model, about which plan exists and its stage.
    if let PlannerResponse::Plan { plan_id, stage, .. } = &mut reply.outcome {
        match ctx.planning.plan(*plan_id).await {
            Ok(Plan::Draft(_)) => *stage = PlanRefStage::Draft,
            Ok(Plan::Proposal(_)) => *stage = PlanRefStage::Proposal,
            Ok(other) => {
                reply.outcome = PlannerResponse::Failure(TaskFailure::new(
                    ErrorCode::Validation,
                    format!(
                        "the planner returned plan {} which is already {}",
                        other.id(),
                        other.stage()
                    ),
                ));
            }
            Err(e) => {
                reply.outcome = PlannerResponse::Failure(TaskFailure::new(
                    ErrorCode::ParseError,
                    format!("the planner referred to a plan that cannot be read: {e}"),
                ));
            }
        }
    }
    Ok((reply, gate.unbound_transcript()))
}

/// What came of asking the human to approve a proposal.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ApprovalOutcome {
    /// Approved.
    Approved(Box<ApprovedPlan>),
    /// Rejected.
    Rejected(PlanId),
    /// No human could answer; the plan stays a proposal.
    Pending(PlanId),
    /// Changes were requested and the planner did not come back with a proposal.
    Draft {
        /// The plan.
        plan: PlanId,
        /// What the planner said.
        response: PlannerResponse,
    },
}

/// The relay and the flows around the planner.
#[derive(Debug, Clone)]
pub struct OrcaService {
    ctx: ToolContext,
    budget: Budget,
}

/// How many request-changes rounds the approval loop allows before it leaves the plan as a draft.
const MAX_REVISIONS: usize = 5;

impl OrcaService {
    /// The same service deciding plans with `planning` (its approval policy).
    #[must_use]
    pub(crate) fn with_planning(mut self, planning: crate::planning::PlanningService) -> Self {
        self.ctx.planning = planning;
        self
    }

    /// A relay over the tool context; `budget` limits each planner call.
    #[must_use]
    pub const fn new(ctx: ToolContext, budget: Budget) -> Self {
        Self { ctx, budget }
    }

    /// Relays a user message to the planner.
    #[instrument(skip(self, message))]
    pub async fn invoke(&self, message: &str) -> Result<Reply<PlannerResponse>> {
        ask_planner(&self.ctx, message.to_owned(), None, self.budget, None).await
    }

    /// [`Self::invoke`], and the conversation's answers and tool calls if it made no plan
    /// (a plan's log holds them otherwise): what a failed planner did, to keep for a human.
    pub async fn invoke_keeping(
        &self,
        message: &str,
    ) -> Result<(Reply<PlannerResponse>, Vec<NewAuditEntry>)> {
        ask_planner_keeping(&self.ctx, message.to_owned(), None, self.budget, None).await
    }

    /// Asks the human to approve a proposal with the two-question pattern; on "request
    /// changes" the planner revises the plan and the human is asked again.
    #[instrument(skip(self, hitl))]
    pub async fn approval_loop(
        &self,
        plan_id: PlanId,
        hitl: &dyn Hitl,
        by: &str,
    ) -> Result<ApprovalOutcome> {
        let planning = &self.ctx.planning;
        for _ in 0..=MAX_REVISIONS {
            let plan = planning.plan(plan_id).await?;
            if !matches!(plan, Plan::Proposal(_)) {
                return Err(crate::planning::wrong_stage(&plan, "proposal"));
            }
            // The question shows this content and its digest: the approval binds that digest.
            let shown = plan.content().digest();
            let Some(HumanAnswer { action, context }) =
                hitl.decide(&approval_question(&plan)).await
            else {
                return Ok(ApprovalOutcome::Pending(plan_id));
            };
            let context = context.filter(|c| !c.trim().is_empty());
            match match_action::<ApprovalAction>(&action)
                .map_err(|e| ServiceError::BadInput(e.to_string()))?
            {
                ApprovalAction::Approve => {
                    return Ok(ApprovalOutcome::Approved(Box::new(
                        planning.approve_shown(plan_id, by, context, &shown).await?,
                    )));
                }
                ApprovalAction::Reject => {
                    planning.reject(plan_id, by, context).await?;
                    return Ok(ApprovalOutcome::Rejected(plan_id));
                }
                ApprovalAction::RequestChanges => {
                    let feedback = context.unwrap_or_else(|| "please revise the plan".to_owned());
                    planning.request_changes(plan_id, by, &feedback).await?;
                    let reply = self.revise(plan_id, &feedback).await?;
                    if !matches!(
                        reply.outcome,
                        PlannerResponse::Plan {
                            stage: PlanRefStage::Proposal,
                            ..
                        }
                    ) {
                        // The planner may have submitted without saying so.
                        if !matches!(planning.plan(plan_id).await?, Plan::Proposal(_)) {
                            return Ok(ApprovalOutcome::Draft {
                                plan: plan_id,
                                response: reply.outcome,
                            });
                        }
                    }
                }
            }
        }
        Ok(ApprovalOutcome::Draft {
            plan: plan_id,
            response: PlannerResponse::Failure(TaskFailure::new(
                ErrorCode::Validation,
                format!("changes were requested {MAX_REVISIONS} times; the plan stays a draft"),
            )),
        })
    }

    /// The planner revises a draft after the human requested changes.
    pub async fn revise(&self, plan_id: PlanId, feedback: &str) -> Result<Reply<PlannerResponse>> {
        let plan = self.ctx.planning.plan(plan_id).await?;
        let message = format!(
            "The human requested changes to draft plan {plan_id}.\nFeedback: {feedback}\n\n\
             Current plan:\n{}\nRevise the draft with the plan tools and submit it again with \
             orca_plan_submit (plan_id {plan_id}).",
            crate::hitl::render_plan(&plan)
        );
        ask_planner(&self.ctx, message, Some(plan_id), self.budget, None).await
    }

    /// After a step finally failed and the human chose Replan: the planner gets the plan, the
    /// failure and the completed work, and builds a new plan that supersedes the old one. The
    /// new draft is created here (so it names the plan it supersedes); the planner fills it in
    /// and submits it.
    pub async fn replan(
        &self,
        old: &ApprovedPlan,
        report: &str,
    ) -> Result<(PlanId, Reply<PlannerResponse>)> {
        // No draft is left behind when there is nobody to fill it.
        planner(&self.ctx)?;
        let planning = &self.ctx.planning;
        let draft = planning
            .create_draft(Some(old.content().goal.clone()), Some(old.id()))
            .await?;
        if let Some(summary) = old.content().summary.clone() {
            planning
                .edit(draft.id(), DraftEdit::SetSummary(Some(summary)))
                .await?;
        }
        let message = format!(
            "An execution of approved plan {} failed and the human asked for a new plan.\n\n{report}\n\n\
             Build the replacement in draft plan {} (already created; it supersedes the old plan): \
             add the steps still needed (do not repeat completed work unless it must be redone), set \
             assumptions, risks and verification, then submit it with orca_plan_submit.",
            old.id(),
            draft.id()
        );
        let reply = ask_planner(&self.ctx, message, Some(draft.id()), self.budget, None).await?;
        Ok((draft.id(), reply))
    }

    /// The tool context.
    #[must_use]
    pub const fn context(&self) -> &ToolContext {
        &self.ctx
    }
}
