//! A planner's conversation goes to the log of the plan it creates, and only there:
//! a planner that first submits ANOTHER plan (whose result names it) must not send its conversation to that
//! plan's log. Counted: entries in each log.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::sync::Arc;

use orca_core::{AgentInfo, AuditKind, PlanId, Role, ToolCall, ToolHost, Usage};
use orca_services::tools::names;
use orca_services::{CallMode, Gate, NoHuman};
use orca_store::{AuditLogId, AuditStore, MemoryStore};
use serde_json::{Value, json};
use support::*;

fn planner() -> AgentInfo {
    AgentInfo {
        id: agent("planner"),
        role: Role::Planner,
        description: String::new(),
        backend: "test".to_owned(),
        model: None,
        workspace_tools: Vec::new(),
    }
}

async fn call(gate: &Gate, name: &str, arguments: Value) -> Value {
    gate.call(&ToolCall {
        id: "c".to_owned(),
        name: name.to_owned(),
        arguments,
    })
    .await
    .unwrap()
}

async fn kinds(store: &MemoryStore, plan: PlanId) -> Vec<String> {
    store
        .entries(AuditLogId::Plan { plan_id: plan })
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

#[tokio::test]
async fn the_conversation_goes_to_the_plan_it_created_and_nowhere_else() {
    let store = Arc::new(MemoryStore::new());
    let orca = orca(store.clone(), ScriptedAgents::new(), Arc::new(NoHuman));
    // Another draft, ready to submit, made earlier by someone else (no recording).
    let someone = Gate::new(orca.tools().clone(), &planner(), CallMode::Planning, None);
    let other: PlanId = call(
        &someone,
        names::PLAN_CREATE_DRAFT,
        json!({ "goal": "another" }),
    )
    .await["plan_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    for (tool, items) in [
        (names::PLAN_SET_ASSUMPTIONS, "a"),
        (names::PLAN_SET_RISKS, "r"),
        (names::PLAN_SET_VERIFICATION, "v"),
    ] {
        call(
            &someone,
            tool,
            json!({ "plan_id": other, "items": [items] }),
        )
        .await;
    }
    call(
        &someone,
        names::PLAN_ADD_STEP,
        json!({ "plan_id": other, "step": step("a", "coder") }),
    )
    .await;
    let before = kinds(&store, other).await.len();

    let gate = Gate::new(orca.tools().clone(), &planner(), CallMode::Planning, None)
        .recording_planning(None);
    gate.model_answered(1, "Let me look at what exists.", &Usage::default())
        .await;
    // Submitting the other plan names it in the result: the conversation must not go there.
    let submitted = call(&gate, names::PLAN_SUBMIT, json!({ "plan_id": other })).await;
    assert_eq!(submitted["plan_id"], json!(other));
    let created = call(&gate, names::PLAN_CREATE_DRAFT, json!({ "goal": "mine" })).await;
    let mine: PlanId = created["plan_id"].as_str().unwrap().parse().unwrap();
    gate.model_answered(2, "Drafted.", &Usage::default()).await;

    // The other plan's log got its own `plan.submitted`, nothing of this conversation.
    let other_after = kinds(&store, other)
        .await
        .iter()
        .skip(before)
        .filter(|k| *k != AuditKind::PlanSubmitted.as_str())
        .count();
    let mine_kinds = kinds(&store, mine).await;
    let answers = mine_kinds
        .iter()
        .filter(|k| *k == AuditKind::AgentAnswer.as_str())
        .count();
    let calls = mine_kinds
        .iter()
        .filter(|k| *k == AuditKind::ToolCall.as_str())
        .count();
    println!(
        "planner entries: other plan's log +{other_after}; own log: {answers} answers, {calls} tool calls ({mine_kinds:?})"
    );
    assert_eq!(other_after, 0, "nothing went to the other plan's log");
    assert_eq!(answers, 2);
    assert_eq!(
        calls, 2,
        "the read (kept until the plan existed) and the create"
    );
    assert_eq!(
        mine_kinds[0],
        AuditKind::PlanCreated.as_str(),
        "plan.created first"
    );
    // A revision knows its plan from the start.
    let gate = Gate::new(orca.tools().clone(), &planner(), CallMode::Planning, None)
        .recording_planning(Some(mine));
    gate.model_answered(1, "Revising.", &Usage::default()).await;
    assert_eq!(kinds(&store, mine).await.len(), mine_kinds.len() + 1);
}
