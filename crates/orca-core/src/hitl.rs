//! Human-in-the-loop questions: the two-question pattern.
//!
//! A decision is an **action question** with fixed options plus an optional free-form
//! **context question**. The answer to the action question is matched exactly against the
//! options' keys or labels ([`match_action`]) — never interpreted, never by an LLM.

use serde::{Deserialize, Serialize};

use crate::error::TransitionError;
use crate::id::StepId;
use crate::results::TaskFailure;

/// One option of an action question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChoiceOption {
    /// The machine key (`approve`, `request_changes`…).
    pub key: String,
    /// What a person sees (`Approve`, `Request changes`…).
    pub label: String,
    /// What choosing it does.
    pub description: String,
}

/// The fixed-option question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionQuestion {
    /// The question.
    pub prompt: String,
    /// The options, in display order.
    pub options: Vec<ChoiceOption>,
}

/// The optional free-form question asked after the action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextQuestion {
    /// The question.
    pub prompt: String,
    /// Whether an answer is required (e.g. feedback when requesting changes).
    pub required: bool,
}

/// A two-question HITL prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TwoQuestion {
    /// Which touchpoint asks it.
    pub touchpoint: Touchpoint,
    /// A header the UI shows before the questions (the plan, the failure…).
    pub header: String,
    /// The action question.
    pub action: ActionQuestion,
    /// The context question, asked after the action (per action: see [`Action::context_prompt`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextQuestion>,
}

/// A human's answer to a two-question prompt: the action key and the free text, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanAnswer {
    /// The chosen option's key.
    pub action: String,
    /// The answer to the context question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// The three places a human decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Touchpoint {
    /// Approve / Request changes / Reject a proposal.
    PlanApproval,
    /// Retry / Replan / Stop after a task finally failed.
    Deviation,
    /// Answer / Stop when a specialist asks a question.
    Interruption,
}

/// What one action shows a person and asks after it: one row per action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActionSpec {
    /// The stable key.
    pub key: &'static str,
    /// The label a person sees.
    pub label: &'static str,
    /// What choosing it does.
    pub description: &'static str,
    /// The context question asked after it, if any.
    pub then_ask: Option<Ask>,
}

/// A context question, as written in an [`ActionSpec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// The question.
    pub prompt: &'static str,
    /// Whether an answer is required.
    pub required: bool,
}

impl Ask {
    /// A question the person may leave unanswered.
    #[must_use]
    pub const fn optional(prompt: &'static str) -> Self {
        Self {
            prompt,
            required: false,
        }
    }

    /// A question the person must answer.
    #[must_use]
    pub const fn required(prompt: &'static str) -> Self {
        Self {
            prompt,
            required: true,
        }
    }
}

/// An action of a touchpoint: a closed set of options with stable keys.
pub trait Action: Sized + Copy + 'static {
    /// Every action, in display order.
    const ALL: &'static [Self];
    /// What this action shows and asks.
    fn spec(self) -> ActionSpec;

    /// The stable key.
    fn key(self) -> &'static str {
        self.spec().key
    }
    /// The label a person sees.
    fn label(self) -> &'static str {
        self.spec().label
    }
    /// What choosing it does.
    fn description(self) -> &'static str {
        self.spec().description
    }
    /// The context question to ask after this action, if any.
    fn context_prompt(self) -> Option<ContextQuestion> {
        self.spec().then_ask.map(|ask| ContextQuestion {
            prompt: ask.prompt.to_owned(),
            required: ask.required,
        })
    }

    /// The options of the action question.
    #[must_use]
    fn options() -> Vec<ChoiceOption> {
        Self::ALL
            .iter()
            .map(|a| ChoiceOption {
                key: a.key().to_owned(),
                label: a.label().to_owned(),
                description: a.description().to_owned(),
            })
            .collect()
    }
}

/// Matches an answer exactly (after trimming surrounding whitespace) against an action's keys
/// and labels. `"approve"` and `"Approve"` match; `"aprove"`, `"yes"` and `"APPROVE"` do not.
///
/// # Errors
///
/// [`TransitionError::NotAnOption`] listing the options.
pub fn match_action<A: Action>(answer: &str) -> Result<A, TransitionError> {
    let answer = answer.trim();
    A::ALL
        .iter()
        .copied()
        .find(|a| a.key() == answer || a.label() == answer)
        .ok_or_else(|| TransitionError::NotAnOption {
            answer: answer.to_owned(),
            options: A::ALL
                .iter()
                .map(|a| a.key())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The plan approval decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalAction {
    /// Approve: the plan becomes immutable and can run.
    Approve,
    /// Send it back to the planner with feedback.
    RequestChanges,
    /// Reject it for good.
    Reject,
}

impl Action for ApprovalAction {
    const ALL: &'static [Self] = &[Self::Approve, Self::RequestChanges, Self::Reject];

    fn spec(self) -> ActionSpec {
        match self {
            Self::Approve => ActionSpec {
                key: "approve",
                label: "Approve",
                description: "approve the plan as shown; it can then be executed",
                then_ask: Some(Ask::optional(
                    "A note to record with the approval (optional)",
                )),
            },
            Self::RequestChanges => ActionSpec {
                key: "request_changes",
                label: "Request changes",
                description: "send the plan back to the planner with your feedback",
                then_ask: Some(Ask::required("What should change?")),
            },
            Self::Reject => ActionSpec {
                key: "reject",
                label: "Reject",
                description: "reject the plan; it will not be executed",
                then_ask: Some(Ask::optional("Why (optional)?")),
            },
        }
    }
}

/// The deviation decision after a task finally failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviationAction {
    /// Run the step again, with the human's guidance.
    Retry,
    /// Ask the planner for a new plan that supersedes this one.
    Replan,
    /// Stop the execution.
    Stop,
}

impl Action for DeviationAction {
    const ALL: &'static [Self] = &[Self::Retry, Self::Replan, Self::Stop];

    fn spec(self) -> ActionSpec {
        match self {
            Self::Retry => ActionSpec {
                key: "retry",
                label: "Retry",
                description: "run the step again, with your guidance",
                then_ask: Some(Ask::optional("Guidance for the next attempt (optional)")),
            },
            Self::Replan => ActionSpec {
                key: "replan",
                label: "Replan",
                description: "have the planner build a new plan from what has been done",
                then_ask: Some(Ask::optional(
                    "What should the new plan do differently (optional)?",
                )),
            },
            Self::Stop => ActionSpec {
                key: "stop",
                label: "Stop",
                description: "stop the execution; completed work is kept",
                then_ask: None,
            },
        }
    }
}

/// The decision when a specialist interrupts with a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterruptionAction {
    /// Answer the question; the step is retried with the answer.
    Answer,
    /// Stop the execution.
    Stop,
}

impl Action for InterruptionAction {
    const ALL: &'static [Self] = &[Self::Answer, Self::Stop];

    fn spec(self) -> ActionSpec {
        match self {
            Self::Answer => ActionSpec {
                key: "answer",
                label: "Answer",
                description: "answer the question; the step runs again with your answer",
                then_ask: Some(Ask::required("Your answer")),
            },
            Self::Stop => ActionSpec {
                key: "stop",
                label: "Stop",
                description: "stop the execution; completed work is kept",
                then_ask: None,
            },
        }
    }
}

/// Builds the two-question prompt of a touchpoint.
#[must_use]
pub fn two_question<A: Action>(
    touchpoint: Touchpoint,
    header: String,
    prompt: &str,
) -> TwoQuestion {
    TwoQuestion {
        touchpoint,
        header,
        action: ActionQuestion {
            prompt: prompt.to_owned(),
            options: A::options(),
        },
        context: None,
    }
}

/// What a pending human decision is about. Durable: stored on the running execution so the
/// process may exit and a later `decide` (from another process) answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DecisionRequest {
    /// A task failed its last attempt: Retry / Replan / Stop.
    Deviation {
        /// The step.
        step_id: StepId,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        failure: TaskFailure,
    },
    /// A specialist asked a question: Answer / Stop.
    Interruption {
        /// The step.
        step_id: StepId,
        /// Why it stopped.
        reason: String,
        /// The question.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        question: Option<String>,
    },
}

impl DecisionRequest {
    /// The step the decision is about.
    #[must_use]
    pub const fn step_id(&self) -> &StepId {
        match self {
            Self::Deviation { step_id, .. } | Self::Interruption { step_id, .. } => step_id,
        }
    }

    /// The touchpoint.
    #[must_use]
    pub const fn touchpoint(&self) -> Touchpoint {
        match self {
            Self::Deviation { .. } => Touchpoint::Deviation,
            Self::Interruption { .. } => Touchpoint::Interruption,
        }
    }

    /// The option keys a valid answer must match.
    #[must_use]
    pub fn option_keys(&self) -> Vec<&'static str> {
        match self {
            Self::Deviation { .. } => DeviationAction::ALL.iter().map(|a| a.key()).collect(),
            Self::Interruption { .. } => InterruptionAction::ALL.iter().map(|a| a.key()).collect(),
        }
    }
}

/// A human's decision on a pending request, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum Decision {
    /// Retry the step, with optional guidance.
    Retry {
        /// The guidance, threaded into `previous_attempts`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        guidance: Option<String>,
    },
    /// Replan.
    Replan {
        /// What the new plan should do differently.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        guidance: Option<String>,
    },
    /// Stop the execution.
    Stop,
    /// The answer to a specialist's question; the step is retried with it.
    Answer {
        /// The answer.
        text: String,
    },
}

impl Decision {
    /// Builds a decision from a [`HumanAnswer`] to `request`, matching the action exactly.
    ///
    /// # Errors
    ///
    /// The action is not an option of the request, or a required context answer is missing.
    pub fn from_answer(
        request: &DecisionRequest,
        answer: &HumanAnswer,
    ) -> Result<Self, TransitionError> {
        let context = answer
            .context
            .as_ref()
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty());
        match request {
            DecisionRequest::Deviation { .. } => {
                Ok(match match_action::<DeviationAction>(&answer.action)? {
                    DeviationAction::Retry => Self::Retry { guidance: context },
                    DeviationAction::Replan => Self::Replan { guidance: context },
                    DeviationAction::Stop => Self::Stop,
                })
            }
            DecisionRequest::Interruption { .. } => {
                match match_action::<InterruptionAction>(&answer.action)? {
                    InterruptionAction::Answer => context
                        .map(|text| Self::Answer { text })
                        .ok_or_else(|| TransitionError::NotAnOption {
                            answer: "answer without text".to_owned(),
                            options: "answer (with the answer's text), stop".to_owned(),
                        }),
                    InterruptionAction::Stop => Ok(Self::Stop),
                }
            }
        }
    }

    /// The key of the action.
    #[must_use]
    pub const fn key(&self) -> &'static str {
        match self {
            Self::Retry { .. } => "retry",
            Self::Replan { .. } => "replan",
            Self::Stop => "stop",
            Self::Answer { .. } => "answer",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check<A: Action + PartialEq + std::fmt::Debug>(answer: &str, expected: Option<A>) {
        assert_eq!(match_action::<A>(answer).ok(), expected, "{answer:?}");
    }

    #[test]
    fn actions_match_exactly() {
        check("approve", Some(ApprovalAction::Approve));
        check("Approve", Some(ApprovalAction::Approve));
        check("  Request changes ", Some(ApprovalAction::RequestChanges));
        check("request_changes", Some(ApprovalAction::RequestChanges));
        check::<ApprovalAction>("APPROVE", None);
        check::<ApprovalAction>("aprove", None);
        check::<ApprovalAction>("yes", None);
        check::<ApprovalAction>("approve it", None);
        check::<ApprovalAction>("", None);
        check("retry", Some(DeviationAction::Retry));
        check::<DeviationAction>("approve", None);
        check("Stop", Some(InterruptionAction::Stop));
    }

    #[test]
    fn the_error_lists_the_options() {
        let err = match_action::<DeviationAction>("again").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`again` is not one of the options: retry, replan, stop"
        );
    }
}
