//! `isolation::worktree_dependencies` (ADR 0017): the results an isolated step's worktree
//! starts from — its direct dependencies in plan order, an in-place one replaced by its own.

#![expect(clippy::unwrap_used, reason = "tests")]

use orca_core::isolation::worktree_dependencies;
use orca_core::{AgentId, Isolation, PlanContent, Step, StepId};

fn id(s: &str) -> StepId {
    StepId::parse(s).unwrap()
}

/// Steps `(id, deps, isolated)`; `deps: None` is "after the previous step".
fn plan(steps: &[(&str, Option<&[&str]>, bool)]) -> PlanContent {
    let shell = AgentId::parse("shell").unwrap();
    let steps = steps
        .iter()
        .map(|(s, deps, isolated)| {
            let mut step = Step::new(id(s), shell.clone(), format!("step {s}"));
            if let Some(deps) = deps {
                step = step.with_depends_on(deps.iter().map(|d| id(d)));
            }
            step.isolation = Some(if *isolated {
                Isolation::Worktree
            } else {
                Isolation::InPlace
            });
            step
        })
        .collect();
    PlanContent {
        goal: "g".to_owned(),
        summary: None,
        steps,
        assumptions: vec![],
        risks: vec![],
        verification: vec![],
        checks: Vec::new(),
        isolation: None,
        budget: None,
    }
}

fn names(v: &[StepId]) -> Vec<&str> {
    v.iter().map(StepId::as_str).collect()
}

#[test]
fn direct_dependencies_in_plan_order_never_unrelated_steps() {
    // a, b roots; c after a only; d after c and a, named out of plan order.
    let p = plan(&[
        ("a", Some(&[]), true),
        ("b", Some(&[]), true),
        ("c", Some(&["a"]), true),
        ("d", Some(&["c", "a"]), true),
    ]);
    assert!(worktree_dependencies(&p, 0, None).is_empty());
    assert_eq!(names(&worktree_dependencies(&p, 2, None)), ["a"]);
    assert_eq!(names(&worktree_dependencies(&p, 3, None)), ["a", "c"]);
}

#[test]
fn omitted_depends_on_means_the_previous_step() {
    let p = plan(&[("a", None, true), ("b", None, true)]);
    assert_eq!(names(&worktree_dependencies(&p, 1, None)), ["a"]);
}

#[test]
fn an_in_place_dependency_is_replaced_by_its_own() {
    // a (worktree) → b (in place) → c (worktree); x (in place, root) → c.
    let p = plan(&[
        ("a", Some(&[]), true),
        ("b", Some(&["a"]), false),
        ("x", Some(&[]), false),
        ("c", Some(&["b", "x"]), true),
    ]);
    assert_eq!(names(&worktree_dependencies(&p, 3, None)), ["a"]);
}
