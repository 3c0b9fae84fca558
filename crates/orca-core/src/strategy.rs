//! proptest strategies that generate valid plans and executions, for property-testing code
//! built on orca (enable the `proptest` feature).
//!
//! Plans come from [`plan_content`], [`draft_plan`], [`proposal_plan`], [`approved_plan`] and
//! [`plan`] (any stage). Executions and tasks come from [`run`], which walks the real
//! transitions from a fresh execution, so every generated state is one orca can reach:
//!
//! ```
//! use orca_core::strategy;
//! use proptest::prelude::*;
//!
//! proptest!(|(run in strategy::run(4))| {
//!     // Code under test would load `run.execution` and `run.tasks` here.
//!     prop_assert_eq!(run.tasks.len(), run.plan.content().steps.len());
//! });
//! ```

use std::collections::BTreeSet;

use proptest::prelude::*;
use time::OffsetDateTime;

use crate::context::{ContextLimits, build_context};
use crate::execution::{Execution, Holder, PendingExecution, Task, TaskStatus};
use crate::hitl::{Decision, DecisionRequest};
use crate::id::{AgentId, ExecutionId, PlanId, StepId};
use crate::plan::{ApprovedPlan, DraftPlan, Plan, PlanContent, ProposalPlan, Step};
use crate::results::{ErrorCode, TaskFailure, TaskInterruption, TaskSuccess};
use crate::schedule;

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
                checks: Vec::new(),
                isolation: None,
                budget: None,
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

/// A plan, its execution and the execution's tasks, in a state reached by legal transitions.
#[derive(Debug, Clone)]
pub struct Run {
    /// The approved plan the execution runs.
    pub plan: ApprovedPlan,
    /// The execution, in any stage.
    pub execution: Execution,
    /// One task per step, in plan order.
    pub tasks: Vec<Task>,
}

/// One step of the walk that [`run`] takes through the transitions.
#[derive(Debug, Clone)]
enum Move {
    /// Start a ready task.
    Claim(prop::sample::Index),
    /// End a running task: 0 completes, 1 fails, 2 interrupts, 3 abandons.
    Finish(prop::sample::Index, u8),
    /// Retry a failed task, with or without guidance.
    Retry(prop::sample::Index, bool),
    /// Give up on the failed tasks: skip every pending task downstream of them.
    SkipDownstream,
}

/// How the walk of [`run`] leaves the execution.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Pending,
    StoppedBeforeStart,
    Running,
    WaitingForDecision,
    Answered,
    CompletedIfPossible,
    Failed,
    Stopped,
}

fn holder() -> Holder {
    Holder {
        pid: 1,
        host: "host".to_owned(),
        token: "token".to_owned(),
    }
}

fn pick(indices: &[usize], index: &prop::sample::Index) -> Option<usize> {
    (!indices.is_empty()).then(|| indices[index.index(indices.len())])
}

fn with_status(tasks: &[Task], status: TaskStatus) -> Vec<usize> {
    (0..tasks.len())
        .filter(|&i| tasks[i].status() == status)
        .collect()
}

fn apply_move(plan: &ApprovedPlan, tasks: &mut [Task], step: &Move) {
    let at = epoch();
    let limits = ContextLimits::default();
    let context =
        |tasks: &[Task], i: usize| build_context(plan.id(), plan.content(), i, tasks, &limits);
    match step {
        Move::Claim(pick_index) => {
            if let Some(i) = pick(&schedule::ready(plan.content(), tasks), pick_index)
                && let (Task::Pending(task), Some(ctx)) = (tasks[i].clone(), context(tasks, i))
            {
                tasks[i] = task.start(ctx, holder(), at).into();
            }
        }
        Move::Finish(pick_index, how) => {
            if let Some(i) = pick(&with_status(tasks, TaskStatus::Running), pick_index)
                && let Task::Running(task) = tasks[i].clone()
            {
                tasks[i] = match how % 4 {
                    0 => {
                        let mut success = TaskSuccess::with_summary(format!("did step {i}"));
                        success.relevant_files = vec![format!("src/{i}.rs")];
                        success.key_findings = vec![format!("finding {i}")];
                        task.complete(success, at).into()
                    }
                    1 => task
                        .fail(
                            TaskFailure::new(ErrorCode::AgentError, format!("step {i} broke")),
                            at,
                        )
                        .into(),
                    2 => task
                        .interrupt(
                            TaskInterruption {
                                reason: "unclear".to_owned(),
                                question: Some(format!("what should step {i} do?")),
                            },
                            at,
                        )
                        .into(),
                    _ => task.abandon("the holder is gone", at).into(),
                };
            }
        }
        Move::Retry(pick_index, guided) => {
            if let Some(i) = pick(&with_status(tasks, TaskStatus::Failed), pick_index)
                && let (Task::Failed(task), Some(ctx)) = (tasks[i].clone(), context(tasks, i))
            {
                let guidance = guided.then(|| format!("try step {i} differently"));
                tasks[i] = task.retry(guidance, ctx, holder(), at).into();
            }
        }
        Move::SkipDownstream => {
            let abandoned: BTreeSet<StepId> = with_status(tasks, TaskStatus::Failed)
                .into_iter()
                .map(|i| tasks[i].step_id().clone())
                .collect();
            for i in schedule::to_skip(plan.content(), tasks, &abandoned) {
                if let Task::Pending(task) = tasks[i].clone() {
                    tasks[i] = task.skip("an upstream step was abandoned", at).into();
                }
            }
        }
    }
}

fn finish_run(plan: ApprovedPlan, mut tasks: Vec<Task>, moves: &[Move], ending: Ending) -> Run {
    let at = epoch();
    let (pending, initial) = PendingExecution::new(ExecutionId::new(), &plan, at);
    let execution: Execution = match ending {
        Ending::Pending => pending.into(),
        Ending::StoppedBeforeStart => pending.stop("tester", None, at).into(),
        _ => {
            for step in moves {
                apply_move(&plan, &mut tasks, step);
            }
            let running = pending.start(at);
            let failed_step = tasks
                .iter()
                .find(|t| t.status() == TaskStatus::Failed)
                .map(|t| t.step_id().clone());
            match (ending, failed_step) {
                (Ending::WaitingForDecision | Ending::Answered, Some(step_id)) => {
                    let request = DecisionRequest::Deviation {
                        step_id,
                        attempts: 1,
                        failure: TaskFailure::new(ErrorCode::AgentError, "it broke"),
                    };
                    let waiting = running
                        .await_decision(request, at)
                        .unwrap_or_else(|refused| *refused.state);
                    if matches!(ending, Ending::Answered) {
                        waiting
                            .answer_decision(Decision::Retry { guidance: None }, "tester", at)
                            .unwrap_or_else(|refused| *refused.state)
                            .into()
                    } else {
                        waiting.into()
                    }
                }
                (Ending::CompletedIfPossible, _) => match running.complete(&tasks, at) {
                    Ok(done) => done.into(),
                    Err(refused) => (*refused.state).into(),
                },
                (Ending::Failed, _) => running.fail("a step failed", None, at).into(),
                (Ending::Stopped, _) => {
                    running.stop("tester", Some("enough".to_owned()), at).into()
                }
                _ => running.into(),
            }
        }
    };
    if matches!(ending, Ending::Pending | Ending::StoppedBeforeStart) {
        tasks = initial;
    }
    Run {
        plan,
        execution,
        tasks,
    }
}

/// A [`Run`] of an approved plan with 1..=`max_steps` steps, reached by a random walk through
/// the real transitions: tasks claimed when ready, completed, failed, interrupted, abandoned,
/// retried or skipped; the execution pending, running (possibly waiting for a decision, or
/// with one answered), completed (when every task completed), failed or stopped.
pub fn run(max_steps: usize) -> impl Strategy<Value = Run> {
    let moves = prop::collection::vec(
        prop_oneof![
            3 => any::<prop::sample::Index>().prop_map(Move::Claim),
            3 => (any::<prop::sample::Index>(), 0u8..4).prop_map(|(i, how)| Move::Finish(i, how)),
            1 => (any::<prop::sample::Index>(), prop::bool::ANY).prop_map(|(i, g)| Move::Retry(i, g)),
            1 => Just(Move::SkipDownstream),
        ],
        0..max_steps.max(1) * 4,
    );
    let ending = prop::sample::select(vec![
        Ending::Pending,
        Ending::StoppedBeforeStart,
        Ending::Running,
        Ending::WaitingForDecision,
        Ending::Answered,
        Ending::CompletedIfPossible,
        Ending::Failed,
        Ending::Stopped,
    ]);
    (approved_plan(max_steps), moves, ending).prop_map(|(plan, moves, ending)| {
        let (_, tasks) = PendingExecution::new(ExecutionId::new(), &plan, epoch());
        finish_run(plan, tasks, &moves, ending)
    })
}

/// An execution in any stage (see [`run`]).
pub fn execution(max_steps: usize) -> impl Strategy<Value = Execution> {
    run(max_steps).prop_map(|r| r.execution)
}

/// A task in any status (see [`run`]).
pub fn task(max_steps: usize) -> impl Strategy<Value = Task> {
    run(max_steps).prop_flat_map(|r| prop::sample::select(r.tasks))
}

/// A plan in any stage: a draft (new, or sent back with feedback), a proposal, approved or
/// rejected.
pub fn plan(max_steps: usize) -> impl Strategy<Value = Plan> {
    (proposal_plan(max_steps), 0u8..5).prop_map(|(proposal, stage)| match stage {
        0 => Plan::Draft(DraftPlan::with_content(
            proposal.id(),
            epoch(),
            proposal.content().clone(),
        )),
        1 => Plan::Draft(proposal.request_changes("tester", "split the first step", epoch())),
        2 => Plan::Proposal(proposal),
        3 => Plan::Approved(proposal.approve("tester", Some("ok".to_owned()), epoch())),
        _ => Plan::Rejected(proposal.reject("tester", None, epoch())),
    })
}
