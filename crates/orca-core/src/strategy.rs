//! proptest strategies that generate valid plans and executions, for property-testing code
//! built on orca (enable the `proptest` feature).

use std::collections::BTreeSet;

use proptest::prelude::*;
use time::OffsetDateTime;

use crate::id::{AgentId, PlanId, StepId};
use crate::plan::{ApprovedPlan, DraftPlan, PlanContent, ProposalPlan, Step};

/// The agents generated plans use: `shell` and `coder`.
#[must_use]
pub fn known_agents() -> BTreeSet<AgentId> {
    ["shell", "coder"]
        .into_iter()
        .filter_map(|a| AgentId::parse(a).ok())
        .collect()
}

/// A fixed instant, so generated documents are reproducible.
#[must_use]
pub fn epoch() -> OffsetDateTime {
    OffsetDateTime::UNIX_EPOCH
}

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 ,.]{1,24}".prop_map(|s| format!("x{s}"))
}

/// How a generated step names its dependencies.
#[derive(Debug, Clone)]
enum DepShape {
    Previous,
    Root,
    Earlier(Vec<prop::sample::Index>),
}

/// Valid plan content with 1..=`max_steps` steps: sequential defaults, roots and DAG edges to
/// earlier steps, shared locks, and `shell` steps with commands.
pub fn plan_content(max_steps: usize) -> impl Strategy<Value = PlanContent> {
    let step = (
        prop::bool::ANY,
        prop_oneof![
            Just(DepShape::Previous),
            Just(DepShape::Root),
            prop::collection::vec(any::<prop::sample::Index>(), 1..3).prop_map(DepShape::Earlier),
        ],
        prop::collection::vec(prop::sample::select(vec!["db", "net", "fs"]), 0..2),
        prop::option::of(1u32..4),
    );
    (
        text(),
        prop::collection::vec(step, 1..=max_steps.max(1)),
        prop::collection::vec(text(), 1..3),
        prop::collection::vec(text(), 1..3),
        prop::collection::vec(text(), 1..3),
    )
        .prop_map(|(goal, shapes, assumptions, risks, verification)| {
            let mut steps: Vec<Step> = Vec::with_capacity(shapes.len());
            for (i, (shell, dep, locks, max_attempts)) in shapes.into_iter().enumerate() {
                let id = StepId::parse(&format!("s{i}")).unwrap_or_else(|_| unreachable!());
                let agent = if shell {
                    AgentId::shell()
                } else {
                    AgentId::parse("coder").unwrap_or_else(|_| unreachable!())
                };
                let mut step = Step::new(id, agent, format!("step {i}"));
                if shell {
                    step.command = Some(format!("echo {i}"));
                }
                step.depends_on = match dep {
                    DepShape::Previous => None,
                    DepShape::Root => Some(Vec::new()),
                    DepShape::Earlier(picks) if i > 0 => Some(
                        picks
                            .iter()
                            .map(|p| steps[p.index(i)].id.clone())
                            .collect::<BTreeSet<_>>()
                            .into_iter()
                            .collect(),
                    ),
                    DepShape::Earlier(_) => Some(Vec::new()),
                };
                let mut locks: Vec<String> = locks.into_iter().map(str::to_owned).collect();
                locks.dedup();
                step.locks = locks;
                step.max_attempts = max_attempts;
                steps.push(step);
            }
            PlanContent {
                goal,
                summary: None,
                steps,
                assumptions,
                risks,
                verification,
            }
        })
}

/// A valid draft (it submits without problems against [`known_agents`]).
pub fn draft_plan(max_steps: usize) -> impl Strategy<Value = DraftPlan> {
    plan_content(max_steps).prop_map(|c| DraftPlan::with_content(PlanId::new(), epoch(), c))
}

/// A valid proposal.
pub fn proposal_plan(max_steps: usize) -> impl Strategy<Value = ProposalPlan> {
    draft_plan(max_steps).prop_filter_map("generated drafts are valid", |d| {
        d.submit(&known_agents(), epoch()).ok()
    })
}

/// An approved plan.
pub fn approved_plan(max_steps: usize) -> impl Strategy<Value = ApprovedPlan> {
    proposal_plan(max_steps).prop_map(|p| p.approve("tester", None, epoch()))
}
