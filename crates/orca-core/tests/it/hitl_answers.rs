//! The human's answer is matched exactly against the fixed options, never interpreted.
//! One `check` per case: the answer (action and optional context) and the decision or error.

use orca_core::*;

fn deviation() -> DecisionRequest {
    DecisionRequest::Deviation {
        step_id: StepId::parse("code").unwrap_or_else(|e| panic!("{e}")),
        attempts: 3,
        failure: TaskFailure::new(ErrorCode::AgentError, "broke"),
    }
}

fn interruption() -> DecisionRequest {
    DecisionRequest::Interruption {
        step_id: StepId::parse("code").unwrap_or_else(|e| panic!("{e}")),
        reason: "unsure".into(),
        question: Some("which one?".into()),
    }
}

/// `expected` is the decision as JSON, or the error message.
#[track_caller]
fn check(request: &DecisionRequest, action: &str, context: Option<&str>, expected: &str) {
    let answer = HumanAnswer {
        action: action.into(),
        context: context.map(str::to_owned),
    };
    let got = match Decision::from_answer(request, &answer) {
        Ok(decision) => serde_json::to_string(&decision).unwrap_or_else(|e| panic!("{e}")),
        Err(e) => e.to_string(),
    };
    assert_eq!(got, expected, "{action:?} {context:?}");
}

#[test]
fn deviation_answers() {
    let r = &deviation();
    check(r, "retry", None, r#"{"action":"retry"}"#);
    check(
        r,
        "Retry",
        Some("  use the v2 API "),
        r#"{"action":"retry","guidance":"use the v2 API"}"#,
    );
    check(r, " retry ", Some("   "), r#"{"action":"retry"}"#);
    check(
        r,
        "replan",
        Some("smaller steps"),
        r#"{"action":"replan","guidance":"smaller steps"}"#,
    );
    check(r, "Stop", Some("ignored"), r#"{"action":"stop"}"#);
    check(
        r,
        "RETRY",
        None,
        "`RETRY` is not one of the options: retry, replan, stop",
    );
    check(
        r,
        "retry please",
        None,
        "`retry please` is not one of the options: retry, replan, stop",
    );
    check(
        r,
        "yes",
        None,
        "`yes` is not one of the options: retry, replan, stop",
    );
    check(
        r,
        "approve",
        None,
        "`approve` is not one of the options: retry, replan, stop",
    );
    check(
        r,
        "answer",
        Some("x"),
        "`answer` is not one of the options: retry, replan, stop",
    );
    check(
        r,
        "",
        None,
        "`` is not one of the options: retry, replan, stop",
    );
}

#[test]
fn interruption_answers() {
    let r = &interruption();
    check(
        r,
        "answer",
        Some("the first"),
        r#"{"action":"answer","text":"the first"}"#,
    );
    check(
        r,
        "Answer",
        Some(" the first "),
        r#"{"action":"answer","text":"the first"}"#,
    );
    check(
        r,
        "answer",
        None,
        "`answer without text` is not one of the options: answer (with the answer's text), stop",
    );
    check(
        r,
        "answer",
        Some(" "),
        "`answer without text` is not one of the options: answer (with the answer's text), stop",
    );
    check(r, "stop", None, r#"{"action":"stop"}"#);
    check(
        r,
        "retry",
        None,
        "`retry` is not one of the options: answer, stop",
    );
}

#[test]
fn plan_approval_answers() {
    #[track_caller]
    fn approval(answer: &str, expected: Option<ApprovalAction>) {
        assert_eq!(
            match_action::<ApprovalAction>(answer).ok(),
            expected,
            "{answer:?}"
        );
    }
    approval("approve", Some(ApprovalAction::Approve));
    approval("Approve", Some(ApprovalAction::Approve));
    approval("request_changes", Some(ApprovalAction::RequestChanges));
    approval("Request changes", Some(ApprovalAction::RequestChanges));
    approval("reject", Some(ApprovalAction::Reject));
    approval("request changes", None);
    approval("Request Changes", None);
    approval("approved", None);
    approval("ok", None);
    approval("y", None);
}

#[test]
fn the_touchpoints_offer_their_fixed_options() {
    let keys = |q: &TwoQuestion| {
        q.action
            .options
            .iter()
            .map(|o| o.key.clone())
            .collect::<Vec<_>>()
    };
    let q = hitl::two_question::<ApprovalAction>(Touchpoint::PlanApproval, "h".into(), "p");
    assert_eq!(keys(&q), ["approve", "request_changes", "reject"]);
    let q = hitl::two_question::<DeviationAction>(Touchpoint::Deviation, "h".into(), "p");
    assert_eq!(keys(&q), ["retry", "replan", "stop"]);
    let q = hitl::two_question::<InterruptionAction>(Touchpoint::Interruption, "h".into(), "p");
    assert_eq!(keys(&q), ["answer", "stop"]);
    assert_eq!(deviation().option_keys(), ["retry", "replan", "stop"]);
    assert_eq!(interruption().option_keys(), ["answer", "stop"]);
    assert_eq!(deviation().touchpoint(), Touchpoint::Deviation);
    assert_eq!(interruption().touchpoint(), Touchpoint::Interruption);
}
