//! Approvals under a signed policy at the service layer: several people with their own keys on
//! one store, the plan approved when the policy is satisfied, and what the check before a run
//! costs per approval.
//!
//! `cargo test -p orca-services --test it team_policy:: -- --nocapture` prints the figures.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use orca_core::{AgentId, Requester};
use orca_services::PlanningService;
use orca_services::policy::{PolicyContext, PolicyDecision, SignedPolicy, Surroundings};
use orca_store::signing::policy_statement;
use orca_store::{Authority, MemoryStore, SigningKey, Store};
use support::*;

const RULES: &str =
    "[[rule]]\nname = \"two\"\nrequire = 2\nfrom = [\"alice\", \"bob\", \"carol\"]\n";

fn keys() -> [(&'static str, SigningKey); 3] {
    [
        ("alice", SigningKey::from_seed([1; 32])),
        ("bob", SigningKey::from_seed([2; 32])),
        ("carol", SigningKey::from_seed([3; 32])),
    ]
}

/// `who`'s planning service on the shared store, under the admin-signed policy.
fn as_person(shared: &MemoryStore, who: &str) -> (PlanningService, Authority) {
    let admin = SigningKey::from_seed([9; 32]);
    let mut text = "format_version = 1\n[approvers]\n".to_owned();
    for (name, key) in keys() {
        text.push_str(&format!("{name} = \"{}\"\n", key.public()));
    }
    text.push_str(RULES);
    let digest = orca_core::Digest::of_bytes(text.as_bytes());
    let signature = admin.sign(&policy_statement(&digest));
    let mine = keys().into_iter().find(|(n, _)| *n == who).unwrap().1;
    let authority = Authority::new(Some(mine.clone()), keys().map(|(_, k)| k.public()))
        .with_policy_admins([admin.public()]);
    let signed = SignedPolicy::from_parts(text, signature, &authority).unwrap();
    let ctx = PolicyContext {
        signed,
        around: Surroundings::default(),
        requester: Requester {
            name: format!("user:{who}"),
            key: Some(mine.public().to_string()),
        },
    };
    let store: Arc<dyn Store> = Arc::new(shared.clone().with_authority(authority.clone()));
    let agents: BTreeSet<AgentId> = [AgentId::shell()].into_iter().collect();
    (
        PlanningService::new(store, agents).with_policy(Some(Arc::new(ctx))),
        authority,
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::test]
async fn two_of_three_approve_and_the_check_per_approval_is_cheap() {
    let shared = MemoryStore::new();
    let (alice, _) = as_person(&shared, "alice");
    let (bob, _) = as_person(&shared, "bob");
    let (carol, _) = as_person(&shared, "carol");
    let proposal = alice
        .create_proposal(content(vec![step("a", "shell").with_command("true")]), None)
        .await
        .unwrap();
    let id = proposal.id();
    assert!(
        alice.approve_as_approver(id, None, None).await.is_err(),
        "the requester's own approval"
    );
    assert!(matches!(
        bob.approve_as_approver(id, None, None).await.unwrap(),
        PolicyDecision::Pending(..)
    ));
    assert!(matches!(
        carol.approve_as_approver(id, None, None).await.unwrap(),
        PolicyDecision::Approved(..)
    ));
    let approved = alice.approved(id).await.unwrap();

    // The check before a run, timed: the recorded policy's admin signature, each approver's
    // signature, the count recomputed (plus reading the plan log from the memory store).
    let store = shared.clone().with_authority(as_person(&shared, "alice").1);
    let mut policy_checks = Vec::new();
    for _ in 0..201 {
        let t = Instant::now();
        orca_services::approval::check(&store, &approved)
            .await
            .unwrap()
            .unwrap();
        policy_checks.push(t.elapsed().as_secs_f64() * 1e6);
    }
    // Control: one key's approval, checked the same way.
    let solo_store =
        MemoryStore::new().with_authority(Authority::new(Some(SigningKey::from_seed([1; 32])), []));
    let solo = PlanningService::new(
        Arc::new(solo_store.clone()),
        [AgentId::shell()].into_iter().collect(),
    );
    let p = solo
        .create_proposal(content(vec![step("a", "shell").with_command("true")]), None)
        .await
        .unwrap();
    let solo_plan = solo.approve(p.id(), "alice", None).await.unwrap();
    let mut solo_checks = Vec::new();
    for _ in 0..201 {
        let t = Instant::now();
        orca_services::approval::check(&solo_store, &solo_plan)
            .await
            .unwrap()
            .unwrap();
        solo_checks.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (m, s) = (median(policy_checks), median(solo_checks));
    println!(
        "check before a run, median of 201: 2-of-3 policy {m:.0} µs ({:.0} µs per approval), one key {s:.0} µs",
        m / 2.0
    );
}

/// Votes signed on the approvers' machines, recorded by another person's service (a web
/// server run by the requester, whose own approval never counts): only each approver's own
/// signature, for this plan, this content, this policy and recently, counts; the recorded plan
/// passes the check before a run.
#[tokio::test]
async fn votes_signed_elsewhere_count_only_as_their_signers() {
    use orca_services::policy::SignedVote;
    let shared = MemoryStore::new();
    let (alice, _) = as_person(&shared, "alice");
    let (server, _) = as_person(&shared, "alice");
    let ctx_digest = server.policy().unwrap().signed.digest.clone();
    let [_, (_, bob_key), (_, carol_key)] = keys();
    let one = alice
        .create_proposal(content(vec![step("a", "shell").with_command("true")]), None)
        .await
        .unwrap();
    let two = alice
        .create_proposal(content(vec![step("a", "shell").with_command("true")]), None)
        .await
        .unwrap();
    let (id, digest) = (one.id(), one.content().digest());
    let name = |n: &str| n.parse::<orca_core::policy::ApproverName>().unwrap();
    let vote = |key: &SigningKey, who: &str, plan, digest: &orca_core::Digest| {
        SignedVote::sign(
            key,
            plan,
            digest.clone(),
            ctx_digest.clone(),
            name(who),
            None,
        )
    };
    let mut refused = Vec::new();
    // bob's vote through carol's binding.
    let bobs = vote(&bob_key, "bob", id, &digest);
    refused.push(server.approve_with_vote(id, &bobs, &name("carol")).await);
    // bob's vote for the other plan (same content, same digest).
    let other = vote(&bob_key, "bob", two.id(), &digest);
    refused.push(server.approve_with_vote(id, &other, &name("bob")).await);
    // bob's name, carol's key.
    let forged = vote(&carol_key, "bob", id, &digest);
    refused.push(server.approve_with_vote(id, &forged, &name("bob")).await);
    // Another content digest.
    let elsewhere = orca_core::Digest::of_bytes(b"other content");
    let wrong = vote(&bob_key, "bob", id, &elsewhere);
    refused.push(server.approve_with_vote(id, &wrong, &name("bob")).await);
    // Another policy.
    let mut under_other = bobs.clone();
    under_other.policy = orca_core::Digest::of_bytes(b"another policy");
    refused.push(
        server
            .approve_with_vote(id, &under_other, &name("bob"))
            .await,
    );
    // Two hours old (re-signed, so only its age is wrong).
    let old = time::OffsetDateTime::now_utc() - time::Duration::hours(2);
    let old = old.replace_nanosecond(0).unwrap();
    let mut stale = bobs.clone();
    stale.at = old
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    stale.signature = bob_key.sign(&stale.statement().unwrap());
    refused.push(server.approve_with_vote(id, &stale, &name("bob")).await);
    let n = refused.len();
    let errors: Vec<String> = refused
        .into_iter()
        .map(|r| r.err().map(|e| e.to_string()).unwrap_or_default())
        .collect();
    for e in &errors {
        println!("refused: {e}");
    }
    assert!(
        errors.iter().all(|e| e.contains("nothing was recorded")),
        "{errors:?}"
    );
    assert!(
        matches!(server.plan(id).await.unwrap(), orca_core::Plan::Proposal(p) if p.approvals().is_none())
    );

    // The control: bob's and carol's own votes.
    assert!(matches!(
        server
            .approve_with_vote(id, &bobs, &name("bob"))
            .await
            .unwrap(),
        PolicyDecision::Pending(..)
    ));
    assert!(
        server
            .approve_with_vote(id, &bobs, &name("bob"))
            .await
            .is_err(),
        "twice"
    );
    let carols = vote(&carol_key, "carol", id, &digest);
    assert!(matches!(
        server
            .approve_with_vote(id, &carols, &name("carol"))
            .await
            .unwrap(),
        PolicyDecision::Approved(..)
    ));
    let approved = alice.approved(id).await.unwrap();
    let store = shared.clone().with_authority(as_person(&shared, "alice").1);
    orca_services::approval::check(&store, &approved)
        .await
        .unwrap()
        .unwrap();
    println!(
        "votes signed elsewhere: {n} hostile refused (nothing recorded); bob + carol approved; the check before a run passes"
    );
}
