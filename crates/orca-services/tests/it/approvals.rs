//! Signed approvals at the service layer (ADR 0013): an approval signed with one key runs only
//! for whoever trusts that key; a refusal is typed, names the plan-log entry, and is recorded in
//! the plan's run register.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use orca_core::AgentId;
use orca_services::{PlanningService, ServiceError};
use orca_store::{AuditLogId, AuditStore, Authority, MemoryStore, SigningKey, Store};
use support::*;

fn planning(store: MemoryStore) -> PlanningService {
    let store: Arc<dyn Store> = Arc::new(store);
    let agents: BTreeSet<AgentId> = [AgentId::shell()].into_iter().collect();
    PlanningService::new(store, agents)
}

#[tokio::test]
async fn an_approval_counts_only_for_whoever_trusts_its_key() {
    let alice = SigningKey::from_seed([1; 32]);
    let bob = SigningKey::from_seed([2; 32]);
    let shared = MemoryStore::new();
    let as_alice = planning(
        shared
            .clone()
            .with_authority(Authority::new(Some(alice.clone()), [])),
    );
    let proposal = as_alice
        .create_proposal(content(vec![step("a", "shell").with_command("true")]), None)
        .await
        .unwrap();
    let id = proposal.id();
    as_alice
        .approve(id, "alice", Some("ok".into()))
        .await
        .unwrap();
    // The plan log is sealed and the approval signed: Alice runs it.
    assert!(as_alice.approved(id).await.is_ok());
    let log = AuditLogId::Plan { plan_id: id };
    assert!(shared.verify(log).await.unwrap().is_intact());

    // Bob does not trust Alice's key: refused, located, recorded.
    let as_bob = planning(shared.clone().with_authority(Authority::new(Some(bob), [])));
    match as_bob.approved(id).await {
        Err(ServiceError::ApprovalRefused(p)) => {
            assert_eq!(p.plan, id);
            assert_eq!(p.entry, Some(1), "the plan.approved entry");
            assert!(p.problem.contains("not trusted"), "{}", p.problem);
        }
        other => panic!("an untrusted approval was accepted: {other:?}"),
    }
    let register = shared
        .entries(AuditLogId::Runs { plan_id: id })
        .await
        .unwrap();
    assert!(register.iter().any(|e| e.kind == "run.refused"));

    // Bob trusting Alice's public key (from outside the project) accepts it.
    let trusting = planning(
        shared
            .clone()
            .with_authority(Authority::new(None, [alice.public()])),
    );
    assert!(trusting.approved(id).await.is_ok());
}
