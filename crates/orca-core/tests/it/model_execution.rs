//! Model-based test of executions and tasks: random sequences of claims (ready or blocked),
//! completions, failures, interruptions, abandonments, retries, skips, human decisions and
//! execution endings, run against a reference model, with every invariant checked after every
//! transition.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;

use orca_core::schedule;
use orca_core::strategy;
use orca_core::*;
use proptest::prelude::*;
use proptest::strategy::Union;
use proptest::test_runner::FileFailurePersistence;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use time::OffsetDateTime;

fn now() -> OffsetDateTime {
    OffsetDateTime::UNIX_EPOCH
}

fn holder() -> Holder {
    Holder {
        pid: 7,
        host: "h".into(),
        token: "t".into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Pending,
    Running,
    Completed,
    Failed,
    Stopped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pending,
    Running,
    Completed,
    Failed,
    Skipped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Succeeded,
    Failed,
    Interrupted,
    Abandoned,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Deviation,
    Interruption,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Retry,
    Replan,
    Stop,
    Answer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dec {
    None,
    Asked(Kind, usize),
    Answered(Kind, usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelTask {
    status: Status,
    attempts: Vec<Outcome>,
    guided: Vec<bool>,
}

#[derive(Debug, Clone)]
struct Model {
    plan: ApprovedPlan,
    deps: Vec<Vec<usize>>,
    stage: Stage,
    tasks: Vec<ModelTask>,
    decision: Dec,
    last: Result<(), TransitionError>,
}

#[derive(Debug, Clone)]
enum Transition {
    Start,
    Stop,
    Claim(usize),
    ClaimBlocked(usize),
    Finish(usize, Outcome),
    Retry(usize, bool),
    GiveUp(usize),
    Ask(usize, Kind),
    Answer(Choice),
    TakeAnswered,
    Complete,
    CompleteWithWrongTasks,
    Fail,
    RoundTrip,
}

impl Model {
    fn step(&self, i: usize) -> StepId {
        self.plan.content().steps[i].id.clone()
    }

    fn with(&self, status: Status) -> Vec<usize> {
        (0..self.tasks.len())
            .filter(|&i| self.tasks[i].status == status)
            .collect()
    }

    fn completed(&self, i: usize) -> bool {
        self.tasks[i].status == Status::Completed
    }

    fn ready(&self) -> Vec<usize> {
        self.with(Status::Pending)
            .into_iter()
            .filter(|&i| self.deps[i].iter().all(|&d| self.completed(d)))
            .collect()
    }

    fn blocked(&self) -> Vec<usize> {
        self.with(Status::Pending)
            .into_iter()
            .filter(|&i| !self.deps[i].iter().all(|&d| self.completed(d)))
            .collect()
    }

    /// Every step downstream of `root`, directly or not.
    fn downstream(&self, root: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        let mut changed = true;
        while changed {
            changed = false;
            for (i, ds) in self.deps.iter().enumerate() {
                if !out.contains(&i) && ds.iter().any(|d| *d == root || out.contains(d)) {
                    out.insert(i);
                    changed = true;
                }
            }
        }
        out
    }
}

/// The dependencies of every step, from the plan document and the "after the previous step"
/// rule, without `orca_core::graph`.
fn model_deps(content: &PlanContent) -> Vec<Vec<usize>> {
    content
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| match &s.depends_on {
            None => i.checked_sub(1).into_iter().collect(),
            Some(names) => {
                let mut out: Vec<usize> = Vec::new();
                for n in names {
                    let j = content.steps.iter().position(|s| &s.id == n).unwrap();
                    if !out.contains(&j) {
                        out.push(j);
                    }
                }
                out
            }
        })
        .collect()
}

fn pick(indices: Vec<usize>) -> impl Strategy<Value = usize> {
    prop::sample::select(indices)
}

struct ExecutionMachine;

impl ReferenceStateMachine for ExecutionMachine {
    type State = Model;
    type Transition = Transition;

    fn init_state() -> BoxedStrategy<Model> {
        strategy::approved_plan(5)
            .prop_map(|plan| {
                let deps = model_deps(plan.content());
                let n = plan.content().steps.len();
                Model {
                    plan,
                    deps,
                    stage: Stage::Pending,
                    tasks: vec![
                        ModelTask {
                            status: Status::Pending,
                            attempts: Vec::new(),
                            guided: Vec::new(),
                        };
                        n
                    ],
                    decision: Dec::None,
                    last: Ok(()),
                }
            })
            .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Transition> {
        match state.stage {
            Stage::Pending => prop_oneof![
                4 => Just(Transition::Start),
                1 => Just(Transition::Stop),
                1 => Just(Transition::RoundTrip),
            ]
            .boxed(),
            Stage::Running => {
                let mut options: Vec<(u32, BoxedStrategy<Transition>)> = vec![
                    (1, Just(Transition::RoundTrip).boxed()),
                    (2, Just(Transition::Complete).boxed()),
                    (1, Just(Transition::CompleteWithWrongTasks).boxed()),
                    (
                        if state.decision == Dec::None { 1 } else { 4 },
                        prop::sample::select(vec![
                            Choice::Retry,
                            Choice::Replan,
                            Choice::Stop,
                            Choice::Answer,
                        ])
                        .prop_map(Transition::Answer)
                        .boxed(),
                    ),
                    (1, Just(Transition::TakeAnswered).boxed()),
                    (
                        1,
                        prop_oneof![Just(Transition::Fail), Just(Transition::Stop)].boxed(),
                    ),
                ];
                let ready = state.ready();
                if !ready.is_empty() {
                    options.push((8, pick(ready).prop_map(Transition::Claim).boxed()));
                }
                let blocked = state.blocked();
                if !blocked.is_empty() {
                    options.push((1, pick(blocked).prop_map(Transition::ClaimBlocked).boxed()));
                }
                let running = state.with(Status::Running);
                if !running.is_empty() {
                    let outcome = prop_oneof![
                        5 => Just(Outcome::Succeeded),
                        2 => Just(Outcome::Failed),
                        1 => Just(Outcome::Interrupted),
                        1 => Just(Outcome::Abandoned),
                    ];
                    options.push((
                        8,
                        (pick(running), outcome)
                            .prop_map(|(i, o)| Transition::Finish(i, o))
                            .boxed(),
                    ));
                }
                let failed = state.with(Status::Failed);
                if !failed.is_empty() {
                    options.push((
                        3,
                        (pick(failed.clone()), any::<bool>())
                            .prop_map(|(i, g)| Transition::Retry(i, g))
                            .boxed(),
                    ));
                    options.push((1, pick(failed.clone()).prop_map(Transition::GiveUp).boxed()));
                    let kind = prop_oneof![Just(Kind::Deviation), Just(Kind::Interruption)];
                    options.push((
                        2,
                        (pick(failed), kind)
                            .prop_map(|(i, k)| Transition::Ask(i, k))
                            .boxed(),
                    ));
                }
                Union::new_weighted(options).boxed()
            }
            // Terminal: the types offer no transition; only reading back is possible.
            Stage::Completed | Stage::Failed | Stage::Stopped => {
                Just(Transition::RoundTrip).boxed()
            }
        }
    }

    fn preconditions(state: &Model, transition: &Transition) -> bool {
        let status = |i: &usize| state.tasks.get(*i).map(|t| t.status);
        match transition {
            Transition::RoundTrip => true,
            Transition::Start => state.stage == Stage::Pending,
            Transition::Stop => matches!(state.stage, Stage::Pending | Stage::Running),
            _ if state.stage != Stage::Running => false,
            Transition::Claim(i) => state.ready().contains(i),
            Transition::ClaimBlocked(i) => state.blocked().contains(i),
            Transition::Finish(i, _) => status(i) == Some(Status::Running),
            Transition::Retry(i, _) | Transition::GiveUp(i) | Transition::Ask(i, _) => {
                status(i) == Some(Status::Failed)
            }
            _ => true,
        }
    }

    fn apply(mut state: Model, transition: &Transition) -> Model {
        state.last = Ok(());
        match *transition {
            Transition::Start => state.stage = Stage::Running,
            // A decision is only recorded on a running execution; ending it drops the record.
            Transition::Stop => {
                state.stage = Stage::Stopped;
                state.decision = Dec::None;
            }
            Transition::Fail => {
                state.stage = Stage::Failed;
                state.decision = Dec::None;
            }
            Transition::Claim(i) => state.tasks[i].status = Status::Running,
            Transition::ClaimBlocked(i) => {
                let dependency = *state.deps[i]
                    .iter()
                    .find(|&&d| !state.completed(d))
                    .unwrap();
                state.last = Err(TransitionError::DependencyNotCompleted {
                    step: state.step(i),
                    dependency: state.step(dependency),
                });
            }
            Transition::Finish(i, outcome) => {
                let task = &mut state.tasks[i];
                task.attempts.push(outcome);
                task.guided.push(false);
                task.status = if outcome == Outcome::Succeeded {
                    Status::Completed
                } else {
                    Status::Failed
                };
            }
            Transition::Retry(i, guided) => {
                let task = &mut state.tasks[i];
                if guided {
                    *task.guided.last_mut().unwrap() = true;
                }
                task.status = Status::Running;
            }
            Transition::GiveUp(i) => {
                let mut doomed = state.downstream(i);
                for s in state.with(Status::Skipped) {
                    doomed.extend(state.downstream(s));
                }
                for d in doomed {
                    if state.tasks[d].status == Status::Pending {
                        state.tasks[d].status = Status::Skipped;
                    }
                }
            }
            Transition::Ask(i, kind) => match state.decision {
                Dec::None => state.decision = Dec::Asked(kind, i),
                Dec::Asked(_, j) | Dec::Answered(_, j) => {
                    state.last = Err(TransitionError::DecisionAlreadyPending(state.step(j)))
                }
            },
            Transition::Answer(choice) => match state.decision {
                Dec::None => state.last = Err(TransitionError::NoPendingDecision),
                Dec::Answered(_, j) => {
                    state.last = Err(TransitionError::DecisionAlreadyAnswered(state.step(j)));
                }
                Dec::Asked(kind, j) => {
                    let fits = match kind {
                        Kind::Deviation => {
                            matches!(choice, Choice::Retry | Choice::Replan | Choice::Stop)
                        }
                        Kind::Interruption => matches!(choice, Choice::Answer | Choice::Stop),
                    };
                    if fits {
                        state.decision = Dec::Answered(kind, j);
                    } else {
                        state.last = Err(TransitionError::NotAnOption {
                            answer: decision(choice).key().to_owned(),
                            options: match kind {
                                Kind::Deviation => "retry, replan, stop",
                                Kind::Interruption => "answer, stop",
                            }
                            .to_owned(),
                        });
                    }
                }
            },
            Transition::TakeAnswered => {
                if let Dec::Answered(..) = state.decision {
                    state.decision = Dec::None;
                }
            }
            Transition::Complete => {
                let open = state
                    .tasks
                    .iter()
                    .filter(|t| t.status != Status::Completed)
                    .count();
                if open == 0 {
                    state.stage = Stage::Completed;
                    state.decision = Dec::None;
                } else {
                    state.last = Err(TransitionError::TasksNotCompleted {
                        open,
                        total: state.tasks.len(),
                    });
                }
            }
            Transition::CompleteWithWrongTasks => state.last = Err(TransitionError::TaskMismatch),
            Transition::RoundTrip => {}
        }
        state
    }
}

fn decision(choice: Choice) -> Decision {
    match choice {
        Choice::Retry => Decision::Retry {
            guidance: Some("look again".into()),
        },
        Choice::Replan => Decision::Replan { guidance: None },
        Choice::Stop => Decision::Stop,
        Choice::Answer => Decision::Answer {
            text: "the first".into(),
        },
    }
}

#[derive(Debug)]
struct Sut {
    plan: ApprovedPlan,
    execution: Execution,
    tasks: Vec<Task>,
}

impl Sut {
    fn context(&self, i: usize) -> TaskContext {
        build_context(
            self.plan.id(),
            self.plan.content(),
            i,
            &self.tasks,
            &ContextLimits::default(),
        )
        .unwrap()
    }

    fn running(self) -> (RunningExecution, Self) {
        let Execution::Running(running) = self.execution.clone() else {
            unreachable!("the model only asks this of a running execution")
        };
        (running, self)
    }
}

/// Applies a refusable execution transition and checks the outcome against the model.
fn expect<S>(model: &Model, result: Result<S, TransitionFailed<S>>) -> S {
    match result {
        Ok(s) => {
            assert_eq!(model.last, Ok(()));
            s
        }
        Err(refused) => {
            assert_eq!(Err(refused.error.clone()), model.last);
            *refused.state
        }
    }
}

struct ExecutionTest;

impl StateMachineTest for ExecutionTest {
    type SystemUnderTest = Sut;
    type Reference = ExecutionMachine;

    fn init_test(model: &Model) -> Sut {
        let (pending, tasks) = PendingExecution::new(ExecutionId::new(), &model.plan, now());
        Sut {
            plan: model.plan.clone(),
            execution: pending.into(),
            tasks,
        }
    }

    /// `model` is the reference state *after* the transition.
    fn apply(mut sut: Sut, model: &Model, transition: Transition) -> Sut {
        match transition {
            Transition::RoundTrip => {
                let text = serde_json::to_string(&sut.execution).unwrap();
                assert_eq!(Execution::from_json(&text).unwrap(), sut.execution);
                for task in &sut.tasks {
                    let text = serde_json::to_string(task).unwrap();
                    assert_eq!(&Task::from_json(&text).unwrap(), task);
                }
            }
            Transition::Start => {
                let Execution::Pending(p) = sut.execution.clone() else {
                    unreachable!()
                };
                sut.execution = p.start(now()).into();
            }
            Transition::Stop => {
                sut.execution = match sut.execution.clone() {
                    Execution::Pending(p) => p.stop("alice", None, now()).into(),
                    Execution::Running(r) => r.stop("alice", Some("enough".into()), now()).into(),
                    other => unreachable!("stop of {:?}", other.stage()),
                };
            }
            Transition::Fail => {
                let (running, s) = sut.running();
                sut = s;
                sut.execution = running.fail("given up", None, now()).into();
            }
            Transition::Claim(i) => {
                let step = sut.plan.content().steps[i].id.clone();
                assert_eq!(
                    schedule::check_start(sut.plan.content(), &sut.tasks, &step),
                    Ok(i)
                );
                assert!(schedule::ready(sut.plan.content(), &sut.tasks).contains(&i));
                let Task::Pending(task) = sut.tasks[i].clone() else {
                    unreachable!()
                };
                let ctx = sut.context(i);
                sut.tasks[i] = task.start(ctx, holder(), now()).into();
            }
            Transition::ClaimBlocked(i) => {
                let step = sut.plan.content().steps[i].id.clone();
                let result = schedule::check_start(sut.plan.content(), &sut.tasks, &step).map(drop);
                assert_eq!(result, model.last);
                assert!(!schedule::ready(sut.plan.content(), &sut.tasks).contains(&i));
            }
            Transition::Finish(i, outcome) => {
                let Task::Running(task) = sut.tasks[i].clone() else {
                    unreachable!()
                };
                sut.tasks[i] = match outcome {
                    Outcome::Succeeded => {
                        let mut success = TaskSuccess::with_summary(format!("did {i}"));
                        success.relevant_files = vec![format!("f{i}")];
                        task.complete(success, now()).into()
                    }
                    Outcome::Failed => task
                        .fail(TaskFailure::new(ErrorCode::AgentError, "broke"), now())
                        .into(),
                    Outcome::Interrupted => task
                        .interrupt(
                            TaskInterruption {
                                reason: "unsure".into(),
                                question: Some("which?".into()),
                            },
                            now(),
                        )
                        .into(),
                    Outcome::Abandoned => task.abandon("holder gone", now()).into(),
                };
            }
            Transition::Retry(i, guided) => {
                let Task::Failed(task) = sut.tasks[i].clone() else {
                    unreachable!()
                };
                // The context is built before the guidance is recorded, as a runner would.
                let ctx = sut.context(i);
                let guidance = guided.then(|| format!("guidance for {i}"));
                sut.tasks[i] = task.retry(guidance, ctx, holder(), now()).into();
            }
            Transition::GiveUp(i) => {
                let abandoned: BTreeSet<StepId> = [sut.plan.content().steps[i].id.clone()].into();
                let content = sut.plan.content().clone();
                let doomed = schedule::to_skip(&content, &sut.tasks, &abandoned);
                for (j, step) in content.steps.iter().enumerate() {
                    let check = schedule::check_skip(&content, &sut.tasks, &abandoned, &step.id);
                    if doomed.contains(&j) {
                        assert_eq!(check, Ok(j));
                    } else {
                        assert_eq!(
                            check,
                            Err(TransitionError::NothingAbandoned(step.id.clone()))
                        );
                    }
                }
                for j in doomed {
                    let Task::Pending(task) = sut.tasks[j].clone() else {
                        unreachable!()
                    };
                    sut.tasks[j] = task.skip("upstream abandoned", now()).into();
                }
            }
            Transition::Ask(i, kind) => {
                let Task::Failed(task) = sut.tasks[i].clone() else {
                    unreachable!()
                };
                let request = match kind {
                    Kind::Deviation => DecisionRequest::Deviation {
                        step_id: task.step_id.clone(),
                        attempts: task.attempts.len().try_into().unwrap(),
                        failure: task.last_failure(),
                    },
                    Kind::Interruption => DecisionRequest::Interruption {
                        step_id: task.step_id.clone(),
                        reason: "unsure".into(),
                        question: None,
                    },
                };
                let (running, s) = sut.running();
                sut = s;
                sut.execution = expect(model, running.await_decision(request, now())).into();
            }
            Transition::Answer(choice) => {
                let (running, s) = sut.running();
                sut = s;
                sut.execution = expect(
                    model,
                    running.answer_decision(decision(choice), "alice", now()),
                )
                .into();
            }
            Transition::TakeAnswered => {
                let (running, s) = sut.running();
                sut = s;
                let had_answer = running
                    .decision
                    .as_ref()
                    .is_some_and(|d| d.answer.is_some());
                let (running, taken) = running.take_answered();
                assert_eq!(taken.is_some(), had_answer);
                sut.execution = running.into();
            }
            Transition::Complete => {
                let (running, s) = sut.running();
                sut = s;
                sut.execution = match running.complete(&sut.tasks, now()) {
                    Ok(done) => {
                        assert_eq!(model.last, Ok(()));
                        done.into()
                    }
                    Err(refused) => {
                        assert_eq!(Err(refused.error), model.last);
                        (*refused.state).into()
                    }
                };
            }
            Transition::CompleteWithWrongTasks => {
                let (running, s) = sut.running();
                sut = s;
                let wrong = &sut.tasks[1..];
                let refused = running.complete(wrong, now()).unwrap_err();
                assert_eq!(Err(refused.error), model.last);
                sut.execution = (*refused.state).into();
            }
        }
        sut
    }

    fn check_invariants(sut: &Sut, model: &Model) {
        let stage = match model.stage {
            Stage::Pending => ExecutionStage::Pending,
            Stage::Running => ExecutionStage::Running,
            Stage::Completed => ExecutionStage::Completed,
            Stage::Failed => ExecutionStage::Failed,
            Stage::Stopped => ExecutionStage::Stopped,
        };
        assert_eq!(sut.execution.stage(), stage);
        // The execution runs exactly the approved content.
        let info = sut.execution.info();
        assert_eq!(&info.plan_digest, sut.plan.digest());
        assert!(sut.plan.is_intact());
        assert_eq!(info.plan_id, sut.plan.id());
        let steps: Vec<StepId> = sut
            .plan
            .content()
            .steps
            .iter()
            .map(|s| s.id.clone())
            .collect();
        assert_eq!(info.steps, steps);
        // `completed` only when every task completed.
        if stage == ExecutionStage::Completed {
            assert!(
                sut.tasks
                    .iter()
                    .all(|t| t.status() == TaskStatus::Completed)
            );
        }
        // Readiness agrees with the model.
        assert_eq!(
            schedule::ready(sut.plan.content(), &sut.tasks),
            model.ready()
        );
        for (i, (task, m)) in sut.tasks.iter().zip(&model.tasks).enumerate() {
            let status = match m.status {
                Status::Pending => TaskStatus::Pending,
                Status::Running => TaskStatus::Running,
                Status::Completed => TaskStatus::Completed,
                Status::Failed => TaskStatus::Failed,
                Status::Skipped => TaskStatus::Skipped,
            };
            assert_eq!(task.status(), status, "task {i}");
            assert_eq!(task.step_id(), &steps[i]);
            // A task only ever started after its dependencies completed.
            if matches!(
                status,
                TaskStatus::Running | TaskStatus::Completed | TaskStatus::Failed
            ) {
                for &d in &model.deps[i] {
                    assert_eq!(
                        sut.tasks[d].status(),
                        TaskStatus::Completed,
                        "task {i} started before {d}"
                    );
                }
            }
            // Attempts: numbered 1..=n, outcomes and guidance as the model says.
            let outcomes: Vec<Outcome> = task
                .attempts()
                .iter()
                .map(|a| match a.outcome {
                    AttemptOutcome::Succeeded => Outcome::Succeeded,
                    AttemptOutcome::Failed { .. } => Outcome::Failed,
                    AttemptOutcome::Interrupted { .. } => Outcome::Interrupted,
                    AttemptOutcome::Abandoned { .. } => Outcome::Abandoned,
                })
                .collect();
            assert_eq!(outcomes, m.attempts, "task {i}");
            let numbers: Vec<u32> = task.attempts().iter().map(|a| a.number).collect();
            let expected: Vec<u32> = (1..=u32::try_from(m.attempts.len()).unwrap()).collect();
            assert_eq!(numbers, expected);
            let guided: Vec<bool> = task
                .attempts()
                .iter()
                .map(|a| a.guidance.is_some())
                .collect();
            assert_eq!(guided, m.guided, "task {i}");
            let not_abandoned = m
                .attempts
                .iter()
                .filter(|o| **o != Outcome::Abandoned)
                .count();
            let counted = not_abandoned + usize::from(status == TaskStatus::Running);
            assert_eq!(task.counted_attempts(), u32::try_from(counted).unwrap());
            match task {
                Task::Running(t) => {
                    assert_eq!(t.attempt, u32::try_from(m.attempts.len() + 1).unwrap());
                    assert_eq!(t.context.step_index, i);
                    assert_eq!(t.context.step_id, steps[i]);
                    assert_eq!(t.context.total_steps, steps.len());
                    let deps: Vec<StepId> = t
                        .context
                        .dependencies
                        .iter()
                        .map(|d| d.step_id.clone())
                        .collect();
                    let expected: Vec<StepId> =
                        model.deps[i].iter().map(|&d| steps[d].clone()).collect();
                    assert_eq!(deps, expected);
                    // The human's guidance reaches the next attempt.
                    if m.guided.last() == Some(&true) {
                        let last = t.context.previous_attempts.last().unwrap();
                        assert_eq!(last.attempt, t.attempt - 1);
                        assert!(last.guidance.is_some());
                    }
                }
                Task::Completed(t) => {
                    assert_eq!(
                        t.attempts.last().map(|a| &a.outcome),
                        Some(&AttemptOutcome::Succeeded)
                    );
                }
                _ => {}
            }
        }
        // The durable decision record.
        let recorded = sut
            .execution
            .decision()
            .map(|d| (d.request.step_id().clone(), d.answer.is_some()));
        let expected = match model.decision {
            Dec::None => None,
            Dec::Asked(_, j) => Some((steps[j].clone(), false)),
            Dec::Answered(_, j) => Some((steps[j].clone(), true)),
        };
        assert_eq!(recorded, expected);
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("proptest-regressions/model_execution.txt"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn executions_and_tasks_follow_the_model(sequential 1..60 => ExecutionTest);
}
