//! The web inbox under an approval policy records approvers' own signatures and makes none.
//! Real binary, real server: the server is run by a user who is no approver (`admin`), tokens
//! are bound to approver names, and each approver signs with `orca policy vote` from their own
//! config home. Hostile cases try to approve with a token bound to someone else, a signature
//! over another digest, a signature replayed from another plan with the same content, the
//! requester's own signature, and the server user's key (an unbound token, and a vote for bob
//! forged with the server user's key); the control is the honest path: two approvers through the
//! web satisfy 2 of {alice, bob, carol} and the plan runs.
//!
//! `cargo test -p orca --test it web_signed_approvals:: -- --nocapture` prints the counts.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "tests print what they count"
)]

use serde_json::Value;

use crate::common::project::{code, stderr, stdout};
use crate::team_approvals::{TWO_OF_THREE, Team, infra_plan, text};
use crate::web_support::{Project, Server, client, get, nonce, post, shown_digest};

/// A token for `name` in `who`'s token file, bound to `approver` when given.
fn token(t: &Team, who: &str, name: &str, approver: Option<&str>) -> String {
    let mut args = vec!["serve", "--new-token", name];
    if let Some(a) = approver {
        args.extend(["--approver", a]);
    }
    let out = t.run(who, &args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out).trim().to_owned()
}

/// The plan's full id.
fn full_id(t: &Team, plan: &str) -> String {
    let out = t.run("alice", &["--json", "plan", "show", plan]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["plan_id"].as_str().unwrap().to_owned()
}

/// `who` signs an approval of `plan` over `digest` on their machine: the line to paste.
fn vote(t: &Team, who: &str, plan: &str, digest: &str) -> String {
    let out = t.run(who, &["policy", "vote", plan, "--digest", digest]);
    assert_eq!(code(&out), 0, "policy vote as {who}: {}", stderr(&out));
    stdout(&out).trim().to_owned()
}

/// Opens the approval page of `plan` with `token` and posts `vote` from it: (status, body).
async fn approve(server: &Server, token: &str, plan: &str, vote: &str) -> (u16, String) {
    let c = client();
    let url = server.url(&format!("/plans/{plan}/approve"));
    let (status, confirm) = get(&c, &url, token).await;
    if status != 200 {
        return (status, confirm);
    }
    let nonce = nonce(&confirm, Some(&format!("/plans/{plan}/approve")));
    let digest = shown_digest(&confirm);
    let form = [
        ("nonce", nonce.as_str()),
        ("confirm", "yes"),
        ("digest", digest.as_str()),
        ("vote", vote),
    ];
    let (status, body, _) = post(&c, &url, token, &form).await;
    (status, body)
}

/// The signing keys of the plan's `plan.approval.given` entries.
fn given_keys(t: &Team, plan: &str) -> Vec<String> {
    t.plan_log(plan)
        .iter()
        .filter(|e| e["kind"] == "plan.approval.given")
        .map(|e| e["data"]["signature"]["key"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_approvers_sign_in_the_web_with_their_own_keys_and_nobody_signs_for_another() {
    let t = Team::new();
    t.policy(TWO_OF_THREE, "admin");
    let plan = full_id(&t, &t.propose("alice", &infra_plan()));
    // The same content again: the same digest, another plan.
    let other = full_id(&t, &t.propose("alice", &infra_plan()));
    let digest = {
        let out = t.run("alice", &["--json", "plan", "show", &plan]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["content"]["digest"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_default()
    };
    // admin runs the server: no approver, and holds the token file.
    let admin = Project {
        dir: tempfile::tempdir().unwrap(),
        root: t.project.path().to_path_buf(),
        home: t.home("admin").to_path_buf(),
    };
    let bob_token = token(&t, "admin", "bob-web", Some("bob"));
    let carol_token = token(&t, "admin", "carol-web", Some("carol"));
    let alice_token = token(&t, "admin", "alice-web", Some("alice"));
    let admin_token = token(&t, "admin", "admin-web", None);
    let server = Server::start(&admin, &[]);

    // The page shows the digest, who you approve as, and the command; never a key.
    let (status, page) = get(
        &client(),
        &server.url(&format!("/plans/{plan}/approve")),
        &bob_token,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let shown = shown_digest(&page);
    assert!(digest.is_empty() || digest == shown, "{digest} vs {shown}");
    assert!(
        page.contains(&format!("orca policy vote {plan} --digest {shown}"))
            && page.contains("<dd id=\"approver\">bob</dd>")
            && page.contains("needs 2 of {bob, carol}; none given"),
        "{page}"
    );

    let mut refused = Vec::new();
    let bob_vote = vote(&t, "bob", &plan, &shown);
    let carol_vote = vote(&t, "carol", &plan, &shown);

    // 1. A token bound to bob bringing carol's (valid) signature.
    let (status, body) = approve(&server, &bob_token, &plan, &carol_vote).await;
    assert!(
        status >= 400 && body.contains("approves only as bob"),
        "{status} {body}"
    );
    refused.push(("bob's token, carol's signature", status));

    // 2. bob's signature over another digest.
    let zeros = format!("sha256:{}", "0".repeat(64));
    let wrong = vote(&t, "bob", &plan, &zeros);
    let (status, body) = approve(&server, &bob_token, &plan, &wrong).await;
    assert!(
        status >= 400 && body.contains("is over the digest"),
        "{status} {body}"
    );
    refused.push(("a signature over another digest", status));

    // 3. bob's signature for the other plan (same content, same digest), replayed here.
    let replayed = vote(&t, "bob", &other, &shown);
    let (status, body) = approve(&server, &bob_token, &plan, &replayed).await;
    assert!(
        status >= 400 && body.contains(&format!("is for plan {other}")),
        "{status} {body}"
    );
    refused.push(("bob's signature for another plan", status));

    // 4. A signed vote edited after signing (bob's, its note changed).
    let mut edited: Value = serde_json::from_str(&bob_vote).unwrap();
    edited["note"] = Value::from("approved by the whole team");
    let (status, body) = approve(&server, &bob_token, &plan, &edited.to_string()).await;
    assert!(
        status >= 400 && body.contains("does not verify"),
        "{status} {body}"
    );
    refused.push(("bob's signature, its note edited", status));

    // 5. The requester, alice, with her own signature through her own token.
    let alice_vote = vote(&t, "alice", &plan, &shown);
    let (status, body) = approve(&server, &alice_token, &plan, &alice_vote).await;
    assert!(
        status >= 400 && body.contains("nobody approves their own request"),
        "{status} {body}"
    );
    refused.push(("the requester's own signature", status));

    // 6. The server user: an unbound token cannot approve at all …
    let (status, body) = approve(&server, &admin_token, &plan, &bob_vote).await;
    assert!(
        status == 403 && body.contains("bound to no approver"),
        "{status} {body}"
    );
    refused.push(("the server user's unbound token", status));
    // … its key is no approver's (`policy vote` refuses) …
    let out = t.run("admin", &["policy", "vote", &plan, "--digest", &shown]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        text(&out).contains("is not an approver's"),
        "{}",
        text(&out)
    );
    // … and a vote for bob signed with the server user's key, through bob's token, is refused.
    let admin_key = orca_store::keys::load(&t.home("admin").join("orca/signing.key"))
        .unwrap()
        .unwrap();
    let parsed = orca_services::policy::SignedVote::parse(&bob_vote).unwrap();
    let forged = orca_services::policy::SignedVote::sign(
        &admin_key,
        parsed.plan_id,
        parsed.digest.clone(),
        parsed.policy.clone(),
        parsed.approver.clone(),
        None,
    );
    let forged = serde_json::to_string(&forged).unwrap();
    let (status, body) = approve(&server, &bob_token, &plan, &forged).await;
    assert!(
        status >= 400 && body.contains("which is not bob"),
        "{status} {body}"
    );
    refused.push(("a vote for bob signed with the server user's key", status));

    assert_eq!(t.stage(&plan), "proposal");
    assert!(given_keys(&t, &plan).is_empty(), "nothing was recorded");

    // The control: bob and carol, each with their own key, through their own tokens.
    let (status, body) = approve(&server, &bob_token, &plan, &bob_vote).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("Approval recorded") && body.contains("1 given (bob)"),
        "{body}"
    );
    assert_eq!(t.stage(&plan), "proposal");
    // The same signature twice counts once.
    let (status, body) = approve(&server, &bob_token, &plan, &bob_vote).await;
    assert!(status >= 400, "{status} {body}");
    refused.push(("bob's signature a second time", status));
    let (status, body) = approve(&server, &carol_token, &plan, &carol_vote).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("2 given (bob, carol)"), "{body}");
    assert_eq!(t.stage(&plan), "approved");
    let keys = given_keys(&t, &plan);
    assert_eq!(keys, [t.key("bob"), t.key("carol")]);
    assert!(
        !keys.contains(&t.key("admin")),
        "the server's key signed nothing"
    );
    let run = t.run("alice", &["run", &plan]);
    assert_eq!(code(&run), 0, "{}", text(&run));
    // `audit verify`: the approvals verify with the approvers' keys alone; the plan log's seal
    // is the server's (its process wrote the entries), so checking the seal needs its key
    // trusted, as for any other writer of the store.
    let verify = t.run("alice", &["audit", "verify", "--all"]);
    let out = text(&verify);
    assert!(
        out.contains("signed by bob (entry") && out.contains("audit: 1 problem found"),
        "{out}"
    );
    assert!(
        out.contains("seal: it is signed by") && out.contains(&t.key("admin")),
        "{out}"
    );
    let trusted = tempfile::tempdir().unwrap();
    let server_key = trusted.path().join("server.pub");
    std::fs::write(&server_key, format!("{}\n", t.key("admin"))).unwrap();
    let verify = t.run(
        "alice",
        &[
            "--trusted-key",
            server_key.to_str().unwrap(),
            "audit",
            "verify",
            "--all",
        ],
    );
    assert_eq!(code(&verify), 0, "{}", text(&verify));

    for (what, status) in &refused {
        println!("refused ({status}): {what}");
    }
    println!(
        "web under a 2-of-3 policy: {} hostile attempts refused, none wrote an entry; 2 signed approvals recorded by 2 approvers' keys ({} by the server's); approved and ran",
        refused.len(),
        keys.iter().filter(|k| **k == t.key("admin")).count()
    );
}
