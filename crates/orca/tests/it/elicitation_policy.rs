//! MCP elicitation is honest. An approval accepted in an agent host's UI is recorded as the
//! host reported its name, marked unverified (`mcp-elicitation:<name> (unverified client)`),
//! and every place that shows the approval — `plan show` (text and JSON), `audit show`, the
//! web plan page — says it came through an agent host. The user turns the path off with
//! `[approval] mcp_elicitation = false` in their config: the host is then never asked, and the
//! answer tells them to approve with `orca plan approve` or in the web inbox. A project's
//! config cannot turn it back on.
//!
//! `cargo test -p orca --test it elicitation_policy:: -- --nocapture` prints the counts.

use std::sync::atomic::Ordering;

use serde_json::json;

use crate::mcp_support::{Human, Project, ok, simple_plan};
use crate::web_support;

fn text_of(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_through_a_host_is_recorded_and_shown_as_such() {
    let p = Project::new();
    let (host, asked) = p.connect("claude-code", Human::Accepts).await;
    let created = ok(&host, "plan_create", json!({"document": simple_plan()})).await;
    let plan = created["plan_id"].as_str().unwrap().to_owned();
    let answer = ok(&host, "plan_ask_human", json!({"plan": plan})).await;
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(answer["approved"], true, "{answer}");
    host.cancel().await.unwrap();
    let by = "mcp-elicitation:claude-code (unverified client)";
    // A plan approved at the terminal, for contrast.
    let other = p.json(&["plan", "create", "--file", &{
        let f = p.root.join("other.json");
        std::fs::write(&f, simple_plan().to_string()).unwrap();
        f.display().to_string()
    }]);
    let other = other["plan_id"].as_str().unwrap().to_owned();
    assert!(p.orca(&["plan", "approve", &other]).status.success());

    let mut places = 0;
    let mut shown = 0;
    let mut wrongly_shown = 0;
    // plan show, text and JSON.
    let text = text_of(&p.orca(&["plan", "show", &plan]));
    places += 1;
    shown += usize::from(
        text.contains(by) && text.contains("Through:   an agent host (MCP elicitation)"),
    );
    wrongly_shown +=
        usize::from(text_of(&p.orca(&["plan", "show", &other])).contains("agent host"));
    let v = p.json(&["plan", "show", &plan]);
    places += 1;
    shown += usize::from(v["approval"]["by"] == by && v["approved_through_agent_host"] == true);
    wrongly_shown +=
        usize::from(p.json(&["plan", "show", &other])["approved_through_agent_host"] != false);
    // audit show.
    let audit = text_of(&p.orca(&["audit", "show", &plan]));
    places += 1;
    shown += usize::from(audit.contains("through an agent host"));
    wrongly_shown +=
        usize::from(text_of(&p.orca(&["audit", "show", &other])).contains("agent host"));
    // The web plan page.
    let web = web_support::Project {
        dir: tempfile::tempdir().unwrap(),
        root: p.root.clone(),
        home: p.config_home.clone(),
    };
    let token = web.token("me");
    let server = web_support::Server::start(&web, &[]);
    let c = web_support::client();
    let (status, page) = web_support::get(&c, &server.url(&format!("/plans/{plan}")), &token).await;
    assert_eq!(status, 200);
    places += 1;
    shown += usize::from(
        page.contains("an agent host (MCP elicitation)") && page.contains("unverified client"),
    );
    let (_, page) = web_support::get(&c, &server.url(&format!("/plans/{other}")), &token).await;
    wrongly_shown += usize::from(page.contains("agent host"));
    // The approval is signed and verifies like any other.
    assert!(p.orca(&["audit", "verify", "--all"]).status.success());
    println!(
        "approval through an agent host: shown as such in {shown}/{places} places (plan show, plan show --json, audit show, web plan page); terminal approvals shown as through a host: {wrongly_shown}"
    );
    assert_eq!(shown, places);
    assert_eq!(wrongly_shown, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_turns_approvals_through_hosts_off() {
    let p = Project::new();
    let user_config = p.config_home.join("orca/config.toml");
    std::fs::create_dir_all(user_config.parent().unwrap()).unwrap();
    std::fs::write(&user_config, "[approval]\nmcp_elicitation = false\n").unwrap();
    // A project's config cannot turn it back on.
    let project_config = p.root.join(".orca/config.toml");
    let mut text = std::fs::read_to_string(&project_config).unwrap();
    text.push_str("\n[approval]\nmcp_elicitation = true\n");
    std::fs::write(&project_config, text).unwrap();
    // The rest of orca reads the config as before; `config show` shows the setting.
    let shown = text_of(&p.orca(&["config", "show"]));
    assert!(
        shown.contains("approval.mcp_elicitation") && shown.contains("false"),
        "{shown}"
    );
    let (mut approved, mut asked_hosts, mut told, mut tries) = (0, 0, 0, 0);
    for rounds in [false, true] {
        let (host, asked) = if rounds {
            p.connect_rounds("claude-code", Human::Accepts).await
        } else {
            p.connect("claude-code", Human::Accepts).await
        };
        let created = ok(&host, "plan_create", json!({"document": simple_plan()})).await;
        let plan = created["plan_id"].as_str().unwrap().to_owned();
        let answer = ok(&host, "plan_ask_human", json!({"plan": plan})).await;
        tries += 1;
        asked_hosts += asked.load(Ordering::SeqCst);
        approved += usize::from(p.stage(&plan) != "proposal" || answer["approved"] != false);
        let why = answer["why"].as_str().unwrap_or_default();
        if why.contains("mcp_elicitation = false")
            && why.contains("plan approve")
            && why.contains("web inbox")
        {
            told += 1;
        } else {
            eprintln!("{answer}");
        }
        host.cancel().await.unwrap();
    }
    // A bad value is one clear line, and changes nothing.
    std::fs::write(&user_config, "[approval]\nmcp_elicitation = \"no\"\n").unwrap();
    let out = p.orca(&["plan", "list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("approval.mcp_elicitation: must be true or false") && err.lines().count() == 1,
        "{err}"
    );
    println!(
        "approvals through a host with [approval] mcp_elicitation = false: {tries} tried, approved {approved}, hosts asked {asked_hosts}, told how to approve {told}"
    );
    assert_eq!(approved + asked_hosts, 0);
    assert_eq!(told, tries);
}

/// Under a 2-of-{alice, bob, carol} policy an approval accepted in an agent host is exactly one
/// approver's signature: the user running `orca mcp` (bob). The requester's own acceptance in
/// her host is not counted, the plan does not run on one signature, `plan_show` says what it
/// still needs, and it runs once carol signs with her own key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_through_a_host_under_a_policy_is_one_approvers_signature() {
    use crate::common::project::code;
    use crate::mcp_support::{call, text};
    use crate::team_approvals::{TWO_OF_THREE, Team, infra_plan};
    let t = Team::new();
    t.policy(TWO_OF_THREE, "admin");
    // The test host checks the question shows the plan (its step "say hello").
    let mut doc: serde_json::Value = serde_json::from_str(&infra_plan()).unwrap();
    doc["steps"][0]["description"] = json!("say hello");
    let plan = t.propose("alice", &doc.to_string());
    let given = |t: &Team| -> Vec<String> {
        t.plan_log(&plan)
            .iter()
            .filter(|e| e["kind"] == "plan.approval.given")
            .map(|e| e["data"]["signature"]["key"].as_str().unwrap().to_owned())
            .collect()
    };

    // The requester accepts in her host (the newest protocol's rounds): refused, nothing written.
    let alice = Project::sharing(t.project.path(), t.home("alice"));
    let (host, asked) = alice.connect_rounds("claude-code", Human::Accepts).await;
    let refused = call(&host, "plan_ask_human", json!({"plan": plan}))
        .await
        .unwrap();
    let why = text(&refused);
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(refused.is_error, Some(true), "{why}");
    assert!(why.contains("nobody approves their own request"), "{why}");
    host.cancel().await.unwrap();
    let after_requester = given(&t).len();
    assert_eq!(after_requester, 0);

    // bob accepts in his host: one signature, his key's.
    let bob = Project::sharing(t.project.path(), t.home("bob"));
    let (host, asked) = bob.connect("codex", Human::Accepts).await;
    let answer = ok(&host, "plan_ask_human", json!({"plan": plan})).await;
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(answer["approved"], false, "{answer}");
    assert_eq!(answer["recorded"], true, "{answer}");
    let shown = ok(&host, "plan_show", json!({"plan": plan})).await;
    let needs = shown["approval_policy"]["needs"]
        .as_str()
        .unwrap()
        .to_owned();
    // Asking again in the same host is not a second signature.
    let again = call(&host, "plan_ask_human", json!({"plan": plan}))
        .await
        .unwrap();
    host.cancel().await.unwrap();
    assert_eq!(
        needs, "infra: needs 2 of {bob, carol}; 1 given (bob)",
        "{shown}"
    );
    assert_eq!(given(&t), [t.key("bob")]);
    assert_eq!(t.stage(&plan), "proposal");
    assert_eq!(given(&t).len(), 1, "{}", text(&again));

    // One signature does not run.
    let run = t.run("alice", &["run", &plan, "--yes"]);
    let ran_early = code(&run) == 0 || t.stage(&plan) != "proposal";
    assert!(!ran_early, "{}", crate::team_approvals::text(&run));

    // carol signs with her own key at her terminal: approved, and it runs.
    let out = t.run("carol", &["plan", "approve", &plan]);
    assert_eq!(code(&out), 0, "{}", crate::team_approvals::text(&out));
    assert_eq!(t.stage(&plan), "approved");
    let keys = given(&t);
    assert_eq!(keys, [t.key("bob"), t.key("carol")]);
    let run = t.run("alice", &["run", &plan]);
    assert_eq!(code(&run), 0, "{}", crate::team_approvals::text(&run));
    println!(
        "MCP elicitation under 2 of {{alice, bob, carol}}: requester's acceptance counted {after_requester}; bob's host: 1 signature (key {}); plan_show: \"{needs}\"; ran before a second signer: {ran_early}; after carol: {} signatures, ran",
        keys[0],
        keys.len()
    );
}
