//! Budgets next to an estimate, for `plan show` and the approval prompt (ADR 0017).
//!
//! The estimate of a step is, when earlier executions of the same plan recorded usage, their
//! average per step; otherwise its prompt size (description, command and the plan's goal, at
//! about four characters a token, plus a fixed allowance for the system prompt and tools) priced
//! at its model's list price per turn. A shell step spends no tokens. Only shown when the plan
//! carries a budget, so plans without one print as before.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use orca_core::{AgentInfo, Budget, Plan, PlanContent, Step, StepId, Usage};
use orca_llm::PriceTable;
use orca_services::Orca;
use orca_services::execution::ExecutionService;
use serde_json::{Value, json};

/// Tokens of system prompt and tool schemas a model step sends on top of its own text.
const PROMPT_ALLOWANCE: u64 = 2_000;

/// What a step is expected to spend, and where the figure comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Estimate {
    pub tokens: u64,
    pub cost_micro_usd: u64,
    pub source: &'static str,
}

fn prompt_estimate(content: &PlanContent, step: &Step, agent: Option<&AgentInfo>) -> Estimate {
    if agent.is_none_or(|a| a.backend == "shell") {
        return Estimate {
            tokens: 0,
            cost_micro_usd: 0,
            source: "no model",
        };
    }
    let chars =
        step.description.len() + step.command.as_ref().map_or(0, String::len) + content.goal.len();
    let tokens = u64::try_from(chars / 4).unwrap_or(u64::MAX) + PROMPT_ALLOWANCE;
    let usage = Usage {
        input_tokens: tokens,
        ..Usage::default()
    };
    let price = agent
        .and_then(|a| a.model.as_deref())
        .and_then(|m| PriceTable::shipped().price(m));
    Estimate {
        tokens,
        cost_micro_usd: price.map_or(0, |p| p.cost(&usage)),
        source: if price.is_some() {
            "prompt size, one turn, list price"
        } else {
            "prompt size, one turn; model not priced"
        },
    }
}

/// The average recorded usage per step over earlier executions of the plan.
async fn recorded(orca: &Orca, plan: &Plan) -> BTreeMap<StepId, Usage> {
    let mut sums: BTreeMap<StepId, (Usage, u64)> = BTreeMap::new();
    let Ok(listing) = orca.executions().list(Some(plan.id())).await else {
        return BTreeMap::new();
    };
    for item in &listing.items {
        let log = ExecutionService::log(plan.id(), item.execution_id);
        let Ok(entries) = orca.tools().store.entries(log).await else {
            continue;
        };
        let mut per_run: BTreeMap<StepId, Usage> = BTreeMap::new();
        for e in entries {
            let (Some(step), Some(usage)) = (e.data.get("step_id"), e.data.get("usage")) else {
                continue;
            };
            let (Ok(step), Ok(usage)) = (
                serde_json::from_value::<StepId>(step.clone()),
                serde_json::from_value::<Usage>(usage.clone()),
            ) else {
                continue;
            };
            per_run.entry(step).or_default().add(&usage);
        }
        for (step, usage) in per_run {
            let slot = sums.entry(step).or_default();
            slot.0.add(&usage);
            slot.1 += 1;
        }
    }
    sums.into_iter()
        .map(|(step, (u, n))| {
            let n = n.max(1);
            let avg = Usage {
                input_tokens: u.total_tokens() / n,
                cost_micro_usd: u.cost_micro_usd / n,
                ..Usage::default()
            };
            (step, avg)
        })
        .collect()
}

/// Each step's estimate, and the plan's (their sum).
pub(crate) async fn estimates(orca: &Orca, plan: &Plan) -> (Vec<(StepId, Estimate)>, Estimate) {
    let agents = orca.tools().agents.agents();
    let history = recorded(orca, plan).await;
    let content = plan.content();
    let mut total = Estimate {
        tokens: 0,
        cost_micro_usd: 0,
        source: "sum of the steps",
    };
    let steps = content
        .steps
        .iter()
        .map(|s| {
            let e = history.get(&s.id).map_or_else(
                || prompt_estimate(content, s, agents.iter().find(|a| a.id == s.agent)),
                |u| Estimate {
                    tokens: u.total_tokens(),
                    cost_micro_usd: u.cost_micro_usd,
                    source: "recorded usage of earlier runs",
                },
            );
            total.tokens = total.tokens.saturating_add(e.tokens);
            total.cost_micro_usd = total.cost_micro_usd.saturating_add(e.cost_micro_usd);
            (s.id.clone(), e)
        })
        .collect();
    (steps, total)
}

fn has_budget(content: &PlanContent) -> bool {
    content.budget.is_some() || content.steps.iter().any(|s| s.budget.is_some())
}

fn usd(micro: u64) -> String {
    format!("${}.{:06}", micro / 1_000_000, micro % 1_000_000)
}

fn budget_text(b: Option<&Budget>) -> String {
    let Some(b) = b.filter(|b| !b.is_unlimited()) else {
        return "no limit".to_owned();
    };
    let mut parts = Vec::new();
    if let Some(t) = b.max_tokens {
        parts.push(format!("tokens ≤ {t}"));
    }
    if let Some(c) = b.max_cost_micro_usd {
        parts.push(format!("cost ≤ {}", usd(c)));
    }
    if let Some(t) = b.max_turns {
        parts.push(format!("turns ≤ {t}"));
    }
    if let Some(s) = b.max_wall_secs {
        parts.push(format!("wall ≤ {s}s"));
    }
    parts.join(", ")
}

fn estimate_text(e: &Estimate) -> String {
    format!(
        "estimate ~{} tokens, ~{} ({})",
        e.tokens,
        usd(e.cost_micro_usd),
        e.source
    )
}

/// The budgets section of a plan (empty when it has none).
pub(crate) async fn text(orca: &Orca, plan: &Plan) -> String {
    let content = plan.content();
    if !has_budget(content) {
        return String::new();
    }
    let (steps, total) = estimates(orca, plan).await;
    let mut out = String::from("Budgets (approved with the plan; exceeding one stops the step):\n");
    let _ = writeln!(
        out,
        "  plan: {}; {}",
        budget_text(content.budget.as_ref()),
        estimate_text(&total)
    );
    for (s, (id, e)) in content.steps.iter().zip(&steps) {
        let _ = writeln!(
            out,
            "  {id}: {}; {}",
            budget_text(s.budget.as_ref()),
            estimate_text(e)
        );
    }
    out
}

/// The same as JSON (`null` when the plan has no budget).
pub(crate) async fn json(orca: &Orca, plan: &Plan) -> Value {
    let content = plan.content();
    if !has_budget(content) {
        return Value::Null;
    }
    let (steps, total) = estimates(orca, plan).await;
    let one = |b: Option<&Budget>, e: &Estimate| json!({ "budget": b, "estimate": { "tokens": e.tokens, "cost_micro_usd": e.cost_micro_usd, "source": e.source } });
    let steps: Vec<Value> = content
        .steps
        .iter()
        .zip(&steps)
        .map(|(s, (id, e))| {
            let mut v = one(s.budget.as_ref(), e);
            v["step_id"] = json!(id);
            v
        })
        .collect();
    json!({ "plan": one(content.budget.as_ref(), &total), "steps": steps })
}
