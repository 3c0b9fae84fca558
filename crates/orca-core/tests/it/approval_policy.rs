//! Approval policies: each attribute a rule matches on, and the count's two guarantees as
//! properties — it never approves with fewer than `n` distinct eligible approvers who are not
//! the requester, and a rejection by a required approver always rejects.
//!
//! `cargo test -p orca-core --test it approval_policy:: -- --nocapture` prints the counts.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;

use orca_core::policy::{
    ApproverName, Outcome, PlanFacts, Policy, Requirement, Verdict, Vote, tally,
};
use orca_core::{AgentId, Budget, Isolation, PlanContent, Step, StepId};
use proptest::prelude::*;
use serde_json::json;

fn name(n: &str) -> ApproverName {
    n.parse().unwrap()
}

fn policy(rules: serde_json::Value) -> Policy {
    let p: Policy = serde_json::from_value(json!({
        "format_version": 1,
        "approvers": {"alice": "ed25519:aa", "bob": "ed25519:bb", "carol": "ed25519:cc"},
        "rule": rules,
    }))
    .unwrap();
    p.validate().unwrap();
    p
}

fn step(id: &str, agent: &str) -> Step {
    Step::new(
        StepId::parse(id).unwrap(),
        AgentId::parse(agent).unwrap(),
        "a step",
    )
}

fn content(steps: Vec<Step>) -> PlanContent {
    PlanContent {
        goal: "g".into(),
        steps,
        assumptions: vec!["a".into()],
        risks: vec!["r".into()],
        verification: vec!["v".into()],
        ..PlanContent::default()
    }
}

/// The rule names `when` matches in `content` (in `project`, with `backends`).
#[track_caller]
fn matched(
    when: serde_json::Value,
    content: &PlanContent,
    project: &str,
    backends: &[&str],
) -> bool {
    let p = policy(json!([{ "name": "r", "require": 1, "when": when }]));
    let backends: BTreeSet<String> = backends.iter().map(|b| (*b).to_owned()).collect();
    let reqs = p.requirements(&PlanFacts {
        content,
        project: Some(project),
        backends: &backends,
        isolation_fallback: None,
    });
    reqs.iter().any(|r| r.rule == "r")
}

#[test]
fn each_attribute_matches_what_the_plan_declares_and_only_that() {
    let mut plain = step("a", "coder");
    plain.writes = vec!["docs/readme.md".into()];
    let mut plain = content(vec![plain]);
    plain.budget = Some(Budget {
        max_cost_micro_usd: Some(2_000_000),
        ..Budget::UNLIMITED
    });
    let mut risky = step("b", "shell");
    risky.writes = vec!["infra/prod/main.tf".into()];
    risky.env = vec!["AWS_SECRET_ACCESS_KEY".into()];
    risky.isolation = Some(Isolation::Worktree);
    let mut risky = content(vec![risky]);
    risky.budget = Some(Budget {
        max_cost_micro_usd: Some(50_000_000),
        ..Budget::UNLIMITED
    });
    let cases = [
        (json!({"writes": ["infra/**"]}), "writes"),
        (json!({"agents": ["shell"]}), "agents"),
        (json!({"backends": ["anthropic"]}), "backends"),
        (json!({"env": ["AWS_SECRET_ACCESS_KEY"]}), "env"),
        (json!({"budget_above_usd": 10.0}), "budget"),
        (json!({"isolation": "worktree"}), "isolation"),
        (json!({"project": ["payments"]}), "project"),
    ];
    let mut hits = 0;
    for (when, what) in &cases {
        let on_risky = matched(when.clone(), &risky, "payments", &["anthropic"]);
        let on_plain = matched(when.clone(), &plain, "docs-site", &["openai"]);
        assert!(on_risky, "{what} did not match the plan that declares it");
        assert!(!on_plain, "{what} matched a plan that does not declare it");
        hits += 1;
    }
    // A plan without a cost ceiling is above every limit; one below the limit is not.
    let mut cheap = plain.clone();
    cheap.budget = Some(Budget {
        max_cost_micro_usd: Some(1_000_000),
        ..Budget::UNLIMITED
    });
    assert!(!matched(
        json!({"budget_above_usd": 10.0}),
        &cheap,
        "p",
        &[]
    ));
    let mut unbounded = plain.clone();
    unbounded.budget = None;
    assert!(matched(
        json!({"budget_above_usd": 10.0}),
        &unbounded,
        "p",
        &[]
    ));
    // Every condition must hold.
    assert!(!matched(
        json!({"writes": ["infra/**"], "project": ["other"]}),
        &risky,
        "payments",
        &[]
    ));
    // No rule matching: one approval from any approver.
    let p = policy(json!([{ "name": "r", "require": 2, "when": {"agents": ["shell"]} }]));
    let reqs = p.requirements(&PlanFacts {
        content: &plain,
        project: None,
        backends: &BTreeSet::new(),
        isolation_fallback: None,
    });
    assert_eq!(reqs.len(), 1);
    assert_eq!((reqs[0].rule.as_str(), reqs[0].need), ("default", 1));
    println!(
        "{hits} of {} attributes matched the plan declaring them and not the other",
        cases.len()
    );
}

#[test]
fn inconsistent_policies_are_refused_naming_the_rule() {
    let base = |rule: serde_json::Value| {
        serde_json::from_value::<Policy>(json!({
            "format_version": 1, "approvers": {"alice": "ed25519:aa", "bob": "ed25519:bb"},
            "rule": [rule],
        }))
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string()
    };
    let cases = [
        (json!({"name": "r", "require": 3}), "cannot be met"),
        (json!({"name": "r", "require": 0}), "cannot be met"),
        (
            json!({"name": "r", "require": 1, "from": ["mallory"]}),
            "not one of the approvers",
        ),
        (
            json!({"name": "r", "require": 1, "when": {"writes": ["/etc"]}}),
            "when.writes",
        ),
        (
            json!({"name": "r", "require": 1, "escalate_to": ["bob"]}),
            "go together",
        ),
        (json!({"name": "default", "require": 1}), "unique"),
    ];
    for (rule, expected) in cases {
        let e = base(rule.clone());
        assert!(e.contains("rule `") && e.contains(expected), "{rule}: {e}");
    }
    // Unknown fields are errors, not ignored.
    assert!(
        serde_json::from_value::<Policy>(json!({
            "format_version": 1, "approvers": {}, "rules": []
        }))
        .is_err()
    );
}

const NAMES: [&str; 5] = ["alice", "bob", "carol", "dave", "erin"];

fn requirement_strategy() -> impl Strategy<Value = Vec<Requirement>> {
    prop::collection::vec(
        (
            1u32..4,
            prop::collection::btree_set(0usize..5, 1..5),
            prop::collection::btree_set(0usize..5, 0..3),
        ),
        1..4,
    )
    .prop_map(|rules| {
        rules
            .into_iter()
            .enumerate()
            .map(|(i, (need, from, esc))| Requirement {
                rule: format!("r{i}"),
                because: Vec::new(),
                need,
                from: from.into_iter().map(|j| name(NAMES[j])).collect(),
                escalate_to: esc.into_iter().map(|j| name(NAMES[j])).collect(),
                expire_after_secs: None,
                remind_before_secs: None,
                escalate_after_secs: None,
            })
            .collect()
    })
}

fn votes_strategy() -> impl Strategy<Value = Vec<Vote>> {
    prop::collection::vec((0usize..5, prop::bool::weighted(0.15)), 0..12).prop_map(|v| {
        v.into_iter()
            .map(|(j, reject)| Vote {
                approver: name(NAMES[j]),
                verdict: if reject {
                    Verdict::Reject
                } else {
                    Verdict::Approve
                },
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn never_approved_with_fewer_than_n_distinct_eligible_non_requesters(
        reqs in requirement_strategy(),
        votes in votes_strategy(),
        requester in prop::option::of(0usize..5),
        escalated in prop::collection::btree_set(0usize..4, 0..3),
    ) {
        let requester = requester.map(|j| name(NAMES[j]));
        let escalated: BTreeSet<String> = escalated.into_iter().map(|i| format!("r{i}")).collect();
        let t = tally(&reqs, requester.as_ref(), &votes, &escalated);
        if t.outcome == Outcome::Approved {
            for r in &reqs {
                let mut eligible = r.from.clone();
                if escalated.contains(&r.rule) {
                    eligible.extend(r.escalate_to.iter().cloned());
                }
                let approvers: BTreeSet<&ApproverName> = votes
                    .iter()
                    .filter(|v| v.verdict == Verdict::Approve)
                    .map(|v| &v.approver)
                    .filter(|a| eligible.contains(*a) && Some(*a) != requester.as_ref())
                    .collect();
                prop_assert!(approvers.len() >= r.need as usize,
                    "rule {} approved with {} of {}", r.rule, approvers.len(), r.need);
            }
        }
    }

    #[test]
    fn a_rejection_by_a_required_approver_always_rejects(
        reqs in requirement_strategy(),
        mut votes in votes_strategy(),
        who in 0usize..5,
        at in 0usize..12,
    ) {
        // Someone a rule requires.
        let required: Vec<&ApproverName> = reqs.iter().flat_map(|r| &r.from).collect();
        let rejecter = required[who % required.len()].clone();
        let at = at.min(votes.len());
        votes.insert(at, Vote { approver: rejecter, verdict: Verdict::Reject });
        let t = tally(&reqs, None, &votes, &BTreeSet::new());
        prop_assert!(matches!(t.outcome, Outcome::Rejected { .. }), "{:?}", t.outcome);
    }
}

#[test]
fn the_requester_and_repeated_approvals_do_not_count() {
    let reqs = vec![Requirement {
        rule: "r".into(),
        because: Vec::new(),
        need: 2,
        from: ["alice", "bob", "carol"].into_iter().map(name).collect(),
        escalate_to: BTreeSet::new(),
        expire_after_secs: None,
        remind_before_secs: None,
        escalate_after_secs: None,
    }];
    let vote = |n: &str| Vote {
        approver: name(n),
        verdict: Verdict::Approve,
    };
    let t = tally(
        &reqs,
        Some(&name("alice")),
        &[vote("alice"), vote("bob"), vote("bob")],
        &BTreeSet::new(),
    );
    assert_eq!(t.outcome, Outcome::Pending);
    assert_eq!(
        t.rules[0].summary(),
        "needs 2 of {bob, carol}; 1 given (bob)"
    );
    let t = tally(
        &reqs,
        Some(&name("alice")),
        &[vote("bob"), vote("carol")],
        &BTreeSet::new(),
    );
    assert_eq!(t.outcome, Outcome::Approved);
}

/// Without attested surroundings every rule that could match counts: for each condition on the
/// surroundings (backend, isolation by default, project) and every surroundings tried, a rule
/// matched with them is matched unattested; a condition on the content alone is not widened.
#[test]
fn unattested_surroundings_never_need_less() {
    let mut writer = step("a", "coder");
    writer.writes = vec!["infra/main.tf".into()];
    let plan = content(vec![writer]);
    let rules = json!([
        { "name": "backend", "require": 2, "when": { "backends": ["openai"] } },
        { "name": "worktree", "require": 2, "when": { "isolation": "worktree" } },
        { "name": "in-place", "require": 2, "when": { "isolation": "in_place" } },
        { "name": "project", "require": 2, "when": { "project": ["prod"] } },
        { "name": "env", "require": 3, "when": { "env": ["AWS_SECRET"] } },
    ]);
    let p = policy(rules);
    let unattested: BTreeSet<String> = p
        .requirements_unattested(&plan)
        .into_iter()
        .map(|r| r.rule)
        .collect();
    let mut tried = 0;
    for project in ["prod", "dev"] {
        for backends in [vec!["openai"], vec!["ollama"], vec![]] {
            for fallback in [None, Some(Isolation::Worktree), Some(Isolation::InPlace)] {
                let backends: BTreeSet<String> = backends.iter().map(|b| (*b).to_owned()).collect();
                let seen = p.requirements(&PlanFacts {
                    content: &plan,
                    project: Some(project),
                    backends: &backends,
                    isolation_fallback: fallback,
                });
                tried += 1;
                for r in seen.iter().filter(|r| r.rule != "default") {
                    assert!(
                        unattested.contains(&r.rule),
                        "{} with {project} {backends:?} {fallback:?}",
                        r.rule
                    );
                }
            }
        }
    }
    println!(
        "unattested surroundings: rules counted {unattested:?}; {tried} surroundings tried, none needed a rule the unattested count left out"
    );
    assert!(
        !unattested.contains("env"),
        "a condition on the content alone is not widened"
    );
    assert!(unattested.contains("backend") && unattested.contains("project"));
}
