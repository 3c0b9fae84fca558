//! Serde round trips of every persisted type, over generated values in every reachable state,
//! and strict reading: unknown fields, unknown tags and other format versions are refused.
#![expect(clippy::unwrap_used, reason = "tests")]

use orca_core::strategy;
use orca_core::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde::Serialize;
use serde::de::DeserializeOwned;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    }
}

/// Serializes, reads back with `read`, and checks equality and that the text is stable.
fn round_trip<T: Serialize + PartialEq + std::fmt::Debug>(value: &T, read: impl Fn(&str) -> T) {
    let text = serde_json::to_string_pretty(value).unwrap();
    let back = read(&text);
    assert_eq!(&back, value, "{text}");
    assert_eq!(serde_json::to_string_pretty(&back).unwrap(), text);
}

fn plain<T: DeserializeOwned>(text: &str) -> T {
    serde_json::from_str(text).unwrap()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn generated_plan_content_is_always_valid(content in strategy::plan_content(8)) {
        // `proposal_plan` filters invalid drafts; this shows it never has to.
        prop_assert_eq!(content.validate(&strategy::known_agents()), Vec::new());
    }

    #[test]
    fn plans_round_trip(plan in strategy::plan(6)) {
        round_trip(&plan, |t| Plan::from_json(t).unwrap());
        round_trip(plan.content(), |t| PlanContent::from_json(t).unwrap());
        let value = serde_json::to_value(&plan).unwrap();
        prop_assert_eq!(&value["format_version"], &serde_json::json!(1));
        prop_assert_eq!(&value["stage"], &serde_json::json!(plan.stage().to_string()));
        if let Plan::Approved(approved) = &plan {
            prop_assert!(approved.is_intact());
        }
    }

    #[test]
    fn runs_round_trip(run in strategy::run(5)) {
        round_trip(&run.execution, |t| Execution::from_json(t).unwrap());
        let value = serde_json::to_value(&run.execution).unwrap();
        prop_assert_eq!(&value["stage"], &serde_json::json!(run.execution.stage().to_string()));
        prop_assert_eq!(&run.execution.info().plan_digest, run.plan.digest());
        for task in &run.tasks {
            round_trip(task, |t| Task::from_json(t).unwrap());
            let value = serde_json::to_value(task).unwrap();
            prop_assert_eq!(&value["status"], &serde_json::json!(task.status().to_string()));
            if let Task::Running(t) = task {
                round_trip(&t.context, plain::<TaskContext>);
            }
            for attempt in task.attempts() {
                round_trip(attempt, plain::<AttemptRecord>);
            }
        }
        if let Some(decision) = run.execution.decision() {
            round_trip(decision, plain::<PendingDecision>);
        }
    }
}

#[test]
fn results_round_trip() {
    let failure = TaskFailure::new(ErrorCode::Timeout, "slow").with_cause("600s");
    for result in [
        TaskResult::Success(TaskSuccess::with_summary("ok")),
        TaskResult::Failure(failure.clone()),
        TaskResult::Interruption(TaskInterruption {
            reason: "why".into(),
            question: None,
        }),
    ] {
        round_trip(&result, plain::<TaskResult>);
    }
    for response in [
        PlannerResponse::Answer { text: "hi".into() },
        PlannerResponse::Plan {
            plan_id: PlanId::new(),
            stage: PlanRefStage::Draft,
            message: None,
        },
        PlannerResponse::Failure(failure),
    ] {
        round_trip(&response, plain::<PlannerResponse>);
    }
    round_trip(
        &AgentAnswer {
            answer: "a".into(),
            session_id: Some(SessionId::new()),
        },
        plain::<AgentAnswer>,
    );
    for decision in [
        Decision::Retry { guidance: None },
        Decision::Replan {
            guidance: Some("smaller steps".into()),
        },
        Decision::Stop,
        Decision::Answer { text: "b".into() },
    ] {
        round_trip(&decision, plain::<Decision>);
    }
}

/// A stored document of each kind, as JSON values to tamper with.
fn documents() -> [(&'static str, serde_json::Value); 3] {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let run = strategy::run(3).new_tree(&mut runner).unwrap().current();
    let plan = Plan::Approved(run.plan.clone());
    [
        ("plan", serde_json::to_value(plan).unwrap()),
        ("execution", serde_json::to_value(&run.execution).unwrap()),
        ("task", serde_json::to_value(&run.tasks[0]).unwrap()),
    ]
}

fn read(kind: &str, text: &str) -> Result<(), DocumentError> {
    match kind {
        "plan" => Plan::from_json(text).map(drop),
        "execution" => Execution::from_json(text).map(drop),
        _ => Task::from_json(text).map(drop),
    }
}

#[track_caller]
fn check_refused(kind: &str, doc: &serde_json::Value, expected: &str) {
    let err = read(kind, &doc.to_string()).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with(expected),
        "{kind}: {message:?} should start with {expected:?}"
    );
}

#[test]
fn the_documents_read_back() {
    for (kind, doc) in documents() {
        read(kind, &doc.to_string()).unwrap();
    }
}

#[test]
fn unknown_fields_are_refused() {
    for (kind, mut doc) in documents() {
        doc["colour"] = "blue".into();
        check_refused(kind, &doc, "unknown field `colour`");
    }
    // Nested too: in a step, and in the execution's info.
    let [(_, mut plan), (_, mut execution), _] = documents();
    plan["content"]["steps"][0]["retries"] = 3.into();
    check_refused("plan", &plan, "unknown field `retries`");
    execution["info"]["owner"] = "me".into();
    check_refused("execution", &execution, "unknown field `owner`");
}

#[test]
fn unknown_tags_are_refused() {
    let [(_, mut plan), (_, mut execution), (_, mut task)] = documents();
    plan["stage"] = "archived".into();
    check_refused(
        "plan",
        &plan,
        "unknown variant `archived`, expected one of `draft`, `proposal`, `approved`, `rejected`",
    );
    execution["stage"] = "paused".into();
    check_refused(
        "execution",
        &execution,
        "unknown variant `paused`, expected one of `pending`, `running`, `completed`, `failed`, `stopped`",
    );
    task["status"] = "blocked".into();
    check_refused(
        "task",
        &task,
        "unknown variant `blocked`, expected one of `pending`, `running`, `completed`, `failed`, `skipped`",
    );
    let [(_, mut plan), ..] = documents();
    plan["history"][0]["event"] = "forked".into();
    check_refused(
        "plan",
        &plan,
        "unknown variant `forked`, expected `submitted` or `changes_requested`",
    );
}

#[test]
fn other_format_versions_are_refused() {
    for (kind, mut doc) in documents() {
        doc["format_version"] = 2.into();
        check_refused(
            kind,
            &doc,
            &format!(
                "unsupported format_version 2 of this {kind} document: this orca reads version 1"
            ),
        );
        doc["format_version"] = "1".into();
        check_refused(
            kind,
            &doc,
            &format!(
                "unsupported format_version \"1\" of this {kind} document: this orca reads version 1"
            ),
        );
        doc.as_object_mut().unwrap().remove("format_version");
        check_refused(
            kind,
            &doc,
            &format!("missing field `format_version`: this is not an orca {kind} document"),
        );
    }
}

#[test]
fn a_newer_document_gets_the_version_error_not_a_field_error() {
    // A future orca may add fields; the reader must say "newer version", not "unknown field".
    for (kind, mut doc) in documents() {
        doc["format_version"] = 2.into();
        doc["added_in_v2"] = true.into();
        check_refused(kind, &doc, "unsupported format_version 2");
    }
}

#[test]
fn the_strategies_reach_every_stage_and_status() {
    use std::collections::BTreeSet;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut stages = BTreeSet::new();
    let mut statuses = BTreeSet::new();
    let mut waiting = 0;
    for _ in 0..300 {
        let run = strategy::run(4).new_tree(&mut runner).unwrap().current();
        stages.insert(run.execution.stage().to_string());
        statuses.extend(run.tasks.iter().map(|t| t.status().to_string()));
        waiting += usize::from(run.execution.decision().is_some());
    }
    assert_eq!(stages.len(), 5, "{stages:?}");
    assert_eq!(statuses.len(), 5, "{statuses:?}");
    assert!(waiting > 0);
    let mut plan_stages = BTreeSet::new();
    for _ in 0..100 {
        plan_stages.insert(
            strategy::plan(3)
                .new_tree(&mut runner)
                .unwrap()
                .current()
                .stage()
                .to_string(),
        );
    }
    assert_eq!(plan_stages.len(), 4, "{plan_stages:?}");
}

// A plan is read in one pass (`plan/wire.rs`), not through serde's buffered tagged enum: each
// stage still holds its own fields and no other stage's.
#[test]
fn a_plan_holds_its_stage_fields_and_no_others() {
    let [(_, approved), ..] = documents();
    assert_eq!(
        approved["stage"], "approved",
        "the fixture is an approved plan"
    );
    let approval = approved["approval"].clone();

    let mut no_approval = approved.clone();
    no_approval.as_object_mut().unwrap().remove("approval");
    check_refused("plan", &no_approval, "missing field `approval`");

    let mut draft_approved = approved.clone();
    draft_approved["stage"] = "draft".into();
    check_refused("plan", &draft_approved, "unknown field `approval`");

    let mut rejected = no_approval.clone();
    rejected["stage"] = "rejected".into();
    check_refused("plan", &rejected, "missing field `rejection`");
    rejected["rejection"] = serde_json::json!({ "at": approval["at"], "by": "me" });
    read("plan", &rejected.to_string()).unwrap();
    rejected["approval"] = approval;
    check_refused("plan", &rejected, "unknown field `approval`");

    let mut draft = no_approval;
    draft["stage"] = "draft".into();
    read("plan", &draft.to_string()).unwrap();
    draft.as_object_mut().unwrap().remove("stage");
    check_refused("plan", &draft, "missing field `stage`");
}
