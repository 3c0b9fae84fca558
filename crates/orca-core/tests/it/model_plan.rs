//! Model-based test of the plan lifecycle: random sequences of builder operations (valid and
//! invalid), submissions, approvals, rejections and change requests, run against a reference
//! model, with every invariant checked after every transition.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;

use orca_core::*;
use proptest::prelude::*;
use proptest::strategy::Union;
use proptest::test_runner::FileFailurePersistence;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use sha2::Digest as _;
use time::OffsetDateTime;

const IDS: &[&str] = &["a", "b", "c", "d", "e"];

fn sid(s: &str) -> StepId {
    StepId::parse(s).unwrap()
}

fn known_agents() -> BTreeSet<AgentId> {
    ["shell", "coder"]
        .into_iter()
        .map(|a| AgentId::parse(a).unwrap())
        .collect()
}

fn now() -> OffsetDateTime {
    OffsetDateTime::UNIX_EPOCH
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Draft,
    Proposal,
    Approved,
    Rejected,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelStep {
    id: &'static str,
    agent: &'static str,
    command: Option<&'static str>,
    deps: Option<Vec<&'static str>>,
}

/// What the model expects the last transition to have returned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    Ok,
    Builder(BuilderError),
    Problems(Vec<Problem>),
}

#[derive(Debug, Clone)]
struct Model {
    stage: Stage,
    goal: &'static str,
    lists: [Vec<&'static str>; 3],
    steps: Vec<ModelStep>,
    submits: usize,
    change_requests: usize,
    last: Expect,
}

#[derive(Debug, Clone)]
enum Transition {
    SetGoal(&'static str),
    SetList(usize, Vec<&'static str>),
    AddStep(ModelStep, Option<usize>),
    UpdateStep(
        &'static str,
        Option<&'static str>,
        Option<Option<&'static str>>,
        Option<Option<Vec<&'static str>>>,
    ),
    RemoveStep(&'static str),
    Submit,
    Approve,
    Reject,
    RequestChanges,
    RoundTrip,
}

impl Model {
    fn position(&self, id: &str) -> Option<usize> {
        self.steps.iter().position(|s| s.id == id)
    }

    /// The dependency indices of every step, computed independently of `orca_core::graph`.
    fn deps(&self) -> Vec<Vec<usize>> {
        self.steps
            .iter()
            .enumerate()
            .map(|(i, s)| match &s.deps {
                None => i.checked_sub(1).into_iter().collect(),
                Some(names) => {
                    let mut out = Vec::new();
                    for n in names {
                        if let Some(j) = self.position(n)
                            && !out.contains(&j)
                        {
                            out.push(j);
                        }
                    }
                    out
                }
            })
            .collect()
    }

    /// Every problem of the content (the builder never allows duplicate ids or empty
    /// descriptions, so those cannot occur).
    fn problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        if self.goal.trim().is_empty() {
            out.push(Problem::EmptyGoal);
        }
        if self.steps.is_empty() {
            out.push(Problem::NoSteps);
        }
        for (field, list) in ["assumptions", "risks", "verification"]
            .into_iter()
            .zip(&self.lists)
        {
            if list.iter().all(|s| s.trim().is_empty()) {
                out.push(Problem::EmptyList {
                    field: field.into(),
                });
            }
        }
        for s in &self.steps {
            let step = sid(s.id);
            if s.agent == "wizard" {
                out.push(Problem::UnknownAgent {
                    step: step.clone(),
                    agent: AgentId::parse(s.agent).unwrap(),
                    did_you_mean: None,
                });
            }
            if s.agent == "shell" && s.command.is_none_or(|c| c.trim().is_empty()) {
                out.push(Problem::MissingCommand { step: step.clone() });
            }
            let mut seen = BTreeSet::new();
            for d in s.deps.iter().flatten() {
                if self.position(d).is_none() && seen.insert(*d) {
                    out.push(Problem::UnknownDependency {
                        step: step.clone(),
                        dependency: sid(d),
                    });
                }
            }
        }
        // Cycles: strongly connected components by mutual reachability (transitive closure).
        let n = self.steps.len();
        let mut reach = vec![vec![false; n]; n];
        for (i, ds) in self.deps().into_iter().enumerate() {
            for d in ds {
                reach[i][d] = true;
            }
        }
        for k in 0..n {
            for i in 0..n {
                for j in 0..n {
                    if reach[i][k] && reach[k][j] {
                        reach[i][j] = true;
                    }
                }
            }
        }
        let mut placed = vec![false; n];
        for i in 0..n {
            if placed[i] || !reach[i][i] {
                continue;
            }
            let component: Vec<usize> = (0..n)
                .filter(|&j| j == i || (reach[i][j] && reach[j][i]))
                .collect();
            for &j in &component {
                placed[j] = true;
            }
            out.push(Problem::Cycle {
                steps: component
                    .into_iter()
                    .map(|j| sid(self.steps[j].id))
                    .collect(),
            });
        }
        out.sort();
        out
    }
}

fn text() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "  ", "ship it", "x", "y"])
}

fn agent() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["shell", "coder", "coder", "coder", "wizard"])
}

fn id() -> impl Strategy<Value = &'static str> {
    prop::sample::select(IDS.to_vec())
}

fn deps() -> impl Strategy<Value = Option<Vec<&'static str>>> {
    prop::option::weighted(0.3, prop::collection::vec(id(), 0..3))
}

fn command() -> impl Strategy<Value = Option<&'static str>> {
    prop::option::weighted(0.8, prop::sample::select(vec!["true", "true", " "]))
}

struct PlanMachine;

impl ReferenceStateMachine for PlanMachine {
    type State = Model;
    type Transition = Transition;

    fn init_state() -> BoxedStrategy<Model> {
        // Start from an empty draft, or from one whose metadata was already set (so that
        // submissions succeed often enough to exercise the later stages).
        (
            text(),
            prop::collection::vec(prop::collection::vec(text(), 0..3), 3),
        )
            .prop_map(|(goal, lists)| Model {
                stage: Stage::Draft,
                goal,
                lists: [lists[0].clone(), lists[1].clone(), lists[2].clone()],
                steps: Vec::new(),
                submits: 0,
                change_requests: 0,
                last: Expect::Ok,
            })
            .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Transition> {
        match state.stage {
            Stage::Draft => {
                let step =
                    (id(), agent(), command(), deps()).prop_map(|(id, agent, command, deps)| {
                        ModelStep {
                            id,
                            agent,
                            command,
                            deps,
                        }
                    });
                Union::new_weighted(vec![
                    (1, text().prop_map(Transition::SetGoal).boxed()),
                    (
                        2,
                        (0usize..3, prop::collection::vec(text(), 0..3))
                            .prop_map(|(f, l)| Transition::SetList(f, l))
                            .boxed(),
                    ),
                    (
                        5,
                        (step, prop::option::of(0usize..7))
                            .prop_map(|(s, p)| Transition::AddStep(s, p))
                            .boxed(),
                    ),
                    (
                        2,
                        (
                            id(),
                            prop::option::of(agent()),
                            prop::option::of(command()),
                            prop::option::of(deps()),
                        )
                            .prop_map(|(i, a, c, d)| Transition::UpdateStep(i, a, c, d))
                            .boxed(),
                    ),
                    (1, id().prop_map(Transition::RemoveStep).boxed()),
                    (3, Just(Transition::Submit).boxed()),
                    (1, Just(Transition::RoundTrip).boxed()),
                ])
                .boxed()
            }
            Stage::Proposal => prop_oneof![
                3 => Just(Transition::Approve),
                1 => Just(Transition::Reject),
                4 => Just(Transition::RequestChanges),
                1 => Just(Transition::RoundTrip),
            ]
            .boxed(),
            // Terminal: no transition exists on these types; only reading back is possible.
            Stage::Approved | Stage::Rejected => Just(Transition::RoundTrip).boxed(),
        }
    }

    fn preconditions(state: &Model, transition: &Transition) -> bool {
        match transition {
            Transition::RoundTrip => true,
            Transition::Approve | Transition::Reject | Transition::RequestChanges => {
                state.stage == Stage::Proposal
            }
            _ => state.stage == Stage::Draft,
        }
    }

    fn apply(mut state: Model, transition: &Transition) -> Model {
        state.last = Expect::Ok;
        match transition {
            Transition::SetGoal(g) => state.goal = g,
            Transition::SetList(f, l) => state.lists[*f].clone_from(l),
            Transition::AddStep(step, position) => {
                let len = state.steps.len();
                if state.position(step.id).is_some() {
                    state.last = Expect::Builder(BuilderError::DuplicateStep(sid(step.id)));
                } else if position.is_some_and(|p| p > len) {
                    state.last = Expect::Builder(BuilderError::IndexOutOfRange {
                        index: position.unwrap(),
                        len,
                    });
                } else {
                    state.steps.insert(position.unwrap_or(len), step.clone());
                }
            }
            Transition::UpdateStep(id, agent, command, deps) => match state.position(id) {
                None => state.last = Expect::Builder(BuilderError::UnknownStep(sid(id))),
                Some(i) => {
                    let s = &mut state.steps[i];
                    if let Some(a) = agent {
                        s.agent = a;
                    }
                    if let Some(c) = command {
                        s.command = *c;
                    }
                    if let Some(d) = deps {
                        s.deps.clone_from(d);
                    }
                }
            },
            Transition::RemoveStep(id) => match state.position(id) {
                None => state.last = Expect::Builder(BuilderError::UnknownStep(sid(id))),
                Some(i) => {
                    state.steps.remove(i);
                }
            },
            Transition::Submit => {
                let problems = state.problems();
                if problems.is_empty() {
                    state.stage = Stage::Proposal;
                    state.submits += 1;
                } else {
                    state.last = Expect::Problems(problems);
                }
            }
            Transition::Approve => state.stage = Stage::Approved,
            Transition::Reject => state.stage = Stage::Rejected,
            Transition::RequestChanges => {
                state.stage = Stage::Draft;
                state.change_requests += 1;
            }
            Transition::RoundTrip => {}
        }
        state
    }
}

fn step_of(s: &ModelStep) -> Step {
    let mut step = Step::new(
        sid(s.id),
        AgentId::parse(s.agent).unwrap(),
        format!("do {}", s.id),
    );
    step.command = s.command.map(str::to_owned);
    step.depends_on = s.deps.as_ref().map(|d| d.iter().map(|n| sid(n)).collect());
    step
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The digest computed without `orca_core::format`: sorted keys, compact, sha256.
fn independent_digest(content: &PlanContent) -> String {
    fn sorted(v: serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(map) => {
                let mut entries: Vec<_> = map.into_iter().collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                serde_json::Value::Object(
                    entries.into_iter().map(|(k, v)| (k, sorted(v))).collect(),
                )
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.into_iter().map(sorted).collect())
            }
            other => other,
        }
    }
    let text = sorted(serde_json::to_value(content).unwrap()).to_string();
    let hash = sha2::Sha256::digest(text.as_bytes());
    format!(
        "sha256:{}",
        hash.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

struct PlanTest;

impl StateMachineTest for PlanTest {
    type SystemUnderTest = Plan;
    type Reference = PlanMachine;

    fn init_test(model: &Model) -> Plan {
        let mut draft = DraftPlan::new(PlanId::new(), now());
        draft.set_goal(model.goal);
        draft.set_assumptions(strings(&model.lists[0]));
        draft.set_risks(strings(&model.lists[1]));
        draft.set_verification(strings(&model.lists[2]));
        Plan::Draft(draft)
    }

    /// `model` is the reference state *after* the transition.
    fn apply(plan: Plan, model: &Model, transition: Transition) -> Plan {
        match (plan, transition) {
            (plan, Transition::RoundTrip) => {
                let text = serde_json::to_string(&plan).unwrap();
                let back = Plan::from_json(&text).unwrap();
                assert_eq!(back, plan);
                back
            }
            (Plan::Draft(mut draft), transition) => {
                let result = match transition {
                    Transition::SetGoal(g) => {
                        draft.set_goal(g);
                        Ok(())
                    }
                    Transition::SetList(f, l) => {
                        match f {
                            0 => draft.set_assumptions(strings(&l)),
                            1 => draft.set_risks(strings(&l)),
                            _ => draft.set_verification(strings(&l)),
                        }
                        Ok(())
                    }
                    Transition::AddStep(s, position) => draft.add_step(step_of(&s), position),
                    Transition::UpdateStep(id, agent, command, deps) => {
                        let patch = StepPatch {
                            agent: agent.map(|a| AgentId::parse(a).unwrap()),
                            command: command.map(|c| c.map(str::to_owned)),
                            depends_on: deps.map(|d| d.map(|d| d.iter().map(|n| sid(n)).collect())),
                            ..StepPatch::default()
                        };
                        draft.update_step(&sid(id), patch)
                    }
                    Transition::RemoveStep(id) => draft.remove_step(&sid(id)).map(drop),
                    Transition::Submit => {
                        let before = draft.clone();
                        return match draft.submit(&known_agents(), now()) {
                            Ok(proposal) => {
                                assert_eq!(model.last, Expect::Ok);
                                Plan::Proposal(proposal)
                            }
                            Err(rejected) => {
                                let mut problems = rejected.problems.clone();
                                problems.sort();
                                assert_eq!(Expect::Problems(problems), model.last);
                                // The draft comes back unchanged.
                                assert_eq!(rejected.draft, before);
                                Plan::Draft(rejected.draft)
                            }
                        };
                    }
                    other => unreachable!("{other:?} on a draft"),
                };
                match result {
                    Ok(()) => assert_eq!(model.last, Expect::Ok),
                    Err(e) => assert_eq!(Expect::Builder(e), model.last),
                }
                Plan::Draft(draft)
            }
            (Plan::Proposal(p), Transition::Approve) => {
                Plan::Approved(p.approve("alice", None, now()))
            }
            (Plan::Proposal(p), Transition::Reject) => {
                Plan::Rejected(p.reject("bob", Some("no".into()), now()))
            }
            (Plan::Proposal(p), Transition::RequestChanges) => Plan::Draft(p.request_changes(
                "alice",
                format!("change #{}", model.change_requests - 1),
                now(),
            )),
            (plan, transition) => unreachable!("{transition:?} on {:?}", plan.stage()),
        }
    }

    fn check_invariants(plan: &Plan, model: &Model) {
        let stage = match model.stage {
            Stage::Draft => PlanStage::Draft,
            Stage::Proposal => PlanStage::Proposal,
            Stage::Approved => PlanStage::Approved,
            Stage::Rejected => PlanStage::Rejected,
        };
        assert_eq!(plan.stage(), stage);
        // The content is what the model built.
        let content = plan.content();
        assert_eq!(content.goal, model.goal);
        assert_eq!(content.assumptions, strings(&model.lists[0]));
        assert_eq!(content.risks, strings(&model.lists[1]));
        assert_eq!(content.verification, strings(&model.lists[2]));
        let steps: Vec<Step> = model.steps.iter().map(step_of).collect();
        assert_eq!(content.steps, steps);
        // The history counts every submission and change request; the latest feedback is kept.
        let submits = plan
            .history()
            .iter()
            .filter(|e| matches!(e, PlanEvent::Submitted { .. }))
            .count();
        assert_eq!(submits, model.submits);
        assert_eq!(plan.history().len(), model.submits + model.change_requests);
        assert_eq!(
            plan.latest_feedback().map(str::to_owned),
            model
                .change_requests
                .checked_sub(1)
                .map(|n| format!("change #{n}"))
        );
        // Anything past the draft stage is valid; an approval records the content's digest.
        if stage != PlanStage::Draft {
            assert_eq!(content.validate(&known_agents()), Vec::new());
        }
        if let Plan::Approved(approved) = plan {
            assert!(approved.is_intact());
            assert_eq!(approved.digest().to_string(), independent_digest(content));
        }
        // The readiness helper agrees with the model's graph when there is no cycle.
        if model
            .problems()
            .iter()
            .all(|p| !matches!(p, Problem::Cycle { .. }))
        {
            let deps = model.deps();
            let ready: Vec<StepId> = content
                .ready_steps(&BTreeSet::new())
                .iter()
                .map(|s| s.id.clone())
                .collect();
            let expected: Vec<StepId> = (0..deps.len())
                .filter(|&i| {
                    deps[i].is_empty()
                        && model.steps[i]
                            .deps
                            .iter()
                            .flatten()
                            .all(|d| model.position(d).is_some())
                })
                .map(|i| sid(model.steps[i].id))
                .collect();
            assert_eq!(ready, expected);
        }
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("proptest-regressions/model_plan.txt"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn plan_lifecycle_follows_the_model(sequential 1..60 => PlanTest);
}
