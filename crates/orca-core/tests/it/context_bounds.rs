//! Context threading stays bounded: however long the plan and however verbose the earlier
//! steps, a task's context respects `ContextLimits`, and what was left out is counted.
#![expect(clippy::unwrap_used, reason = "tests")]

use orca_core::*;
use proptest::prelude::*;
use time::OffsetDateTime;

fn now() -> OffsetDateTime {
    OffsetDateTime::UNIX_EPOCH
}

fn holder() -> Holder {
    Holder {
        pid: 1,
        host: "h".into(),
        token: "t".into(),
    }
}

/// A plan of `n` steps: a chain, except that the last step depends on every other step.
fn plan(n: usize, goal: &str) -> ApprovedPlan {
    let mut draft = DraftPlan::new(PlanId::new(), now());
    draft.set_goal(goal);
    draft.set_assumptions(vec!["a".into()]);
    draft.set_risks(vec!["r".into()]);
    draft.set_verification(vec!["v".into()]);
    let coder = AgentId::parse("coder").unwrap();
    for i in 0..n {
        let mut step = Step::new(StepId::parse(&format!("s{i}")).unwrap(), coder.clone(), "x");
        if i + 1 == n && n > 1 {
            step.depends_on = Some(
                (0..i)
                    .map(|j| StepId::parse(&format!("s{j}")).unwrap())
                    .collect(),
            );
        }
        draft.add_step(step, None).unwrap();
    }
    let agents = [coder].into_iter().collect();
    draft
        .submit(&agents, now())
        .unwrap()
        .approve("t", None, now())
}

fn chars(n: usize) -> String {
    "é".repeat(n)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn contexts_respect_their_limits(
        n in 1usize..120,
        summary_len in 0usize..1500,
        findings in 0usize..12,
        files in 0usize..8,
        failures in 0usize..6,
        max_dependencies in 0usize..10,
        max_relevant_files in 0usize..60,
        max_previous_attempts in 0usize..4,
    ) {
        let limits = ContextLimits {
            max_goal_chars: 80,
            max_dependencies,
            max_summary_chars: 100,
            max_findings_per_dependency: 3,
            max_finding_chars: 50,
            max_relevant_files,
            max_previous_attempts,
            max_attempt_chars: 120,
        };
        let plan = plan(n, &chars(500));
        let (_, mut tasks) = PendingExecution::new(ExecutionId::new(), &plan, now());
        // Every step but the last completes, verbosely.
        for i in 0..n - 1 {
            let Task::Pending(t) = tasks[i].clone() else { unreachable!() };
            let ctx = build_context(plan.id(), plan.content(), i, &tasks, &limits).unwrap();
            let success = TaskSuccess {
                summary: chars(summary_len),
                key_findings: (0..findings).map(|k| chars(k * 40)).collect(),
                relevant_files: (0..files).map(|k| format!("src/{i}/{k}.rs")).collect(),
                ..TaskSuccess::default()
            };
            tasks[i] = t.start(ctx, holder(), now()).complete(success, now()).into();
        }
        // The last step fails a few times, with long errors and guidance.
        let last = n - 1;
        let Task::Pending(t) = tasks[last].clone() else { unreachable!() };
        let ctx = build_context(plan.id(), plan.content(), last, &tasks, &limits).unwrap();
        let mut running = t.start(ctx, holder(), now());
        for _ in 0..failures {
            let failed = running.fail(TaskFailure::new(ErrorCode::AgentError, chars(1000)), now());
            tasks[last] = failed.clone().into();
            let ctx = build_context(plan.id(), plan.content(), last, &tasks, &limits).unwrap();
            running = failed.retry(Some(chars(1000)), ctx, holder(), now());
        }
        tasks[last] = running.into();

        let ctx = build_context(plan.id(), plan.content(), last, &tasks, &limits).unwrap();
        prop_assert!(ctx.plan_goal.chars().count() <= limits.max_goal_chars);
        prop_assert!(ctx.dependencies.len() <= limits.max_dependencies);
        for dep in &ctx.dependencies {
            prop_assert!(dep.summary.chars().count() <= limits.max_summary_chars);
            prop_assert!(dep.key_findings.len() <= limits.max_findings_per_dependency);
            for f in &dep.key_findings {
                prop_assert!(f.chars().count() <= limits.max_finding_chars);
            }
        }
        prop_assert!(ctx.relevant_files.len() <= limits.max_relevant_files);
        prop_assert!(ctx.previous_attempts.len() <= limits.max_previous_attempts);
        for a in &ctx.previous_attempts {
            prop_assert!(a.error.chars().count() <= limits.max_attempt_chars);
            prop_assert!(a.guidance.as_ref().is_none_or(|g| g.chars().count() <= limits.max_attempt_chars));
        }
        // Nothing is dropped silently: what the limits left out is counted.
        let deps_total = n - 1;
        let kept_deps = deps_total.min(limits.max_dependencies);
        let dropped_findings = kept_deps * findings.saturating_sub(limits.max_findings_per_dependency);
        let files_total = (n - 1) * files;
        // The walk for files stops at the first ancestor that fills the list.
        let files_seen = if files == 0 {
            0
        } else {
            files_total.min(limits.max_relevant_files.div_ceil(files) * files)
        };
        let attempts_total = failures;
        let expected_omitted = (deps_total - kept_deps)
            + dropped_findings
            + files_seen.saturating_sub(limits.max_relevant_files)
            + attempts_total.saturating_sub(limits.max_previous_attempts);
        prop_assert_eq!(ctx.omitted, expected_omitted);
        // The size of the context does not grow with the plan: bounded by the limits alone.
        let bound = 2_000
            + limits.max_goal_chars * 2
            + limits.max_dependencies * (200 + limits.max_summary_chars * 2 + limits.max_findings_per_dependency * (limits.max_finding_chars * 2 + 8))
            + limits.max_relevant_files * 40
            + limits.max_previous_attempts * (100 + limits.max_attempt_chars * 4);
        let size = serde_json::to_string(&ctx).unwrap().len();
        prop_assert!(size <= bound, "context of {} bytes > bound {}", size, bound);
    }
}
