//! Reading a stored plan in one pass. A [`Plan`] is written as an internally tagged enum (its
//! `stage`) whose variants flatten the part every stage holds; serde reads such a document by
//! first buffering ALL of it into its generic content tree (the tag may come last), then the
//! flattened part a second time. For an 800-step plan with 166,000 dependency names that was
//! half of a worker's 20 ms to load and check the plan it runs. The document's shape is fixed
//! by its stage, so it is read here into one flat struct, straight from the text, and the
//! stage's own fields are checked after.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use time::OffsetDateTime;

use super::{
    Approval, ApprovedPlan, DraftPlan, PendingApprovals, Plan, PlanCommon, PlanContent, PlanEvent,
    PlanStage, ProposalPlan, RejectedPlan, Rejection, Requester,
};
use crate::format::FormatVersion;
use crate::id::PlanId;

/// Every field a plan document of any stage may hold.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    stage: PlanStage,
    format_version: FormatVersion,
    id: PlanId,
    #[serde(with = "time::serde::rfc3339")]
    created_at: OffsetDateTime,
    #[serde(default)]
    supersedes: Option<PlanId>,
    #[serde(default)]
    history: Vec<PlanEvent>,
    #[serde(default)]
    requested_by: Option<Requester>,
    content: PlanContent,
    #[serde(default)]
    approvals: Option<PendingApprovals>,
    #[serde(default)]
    approval: Option<Approval>,
    #[serde(default)]
    rejection: Option<Rejection>,
}

/// The fields every stage's document holds (named when another stage's field is found).
const COMMON: [&str; 8] = [
    "stage",
    "format_version",
    "id",
    "created_at",
    "supersedes",
    "history",
    "requested_by",
    "content",
];

impl<'de> Deserialize<'de> for Plan {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        let common = PlanCommon {
            format_version: wire.format_version,
            id: wire.id,
            created_at: wire.created_at,
            supersedes: wire.supersedes,
            history: wire.history,
            requested_by: wire.requested_by,
            content: wire.content,
        };
        if wire.approvals.is_some() && wire.stage != PlanStage::Proposal {
            return Err(D::Error::unknown_field("approvals", &COMMON));
        }
        // A field another stage holds is unknown to this one, as it was to the derived reader.
        let unknown = |field: &str| D::Error::unknown_field(field, &COMMON);
        match (wire.stage, wire.approval, wire.rejection) {
            (PlanStage::Draft, None, None) => Ok(Self::Draft(DraftPlan { common })),
            (PlanStage::Proposal, None, None) => Ok(Self::Proposal(ProposalPlan {
                common,
                approvals: wire.approvals,
            })),
            (PlanStage::Approved, Some(approval), None) => {
                Ok(Self::Approved(ApprovedPlan { common, approval }))
            }
            (PlanStage::Rejected, None, Some(rejection)) => {
                Ok(Self::Rejected(RejectedPlan { common, rejection }))
            }
            (PlanStage::Approved, None, _) => Err(D::Error::missing_field("approval")),
            (PlanStage::Rejected, _, None) => Err(D::Error::missing_field("rejection")),
            (_, Some(_), _) => Err(unknown("approval")),
            (_, _, Some(_)) => Err(unknown("rejection")),
        }
    }
}
