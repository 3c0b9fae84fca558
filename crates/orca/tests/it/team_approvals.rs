//! Approvals for a team, through the real binary: a signed approval policy kept outside the
//! project, people with their own keys in their own config homes approving the same plan on
//! one store, the requester's own approval never counted, a forged policy refused, a policy
//! edited after an approval not changing what that approval needed, and the timers (expiry,
//! escalation) recorded and sent through the notifier.
//!
//! `cargo test -p orca --test it team_approvals:: -- --nocapture` prints the counts.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use tempfile::TempDir;

use crate::common::project::{code, plan_doc, stderr, stdout};

/// A project, a team directory holding the policy, and one config home per person.
pub(crate) struct Team {
    pub(crate) project: TempDir,
    shared: TempDir,
    homes: Vec<(&'static str, TempDir)>,
}

const PEOPLE: [&str; 5] = ["alice", "bob", "carol", "dave", "admin"];

impl Team {
    pub(crate) fn new() -> Self {
        let t = Self {
            project: tempfile::tempdir().unwrap(),
            shared: tempfile::tempdir().unwrap(),
            homes: PEOPLE
                .iter()
                .map(|p| (*p, tempfile::tempdir().unwrap()))
                .collect(),
        };
        for who in PEOPLE {
            let out = t.run(who, &["init"]);
            assert_eq!(code(&out), 0, "init as {who}: {}", stderr(&out));
        }
        t
    }

    pub(crate) fn home(&self, who: &str) -> &Path {
        self.homes.iter().find(|(n, _)| *n == who).unwrap().1.path()
    }

    pub(crate) fn run(&self, who: &str, args: &[&str]) -> Output {
        crate::common::orca(self.project.path(), self.home(who), args)
    }

    pub(crate) fn key(&self, who: &str) -> String {
        let text = std::fs::read_to_string(self.home(who).join("orca/signing.key")).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("# public key: "))
            .unwrap()
            .to_owned()
    }

    pub(crate) fn policy_path(&self) -> PathBuf {
        self.shared.path().join("policy.toml")
    }

    /// Writes the policy (approvers alice, bob, carol, dave) with `rules`, signed by `signer`,
    /// and points every person's config at it, trusting admin's key.
    pub(crate) fn policy(&self, rules: &str, signer: &str) {
        let mut text = "format_version = 1\n\n[approvers]\n".to_owned();
        for who in ["alice", "bob", "carol", "dave"] {
            text.push_str(&format!("{who} = \"{}\"\n", self.key(who)));
        }
        text.push('\n');
        text.push_str(rules);
        std::fs::write(self.policy_path(), text).unwrap();
        let path = self.policy_path().display().to_string();
        let out = self.run(signer, &["policy", "sign", &path]);
        assert_eq!(code(&out), 0, "policy sign: {}", stderr(&out));
        let admin = self.key("admin");
        for who in PEOPLE {
            std::fs::write(
                self.home(who).join("orca/config.toml"),
                format!("[approval]\npolicy = \"{path}\"\npolicy_admin_key = \"{admin}\"\n"),
            )
            .unwrap();
        }
    }

    /// `who` creates a proposal from `doc`; its id.
    pub(crate) fn propose(&self, who: &str, doc: &str) -> String {
        let file = self.project.path().join("plan.json");
        std::fs::write(&file, doc).unwrap();
        let out = self.run(who, &["plan", "create", "--quiet", file.to_str().unwrap()]);
        assert_eq!(code(&out), 0, "plan create: {}", stderr(&out));
        stdout(&out).trim().to_owned()
    }

    pub(crate) fn stage(&self, plan: &str) -> String {
        let out = self.run("alice", &["--json", "plan", "show", plan]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["stage"].as_str().unwrap().to_owned()
    }

    pub(crate) fn plan_log(&self, plan: &str) -> Vec<Value> {
        let dir = self.project.path().join(".orca/plans");
        let full = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                p.is_dir()
                    && p.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .ends_with(&plan[plan.len() - 8..])
            })
            .unwrap();
        std::fs::read_to_string(full.join("plan.audit.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// A shell plan writing under `infra/`.
pub(crate) fn infra_plan() -> String {
    let mut doc: Value =
        serde_json::from_str(&plan_doc("change infra", &[("a", "true", &[])])).unwrap();
    doc["steps"][0]["writes"] = serde_json::json!(["infra/main.tf"]);
    doc.to_string()
}

pub(crate) const TWO_OF_THREE: &str = "[[rule]]\nname = \"infra\"\nrequire = 2\nfrom = [\"alice\", \"bob\", \"carol\"]\n[rule.when]\nwrites = [\"infra/**\"]\n";

pub(crate) fn text(out: &Output) -> String {
    format!("{}{}", stdout(out), stderr(out))
}

#[test]
fn two_signers_with_their_own_keys_approve_one_plan_and_the_requester_does_not_count() {
    let t = Team::new();
    t.policy(TWO_OF_THREE, "admin");
    let plan = t.propose("alice", &infra_plan());

    // The requester's own approval is refused and nothing is recorded.
    let own = t.run("alice", &["plan", "approve", &plan]);
    assert_eq!(code(&own), 2, "{}", text(&own));
    assert!(
        text(&own).contains("nobody approves their own request"),
        "{}",
        text(&own)
    );
    let given = |t: &Team| {
        t.plan_log(&plan)
            .iter()
            .filter(|e| e["kind"] == "plan.approval.given")
            .count()
    };
    assert_eq!(given(&t), 0);

    // Bob: recorded, not approved; every surface says what it needs.
    let bob = t.run("bob", &["plan", "approve", &plan]);
    assert_eq!(code(&bob), 0, "{}", text(&bob));
    assert!(
        stdout(&bob).contains("needs 2 of {bob, carol}; 1 given (bob)"),
        "{}",
        stdout(&bob)
    );
    let show = t.run("dave", &["plan", "show", &plan]);
    assert!(
        stdout(&show).contains("needs 2 of {bob, carol}; 1 given (bob)"),
        "{}",
        stdout(&show)
    );
    assert_eq!(t.stage(&plan), "proposal");
    let early = t.run("alice", &["run", &plan]);
    assert_ne!(code(&early), 0, "a plan with one of two approvals ran");

    // Bob again: not counted twice.
    let twice = t.run("bob", &["plan", "approve", &plan]);
    assert_eq!(code(&twice), 2, "{}", text(&twice));

    // Dave is an approver, but not one this rule counts.
    let dave = t.run("dave", &["plan", "approve", &plan]);
    assert_eq!(code(&dave), 2, "{}", text(&dave));

    // Carol: the policy is satisfied.
    let carol = t.run("carol", &["plan", "approve", &plan]);
    assert_eq!(code(&carol), 0, "{}", text(&carol));
    assert_eq!(t.stage(&plan), "approved");
    assert_eq!(given(&t), 2);

    // Two separate entries over the same digest, signed by two different keys.
    let log = t.plan_log(&plan);
    let sigs: Vec<(&Value, &Value)> = log
        .iter()
        .filter(|e| e["kind"] == "plan.approval.given")
        .map(|e| (&e["data"]["digest"], &e["data"]["signature"]["key"]))
        .collect();
    assert_eq!(sigs[0].0, sigs[1].0);
    assert_ne!(sigs[0].1, sigs[1].1);
    assert_eq!(sigs[0].1.as_str().unwrap(), t.key("bob"));
    assert_eq!(sigs[1].1.as_str().unwrap(), t.key("carol"));

    // The requester runs it on her machine, told who satisfied which rule; everyone's verify
    // explains the approval.
    let run = t.run("alice", &["run", &plan]);
    assert_eq!(code(&run), 0, "{}", text(&run));
    assert!(
        stderr(&run).contains("approved under policy sha256:")
            && stderr(&run).contains("2 given (bob, carol); signed by bob (entry"),
        "{}",
        stderr(&run)
    );
    let mut explained = 0;
    for who in PEOPLE {
        let v = t.run(who, &["audit", "verify"]);
        assert_eq!(code(&v), 0, "verify as {who}: {}", text(&v));
        explained += usize::from(
            stdout(&v).contains("rule infra: needs 2 of {bob, carol}; 2 given (bob, carol)")
                && stdout(&v).contains("bob (entry")
                && stdout(&v).contains(&t.key("carol")),
        );
    }
    println!(
        "two signers: requester's approval refused, 1 of 2 did not run, 2 of 2 ran; verify explained the signers for {explained} of {} people",
        PEOPLE.len()
    );
    assert_eq!(explained, PEOPLE.len());
}

/// A way of forging the policy file.
type Forge<'a> = Box<dyn Fn(&Team) + 'a>;

#[test]
fn a_forged_policy_is_refused_and_nothing_runs() {
    let t = Team::new();
    t.policy(TWO_OF_THREE, "admin");
    let plan = t.propose("alice", &infra_plan());
    let path = t.policy_path();
    let signed = std::fs::read_to_string(&path).unwrap();
    let mut refused = 0;
    let mut tried = 0;
    let forgeries: Vec<(&str, Forge<'_>)> = vec![
        (
            "require lowered after signing",
            Box::new(|t: &Team| {
                std::fs::write(
                    t.policy_path(),
                    signed.replace("require = 2", "require = 1"),
                )
                .unwrap();
            }),
        ),
        (
            "signed by an approver, not the admin",
            Box::new(|t: &Team| {
                t.policy(&TWO_OF_THREE.replace("require = 2", "require = 1"), "bob")
            }),
        ),
        (
            "signature removed",
            Box::new(|t: &Team| {
                std::fs::remove_file(orca_services::policy::signature_path(&t.policy_path()))
                    .unwrap();
            }),
        ),
    ];
    for (what, forge) in &forgeries {
        t.policy(TWO_OF_THREE, "admin");
        forge(&t);
        tried += 1;
        let approve = t.run("bob", &["plan", "approve", &plan]);
        let run = t.run("bob", &["run", &plan, "--yes"]);
        let both = code(&approve) == 5 && code(&run) == 5;
        if both {
            refused += 1;
        } else {
            eprintln!(
                "{what}: approve {} run {}: {}",
                code(&approve),
                code(&run),
                text(&approve)
            );
        }
        assert!(
            text(&approve).contains("approval policy"),
            "{what}: {}",
            text(&approve)
        );
    }
    // Control: the genuine policy is accepted.
    t.policy(TWO_OF_THREE, "admin");
    let check = t.run("bob", &["policy", "check", &plan]);
    assert_eq!(code(&check), 0, "{}", text(&check));
    assert_eq!(t.stage(&plan), "proposal");
    println!(
        "forged policies refused (exit 5, nothing approved or run): {refused} of {tried}; the genuine one accepted"
    );
    assert_eq!(refused, tried);
}

#[test]
fn a_policy_edited_after_approval_does_not_change_what_was_required() {
    let t = Team::new();
    t.policy(TWO_OF_THREE, "admin");
    let plan = t.propose("alice", &infra_plan());
    for who in ["bob", "carol"] {
        assert_eq!(code(&t.run(who, &["plan", "approve", &plan])), 0);
    }
    // The admin now requires three, properly signed.
    t.policy(
        &TWO_OF_THREE
            .replace("require = 2", "require = 3")
            .replace("\"carol\"]", "\"carol\", \"dave\"]"),
        "admin",
    );
    let v = t.run("alice", &["audit", "verify"]);
    assert_eq!(code(&v), 0, "{}", text(&v));
    assert!(
        stdout(&v).contains("needs 2 of {bob, carol}; 2 given (bob, carol)"),
        "{}",
        stdout(&v)
    );
    let check = t.run("alice", &["policy", "check", &plan]);
    assert!(
        stdout(&check).contains("rule infra matches (writes infra/main.tf): needs 3"),
        "{}",
        stdout(&check)
    );
    assert!(
        stdout(&check).contains("approved under policy"),
        "{}",
        stdout(&check)
    );
    let run = t.run("alice", &["run", &plan]);
    assert_eq!(code(&run), 0, "{}", text(&run));
    println!(
        "approved under 2-of-3; policy now 3-of-4: verify and run still judge by the recorded 2-of-3"
    );
}

fn notes(t: &Team) -> Vec<Value> {
    std::fs::read_to_string(t.shared.path().join("notes.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn with_notifier(t: &Team) {
    let notes = t.shared.path().join("notes.jsonl");
    let config = t.project.path().join(".orca/config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[notify]\ncommand = \"cat >> {} && echo >> {}\"\n",
        notes.display(),
        notes.display()
    ));
    std::fs::write(config, text).unwrap();
}

#[test]
fn escalation_asks_the_second_set_and_its_approval_counts() {
    let t = Team::new();
    t.policy(
        "[[rule]]\nname = \"infra\"\nrequire = 1\nfrom = [\"bob\"]\nescalate_after_secs = 0\nescalate_to = [\"dave\"]\n[rule.when]\nwrites = [\"infra/**\"]\n",
        "admin",
    );
    with_notifier(&t);
    let plan = t.propose("alice", &infra_plan());
    // Before the escalation, dave does not count.
    let early = t.run("dave", &["plan", "approve", &plan]);
    assert_eq!(code(&early), 2, "{}", text(&early));
    let tick = t.run("alice", &["policy", "timers"]);
    assert_eq!(code(&tick), 0, "{}", text(&tick));
    let sent = notes(&t);
    let escalated: Vec<&Value> = sent
        .iter()
        .filter(|n| n["event"] == "approval_escalated")
        .collect();
    assert_eq!(escalated.len(), 1, "{sent:?}");
    assert_eq!(escalated[0]["approvers"], serde_json::json!(["dave"]));
    assert!(
        t.plan_log(&plan)
            .iter()
            .any(|e| e["kind"] == "plan.approval.escalated")
    );
    // Once: a second tick sends nothing more.
    t.run("alice", &["policy", "timers"]);
    assert_eq!(notes(&t).len(), 1);
    let dave = t.run("dave", &["plan", "approve", &plan]);
    assert_eq!(code(&dave), 0, "{}", text(&dave));
    assert_eq!(t.stage(&plan), "approved");
    let v = t.run("bob", &["audit", "verify"]);
    assert_eq!(code(&v), 0, "{}", text(&v));
    println!(
        "escalation: 1 notification to {{dave}}, recorded; dave refused before it, counted after it; verify ok"
    );
}

#[test]
fn expiry_rejects_never_approves_and_is_audited() {
    let t = Team::new();
    t.policy(
        "[[rule]]\nname = \"infra\"\nrequire = 2\nexpire_after_secs = 3\nremind_before_secs = 3\n[rule.when]\nwrites = [\"infra/**\"]\n",
        "admin",
    );
    with_notifier(&t);
    let plan = t.propose("alice", &infra_plan());
    assert_eq!(code(&t.run("bob", &["plan", "approve", &plan])), 0);
    // The reminder is due at once (3 s before a 3 s expiry).
    t.run("alice", &["policy", "timers"]);
    std::thread::sleep(std::time::Duration::from_millis(3100));
    let tick = t.run("alice", &["policy", "timers"]);
    assert_eq!(code(&tick), 0, "{}", text(&tick));
    let events: Vec<String> = notes(&t)
        .iter()
        .map(|n| n["event"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        events,
        ["approval_reminder", "approval_expired"],
        "{events:?}"
    );
    assert_eq!(t.stage(&plan), "rejected");
    let log = t.plan_log(&plan);
    let rejected = log.iter().find(|e| e["kind"] == "plan.rejected").unwrap();
    assert_eq!(rejected["data"]["expired"], true);
    assert!(log.iter().any(|e| e["kind"] == "plan.approval.reminded"));
    // A late approval does not revive it, and it never runs.
    let late = t.run("carol", &["plan", "approve", &plan]);
    assert_ne!(code(&late), 0);
    assert_ne!(code(&t.run("alice", &["run", &plan])), 0);
    assert_eq!(code(&t.run("alice", &["audit", "verify"])), 0);
    println!(
        "expiry: reminder then rejection sent ({events:?}); recorded plan.approval.reminded and plan.rejected (expired); late approval refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_signer_at_the_terminal_and_one_in_the_web_inbox_approve_together() {
    use crate::web_support::{Server, client, get, nonce, post, shown_digest};
    let t = Team::new();
    t.policy(TWO_OF_THREE, "admin");
    let plan = t.propose("alice", &infra_plan());
    assert_eq!(code(&t.run("bob", &["plan", "approve", &plan])), 0);
    // Carol serves the inbox from her own config home, with a token bound to her name; her
    // approval there is the one she signs with `orca policy vote`.
    let carol = crate::web_support::Project {
        dir: tempfile::tempdir().unwrap(),
        root: t.project.path().to_path_buf(),
        home: t.home("carol").to_path_buf(),
    };
    let out = t.run(
        "carol",
        &["serve", "--new-token", "carol-phone", "--approver", "carol"],
    );
    assert_eq!(code(&out), 0, "{}", text(&out));
    let token = stdout(&out).trim().to_owned();
    let server = Server::start(&carol, &[]);
    let c = client();
    let (_, page) = get(&c, &server.url(&format!("/plans/{plan}")), &token).await;
    assert!(
        page.contains("needs 2 of {bob, carol}; 1 given (bob)"),
        "the web plan page says what the plan needs: {page}"
    );
    let web_approve = |plan: String| {
        let (c, url, token) = (
            c.clone(),
            server.url(&format!("/plans/{plan}/approve")),
            token.clone(),
        );
        let t = &t;
        async move {
            let (_, confirm) = get(&c, &url, &token).await;
            let digest = shown_digest(&confirm);
            let id = confirm
                .split("orca policy vote ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .unwrap()
                .to_owned();
            let vote = t.run("carol", &["policy", "vote", &id, "--digest", &digest]);
            assert_eq!(code(&vote), 0, "{}", text(&vote));
            let form = [
                (
                    "nonce",
                    nonce(&confirm, Some(&format!("/plans/{plan}/approve"))),
                ),
                ("confirm", "yes".to_owned()),
                ("digest", digest),
                ("vote", stdout(&vote).trim().to_owned()),
            ];
            let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
            post(&c, &url, &token, &form).await
        }
    };
    let (status, body, _) = web_approve(plan.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(t.stage(&plan), "approved");
    let keys: Vec<String> = t
        .plan_log(&plan)
        .iter()
        .filter(|e| e["kind"] == "plan.approval.given")
        .map(|e| e["data"]["signature"]["key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys, [t.key("bob"), t.key("carol")]);
    let run = t.run("alice", &["run", &plan]);
    assert_eq!(code(&run), 0, "{}", text(&run));

    // The other order: the web first (recorded, not approved), then the terminal.
    let second = t.propose("alice", &infra_plan());
    let (status, body, _) = web_approve(second.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("Approval recorded") && body.contains("1 given (carol)"),
        "{body}"
    );
    assert_eq!(t.stage(&second), "proposal");
    assert_eq!(code(&t.run("bob", &["plan", "approve", &second])), 0);
    assert_eq!(t.stage(&second), "approved");

    // A rejection through another token on carol's server is that token's, not carol's.
    let out = t.run(
        "carol",
        &["serve", "--new-token", "bob-phone", "--approver", "bob"],
    );
    let bob_token = stdout(&out).trim().to_owned();
    let third = t.propose("alice", &infra_plan());
    let (_, page) = get(&c, &server.url(&format!("/plans/{third}")), &bob_token).await;
    let url = server.url(&format!("/plans/{third}/reject"));
    let form = [
        (
            "nonce",
            nonce(&page, Some(&format!("/plans/{third}/reject"))),
        ),
        ("reason", "not now".to_owned()),
    ];
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, body, _) = post(&c, &url, &bob_token, &form).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(t.stage(&third), "rejected");
    let by: Vec<Value> = t
        .plan_log(&third)
        .iter()
        .filter(|e| e["kind"] == "plan.rejected")
        .map(|e| e["data"]["by"].clone())
        .collect();
    assert_eq!(
        by,
        [Value::from("web:bob-phone")],
        "not recorded as the server's user"
    );
    println!(
        "CLI (bob) + web inbox (carol's own signature, `orca policy vote`), both orders: 2 signed approvals by 2 keys each; approved and ran; a rejection with bob's token on carol's server recorded as {by:?}"
    );
}

#[test]
fn three_machines_on_a_shared_postgres_store_approve_and_run_one_plan() {
    let server = orca_testkit::postgres::Throwaway::shared().unwrap_or_else(|e| panic!("{e}"));
    let url = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(server.create_database())
        .unwrap();
    let t = Team::new();
    t.policy(TWO_OF_THREE, "admin");
    // Each person works in their own checkout (their own machine), on the one database.
    let checkouts: Vec<(&str, TempDir)> = ["alice", "bob", "carol"]
        .into_iter()
        .map(|who| (who, tempfile::tempdir().unwrap()))
        .collect();
    let on = |who: &str, args: &[&str]| {
        let root = checkouts.iter().find(|(n, _)| *n == who).unwrap().1.path();
        let mut all = vec!["--store", url.as_str()];
        all.extend_from_slice(args);
        crate::common::orca(root, t.home(who), &all)
    };
    for (who, _) in &checkouts {
        assert_eq!(code(&on(who, &["init"])), 0);
    }
    assert_eq!(code(&on("alice", &["store", "migrate"])), 0);
    let doc = checkouts[0].1.path().join("plan.json");
    std::fs::write(&doc, infra_plan()).unwrap();
    let out = on(
        "alice",
        &["plan", "create", "--quiet", doc.to_str().unwrap()],
    );
    assert_eq!(code(&out), 0, "{}", text(&out));
    let plan = stdout(&out).trim().to_owned();
    assert_eq!(
        code(&on("alice", &["plan", "approve", &plan])),
        2,
        "the requester"
    );
    let bob = on("bob", &["plan", "approve", &plan]);
    assert_eq!(code(&bob), 0, "{}", text(&bob));
    assert!(stdout(&bob).contains("1 given (bob)"), "{}", stdout(&bob));
    let carol = on("carol", &["plan", "approve", &plan]);
    assert_eq!(code(&carol), 0, "{}", text(&carol));
    assert!(
        stdout(&carol).contains("the policy is satisfied"),
        "{}",
        stdout(&carol)
    );
    let run = on("alice", &["run", &plan]);
    assert_eq!(code(&run), 0, "{}", text(&run));
    let mut verified = 0;
    for (who, _) in &checkouts {
        let v = on(who, &["audit", "verify", "--all"]);
        assert_eq!(code(&v), 0, "verify as {who}: {}", text(&v));
        verified += usize::from(stdout(&v).contains("2 given (bob, carol); signed by bob (entry"));
    }
    println!(
        "postgres: 3 checkouts, 3 keys, one database: approved by bob + carol, run by alice; verify explained it on {verified} of 3"
    );
    assert_eq!(verified, 3);
}
