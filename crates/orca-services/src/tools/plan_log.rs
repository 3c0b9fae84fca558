//! A planner's conversation in its plan's log: the answers it writes and the tools
//! it calls (research and plan tools alike) are recorded like a step's, as `agent.answer` and
//! `tool.call` entries of the log of the plan it works on.
//!
//! A revision or a replan knows its plan from the start. A new request does not: the plan
//! exists only once the planner's `orca_plan_create_draft` returned its id. Until then the
//! entries are kept in memory (at most [`MAX_KEPT`]); that result binds the conversation to the
//! new plan's log and the kept entries are written there, in order, after the plan's own
//! `plan.created` entry. Only a plan the conversation created binds it (the gate passes only
//! `orca_plan_create_draft` results here): a planner that reads or submits another plan must
//! not write into that plan's log. A conversation that never produces a plan (a question back
//! to the user, an error) has no log it belongs to: what was kept is handed back when it ends
//! ([`PlanTranscript::unbound`]), and `orca ask` keeps a planner's that failed in a file.

use std::sync::{Mutex, PoisonError};

use orca_core::PlanId;
use orca_store::AuditLogId;
use orca_store::audit::NewAuditEntry;
use serde_json::Value;

/// The most entries kept before the plan is known (the rest are dropped, and counted).
pub(super) const MAX_KEPT: usize = 256;

#[derive(Debug)]
enum State {
    /// No plan yet: the entries so far, and how many were dropped past [`MAX_KEPT`].
    Unbound(Vec<NewAuditEntry>, usize),
    /// Recording to this plan's log.
    Bound(PlanId),
}

/// Where one planning call's entries go.
#[derive(Debug)]
pub(super) struct PlanTranscript {
    state: Mutex<State>,
}

impl PlanTranscript {
    /// Bound to `plan` when it is known, else waiting for the first plan a tool names.
    pub(super) fn new(plan: Option<PlanId>) -> Self {
        Self {
            state: Mutex::new(plan.map_or_else(|| State::Unbound(Vec::new(), 0), State::Bound)),
        }
    }

    /// Where `entry` goes now: the plan's log, or `None` when it was kept for later.
    pub(super) fn route(&self, entry: NewAuditEntry) -> Option<(AuditLogId, NewAuditEntry)> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match &mut *state {
            State::Bound(plan_id) => Some((AuditLogId::Plan { plan_id: *plan_id }, entry)),
            State::Unbound(kept, dropped) => {
                if kept.len() < MAX_KEPT {
                    kept.push(entry);
                } else {
                    *dropped += 1;
                }
                None
            }
        }
    }

    /// The planner created a draft (`result` of `orca_plan_create_draft`): the conversation is
    /// bound to
    /// that plan from now on, and the entries kept so far are returned to be written there (with
    /// how many were dropped). A later draft takes over the recording.
    pub(super) fn tool_answered(&self, result: &Value) -> (Vec<NewAuditEntry>, usize) {
        let Some(plan) = result
            .get("plan_id")
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<PlanId>().ok())
        else {
            return (Vec::new(), 0);
        };
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *state, State::Bound(plan)) {
            State::Unbound(kept, dropped) => (kept, dropped),
            State::Bound(_) => (Vec::new(), 0),
        }
    }
}

impl PlanTranscript {
    /// The conversation ended: what was kept for a plan that never came (empty once a plan
    /// bound it). Taken: a second call returns nothing.
    pub(super) fn unbound(&self) -> Vec<NewAuditEntry> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match &mut *state {
            State::Unbound(kept, _) => std::mem::take(kept),
            State::Bound(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_wait_for_the_plan_then_go_to_its_log_in_order() {
        let t = PlanTranscript::new(None);
        assert!(
            t.route(NewAuditEntry::new("agent.answer", json!(1)))
                .is_none()
        );
        assert!(t.route(NewAuditEntry::new("tool.call", json!(2))).is_none());
        assert_eq!(t.tool_answered(&json!({"stage": "draft"})).0.len(), 0);
        let plan = PlanId::new();
        let (kept, dropped) = t.tool_answered(&json!({"plan_id": plan.to_string()}));
        assert_eq!(
            kept.iter().map(|e| e.data.clone()).collect::<Vec<_>>(),
            [json!(1), json!(2)]
        );
        assert_eq!(dropped, 0);
        let (log, _) = t.route(NewAuditEntry::new("tool.call", json!(3))).unwrap();
        assert_eq!(log, AuditLogId::Plan { plan_id: plan });
        // A second plan takes over; nothing is written twice.
        let other = PlanId::new();
        assert!(
            t.tool_answered(&json!({"plan_id": other.to_string()}))
                .0
                .is_empty()
        );
        let (log, _) = t.route(NewAuditEntry::new("tool.call", json!(4))).unwrap();
        assert_eq!(log, AuditLogId::Plan { plan_id: other });
        assert!(
            t.unbound().is_empty(),
            "a bound conversation has nothing unbound"
        );
    }

    #[test]
    fn a_conversation_that_made_no_plan_hands_back_what_it_kept_once() {
        let t = PlanTranscript::new(None);
        assert!(t.route(NewAuditEntry::new("tool.call", json!(1))).is_none());
        assert!(
            t.route(NewAuditEntry::new("agent.answer", json!(2)))
                .is_none()
        );
        let kept: Vec<_> = t.unbound().into_iter().map(|e| e.data).collect();
        assert_eq!(kept, [json!(1), json!(2)]);
        assert!(t.unbound().is_empty(), "taken");
    }

    #[test]
    fn at_most_max_kept_entries_wait() {
        let t = PlanTranscript::new(None);
        for i in 0..MAX_KEPT + 5 {
            assert!(t.route(NewAuditEntry::new("tool.call", json!(i))).is_none());
        }
        let (kept, dropped) = t.tool_answered(&json!({"plan_id": PlanId::new().to_string()}));
        assert_eq!((kept.len(), dropped), (MAX_KEPT, 5));
    }
}
