//! The on-disk contract: the JSON of every persisted type, in every stage and status, as insta
//! snapshots. Ids and times are redacted; digests are kept (they must not change for the same
//! content, or stored approvals would stop verifying).
//!
//! Changing a snapshot means changing the stored format: think through old readers and new
//! writers first (see `adr/0006-ids-and-format-versioning.md`).
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;

use orca_core::hitl::two_question;
use orca_core::*;
use serde::Serialize;
use time::OffsetDateTime;
use time::macros::datetime;

const IDS_AND_TIMES: &[&str] = &[
    ".id",
    ".supersedes",
    ".created_at",
    ".history[].at",
    ".approval.at",
    ".rejection.at",
    ".info.id",
    ".info.plan_id",
    ".info.created_at",
    ".started_at",
    ".finished_at",
    ".replanned_as",
    ".decision.asked_at",
    ".decision.answer.at",
    ".attempts[].started_at",
    ".attempts[].finished_at",
    ".context.plan_id",
    ".plan_id",
    "[].plan_id",
    ".session_id",
    ".at",
];

/// Snapshots `value` as JSON with ids and times redacted, and checks that the redacted fields
/// really were ids or times (so a redaction never hides a change of meaning).
#[track_caller]
fn snap<T: Serialize>(name: &str, value: &T) {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("snapshots");
    settings.set_prepend_module_to_snapshot(false);
    for selector in IDS_AND_TIMES {
        let placeholder = if selector.ends_with("at") {
            "[time]"
        } else {
            "[id]"
        };
        settings.add_redaction(selector, placeholder);
    }
    settings.bind(|| insta::assert_json_snapshot!(name, value));
}

fn now() -> OffsetDateTime {
    datetime!(2026-11-20 12:00 UTC)
}

fn sid(s: &str) -> StepId {
    StepId::parse(s).unwrap()
}

fn agent(s: &str) -> AgentId {
    AgentId::parse(s).unwrap()
}

fn agents() -> BTreeSet<AgentId> {
    [AgentId::shell(), agent("coder")].into_iter().collect()
}

fn holder() -> Holder {
    Holder {
        pid: 4242,
        host: "build-1".into(),
        token: "tok".into(),
    }
}

/// A draft with every kind of field: a shell step, a DAG root, locks, per-step lists, limits.
fn draft() -> DraftPlan {
    let mut d = DraftPlan::new(PlanId::new(), now()).superseding(PlanId::new());
    d.set_goal("add a health check endpoint");
    d.set_summary(Some("a GET /health route and a test".into()));
    d.set_assumptions(vec!["the server uses axum".into()]);
    d.set_risks(vec!["the route clashes with an existing one".into()]);
    d.set_verification(vec!["cargo test passes".into()]);
    d.add_step(
        Step::new(
            sid("research"),
            agent("coder"),
            "find where routes are declared",
        )
        .with_depends_on([]),
        None,
    )
    .unwrap();
    let mut code = Step::new(sid("code"), agent("coder"), "add the route")
        .with_depends_on([sid("research")])
        .with_locks(["src"]);
    code.assumptions = vec!["routes live in src/routes.rs".into()];
    code.risks = vec!["breaking other routes".into()];
    code.verification = vec!["the route answers 200".into()];
    code.max_attempts = Some(3);
    code.timeout_secs = Some(600);
    d.add_step(code, None).unwrap();
    d.add_step(
        Step::new(sid("test"), AgentId::shell(), "run the tests").with_command("cargo test"),
        None,
    )
    .unwrap();
    d
}

fn approved() -> ApprovedPlan {
    draft()
        .submit(&agents(), now())
        .unwrap()
        .approve("alice", Some("looks good".into()), now())
}

#[test]
fn plans_in_every_stage() {
    snap(
        "plan_draft_new",
        &Plan::from(DraftPlan::new(PlanId::new(), now())),
    );
    snap("plan_draft", &Plan::from(draft()));
    let proposal = draft().submit(&agents(), now()).unwrap();
    snap("plan_proposal", &Plan::from(proposal.clone()));
    let changed = proposal
        .clone()
        .request_changes("alice", "also add a readiness route", now());
    snap("plan_draft_after_changes", &Plan::from(changed));
    snap("plan_approved", &Plan::from(approved()));
    snap(
        "plan_rejected",
        &Plan::from(proposal.reject("bob", Some("not now".into()), now())),
    );
}

#[test]
fn the_digest_of_the_snapshot_plan_is_stable() {
    // Part of the contract: the same content always hashes the same, across releases.
    let plan = approved();
    assert!(plan.is_intact());
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| insta::assert_snapshot!("plan_approved_digest", plan.digest().to_string()));
}

fn context(step_index: usize, tasks: &[Task]) -> TaskContext {
    let plan = approved();
    build_context(
        plan.id(),
        plan.content(),
        step_index,
        tasks,
        &ContextLimits::default(),
    )
    .unwrap()
}

/// The tasks of a run in which `research` completed, `code` failed once and runs again.
fn tasks() -> Vec<Task> {
    let plan = approved();
    let (_, mut tasks) = PendingExecution::new(ExecutionId::new(), &plan, now());
    let Task::Pending(research) = tasks[0].clone() else {
        unreachable!()
    };
    let ctx = context(0, &tasks);
    let success = TaskSuccess {
        summary: "routes are declared in src/routes.rs".into(),
        artifacts: vec!["notes.md".into()],
        key_findings: vec!["axum 0.8".into()],
        verification: vec!["read the file".into()],
        relevant_files: vec!["src/routes.rs".into()],
        notes: Some("no existing /health".into()),
        output: None,
    };
    tasks[0] = research
        .start(ctx, holder(), now())
        .complete(success, now())
        .into();
    let Task::Pending(code) = tasks[1].clone() else {
        unreachable!()
    };
    let ctx = context(1, &tasks);
    let failure = TaskFailure::new(ErrorCode::AgentError, "the build broke").with_cause("E0425");
    let failed = code.start(ctx, holder(), now()).fail(failure, now());
    tasks[1] = failed.clone().into();
    let ctx = context(1, &tasks);
    tasks[1] = failed
        .retry(
            Some("import the handler first".into()),
            ctx,
            holder(),
            now(),
        )
        .into();
    tasks
}

#[test]
fn tasks_in_every_status() {
    let tasks = tasks();
    snap("task_pending", &tasks[2]);
    snap("task_completed", &tasks[0]);
    snap("task_running_second_attempt", &tasks[1]);
    let Task::Running(running) = tasks[1].clone() else {
        unreachable!()
    };
    snap(
        "task_failed",
        &Task::from(running.clone().fail(
            TaskFailure::new(ErrorCode::Timeout, "no answer in 600s"),
            now(),
        )),
    );
    snap(
        "task_failed_interrupted",
        &Task::from(running.clone().interrupt(
            TaskInterruption {
                reason: "two handlers exist".into(),
                question: Some("which one should serve /health?".into()),
            },
            now(),
        )),
    );
    snap(
        "task_failed_abandoned",
        &Task::from(running.abandon("holder 4242 on build-1 is gone", now())),
    );
    let Task::Pending(pending) = tasks[2].clone() else {
        unreachable!()
    };
    snap(
        "task_skipped",
        &Task::from(pending.skip("step `code` was abandoned", now())),
    );
}

#[test]
fn executions_in_every_stage() {
    let plan = approved();
    let (pending, tasks) = PendingExecution::new(ExecutionId::new(), &plan, now());
    snap("execution_pending", &Execution::from(pending.clone()));
    snap(
        "execution_stopped_before_start",
        &Execution::from(pending.clone().stop("alice", None, now())),
    );
    let running = pending.start(now());
    snap("execution_running", &Execution::from(running.clone()));
    let request = DecisionRequest::Deviation {
        step_id: sid("code"),
        attempts: 3,
        failure: TaskFailure::new(ErrorCode::AgentError, "the build broke"),
    };
    let waiting = running.clone().await_decision(request, now()).unwrap();
    snap(
        "execution_running_waiting_for_decision",
        &Execution::from(waiting.clone()),
    );
    let answered = waiting
        .answer_decision(
            Decision::Retry {
                guidance: Some("import the handler first".into()),
            },
            "alice",
            now(),
        )
        .unwrap();
    snap(
        "execution_running_decision_answered",
        &Execution::from(answered),
    );
    snap(
        "execution_failed",
        &Execution::from(running.clone().fail(
            "step `code` failed 3 times",
            Some(PlanId::new()),
            now(),
        )),
    );
    snap(
        "execution_stopped",
        &Execution::from(
            running
                .clone()
                .stop("alice", Some("going home".into()), now()),
        ),
    );
    let done: Vec<Task> = tasks
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let Task::Pending(t) = t else { unreachable!() };
            t.start(context(i, &[]), holder(), now())
                .complete(TaskSuccess::with_summary("ok"), now())
                .into()
        })
        .collect();
    snap(
        "execution_completed",
        &Execution::from(running.complete(&done, now()).unwrap()),
    );
}

#[test]
fn results_and_decisions() {
    snap(
        "result_success",
        &TaskResult::Success(TaskSuccess {
            summary: "added GET /health".into(),
            artifacts: vec!["src/routes.rs".into()],
            key_findings: vec!["the router is built in main".into()],
            verification: vec!["curl returned 200".into()],
            relevant_files: vec!["src/main.rs".into()],
            notes: Some("no auth on this route".into()),
            output: Some("ok".into()),
        }),
    );
    snap(
        "result_failure",
        &TaskResult::Failure(
            TaskFailure::new(ErrorCode::ParseError, "no JSON object").with_cause("EOF at 1:1"),
        ),
    );
    snap(
        "result_interruption",
        &TaskResult::Interruption(TaskInterruption {
            reason: "ambiguous".into(),
            question: Some("which crate?".into()),
        }),
    );
    snap(
        "planner_responses",
        &vec![
            PlannerResponse::Answer {
                text: "you have 2 plans".into(),
            },
            PlannerResponse::Plan {
                plan_id: PlanId::new(),
                stage: PlanRefStage::Proposal,
                message: Some("ready for review".into()),
            },
            PlannerResponse::Failure(TaskFailure::new(ErrorCode::BudgetExceeded, "out of tokens")),
        ],
    );
    snap(
        "agent_answer",
        &AgentAnswer {
            answer: "in src/routes.rs".into(),
            session_id: Some(SessionId::new()),
        },
    );
    snap(
        "error_codes",
        &[
            ErrorCode::Validation,
            ErrorCode::UnknownAgent,
            ErrorCode::SessionNotFound,
            ErrorCode::AgentError,
            ErrorCode::Timeout,
            ErrorCode::Interrupted,
            ErrorCode::ParseError,
            ErrorCode::BudgetExceeded,
            ErrorCode::Cancelled,
            ErrorCode::ToolRefused,
            ErrorCode::TaskFailed,
        ],
    );
    snap(
        "decisions",
        &vec![
            Decision::Retry {
                guidance: Some("try again".into()),
            },
            Decision::Replan { guidance: None },
            Decision::Stop,
            Decision::Answer {
                text: "the first".into(),
            },
        ],
    );
    snap(
        "decision_request_interruption",
        &DecisionRequest::Interruption {
            step_id: sid("code"),
            reason: "ambiguous".into(),
            question: Some("which one?".into()),
        },
    );
    snap(
        "two_question_plan_approval",
        &two_question::<ApprovalAction>(
            Touchpoint::PlanApproval,
            "plan: add a route".into(),
            "Approve this plan?",
        ),
    );
    snap(
        "two_question_deviation",
        &two_question::<DeviationAction>(
            Touchpoint::Deviation,
            "step `code` failed".into(),
            "What now?",
        ),
    );
    snap(
        "two_question_interruption",
        &two_question::<InterruptionAction>(
            Touchpoint::Interruption,
            "step `code` asks".into(),
            "Which one?",
        ),
    );
    snap(
        "human_answer",
        &HumanAnswer {
            action: "request_changes".into(),
            context: Some("add a readiness route".into()),
        },
    );
}

#[test]
fn validation_problems() {
    // Problems are returned to the planner as JSON: their shape is a contract too.
    let mut d = draft();
    d.set_goal("");
    d.add_step(
        Step::new(sid("loop"), agent("wizard"), "x").with_depends_on([sid("loop")]),
        None,
    )
    .unwrap();
    let problems = d.submit(&agents(), now()).unwrap_err().problems;
    snap("problems", &problems);
}
