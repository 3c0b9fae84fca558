//! Plans: what to do.
//!
//! A [`Plan`] is tagged by its `stage` and each variant holds only that stage's data:
//!
//! ```text
//! draft ──submit──► proposal ──approve──► approved
//!   ▲                  │ └─────reject───► rejected
//!   └─request_changes──┘
//! ```
//!
//! A [`DraftPlan`] is mutable and may be incomplete; [`DraftPlan::submit`] validates it and
//! either returns an immutable [`ProposalPlan`] or hands the draft back with **every** problem.
//! An [`ApprovedPlan`] records the sha256 [`Digest`] of its canonical content; it is never edited
//! again — replanning creates a new plan that names the one it supersedes.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::check::Check;
use crate::error::DocumentError;
use crate::format::{Digest, FormatVersion};
use crate::graph::{self, Problem};
use crate::id::{AgentId, PlanId, StepId};
use crate::isolation::Isolation;
use crate::results::Budget;

mod approvals;
mod transitions;
mod wire;

pub use approvals::{GivenApproval, PendingApprovals, PolicyApproval, Requester};

/// One step of a plan: which agent does what, and after which other steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Unique within the plan.
    pub id: StepId,
    /// The agent that carries the step out (`coder`, `shell`, a custom agent…).
    pub agent: AgentId,
    /// What to do, for the agent and for the human who approves the plan.
    pub description: String,
    /// The command the `shell` agent runs (`sh -c`); a hint for other agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Omitted: after the previous step (plans are sequential by default). `[]`: a root.
    /// A list: exactly these steps (a DAG).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<StepId>>,
    /// Named resources; steps sharing a lock never run at once, in any execution.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locks: Vec<String>,
    /// What the step writes, relative to the project (`src/api/**`, `Cargo.toml`; see
    /// [`crate::writes`]). Two steps that can run at once may not overlap unless they share a
    /// lock. Omitted when empty, so plans written before it keep their digests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    /// Assumptions specific to this step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assumptions: Vec<String>,
    /// Risks specific to this step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub risks: Vec<String>,
    /// How to check this step's work, in words (for the agent and the human).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verification: Vec<String>,
    /// Commands that must exit 0 after the agent reports success, in the step's workspace and
    /// sandbox, for the step to complete; a failing one is a failed attempt whose output the
    /// next attempt is told. Omitted when empty, so plans written before it keep their digests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<Check>,
    /// Attempts before the step counts as finally failed (default: the runner's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Wall-clock limit of one attempt, in seconds (default: the runner's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// Names of environment variables this step receives on top of the minimal environment
    /// (`["GITHUB_TOKEN"]`): names, never values. Part of the approved content (and digest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Where the step runs: `in_place` or `worktree` (its own git worktree, merged into the
    /// execution's branch; ADR 0017). Omitted: the plan's default for steps that declare
    /// `writes`, else in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// Limits of this step (tokens, cost, turns, wall seconds), approved with the plan; an
    /// attempt crossing one fails closed with `budget_exceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}

/// Whether `name` can be named in a step's `env`: an environment variable name (ASCII letters,
/// digits and `_`, not starting with a digit), not one of the `ORCA_*` variables orca sets.
#[must_use]
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.to_ascii_uppercase().starts_with("ORCA_")
}

impl Step {
    /// A step with only the required fields; it runs after the previous step.
    #[must_use]
    pub fn new(id: StepId, agent: AgentId, description: impl Into<String>) -> Self {
        Self {
            id,
            agent,
            description: description.into(),
            command: None,
            depends_on: None,
            locks: Vec::new(),
            writes: Vec::new(),
            assumptions: Vec::new(),
            risks: Vec::new(),
            verification: Vec::new(),
            checks: Vec::new(),
            max_attempts: None,
            timeout_secs: None,
            env: Vec::new(),
            isolation: None,
            budget: None,
        }
    }

    /// Sets the command (builder style).
    #[must_use]
    pub fn with_command(mut self, command: impl Into<String>) -> Self {
        self.command = Some(command.into());
        self
    }

    /// Sets explicit dependencies (builder style); `[]` makes a root.
    #[must_use]
    pub fn with_depends_on(mut self, deps: impl IntoIterator<Item = StepId>) -> Self {
        self.depends_on = Some(deps.into_iter().collect());
        self
    }

    /// Sets the locks (builder style).
    #[must_use]
    pub fn with_locks(mut self, locks: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.locks = locks.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the declared writes (builder style).
    #[must_use]
    pub fn with_writes(mut self, writes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.writes = writes.into_iter().map(Into::into).collect();
        self
    }
}

/// What a plan says: the goal, the steps and what the human approves along with them.
///
/// This is also the plan document format accepted by `orca plan create --file`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanContent {
    /// What the plan achieves, in one sentence.
    pub goal: String,
    /// A longer description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The steps, in plan order.
    pub steps: Vec<Step>,
    /// What the plan takes for granted (at least one).
    pub assumptions: Vec<String>,
    /// What could go wrong (at least one).
    pub risks: Vec<String>,
    /// How the result will be checked (at least one), in words.
    pub verification: Vec<String>,
    /// Commands that must exit 0 on the integrated result once every step completed, for the
    /// execution to complete. Omitted when empty, so plans written before it keep their digests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<Check>,
    /// The isolation of every step that declares `writes` and names none itself (ADR 0017).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// Limits of the whole execution (tokens, cost and turns summed over its steps; wall
    /// seconds since it started), approved with the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}

impl PlanContent {
    /// The JSON Schema of a plan document (for editors and other tools), generated from the
    /// same types that read it, so the two cannot drift.
    #[must_use]
    pub fn json_schema() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(PlanContent)).unwrap_or_default()
    }

    /// Reads a plan document (JSON; the format of [`PlanContent`]) strictly: unknown fields and
    /// malformed ids are errors naming the field.
    ///
    /// # Errors
    ///
    /// Malformed JSON or a document of the wrong shape. Validation is separate:
    /// [`PlanContent::validate`].
    pub fn from_json(text: &str) -> Result<Self, DocumentError> {
        Ok(serde_json::from_str(text)?)
    }

    /// Every problem of this content, in a stable order (empty = valid).
    #[must_use]
    pub fn validate(&self, known_agents: &BTreeSet<AgentId>) -> Vec<Problem> {
        graph::validate(self, known_agents)
    }

    /// The sha256 digest of the canonical JSON of this content.
    #[must_use]
    pub fn digest(&self) -> Digest {
        // Serializing plain structs of strings and numbers cannot fail.
        Digest::of_canonical(self).unwrap_or_else(|_| Digest::of_bytes(b""))
    }

    /// The index of a step.
    #[must_use]
    pub fn position(&self, id: &StepId) -> Option<usize> {
        self.steps.iter().position(|s| &s.id == id)
    }

    /// A step by id.
    #[must_use]
    pub fn step(&self, id: &StepId) -> Option<&Step> {
        self.steps.iter().find(|s| &s.id == id)
    }

    /// The steps that may start now: not yet done and every dependency done.
    /// `done` holds the ids of completed steps. Unknown dependencies never become ready.
    #[must_use]
    pub fn ready_steps(&self, done: &BTreeSet<StepId>) -> Vec<&Step> {
        let deps = graph::resolved_dependencies(&self.steps);
        self.steps
            .iter()
            .zip(deps)
            .filter(|(step, deps)| {
                !done.contains(&step.id)
                    && deps.iter().all(|d| match d {
                        graph::Dep::Index(i) => {
                            self.steps.get(*i).is_some_and(|s| done.contains(&s.id))
                        }
                        graph::Dep::Unknown(_) => false,
                    })
            })
            .map(|(step, _)| step)
            .collect()
    }
}

/// Something that happened to a plan before it was decided, kept in its history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum PlanEvent {
    /// The draft was submitted and became a proposal.
    Submitted {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
    },
    /// The human asked for changes: the proposal went back to draft.
    ChangesRequested {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// Who asked.
        by: String,
        /// What to change.
        feedback: String,
    },
}

/// Who approved a plan, when, and the digest of what they approved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// Who.
    pub by: String,
    /// An optional note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// sha256 of the canonical content approved.
    pub digest: Digest,
    /// Set when an approval policy decided: the policy's digest and who signed. Omitted
    /// otherwise, so approvals made without a policy keep their form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyApproval>,
}

/// Who rejected a plan, when, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rejection {
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// Who.
    pub by: String,
    /// Why, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What every stage of a plan holds and hands on to the next one (only the history grows): the
/// plan's identity, the plan it replaces, what happened to it before the decision, and what it
/// says. Each stage's document is these fields followed by the stage's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct PlanCommon {
    format_version: FormatVersion,
    id: PlanId,
    #[serde(with = "time::serde::rfc3339")]
    created_at: OffsetDateTime,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    supersedes: Option<PlanId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    history: Vec<PlanEvent>,
    /// Who asked for the plan (an approval policy never counts their approval). Omitted when
    /// not recorded, so older plans read as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    requested_by: Option<Requester>,
    content: PlanContent,
}

impl PlanCommon {
    /// The common part after `event` happened to the plan.
    fn with_event(mut self, event: PlanEvent) -> Self {
        self.history.push(event);
        self
    }
}

macro_rules! plan_common_accessors {
    ($ty:ident) => {
        impl $ty {
            /// The plan's id.
            #[must_use]
            pub const fn id(&self) -> PlanId {
                self.common.id
            }

            /// What the plan says.
            #[must_use]
            pub const fn content(&self) -> &PlanContent {
                &self.common.content
            }

            /// When the plan was created.
            #[must_use]
            pub const fn created_at(&self) -> OffsetDateTime {
                self.common.created_at
            }

            /// The plan this one replaces, if it came from a replan.
            #[must_use]
            pub const fn supersedes(&self) -> Option<PlanId> {
                self.common.supersedes
            }

            /// Submissions and change requests so far.
            #[must_use]
            pub fn history(&self) -> &[PlanEvent] {
                &self.common.history
            }

            /// Who asked for the plan, if recorded.
            #[must_use]
            pub const fn requested_by(&self) -> Option<&Requester> {
                self.common.requested_by.as_ref()
            }
        }
    };
}

/// A plan being built: mutable, possibly incomplete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DraftPlan {
    #[serde(flatten)]
    common: PlanCommon,
}
plan_common_accessors!(DraftPlan);

/// A submitted, valid plan waiting for the human's decision. Immutable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposalPlan {
    #[serde(flatten)]
    common: PlanCommon,
    /// The approvals given so far under an approval policy (omitted without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    approvals: Option<PendingApprovals>,
}
plan_common_accessors!(ProposalPlan);

/// An approved plan: immutable, with the digest of what was approved. Executions run these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovedPlan {
    #[serde(flatten)]
    common: PlanCommon,
    approval: Approval,
}
plan_common_accessors!(ApprovedPlan);

/// A rejected plan. Final.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RejectedPlan {
    #[serde(flatten)]
    common: PlanCommon,
    rejection: Rejection,
}
plan_common_accessors!(RejectedPlan);

/// A field of a step that [`DraftPlan::update_step`] can change. `None` (a missing field)
/// leaves a field as is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StepPatch {
    /// A new agent.
    pub agent: Option<AgentId>,
    /// A new description.
    pub description: Option<String>,
    /// A new command (`Some(None)` clears it).
    #[serde(with = "double_option")]
    pub command: Option<Option<String>>,
    /// New dependencies (`Some(None)` restores "after the previous step").
    #[serde(with = "double_option")]
    pub depends_on: Option<Option<Vec<StepId>>>,
    /// New locks.
    pub locks: Option<Vec<String>>,
    /// New declared writes.
    pub writes: Option<Vec<String>>,
    /// New per-step assumptions.
    pub assumptions: Option<Vec<String>>,
    /// New per-step risks.
    pub risks: Option<Vec<String>>,
    /// New per-step verification.
    pub verification: Option<Vec<String>>,
    /// New checks (`[]` removes them).
    pub checks: Option<Vec<Check>>,
    /// New attempt limit (`Some(None)` restores the default).
    #[serde(with = "double_option")]
    pub max_attempts: Option<Option<u32>>,
    /// New timeout (`Some(None)` restores the default).
    #[serde(with = "double_option")]
    pub timeout_secs: Option<Option<u64>>,
    /// New environment variable names.
    pub env: Option<Vec<String>>,
    /// New isolation (`Some(None)` restores the plan's default).
    #[serde(with = "double_option")]
    pub isolation: Option<Option<Isolation>>,
    /// New budget (`Some(None)` removes it).
    #[serde(with = "double_option")]
    pub budget: Option<Option<Budget>>,
}

mod double_option {
    //! `null` means "clear", a missing field means "leave as is".
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<T: Serialize, S: Serializer>(
        value: &Option<Option<T>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            None | Some(None) => serializer.serialize_none(),
            Some(Some(v)) => v.serialize(serializer),
        }
    }

    pub(super) fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(deserializer).map(Some)
    }
}

/// A draft could not be submitted: it comes back unchanged with every problem found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitRejected {
    /// The draft, unchanged.
    pub draft: DraftPlan,
    /// Every problem, in a stable order.
    pub problems: Vec<Problem>,
}

impl std::fmt::Display for SubmitRejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the plan has {}: ",
            crate::plural::count(self.problems.len(), "problem", "problems")
        )?;
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SubmitRejected {}

impl ApprovedPlan {
    /// Who approved it, when, and the digest.
    #[must_use]
    pub const fn approval(&self) -> &Approval {
        &self.approval
    }

    /// The digest recorded at approval.
    #[must_use]
    pub const fn digest(&self) -> &Digest {
        &self.approval.digest
    }

    /// Whether the content still hashes to the approved digest (a hand-edited file does not).
    #[must_use]
    pub fn is_intact(&self) -> bool {
        self.common.content.digest() == self.approval.digest
    }
}

impl RejectedPlan {
    /// Who rejected it, when, and why.
    #[must_use]
    pub const fn rejection(&self) -> &Rejection {
        &self.rejection
    }
}

/// The stage of a plan, without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStage {
    /// Being built.
    Draft,
    /// Waiting for the human.
    Proposal,
    /// Approved: can be executed.
    Approved,
    /// Rejected: final.
    Rejected,
}

impl std::fmt::Display for PlanStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Draft => "draft",
            Self::Proposal => "proposal",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
        })
    }
}

/// A plan in any stage. This is the persisted document (`.orca/plans/{plan_id}.json`); it is
/// read in one pass by `plan/wire.rs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "stage", rename_all = "snake_case")]
pub enum Plan {
    /// Being built.
    Draft(DraftPlan),
    /// Waiting for the human.
    Proposal(ProposalPlan),
    /// Approved.
    Approved(ApprovedPlan),
    /// Rejected.
    Rejected(RejectedPlan),
}

impl Plan {
    /// Reads a stored plan document, checking its format version first.
    ///
    /// # Errors
    ///
    /// See [`crate::format::read_document`].
    pub fn from_json(text: &str) -> Result<Self, DocumentError> {
        crate::format::read_document(text, "plan")
    }

    /// The stage.
    #[must_use]
    pub const fn stage(&self) -> PlanStage {
        match self {
            Self::Draft(_) => PlanStage::Draft,
            Self::Proposal(_) => PlanStage::Proposal,
            Self::Approved(_) => PlanStage::Approved,
            Self::Rejected(_) => PlanStage::Rejected,
        }
    }

    /// What every stage holds.
    const fn common(&self) -> &PlanCommon {
        match self {
            Self::Draft(p) => &p.common,
            Self::Proposal(p) => &p.common,
            Self::Approved(p) => &p.common,
            Self::Rejected(p) => &p.common,
        }
    }

    /// The id.
    #[must_use]
    pub const fn id(&self) -> PlanId {
        self.common().id
    }

    /// The content.
    #[must_use]
    pub const fn content(&self) -> &PlanContent {
        &self.common().content
    }

    /// When it was created.
    #[must_use]
    pub const fn created_at(&self) -> OffsetDateTime {
        self.common().created_at
    }

    /// The plan this one replaces.
    #[must_use]
    pub const fn supersedes(&self) -> Option<PlanId> {
        self.common().supersedes
    }

    /// The history.
    #[must_use]
    pub fn history(&self) -> &[PlanEvent] {
        &self.common().history
    }

    /// Who asked for the plan, if recorded.
    #[must_use]
    pub const fn requested_by(&self) -> Option<&Requester> {
        self.common().requested_by.as_ref()
    }

    /// The latest change request's feedback, if the plan went back to draft.
    #[must_use]
    pub fn latest_feedback(&self) -> Option<&str> {
        self.history().iter().rev().find_map(|e| match e {
            PlanEvent::ChangesRequested { feedback, .. } => Some(feedback.as_str()),
            PlanEvent::Submitted { .. } => None,
        })
    }
}

impl From<DraftPlan> for Plan {
    fn from(p: DraftPlan) -> Self {
        Self::Draft(p)
    }
}
impl From<ProposalPlan> for Plan {
    fn from(p: ProposalPlan) -> Self {
        Self::Proposal(p)
    }
}
impl From<ApprovedPlan> for Plan {
    fn from(p: ApprovedPlan) -> Self {
        Self::Approved(p)
    }
}
impl From<RejectedPlan> for Plan {
    fn from(p: RejectedPlan) -> Self {
        Self::Rejected(p)
    }
}
