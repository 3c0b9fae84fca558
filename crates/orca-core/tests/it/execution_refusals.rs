//! Refused execution transitions: each hands the state back unchanged with a typed error whose
//! message says what is wrong.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;

use orca_core::*;
use time::OffsetDateTime;

fn now() -> OffsetDateTime {
    OffsetDateTime::UNIX_EPOCH
}

fn sid(s: &str) -> StepId {
    StepId::parse(s).unwrap()
}

fn setup() -> (ApprovedPlan, RunningExecution, Vec<Task>) {
    let mut draft = DraftPlan::new(PlanId::new(), now());
    draft.set_goal("g");
    draft.set_assumptions(vec!["a".into()]);
    draft.set_risks(vec!["r".into()]);
    draft.set_verification(vec!["v".into()]);
    for id in ["build", "test"] {
        draft
            .add_step(
                Step::new(sid(id), AgentId::shell(), id).with_command("true"),
                None,
            )
            .unwrap();
    }
    let agents: BTreeSet<AgentId> = [AgentId::shell()].into();
    let plan = draft
        .submit(&agents, now())
        .unwrap()
        .approve("a", None, now());
    let (pending, tasks) = PendingExecution::new(ExecutionId::new(), &plan, now());
    (plan, pending.start(now()), tasks)
}

fn deviation(step: &str) -> DecisionRequest {
    DecisionRequest::Deviation {
        step_id: sid(step),
        attempts: 1,
        failure: TaskFailure::new(ErrorCode::AgentError, "broke"),
    }
}

/// Checks the refusal's message and that the state came back unchanged.
#[track_caller]
fn check<S: PartialEq + std::fmt::Debug>(
    before: &S,
    result: Result<S, TransitionFailed<S>>,
    message: &str,
) {
    let refused = result.expect_err("the transition must be refused");
    assert_eq!(refused.to_string(), message);
    assert_eq!(&*refused.state, before);
}

#[test]
fn refused_execution_transitions() {
    let (_, running, tasks) = setup();
    let r = running.clone();
    check(
        &r,
        r.clone().complete(&tasks, now()).map(|_| r.clone()),
        "the execution cannot complete: 2 of 2 tasks have not completed",
    );
    check(
        &r,
        r.clone().complete(&tasks[..1], now()).map(|_| r.clone()),
        "the task list does not match the execution's steps",
    );
    let mut reversed = tasks.clone();
    reversed.reverse();
    check(
        &r,
        r.clone().complete(&reversed, now()).map(|_| r.clone()),
        "the task list does not match the execution's steps",
    );
    check(
        &r,
        r.clone().answer_decision(Decision::Stop, "a", now()),
        "no human decision is pending",
    );
    check(
        &r,
        r.clone().await_decision(deviation("deploy"), now()),
        "step `deploy` is not in the plan",
    );

    let waiting = r.await_decision(deviation("build"), now()).unwrap();
    check(
        &waiting,
        waiting.clone().await_decision(deviation("test"), now()),
        "a human decision is already pending for step `build`",
    );
    check(
        &waiting,
        waiting
            .clone()
            .answer_decision(Decision::Answer { text: "x".into() }, "a", now()),
        "`answer` is not one of the options: retry, replan, stop",
    );
    let answered = waiting
        .answer_decision(Decision::Replan { guidance: None }, "a", now())
        .unwrap();
    check(
        &answered,
        answered.clone().answer_decision(Decision::Stop, "a", now()),
        "the decision for step `build` was already answered",
    );
    // Taking the answer out clears the record; a new decision may then be asked.
    let (cleared, taken) = answered.take_answered();
    assert_eq!(
        taken.map(|(req, ans)| (req.step_id().clone(), ans.decision)),
        Some((sid("build"), Decision::Replan { guidance: None }))
    );
    assert!(cleared.decision.is_none());
    assert!(cleared.await_decision(deviation("test"), now()).is_ok());
}

#[test]
fn refused_task_checks() {
    let (plan, _, tasks) = setup();
    let content = plan.content();
    assert_eq!(schedule::check_start(content, &tasks, &sid("build")), Ok(0));
    assert_eq!(
        schedule::check_start(content, &tasks, &sid("test"))
            .unwrap_err()
            .to_string(),
        "step `test` cannot start: dependency `build` has not completed"
    );
    assert_eq!(
        schedule::check_start(content, &tasks, &sid("deploy"))
            .unwrap_err()
            .to_string(),
        "step `deploy` is not in the plan"
    );
    let none = BTreeSet::new();
    assert_eq!(
        schedule::check_skip(content, &tasks, &none, &sid("test"))
            .unwrap_err()
            .to_string(),
        "step `test` cannot be skipped: none of its dependencies was abandoned"
    );
    let build: BTreeSet<StepId> = [sid("build")].into();
    assert_eq!(
        schedule::check_skip(content, &tasks, &build, &sid("test")),
        Ok(1)
    );
    assert!(schedule::check_skip(content, &tasks, &build, &sid("build")).is_err());
}
