//! Plan validation and the step graph.
//!
//! `depends_on` omitted means "after the previous step", `[]` makes a root, a list names the
//! edges. [`resolved_dependencies`] turns that into indices; [`validate`] reports every problem
//! of a plan at once, in a stable order.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::id::{AgentId, StepId};
use crate::plan::{PlanContent, Step};

/// One thing wrong with a plan. [`fmt::Display`] names the field and the step.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Problem {
    /// `goal` is empty.
    EmptyGoal,
    /// `steps` is empty.
    NoSteps,
    /// A required list (`assumptions`, `risks`, `verification`) is empty.
    EmptyList {
        /// The field.
        field: String,
    },
    /// A step has an empty description.
    EmptyDescription {
        /// The step.
        step: StepId,
    },
    /// Two steps share an id.
    DuplicateStep {
        /// The repeated id.
        step: StepId,
    },
    /// A step depends on a step that is not in the plan.
    UnknownDependency {
        /// The step.
        step: StepId,
        /// The missing dependency.
        dependency: StepId,
    },
    /// The dependencies form a cycle; the steps are named in plan order.
    Cycle {
        /// The steps of the cycle.
        steps: Vec<StepId>,
    },
    /// A step names an agent that is not available.
    UnknownAgent {
        /// The step.
        step: StepId,
        /// The unknown agent.
        agent: AgentId,
        /// A known agent whose name is a typo away.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        did_you_mean: Option<AgentId>,
    },
    /// A `shell` step without a command.
    MissingCommand {
        /// The step.
        step: StepId,
    },
    /// A step's `command` holds a NUL byte (no shell can run it).
    NulInCommand {
        /// The step.
        step: StepId,
    },
    /// A lock name that is empty or has surrounding whitespace.
    InvalidLock {
        /// The step.
        step: StepId,
        /// The lock as written.
        lock: String,
    },
    /// `max_attempts: 0`, `timeout_secs: 0` or a zero limit in the step's `budget`.
    ZeroLimit {
        /// The step.
        step: StepId,
        /// The field.
        field: String,
    },
    /// Plan text holds a credential (a key, a token, a private key, a URL password): an
    /// approved plan is stored and shown as written, so it must name a variable instead.
    CredentialInPlan {
        /// The step, if the text is a step's.
        step: Option<StepId>,
        /// The field.
        field: String,
    },
    /// An `env` entry that is not the name of an environment variable (or names one orca sets).
    InvalidEnvName {
        /// The step.
        step: StepId,
        /// The name as written.
        name: String,
    },
    /// A declared write pattern that is not a relative path pattern.
    InvalidWrite {
        /// The step.
        step: StepId,
        /// The pattern as written.
        pattern: String,
        /// What is wrong with it.
        reason: crate::writes::PatternError,
    },
    /// A check (of a step, or of the plan) that cannot run: an empty command, a NUL byte, a
    /// zero time limit.
    InvalidCheck {
        /// The step, if the check is a step's.
        step: Option<StepId>,
        /// Its 0-based position in `checks`.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// Two steps that can run at the same time (no dependency path between them) declare
    /// overlapping writes and share no lock.
    WriteConflict {
        /// The earlier step in plan order.
        first: StepId,
        /// Its pattern.
        first_pattern: String,
        /// The later step.
        second: StepId,
        /// Its pattern.
        second_pattern: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyGoal => f.write_str("`goal` is empty"),
            Self::NoSteps => f.write_str("`steps` is empty: a plan needs at least one step"),
            Self::EmptyList { field } => write!(f, "`{field}` is empty: list at least one"),
            Self::EmptyDescription { step } => write!(f, "step `{step}`: `description` is empty"),
            Self::DuplicateStep { step } => write!(f, "step id `{step}` is used more than once"),
            Self::UnknownDependency { step, dependency } => write!(
                f,
                "step `{step}`: `depends_on` names `{dependency}`, which is not a step of this plan"
            ),
            Self::Cycle { steps } => {
                f.write_str("the dependencies form a cycle: ")?;
                for (i, s) in steps.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" → ")?;
                    }
                    write!(f, "{s}")?;
                }
                if let Some(first) = steps.first() {
                    write!(f, " → {first}")?;
                }
                Ok(())
            }
            Self::UnknownAgent {
                step,
                agent,
                did_you_mean,
            } => {
                write!(f, "step `{step}`: unknown agent `{agent}`")?;
                match did_you_mean {
                    Some(known) => write!(f, " (did you mean `{known}`?)"),
                    None => Ok(()),
                }
            }
            Self::MissingCommand { step } => {
                write!(f, "step `{step}`: the `shell` agent needs a `command`")
            }
            Self::NulInCommand { step } => write!(
                f,
                "step `{step}`: `command` holds a NUL byte, which no shell can run"
            ),
            Self::InvalidLock { step, lock } => write!(
                f,
                "step `{step}`: lock {lock:?} must be non-empty without surrounding whitespace"
            ),
            Self::ZeroLimit { step, field } => {
                write!(f, "step `{step}`: `{field}` must be at least 1")
            }
            Self::CredentialInPlan { step, field } => {
                if let Some(step) = step {
                    write!(f, "step `{step}`: ")?;
                }
                write!(
                    f,
                    "`{field}` holds what looks like a credential; never write a secret into a plan: name its environment variable in the step's `env` (`\"env\": [\"GITHUB_TOKEN\"]`) and use `$GITHUB_TOKEN`"
                )
            }
            Self::InvalidEnvName { step, name } => {
                // A value pasted by mistake is not repeated.
                let shown = if crate::redact::looks_like_secret(name) {
                    "(what looks like a secret value)".to_owned()
                } else {
                    format!("{name:?}")
                };
                write!(
                    f,
                    "step `{step}`: `env` entry {shown} must be the NAME of an environment variable (letters, digits, `_`; not ORCA_*), never a value"
                )
            }
            Self::InvalidWrite {
                step,
                pattern,
                reason,
            } => write!(f, "step `{step}`: `writes` pattern {pattern:?}: {reason}"),
            Self::InvalidCheck {
                step,
                index,
                reason,
            } => {
                if let Some(step) = step {
                    write!(f, "step `{step}`: ")?;
                }
                write!(f, "`checks[{index}]`: {reason}")
            }
            Self::WriteConflict {
                first,
                first_pattern,
                second,
                second_pattern,
            } => {
                let what = if first_pattern == second_pattern {
                    format!("`{first_pattern}`")
                } else {
                    format!("`{first_pattern}` and `{second_pattern}`")
                };
                write!(
                    f,
                    "steps `{first}` and `{second}` can run at the same time and both write \
                     {what}: make one depend on the other, or give both the same lock"
                )
            }
        }
    }
}

/// A resolved dependency: a step index, or a name that matches no step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dep {
    /// The index of the step depended on.
    Index(usize),
    /// A name that is not a step of the plan.
    Unknown(StepId),
}

/// The dependencies of every step, in plan order, with the "after the previous step" default
/// applied. If two steps share an id, a name resolves to the first.
#[must_use]
pub fn resolved_dependencies(steps: &[Step]) -> Vec<Vec<Dep>> {
    // Hashed, and duplicates dropped by index (a known name has one index, and one index one
    // name): a plan of 800 steps and 120,000 edges resolves in a few ms, not a dozen.
    let mut index: std::collections::HashMap<&str, usize> =
        std::collections::HashMap::with_capacity(steps.len());
    for (i, s) in steps.iter().enumerate() {
        index.entry(s.id.as_str()).or_insert(i);
    }
    // `seen[j] == i + 1`: step j is already a dependency of step i.
    let mut seen = vec![0usize; steps.len()];
    steps
        .iter()
        .enumerate()
        .map(|(i, step)| match &step.depends_on {
            None => i.checked_sub(1).map(Dep::Index).into_iter().collect(),
            Some(names) => {
                let mut unknown: BTreeSet<&StepId> = BTreeSet::new();
                names
                    .iter()
                    .filter_map(|n| match index.get(n.as_str()) {
                        Some(&j) => {
                            let mark = seen.get_mut(j)?;
                            (*mark != i + 1).then(|| {
                                *mark = i + 1;
                                Dep::Index(j)
                            })
                        }
                        None => unknown.insert(n).then(|| Dep::Unknown(n.clone())),
                    })
                    .collect()
            }
        })
        .collect()
}

/// The dependency indices of every step (unknown names dropped).
#[must_use]
pub fn dependency_indices(steps: &[Step]) -> Vec<Vec<usize>> {
    resolved_dependencies(steps)
        .into_iter()
        .map(|deps| {
            deps.into_iter()
                .filter_map(|d| match d {
                    Dep::Index(i) => Some(i),
                    Dep::Unknown(_) => None,
                })
                .collect()
        })
        .collect()
}

/// The steps that depend on each step (the reverse edges), in plan order.
#[must_use]
pub fn dependents(steps: &[Step]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); steps.len()];
    for (i, deps) in dependency_indices(steps).into_iter().enumerate() {
        for d in deps {
            if let Some(list) = out.get_mut(d) {
                list.push(i);
            }
        }
    }
    out
}

/// Every step that depends on `root`, directly or not (not `root` itself), in plan order.
#[must_use]
pub fn transitive_dependents(steps: &[Step], root: usize) -> Vec<usize> {
    reachable(&dependents(steps), root)
}

/// Every step that `node` depends on, directly or not, in plan order.
#[must_use]
pub fn ancestors(deps: &[Vec<usize>], node: usize) -> Vec<usize> {
    reachable(deps, node)
}

/// Every node reached from `start` by following one or more `edges` (not `start` itself, even
/// on a cycle), in index order. Edges to nodes out of range are ignored.
fn reachable(edges: &[Vec<usize>], start: usize) -> Vec<usize> {
    let mut seen = vec![false; edges.len()];
    let mut stack = vec![start];
    while let Some(n) = stack.pop() {
        for &d in edges.get(n).map(Vec::as_slice).unwrap_or_default() {
            if let Some(flag) = seen.get_mut(d)
                && !*flag
            {
                *flag = true;
                stack.push(d);
            }
        }
    }
    seen.iter()
        .enumerate()
        .filter(|(i, s)| **s && *i != start)
        .map(|(i, _)| i)
        .collect()
}

/// The strongly connected components that are cycles (more than one step, or a self-loop),
/// each as step indices in plan order. Tarjan's algorithm, iterative.
#[must_use]
pub fn cycles(deps: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = deps.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<usize> = Vec::new();
    let mut next = 0usize;
    let mut out = Vec::new();

    for start in 0..n {
        if index[start] != usize::MAX {
            continue;
        }
        // (node, next edge to look at)
        let mut work: Vec<(usize, usize)> = vec![(start, 0)];
        index[start] = next;
        low[start] = next;
        next += 1;
        stack.push(start);
        on_stack[start] = true;
        while let Some(&mut (v, ref mut edge)) = work.last_mut() {
            let edges = &deps[v];
            if let Some(&w) = edges.get(*edge) {
                *edge += 1;
                if w >= n {
                    continue;
                }
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                work.pop();
                if let Some(&(parent, _)) = work.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    let self_loop = component.len() == 1 && deps[v].contains(&v);
                    if component.len() > 1 || self_loop {
                        component.sort_unstable();
                        out.push(component);
                    }
                }
            }
        }
    }
    out.sort();
    out
}

/// Every problem of a plan's content, in a stable order. `known_agents` is the set of agents
/// the caller can dispatch to.
#[must_use]
pub fn validate(content: &PlanContent, known_agents: &BTreeSet<AgentId>) -> Vec<Problem> {
    let mut problems = Vec::new();
    if content.goal.trim().is_empty() {
        problems.push(Problem::EmptyGoal);
    }
    if content.steps.is_empty() {
        problems.push(Problem::NoSteps);
    }
    for (field, list) in [
        ("assumptions", &content.assumptions),
        ("risks", &content.risks),
        ("verification", &content.verification),
    ] {
        if list.iter().all(|s| s.trim().is_empty()) {
            problems.push(Problem::EmptyList {
                field: field.to_owned(),
            });
        }
    }
    let mut seen = BTreeSet::new();
    let mut reported = BTreeSet::new();
    for (field, text) in [
        ("goal", Some(&content.goal)),
        ("summary", content.summary.as_ref()),
    ] {
        if text.is_some_and(|t| crate::redact::holds_credential(t)) {
            problems.push(Problem::CredentialInPlan {
                step: None,
                field: field.to_owned(),
            });
        }
    }
    check_problems(None, &content.checks, &mut problems);
    for step in &content.steps {
        for (field, text) in [
            ("command", step.command.as_deref()),
            ("description", Some(step.description.as_str())),
        ] {
            if text.is_some_and(crate::redact::holds_credential) {
                problems.push(Problem::CredentialInPlan {
                    step: Some(step.id.clone()),
                    field: field.to_owned(),
                });
            }
        }
        check_problems(Some(&step.id), &step.checks, &mut problems);
        if !seen.insert(&step.id) && reported.insert(&step.id) {
            problems.push(Problem::DuplicateStep {
                step: step.id.clone(),
            });
        }
    }
    let deps = resolved_dependencies(&content.steps);
    for (step, deps) in content.steps.iter().zip(&deps) {
        if step.description.trim().is_empty() {
            problems.push(Problem::EmptyDescription {
                step: step.id.clone(),
            });
        }
        if !known_agents.contains(&step.agent) {
            let did_you_mean = crate::suggest::closest(
                step.agent.as_str(),
                known_agents.iter().map(AgentId::as_str),
            )
            .and_then(|a| AgentId::parse(a).ok());
            problems.push(Problem::UnknownAgent {
                step: step.id.clone(),
                agent: step.agent.clone(),
                did_you_mean,
            });
        }
        if step.agent.as_str() == AgentId::SHELL
            && step.command.as_deref().is_none_or(|c| c.trim().is_empty())
        {
            problems.push(Problem::MissingCommand {
                step: step.id.clone(),
            });
        }
        if step.command.as_deref().is_some_and(|c| c.contains('\0')) {
            problems.push(Problem::NulInCommand {
                step: step.id.clone(),
            });
        }
        for dep in deps {
            if let Dep::Unknown(name) = dep {
                problems.push(Problem::UnknownDependency {
                    step: step.id.clone(),
                    dependency: name.clone(),
                });
            }
        }
        for lock in &step.locks {
            if lock.is_empty() || lock.trim() != lock {
                problems.push(Problem::InvalidLock {
                    step: step.id.clone(),
                    lock: lock.clone(),
                });
            }
        }
        for name in &step.env {
            if !crate::plan::is_env_name(name) || crate::redact::looks_like_secret(name) {
                problems.push(Problem::InvalidEnvName {
                    step: step.id.clone(),
                    name: name.clone(),
                });
            }
        }
        let b = step.budget.unwrap_or_default();
        for (field, zero) in [
            ("max_attempts", step.max_attempts == Some(0)),
            ("timeout_secs", step.timeout_secs == Some(0)),
            ("budget.max_tokens", b.max_tokens == Some(0)),
            ("budget.max_cost_micro_usd", b.max_cost_micro_usd == Some(0)),
            ("budget.max_turns", b.max_turns == Some(0)),
            ("budget.max_wall_secs", b.max_wall_secs == Some(0)),
        ] {
            if zero {
                problems.push(Problem::ZeroLimit {
                    step: step.id.clone(),
                    field: field.to_owned(),
                });
            }
        }
    }
    let indices = dependency_indices(&content.steps);
    problems.extend(crate::writes::conflicts(&content.steps, &indices));
    for cycle in cycles(&indices) {
        problems.push(Problem::Cycle {
            steps: cycle
                .into_iter()
                .filter_map(|i| content.steps.get(i).map(|s| s.id.clone()))
                .collect(),
        });
    }
    problems
}

/// The problems of `checks` (a step's, or the plan's when `step` is `None`).
fn check_problems(
    step: Option<&StepId>,
    checks: &[crate::check::Check],
    problems: &mut Vec<Problem>,
) {
    for (index, check) in checks.iter().enumerate() {
        if let Some(reason) = check.problem() {
            problems.push(Problem::InvalidCheck {
                step: step.cloned(),
                index,
                reason: reason.to_owned(),
            });
        }
        if crate::redact::holds_credential(&check.command) {
            problems.push(Problem::CredentialInPlan {
                step: step.cloned(),
                field: format!("checks[{index}].command"),
            });
        }
    }
}

/// A topological order of the steps (dependencies first), or `None` if there is a cycle.
#[must_use]
pub fn topological_order(deps: &[Vec<usize>]) -> Option<Vec<usize>> {
    let n = deps.len();
    let mut indegree = vec![0usize; n];
    let mut rev = vec![Vec::new(); n];
    for (i, ds) in deps.iter().enumerate() {
        for &d in ds {
            if d < n {
                indegree[i] += 1;
                rev[d].push(i);
            }
        }
    }
    let mut queue: std::collections::VecDeque<usize> =
        (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(v) = queue.pop_front() {
        order.push(v);
        for &w in &rev[v] {
            indegree[w] -= 1;
            if indegree[w] == 0 {
                queue.push_back(w);
            }
        }
    }
    (order.len() == n).then_some(order)
}

/// The length of the longest dependency chain, counting steps (the critical path in steps);
/// 0 for an empty or cyclic plan.
#[must_use]
pub fn depth(steps: &[Step]) -> usize {
    let deps = dependency_indices(steps);
    let Some(order) = topological_order(&deps) else {
        return 0;
    };
    let mut level = vec![0usize; steps.len()];
    for v in order {
        level[v] = 1 + deps[v].iter().map(|&d| level[d]).max().unwrap_or(0);
    }
    level.into_iter().max().unwrap_or(0)
}
