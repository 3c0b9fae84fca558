//! A step's `env` (names of the variables it receives) is part of the approved content and its
//! digest, validated as names; plan text never holds a credential.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;

use orca_core::graph::{Problem, validate};
use orca_core::{AgentId, PlanContent, Step, StepId};

fn content(step: Step) -> PlanContent {
    PlanContent {
        goal: "ship".into(),
        steps: vec![step],
        assumptions: vec!["a".into()],
        risks: vec!["r".into()],
        verification: vec!["v".into()],
        ..PlanContent::default()
    }
}

fn step(command: &str) -> Step {
    Step::new(StepId::parse("s").unwrap(), AgentId::shell(), "do it").with_command(command)
}

fn agents() -> BTreeSet<AgentId> {
    [AgentId::shell()].into_iter().collect()
}

#[test]
fn env_is_part_of_the_digest_and_absent_when_empty() {
    let plain = content(step("gh release create"));
    let json = serde_json::to_string(&plain).unwrap();
    assert!(!json.contains("\"env\""), "an empty env is omitted: {json}");
    let mut named = plain.clone();
    named.steps[0].env = vec!["GITHUB_TOKEN".into()];
    assert_ne!(plain.digest(), named.digest());
    let back = PlanContent::from_json(&serde_json::to_string(&named).unwrap()).unwrap();
    assert_eq!(back.steps[0].env, ["GITHUB_TOKEN"]);
}

#[test]
fn env_entries_must_be_names() {
    let mut c = content(step("true"));
    c.steps[0].env = vec![
        "GITHUB_TOKEN".into(),
        "ghp_notaname=1".into(),
        "ORCA_STEP_ID".into(),
        "1X".into(),
    ];
    let problems = validate(&c, &agents());
    let bad: Vec<&str> = problems
        .iter()
        .filter_map(|p| match p {
            Problem::InvalidEnvName { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(bad, ["ghp_notaname=1", "ORCA_STEP_ID", "1X"]);
    // A value pasted by mistake is not repeated in the message.
    c.steps[0].env = vec!["ghp_abcdefghijklmnopqrstuvwxyz0123456789".into()];
    let problems = validate(&c, &agents());
    let text = problems[0].to_string();
    assert!(
        text.contains("looks like a secret") && !text.contains("abcdefghij"),
        "{text}"
    );
}

#[test]
fn credentials_in_plan_text_are_refused_variables_are_fine() {
    let refused = [
        "curl -H 'Authorization: Bearer abcdef123456' https://x",
        "git push https://me:hunter2hunter2@github.com/o/r",
        "echo sk-proj-abcdefghijklmnop",
        "GH=ghp_abcdefghijklmnopqrstuvwxyz0123456789 gh pr list",
        "aws --key AKIAABCDEFGHIJKLMNOP s3 ls",
    ];
    for command in refused {
        let problems = validate(&content(step(command)), &agents());
        assert!(
            problems.iter().any(
                |p| matches!(p, Problem::CredentialInPlan { field, .. } if field == "command")
            ),
            "{command}: {problems:?}"
        );
        for p in &problems {
            assert!(!p.to_string().contains("abcdef"), "{p}");
        }
    }
    let fine = [
        "curl -H \"Authorization: Bearer $TOKEN\" https://x",
        "git push https://me:$GITHUB_TOKEN@github.com/o/r",
        "echo 'reset the password: see the wiki'",
        "cargo test -p task-analysis",
    ];
    for command in fine {
        let problems = validate(&content(step(command)), &agents());
        assert!(problems.is_empty(), "{command}: {problems:?}");
    }
}
