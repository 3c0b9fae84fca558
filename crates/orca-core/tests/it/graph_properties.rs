//! Properties of the step graph helpers over generated (valid, acyclic) plans.

use orca_core::graph;
use orca_core::strategy;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_graph_helpers_agree(content in strategy::plan_content(10)) {
        let steps = &content.steps;
        let deps = graph::dependency_indices(steps);
        // Generated plans only point backwards, so they are acyclic.
        prop_assert!(graph::cycles(&deps).is_empty());
        let order = graph::topological_order(&deps).expect("acyclic");
        prop_assert_eq!(order.len(), steps.len());
        let position = |i: usize| order.iter().position(|&x| x == i).unwrap_or(usize::MAX);
        for (i, ds) in deps.iter().enumerate() {
            for &d in ds {
                prop_assert!(position(d) < position(i), "{} must come before {}", d, i);
            }
        }
        // Ancestors and transitive dependents are the same relation, seen from both ends.
        for i in 0..steps.len() {
            for j in 0..steps.len() {
                let downstream = graph::transitive_dependents(steps, i).contains(&j);
                let upstream = graph::ancestors(&deps, j).contains(&i);
                prop_assert_eq!(downstream, upstream, "{} → {}", i, j);
            }
        }
        // The depth is the longest chain: at least 1, at most the number of steps, and a
        // step's depth exceeds each of its dependencies'.
        let depth = graph::depth(steps);
        prop_assert!(depth >= 1 && depth <= steps.len());
        let sequential = steps.iter().all(|s| s.depends_on.is_none());
        if sequential {
            prop_assert_eq!(depth, steps.len());
        }
        // Nothing is done: the ready steps are exactly the roots.
        let ready: Vec<usize> = content
            .ready_steps(&Default::default())
            .iter()
            .map(|s| content.position(&s.id).unwrap_or(usize::MAX))
            .collect();
        let roots: Vec<usize> = (0..steps.len()).filter(|&i| deps[i].is_empty()).collect();
        prop_assert_eq!(ready, roots);
    }
}

#[test]
fn cycles_are_found_whatever_the_entry_point() {
    // 0 → 1 → 2 → 0, plus 3 → 3 and 4 → 0 (outside any cycle).
    let deps = vec![vec![2], vec![0], vec![1], vec![3], vec![0]];
    assert_eq!(graph::cycles(&deps), vec![vec![0, 1, 2], vec![3]]);
    assert_eq!(graph::topological_order(&deps), None);
    assert_eq!(
        graph::cycles(&[vec![], vec![0], vec![0, 1]]),
        Vec::<Vec<usize>>::new()
    );
}

/// Resolution as it was first written (ordered map by name, duplicates dropped by name): the
/// hashed resolution must give the same answer on any plan, also a broken one (duplicate step
/// ids, unknown and repeated names).
fn reference_resolution(steps: &[orca_core::Step]) -> Vec<Vec<graph::Dep>> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut index = BTreeMap::new();
    for (i, s) in steps.iter().enumerate() {
        index.entry(&s.id).or_insert(i);
    }
    steps
        .iter()
        .enumerate()
        .map(|(i, step)| match &step.depends_on {
            None => i
                .checked_sub(1)
                .map(graph::Dep::Index)
                .into_iter()
                .collect(),
            Some(names) => {
                let mut seen = BTreeSet::new();
                names
                    .iter()
                    .filter(|n| seen.insert(*n))
                    .map(|n| {
                        index.get(n).map_or_else(
                            || graph::Dep::Unknown(n.clone()),
                            |&j| graph::Dep::Index(j),
                        )
                    })
                    .collect()
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn resolution_is_that_of_the_first_writer(
        plan in proptest::collection::vec(
            (0..6u8, proptest::option::of(proptest::collection::vec(0..9u8, 0..8))),
            0..10,
        )
    ) {
        let name = |n: u8| orca_core::StepId::parse(&format!("s{n}")).expect("a valid id");
        let agent = orca_core::AgentId::parse("coder").expect("a valid id");
        let steps: Vec<orca_core::Step> = plan
            .iter()
            .map(|(id, deps)| {
                let step = orca_core::Step::new(name(*id), agent.clone(), "do it");
                match deps {
                    // Names 6..9 are no step's: unknown.
                    Some(d) => step.with_depends_on(d.iter().map(|n| name(*n))),
                    None => step,
                }
            })
            .collect();
        prop_assert_eq!(graph::resolved_dependencies(&steps), reference_resolution(&steps));
    }
}
