//! Context threading: what a dispatched task is told about the plan and the work before it.
//!
//! Summaries, not full outputs; relevant files accumulated from the steps it depends on
//! (directly or not); earlier attempts with the human's guidance. Every part is bounded by
//! [`ContextLimits`], so the context of step 500 is no larger than that of step 5.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::execution::{AttemptOutcome, Task};
use crate::graph;
use crate::id::{AgentId, PlanId, StepId};
use crate::plan::PlanContent;

/// Bounds on the size of a [`TaskContext`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextLimits {
    /// Characters kept of the plan goal.
    pub max_goal_chars: usize,
    /// Direct dependencies summarized (the latest in plan order are kept).
    pub max_dependencies: usize,
    /// Characters kept of each dependency summary.
    pub max_summary_chars: usize,
    /// Key findings kept per dependency.
    pub max_findings_per_dependency: usize,
    /// Characters kept of each key finding.
    pub max_finding_chars: usize,
    /// Relevant files kept (nearest steps first).
    pub max_relevant_files: usize,
    /// Earlier attempts kept (the latest).
    pub max_previous_attempts: usize,
    /// Characters kept of each earlier attempt's error and guidance.
    pub max_attempt_chars: usize,
}

impl Default for ContextLimits {
    fn default() -> Self {
        Self {
            max_goal_chars: 500,
            max_dependencies: 8,
            max_summary_chars: 600,
            max_findings_per_dependency: 5,
            max_finding_chars: 200,
            max_relevant_files: 20,
            max_previous_attempts: 3,
            max_attempt_chars: 600,
        }
    }
}

/// The summary of a completed step this task depends on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DependencySummary {
    /// The step.
    pub step_id: StepId,
    /// Who did it.
    pub agent: AgentId,
    /// Its summary (possibly shortened).
    pub summary: String,
    /// Its key findings (possibly fewer, shortened).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_findings: Vec<String>,
}

/// An earlier attempt of this task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreviousAttempt {
    /// Its number.
    pub attempt: u32,
    /// What went wrong.
    pub error: String,
    /// What the human said for the next attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guidance: Option<String>,
}

/// What a dispatched task is told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskContext {
    /// The plan.
    pub plan_id: PlanId,
    /// Its goal (possibly shortened).
    pub plan_goal: String,
    /// This step.
    pub step_id: StepId,
    /// Its 0-based position in the plan.
    pub step_index: usize,
    /// How many steps the plan has.
    pub total_steps: usize,
    /// Summaries of the completed steps this one depends on directly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<DependencySummary>,
    /// Relevant files reported by the steps this one depends on, directly or not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relevant_files: Vec<String>,
    /// Earlier attempts of this step, with the human's guidance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_attempts: Vec<PreviousAttempt>,
    /// How many items the limits left out (dependencies, findings, files, attempts).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Builds the context of the step at `step_index`. `tasks` are the execution's tasks in plan
/// order (a task whose step is not in the plan is ignored).
#[must_use]
pub fn build_context(
    plan_id: PlanId,
    plan: &PlanContent,
    step_index: usize,
    tasks: &[Task],
    limits: &ContextLimits,
) -> Option<TaskContext> {
    let deps = graph::dependency_indices(&plan.steps);
    build_context_with(plan_id, plan, &deps, step_index, |i| tasks.get(i), limits)
}

/// [`build_context`] for callers that keep the step graph (`deps`, from
/// [`graph::dependency_indices`]) and their tasks in their own structures: a runner building
/// the contexts of a long plan does not recompute the graph or copy its tasks for every step.
///
/// Relevant files are gathered from the nearest ancestors first (breadth-first over the
/// dependencies, later steps first among equals), and the walk stops once
/// [`ContextLimits::max_relevant_files`] are kept, so its cost is bounded too; files of the
/// ancestors it visited but could not keep are counted in `omitted`.
#[must_use]
pub fn build_context_with<'a>(
    plan_id: PlanId,
    plan: &PlanContent,
    deps: &[Vec<usize>],
    step_index: usize,
    task: impl Fn(usize) -> Option<&'a Task>,
    limits: &ContextLimits,
) -> Option<TaskContext> {
    let step = plan.steps.get(step_index)?;
    let mut omitted = 0usize;
    let success = |i: usize| task(i).and_then(Task::success);

    let direct: &[usize] = deps.get(step_index).map_or(&[], Vec::as_slice);
    let completed_direct: Vec<usize> = direct
        .iter()
        .copied()
        .filter(|&i| success(i).is_some())
        .collect();
    let keep_from = completed_direct
        .len()
        .saturating_sub(limits.max_dependencies);
    omitted += keep_from;
    let dependencies = completed_direct[keep_from..]
        .iter()
        .filter_map(|&i| {
            let s = plan.steps.get(i)?;
            let result = success(i)?;
            let findings = result.key_findings.len();
            omitted += findings.saturating_sub(limits.max_findings_per_dependency);
            Some(DependencySummary {
                step_id: s.id.clone(),
                agent: s.agent.clone(),
                summary: clip(&result.summary, limits.max_summary_chars),
                key_findings: result
                    .key_findings
                    .iter()
                    .take(limits.max_findings_per_dependency)
                    .map(|f| clip(f, limits.max_finding_chars))
                    .collect(),
            })
        })
        .collect();

    // Nearest ancestors first, stopping once the files are full.
    let mut seen_files = BTreeSet::new();
    let mut relevant_files = Vec::new();
    let mut visited = BTreeSet::from([step_index]);
    let mut frontier: std::collections::VecDeque<usize> = {
        let mut first: Vec<usize> = direct.to_vec();
        first.sort_unstable_by(|a, b| b.cmp(a));
        first.into_iter().collect()
    };
    while let Some(i) = frontier.pop_front() {
        if relevant_files.len() >= limits.max_relevant_files {
            break;
        }
        if !visited.insert(i) {
            continue;
        }
        for f in success(i)
            .map(|r| r.relevant_files.as_slice())
            .unwrap_or_default()
        {
            if seen_files.insert(f.as_str()) {
                if relevant_files.len() < limits.max_relevant_files {
                    relevant_files.push(f.clone());
                } else {
                    omitted += 1;
                }
            }
        }
        let mut next: Vec<usize> = deps.get(i).map_or_else(Vec::new, Clone::clone);
        next.sort_unstable_by(|a, b| b.cmp(a));
        frontier.extend(next.into_iter().filter(|n| !visited.contains(n)));
    }

    let attempts = task(step_index).map(Task::attempts).unwrap_or_default();
    let failed: Vec<PreviousAttempt> = attempts
        .iter()
        .filter_map(|a| {
            let error = match &a.outcome {
                AttemptOutcome::Succeeded => return None,
                AttemptOutcome::Failed { failure } => failure.to_string(),
                AttemptOutcome::Interrupted { interruption } => format!(
                    "asked: {}",
                    interruption
                        .question
                        .as_deref()
                        .unwrap_or(&interruption.reason)
                ),
                AttemptOutcome::Abandoned { note } => format!("interrupted: {note}"),
            };
            Some(PreviousAttempt {
                attempt: a.number,
                error: clip(&error, limits.max_attempt_chars),
                guidance: a
                    .guidance
                    .as_deref()
                    .map(|g| clip(g, limits.max_attempt_chars)),
            })
        })
        .collect();
    let keep_from = failed.len().saturating_sub(limits.max_previous_attempts);
    omitted += keep_from;
    let previous_attempts = failed.into_iter().skip(keep_from).collect();

    Some(TaskContext {
        plan_id,
        plan_goal: clip(&plan.goal, limits.max_goal_chars),
        step_id: step.id.clone(),
        step_index,
        total_steps: plan.steps.len(),
        dependencies,
        relevant_files,
        previous_attempts,
        omitted,
    })
}
