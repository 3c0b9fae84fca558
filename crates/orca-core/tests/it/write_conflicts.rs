//! Declared writes: for random DAGs with random write sets and locks, validation reports a write
//! conflict for a pair of steps **iff** the two can run at the same time (no dependency path
//! either way), share no lock, and some path is written by both.
//!
//! The oracle is independent of the implementation: reachability by its own search, and overlap
//! by enumerating every path over the segments `a` / `b` up to six deep and matching it against
//! both patterns. That enumeration is complete for the pattern alphabet used here: every segment
//! pattern (`a`, `b`, `*`, `a*`, `?`) that meets another meets it on `a` or `b`, and a common path
//! needs at most one segment per non-`**` segment of the two patterns (three each).
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;

use orca_core::writes::WritePattern;
use orca_core::{AgentId, PlanContent, Problem, Step, StepId};
use proptest::prelude::*;

const SEGMENTS: &[&str] = &["a", "b", "*", "**", "a*", "?"];
const LOCKS: &[&str] = &["db", "site"];

#[derive(Debug, Clone)]
struct RandomStep {
    deps: Vec<usize>,
    locks: Vec<&'static str>,
    writes: Vec<String>,
}

fn pattern() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(SEGMENTS), 1..=3).prop_map(|s| s.join("/"))
}

fn plan() -> impl Strategy<Value = Vec<RandomStep>> {
    (2usize..=6).prop_flat_map(|n| {
        (0..n)
            .map(|i| {
                (
                    prop::collection::vec(any::<bool>(), i),
                    prop::collection::vec(any::<bool>(), LOCKS.len()),
                    prop::collection::vec(pattern(), 0..=2),
                )
                    .prop_map(|(dep_bits, lock_bits, writes)| RandomStep {
                        deps: dep_bits
                            .iter()
                            .enumerate()
                            .filter(|(_, b)| **b)
                            .map(|(j, _)| j)
                            .collect(),
                        locks: LOCKS
                            .iter()
                            .zip(lock_bits)
                            .filter(|(_, b)| *b)
                            .map(|(l, _)| *l)
                            .collect(),
                        writes,
                    })
            })
            .collect::<Vec<_>>()
    })
}

fn id(i: usize) -> StepId {
    StepId::parse(&format!("s{i}")).unwrap()
}

fn content(steps: &[RandomStep]) -> PlanContent {
    let shell = AgentId::parse("shell").unwrap();
    let steps = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Step::new(id(i), shell.clone(), format!("step {i}"))
                .with_command("true")
                .with_depends_on(s.deps.iter().map(|d| id(*d)))
                .with_locks(s.locks.iter().copied())
                .with_writes(s.writes.iter().cloned())
        })
        .collect();
    PlanContent {
        goal: "write things".to_owned(),
        summary: None,
        steps,
        assumptions: vec!["a".to_owned()],
        risks: vec!["r".to_owned()],
        verification: vec!["v".to_owned()],
        checks: Vec::new(),
        isolation: None,
        budget: None,
    }
}

/// Every path over `a` / `b`, one to six segments deep.
fn all_paths() -> Vec<String> {
    let mut out = Vec::new();
    let mut layer = vec![String::new()];
    for _ in 0..6 {
        let mut next = Vec::new();
        for prefix in &layer {
            for seg in ["a", "b"] {
                let path = if prefix.is_empty() {
                    seg.to_owned()
                } else {
                    format!("{prefix}/{seg}")
                };
                out.push(path.clone());
                next.push(path);
            }
        }
        layer = next;
    }
    out
}

fn reaches(steps: &[RandomStep], from: usize, to: usize) -> bool {
    let mut stack = vec![from];
    let mut seen = BTreeSet::new();
    while let Some(n) = stack.pop() {
        if n == to {
            return true;
        }
        if seen.insert(n) {
            stack.extend(steps[n].deps.iter().copied());
        }
    }
    false
}

fn expected_conflicts(steps: &[RandomStep], paths: &[String]) -> BTreeSet<(usize, usize)> {
    let mut out = BTreeSet::new();
    for i in 0..steps.len() {
        for j in i + 1..steps.len() {
            if reaches(steps, i, j) || reaches(steps, j, i) {
                continue;
            }
            if steps[i].locks.iter().any(|l| steps[j].locks.contains(l)) {
                continue;
            }
            let patterns = |k: usize| -> Vec<WritePattern> {
                steps[k]
                    .writes
                    .iter()
                    .map(|w| WritePattern::parse(w).unwrap())
                    .collect()
            };
            let (pi, pj) = (patterns(i), patterns(j));
            let shared = paths.iter().any(|path| {
                pi.iter().any(|p| p.matches(path)) && pj.iter().any(|p| p.matches(path))
            });
            if shared {
                out.insert((i, j));
            }
        }
    }
    out
}

fn reported_conflicts(content: &PlanContent) -> BTreeSet<(usize, usize)> {
    let agents: BTreeSet<AgentId> = [AgentId::parse("shell").unwrap()].into_iter().collect();
    let index = |s: &StepId| s.as_str()[1..].parse::<usize>().unwrap();
    content
        .validate(&agents)
        .into_iter()
        .filter_map(|p| match p {
            Problem::WriteConflict { first, second, .. } => Some((index(&first), index(&second))),
            Problem::InvalidWrite { .. } => panic!("generated patterns are valid: {p}"),
            _ => None,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_conflict_is_reported_iff_concurrent_steps_share_a_path_without_a_lock(steps in plan()) {
        let paths = all_paths();
        let content = content(&steps);
        prop_assert_eq!(reported_conflicts(&content), expected_conflicts(&steps, &paths));
    }
}

#[test]
fn the_message_names_both_steps_the_pattern_and_the_fix() {
    let steps = vec![
        RandomStep {
            deps: vec![],
            locks: vec![],
            writes: vec!["src/api/**".to_owned()],
        },
        RandomStep {
            deps: vec![],
            locks: vec![],
            writes: vec!["src/**".to_owned()],
        },
    ];
    let agents: BTreeSet<AgentId> = [AgentId::parse("shell").unwrap()].into_iter().collect();
    let problems: Vec<String> = content(&steps)
        .validate(&agents)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        problems,
        [
            "steps `s0` and `s1` can run at the same time and both write `src/api/**` and \
          `src/**`: make one depend on the other, or give both the same lock"
        ]
    );
}

#[test]
fn a_dependency_or_a_shared_lock_resolves_the_conflict() {
    let agents: BTreeSet<AgentId> = [AgentId::parse("shell").unwrap()].into_iter().collect();
    let write = |deps: Vec<usize>, locks: Vec<&'static str>| RandomStep {
        deps,
        locks,
        writes: vec!["Cargo.toml".to_owned()],
    };
    for steps in [
        vec![write(vec![], vec![]), write(vec![0], vec![])],
        vec![write(vec![], vec!["db"]), write(vec![], vec!["db"])],
    ] {
        assert!(content(&steps).validate(&agents).is_empty());
    }
    let bad = vec![
        write(vec![], vec![]),
        RandomStep {
            deps: vec![],
            locks: vec![],
            writes: vec!["/etc/passwd".to_owned()],
        },
    ];
    assert_eq!(
        content(&bad)
            .validate(&agents)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "step `s1`: `writes` pattern \"/etc/passwd\": it is absolute; declare paths relative to the project"
        ]
    );
}
