//! [`Hitl`]: the human in the loop.
//!
//! [`Hitl`] is the port a UI implements (a terminal, a non-interactive policy, a script for
//! tests). Decisions use the two-question pattern: the action is matched exactly against fixed
//! options ([`orca_core::match_action`]); the free-form context is only ever data.

use std::collections::VecDeque;
use std::sync::Mutex;

use async_trait::async_trait;
use orca_core::hitl::{ContextQuestion, two_question};
use orca_core::{
    Action, AgentId, ApprovalAction, DecisionRequest, DeviationAction, HumanAnswer,
    InterruptionAction, Plan, Touchpoint, TwoQuestion, match_action,
};

/// The port a UI implements.
#[async_trait]
pub trait Hitl: Send + Sync {
    /// Asks a two-question decision. `None`: no human can answer now (non-interactive run);
    /// the decision stays pending, durably, for `orca exec decide`.
    async fn decide(&self, question: &TwoQuestion) -> Option<HumanAnswer>;

    /// An agent's free-form question (`orca_ask_user`). `None`: no human available.
    async fn ask_text(&self, agent: &AgentId, question: &str) -> Option<String>;

    /// Whether a human may answer an agent's question at all in this process. `false` (no
    /// human attached) takes `orca_ask_user` out of every agent's tools: a tool that can only
    /// fail is one more way for a small model to go wrong.
    fn answers_agents(&self) -> bool {
        true
    }
}

/// The context question to ask after the action `key` of a touchpoint.
#[must_use]
pub fn context_prompt(touchpoint: Touchpoint, key: &str) -> Option<ContextQuestion> {
    match touchpoint {
        Touchpoint::PlanApproval => match_action::<ApprovalAction>(key).ok()?.context_prompt(),
        Touchpoint::Deviation => match_action::<DeviationAction>(key).ok()?.context_prompt(),
        Touchpoint::Interruption => match_action::<InterruptionAction>(key)
            .ok()?
            .context_prompt(),
    }
}

/// The approval question for a proposal, with the plan rendered as the header.
#[must_use]
pub fn approval_question(plan: &Plan) -> TwoQuestion {
    // The digest is what an approval binds: if the content changes before the answer, the
    // approval is refused (`PlanningService::approve_shown`).
    two_question::<ApprovalAction>(
        Touchpoint::PlanApproval,
        format!("{}Digest: {}\n", render_plan(plan), plan.content().digest()),
        "Approve this plan?",
    )
}

/// The question of a pending decision.
#[must_use]
pub fn decision_question(request: &DecisionRequest) -> TwoQuestion {
    match request {
        DecisionRequest::Deviation {
            step_id,
            attempts,
            failure,
        } => two_question::<DeviationAction>(
            Touchpoint::Deviation,
            format!("Step `{step_id}` failed after {attempts} attempt(s): {failure}"),
            "What now?",
        ),
        DecisionRequest::Interruption {
            step_id,
            reason,
            question,
        } => two_question::<InterruptionAction>(
            Touchpoint::Interruption,
            format!(
                "Step `{step_id}` needs you: {}",
                question.as_deref().unwrap_or(reason.as_str())
            ),
            "Answer the question, or stop?",
        ),
    }
}

/// A check as a person reads it: its command, and its time limit when it names one.
#[must_use]
pub fn check_text(check: &orca_core::Check) -> String {
    match check.timeout_secs {
        Some(secs) => format!("{}  (timeout {secs}s)", check.command),
        None => check.command.clone(),
    }
}

/// A plan as text for a person: goal, steps with their agents and dependencies, assumptions,
/// risks, verification, checks.
#[must_use]
pub fn render_plan(plan: &Plan) -> String {
    use std::fmt::Write as _;
    let c = plan.content();
    let mut out = String::new();
    let _ = writeln!(out, "Plan {} ({})", plan.id(), plan.stage());
    let _ = writeln!(out, "Goal: {}", c.goal);
    if let Some(summary) = &c.summary {
        let _ = writeln!(out, "Summary: {summary}");
    }
    let deps = orca_core::graph::dependency_indices(&c.steps);
    let _ = writeln!(out, "Steps:");
    for (i, (step, ds)) in c.steps.iter().zip(&deps).enumerate() {
        let after: Vec<&str> = ds
            .iter()
            .filter_map(|d| c.steps.get(*d))
            .map(|s| s.id.as_str())
            .collect();
        let _ = write!(
            out,
            "  {}. {} [{}] {}",
            i + 1,
            step.id,
            step.agent,
            step.description
        );
        if let Some(cmd) = &step.command {
            let _ = write!(out, "  $ {cmd}");
        }
        if !after.is_empty() {
            let _ = write!(out, "  (after {})", after.join(", "));
        }
        if !step.locks.is_empty() {
            let _ = write!(out, "  locks: {}", step.locks.join(", "));
        }
        if !step.env.is_empty() {
            let _ = write!(out, "  env: {}", step.env.join(", "));
        }
        if !step.writes.is_empty() {
            let _ = write!(out, "  writes: {}", step.writes.join(", "));
        }
        out.push('\n');
        for check in &step.checks {
            let _ = writeln!(out, "     check: $ {}", check_text(check));
        }
    }
    for (title, items) in [
        ("Assumptions", &c.assumptions),
        ("Risks", &c.risks),
        ("Verification", &c.verification),
    ] {
        let _ = writeln!(out, "{title}:");
        for item in items {
            let _ = writeln!(out, "  - {item}");
        }
    }
    if !c.checks.is_empty() {
        let _ = writeln!(out, "Checks (on the integrated result):");
        for check in &c.checks {
            let _ = writeln!(out, "  $ {}", check_text(check));
        }
    }
    if let Some(feedback) = plan.latest_feedback() {
        let _ = writeln!(out, "Latest feedback: {feedback}");
    }
    out
}

/// No human: every decision stays pending; agents' questions go unanswered.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHuman;

#[async_trait]
impl Hitl for NoHuman {
    async fn decide(&self, _question: &TwoQuestion) -> Option<HumanAnswer> {
        None
    }

    async fn ask_text(&self, _agent: &AgentId, _question: &str) -> Option<String> {
        None
    }

    fn answers_agents(&self) -> bool {
        false
    }
}

/// Answers from a script, in order; records every question asked. For tests and demos.
#[derive(Debug, Default)]
pub struct ScriptedHitl {
    decisions: Mutex<VecDeque<HumanAnswer>>,
    texts: Mutex<VecDeque<String>>,
    asked: Mutex<Vec<TwoQuestion>>,
}

impl ScriptedHitl {
    /// A script of decisions (action key, optional context) and text answers.
    #[must_use]
    pub fn new(decisions: impl IntoIterator<Item = (&'static str, Option<&'static str>)>) -> Self {
        Self {
            decisions: Mutex::new(
                decisions
                    .into_iter()
                    .map(|(a, c)| HumanAnswer {
                        action: a.to_owned(),
                        context: c.map(str::to_owned),
                    })
                    .collect(),
            ),
            ..Self::default()
        }
    }

    /// Adds text answers for `orca_ask_user`.
    #[must_use]
    pub fn with_texts(self, texts: impl IntoIterator<Item = &'static str>) -> Self {
        if let Ok(mut t) = self.texts.lock() {
            t.extend(texts.into_iter().map(str::to_owned));
        }
        self
    }

    /// The decisions asked so far.
    #[must_use]
    pub fn asked(&self) -> Vec<TwoQuestion> {
        self.asked.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// Decisions not used yet.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.decisions.lock().map(|d| d.len()).unwrap_or_default()
    }
}

#[async_trait]
impl Hitl for ScriptedHitl {
    async fn decide(&self, question: &TwoQuestion) -> Option<HumanAnswer> {
        if let Ok(mut asked) = self.asked.lock() {
            asked.push(question.clone());
        }
        self.decisions.lock().ok()?.pop_front()
    }

    async fn ask_text(&self, _agent: &AgentId, _question: &str) -> Option<String> {
        self.texts.lock().ok()?.pop_front()
    }
}
