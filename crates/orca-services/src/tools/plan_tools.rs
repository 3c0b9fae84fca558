//! The handlers of the plan and execution tools: reading plans and executions, building and
//! submitting a draft. Nothing here approves a plan or starts an execution.

use orca_core::{ExecutionId, PlanId, Step, StepId, StepPatch, ToolError};
use serde_json::{Value, json};

use super::args::{arg, opt_arg, store_err, tool_err};
use super::gate::Gate;
use super::table::HandlerFuture;
use crate::planning::DraftEdit;

pub(super) fn plans_list<'a>(g: &'a Gate, _args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move {
        let listing = g.ctx.planning.list().await.map_err(tool_err)?;
        Ok(json!(listing.items))
    })
}

pub(super) fn plans_get<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move {
        let id: PlanId = arg(args, "plan_id")?;
        Ok(json!(g.ctx.planning.plan(id).await.map_err(tool_err)?))
    })
}

pub(super) fn create_draft<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move {
        let p = &g.ctx.planning;
        let goal: String = arg(args, "goal")?;
        let summary: Option<String> = opt_arg(args, "summary")?;
        let mut draft = p.create_draft(Some(goal), None).await.map_err(tool_err)?;
        if summary.is_some() {
            draft = p
                .edit(draft.id(), DraftEdit::SetSummary(summary))
                .await
                .map_err(tool_err)?;
        }
        let mut answer = json!({ "plan_id": draft.id(), "stage": "draft" });
        if let (Some(a), Value::Object(state)) =
            (answer.as_object_mut(), draft_state(g, draft.content()))
        {
            a.extend(state.into_iter().filter(|(k, _)| k != "ok"));
        }
        Ok(answer)
    })
}

pub(super) fn set_goal<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move {
        let p = &g.ctx.planning;
        let id: PlanId = arg(args, "plan_id")?;
        let mut draft = p
            .edit(id, DraftEdit::SetGoal(arg(args, "goal")?))
            .await
            .map_err(tool_err)?;
        if let Some(summary) = opt_arg::<String>(args, "summary")? {
            draft = p
                .edit(id, DraftEdit::SetSummary(Some(summary)))
                .await
                .map_err(tool_err)?;
        }
        Ok(draft_state(g, draft.content()))
    })
}

/// Applies one edit to the draft `plan_id` names; answers with the draft's state after it.
async fn edit(g: &Gate, args: &Value, edit: DraftEdit) -> Result<Value, ToolError> {
    let id: PlanId = arg(args, "plan_id")?;
    let draft = g.ctx.planning.edit(id, edit).await.map_err(tool_err)?;
    Ok(draft_state(g, draft.content()))
}

/// What an edit answers: done, how many steps the draft has, and what would still refuse its
/// submission — or that it is ready. A small model that reads only `ok` loses track of where
/// its draft stands (seen: the same goal set and the same step added over and over).
fn draft_state(g: &Gate, content: &orca_core::PlanContent) -> Value {
    let found = content.validate(g.ctx.planning.known_agents());
    let problems: Vec<String> = found.iter().map(ToString::to_string).collect();
    match found.first() {
        None => json!({ "ok": true, "steps": content.steps.len(),
            "ready": format!("the draft can be submitted: call `{}` when it is complete",
                super::table::names::PLAN_SUBMIT) }),
        Some(first) => {
            let mut state =
                json!({ "ok": true, "steps": content.steps.len(), "before_submitting": problems });
            if let Some(next) = next_tool(first) {
                state["next"] = json!(format!("call `{next}`"));
            }
            state
        }
    }
}

/// The tool that fixes `problem`, where one tool does.
fn next_tool(problem: &orca_core::graph::Problem) -> Option<&'static str> {
    use super::table::names;
    use orca_core::graph::Problem;
    match problem {
        Problem::EmptyGoal => Some(names::PLAN_SET_GOAL),
        Problem::NoSteps => Some(names::PLAN_ADD_STEP),
        Problem::EmptyList { field } => match field.as_str() {
            "assumptions" => Some(names::PLAN_SET_ASSUMPTIONS),
            "risks" => Some(names::PLAN_SET_RISKS),
            "verification" => Some(names::PLAN_SET_VERIFICATION),
            _ => None,
        },
        _ => None,
    }
}

pub(super) fn set_assumptions<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move { edit(g, args, DraftEdit::SetAssumptions(arg(args, "items")?)).await })
}

pub(super) fn set_risks<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move { edit(g, args, DraftEdit::SetRisks(arg(args, "items")?)).await })
}

pub(super) fn set_verification<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move { edit(g, args, DraftEdit::SetVerification(arg(args, "items")?)).await })
}

pub(super) fn set_checks<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move { edit(g, args, DraftEdit::SetChecks(arg(args, "checks")?)).await })
}

/// `step` without its id, as compared with the draft's steps.
fn without_id(step: &Step) -> Value {
    let mut v = json!(step);
    if let Some(o) = v.as_object_mut() {
        o.remove("id");
    }
    v
}

/// The least budget the planner may give a model step, field by field: a turn sends the
/// agent's prompt and tools (over 1,000 tokens for the built-in coder), a step reads, edits,
/// checks and submits (several turns), a small local model takes a minute a turn, and a turn
/// of a paid model costs cents. A human writing a plan file may set less; small planners filled
/// these fields with 100 tokens, 1 turn, 60 seconds and 10 micro-dollars — each stopped its step
/// before it could work.
const MIN_STEP_TOKENS: u64 = 10_000;
const MIN_STEP_TURNS: u32 = 5;
const MIN_STEP_WALL_SECS: u64 = 300;
const MIN_STEP_COST_MICRO_USD: u64 = 10_000;

/// A model step's budget too small to let it work, refused with the fix — every such field at
/// once (named one per refusal, a small planner spent a turn of a minute on each).
fn budget_too_small(step: &Step) -> Result<(), ToolError> {
    let Some(budget) = step.budget.as_ref() else {
        return Ok(());
    };
    if step.agent.as_str() == orca_core::AgentId::SHELL {
        return Ok(());
    }
    let too_small: Vec<String> = [
        ("max_tokens", budget.max_tokens, MIN_STEP_TOKENS, "tokens"),
        (
            "max_turns",
            budget.max_turns.map(u64::from),
            u64::from(MIN_STEP_TURNS),
            "turns",
        ),
        (
            "max_wall_secs",
            budget.max_wall_secs,
            MIN_STEP_WALL_SECS,
            "seconds",
        ),
        (
            "max_cost_micro_usd",
            budget.max_cost_micro_usd,
            MIN_STEP_COST_MICRO_USD,
            "micro-dollars",
        ),
    ]
    .into_iter()
    .filter_map(|(field, value, least, unit)| {
        value
            .filter(|v| *v < least)
            .map(|v| format!("`budget.{field}` {v} (at least {least} {unit})"))
    })
    .collect();
    if too_small.is_empty() {
        return Ok(());
    }
    Err(ToolError::new(format!(
        "{} would stop step `{}` before it can work (a model step reads, edits, checks and \
         submits over several turns, each sending its prompt and tools): omit `budget` unless \
         the user stated a limit, or give at least what is said",
        too_small.join(", "),
        step.id
    )))
}

pub(super) fn add_step<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move {
        let id: PlanId = arg(args, "plan_id")?;
        let step: Step = arg(args, "step")?;
        let position: Option<usize> = opt_arg(args, "position")?;
        budget_too_small(&step)?;
        // A small model adds the same step again and again (each under a new id, so no call
        // repeats another): the same work twice is refused, with what to do instead.
        let plan = g.ctx.planning.plan(id).await.map_err(tool_err)?;
        let new = without_id(&step);
        let steps = &plan.content().steps;
        if let Some(same) = steps.iter().find(|s| without_id(s) == new) {
            return Err(ToolError::new(format!(
                "step `{}` already does exactly this (the same agent, description and command); \
                 the draft has {} step(s). Add a step that does something else, change a step \
                 with `{}`, or submit the draft with `{}` once it is complete",
                same.id,
                steps.len(),
                super::table::names::PLAN_UPDATE_STEP,
                super::table::names::PLAN_SUBMIT,
            )));
        }
        let draft = g
            .ctx
            .planning
            .edit(
                id,
                DraftEdit::AddStep {
                    step: Box::new(step),
                    position,
                },
            )
            .await
            .map_err(tool_err)?;
        Ok(draft_state(g, draft.content()))
    })
}

pub(super) fn update_step<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move {
        let step: StepId = arg(args, "step_id")?;
        let patch: StepPatch = arg(args, "changes")?;
        if let Some(Some(budget)) = &patch.budget {
            // The step as it would be: its agent (changed or not) and the new budget.
            let id: PlanId = arg(args, "plan_id")?;
            let plan = g.ctx.planning.plan(id).await.map_err(tool_err)?;
            if let Some(current) = plan.content().steps.iter().find(|s| s.id == step) {
                let mut changed = current.clone();
                if let Some(agent) = &patch.agent {
                    changed.agent = agent.clone();
                }
                changed.budget = Some(*budget);
                budget_too_small(&changed)?;
            }
        }
        edit(
            g,
            args,
            DraftEdit::UpdateStep {
                id: step,
                patch: Box::new(patch),
            },
        )
        .await
    })
}

pub(super) fn remove_step<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move { edit(g, args, DraftEdit::RemoveStep(arg(args, "step_id")?)).await })
}

pub(super) fn submit<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move {
        let id: PlanId = arg(args, "plan_id")?;
        let proposal = g.ctx.planning.submit(id).await.map_err(tool_err)?;
        Ok(json!({ "plan_id": proposal.id(), "stage": "proposal",
            "note": "submitted: the human will now approve, request changes or reject it" }))
    })
}

pub(super) fn executions_list<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move {
        let plan: Option<PlanId> = opt_arg(args, "plan_id")?;
        let listing = g.ctx.store.list_executions(plan).await.map_err(store_err)?;
        Ok(json!(listing.items))
    })
}

pub(super) fn execution_get<'a>(g: &'a Gate, args: &'a Value) -> HandlerFuture<'a> {
    Box::pin(async move {
        let id: ExecutionId = arg(args, "execution_id")?;
        let snap = g.ctx.store.execution(id).await.map_err(store_err)?;
        let tasks: Vec<Value> = snap
            .tasks
            .iter()
            .map(|t| {
                json!({ "step_id": t.value.step_id(), "status": t.value.status(),
                "summary": t.value.success().map(|s| s.summary.clone()) })
            })
            .collect();
        Ok(json!({ "execution_id": id, "stage": snap.execution.value.stage(), "tasks": tasks }))
    })
}
